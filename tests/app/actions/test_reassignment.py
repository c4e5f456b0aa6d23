"""The reassignment planner: validation (every problem named at once), batches, Kafka's throttle strings, the
go/no-go before a batch and the per-partition status."""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.actions.reassignment import (
    DUPLICATE_PARTITION,
    DUPLICATE_REPLICAS,
    EMPTY_REPLICAS,
    EMPTY_REQUEST,
    NEGATIVE_BROKER_ID,
    PARTITION_BEING_REASSIGNED,
    REASSIGNMENT_IN_PROGRESS,
    REPLICATION_FACTOR_CHANGE,
    TOPIC_BEING_DELETED,
    UNKNOWN_BROKER,
    UNKNOWN_PARTITION,
    UNKNOWN_TOPIC,
    Problem,
    ReassignmentRequest,
    plan_batches,
    reassignment_status,
    safe_to_start_batch,
    throttle_config,
    throttle_removal,
    validate_reassignment,
)
from collectors.health import assess
from collectors.kafka.model import NO_LEADER, PendingOperations, ReplicaAssignment, TopicPartition
from collectors.kafka.throttles import (
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
)
from tests.support import snapshots
from tests.support.snapshots import partition

pytestmark = pytest.mark.unit

# --- builders ----------------------------------------------------------------------------------------


cluster = functools.partial(snapshots.cluster, brokers=(1, 2, 3, 4, 5))
"""The snapshot builder, with five brokers registered unless a test says otherwise."""


def request(topic: str, index: int, *replicas: int) -> ReassignmentRequest:
    return ReassignmentRequest(topic, index, tuple(replicas))


def codes(problems: list[Problem]) -> list[tuple[str, str | None, int | None]]:
    return [(p.code, p.topic, p.partition) for p in problems]


BASE = cluster(
    partition("t", 0, [1, 2, 3]),
    partition("t", 1, [2, 3, 4]),
    partition("t", 2, [3, 4, 5]),
    partition("u", 0, [1, 2]),
)


# --- validation --------------------------------------------------------------------------------------


def test_valid_request_has_no_problem() -> None:
    assert validate_reassignment(BASE, [request("t", 0, 4, 2, 3), request("u", 0, 2, 1)]) == []


def test_empty_request() -> None:
    assert codes(validate_reassignment(BASE, [])) == [(EMPTY_REQUEST, None, None)]


def test_every_problem_is_named_at_once() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3]),
        partition("t", 1, [2, 3, 4]),
        partition("t", 2, ReplicaAssignment.for_reassignment((1, 2, 3), (1, 2, 4))),
        partition("t", 3, [3, 4, 5]),
        partition("d", 0, [1, 2]),
        deleting=["d"],
    )
    items = [
        request("t", 0, 1, 1, 2),  # duplicate replicas
        request("t", 1),  # empty replica list
        request("t", 1, 2, 3, 4),  # duplicate partition (second entry)
        request("t", 2, 1, 2, 5),  # already being reassigned
        request("t", 3, 3, 4),  # RF change 3 -> 2
        request("t", 9, 1, 2, 3),  # unknown partition
        request("x", 0, 1, 2, 3),  # unknown topic
        request("d", 0, 1, 3),  # topic being deleted
        request("t", 3, -1, 7, 5),  # negative and unknown brokers (and t-3 named twice)
    ]

    problems = validate_reassignment(snapshot, items)

    assert codes(problems) == [
        (DUPLICATE_PARTITION, "t", 1),
        (DUPLICATE_PARTITION, "t", 3),
        (DUPLICATE_REPLICAS, "t", 0),
        (EMPTY_REPLICAS, "t", 1),
        (PARTITION_BEING_REASSIGNED, "t", 2),
        (REPLICATION_FACTOR_CHANGE, "t", 3),
        (UNKNOWN_PARTITION, "t", 9),
        (UNKNOWN_TOPIC, "x", 0),
        (TOPIC_BEING_DELETED, "d", 0),
        (NEGATIVE_BROKER_ID, "t", 3),
        (UNKNOWN_BROKER, "t", 3),
    ]
    by_code = {p.code: p for p in problems}
    assert by_code[DUPLICATE_REPLICAS].brokers == (1,)
    assert by_code[NEGATIVE_BROKER_ID].brokers == (-1,)
    assert by_code[UNKNOWN_BROKER].brokers == (7,)
    assert "named 2 times" in by_code[DUPLICATE_PARTITION].message
    assert all(p.message for p in problems)


