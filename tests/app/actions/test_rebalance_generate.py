"""The ``--generate`` comparison counts, without building the layouts, what Kafka's layouts would move."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.actions.rebalance import kafka_generate_moves
from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.placement import AdminOperationError, InvalidReplicationFactorError, assign_replicas
from tests.support import snapshots
from tests.support.snapshots import partition

pytestmark = pytest.mark.unit


def layout_moves(
    snapshot: ClusterSnapshot, topics: Iterable[str], brokers: Sequence[int], *, seed: int = 0
) -> int | None:
    """The count as it was first written: every topic laid out with Kafka's assignment, list by list."""
    by_topic: dict[str, dict[int, tuple[int, ...]]] = {}
    wanted = set(topics)
    for tp, info in snapshot.partitions.items():
        if tp.topic in wanted:
            by_topic.setdefault(tp.topic, {})[tp.partition] = info.assignment.replicas
    racks = {b: snapshot.brokers[b].rack if b in snapshot.brokers else None for b in brokers}
    layout: Sequence[int] | Mapping[int, str | None] = (
        racks if racks and all(r is not None for r in racks.values()) else sorted(brokers)
    )
    rng = random.Random(seed)
    moves = 0
    for topic in sorted(by_topic):
        current = by_topic[topic]
        rf = len(current[min(current)])
        try:
            proposed = assign_replicas(len(current), rf, layout, rng=rng)
        except (InvalidReplicationFactorError, AdminOperationError):
            return None
        for p, replicas in proposed.items():
            moves += len(set(replicas).difference(current.get(p, ())))
    return moves


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterSnapshot, list[int]]:
    """Random clusters: some brokers (with racks on all, some or none), topics of mixed replication
    factors, partition ids with gaps, replicas on brokers that may not be registered."""
    n_brokers = draw(st.integers(1, 12))
    ids = sorted(draw(st.sets(st.integers(0, 40), min_size=n_brokers, max_size=n_brokers)))
    rack_mode = draw(st.sampled_from(["all", "some", "none"]))
    n_racks = draw(st.integers(1, 4))
    racks = {
        b: f"r{draw(st.integers(0, n_racks - 1))}"
        for b in ids
        if rack_mode == "all" or (rack_mode == "some" and draw(st.booleans()))
    }
    parts = []
    for t in range(draw(st.integers(1, 6))):
        topic = draw(st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])) + str(t)
        count = draw(st.integers(1, 40))
        pids = sorted(draw(st.sets(st.integers(0, count + 3), min_size=1, max_size=count)))
        for pid in pids:
            rf = draw(st.integers(1, 4))
            replicas = draw(st.lists(st.integers(0, 42), min_size=rf, max_size=rf, unique=True))
            parts.append(partition(topic, pid, replicas))
    targets = draw(st.lists(st.sampled_from(ids), min_size=0, max_size=len(ids), unique=True))
    return snapshots.cluster(*parts, brokers=ids, racks=racks), targets


@given(clusters(), st.integers(0, 1000))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_count_is_the_one_of_kafkas_layouts(case: tuple[ClusterSnapshot, list[int]], seed: int) -> None:
    snapshot, brokers = case
    topics = sorted({tp.topic for tp in snapshot.partitions})

    assert kafka_generate_moves(snapshot, topics, brokers, seed=seed) == layout_moves(
        snapshot, topics, brokers, seed=seed
    )
    some = topics[::2]
    assert kafka_generate_moves(snapshot, some, brokers, seed=seed) == layout_moves(
        snapshot, some, brokers, seed=seed
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_count_at_a_larger_rack_aware_cluster(seed: int) -> None:
    rng = random.Random(seed)
    ids = list(range(1, 31))
    racks = {b: f"rack{b % 4}" for b in ids}
    parts = [
        partition(f"t{t:02d}", i, rng.sample(ids, rf))
        for t in range(25)
        for rf in [rng.choice([2, 3])]
        for i in range(rng.randint(1, 120))
    ]
    snapshot = snapshots.cluster(*parts, brokers=ids, racks=racks)
    topics = sorted({tp.topic for tp in snapshot.partitions})
    expected = layout_moves(snapshot, topics, ids, seed=seed)

    assert expected is not None
    assert kafka_generate_moves(snapshot, topics, ids, seed=seed) == expected
