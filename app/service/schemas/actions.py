"""``/actions``: runbook actions (preferred replica election, reassignment, demotion and promotion of a
broker, decommission) and their records.

No ``from __future__ import annotations`` here: :class:`ActionOut` declares its published module (see
:mod:`app.service.schemas.common`).
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictInt, model_validator

from app.actions.adaptive import AdaptiveThrottle
from app.actions.orders import (
    DecommissionOrder,
    DecommissionOutcome,
    ElectionOrder,
    ElectionOutcome,
    LeadershipOrder,
    LeadershipOutcome,
    ReassignmentOrder,
    ReassignmentOutcome,
    RollbackOrder,
)
from app.actions.reassignment import ReassignmentRequest
from app.actions.state import ActionRecord
from app.service.schemas.common import PUBLISHED_ACTIONS, BrokerId, Flag, PartitionNumber, Rate
from app.service.schemas.limits import MAX_PARTITIONS, MAX_REPLICAS, MAX_TOPIC_NAME, MAX_TOPICS, TopicName
from collectors.kafka.model import TopicPartition


class PartitionRef(BaseModel):
    topic: str = Field(min_length=1, max_length=MAX_TOPIC_NAME)
    partition: PartitionNumber


class ElectionIn(BaseModel):
    scope: Literal["all", "topics", "partitions"] = "all"
    topics: Annotated[list[TopicName], Field(max_length=MAX_TOPICS)] = Field(default_factory=list)
    partitions: Annotated[list[PartitionRef], Field(max_length=MAX_PARTITIONS)] = Field(default_factory=list)
    dry_run: Flag = True
    """Dry run by default: say ``"dry_run": false`` to change leaders."""
    budget_bytes: StrictInt = Field(default=512 * 1024, ge=1024, le=1024 * 1024 - 1024)

    def order(self) -> ElectionOrder:
        return ElectionOrder(
            scope=self.scope,
            topics=tuple(self.topics),
            partitions=tuple(TopicPartition(p.topic, p.partition) for p in self.partitions),
            dry_run=self.dry_run,
            budget_bytes=self.budget_bytes,
        )


class IneligibleOut(BaseModel):
    topic: str
    partition: int
    reason: str


class ElectionPlanOut(BaseModel):
    dry_run: bool
    to_elect: list[PartitionRef]
    ineligible: list[IneligibleOut]
    current_leaders: dict[str, int]
    predicted_leaders: dict[str, int]
    chunks: int
    action_id: str | None = None

    @classmethod
    def of(cls, outcome: ElectionOutcome, dry_run: bool) -> "ElectionPlanOut":
        plan = outcome.plan
        return cls(
            dry_run=dry_run,
            to_elect=[PartitionRef(topic=tp.topic, partition=tp.partition) for tp in plan.to_elect],
            ineligible=[
                IneligibleOut(topic=tp.topic, partition=tp.partition, reason=r) for tp, r in plan.ineligible
            ],
            current_leaders={str(b): n for b, n in sorted(plan.current_leaders.items())},
            predicted_leaders=outcome.predicted_leaders,
            chunks=outcome.chunks,
            action_id=None if outcome.action is None else outcome.action.id,
        )


class ActionOut(BaseModel):
    __module__ = PUBLISHED_ACTIONS

    id: str
    kind: str
    state: str
    requested_by: str
    requested_at: float
    started_at: float | None
    finished_at: float | None
    cancel_requested: bool
    request: dict[str, Any]
    plan: dict[str, Any]
    progress: dict[str, Any]
    result: dict[str, Any]
    error: str | None
    owner: str | None = None
    """The service instance executing it (a new leader adopts unfinished actions)."""
    rollback_of: str | None = None
    """The action this one rolls back."""
    cluster: str | None = None
    """The named cluster it acts on; null: the single unnamed cluster (a deployment without named
    clusters)."""

    @classmethod
    def of(cls, record: ActionRecord) -> "ActionOut":
        return cls(
            id=record.id,
            kind=record.kind,
            state=record.state.value,
            requested_by=record.requested_by,
            requested_at=record.requested_at,
            started_at=record.started_at,
            finished_at=record.finished_at,
            cancel_requested=record.cancel_requested,
            request=dict(record.request),
            plan=dict(record.plan),
            progress=dict(record.progress),
            result=dict(record.result),
            error=record.error,
            owner=record.owner,
            rollback_of=record.parent,
            cluster=record.cluster,
        )


class ReassignmentItem(BaseModel):
    topic: TopicName
    partition: PartitionNumber
    replicas: Annotated[list[BrokerId], Field(max_length=MAX_REPLICAS)]

    @classmethod
    def of(cls, item: ReassignmentRequest) -> "ReassignmentItem":
        return cls(topic=item.topic, partition=item.partition, replicas=list(item.replicas))


class ReassignmentIn(BaseModel):
    partitions: Annotated[list[ReassignmentItem], Field(max_length=MAX_PARTITIONS)]
    throttle_bytes_per_sec: Rate | None = None
    """Replication throttle while it runs (set before, always removed after); None: no throttle."""
    max_concurrent_moves: StrictInt = Field(default=10, ge=1, le=100_000)
    """Replicas added per batch: a batch is written only when the previous one completed."""
    allow_replication_factor_change: Flag = False
    dry_run: Flag = True
    throttle: AdaptiveThrottle | None = None
    """``{"mode": "adaptive", "min_bytes_per_s": .., "max_bytes_per_s": ..}``: a throttle that follows the
    brokers' health instead of ``throttle_bytes_per_sec`` (give one or the other)."""

    @model_validator(mode="after")
    def _one_throttle(self) -> "ReassignmentIn":
        if self.throttle is not None and self.throttle_bytes_per_sec is not None:
            raise ValueError("give throttle_bytes_per_sec (static) or throttle (adaptive), not both")
        return self

    def order(self) -> ReassignmentOrder:
        return ReassignmentOrder(
            tuple(ReassignmentRequest(i.topic, i.partition, tuple(i.replicas)) for i in self.partitions),
            throttle_bytes_per_sec=self.throttle_bytes_per_sec,
            max_concurrent_moves=self.max_concurrent_moves,
            allow_replication_factor_change=self.allow_replication_factor_change,
            dry_run=self.dry_run,
            adaptive=self.throttle,
        )


