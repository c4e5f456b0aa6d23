"""What a rebalance or drain plan says: the moves, the load before and after, what it left alone and why.

The planners (:mod:`app.actions.rebalance.planners`) build a :class:`RebalancePlan`; the service shows it
and hands :meth:`RebalancePlan.requests` to the reassignment action.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from analytics.load_model import LoadReport
from app.actions.reassignment import ReassignmentRequest

if TYPE_CHECKING:
    from app.actions.rebalance.goals import GoalReport
from collectors.kafka.model import TopicPartition

# Why a partition is left where it is
SKIP_DELETING = "topic being deleted"
SKIP_REASSIGNING = "being reassigned"
SKIP_NO_STATE = "no state"
SKIP_OFFLINE = "offline"
SKIP_DEAD_REPLICA = "replica on an unregistered broker"

MAX_LISTED = 20
"""Brokers or partitions a warning or an error names before it says how many more there are."""


@dataclass(frozen=True, slots=True)
class ReplicaMove:
    """A partition whose replica set changes. ``new_replicas[0]`` is the leader the plan expects."""

    tp: TopicPartition
    old_replicas: tuple[int, ...]
    new_replicas: tuple[int, ...]
    old_leader: int
    new_leader: int

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(b for b in self.new_replicas if b not in self.old_replicas)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(b for b in self.old_replicas if b not in self.new_replicas)


@dataclass(frozen=True, slots=True)
class LeaderMove:
    """Leadership handed to another in-sync replica: the same replicas, the new leader first, then a
    preferred election. No data moves."""

    tp: TopicPartition
    replicas: tuple[int, ...]
    old_leader: int
    new_leader: int


@dataclass(frozen=True, slots=True)
class LoadSummary:
    """The load model's verdict on a set of brokers (from :func:`compute_load`)."""

    normalized_load: Mapping[int, float]
    deviation_rate: Mapping[int, float]
    stddev: float
    stddev_threshold: float
    imbalanced_brokers: tuple[int, ...]
    metrics: tuple[str, ...]

    @property
    def max_abs_deviation(self) -> float:
        return max((abs(v) for v in self.deviation_rate.values()), default=0.0)

    @staticmethod
    def from_report(report: LoadReport) -> LoadSummary:
        frame = report.brokers
        brokers = [int(b) for b in frame.index]
        return LoadSummary(
            normalized_load=dict(zip(brokers, frame["normalized_load"].astype(float), strict=True)),
            deviation_rate=dict(zip(brokers, frame["deviation_rate"].astype(float), strict=True)),
            stddev=report.stddev,
            stddev_threshold=report.stddev_threshold,
            imbalanced_brokers=report.imbalanced_brokers,
            metrics=report.metrics,
        )


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    kind: Literal["rebalance", "drain"]
    moves: tuple[ReplicaMove, ...]
    leader_moves: tuple[LeaderMove, ...]
    replica_moves: int
    """Replicas added over all moves (each one a copy of a partition to a new broker)."""
    lower_bound_moves: int
    """No plan under the same model and constraints can do with fewer replica moves."""
    kafka_generate_moves: int | None
    """Replicas ``kafka-reassign-partitions --generate`` would move laying the same topics out from scratch
    over the same brokers (None where it would refuse, e.g. a replication factor above the broker count)."""
    before: LoadSummary
    after: LoadSummary
    rated_deviation: float
    leader_factors: Mapping[str, float]
    """Leader / follower load per metric as attributed (inf: leaders only)."""
    unresolved: tuple[int, ...] = ()
    """Brokers still outside the band after the plan (no move could help them)."""
    skipped: tuple[tuple[TopicPartition, str], ...] = ()
    """Partitions the plan may not touch, with the reason (excluded topics are not listed)."""
    warnings: tuple[str, ...] = ()
    goals: tuple[GoalReport, ...] = ()
    """How each goal fared, in the priority order worked to (:mod:`app.actions.rebalance.goals`)."""

    def reassignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        """Target replicas for ``/admin/reassign_partitions``: the moves and the leader reorderings."""
        targets = {m.tp: m.new_replicas for m in self.moves}
        targets.update((m.tp, m.replicas) for m in self.leader_moves)
        return dict(sorted(targets.items()))

    def requests(self) -> list[ReassignmentRequest]:
        return [ReassignmentRequest(tp.topic, tp.partition, r) for tp, r in self.reassignment().items()]

    def elections(self) -> tuple[TopicPartition, ...]:
        """Partitions whose leader must change once reassigned: a preferred election puts ``replicas[0]`` in
        (the controller already does it for a partition whose old leader left its replicas)."""
        tps = {m.tp for m in self.leader_moves}
        tps.update(
            m.tp for m in self.moves if m.new_leader != m.old_leader and m.old_leader in m.new_replicas
        )
        return tuple(sorted(tps))


def listed_brokers(brokers: Iterable[int]) -> str:
    listed = sorted(set(brokers))
    text = ", ".join(str(b) for b in listed[:MAX_LISTED])
    return text + (f" and {len(listed) - MAX_LISTED} more" if len(listed) > MAX_LISTED else "")


def listed_partitions(tps: Sequence[TopicPartition]) -> str:
    text = ", ".join(str(tp) for tp in tps[:MAX_LISTED])
    return text + (f" and {len(tps) - MAX_LISTED} more" if len(tps) > MAX_LISTED else "")
