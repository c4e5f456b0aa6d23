"""The bytes a reassignment copies and its time at a throttle (app.actions.sizes): the leader's log size,
else the largest replica's; per replica added; each batch as long as its busiest broker."""

from __future__ import annotations

import pytest

from app.actions.reassignment import ReassignmentRequest
from app.actions.sizes import copy_bytes, copy_seconds, partition_sizes
from collectors.kafka.model import TopicPartition
from collectors.metrics import BrokerScrape, MetricsScrape
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def scrape(sizes: dict[int, dict[TopicPartition, int]], failed: tuple[int, ...] = ()) -> MetricsScrape:
    brokers = {
        b: BrokerScrape(b, None, 0.0, 0.0, {}, log_sizes=s, error="refused" if b in failed else None)
        for b, s in sizes.items()
    }
    return MetricsScrape(brokers, 0.0, 0.0)


SNAPSHOT = cluster(
    partition("a", 0, [1, 2]),  # leader 1
    partition("a", 1, [2, 3]),  # leader 2
    partition("b", 0, [3, 1], isr=[1], leader=1),
    brokers=[1, 2, 3, 4],
)


def test_the_leaders_size_else_the_largest_replicas() -> None:
    sizes = scrape({1: {A0: 100, B0: 70}, 2: {A0: 90, A1: 50}, 3: {A1: 40, B0: 80}}, failed=(2,))
    # a1's leader (2) failed its scrape: the largest other replica's; b0's leader (1) gave 70
    assert partition_sizes(SNAPSHOT, sizes, [A0, A1, B0]) == {A0: 100, A1: 40, B0: 70}
    assert partition_sizes(SNAPSHOT, None, [A0]) == {}
    assert partition_sizes(SNAPSHOT, scrape({4: {}}), [A0]) == {}
    assert partition_sizes(SNAPSHOT, sizes, [TopicPartition("gone", 0)]) == {}


def test_a_move_copies_the_size_once_per_replica_added() -> None:
    assert copy_bytes(100, 2) == 200
    assert copy_bytes(None, 1) is None
    assert copy_bytes(None, 0) == 0  # a reordering copies nothing


def test_each_batch_takes_as_long_as_its_busiest_broker() -> None:
    sizes = {A0: 1000, A1: 400, B0: 300}
    batch = [
        ReassignmentRequest("a", 0, (1, 4)),  # 1 sends 1000 to 4
        ReassignmentRequest("a", 1, (2, 4)),  # 2 sends 400 to 4: 4 receives 1400
        ReassignmentRequest("b", 0, (3, 1)),  # a reordering: nothing
    ]
    assert copy_seconds([batch], SNAPSHOT, sizes, 100) == pytest.approx(14.0)
    two = [[batch[0]], [batch[1]]]
    assert copy_seconds(two, SNAPSHOT, sizes, 100) == pytest.approx(10.0 + 4.0)
    fan_out = [[ReassignmentRequest("a", 0, (1, 3, 4))]]  # leader 1 sends 2 × 1000
    assert copy_seconds(fan_out, SNAPSHOT, sizes, 100) == pytest.approx(20.0)
    assert copy_seconds([batch], SNAPSHOT, sizes, None) is None
    assert copy_seconds([batch], SNAPSHOT, {A0: 1000}, 100) is None
    assert copy_seconds([[batch[2]]], SNAPSHOT, {}, 100) == 0.0