class RollbackIn(BaseModel):
    throttle_bytes_per_sec: Rate | None = None
    """Replication throttle of the rollback (set before, always removed after); None: no throttle."""
    max_concurrent_moves: StrictInt = Field(default=10, ge=1, le=100_000)
    dry_run: Flag = True
    """Dry run by default: say ``"dry_run": false`` to move the partitions back."""

    def order(self) -> RollbackOrder:
        return RollbackOrder(self.throttle_bytes_per_sec, self.max_concurrent_moves, self.dry_run)


class ReassignmentPlanOut(BaseModel):
    dry_run: bool
    partitions: int
    replicas_added: int
    batches: list[list[ReassignmentItem]]
    throttle_brokers: dict[str, dict[str, str]]
    throttle_topics: dict[str, dict[str, str]]
    action_id: str | None = None
    warnings: list[str] = Field(default_factory=list)
    """Risky but not wrong: a throttle below the moving partitions' measured produce rate."""
    rollback_of: str | None = None
    bytes_to_copy: int | None = None
    """Bytes the added replicas copy (each partition's leader's log size, from the brokers' metrics, per
    replica added); null when some moving partition's size is not known."""
    moves_with_unknown_size: int = 0
    """Entries that add replicas whose partition's size is not known."""
    estimated_s: float | None = None
    """Seconds the copies take at the throttle (the adaptive throttle's maximum), each batch as long as its
    busiest broker needs, sending or receiving; a lower bound (produce traffic adds to it). Null without a
    throttle or with a size not known."""

    @classmethod
    def of(cls, outcome: ReassignmentOutcome) -> "ReassignmentPlanOut":
        throttles = outcome.throttles
        return cls(
            dry_run=outcome.order.dry_run,
            partitions=len(outcome.order.items),
            replicas_added=outcome.replicas_added,
            batches=[[ReassignmentItem.of(item) for item in batch] for batch in outcome.batches],
            throttle_brokers={}
            if throttles is None
            else {str(b): dict(c) for b, c in throttles.broker_configs.items()},
            throttle_topics={}
            if throttles is None
            else {t: dict(c) for t, c in throttles.topic_configs.items()},
            action_id=None if outcome.action is None else outcome.action.id,
            warnings=list(outcome.warnings),
            rollback_of=outcome.order.parent,
            bytes_to_copy=outcome.bytes_to_copy,
            moves_with_unknown_size=outcome.moves_with_unknown_size,
            estimated_s=outcome.estimated_s,
        )