def test_unknown_brokers_are_listed_per_entry() -> None:
    problems = validate_reassignment(BASE, [request("t", 0, 8, 9, 1), request("t", 1, 9, 3, 4)])

    assert [(p.code, p.partition, p.brokers) for p in problems] == [
        (UNKNOWN_BROKER, 0, (8, 9)),
        (UNKNOWN_BROKER, 1, (9,)),
    ]
    assert "8, 9" in problems[0].message


def test_replication_factor_change_needs_the_flag() -> None:
    items = [request("t", 0, 1, 2, 3, 4), request("u", 0, 1)]

    assert codes(validate_reassignment(BASE, items)) == [
        (REPLICATION_FACTOR_CHANGE, "t", 0),
        (REPLICATION_FACTOR_CHANGE, "u", 0),
    ]
    assert validate_reassignment(BASE, items, allow_replication_factor_change=True) == []


def test_partition_in_the_reassignment_znode_and_a_running_reassignment_are_refused() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3]),
        partition("t", 1, [2, 3, 4]),
        pending=PendingOperations(reassignments={TopicPartition("t", 0): (1, 2, 5)}),
    )

    assert codes(validate_reassignment(snapshot, [request("t", 0, 1, 2, 4), request("t", 1, 2, 3, 5)])) == [
        (REASSIGNMENT_IN_PROGRESS, None, None),
        (PARTITION_BEING_REASSIGNED, "t", 0),
    ]


def test_topic_queued_for_deletion_in_pending_operations() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3]), pending=PendingOperations(deletions=("t",)))

    assert codes(validate_reassignment(snapshot, [request("t", 0, 1, 2, 4)])) == [
        (TOPIC_BEING_DELETED, "t", 0)
    ]


# --- batches -----------------------------------------------------------------------------------------

BATCH_CLUSTER = cluster(*(partition("b", i, [1, 2, 3]) for i in range(8)), brokers=range(1, 10))


def test_batches_hold_at_most_the_allowed_replica_additions_in_request_order() -> None:
    items = [
        request("b", 0, 4, 2, 3),  # 1 move
        request("b", 1, 4, 5, 3),  # 2
        request("b", 2, 3, 2, 1),  # 0: a reordering
        request("b", 3, 6, 7, 8),  # 3
        request("b", 4, 1, 2, 9),  # 1
        request("b", 5, 4, 5, 6),  # 3
    ]

    batches = plan_batches(items, BATCH_CLUSTER, max_concurrent_moves=3)

    assert [[i.partition for i in batch] for batch in batches] == [[0, 1, 2], [3], [4], [5]]


def test_a_partition_with_more_additions_than_the_limit_is_a_batch_of_its_own() -> None:
    items = [request("b", 0, 4, 2, 3), request("b", 1, 4, 5, 6), request("b", 2, 1, 2, 7)]

    batches = plan_batches(items, BATCH_CLUSTER, max_concurrent_moves=2)

    assert [[i.partition for i in batch] for batch in batches] == [[0], [1], [2]]


def test_batch_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_batches([request("b", 0, 4, 2, 3)], BATCH_CLUSTER, 0)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.lists(st.integers(1, 9), min_size=1, max_size=4, unique=True)),
        max_size=30,
    ),
    st.integers(1, 5),
)
def test_batches_partition_the_request_without_splitting_or_overfilling(
    raw: list[tuple[int, list[int]]], limit: int
) -> None:
    items = [ReassignmentRequest("b", p, tuple(replicas)) for p, replicas in raw]

    batches = plan_batches(items, BATCH_CLUSTER, limit)

    assert [i for batch in batches for i in batch] == items
    for batch in batches:
        moves = sum(len(set(i.replicas) - {1, 2, 3}) for i in batch)
        assert moves <= limit or len(batch) == 1
    for current, following in itertools.pairwise(batches):  # next-fit: no batch closed early
        moves = sum(len(set(i.replicas) - {1, 2, 3}) for i in [*current, following[0]])
        assert moves > limit


# --- throttles ---------------------------------------------------------------------------------------


