"""``/plans``: rebalance and drain plans, and their submission as a reassignment.

No ``from __future__ import annotations`` here: :class:`LoadOut` declares its published module (see
:mod:`app.service.schemas.common`).
"""

from typing import Annotated

from pydantic import BaseModel, Field, StrictInt

from app.actions.orders import DrainOrder, PlanOutcome, RebalanceOrder
from app.actions.rebalance import LoadSummary, RebalancePlan
from app.actions.rebalance.plan import ReplicaMove
from app.actions.sizes import copy_bytes
from app.service.schemas.common import PUBLISHED_ACTIONS, BrokerId, Flag, Rate
from app.service.schemas.limits import MAX_BROKERS, MAX_TOPICS, TopicName

BrokerIds = Annotated[list[BrokerId], Field(max_length=MAX_BROKERS)]


class RebalanceIn(BaseModel):
    exclude_topics: Annotated[list[TopicName], Field(max_length=MAX_TOPICS)] = Field(default_factory=list)
    rated_deviation: float = Field(default=0.10, gt=0, le=1)
    brokers: BrokerIds | None = None
    """Brokers replicas and leadership may go to (default: every registered broker)."""
    leader_moves: Flag = True

    def order(self) -> RebalanceOrder:
        return RebalanceOrder(
            exclude_topics=tuple(self.exclude_topics),
            rated_deviation=self.rated_deviation,
            brokers=None if self.brokers is None else tuple(self.brokers),
            leader_moves=self.leader_moves,
        )


class DrainIn(BaseModel):
    brokers: BrokerIds | None = None
    rated_deviation: float = Field(default=0.10, gt=0, le=1)

    def order(self, broker_id: int) -> DrainOrder:
        brokers = None if self.brokers is None else tuple(self.brokers)
        return DrainOrder(broker_id, brokers=brokers, rated_deviation=self.rated_deviation)


class MoveOut(BaseModel):
    topic: str
    partition: int
    old_replicas: list[int]
    new_replicas: list[int]
    log_size_bytes: int | None = None
    """The partition's size (its leader's log size, from the brokers' metrics); null when not known."""
    bytes_to_copy: int | None = None
    """``log_size_bytes`` times the replicas the move adds; null when the size is not known."""


class LoadOut(BaseModel):
    __module__ = PUBLISHED_ACTIONS

    normalized_load: dict[str, float]
    deviation_rate: dict[str, float]
    stddev: float
    stddev_threshold: float
    imbalanced_brokers: list[int]

    @classmethod
    def of(cls, summary: LoadSummary) -> "LoadOut":
        return cls(
            normalized_load={str(b): v for b, v in sorted(summary.normalized_load.items())},
            deviation_rate={str(b): v for b, v in sorted(summary.deviation_rate.items())},
            stddev=summary.stddev,
            stddev_threshold=summary.stddev_threshold,
            imbalanced_brokers=list(summary.imbalanced_brokers),
        )


class PlanOut(BaseModel):
    id: str
    kind: str
    replica_moves: int
    leader_moves: int
    lower_bound_moves: int
    kafka_generate_moves: int | None
    moves: list[MoveOut]
    before: LoadOut
    after: LoadOut
    unresolved: list[int]
    warnings: list[str]
    load_source: str
    """``load window <start>-<end>`` from the store, or ``replica and leader counts`` when none."""
    bytes_to_copy: int | None = None
    """The moves' ``bytes_to_copy`` summed; null when some move's size is not known (no metrics)."""
    moves_with_unknown_size: int = 0
    """Moves whose partition's size is not known (their ``bytes_to_copy`` is null)."""

    @classmethod
    def of(cls, outcome: PlanOutcome) -> "PlanOut":
        plan: RebalancePlan = outcome.plan
        moves = [_move_out(m, outcome.sizes.get(m.tp)) for m in plan.moves]
        unknown = sum(m.bytes_to_copy is None for m in moves)
        return cls(
            id=outcome.id,
            kind=plan.kind,
            replica_moves=plan.replica_moves,
            leader_moves=len(plan.leader_moves),
            lower_bound_moves=plan.lower_bound_moves,
            kafka_generate_moves=plan.kafka_generate_moves,
            moves=moves,
            before=LoadOut.of(plan.before),
            after=LoadOut.of(plan.after),
            unresolved=list(plan.unresolved),
            warnings=list(plan.warnings),
            load_source=outcome.load_source,
            bytes_to_copy=None if unknown else sum(m.bytes_to_copy or 0 for m in moves),
            moves_with_unknown_size=unknown,
        )


def _move_out(move: ReplicaMove, size: int | None) -> MoveOut:
    return MoveOut(
        topic=move.tp.topic,
        partition=move.tp.partition,
        old_replicas=list(move.old_replicas),
        new_replicas=list(move.new_replicas),
        log_size_bytes=size,
        bytes_to_copy=copy_bytes(size, len(move.added)),
    )


class SubmitIn(BaseModel):
    throttle_bytes_per_sec: Rate | None = None
    max_concurrent_moves: StrictInt = Field(default=10, ge=1, le=100_000)
