"""Partition leader election, checked against Kafka's ``kafka.controller.Election`` and
``PartitionLeaderElectionAlgorithms`` (docs/kafka-reference.md §2) and
``ReplicaStateMachine.doRemoveReplicasFromIsr``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from collectors.kafka.election import (
    elect_for_controlled_shutdown,
    elect_for_reassignment,
    elect_offline,
    elect_preferred,
    remove_replica_from_isr,
)
from collectors.kafka.model import NO_LEADER, LeaderAndIsr, LeaderRecoveryState

pytestmark = pytest.mark.unit

CONTROLLER_EPOCH = 9


def state(
    leader: int,
    isr: tuple[int, ...],
    *,
    leader_epoch: int = 4,
    controller_epoch: int = 3,
    recovery: int = LeaderRecoveryState.RECOVERED,
    zk_version: int = 17,
) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=leader,
        leader_epoch=leader_epoch,
        isr=isr,
        controller_epoch=controller_epoch,
        leader_recovery_state=recovery,
        zk_version=zk_version,
    )


# --- offline -----------------------------------------------------------------------------------------


def test_offline_elects_first_live_replica_in_assignment_order() -> None:
    result = elect_offline(state(1, (1, 2, 3)), [1, 2, 3], {2, 3}, CONTROLLER_EPOCH)

    assert result is not None
    new, unclean = result
    assert (new.leader, new.isr, unclean) == (2, (2, 3), False)


def test_offline_follows_assignment_order_not_isr_order() -> None:
    result = elect_offline(state(1, (1, 2, 3)), [3, 2, 1], {2, 3}, CONTROLLER_EPOCH)

    assert result is not None
    assert result[0].leader == 3


def test_offline_skips_live_replicas_outside_the_isr() -> None:
    result = elect_offline(state(1, (1, 3)), [1, 2, 3], {2, 3}, CONTROLLER_EPOCH)

    assert result is not None
    assert result[0].leader == 3
    assert result[0].isr == (3,)


def test_offline_new_isr_is_old_isr_intersected_with_live_in_isr_order() -> None:
    result = elect_offline(state(4, (3, 4, 1, 2)), [1, 2, 3, 4], {1, 2, 3}, CONTROLLER_EPOCH)

    assert result is not None
    assert result[0].leader == 1
    assert result[0].isr == (3, 1, 2)


def test_offline_without_live_isr_member_and_unclean_disabled_elects_nobody() -> None:
    assert elect_offline(state(1, (1,)), [1, 2, 3], {2, 3}, CONTROLLER_EPOCH) is None


def test_offline_unclean_elects_first_live_replica_and_marks_it_recovering() -> None:
    result = elect_offline(
        state(1, (1,)), [1, 3, 2], {2, 3}, CONTROLLER_EPOCH, unclean_leader_election_enable=True
    )

    assert result is not None
    new, unclean = result
    assert unclean is True
    assert new.leader == 3
    assert new.isr == (3,)
    assert new.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_offline_unclean_without_leader_recovery_support_stays_recovered() -> None:
    """Before IBP 3.2 there is no ``leader_recovery_state``: Kafka uses ``newLeaderAndIsr`` (state kept)."""
    result = elect_offline(
        state(1, (1,)),
        [1, 2, 3],
        {2, 3},
        CONTROLLER_EPOCH,
        unclean_leader_election_enable=True,
        leader_recovery_supported=False,
    )

    assert result is not None
    new, unclean = result
    assert (new.leader, new.isr, unclean) == (2, (2,), True)
    assert new.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_offline_unclean_enabled_still_prefers_a_clean_leader() -> None:
    result = elect_offline(
        state(1, (1, 3)), [1, 2, 3], {2, 3}, CONTROLLER_EPOCH, unclean_leader_election_enable=True
    )

    assert result is not None
    new, unclean = result
    assert (new.leader, new.isr, unclean) == (3, (3,), False)
    assert new.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_offline_with_no_live_replica_elects_nobody_even_unclean() -> None:
    assert (
        elect_offline(state(1, (1,)), [1, 2, 3], set(), CONTROLLER_EPOCH, unclean_leader_election_enable=True)
        is None
    )


def test_clean_offline_election_keeps_the_previous_leader_recovery_state() -> None:
    """Kafka's ``Election.leaderForOffline`` (3.2+): "Elect a new leader but keep the previous leader recovery
    state" -- a clean election uses ``LeaderAndIsr.newLeaderAndIsr``, which copies ``leaderRecoveryState``;
    only an unclean one (``newRecoveringLeaderAndIsr``) sets RECOVERING."""
    current = state(1, (1, 2), recovery=LeaderRecoveryState.RECOVERING)

    result = elect_offline(current, [1, 2], {2}, CONTROLLER_EPOCH)

    assert result is not None
    assert result[0].leader_recovery_state == LeaderRecoveryState.RECOVERING


# --- preferred ---------------------------------------------------------------------------------------


def test_preferred_elects_first_assigned_replica_and_keeps_the_isr() -> None:
    new = elect_preferred(state(2, (2, 3, 1)), [1, 2, 3], {1, 2, 3}, CONTROLLER_EPOCH)

    assert new is not None
    assert new.leader == 1
    assert new.isr == (2, 3, 1)


def test_preferred_not_possible_when_preferred_replica_is_down() -> None:
    assert elect_preferred(state(2, (1, 2, 3)), [1, 2, 3], {2, 3}, CONTROLLER_EPOCH) is None


def test_preferred_not_possible_when_preferred_replica_is_out_of_the_isr() -> None:
    assert elect_preferred(state(2, (2, 3)), [1, 2, 3], {1, 2, 3}, CONTROLLER_EPOCH) is None


def test_preferred_with_no_replicas() -> None:
    assert elect_preferred(state(2, (2,)), [], {2}, CONTROLLER_EPOCH) is None


def test_preferred_election_keeps_the_leader_recovery_state() -> None:
    """``Election.leaderForPreferredReplica`` uses ``LeaderAndIsr.newLeader``, which keeps the state."""
    new = elect_preferred(
        state(1, (1,), recovery=LeaderRecoveryState.RECOVERING), [1, 2], {1, 2}, CONTROLLER_EPOCH
    )

    assert new is not None
    assert new.leader_recovery_state == LeaderRecoveryState.RECOVERING


# --- reassignment ------------------------------------------------------------------------------------


def test_reassignment_elects_first_live_target_in_isr_and_keeps_the_isr() -> None:
    current = state(1, (1, 2, 3, 5, 6))

    new = elect_for_reassignment(current, [4, 5, 6], {1, 2, 3, 4, 5, 6}, CONTROLLER_EPOCH)

    assert new is not None
    assert new.leader == 5  # 4 is alive but not yet in the ISR
    assert new.isr == (1, 2, 3, 5, 6)


def test_reassignment_skips_dead_targets() -> None:
    new = elect_for_reassignment(state(1, (1, 4, 5, 6)), [4, 5, 6], {1, 5, 6}, CONTROLLER_EPOCH)

    assert new is not None
    assert new.leader == 5


def test_reassignment_without_a_live_target_in_isr() -> None:
    assert (
        elect_for_reassignment(state(1, (1, 2, 3)), [4, 5, 6], {1, 2, 3, 4, 5, 6}, CONTROLLER_EPOCH) is None
    )


# --- controlled shutdown -----------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_off_the_stopping_broker() -> None:
    new = elect_for_controlled_shutdown(state(1, (1, 2, 3)), [1, 2, 3], {1, 2, 3}, {1}, CONTROLLER_EPOCH)

    assert new is not None
    assert new.leader == 2
    assert new.isr == (2, 3)


def test_controlled_shutdown_removes_only_shutting_down_brokers_from_the_isr() -> None:
    """``isr.filter(replica => !shuttingDownBrokerIds.contains(replica))``: a dead ISR member stays."""
    new = elect_for_controlled_shutdown(state(1, (1, 3, 2)), [1, 2, 3], {1, 2}, {1}, CONTROLLER_EPOCH)

    assert new is not None
    assert new.leader == 2  # 3 is first in ISR order but dead
    assert new.isr == (3, 2)


def test_controlled_shutdown_skips_every_shutting_down_broker() -> None:
    new = elect_for_controlled_shutdown(state(1, (1, 2, 3)), [1, 2, 3], {1, 2, 3}, {1, 2}, CONTROLLER_EPOCH)

    assert new is not None
    assert (new.leader, new.isr) == (3, (3,))


def test_controlled_shutdown_without_a_candidate() -> None:
    assert elect_for_controlled_shutdown(state(1, (1,)), [1, 2, 3], {1, 2, 3}, {1}, CONTROLLER_EPOCH) is None


# --- replica leaves the ISR --------------------------------------------------------------------------


def test_remove_follower_from_isr_keeps_the_leader() -> None:
    new = remove_replica_from_isr(state(1, (1, 2, 3)), 2, CONTROLLER_EPOCH)

    assert new is not None
    assert (new.leader, new.isr) == (1, (1, 3))


def test_remove_leader_from_isr_leaves_the_partition_leaderless() -> None:
    new = remove_replica_from_isr(state(1, (1, 2, 3)), 1, CONTROLLER_EPOCH)

    assert new is not None
    assert (new.leader, new.isr) == (NO_LEADER, (2, 3))
    assert not new.has_leader


def test_remove_last_isr_member_keeps_an_isr_of_one() -> None:
    new = remove_replica_from_isr(state(1, (1,)), 1, CONTROLLER_EPOCH)

    assert new is not None
    assert (new.leader, new.isr) == (NO_LEADER, (1,))


def test_remove_replica_not_in_isr_writes_nothing() -> None:
    assert remove_replica_from_isr(state(1, (1, 2)), 3, CONTROLLER_EPOCH) is None


def test_remove_replica_keeps_the_leader_recovery_state() -> None:
    new = remove_replica_from_isr(
        state(1, (1, 2), recovery=LeaderRecoveryState.RECOVERING), 2, CONTROLLER_EPOCH
    )

    assert new is not None
    assert new.leader_recovery_state == LeaderRecoveryState.RECOVERING


# --- what every written state has in common ----------------------------------------------------------

Strategy = Callable[[LeaderAndIsr], LeaderAndIsr | None]

STRATEGIES: dict[str, Strategy] = {
    "offline": lambda s: r[0] if (r := elect_offline(s, [1, 2, 3], {2, 3}, CONTROLLER_EPOCH)) else None,
    "unclean": lambda s: (
        r[0]
        if (r := elect_offline(s, [4, 2, 3], {2, 3}, CONTROLLER_EPOCH, unclean_leader_election_enable=True))
        else None
    ),
    "preferred": lambda s: elect_preferred(s, [2, 1, 3], {1, 2, 3}, CONTROLLER_EPOCH),
    "reassignment": lambda s: elect_for_reassignment(s, [3, 4], {1, 2, 3, 4}, CONTROLLER_EPOCH),
    "controlled_shutdown": lambda s: elect_for_controlled_shutdown(
        s, [1, 2, 3], {1, 2, 3}, {1}, CONTROLLER_EPOCH
    ),
    "remove_replica": lambda s: remove_replica_from_isr(s, 1, CONTROLLER_EPOCH),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_election_bumps_leader_epoch_stamps_controller_epoch_and_keeps_zk_version(name: str) -> None:
    current = state(1, (1, 2, 3), leader_epoch=41, controller_epoch=3, zk_version=17)
    if name == "unclean":
        current = state(1, (1, 4), leader_epoch=41, controller_epoch=3, zk_version=17)

    new = STRATEGIES[name](current)

    assert new is not None
    assert new.leader_epoch == 42
    assert new.controller_epoch == CONTROLLER_EPOCH
    assert new.zk_version == 17  # the compare-and-set token of the write
    assert current.leader_epoch == 41  # the input is not modified