class LeadershipIn(BaseModel):
    """A demotion or promotion of ``broker``."""

    broker: BrokerId
    dry_run: Flag = True
    """Dry run by default: say ``"dry_run": false`` to reorder and elect."""

    def order(self) -> LeadershipOrder:
        return LeadershipOrder(self.broker, self.dry_run)


class ReorderOut(BaseModel):
    topic: str
    partition: int
    replicas_before: list[int]
    replicas_after: list[int]


class LeftOut(BaseModel):
    topic: str
    partition: int
    reason: str


class LeadershipPlanOut(BaseModel):
    dry_run: bool
    broker: int
    reorders: list[ReorderOut]
    """Replica lists reordered (the same brokers: nothing is copied)."""
    to_elect: list[PartitionRef]
    """Partitions elected once reordered (their first replica leads)."""
    left: list[LeftOut]
    """Partitions left alone, with the reason: the broker is their only replica, their topic is being
    deleted, they are being reassigned; for a promotion, their replica set changed since the demotion (or
    they were deleted)."""
    demotion: str | None = None
    """A promotion: the demotion whose recorded replica lists it restores. A demotion: an earlier demotion
    of the broker, not promoted since, whose record it carries on (a promotion restores both)."""
    action_id: str | None = None

    @classmethod
    def of(cls, outcome: LeadershipOutcome, dry_run: bool) -> "LeadershipPlanOut":
        plan = outcome.plan
        return cls(
            dry_run=dry_run,
            broker=plan.broker,
            reorders=[
                ReorderOut(
                    topic=r.tp.topic,
                    partition=r.tp.partition,
                    replicas_before=list(r.before),
                    replicas_after=list(r.after),
                )
                for r in plan.reorders
            ],
            to_elect=[PartitionRef(topic=tp.topic, partition=tp.partition) for tp in plan.to_elect],
            left=[LeftOut(topic=tp.topic, partition=tp.partition, reason=r) for tp, r in plan.left],
            demotion=outcome.demotion,
            action_id=None if outcome.action is None else outcome.action.id,
        )


class DecommissionIn(BaseModel):
    broker: BrokerId
    throttle_bytes_per_sec: Rate | None = None
    """Replication throttle while the replicas move (set before, always removed after); None: none."""
    max_concurrent_moves: StrictInt = Field(default=10, ge=1, le=100_000)
    dry_run: Flag = True
    """Dry run by default: say ``"dry_run": false`` to move the replicas off the broker."""

    def order(self) -> DecommissionOrder:
        return DecommissionOrder(
            self.broker, self.throttle_bytes_per_sec, self.max_concurrent_moves, self.dry_run
        )


class DecommissionPlanOut(BaseModel):
    dry_run: bool
    broker: int
    reassignment: ReassignmentPlanOut
    """The drain plan as the reassignment that carries it out (batches, throttles, bytes to copy)."""
    internal_partitions: int
    """Moving partitions of internal topics (``__consumer_offsets``, ...): they move like any other."""
    would_be_left: list[LeftOut]
    """Partitions of the broker the drain plan does not move, with the reason: the verification will
    find them (``removable: false``)."""
    verify: list[str]
    """What is verified once the replicas moved; the action's result says ``removable`` and ``left``."""
    action_id: str | None = None

    @classmethod
    def of(cls, outcome: DecommissionOutcome) -> "DecommissionPlanOut":
        action_id = None if outcome.action is None else outcome.action.id
        return cls(
            dry_run=outcome.reassignment.order.dry_run,
            broker=outcome.broker,
            reassignment=ReassignmentPlanOut.of(outcome.reassignment).model_copy(
                update={"action_id": action_id}
            ),
            internal_partitions=outcome.internal_partitions,
            would_be_left=[
                LeftOut(topic=tp.topic, partition=tp.partition, reason=r) for tp, r in outcome.skipped
            ],
            verify=list(outcome.checks),
            action_id=action_id,
        )
