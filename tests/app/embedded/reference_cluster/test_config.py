"""Settings of the reference cluster: topic specs, Kafka's topic-name rule, IBP and what it switches on, and
its own section of the settings sources (the environment, the config file)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.embedded.reference_cluster.config import (
    ReferenceClusterSettings,
    TopicSpec,
    load_reference_cluster_settings,
    parse_version,
    validate_topic_name,
)
from app.validation import format_validation_error

pytestmark = pytest.mark.unit

TOPIC_FORM_MESSAGE = "is not NAME:PARTITIONS:RF (e.g. orders:6:3)"


# --- TopicSpec ---------------------------------------------------------------------------------------


def test_parse_topic_spec() -> None:
    spec = TopicSpec.parse("orders:6:3")

    assert (spec.name, spec.partitions, spec.replication_factor, spec.config) == ("orders", 6, 3, {})


@pytest.mark.parametrize(
    "text",
    ["orders", "orders:6", "orders:6:3:1", "orders:six:3", "orders:6:", "orders:-1:3", "orders:6:3.0", ""],
)
def test_parse_topic_spec_bad_form(text: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(f'topic {text!r} {TOPIC_FORM_MESSAGE}')}$"):
        TopicSpec.parse(text)


@pytest.mark.parametrize("text", ["orders:0:3", "orders:6:0", "orders:6:33"])
def test_parse_topic_spec_out_of_range(text: str) -> None:
    with pytest.raises(ValidationError):
        TopicSpec.parse(text)


def test_topic_spec_is_frozen_and_strict() -> None:
    spec = TopicSpec(name="orders", partitions=1, replication_factor=1)

    with pytest.raises(ValidationError):
        spec.name = "other"
    with pytest.raises(ValidationError):
        TopicSpec.model_validate({"name": "orders", "partitions": 1, "replication_factor": 1, "extra": 1})


# --- topic names (Kafka's org.apache.kafka.common.internals.Topic.validate) --------------------------


@pytest.mark.parametrize("name", ["orders", "a", "my-topic.v2_x", "A" * 249, "__consumer_offsets", "..."])
def test_legal_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "A" * 250, "has space", "slash/name", "colon:name", "tópico", "star*", "tab\tname"],
)
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(ValueError, match="illegal topic name"):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["orders\n", "orders\r\n"])
def test_topic_name_with_trailing_newline_is_illegal(name: str) -> None:
    """Kafka's ``Topic.containsValidPattern`` checks every character; a regex ending in ``$`` also matches
    before a final newline, so the check must anchor at the very end of the string."""
    with pytest.raises(ValueError, match="illegal topic name"):
        validate_topic_name(name)


def test_topic_spec_refuses_an_illegal_name() -> None:
    with pytest.raises(ValidationError, match="illegal topic name"):
        TopicSpec.parse("bad name:1:1")


# --- ReferenceClusterSettings ------------------------------------------------------------------------


def test_replication_factor_above_brokers_is_refused() -> None:
    with pytest.raises(
        ValidationError, match=r"topic 'orders': replication factor 4 larger than available brokers: 3"
    ):
        ReferenceClusterSettings(brokers=3, topics=[TopicSpec.parse("orders:6:4")])


def test_replication_factor_equal_to_brokers_is_fine() -> None:
    settings = ReferenceClusterSettings(brokers=3, topics=[TopicSpec.parse("orders:6:3")])

    assert [t.name for t in settings.topics] == ["orders"]


def test_duplicate_topics_are_refused() -> None:
    topics = [TopicSpec.parse("orders:6:3"), TopicSpec.parse("audit:1:1"), TopicSpec.parse("orders:2:1")]

    with pytest.raises(ValidationError, match="topics given twice: orders"):
        ReferenceClusterSettings(brokers=3, topics=topics)


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(ValidationError):
        ReferenceClusterSettings.model_validate({"brokers": 3, "broker_count": 3})


def test_racks_are_given_in_turn() -> None:
    settings = ReferenceClusterSettings(brokers=5, racks=["r1", "r2"])

    assert [settings.rack_of(b) for b in range(5)] == ["r1", "r2", "r1", "r2", "r1"]
    assert ReferenceClusterSettings().rack_of(0) is None


# --- inter.broker.protocol.version -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2.8", (2, 8)), ("2.8-IV1", (2, 8)), ("3.9.0", (3, 9)), ("2.0", (2, 0)), ("3.4-IV0", (3, 4))],
)
def test_parse_version(text: str, expected: tuple[int, int]) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["", "three", "3", "v3.9", "-2.8"])
def test_parse_version_bad_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not MAJOR\.MINOR"):
        parse_version(text)


@pytest.mark.parametrize("text", ["1.1", "0.10.2", "4.0", "10.0"])
def test_parse_version_outside_zookeeper_mode(text: str) -> None:
    with pytest.raises(ValueError, match=r"ZooKeeper mode is Kafka 2\.0-3\.9"):
        parse_version(text)


def test_settings_refuse_a_bad_ibp() -> None:
    with pytest.raises(ValidationError, match="ZooKeeper mode"):
        ReferenceClusterSettings(inter_broker_protocol_version="4.0")


@pytest.mark.parametrize(
    ("ibp", "alter_partition", "topic_znode_version", "leader_recovery"),
    [
        ("2.0", False, 1, False),
        ("2.3", False, 1, False),
        ("2.4", False, 2, False),
        ("2.6", False, 2, False),
        ("2.7", True, 2, False),
        ("2.8", True, 3, False),
        ("3.1", True, 3, False),
        ("3.2", True, 3, True),
        ("3.9", True, 3, True),
    ],
)
def test_ibp_derived_flags(
    ibp: str, alter_partition: bool, topic_znode_version: int, leader_recovery: bool
) -> None:
    settings = ReferenceClusterSettings(inter_broker_protocol_version=ibp)

    assert settings.alter_partition_enabled is alter_partition
    assert settings.topic_znode_version == topic_znode_version
    assert settings.leader_recovery_supported is leader_recovery


@pytest.mark.parametrize(
    ("ibp", "alter_partition"), [("2.7-IV0", False), ("2.7-IV1", False), ("2.7-IV2", True)]
)
def test_alter_partition_needs_ibp_2_7_iv2(ibp: str, alter_partition: bool) -> None:
    """Kafka's ``MetadataVersion.isAlterPartitionSupported`` is ``isAtLeast(IBP_2_7_IV2)``: brokers on
    2.7-IV0 and 2.7-IV1 still write ISR changes to ZooKeeper themselves (docs/kafka-reference.md §1,
    ``/isr_change_notification``: "written by brokers before IBP 2.7-IV2")."""
    settings = ReferenceClusterSettings(inter_broker_protocol_version=ibp)

    assert settings.alter_partition_enabled is alter_partition


def test_defaults_are_kafkas() -> None:
    settings = ReferenceClusterSettings()

    assert settings.replica_lag_time_max_ms == 30_000
    assert settings.leader_imbalance_check_interval_seconds == 300.0
    assert settings.leader_imbalance_per_broker_percentage == 10
    assert settings.unclean_leader_election_enable is False
    assert settings.auto_leader_rebalance_enable is True
    assert settings.min_insync_replicas == 1
    assert settings.zookeeper_session_timeout_ms == 18_000


# --- its own section of the settings sources ---------------------------------------------------------


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_the_section_comes_from_the_environment_over_the_config_file(
    tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "kafka-health.toml"
    config.write_text(
        "[reference_cluster]\nbrokers = 5\nracks = ['r1', 'r2']\n[reference_cluster.traffic]\ncpu_cores = 4\n"
        # the product's sections are not the simulator's: not read here, even when they are bad
        "[zookeeper]\nconnections = 0\n[service]\nprot = 1\n"
    )
    clean_environment.setenv("KAFKA_HEALTH_CONFIG", str(config))
    clean_environment.setenv("KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERS", "6")
    clean_environment.setenv("KAFKA_HEALTH_REFERENCE_CLUSTER__TRAFFIC__MESSAGE_BYTES", "10")

    settings = load_reference_cluster_settings()

    assert (settings.brokers, settings.racks) == (6, ["r1", "r2"])
    assert (settings.traffic.cpu_cores, settings.traffic.message_bytes) == (4, 10)


def test_defaults_without_a_config_file(clean_environment: pytest.MonkeyPatch) -> None:
    assert load_reference_cluster_settings() == ReferenceClusterSettings()


@pytest.mark.parametrize(
    ("text", "env", "complaint"),
    [
        ("[reference_cluster]\nbrokerz = 3\n", {}, "reference_cluster.brokerz: Extra inputs are not"),
        ("", {"KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERZ": "3"}, "reference_cluster.brokerz: Extra inputs"),
        ("", {"KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERS": "0"}, "reference_cluster.brokers: Input should be"),
        ("[reference_clusterz]\nbrokers = 3\n", {}, "reference_clusterz: Extra inputs are not permitted"),
    ],
)
def test_a_bad_key_or_section_is_an_error_naming_it(
    text: str,
    env: dict[str, str],
    complaint: str,
    tmp_path: Path,
    clean_environment: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "kafka-health.toml"
    config.write_text(text)
    clean_environment.setenv("KAFKA_HEALTH_CONFIG", str(config))
    for name, value in env.items():
        clean_environment.setenv(name, value)

    with pytest.raises(ValidationError) as raised:
        load_reference_cluster_settings()

    assert complaint in format_validation_error(raised.value)


def test_a_missing_config_file_is_an_error(tmp_path: Path, clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("KAFKA_HEALTH_CONFIG", str(tmp_path / "missing.toml"))

    with pytest.raises(ValueError, match="no such file"):
        load_reference_cluster_settings()
