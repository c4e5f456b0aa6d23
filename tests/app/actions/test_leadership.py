"""Demotion and promotion plans over hand-built snapshots: the reorders (the same replicas, the broker last),
the partitions to elect, what is left alone and why, the record a promotion restores, and the journal."""

from __future__ import annotations

import pytest

from app.actions.leadership import (
    BEING_REASSIGNED,
    ONLY_REPLICA,
    PARTITION_GONE,
    TOPIC_BEING_DELETED,
    LeadershipJournal,
    UnknownBrokerError,
    demotion_plan,
    restoration_plan,
)
from app.actions.reassignment import ReassignmentRequest
from collectors.kafka.model import PartitionInfo, TopicPartition
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


def tp(topic: str, index: int) -> TopicPartition:
    return TopicPartition(topic, index)


def three_brokers() -> list[PartitionInfo]:
    return [
        partition("t", 0, [1, 2, 3]),
        partition("t", 1, [2, 1, 3]),
        partition("t", 2, [3, 2, 1], leader=1),  # broker 1 leads it after a failover
        partition("t", 3, [2, 3]),
        partition("solo", 0, [1]),
    ]


def test_demotion_reorders_the_preferred_partitions_so_the_broker_comes_last() -> None:
    plan = demotion_plan(cluster(*three_brokers()), 1)

    assert [(r.tp, r.before, r.after) for r in plan.reorders] == [(tp("t", 0), (1, 2, 3), (2, 3, 1))]
    for reorder in plan.reorders:
        assert sorted(reorder.before) == sorted(reorder.after), "a reorder adds and removes nothing"
    assert plan.to_elect == (tp("t", 0), tp("t", 2)), "the reordered ones and the one it leads"
    assert plan.left == ((tp("solo", 0), ONLY_REPLICA),)
    assert plan.restore_to == (ReassignmentRequest("t", 0, (1, 2, 3)),)


def test_partitions_being_moved_or_deleted_are_left_with_the_reason() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 4], adding=[4], removing=[3]),
        partition("gone", 0, [1, 2]),
        deleting=["gone"],
        brokers=(1, 2, 3, 4),
    )
    plan = demotion_plan(snapshot, 1)
    assert plan.reorders == ()
    assert dict(plan.left) == {tp("t", 0): BEING_REASSIGNED, tp("gone", 0): TOPIC_BEING_DELETED}


def test_an_unknown_broker_is_refused_and_a_registered_one_without_partitions_has_nothing_to_do() -> None:
    snapshot = cluster(*three_brokers(), brokers=(1, 2, 3, 9))
    with pytest.raises(UnknownBrokerError, match="broker 7 is not registered and holds no replica"):
        demotion_plan(snapshot, 7)
    plan = demotion_plan(snapshot, 9)
    assert (plan.reorders, plan.to_elect, plan.left) == ((), (), ())


def test_a_demotion_in_effect_is_carried_on_so_that_one_promotion_restores_both() -> None:
    # broker 1 was demoted already: t-0 is [2, 3, 1]; t-5 became its preferred since
    snapshot = cluster(partition("t", 0, [2, 3, 1]), partition("t", 5, [1, 3]))
    earlier = (ReassignmentRequest("t", 0, (1, 2, 3)),)
    plan = demotion_plan(snapshot, 1, earlier)
    assert plan.restore_to == (ReassignmentRequest("t", 0, (1, 2, 3)), ReassignmentRequest("t", 5, (1, 3)))


def test_restoration_puts_back_exactly_the_recorded_order_where_the_replica_set_is_unchanged() -> None:
    demoted = cluster(
        partition("t", 0, [2, 3, 1]),
        partition("t", 1, [3, 1, 2]),  # still the same set, in yet another order
        partition("t", 2, [2, 3, 4]),  # reassigned away from broker 1 since
        partition("t", 3, [1, 2], leader=2),  # already in order, not led by broker 1
        brokers=(1, 2, 3, 4),
    )
    recorded = [
        ReassignmentRequest("t", 0, (1, 2, 3)),
        ReassignmentRequest("t", 1, (1, 3, 2)),
        ReassignmentRequest("t", 2, (1, 2, 3)),
        ReassignmentRequest("t", 3, (1, 2)),
        ReassignmentRequest("t", 9, (1, 2)),
    ]
    plan = restoration_plan(demoted, 1, recorded)

    assert {r.tp: r.after for r in plan.reorders} == {tp("t", 0): (1, 2, 3), tp("t", 1): (1, 3, 2)}
    assert plan.to_elect == (tp("t", 0), tp("t", 1), tp("t", 3))
    left = dict(plan.left)
    assert left[tp("t", 9)] == PARTITION_GONE
    assert left[tp("t", 2)] == "replica set changed: recorded [1, 2, 3], now [2, 3, 4]"
    assert len(left) == 2


def test_restoring_what_is_restored_already_changes_nothing() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3]))
    plan = restoration_plan(snapshot, 1, [ReassignmentRequest("t", 0, (1, 2, 3))])
    assert (plan.reorders, plan.to_elect, plan.left) == ((), (), ())


def test_the_journal_round_trips_and_cuts_the_reorders_in_batches() -> None:
    partitions = [partition("t", i, [1, 2, 3]) for i in range(5)]
    plan = demotion_plan(cluster(*partitions, partition("solo", 0, [1])), 1)
    journal = LeadershipJournal.of(plan)
    assert len(plan.batches(size=2)) == 3
    assert LeadershipJournal.from_plan(journal.plan_json()) == journal
    assert journal.broker == 1
    assert journal.left == ((tp("solo", 0), ONLY_REPLICA),)
