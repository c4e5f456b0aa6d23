"""``/plans``: rebalance and drain plans, and their submission as a reassignment.

No ``from __future__ import annotations`` here: :class:`LoadOut` declares its published module (see
:mod:`app.service.schemas.common`).
"""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints, field_validator

from app.actions.orders import DrainOrder, PlanOutcome, RebalanceOrder
from app.actions.rebalance import LoadSummary, RebalancePlan
from app.actions.rebalance.goals import GOALS, GoalOptions, GoalReport, check_goals
from app.actions.rebalance.plan import ReplicaMove
from app.actions.sizes import copy_bytes
from app.service.schemas.common import PUBLISHED_ACTIONS, BrokerId, Flag, Rate
from app.service.schemas.limits import MAX_BROKERS, MAX_TOPICS, TopicName

BrokerIds = Annotated[list[BrokerId], Field(max_length=MAX_BROKERS)]
GoalName = Annotated[str, StringConstraints(max_length=64)]
Goals = Annotated[
    list[GoalName], Field(max_length=len(GOALS), description=f"In priority order, of: {', '.join(GOALS)}")
]
Ratio = Annotated[float, Field(ge=0, le=1)]
MAX_BYTES = 2**63 - 1
"""The largest byte budget (a Java long, as Kafka counts bytes)."""


class OnlyOverIn(BaseModel):
    """Move replicas only off brokers over this threshold."""

    model_config = ConfigDict(extra="forbid")

    disk_used_ratio: Ratio


class _GoalsIn(BaseModel):
    goals: Goals | None = None
    """The goals in priority order (default: rack, disk_capacity, replica_capacity, load)."""
    disk_max_ratio: float = Field(default=0.80, gt=0, le=1)
    disk_band: Ratio = 0.10
    max_replicas_per_broker: Annotated[StrictInt, Field(ge=1, le=10_000_000)] | None = None

    @field_validator("goals")
    @classmethod
    def _goals(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            check_goals(value)
        return value

    def goal_options(
        self,
        only_over_disk_used_ratio: float | None = None,
        max_moves: int | None = None,
        max_bytes: int | None = None,
    ) -> GoalOptions:
        return GoalOptions(
            disk_max_ratio=self.disk_max_ratio,
            disk_band=self.disk_band,
            max_replicas_per_broker=self.max_replicas_per_broker,
            only_over_disk_used_ratio=only_over_disk_used_ratio,
            max_moves=max_moves,
            max_bytes=max_bytes,
        )


class RebalanceIn(_GoalsIn):
    exclude_topics: Annotated[list[TopicName], Field(max_length=MAX_TOPICS)] = Field(default_factory=list)
    rated_deviation: float = Field(default=0.10, gt=0, le=1)
    brokers: BrokerIds | None = None
    """Brokers replicas and leadership may move between (default: every registered broker)."""
    leader_moves: Flag = True
    only_over: OnlyOverIn | None = None
    max_moves: Annotated[StrictInt, Field(ge=0, le=100_000_000)] | None = None
    """At most this many replica moves (the most useful first); leader moves are free."""
    max_bytes: Annotated[StrictInt, Field(ge=0, le=MAX_BYTES)] | None = None
    """At most this many bytes copied (partitions of unknown size count 0)."""

    def order(self) -> RebalanceOrder:
        return RebalanceOrder(
            exclude_topics=tuple(self.exclude_topics),
            rated_deviation=self.rated_deviation,
            brokers=None if self.brokers is None else tuple(self.brokers),
            leader_moves=self.leader_moves,
            goals=None if self.goals is None else tuple(self.goals),
            options=self.goal_options(
                only_over_disk_used_ratio=None if self.only_over is None else self.only_over.disk_used_ratio,
                max_moves=self.max_moves,
                max_bytes=self.max_bytes,
            ),
        )


class DrainIn(_GoalsIn):
    brokers: BrokerIds | None = None
    rated_deviation: float = Field(default=0.10, gt=0, le=1)

    def order(self, broker_id: int) -> DrainOrder:
        brokers = None if self.brokers is None else tuple(self.brokers)
        return DrainOrder(
            broker_id,
            brokers=brokers,
            rated_deviation=self.rated_deviation,
            goals=None if self.goals is None else tuple(self.goals),
            options=self.goal_options(),
        )


class GoalOut(BaseModel):
    goal: str
    hard: bool
    measure: str
    """What ``before`` and ``after`` count (0: the goal is met)."""
    before: float | None
    after: float | None
    satisfied: bool | None
    """Null when it cannot be judged (no disk figures)."""
    moves: int
    """Replica moves made for this goal."""
    leader_moves: int
    why_not: str | None
    """What blocked it: rack spread, capacity, excluded brokers, the move budget, another listed goal, or
    none found by the search, with the brokers or partitions concerned; also missing figures."""
    lower_bound: int | None
    """No plan meets the goal with fewer moves; null when no bound is known."""
    ratio: float | None
    """Moves (leader goals: leader plus replica moves) over ``lower_bound``; null without a bound."""

    @classmethod
    def of(cls, report: GoalReport) -> "GoalOut":
        return cls(
            goal=report.goal,
            hard=report.hard,
            measure=report.measure,
            before=report.before,
            after=report.after,
            satisfied=report.satisfied,
            moves=report.moves,
            leader_moves=report.leader_moves,
            why_not=report.why_not,
            lower_bound=report.lower_bound,
            ratio=report.ratio,
        )


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
    goals: list[GoalOut] = Field(default_factory=list)
    """How each goal fared, in priority order."""

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
            goals=[GoalOut.of(g) for g in plan.goals],
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
