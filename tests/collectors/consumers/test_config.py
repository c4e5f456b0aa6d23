"""The consumer-lag settings, Kafka's client properties (``--command-config``) and where the bootstrap
servers come from (issue 25, item 1)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from collectors.consumers.client import (
    GroupMember,
    bootstrap_servers,
    members_of,
    read_client_config,
    with_ssl_context,
)
from collectors.consumers.config import (
    KafkaSettings,
    ThresholdSettings,
    client_kwargs,
    parse_jaas,
    parse_properties,
)
from collectors.consumers.verdicts import Thresholds
from collectors.kafka.model import BrokerEndpoint, BrokerRegistration, TopicPartition

pytestmark = pytest.mark.unit

SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cr\\"et";'
)


def test_properties_as_java_reads_them() -> None:
    text = (
        "# a comment\n! another\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "client.id kafka-health\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="bob" password="pw";\n'
        "path=C:\\\\kafka\n"
        "\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "kafka-health",
        "sasl.jaas.config": (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="pw";'
        ),
        "path": "C:\\kafka",
    }


def test_the_jaas_line_gives_its_module_and_options() -> None:
    module, options = parse_jaas(SCRAM_JAAS)
    assert module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert options == {"username": "alice", "password": 's3cr"et'}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_scram_maps_to_kafka_python(mechanism: str) -> None:
    kwargs = client_kwargs(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.jaas.config": SCRAM_JAAS}
    )
    assert kwargs == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": 's3cr"et',
    }


def test_plaintext_by_default_and_harmless_keys_ignored() -> None:
    assert client_kwargs({"group.id": "x", "ssl.truststore.location": "/nope"}) == {
        "security_protocol": "PLAINTEXT"
    }


def test_ssl_with_pem_contents_and_no_hostname_check() -> None:
    kwargs = client_kwargs(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": "-----BEGIN CERTIFICATE----- ...",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": "CHAIN",
            "ssl.keystore.key": "KEY",
            "ssl.key.password": "pw",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert kwargs == {
        "security_protocol": "SSL",
        "ssl_pem_cadata": "-----BEGIN CERTIFICATE----- ...",
        "ssl_pem_certificate_chain": "CHAIN",
        "ssl_pem_key": "KEY",
        "ssl_password": "pw",
        "ssl_check_hostname": False,
    }


def test_ssl_with_pem_files() -> None:
    kwargs = client_kwargs(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/etc/kafka/ca.pem",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": "/etc/kafka/client.pem",
        }
    )
    assert kwargs == {
        "security_protocol": "SSL",
        "ssl_cafile": "/etc/kafka/ca.pem",
        "ssl_certfile": "/etc/kafka/client.pem",
        "ssl_keyfile": "/etc/kafka/client.pem",
        "ssl_check_hostname": True,
    }


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"}, "ssl.truststore.type"),
        ({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.type"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_SSL"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": SCRAM_JAAS,
            },
            "sasl.jaas.config",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            },
            "sasl.jaas.config",
        ),
        ({"security.protocol": "SSL", "ssl.keystore.key": "KEY"}, "ssl.keystore.certificate.chain"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "x"}, "ssl.endpoint"),
        ({"security.protocol": "KERBEROS"}, "security.protocol"),
        ({"sasl.login.callback.handler.class": "x"}, "sasl.login.callback.handler.class"),
    ],
)
def test_what_kafka_python_cannot_do_is_a_one_line_error_naming_the_key(
    props: dict[str, str], key: str
) -> None:
    with pytest.raises(ValueError, match=r"^[^\n]+$") as raised:
        client_kwargs(props)
    assert str(raised.value).startswith(key)


def test_a_missing_or_unsupported_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--command-config"):
        read_client_config(tmp_path / "nope.properties")
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SSL\nssl.truststore.certificates=not a certificate\n")
    with pytest.raises(ValueError, match=r"^ssl\.truststore\.certificates: not PEM"):
        read_client_config(path)


def test_pem_contents_become_an_ssl_context(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=broker",
         "-keyout", str(key), "-out", str(cert), "-days", "1"],
        check=True, capture_output=True,
    )  # fmt: skip
    kwargs = with_ssl_context(
        client_kwargs(
            {
                "security.protocol": "SSL",
                "ssl.truststore.certificates": cert.read_text(),
                "ssl.keystore.certificate.chain": cert.read_text(),
                "ssl.keystore.key": key.read_text(),
            }
        )
    )
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname
    assert any(c["subject"] == ((("commonName", "broker"),),) for c in context.get_ca_certs())
    assert not any(k.startswith("ssl_pem") for k in kwargs)


def broker(broker_id: int, *endpoints: tuple[str, str, int]) -> BrokerRegistration:
    return BrokerRegistration(broker_id, tuple(BrokerEndpoint(n, h, p) for n, h, p in endpoints))


def test_bootstrap_from_the_registered_endpoints() -> None:
    brokers = {
        2: broker(2, ("INTERNAL", "b2", 9093), ("PLAINTEXT", "b2", 9092)),
        1: broker(1, ("INTERNAL", "::1", 9093)),
    }
    assert bootstrap_servers(KafkaSettings(), brokers) == ["[::1]:9093", "b2:9092"]
    assert bootstrap_servers(KafkaSettings(listener="internal"), brokers) == ["[::1]:9093", "b2:9093"]
    assert bootstrap_servers(KafkaSettings(bootstrap_servers="k:1,k:2"), brokers) == ["k:1", "k:2"]
    with pytest.raises(ValueError, match=r"no registered broker has listener 'SSL'.*INTERNAL, PLAINTEXT"):
        bootstrap_servers(KafkaSettings(listener="SSL"), brokers)
    with pytest.raises(ValueError, match="--bootstrap-server"):
        bootstrap_servers(KafkaSettings(), {})


@pytest.mark.parametrize(
    "settings",
    [
        {"bootstrap_servers": "host"},
        {"bootstrap_servers": "host:99999"},
        {"listener": "PLAIN TEXT"},
        {"include": ["("]},
        {"groups": {"[": {}}},
        {"thresholds": {"lag_warn_s": 0}},
        {"interval_s": 0},
        {"unknown": 1},
    ],
)
def test_bad_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        KafkaSettings.model_validate(settings)


def test_settings_defaults_and_the_environment_forms() -> None:
    settings = KafkaSettings.model_validate({"include": "a-.*, b", "listener": "internal"})
    assert settings.include == ("a-.*", "b")
    assert settings.listener == "INTERNAL"
    assert settings.interval_s == 10
    assert not settings.exporter_compatible_metrics
    assert settings.thresholds_for("x") == Thresholds()
    assert ThresholdSettings(lag_warn_s=60).over(Thresholds()) == Thresholds(lag_warn_s=60)


class Root(BaseSettings):
    """The settings tree's root as app/settings.py builds it, with the section mounted as ``kafka``."""

    model_config = SettingsConfigDict(env_prefix="KAFKA_HEALTH_", env_nested_delimiter="__", extra="forbid")

    kafka: KafkaSettings = KafkaSettings()


