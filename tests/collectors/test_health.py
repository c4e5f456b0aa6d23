"""The health model over hand-built snapshots: one test per signal, then properties over random clusters.

``cluster()`` and ``partition()`` (tests.support.snapshots) build snapshots the way ZooKeeper shows them
(docs/kafka-reference.md §1, §3); ``partition()`` defaults to a healthy partition (ISR = AR, leader = AR[0])
so each test states only what is wrong with it.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import health
from collectors.health import (
    BrokerImbalance,
    ControllerHealth,
    HealthReport,
    PartitionHealth,
    SuspectBroker,
    UrpCrossCheck,
    assess,
)
from collectors.kafka.effective import parse_min_insync_replicas
from collectors.kafka.model import (
    NO_LEADER,
    ClusterSnapshot,
    ControllerInfo,
    PartitionInfo,
    ReplicaAssignment,
    TopicPartition,
)
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit

# --- builders ----------------------------------------------------------------------------------------


def only(report: HealthReport) -> PartitionHealth:
    (entry,) = report.partitions.values()
    return entry


def min_isr(value: str) -> dict[str, dict[str, str]]:
    return {"t": {"min.insync.replicas": value}}


# --- a healthy cluster -------------------------------------------------------------------------------


def test_healthy_partition_raises_nothing() -> None:
    report = assess(cluster(partition("t", 0, [1, 2, 3])))

    assert only(report) == PartitionHealth(
        tp=TopicPartition("t", 0),
        min_isr=1,
        under_replicated=False,
        under_min_isr=False,
        at_min_isr=False,
        offline=False,
        preferred_leader=True,
        recovering=False,
    )
    assert report.summary == health.HealthSummary(
        brokers=3,
        topics=1,
        partitions=1,
        under_replicated=0,
        under_min_isr=0,
        at_min_isr=0,
        offline=0,
        preferred_replica_imbalance=0,
        brokers_down=(),
    )
    assert report.suspects == ()
    assert report.brokers_down == ()
    assert report.urp_cross_check is None


# --- under-replicated --------------------------------------------------------------------------------


def test_isr_smaller_than_replicas_is_under_replicated() -> None:
    report = assess(cluster(partition("t", 0, [1, 2, 3], isr=[1, 2])))

    assert only(report).under_replicated
    assert report.summary.under_replicated == 1


def test_replicas_being_added_by_a_reassignment_do_not_count() -> None:
    moving = ReplicaAssignment.for_reassignment(origin=(1, 2, 3), target=(4, 5, 6))
    assert moving.replicas == (4, 5, 6, 1, 2, 3)

    copying = assess(cluster(partition("t", 0, moving, isr=[1, 2, 3], leader=1), brokers=range(1, 7)))
    origin_lost_one = assess(cluster(partition("t", 0, moving, isr=[1, 2], leader=1), brokers=range(1, 7)))

    assert not only(copying).under_replicated
    assert only(origin_lost_one).under_replicated
    assert origin_lost_one.suspects == (SuspectBroker(3, 1, 1.0),)  # not 4, 5, 6: they are still copying


def test_adding_replicas_that_joined_the_isr_are_fine() -> None:
    growing = ReplicaAssignment.for_reassignment(origin=(1, 2), target=(1, 2, 3))

    report = assess(cluster(partition("t", 0, growing, isr=[1, 2, 3])))

    assert only(report).under_replicated is False
    assert report.summary.under_replicated == 0


def test_a_partition_without_state_is_offline_but_not_under_replicated() -> None:
    report = assess(cluster(partition("t", 0, [1, 2, 3], with_state=False)))

    entry = only(report)
    assert entry.offline
    assert (entry.under_replicated, entry.under_min_isr, entry.at_min_isr) == (False, False, False)
    assert not entry.preferred_leader
    assert report.summary.preferred_replica_imbalance == 0


def test_a_partition_whose_state_cannot_be_read_is_unknown_not_offline() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], state_error="invalid JSON: Expecting value"),
        partition("t", 1, [1, 2, 3], with_state=False),
        partition("t", 2, [2, 3, 1]),
    )
    report = assess(snapshot, urp_gauges={1: 0.0, 2: 0.0, 3: 0.0})

    unknown = report.partitions[TopicPartition("t", 0)]
    assert unknown.state_unknown
    assert (unknown.offline, unknown.under_replicated, unknown.under_min_isr, unknown.at_min_isr) == (
        False,
        False,
        False,
        False,
    )
    assert not report.partitions[TopicPartition("t", 1)].state_unknown
    summary = report.summary
    assert (summary.unknown, summary.offline, summary.under_replicated) == (1, 1, 0)
    assert summary.preferred_replica_imbalance == 0
    problems = health.problem_partitions(report)
    assert problems["unknown"] == [TopicPartition("t", 0)]
    assert TopicPartition("t", 0) not in problems["offline"]
    # the generic path (a report whose partitions are a plain mapping) agrees
    plain = dataclasses.replace(report, partitions=dict(report.partitions))
    assert health.problem_partitions(plain) == problems


# --- min ISR -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("isr", "under", "at"),
    [([1, 2, 3], False, False), ([1, 2], False, True), ([1], True, False)],
)
def test_min_isr_from_topic_config(isr: list[int], under: bool, at: bool) -> None:
    report = assess(cluster(partition("t", 0, [1, 2, 3], isr=isr), topic_configs=min_isr("2")))

    entry = only(report)
    assert (entry.min_isr, entry.under_min_isr, entry.at_min_isr) == (2, under, at)
    assert (report.summary.under_min_isr, report.summary.at_min_isr) == (int(under), int(at))


def test_min_isr_falls_back_to_the_broker_default_then_to_the_given_default() -> None:
    p = partition("t", 0, [1, 2, 3], isr=[1, 2])

    from_broker_default = assess(cluster(p, broker_default={"min.insync.replicas": "2"}))
    from_given_default = assess(cluster(p), default_min_insync_replicas=3)
    topic_wins = assess(
        cluster(p, topic_configs=min_isr("1"), broker_default={"min.insync.replicas": "3"}),
        default_min_insync_replicas=3,
    )

    assert (only(from_broker_default).min_isr, only(from_broker_default).at_min_isr) == (2, True)
    assert (only(from_given_default).min_isr, only(from_given_default).under_min_isr) == (3, True)
    assert only(topic_wins).min_isr == 1


def test_malformed_min_isr_falls_back_to_the_next_default() -> None:
    p = partition("t", 0, [1, 2, 3])

    bad_topic = cluster(p, topic_configs=min_isr("abc"), broker_default={"min.insync.replicas": "2"})
    bad_both = cluster(p, topic_configs=min_isr("abc"), broker_default={"min.insync.replicas": "0"})

    assert health.min_insync_replicas(bad_topic, "t", 1) == 2
    assert health.min_insync_replicas(bad_both, "t", 3) == 3
    assert only(assess(bad_topic)).min_isr == 2
    assert only(assess(bad_both, default_min_insync_replicas=3)).min_isr == 3
    assert health.min_insync_replicas(bad_both, "no-such-topic", 4) == 4


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("2", 2),
        (" 2 ", 2),
        ("+3", 3),
        ("2147483647", 2**31 - 1),
        ("abc", None),
        ("", None),
        ("0", None),
        ("-1", None),
        ("2.0", None),
        ("2_0", None),
        ("٢", None),
        ("2147483648", None),
        (None, None),
    ],
)
def test_min_isr_values_are_read_as_the_broker_reads_them(value: str | None, parsed: int | None) -> None:
    assert parse_min_insync_replicas(value) == parsed


@pytest.mark.parametrize(
    ("replicas", "isr", "under", "at"),
    [
        ([1, 2], [1, 2], False, True),  # min.insync.replicas 3 > RF 2: the floor is 2
        ([1, 2], [1], True, False),
        ([1], [1], False, True),
    ],
)
def test_min_isr_is_capped_by_the_replication_factor(
    replicas: list[int], isr: list[int], under: bool, at: bool
) -> None:
    entry = only(assess(cluster(partition("t", 0, replicas, isr=isr), topic_configs=min_isr("3"))))

    assert (entry.min_isr, entry.under_min_isr, entry.at_min_isr) == (3, under, at)


def test_min_isr_cap_counts_replicas_being_added_as_kafka_does() -> None:
    """Kafka's effectiveMinIsr = min(min.insync.replicas, all assigned replicas): while 3 and 4 are
    still copying, ISR [1, 2] is below min ISR 3 and acks=all producers fail - though not under-replicated."""
    moving = ReplicaAssignment.for_reassignment(origin=(1, 2), target=(3, 4))
    p = partition("t", 0, moving, isr=[1, 2], leader=1)

    entry = only(assess(cluster(p, brokers=[1, 2, 3, 4], topic_configs=min_isr("3"))))

    assert (entry.under_replicated, entry.under_min_isr, entry.at_min_isr) == (False, True, False)


def test_under_min_isr_is_also_under_replicated() -> None:
    entry = only(assess(cluster(partition("t", 0, [1, 2, 3], isr=[1]), topic_configs=min_isr("2"))))

    assert entry.under_min_isr
    assert entry.under_replicated


# --- offline -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p",
    [
        pytest.param(partition("t", 0, [1, 2, 3], with_state=False), id="no-state"),
        pytest.param(partition("t", 0, [3, 4], isr=[4], leader=NO_LEADER), id="leader-minus-one"),
        pytest.param(partition("t", 0, [4, 1], isr=[4, 1], leader=4), id="leader-not-registered"),
    ],
)
def test_offline_partitions(p: PartitionInfo) -> None:
    report = assess(cluster(p))

    assert only(report).offline
    assert report.summary.offline == 1


def test_the_usual_offline_state_after_failover() -> None:
    """``{"leader":-1,"isr":[<dead>]}``: the last replica died and stays alone in the ISR."""
    report = assess(cluster(partition("t", 0, [4, 5], isr=[4], leader=NO_LEADER), brokers=[1, 2, 3]))

    entry = only(report)
    assert (entry.offline, entry.under_replicated, entry.preferred_leader) == (True, True, False)
    assert report.brokers_down == (4, 5)
    assert report.summary.preferred_replica_imbalance == 1  # Kafka counts leader -1 as not preferred


def test_recovering_after_an_unclean_election() -> None:
    entry = only(assess(cluster(partition("t", 0, [1, 2, 3], isr=[2], leader=2, recovering=True))))

    assert entry.recovering
    assert not entry.offline


# --- preferred leaders and imbalance -----------------------------------------------------------------


def preferred_by_1(partitions: int, led_by_2: int, topic: str = "t") -> list[PartitionInfo]:
    return [partition(topic, i, [1, 2, 3], leader=2 if i < led_by_2 else 1) for i in range(partitions)]


def test_non_preferred_leader() -> None:
    report = assess(cluster(partition("t", 0, [1, 2, 3], leader=2)))

    assert only(report).preferred_leader is False
    assert report.summary.preferred_replica_imbalance == 1


@pytest.mark.parametrize(
    ("partitions", "led_by_2", "above"),
    [(10, 1, False), (10, 2, True), (9, 1, True), (100, 10, False), (100, 11, True), (10, 0, False)],
)
def test_imbalance_threshold_is_strict(partitions: int, led_by_2: int, above: bool) -> None:
    report = assess(cluster(*preferred_by_1(partitions, led_by_2)))

    assert report.imbalance[1] == BrokerImbalance(1, partitions, led_by_2, led_by_2 / partitions, above)


def test_imbalance_threshold_is_configurable() -> None:
    snapshot = cluster(*preferred_by_1(10, 1))

    assert assess(snapshot, leader_imbalance_per_broker_percentage=0).imbalance[1].above_threshold
    assert not assess(snapshot, leader_imbalance_per_broker_percentage=50).imbalance[1].above_threshold


def test_every_registered_broker_has_an_imbalance_entry() -> None:
    report = assess(cluster(*preferred_by_1(4, 1)))

    assert sorted(report.imbalance) == [1, 2, 3]
    assert report.imbalance[2] == BrokerImbalance(2, 0, 0, 0.0, False)


def test_imbalance_counts_partitions_with_state_and_skips_topics_being_deleted() -> None:
    snapshot = cluster(
        *preferred_by_1(10, 1),
        *preferred_by_1(10, 10, topic="doomed"),
        partition("new", 0, [1, 2, 3], with_state=False),
        deleting=["doomed"],
    )

    report = assess(snapshot)

    assert report.imbalance[1] == BrokerImbalance(1, 10, 1, 0.1, False)
    assert report.imbalance == health.imbalance(
        snapshot.partitions.values(), brokers=snapshot.brokers, excluded_topics={"doomed"}
    )
    assert report.summary.preferred_replica_imbalance == 11


# --- brokers down ------------------------------------------------------------------------------------


def test_brokers_down_hold_replicas_but_are_not_registered() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 4], isr=[1, 2]),
        partition("t", 1, [5, 1], isr=[1], leader=1),
        brokers=[1, 2, 3],
    )

    report = assess(snapshot)

    assert report.brokers_down == (4, 5)
    assert report.summary.brokers_down == (4, 5)
    assert health.brokers_down(snapshot) == (4, 5)
    assert 3 not in report.brokers_down  # registered, holds nothing: not down


# --- controller --------------------------------------------------------------------------------------


def test_no_controller() -> None:
    report = assess(cluster(controller=ControllerInfo()))

    assert report.controller == ControllerHealth(None, None, active=False, changed=False)


def test_controller_on_a_broker_that_is_not_registered_is_not_active() -> None:
    assert assess(cluster(controller=ControllerInfo(9, 5))).controller.active is False


@pytest.mark.parametrize(
    ("before", "now", "changed"),
    [
        (ControllerInfo(1, 5), ControllerInfo(1, 5), False),
        (ControllerInfo(1, 5), ControllerInfo(2, 6), True),
        (ControllerInfo(1, 5), ControllerInfo(1, 6), True),  # same broker, re-elected
        (ControllerInfo(1, 5), ControllerInfo(), True),
        (ControllerInfo(), ControllerInfo(), False),
    ],
)
def test_controller_change(before: ControllerInfo, now: ControllerInfo, changed: bool) -> None:
    report = assess(cluster(controller=now), previous=cluster(controller=before))

    assert report.controller.changed is changed
    assert (report.controller.broker_id, report.controller.epoch) == (now.broker_id, now.epoch)


def test_no_previous_snapshot_means_no_change() -> None:
    assert assess(cluster(controller=ControllerInfo(2, 7))).controller == ControllerHealth(2, 7, True, False)


# --- suspects (docs/kafka-reference.md §3) ------------------------------------------------------------------


def test_every_urp_missing_the_same_broker_makes_it_the_suspect() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], isr=[1, 3]),
        partition("t", 1, [2, 3, 1], isr=[3, 1]),
        partition("t", 2, [3, 1, 2], isr=[3, 1]),
        partition("u", 0, [2, 1], isr=[1], leader=1),
        partition("u", 1, [1, 3], isr=[1, 3]),
    )

    report = assess(snapshot)

    assert report.suspects == (SuspectBroker(2, 4, 1.0),)


def test_suspects_are_ranked_and_all_listed() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], isr=[1, 3]),
        partition("t", 1, [1, 2, 3], isr=[1, 3]),
        partition("t", 2, [1, 2, 3], isr=[1, 2]),
        partition("t", 3, [1, 2, 3], isr=[1]),
    )

    assert assess(snapshot).suspects == (
        SuspectBroker(2, 3, 0.75),
        SuspectBroker(3, 2, 0.5),
    )


# --- URP gauges against ZooKeeper --------------------------------------------------------------------


def test_gauges_agree_with_zookeeper() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], isr=[1, 3]),
        partition("t", 1, [2, 3, 1], isr=[3, 1], leader=3),
        partition("t", 2, [3, 1, 2], isr=[3, 1, 2]),
    )

    check = assess(snapshot, urp_gauges={1: 1.0, 2: 0.0, 3: 1.0}).urp_cross_check

    assert check == UrpCrossCheck(
        zookeeper=2, gauges=2, reporting=(1, 2, 3), missing=(), agrees=True, offline_not_counted=0
    )


@pytest.mark.parametrize("gauges", [{1: 1.0, 3: 1.0}, {1: 1.0, 2: math.nan, 3: 1.0}])
def test_a_broker_without_a_gauge_breaks_agreement(gauges: dict[int, float]) -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3], isr=[1, 3]), partition("t", 1, [3, 1, 2], isr=[3, 1]))

    check = assess(snapshot, urp_gauges=gauges).urp_cross_check

    assert check is not None
    assert (check.zookeeper, check.gauges, check.reporting, check.missing) == (2, 2, (1, 3), (2,))
    assert not check.agrees


def test_gauges_that_disagree() -> None:
    check = assess(cluster(partition("t", 0, [1, 2], isr=[1])), urp_gauges={1: 0, 2: 0, 3: 0}).urp_cross_check

    assert check is not None
    assert (check.zookeeper, check.gauges, check.agrees) == (1, 0, False)


def test_seed_004_offline_broker_partition_count_equals_the_others_urp_sum() -> None:
    """Broker 3 is down: every partition it holds is under-replicated and led by 1 or 2, whose gauges add
    up to broker 3's partition count. A partition whose replicas are all down has no leader to count it."""
    on_3 = [
        partition("t", 0, [1, 3], isr=[1]),
        partition("t", 1, [3, 2], isr=[2], leader=2),
        partition("t", 2, [2, 3, 1], isr=[2, 1]),
        partition("t", 3, [3, 1, 2], isr=[1, 2], leader=1),
    ]
    elsewhere = [partition("t", 4, [1, 2]), partition("t", 5, [2, 1])]
    all_dead = partition("t", 6, [3, 4], isr=[4], leader=NO_LEADER)

    report = assess(cluster(*on_3, *elsewhere, all_dead, brokers=[1, 2]), urp_gauges={1: 2, 2: 2})

    assert report.urp_cross_check == UrpCrossCheck(
        zookeeper=len(on_3),
        gauges=len(on_3),
        reporting=(1, 2),
        missing=(),
        agrees=True,
        offline_not_counted=1,
    )
    assert report.summary.under_replicated == len(on_3) + 1
    assert report.suspects[0] == SuspectBroker(3, 5, 1.0)
    assert report.brokers_down == (3, 4)


