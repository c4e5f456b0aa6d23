"""ISR churn between two snapshots: leaves and rejoins per follower, exact, reassignments not counted."""

from __future__ import annotations

import pytest

from collectors.isr_churn import IsrChurn, isr_churn
from collectors.kafka.model import TopicPartition
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


def tp(topic: str, index: int) -> TopicPartition:
    return TopicPartition(topic, index)


def test_each_follower_gets_the_partitions_whose_isr_it_left_and_rejoined() -> None:
    before = cluster(
        partition("orders", 0, [1, 2, 3]),
        partition("orders", 1, [2, 3, 1], isr=[2, 1]),
        partition("orders", 2, [3, 1, 2]),
        partition("clicks", 0, [1, 3, 2]),
        partition("gone", 0, [1, 2, 3]),
    )
    after = cluster(
        partition("orders", 0, [1, 2, 3], isr=[1, 2]),  # 3 left
        partition("orders", 1, [2, 3, 1], isr=[2, 1, 3]),  # 3 rejoined
        partition("orders", 2, [3, 1, 2], isr=[1, 2], leader=1),  # 3 left (leader moved)
        partition("clicks", 0, [1, 3, 2], isr=[1]),  # 3 and 2 left
        partition("fresh", 0, [1, 2, 3], isr=[1]),  # new: no transition
    )

    churn = isr_churn(before, after)

    assert churn.left == {2: (tp("clicks", 0),), 3: (tp("clicks", 0), tp("orders", 0), tp("orders", 2))}
    assert churn.rejoined == {3: (tp("orders", 1),)}
    assert churn.brokers == (2, 3)
    assert churn.transitions(3) == 4
    assert churn.transitions(1) == 0
    assert isr_churn(after, after) == IsrChurn()


def test_a_reassignment_adding_or_removing_a_replica_is_not_churn() -> None:
    before = cluster(
        partition("orders", 0, [1, 2, 4], adding=[4], removing=[2], isr=[1, 2]),
        partition("orders", 1, [1, 2]),
        partition("orders", 2, [1, 2], with_state=False),
    )
    after = cluster(
        partition("orders", 0, [1, 4], isr=[1, 4]),  # 4 joined for the first time, 2 removed
        partition("orders", 1, [1, 2], isr=[1]),
        partition("orders", 2, [1, 2], isr=[1]),  # no state before: nothing to compare
    )
    churn = isr_churn(before, after)
    assert churn.left == {2: (tp("orders", 1),)}
    assert churn.rejoined == {}