def test_the_section_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__LISTENER", "internal")
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__CLIENT_CONFIG", "/etc/kafka/client.properties")
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__INTERVAL_S", "30")
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__INCLUDE", "app-.*, billing")
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__EXCLUDE", '["app-test"]')
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__EXPORTER_COMPATIBLE_METRICS", "true")
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__THRESHOLDS__LAG_WARN_S", "120")
    monkeypatch.setenv("KAFKA_HEALTH_KAFKA__GROUPS", '{"batch-.*": {"stopped_after_s": 3600}}')
    kafka = Root().kafka
    assert kafka.listener == "INTERNAL"
    assert kafka.bootstrap_servers == "k1:9092,k2:9092"
    assert kafka.client_config == "/etc/kafka/client.properties"
    assert kafka.interval_s == 30
    assert kafka.include == ("app-.*", "billing")
    assert kafka.exclude == ("app-test",)
    assert kafka.exporter_compatible_metrics
    assert kafka.thresholds_for("web") == Thresholds(lag_warn_s=120)
    assert kafka.thresholds_for("batch-7") == Thresholds(lag_warn_s=120, stopped_after_s=3600)
    assert kafka.wants("app-1")
    assert kafka.wants("billing")
    assert not kafka.wants("app-test")
    assert not kafka.wants("other")


def test_members_and_their_assignments_as_kafka_python_describes_them() -> None:
    """``KafkaAdminClient.describe_groups`` gives each member as a dict, its assignment decoded into
    ``{"assigned_partitions": [{"topic", "partitions"}]}`` (or left as bytes it could not decode)."""
    assignment = {"assigned_partitions": [{"topic": "t", "partitions": [2, 0]}], "user_data": ""}
    raw = [
        {"member_id": "m1", "client_id": "c", "client_host": "/10.0.0.1", "member_assignment": assignment},
        {"member_id": "m2", "client_id": "c", "client_host": "/10.0.0.2", "member_assignment": ""},
    ]
    assert members_of(raw) == (
        GroupMember("m1", "c", "/10.0.0.1", (TopicPartition("t", 0), TopicPartition("t", 2))),
        GroupMember("m2", "c", "/10.0.0.2", ()),
    )
