"""The one settings tree: defaults, a TOML config file (KAFKA_HEALTH_CONFIG), environment variables and
flags, in that order of precedence, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import CONFIG_ENV, load_settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()
    assert settings.zookeeper.connect is None
    assert settings.analytics.window_s == 30.0
    assert settings.service.port == 8080


def test_a_config_file_then_the_environment_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "kafka-health.toml"
    config.write_text(
        '[zookeeper]\nconnect = "zk1:2181/kafka"\nconnections = 2\n'
        "[service]\nport = 9000\n"
        "[analytics.rules]\nopen_after = 5\n"
    )
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__PORT", "9100")
    settings = load_settings()
    assert settings.zookeeper.connect == "zk1:2181/kafka"
    assert settings.zookeeper.connections == 2
    assert settings.analytics.rules.open_after == 5
    assert settings.service.port == 9100, "the environment wins over the file"
    flagged = load_settings(service={"port": 9200})
    assert flagged.service.port == 9200, "flags win over both"


def test_a_bad_config_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "missing.toml"))
    with pytest.raises(ValueError, match="no such file"):
        load_settings()
    broken = tmp_path / "broken.toml"
    broken.write_text("[zookeeper\n")
    monkeypatch.setenv(CONFIG_ENV, str(broken))
    with pytest.raises(ValueError, match="not a readable TOML file"):
        load_settings()
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[service]\nprot = 1\n")
    monkeypatch.setenv(CONFIG_ENV, str(unknown))
    with pytest.raises(ValidationError, match="prot"):
        load_settings()


def test_the_simulators_section_is_left_to_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[reference_cluster]`` and ``KAFKA_HEALTH_REFERENCE_CLUSTER__*`` are the simulator's (read by
    ``kafka-health reference-cluster``, app.embedded.reference_cluster.config): the product's tree
    neither holds nor checks them, and a section that is nobody's is still an error."""
    config = tmp_path / "kafka-health.toml"
    config.write_text('[zookeeper]\nconnect = "zk1:2181"\n[reference_cluster]\nbrokerz = 3\n')
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setenv("KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERS", "x")
    settings = load_settings()
    assert settings.zookeeper.connect == "zk1:2181"
    assert "reference_cluster" not in settings.model_dump()
    config.write_text("[reference_clusterz]\nbrokers = 3\n")
    with pytest.raises(ValidationError, match="reference_clusterz"):
        load_settings()


def test_zookeeper_security_from_a_kafka_style_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    client_config = tmp_path / "zk-client.properties"
    client_config.write_text(f"zookeeper.ssl.client.enable=true\nzookeeper.ssl.truststore.location={ca}\n")
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__CLIENT_CONFIG", str(client_config))
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__AUTH_DIGEST", "ops:ops-secret")
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__SET_ACL", "true")
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__SSL_ENDPOINT_IDENTIFICATION_ALGORITHM", "")
    security = load_settings().zookeeper.security()
    assert security.tls is not None
    assert security.tls.ca == str(ca)
    assert security.tls.check_hostname is False, "the field wins over the file (and Kafka's HTTPS default)"
    assert security.digest == "ops:ops-secret"
    assert security.set_acl is True
    assert security.sasl is None
    assert "ops-secret" not in repr(load_settings().zookeeper)
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__SSL_TRUSTSTORE_LOCATION", "/nope/ca.jks")
    with pytest.raises(ValidationError, match=r"zookeeper.*a JKS store; only PEM is supported"):
        load_settings()
