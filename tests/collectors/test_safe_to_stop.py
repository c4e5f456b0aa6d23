"""Safe to stop over hand-built snapshots: one test per case the module decides, then properties over random
clusters (the cluster-wide pass agrees with the per-broker one and with the health model's own flags on
the snapshot with the broker taken out of every ISR)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import health
from collectors.kafka.model import (
    ClusterSnapshot,
    ControllerInfo,
    LeaderAndIsr,
    PartitionInfo,
    TopicPartition,
)
from collectors.safe_to_stop import (
    SafeToStop,
    UnhealthyPartition,
    UnknownBrokerError,
    answer_json,
    assess_safe_to_stop,
    cluster_json,
    safe_to_stop,
)
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


def tp(topic: str, index: int) -> TopicPartition:
    return TopicPartition(topic, index)


def test_a_healthy_rf3_cluster_is_safe_for_every_broker_and_lists_leaderships() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3]), partition("t", 1, [2, 3, 1]))

    answer = safe_to_stop(snapshot, 2)

    assert answer.safe
    assert answer.trusted
    assert answer.registered
    assert answer.reasons == ()
    assert answer.would_go_offline == answer.would_go_under_min_isr == ()
    assert answer.leaderships_to_move == (tp("t", 1),)
    assert answer.already_under_replicated == ()
    assert any("broker 2 leads 1 partition (t-1): a controlled shutdown" in n for n in answer.notes)
    assert assess_safe_to_stop(snapshot).safe_brokers == (1, 2, 3)


def test_rf1_partitions_always_go_offline() -> None:
    snapshot = cluster(partition("single", 0, [2]), partition("single", 1, [3]), partition("t", 0, [1, 2, 3]))

    answer = safe_to_stop(snapshot, 2)

    assert not answer.safe
    assert answer.would_go_offline == (tp("single", 0),)
    assert answer.reasons == (
        "1 partition would go offline: single-0 (its only in-sync replica is broker 2; "
        "it has a single replica: replication factor 1)",
    )
    assert assess_safe_to_stop(snapshot).safe_brokers == (1,)


def test_last_in_sync_replica_of_a_partition_with_more_replicas() -> None:
    snapshot = cluster(
        partition("single", 0, [2]),
        partition("t", 0, [1, 2, 3], isr=[2]),
        partition("t", 1, [2, 3], isr=[2]),
    )

    answer = safe_to_stop(snapshot, 2)

    assert answer.would_go_offline == (tp("single", 0), tp("t", 0), tp("t", 1))
    assert (
        "(their only in-sync replica is broker 2; 1 of them has a single replica: replication factor 1)"
        in answer.reasons[0]
    )
    assert answer.would_go_under_min_isr == ()  # offline, not also under min ISR
    # already unhealthy: the two URPs, with who is missing
    assert answer.already_under_replicated == (
        UnhealthyPartition(tp("t", 0), ("under_replicated",), (1, 3)),
        UnhealthyPartition(tp("t", 1), ("under_replicated",), (3,)),
    )


def test_min_isr_2_makes_a_shrinking_isr_unsafe_from_topic_config_and_broker_default() -> None:
    orders = [partition("orders", 0, [1, 2, 3], isr=[1, 2])]
    from_topic = cluster(*orders, topic_configs={"orders": {"min.insync.replicas": "2"}})
    from_default = cluster(*orders, broker_default={"min.insync.replicas": "2"})
    from_static = cluster(*orders)

    for snapshot, default in ((from_topic, 1), (from_default, 1), (from_static, 2)):
        for broker in (1, 2):
            answer = safe_to_stop(snapshot, broker, default_min_insync_replicas=default)
            assert answer.would_go_under_min_isr == (tp("orders", 0),)
            assert not answer.safe
            assert answer.reasons == (
                f"1 partition would go under min ISR: orders-0 (its ISR without broker {broker} would be "
                "smaller than min.insync.replicas: acks=all producers would fail)",
            )
        assert safe_to_stop(snapshot, 3, default_min_insync_replicas=default).safe  # not in the ISR
    assert safe_to_stop(from_static, 1).safe  # min ISR 1: an ISR of one is enough


def test_min_isr_above_the_replication_factor_is_capped_like_kafka() -> None:
    """effectiveMinIsr = min(min.insync.replicas, |AR|): min ISR 3 on RF 2 means 2."""
    snapshot = cluster(
        partition("t", 0, [1, 2]),
        partition("u", 0, [1, 2, 3]),
        topic_configs={"t": {"min.insync.replicas": "3"}},
    )

    assert safe_to_stop(snapshot, 1).would_go_under_min_isr == (tp("t", 0),)
    assert safe_to_stop(snapshot, 3).safe


def test_a_partition_already_under_min_isr_still_counts() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], isr=[1, 2]), topic_configs={"t": {"min.insync.replicas": "3"}}
    )

    answer = safe_to_stop(snapshot, 1)

    assert answer.would_go_under_min_isr == (tp("t", 0),)
    assert answer.already_under_replicated == (
        UnhealthyPartition(tp("t", 0), ("under_min_isr", "under_replicated"), (3,)),
    )


def test_a_stalled_broker_out_of_every_isr_is_safe_as_far_as_isrs_go() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], isr=[1, 2]),
        partition("t", 1, [3, 1, 2], isr=[1, 2]),
        topic_configs={"t": {"min.insync.replicas": "2"}},
    )

    answer = safe_to_stop(snapshot, 3)

    assert answer.safe
    assert answer.leaderships_to_move == ()
    assert "broker 3 holds 2 replicas but is in no partition's ISR" in answer.notes[0]
    assert (
        "2 partitions already unhealthy (2 under-replicated); out of their ISR: broker 3 (2)" in answer.notes
    )
    # the others are not: each is one of an ISR of two with min ISR 2
    assert safe_to_stop(snapshot, 1).would_go_under_min_isr == (tp("t", 0), tp("t", 1))


def test_a_broker_that_is_not_registered_is_already_stopped() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3], isr=[1, 2]), partition("one", 0, [3], isr=[3], leader=-1),
                       brokers=[1, 2])  # fmt: skip

    answer = safe_to_stop(snapshot, 3)

    assert answer.safe
    assert not answer.registered
    assert answer.would_go_offline == answer.leaderships_to_move == ()
    assert answer.notes[0].startswith("broker 3 is not registered in /brokers/ids: it is already stopped")
    assert [u.tp for u in answer.already_under_replicated] == [tp("one", 0), tp("t", 0)]
    assert answer.already_under_replicated[0].problems == ("offline",)


def test_an_unknown_broker_is_an_error_naming_the_known_ones() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 4]), brokers=[1, 2, 3])

    with pytest.raises(UnknownBrokerError, match=r"broker 9 is neither .* \(known brokers: 1, 2, 3, 4\)"):
        safe_to_stop(snapshot, 9)
    with pytest.raises(UnknownBrokerError):
        assess_safe_to_stop(snapshot).broker(9)
    assert safe_to_stop(snapshot, 4).registered is False  # assigned a replica: known
    assert safe_to_stop(snapshot, 3).notes == ("broker 3 holds no replica: stopping it affects no partition",)


def test_leader_moves_and_the_controller() -> None:
    snapshot = cluster(*(partition("t", i, [1, 2, 3]) for i in range(7)), controller=ControllerInfo(1, 5))

    answer = safe_to_stop(snapshot, 1)

    assert answer.safe
    assert answer.controller
    assert answer.leaderships_to_move == tuple(tp("t", i) for i in range(7))
    assert "broker 1 leads 7 partitions (t-0, t-1, t-2, t-3, t-4 and 2 more)" in answer.notes[0]
    assert "broker 1 is the active controller" in answer.notes[1]


def test_without_an_active_controller_a_leader_is_unsafe_to_stop() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3]), partition("one", 0, [2]), controller=ControllerInfo(None, 5)
    )

    leader = safe_to_stop(snapshot, 1)
    assert not leader.safe
    assert leader.reasons == (
        "no broker is the active controller: nobody would elect new leaders for the 1 partition "
        "broker 1 leads",
    )
    assert safe_to_stop(snapshot, 3).safe  # leads nothing
    # broker 2 leads only an RF-1 partition: offline either way, said once
    assert len(safe_to_stop(snapshot, 2).reasons) == 1


def test_offline_partitions_already_are_context_and_not_judged_without_a_state() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], isr=[3], leader=-1),  # leaderless, 3 registered (just came back)
        partition("new", 0, [1, 2], with_state=False),
    )

    answer = safe_to_stop(snapshot, 1)
    assert answer.safe
    assert [(u.tp, u.problems) for u in answer.already_under_replicated] == [
        (tp("new", 0), ("offline",)),
        (tp("t", 0), ("offline", "under_replicated")),
    ]
    assert safe_to_stop(snapshot, 3).would_go_offline == (tp("t", 0),)


def test_topics_being_deleted_are_left_out() -> None:
    snapshot = cluster(partition("gone", 0, [2]), partition("gone", 1, [2]), deleting=["gone"])

    answer = safe_to_stop(snapshot, 2)

    assert answer.safe
    assert answer.already_under_replicated == ()
    assert "2 partitions of topics being deleted are left out (a deletion stops their replicas anyway)" in (
        answer.notes
    )


def test_reassignment_counts_adding_replicas_in_the_floor_and_not_as_missing() -> None:
    # moving from [1, 2] to [3, 4]: AR = [3, 4, 1, 2], 3 and 4 still copying; min ISR 3 (floor 3 of 4)
    snapshot = cluster(
        partition("t", 0, [3, 4, 1, 2], isr=[1, 2], adding=[3, 4], removing=[1, 2]),
        brokers=[1, 2, 3, 4],
        topic_configs={"t": {"min.insync.replicas": "3"}},
    )

    answer = safe_to_stop(snapshot, 1)
    assert answer.would_go_under_min_isr == (tp("t", 0),)
    assert answer.already_under_replicated == (UnhealthyPartition(tp("t", 0), ("under_min_isr",), ()),)


@pytest.mark.parametrize(
    ("stale", "last_good_at", "reason"),
    [
        (True, 10.0, "the view of the cluster is stale"),
        (False, None, "no full scan of ZooKeeper has completed yet"),
    ],
)
def test_a_snapshot_out_of_sync_cannot_be_trusted(
    stale: bool, last_good_at: float | None, reason: str
) -> None:
    snapshot = replace(cluster(partition("t", 0, [1, 2, 3])), stale=stale, last_good_at=last_good_at)

    answer = safe_to_stop(snapshot, 2)
    assert not answer.safe
    assert not answer.trusted
    assert answer.reasons[0].startswith(reason)
    assert answer.reasons[0].endswith("cannot be trusted")
    # an empty or stale view does not call a broker unknown: it cannot tell
    assert not safe_to_stop(snapshot, 9).trusted
    view = assess_safe_to_stop(snapshot)
    assert not view.trusted
    assert view.safe_brokers == ()


def test_json_shapes() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3], isr=[1, 2]), partition("one", 0, [2]), version=7)

    body = answer_json(safe_to_stop(snapshot, 2))
    assert body["would_go_offline"] == [{"topic": "one", "partition": 0}]
    assert body["already_under_replicated"] == [
        {"topic": "t", "partition": 0, "problems": ["under_replicated"], "out_of_isr": [3]}
    ]
    assert body["snapshot_version"] == 7
    assert set(body) == set(SafeToStop.__slots__)
    whole = cluster_json(assess_safe_to_stop(snapshot))
    assert whole["safe_to_stop"] == [1, 3]
    assert [b["broker"] for b in whole["brokers"]] == [1, 2, 3]
    assert whole["brokers"][1]["leaderships"] == 1


# --- properties -------------------------------------------------------------------------------------------

BROKERS = (1, 2, 3, 4)


@st.composite
def partitions(draw: st.DrawFn) -> list[PartitionInfo]:
    result = []
    for index in range(draw(st.integers(0, 12))):
        replicas = draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True))
        isr = draw(st.lists(st.sampled_from(replicas), max_size=len(replicas), unique=True))
        leader = draw(st.sampled_from([*isr, -1])) if isr else -1
        topic = draw(st.sampled_from(["a", "b", "c"]))
        result.append(partition(topic, index, replicas, isr=isr, leader=leader))
    return result


@settings(max_examples=200, deadline=None)
@given(
    parts=partitions(),
    registered=st.lists(st.sampled_from(BROKERS), unique=True),
    configs=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["1", "2", "3", "x"])),
    default=st.integers(1, 3),
)
def test_the_cluster_view_agrees_with_each_broker_and_with_the_health_model(
    parts: list[PartitionInfo], registered: list[int], configs: dict[str, str], default: int
) -> None:
    snapshot = cluster(
        *parts,
        brokers=registered,
        topic_configs={t: {"min.insync.replicas": v} for t, v in configs.items()},
    )
    view = assess_safe_to_stop(snapshot, default_min_insync_replicas=default)
    for broker in sorted(set(registered).union(*(p.replicas for p in parts))):
        one = safe_to_stop(snapshot, broker, default_min_insync_replicas=default)
        assert view.broker(broker) == one
        offline, under = _oracle(snapshot, broker, default)
        assert set(one.would_go_offline) == offline
        assert set(one.would_go_under_min_isr) == under
        assert one.safe == (not offline and not under and _controller_ok(snapshot, broker, one))


def _oracle(
    snapshot: ClusterSnapshot, broker: int, default: int
) -> tuple[set[TopicPartition], set[TopicPartition]]:
    """The health model's own flags on each partition with ``broker`` taken out of its ISR."""
    if broker not in snapshot.brokers:
        return set(), set()
    offline: set[TopicPartition] = set()
    under: set[TopicPartition] = set()
    for info in snapshot.partitions.values():
        if info.state is None or broker not in info.isr:
            continue
        isr = tuple(b for b in info.isr if b != broker)
        if not isr:
            offline.add(info.tp)
            continue
        shrunk = replace(info, state=LeaderAndIsr(isr[0], 2, isr, 1))
        min_isr = health.min_insync_replicas(snapshot, info.tp.topic, default)
        if health.partition_health(shrunk, min_isr, frozenset(snapshot.brokers)).under_min_isr:
            under.add(info.tp)
    return offline, under


def _controller_ok(snapshot: ClusterSnapshot, broker: int, answer: SafeToStop) -> bool:
    controller = snapshot.controller.broker_id
    if controller is not None and controller in snapshot.brokers:
        return True
    return not any(len(snapshot.partitions[tp].replicas) > 1 for tp in answer.leaderships_to_move)
