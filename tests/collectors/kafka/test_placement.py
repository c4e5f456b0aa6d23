"""Replica placement at topic creation, checked against Kafka's ``AdminUtils.assignReplicasToBrokers``.

Expected assignments come from Kafka's own tests (``AdminTest.testReplicaAssignment`` and
``AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers`` under
``core/src/test/scala/unit/kafka/admin/``) and from the scaladoc of ``AdminUtils``.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.kafka.placement import (
    AdminOperationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    assign_replicas,
    rack_alternated_brokers,
)

pytestmark = pytest.mark.unit

KAFKA_RACK_EXAMPLE = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}

# AdminTest.testReplicaAssignment: brokers 0..4, 10 partitions, RF 3, fixedStartIndex 0.
KAFKA_RACK_UNAWARE_EXPECTED = {
    0: [0, 1, 2],
    1: [1, 2, 3],
    2: [2, 3, 4],
    3: [3, 4, 0],
    4: [4, 0, 1],
    5: [0, 2, 3],
    6: [1, 3, 4],
    7: [2, 4, 0],
    8: [3, 0, 1],
    9: [4, 1, 2],
}


# --- fixed examples ----------------------------------------------------------------------------------


def test_reference_example_rack_unaware() -> None:
    assignment = assign_replicas(6, 3, [0, 1, 2, 3, 4], fixed_start_index=0)

    assert assignment[0] == [0, 1, 2]
    assert assignment[4] == [4, 0, 1]
    assert assignment[5] == [0, 2, 3]  # the shift grows by one after every round of n partitions


def test_kafka_admin_test_rack_unaware_assignment() -> None:
    assert assign_replicas(10, 3, [0, 1, 2, 3, 4], fixed_start_index=0) == KAFKA_RACK_UNAWARE_EXPECTED


def test_broker_order_given_does_not_matter() -> None:
    assert assign_replicas(10, 3, [3, 1, 4, 0, 2], fixed_start_index=0) == KAFKA_RACK_UNAWARE_EXPECTED


def test_start_partition_id_continues_the_same_pattern() -> None:
    """``addPartitions`` passes the existing partition count as ``startPartitionId``."""
    added = assign_replicas(5, 3, [0, 1, 2, 3, 4], fixed_start_index=0, start_partition_id=5)

    assert added == {p: KAFKA_RACK_UNAWARE_EXPECTED[p] for p in range(5, 10)}


def test_rack_alternated_list_kafka_example() -> None:
    assert rack_alternated_brokers(KAFKA_RACK_EXAMPLE) == [0, 3, 1, 5, 4, 2]


def test_rack_alternated_list_with_uneven_racks() -> None:
    without_5 = {b: r for b, r in KAFKA_RACK_EXAMPLE.items() if b != 5}

    assert rack_alternated_brokers(without_5) == [0, 3, 1, 4, 2]


def test_rack_aware_kafka_example() -> None:
    """The scaladoc's six partitions, and AdminRackAwareTest's seventh (0 -> 0,4,2: the followers shift)."""
    assignment = assign_replicas(7, 3, KAFKA_RACK_EXAMPLE, fixed_start_index=0, start_partition_id=0)

    assert assignment == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_brokers_without_any_rack_are_placed_rack_unaware() -> None:
    no_racks: dict[int, str | None] = dict.fromkeys(range(5))

    assert assign_replicas(10, 3, no_racks, fixed_start_index=0) == KAFKA_RACK_UNAWARE_EXPECTED


def test_single_rack_still_spreads_leaders() -> None:
    """AdminRackAwareTest.testSingleRack: one rack, every broker leads exactly one of six partitions."""
    one_rack = dict.fromkeys(range(6), "rack1")

    assignment = assign_replicas(6, 3, one_rack, rng=random.Random(7))

    assert Counter(replicas[0] for replicas in assignment.values()) == dict.fromkeys(range(6), 1)
    assert all(len(set(replicas)) == 3 for replicas in assignment.values())


# --- errors (Kafka's exceptions and messages) --------------------------------------------------------


@pytest.mark.parametrize("partitions", [0, -1])
def test_partitions_below_one(partitions: int) -> None:
    with pytest.raises(InvalidPartitionsError, match=r"^Number of partitions must be larger than 0\.$"):
        assign_replicas(partitions, 1, [0, 1, 2])


@pytest.mark.parametrize("replication_factor", [0, -3])
def test_replication_factor_below_one(replication_factor: int) -> None:
    with pytest.raises(InvalidReplicationFactorError, match=r"^Replication factor must be larger than 0\.$"):
        assign_replicas(3, replication_factor, [0, 1, 2])


def test_replication_factor_above_brokers() -> None:
    with pytest.raises(
        InvalidReplicationFactorError, match=r"^Replication factor: 4 larger than available brokers: 3\.$"
    ):
        assign_replicas(3, 4, [0, 1, 2])


def test_replication_factor_above_brokers_with_racks() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 2"):
        assign_replicas(3, 3, {0: "a", 1: "b"})


def test_racks_on_some_brokers_only() -> None:
    with pytest.raises(
        AdminOperationError,
        match=r"^Not all brokers have rack information for replica rack aware assignment\.$",
    ):
        assign_replicas(3, 2, {0: "a", 1: None, 2: "b"})


def test_replication_factor_is_checked_before_rack_completeness() -> None:
    """Kafka's ``assignReplicasToBrokers`` checks partitions, then RF against the broker count, and only then
    whether every broker has a rack: RF 4 on three brokers is an InvalidReplicationFactorException even when
    the racks are incomplete."""
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(3, 4, {0: "a", 1: None, 2: "b"})


def test_errors_are_value_errors() -> None:
    for error in (InvalidPartitionsError, InvalidReplicationFactorError, AdminOperationError):
        assert issubclass(error, ValueError)


# --- properties --------------------------------------------------------------------------------------


@st.composite
def placements(draw: st.DrawFn, *, with_racks: bool) -> tuple[dict[int, str], int, int, int]:
    """(broker -> rack, partitions, RF, fixed start index or -1 for a seeded random start)."""
    broker_ids = draw(st.lists(st.integers(0, 200), min_size=1, max_size=12, unique=True))
    rack_names = st.sampled_from(["r1", "r2", "r3", "r4"]) if with_racks else st.just("")
    racks = {b: draw(rack_names) for b in broker_ids}
    n_partitions = draw(st.integers(1, 60))
    replication_factor = draw(st.integers(1, len(broker_ids)))
    fixed_start = draw(st.one_of(st.just(-1), st.integers(0, len(broker_ids) - 1)))
    return racks, n_partitions, replication_factor, fixed_start


def _assign(
    racks: dict[int, str], n_partitions: int, rf: int, fixed_start: int, seed: int
) -> dict[int, list[int]]:
    brokers: dict[int, str] | list[int] = racks if any(racks.values()) else sorted(racks)
    return assign_replicas(n_partitions, rf, brokers, fixed_start_index=fixed_start, rng=random.Random(seed))


@settings(max_examples=200, deadline=None)
@given(case=st.one_of(placements(with_racks=False), placements(with_racks=True)), seed=st.integers(0, 2**32))
def test_every_partition_gets_rf_distinct_live_brokers(
    case: tuple[dict[int, str], int, int, int], seed: int
) -> None:
    racks, n_partitions, rf, fixed_start = case

    assignment = _assign(racks, n_partitions, rf, fixed_start, seed)

    assert sorted(assignment) == list(range(n_partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(racks)


@settings(max_examples=200, deadline=None)
@given(case=st.one_of(placements(with_racks=False), placements(with_racks=True)), seed=st.integers(0, 2**32))
def test_leaders_spread_evenly(case: tuple[dict[int, str], int, int, int], seed: int) -> None:
    racks, n_partitions, rf, fixed_start = case

    assignment = _assign(racks, n_partitions, rf, fixed_start, seed)

    leaders = Counter(replicas[0] for replicas in assignment.values())
    counts = [leaders[b] for b in racks]
    assert max(counts) - min(counts) <= 1
    if n_partitions % len(racks) == 0:
        assert set(counts) == {n_partitions // len(racks)}


@settings(max_examples=200, deadline=None)
@given(case=placements(with_racks=False), seed=st.integers(0, 2**32))
def test_rack_unaware_replicas_spread_evenly_over_full_rounds(
    case: tuple[dict[int, str], int, int, int], seed: int
) -> None:
    """Goal 1 of AdminUtils: over whole rounds of n partitions each broker holds as many replicas as any."""
    racks, n_partitions, rf, fixed_start = case
    n = len(racks)
    rounds = max(1, n_partitions // n)

    assignment = _assign(racks, rounds * n, rf, fixed_start, seed)

    per_broker = Counter(b for replicas in assignment.values() for b in replicas)
    assert {per_broker[b] for b in racks} == {rounds * rf}


@settings(max_examples=300, deadline=None)
@given(case=placements(with_racks=True), seed=st.integers(0, 2**32))
def test_rack_aware_replicas_span_as_many_racks_as_possible(
    case: tuple[dict[int, str], int, int, int], seed: int
) -> None:
    racks, n_partitions, rf, fixed_start = case
    n_racks = len(set(racks.values()))

    assignment = assign_replicas(
        n_partitions, rf, racks, fixed_start_index=fixed_start, rng=random.Random(seed)
    )

    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == min(rf, n_racks)


@settings(max_examples=100, deadline=None)
@given(case=st.one_of(placements(with_racks=False), placements(with_racks=True)), seed=st.integers(0, 2**32))
def test_seeded_random_is_reproducible(case: tuple[dict[int, str], int, int, int], seed: int) -> None:
    racks, n_partitions, rf, _ = case

    first = _assign(racks, n_partitions, rf, -1, seed)
    second = _assign(racks, n_partitions, rf, -1, seed)

    assert first == second


def test_random_start_differs_between_seeds() -> None:
    """Without a fixed start Kafka randomises start and shift, so topics do not all start on one broker."""
    brokers = list(range(10))

    starts = {assign_replicas(1, 3, brokers, rng=random.Random(seed))[0][0] for seed in range(50)}

    assert len(starts) > 1


def test_fixed_start_index_pins_the_first_leader() -> None:
    for start in range(5):
        assignment = assign_replicas(5, 2, [0, 1, 2, 3, 4], fixed_start_index=start, rng=random.Random(1))
        assert assignment[0][0] == start