# --- the report's partition map ----------------------------------------------------------------------


def test_partition_map_is_a_mapping_in_snapshot_order() -> None:
    partitions = [partition("b", 1, [1, 2]), partition("a", 0, [2, 1], isr=[2])]
    snapshot = cluster(*partitions)

    report = assess(snapshot)

    assert list(report.partitions) == [TopicPartition("b", 1), TopicPartition("a", 0)]
    assert len(report.partitions) == 2
    assert TopicPartition("a", 0) in report.partitions
    assert TopicPartition("a", 9) not in report.partitions
    assert report.partitions[TopicPartition("a", 0)] is report.partitions[TopicPartition("a", 0)]
    assert report.partitions.get(TopicPartition("a", 9)) is None
    live = frozenset(snapshot.brokers)
    assert dict(report.partitions) == {p.tp: health.partition_health(p, 1, live) for p in partitions}


def test_topics_without_partitions_still_count() -> None:
    report = assess(cluster(partition("t", 0, [1]), topic_configs={"empty": {}}))

    assert report.summary.topics == 2


# --- properties --------------------------------------------------------------------------------------

BROKER_IDS = range(6)
MIN_ISR_VALUES = st.sampled_from(["1", "2", "3", "4", "abc", "", "0"])


@st.composite
def partition_infos(draw: st.DrawFn, topic: str, index: int) -> PartitionInfo:
    replicas = tuple(draw(st.lists(st.sampled_from(BROKER_IDS), min_size=1, max_size=4, unique=True)))
    adding = tuple(r for r in replicas[1:] if draw(st.booleans())) if draw(st.booleans()) else ()
    kind = draw(st.integers(0, 7))
    if kind <= 1:  # no state znode yet
        return partition(topic, index, replicas, adding=adding, with_state=False)
    if kind == 2:  # a state znode that cannot be read
        return partition(topic, index, replicas, adding=adding, state_error="invalid JSON")
    isr = tuple(r for r in replicas if draw(st.booleans()))
    leader = draw(st.sampled_from([*isr, NO_LEADER, *replicas]))
    recovering = draw(st.booleans())
    return partition(
        topic, index, replicas, isr, leader, adding=adding, leader_epoch=0, recovering=recovering
    )


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    partitions = [
        draw(partition_infos(topic, index))
        for topic in ("a", "b", "c")
        for index in range(draw(st.integers(0, 6)))
    ]
    configs = {
        t: {"min.insync.replicas": draw(MIN_ISR_VALUES)} for t in ("a", "b", "c") if draw(st.booleans())
    }
    default = draw(st.none() | MIN_ISR_VALUES.map(lambda v: {"min.insync.replicas": v}))
    registered = draw(st.sets(st.sampled_from(BROKER_IDS)))
    controller = ControllerInfo(draw(st.none() | st.sampled_from(BROKER_IDS)), draw(st.integers(0, 3)))
    deleting = [t for t in ("a", "b") if draw(st.booleans())]
    return cluster(
        *partitions,
        brokers=registered,
        controller=controller,
        topic_configs=configs,
        broker_default=default,
        deleting=deleting,
    )


