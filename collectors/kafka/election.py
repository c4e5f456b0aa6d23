"""Partition leader election, after ``kafka.controller.Election`` and ``PartitionLeaderElectionAlgorithms``.

Each function takes a partition's current :class:`LeaderAndIsr` and returns the state the controller
writes (leader epoch + 1, the zk version kept for the compare-and-set), or ``None`` when no leader can be
elected by that strategy.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from collectors.kafka.model import NO_LEADER, LeaderAndIsr, LeaderRecoveryState


def _new_leader_and_isr(
    current: LeaderAndIsr,
    leader: int,
    isr: Sequence[int],
    controller_epoch: int,
    recovery: int | None = None,
) -> LeaderAndIsr:
    """Kafka's ``newLeaderAndIsr``: epoch + 1, and the previous leader recovery state unless given."""
    return replace(
        current,
        leader=leader,
        leader_epoch=current.leader_epoch + 1,
        isr=tuple(isr),
        controller_epoch=controller_epoch,
        leader_recovery_state=current.leader_recovery_state if recovery is None else recovery,
    )


def elect_offline(
    current: LeaderAndIsr,
    replicas: Sequence[int],
    live: Collection[int],
    controller_epoch: int,
    *,
    unclean_leader_election_enable: bool = False,
    leader_recovery_supported: bool = True,
) -> tuple[LeaderAndIsr, bool] | None:
    """The first live replica in AR order that is in the ISR; new ISR = old ISR ∩ live.

    Without one, and only if the topic allows it, the first live replica at all (an unclean election:
    ISR = [it], and ``leader_recovery_state`` RECOVERING where the protocol has it). Returns the new state
    and whether the election was unclean.
    """
    leader = next((r for r in replicas if r in live and r in current.isr), None)
    if leader is not None:
        isr = [r for r in current.isr if r in live]
        return _new_leader_and_isr(current, leader, isr, controller_epoch), False
    if not unclean_leader_election_enable:
        return None
    leader = next((r for r in replicas if r in live), None)
    if leader is None:
        return None
    recovery = LeaderRecoveryState.RECOVERING if leader_recovery_supported else None
    return _new_leader_and_isr(current, leader, [leader], controller_epoch, recovery), True


def elect_preferred(
    current: LeaderAndIsr, replicas: Sequence[int], live: Collection[int], controller_epoch: int
) -> LeaderAndIsr | None:
    """AR[0] when it is alive and in the ISR; the ISR is unchanged."""
    if not replicas:
        return None
    preferred = replicas[0]
    if preferred not in live or preferred not in current.isr:
        return None
    return _new_leader_and_isr(current, preferred, current.isr, controller_epoch)


def elect_for_reassignment(
    current: LeaderAndIsr, target_replicas: Sequence[int], live: Collection[int], controller_epoch: int
) -> LeaderAndIsr | None:
    """The first target replica that is alive and in the ISR; the ISR is unchanged."""
    leader = next((r for r in target_replicas if r in live and r in current.isr), None)
    if leader is None:
        return None
    return _new_leader_and_isr(current, leader, current.isr, controller_epoch)


def elect_for_controlled_shutdown(
    current: LeaderAndIsr,
    replicas: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
    controller_epoch: int,
) -> LeaderAndIsr | None:
    """The first replica alive, in the ISR and not shutting down; the ISR loses the shutting-down brokers."""
    leader = next((r for r in replicas if r in live and r in current.isr and r not in shutting_down), None)
    if leader is None:
        return None
    isr = [r for r in current.isr if r not in shutting_down]
    return _new_leader_and_isr(current, leader, isr, controller_epoch)


def remove_replica_from_isr(
    current: LeaderAndIsr, replica: int, controller_epoch: int
) -> LeaderAndIsr | None:
    """What the controller writes when a replica goes offline (``doRemoveReplicasFromIsr``).

    The replica leaves the ISR unless it is the last member (Kafka keeps an ISR of one, so that the
    partition's last in-sync replica stays known); if it led, the partition is left without a leader. The
    leader epoch goes up. ``None`` when the replica is not in the ISR (nothing to write).
    """
    if replica not in current.isr:
        return None
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != replica)
    leader = NO_LEADER if current.leader == replica else current.leader
    return _new_leader_and_isr(current, leader, isr, controller_epoch)
