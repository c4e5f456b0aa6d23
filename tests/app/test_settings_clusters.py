"""Several clusters in one settings tree: ``[clusters.NAME]``, ``KAFKA_HEALTH_CLUSTERS__NAME__...`` and
``--cluster NAME=ZK[,TEMPLATE]``, each cluster's ZooKeeper section over the shared one, and clear errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from app.cli.common import cluster_overrides, parse_cluster_flag
from app.settings import CONFIG_ENV, Settings, ZooKeeperSettings, load_settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("prod=zk1:2181", ("prod", "zk1:2181", None)),
        ("prod=zk1:2181,zk2:2181/kafka", ("prod", "zk1:2181,zk2:2181/kafka", None)),
        (
            "eu-west_2=zk1:2181,zk2:2181/kafka,http://{host}:7071/metrics",
            ("eu-west_2", "zk1:2181,zk2:2181/kafka", "http://{host}:7071/metrics"),
        ),
    ],
)
def test_a_cluster_flag_splits_at_the_template(flag: str, expected: tuple[str, str, str | None]) -> None:
    assert parse_cluster_flag(flag) == expected


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("zk1:2181", "expected NAME=HOST:PORT"),
        ("=zk1:2181", "expected NAME=HOST:PORT"),
        ("prod=", "expected NAME=HOST:PORT"),
        ("Prod=zk1:2181", "not a cluster name"),
        ("-prod=zk1:2181", "not a cluster name"),
        ("eu__west=zk1:2181", "not a cluster name"),
        ("prod=http://{host}:7071/metrics", "no ZooKeeper before the metrics URL template"),
    ],
)
def test_a_bad_cluster_flag_is_a_clear_error(flag: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_cluster_flag(flag)


def test_clusters_from_a_file_and_the_environment_over_the_shared_zookeeper_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "kafka-health.toml"
    config.write_text(
        "[zookeeper]\nsession_timeout_s = 9\n"
        '[clusters.prod.zookeeper]\nconnect = "zk1:2181/prod"\nconnections = 2\n'
        '[clusters.stage.zookeeper]\nconnect = "zk2:2181/stage"\n'
        '[clusters.stage.metrics]\nurl_template = "http://{host}:9404/metrics"\n'
        '[metrics]\nurl_template = "http://{host}:7071/metrics"\n'
    )
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setenv("KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__CONNECT", "zk9:2181/prod")
    watched = load_settings().watched()
    assert [(w.name, w.connect, w.zookeeper.connections, w.zookeeper.session_timeout_s) for w in watched] == [
        ("prod", "zk9:2181/prod", 2, 9.0),
        ("stage", "zk2:2181/stage", 4, 9.0),
    ]
    assert [w.metrics.url_template if w.metrics else None for w in watched] == [
        "http://{host}:7071/metrics",  # the shared section
        "http://{host}:9404/metrics",  # its own
    ]


def test_without_clusters_the_one_cluster_is_unnamed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__CONNECT", "zk1:2181")
    (only,) = load_settings().watched()
    assert (only.name, only.connect, only.label()) == (None, "zk1:2181", "zk1:2181")


def test_flags_add_and_override_clusters_and_clear_the_single_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__CONNECT", "zk1:2181/prod")
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__SESSION_TIMEOUT_S", "7")
    base = load_settings()
    overrides = cluster_overrides(base, ["prod=zk8:2181/prod", "stage=zk2:2181,http://{host}:1/metrics"])
    settings = Settings.model_validate(base.model_dump() | overrides)
    assert [(w.name, w.connect, w.zookeeper.session_timeout_s) for w in settings.watched()] == [
        ("prod", "zk8:2181/prod", 7.0),
        ("stage", "zk2:2181", 7.0),
    ]
    stage = settings.watched()[1].metrics
    assert stage is not None
    assert stage.url_template == "http://{host}:1/metrics"
    with pytest.raises(ValueError, match="given twice"):
        cluster_overrides(base, ["a=zk:1", "a=zk:2"])


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        (
            {
                "KAFKA_HEALTH_ZOOKEEPER__CONNECT": "zk:1",
                "KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__CONNECT": "zk:2",
            },
            "zookeeper.connect and clusters are both set",
        ),
        ({"KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__CONNECTIONS": "2"}, "clusters.prod: no ZooKeeper"),
        ({"KAFKA_HEALTH_CLUSTERS__BAD.NAME__ZOOKEEPER__CONNECT": "zk:1"}, "not a cluster name"),
        ({"KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__PORT": "1"}, "port"),
    ],
)
def test_bad_cluster_settings_are_clear_errors(
    env: dict[str, str], complaint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=complaint):
        load_settings()


def test_a_dump_validated_again_keeps_the_shared_zookeeper_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What every command does with its flags: the clusters' unset fields stay unset, so the shared
    section still fills them."""
    config = tmp_path / "kafka-health.toml"
    config.write_text(
        '[zookeeper]\nsession_timeout_s = 9\nauth_digest = "kh:secret"\n'
        '[clusters.prod.zookeeper]\nconnect = "zk1:2181/prod"\n'
        '[clusters.stage.zookeeper]\nconnect = "zk2:2181"\nsession_timeout_s = 4\n'
    )
    monkeypatch.setenv(CONFIG_ENV, str(config))
    again = Settings.model_validate(load_settings().model_dump())
    prod, stage = again.watched()
    assert (prod.zookeeper.session_timeout_s, stage.zookeeper.session_timeout_s) == (9.0, 4.0)
    assert prod.zookeeper.auth_digest is not None
    assert prod.zookeeper.auth_digest.get_secret_value() == "kh:secret"


def test_a_clusters_zookeeper_section_overlays_the_shared_one_field_by_field(tmp_path: Path) -> None:
    """Every field of the shared ``[zookeeper]`` section but ``connect`` can be set per cluster: the
    cluster's value wins for that field, and the shared section gives every other."""
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  username="kh" password="secret";\n};\n'
    )
    client_config = tmp_path / "zk-client.properties"
    client_config.write_text("zookeeper.set.acl=false\n")
    own: dict[str, Any] = {
        "connections": 7,
        "session_timeout_s": 3.0,
        "start_timeout_s": 5.0,
        "client_config": client_config,
        "ssl_client_enable": False,
        "ssl_truststore_location": "/etc/kafka/ca.pem",
        "ssl_truststore_type": "PEM",
        "ssl_keystore_location": "/etc/kafka/client.pem",
        "ssl_keystore_type": "PEM",
        "ssl_keystore_password": "keystore-secret",
        "ssl_endpoint_identification_algorithm": "",
        "sasl_jaas_config": str(jaas),
        "sasl_clientconfig": "Client",
        "set_acl": True,
        "auth_digest": "kh:secret",
    }
    shared: dict[str, Any] = {"session_timeout_s": 9.0, "auth_digest": "shared:secret", "set_acl": False}
    assert set(own) == set(ZooKeeperSettings.model_fields) - {"connect"}
    for name, value in own.items():
        settings = Settings.model_validate(
            {"zookeeper": shared, "clusters": {"prod": {"zookeeper": {"connect": "zk1:2181", name: value}}}}
        )
        (prod,) = settings.watched()
        expected = ZooKeeperSettings.model_validate(shared | {"connect": "zk1:2181", name: value})
        assert _plain(prod.zookeeper) == _plain(expected), name


def _plain(settings: ZooKeeperSettings) -> dict[str, Any]:
    return {
        name: value.get_secret_value() if isinstance(value, SecretStr) else value for name, value in settings
    }