@settings(max_examples=300, deadline=None)
@given(
    snapshot=snapshots(),
    default_min_isr=st.integers(1, 4),
    gauges=st.dictionaries(st.sampled_from(BROKER_IDS), st.integers(0, 5).map(float)),
)
def test_summary_counts_equal_the_partition_flags(
    snapshot: ClusterSnapshot, default_min_isr: int, gauges: dict[int, float]
) -> None:
    report = assess(snapshot, urp_gauges=gauges, default_min_insync_replicas=default_min_isr)

    entries = list(report.partitions.values())
    stated = [e for e, p in zip(entries, snapshot.partitions.values(), strict=True) if p.state is not None]
    summary = report.summary
    assert summary.partitions == len(snapshot.partitions)
    assert summary.under_replicated == sum(e.under_replicated for e in entries)
    assert summary.under_min_isr == sum(e.under_min_isr for e in entries)
    assert summary.at_min_isr == sum(e.at_min_isr for e in entries)
    assert summary.offline == sum(e.offline for e in entries)
    assert summary.unknown == sum(e.state_unknown for e in entries)
    for e in entries:
        if e.state_unknown:  # nothing else is known of it
            flags = (e.offline, e.under_replicated, e.under_min_isr, e.at_min_isr, e.recovering)
            assert flags == (False,) * 5
    assert summary.preferred_replica_imbalance == sum(not e.preferred_leader for e in stated)
    check = report.urp_cross_check
    assert check is not None
    assert check.zookeeper == sum(e.under_replicated and not e.offline for e in entries)
    assert check.zookeeper + check.offline_not_counted == summary.under_replicated
    assert report.brokers_down == health.brokers_down(snapshot)
    deleting = {t.name for t in snapshot.topics.values() if t.marked_for_deletion}
    assert report.imbalance == health.imbalance(
        snapshot.partitions.values(), brokers=snapshot.brokers, excluded_topics=deleting
    )
    for entry in entries:
        expected = health.min_insync_replicas(snapshot, entry.tp.topic, default_min_isr)
        assert entry.min_isr == expected
        assert not (entry.under_min_isr and entry.at_min_isr)
    for suspect in report.suspects:
        assert 0 < suspect.share <= 1.0