def test_throttle_strings_as_kafka_computes_them() -> None:
    snapshot = cluster(
        partition("t", 2, [1, 2, 3]),
        partition("t", 10, [4, 5, 1]),
        partition("t", 11, [1, 2, 3]),
        partition("u", 0, [1, 2]),
        brokers=range(1, 8),
    )
    items = [
        request("t", 2, 1, 2, 6),  # 3 -> 6
        request("t", 10, 7, 5, 1),  # 4 -> 7
        request("t", 11, 3, 2, 1),  # reordering only: still leader-throttled
        request("u", 0, 2, 1),  # reordering only
    ]

    config = throttle_config(items, snapshot, 50_000_000)

    assert config.topic_configs == {
        "t": {
            # a TreeSet of strings: "10:1" sorts before "2:1"
            LEADER_THROTTLED_REPLICAS: "10:1,10:4,10:5,11:1,11:2,11:3,2:1,2:2,2:3",
            FOLLOWER_THROTTLED_REPLICAS: "10:7,2:6",
        },
        "u": {LEADER_THROTTLED_REPLICAS: "0:1,0:2", FOLLOWER_THROTTLED_REPLICAS: ""},
    }
    rate = {LEADER_THROTTLED_RATE: "50000000", FOLLOWER_THROTTLED_RATE: "50000000"}
    assert config.broker_configs == dict.fromkeys((1, 2, 3, 4, 5, 6, 7), rate)


def test_throttle_rate_must_be_positive_and_partitions_known() -> None:
    with pytest.raises(ValueError, match="at least 1 byte/s"):
        throttle_config([request("t", 0, 4, 2, 3)], BASE, 0)
    with pytest.raises(ValueError, match="at least 1 byte/s"):
        throttle_config([request("t", 0, 4, 2, 3)], BASE, True)
    with pytest.raises(ValueError, match="t-9 does not exist"):
        throttle_config([request("t", 9, 4, 2, 3)], BASE, 1000)


def test_throttle_removal_covers_every_broker_and_the_request_topics() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 8]), brokers=[1, 2, 3])

    removal = throttle_removal([request("t", 0, 1, 2, 3)], snapshot)

    assert removal.brokers == (1, 2, 3, 8)
    assert removal.broker_keys == (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)
    assert removal.topics == ("t",)
    assert removal.topic_keys == (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)


# --- go / no-go and status ---------------------------------------------------------------------------


def test_safe_to_start_a_batch_only_without_under_min_isr_or_offline_partitions() -> None:
    healthy = cluster(partition("t", 0, [1, 2, 3]))
    assert safe_to_start_batch(assess(healthy)) == (True, "no partition is under min ISR or offline")

    under_min = cluster(
        partition("t", 0, [1, 2, 3], isr=[1]), topic_configs={"t": {"min.insync.replicas": "2"}}
    )
    ok, reason = safe_to_start_batch(assess(under_min))
    assert not ok
    assert reason == "1 partition(s) under min ISR: t-0"

    offline = cluster(partition("t", 0, [1, 2, 3]), partition("t", 1, [6, 7], isr=[6], leader=NO_LEADER))
    ok, reason = safe_to_start_batch(assess(offline))
    assert not ok
    assert reason == "1 partition(s) offline: t-1"


def test_under_replicated_alone_does_not_stop_a_batch() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], isr=[1, 2]), topic_configs={"t": {"min.insync.replicas": "2"}}
    )

    assert safe_to_start_batch(assess(snapshot))[0]


def test_reassignment_status_per_partition() -> None:
    snapshot = cluster(
        partition("t", 0, [4, 2, 3]),  # done
        partition("t", 1, ReplicaAssignment.for_reassignment((2, 3, 4), (5, 3, 4)), isr=[2, 3, 4]),
        partition("t", 2, [3, 4, 5]),  # never changed
        pending=PendingOperations(reassignments={TopicPartition("t", 1): (5, 3, 4)}),
    )
    items = [request("t", 0, 4, 2, 3), request("t", 1, 5, 3, 4), request("t", 2, 1, 4, 5)]

    status = reassignment_status(snapshot, items)

    assert {tp.partition: s.state for tp, s in status.items()} == {
        0: "completed",
        1: "in progress",
        2: "failed",
    }
    assert status[TopicPartition("t", 1)].in_sync == (3, 4)
    assert status[TopicPartition("t", 1)].replicas == (5, 3, 4, 2)
