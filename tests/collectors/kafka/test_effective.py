"""Effective topic settings: the resolution order as a table, then on snapshots (per-leader and per-controller
levels, unreadable config znodes), and the health flags agreeing with the resolved values."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.health import assess, partition_settings, problem_partitions
from collectors.kafka.effective import (
    ConfigSource,
    EffectiveSetting,
    Level,
    StaticDefaults,
    TopicSettings,
    parse_boolean,
    parse_min_insync_replicas,
    resolve,
)
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, ControllerInfo, ZnodeError
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit

TOPIC, BROKER, CLUSTER = ConfigSource.TOPIC, ConfigSource.BROKER, ConfigSource.CLUSTER_DEFAULT
STATIC, KAFKA, UNKNOWN = ConfigSource.STATIC_DEFAULT, ConfigSource.KAFKA_DEFAULT, ConfigSource.UNKNOWN
NOAUTH = "ZooKeeper refused the read: NoAuth (-102)"

# --- the resolution order ------------------------------------------------------------------------------

# (topic, broker, cluster default, static default) -> (value, source, assumed_from); "X" is unreadable
ORDER: list[tuple[str | None, str | None, str | None, int | None, int, ConfigSource, ConfigSource | None]] = [
    ("3", "2", "2", 2, 3, TOPIC, None),
    (None, "2", "3", 4, 2, BROKER, None),
    (None, None, "3", 4, 3, CLUSTER, None),
    (None, None, None, 4, 4, STATIC, None),
    (None, None, None, None, 1, KAFKA, None),
    ("abc", None, "2", None, 2, CLUSTER, None),  # a malformed value: the broker runs with the next level
    ("0", "-1", None, 2, 2, STATIC, None),
    ("3", "X", "X", None, 3, TOPIC, None),  # a readable topic override decides: nothing below matters
    (None, None, "X", 2, 2, UNKNOWN, STATIC),  # /config/brokers/<default> unreadable: not silently 1
    (None, None, "X", None, 1, UNKNOWN, KAFKA),
    (None, "X", "3", None, 3, UNKNOWN, CLUSTER),
    ("X", "2", None, None, 2, UNKNOWN, BROKER),
]


@pytest.mark.parametrize(("topic", "broker", "default", "static", "value", "source", "assumed"), ORDER)
def test_min_isr_resolution_order(
    topic: str | None,
    broker: str | None,
    default: str | None,
    static: int | None,
    value: int,
    source: ConfigSource,
    assumed: ConfigSource | None,
) -> None:
    levels = [
        Level(s, None, NOAUTH) if raw == "X" else Level(s, raw)
        for s, raw in ((TOPIC, topic), (BROKER, broker), (CLUSTER, default))
    ]

    result = resolve(levels, parse_min_insync_replicas, static, 1)

    assert (result.value, result.source, result.assumed_from) == (value, source, assumed)
    assert (result.reason is not None) == (source is UNKNOWN)


def test_unclean_resolution_reads_booleans_as_kafka_does() -> None:
    def of(*raws: str | None, static: bool | None = None) -> EffectiveSetting[bool]:
        return resolve([Level(TOPIC, raws[0]), Level(CLUSTER, raws[1])], parse_boolean, static, False)

    assert of(" TRUE ", "false") == EffectiveSetting(True, TOPIC)
    assert of(None, "False") == EffectiveSetting(False, CLUSTER)
    assert of("yes", None, static=True) == EffectiveSetting(True, STATIC)
    assert of(None, None) == EffectiveSetting(False, KAFKA)


def test_every_unreadable_level_is_named_once_in_the_reason() -> None:
    levels = [
        Level(TOPIC, None, "a: NoAuth"),
        Level(BROKER, None, "b: NoAuth"),
        Level(CLUSTER, None, "b: NoAuth"),
    ]

    result = resolve(levels, parse_min_insync_replicas, None, 1)

    assert result == EffectiveSetting(1, UNKNOWN, KAFKA, "a: NoAuth; b: NoAuth")


# --- on snapshots ----------------------------------------------------------------------------------------


def with_configs(
    snapshot: ClusterSnapshot, brokers: dict[str, dict[str, str]], errors: tuple[ZnodeError, ...] = ()
) -> ClusterSnapshot:
    return dataclasses.replace(snapshot, broker_configs=brokers, errors=errors)


def test_the_per_broker_level_is_the_leaders_for_min_isr_and_the_controllers_for_unclean() -> None:
    led_by_1 = partition("t", 0, [1, 2, 3], isr=[1, 2])
    led_by_2 = partition("t", 1, [2, 3, 1], isr=[2, 3])
    offline = partition("t", 2, [3, 1, 2], isr=[3], leader=NO_LEADER)
    base = cluster(led_by_1, led_by_2, offline, controller=ControllerInfo(broker_id=2, epoch=1))
    snapshot = with_configs(
        base,
        {
            "1": {"min.insync.replicas": "3"},
            "2": {"unclean.leader.election.enable": "true"},
            "<default>": {"min.insync.replicas": "2"},
        },
    )

    report = assess(snapshot)
    settings_of = {
        p.tp.partition: partition_settings(report, snapshot, p) for p in snapshot.partitions.values()
    }

    assert settings_of[0].min_insync_replicas == EffectiveSetting(3, BROKER)
    assert settings_of[1].min_insync_replicas == EffectiveSetting(2, CLUSTER)
    assert settings_of[2].min_insync_replicas == EffectiveSetting(2, CLUSTER)  # no leader: no broker's level
    assert {s.unclean_leader_election_enable for s in settings_of.values()} == {
        EffectiveSetting(True, BROKER)
    }
    flags = {tp.partition: (h.min_isr, h.under_min_isr, h.at_min_isr) for tp, h in report.partitions.items()}
    assert flags == {0: (3, True, False), 1: (2, False, True), 2: (2, True, False)}
    assert report.summary.under_min_isr == 2
    assert problem_partitions(report)["under_min_isr"] == [led_by_1.tp, offline.tp]


def test_an_unreadable_config_brokers_is_reported_per_partition_not_defaulted() -> None:
    p = partition("t", 0, [1, 2, 3], isr=[1, 2])
    override = partition("own", 0, [1, 2, 3], isr=[1, 2])
    base = cluster(p, override, topic_configs={"own": {"min.insync.replicas": "3"}})
    snapshot = with_configs(base, {}, (ZnodeError("/config/brokers", NOAUTH),))

    report = assess(snapshot, default_min_insync_replicas=2)
    settings = report.settings
    assert settings is not None

    unknown = settings.min_insync_replicas("t", 1)
    assert unknown == EffectiveSetting(2, UNKNOWN, STATIC, f"/config/brokers: {NOAUTH}")
    assert settings.min_insync_replicas("own", 1) == EffectiveSetting(3, TOPIC)
    assert settings.unclean_leader_election_enable("t").source is UNKNOWN
    assert settings.unclean_leader_election_enable("t").assumed_from is KAFKA
    assert settings.unreadable == (ZnodeError("/config/brokers", NOAUTH),)
    assert settings.unknown_counts(snapshot.partitions.values()) == (1, 2)
    assert report.partitions[p.tp].at_min_isr  # the static default given, not Kafka's 1


def test_a_malformed_config_znode_makes_its_level_unknown() -> None:
    p = partition("t", 0, [1, 2, 3])
    snapshot = with_configs(
        cluster(p), {"<default>": {"min.insync.replicas": "2"}}, (ZnodeError("/config/topics/t", "not JSON"),)
    )

    setting = TopicSettings(snapshot).min_insync_replicas("t", 1)

    assert setting == EffectiveSetting(2, UNKNOWN, CLUSTER, "/config/topics/t: not JSON")


def test_an_unreadable_topic_config_above_an_unreadable_default_names_both() -> None:
    p = partition("t", 0, [1, 2, 3])
    errors = (ZnodeError("/config/brokers/<default>", NOAUTH), ZnodeError("/config/topics/t", "not JSON"))
    settings = TopicSettings(with_configs(cluster(p), {}, errors), StaticDefaults(2, None))

    reason = f"/config/topics/t: not JSON; /config/brokers/<default>: {NOAUTH}"
    assert settings.min_insync_replicas("t", 1) == EffectiveSetting(2, UNKNOWN, STATIC, reason)
    assert settings.unclean_leader_election_enable("t") == EffectiveSetting(False, UNKNOWN, KAFKA, reason)
    assert settings.min_insync_replicas("t", 2) is settings.min_insync_replicas("t", 1)  # one object, shared


def test_other_topics_and_non_config_errors_do_not_make_anything_unknown() -> None:
    p = partition("t", 0, [1, 2, 3])
    errors = (ZnodeError("/config/topics/other", "not JSON"), ZnodeError("/brokers/ids/7", "bad"))
    settings = TopicSettings(with_configs(cluster(p), {}, errors), StaticDefaults(2, True))

    assert settings.min_insync_replicas("t", 1) == EffectiveSetting(2, STATIC)
    assert settings.unclean_leader_election_enable("t") == EffectiveSetting(True, STATIC)


# --- the health flags use the resolved values -----------------------------------------------------------


@st.composite
def configured(draw: st.DrawFn) -> ClusterSnapshot:
    values = st.sampled_from([None, "1", "2", "3", "bad"])
    brokers = [1, 2, 3, 4]
    parts = []
    for index in range(draw(st.integers(1, 12))):
        replicas = draw(st.permutations(brokers))[: draw(st.integers(1, 4))]
        isr = replicas[: draw(st.integers(0, len(replicas)))]
        parts.append(partition(draw(st.sampled_from(["a", "b"])), index, replicas, isr=isr))
    topic_configs = {t: {"min.insync.replicas": v} for t in ("a", "b") if (v := draw(values)) is not None}
    broker_configs = {
        str(b): {"min.insync.replicas": v} for b in [*brokers, "<default>"] if (v := draw(values)) is not None
    }
    unreadable = draw(st.sets(st.sampled_from(["/config/brokers", "/config/brokers/1", "/config/topics/a"])))
    snapshot = cluster(*{p.tp: p for p in parts}.values(), topic_configs=topic_configs)
    errors = tuple(ZnodeError(path, NOAUTH) for path in sorted(unreadable))
    return with_configs(snapshot, broker_configs, errors)


@settings(max_examples=200, deadline=None)
@given(snapshot=configured(), static=st.one_of(st.none(), st.integers(1, 3)))
def test_the_flags_use_the_value_the_settings_report(snapshot: ClusterSnapshot, static: int | None) -> None:
    report = assess(snapshot, default_min_insync_replicas=static)
    resolver = TopicSettings(snapshot, StaticDefaults(static))

    walked = report.summary.under_min_isr
    for tp, entry in report.partitions.items():
        info = snapshot.partitions[tp]
        setting = resolver.min_insync_replicas(tp.topic, info.leader)
        assert entry.min_isr == setting.value
        assert partition_settings(report, snapshot, info).min_insync_replicas == setting
    assert walked == sum(e.under_min_isr for e in report.partitions.values())