@settings(max_examples=300, deadline=None)
@given(snapshot=snapshots(), default_min_isr=st.integers(1, 4))
def test_under_min_isr_implies_under_replicated(snapshot: ClusterSnapshot, default_min_isr: int) -> None:
    report = assess(snapshot, default_min_insync_replicas=default_min_isr)

    for tp, entry in report.partitions.items():
        replication_factor = health.expected_isr_size(snapshot.partitions[tp].assignment)
        if entry.under_min_isr and entry.min_isr <= replication_factor:
            assert entry.under_replicated


@st.composite
def healthy_snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    """Every broker up, ISR = AR, leader = AR[0]; RF ≥ 2 with min.insync.replicas 1 (RF 1 is at min ISR)."""
    brokers = sorted(draw(st.sets(st.integers(0, 20), min_size=2, max_size=8)))
    partitions = []
    for index in range(draw(st.integers(0, 30))):
        rf = draw(st.integers(2, len(brokers)))
        replicas = draw(st.permutations(brokers))[:rf]
        partitions.append(partition("t", index, replicas))
    return cluster(*partitions, brokers=brokers, controller=ControllerInfo(brokers[0], 1))


@settings(max_examples=200, deadline=None)
@given(snapshot=healthy_snapshots())
def test_a_healthy_cluster_is_zero_everywhere(snapshot: ClusterSnapshot) -> None:
    report = assess(snapshot, previous=snapshot, urp_gauges=dict.fromkeys(snapshot.brokers, 0.0))

    summary = report.summary
    assert (summary.under_replicated, summary.under_min_isr, summary.at_min_isr, summary.offline) == (
        0,
        0,
        0,
        0,
    )
    assert summary.preferred_replica_imbalance == 0
    assert report.brokers_down == summary.brokers_down == ()
    assert report.suspects == ()
    assert all(not b.above_threshold and b.led_by_others == 0 for b in report.imbalance.values())
    assert report.controller.active
    assert not report.controller.changed
    assert report.urp_cross_check is not None
    assert report.urp_cross_check.agrees
    assert report.urp_cross_check.offline_not_counted == 0
    assert all(e.preferred_leader and not e.recovering for e in report.partitions.values())


def test_a_chroot_without_kafka_is_no_cluster_and_an_unhealthy_one_still_is() -> None:
    from collectors.kafka.model import ControllerInfo

    nothing = cluster(brokers=(), cluster_id=None, controller=ControllerInfo(None, None))
    reason = health.no_kafka_cluster(nothing)
    assert reason is not None
    assert "no Kafka cluster" in reason
    assert "chroot" in reason
    every_broker_down = cluster(
        partition("orders", 0, (1, 2)), brokers=(), controller=ControllerInfo(None, None)
    )
    assert health.no_kafka_cluster(every_broker_down) is None
    only_the_id = cluster(brokers=(), controller=ControllerInfo(None, None))
    assert health.no_kafka_cluster(only_the_id) is None
