"""``/throttles``: the replication throttles of the cluster and their one-call cleanup."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.actions.throttle_removal import ClearOrder, ClearOutcome, EntityRef
from app.service.schemas.common import Flag, JavaInt
from app.service.schemas.limits import MAX_BROKERS, MAX_TOPICS, BrokerEntity, TopicName
from collectors.kafka.throttles import (
    BrokerThrottle,
    EntityType,
    ThrottledReplicas,
    ThrottleInventory,
    ThrottleProblem,
    ThrottleState,
    TopicThrottle,
)


class ThrottleProblemOut(BaseModel):
    code: str
    """``unknown_broker``, ``unknown_partition``, ``not_a_replica``, ``no_rate``, ``no_list``,
    ``empty_list``, ``zero_rate``, ``invalid_value``."""
    message: str

    @classmethod
    def of(cls, problem: ThrottleProblem) -> ThrottleProblemOut:
        return cls(code=problem.code, message=problem.message)


class ReplicaRef(BaseModel):
    partition: int
    broker: int


class ThrottledReplicasOut(BaseModel):
    value: str
    """As written in the topic's config."""
    all_replicas: bool
    """``*``: every replica of the topic."""
    replicas: list[ReplicaRef]
    malformed: list[str]

    @classmethod
    def of(cls, replicas: ThrottledReplicas | None) -> ThrottledReplicasOut | None:
        if replicas is None:
            return None
        return cls(
            value=replicas.value,
            all_replicas=replicas.all_replicas,
            replicas=[ReplicaRef(partition=p, broker=b) for p, b in replicas.pairs],
            malformed=list(replicas.malformed),
        )


class BrokerThrottleOut(BaseModel):
    entity: str
    """The broker id, or ``<default>`` (every broker without a rate of its own)."""
    broker: int | None
    registered: bool
    leader_rate: int | None
    """Bytes/s."""
    follower_rate: int | None
    config: dict[str, str]
    limits: list[str]
    """``leader``/``follower``: the directions in which the rate caps a listed replica now (empty: inert)."""
    state: ThrottleState
    used_by: list[str]
    """Ids of the unfinished actions that set it."""
    reassignment_running: bool
    problems: list[ThrottleProblemOut]

    @classmethod
    def of(cls, entry: BrokerThrottle) -> BrokerThrottleOut:
        return cls(
            entity=entry.entity,
            broker=entry.broker,
            registered=entry.registered,
            leader_rate=entry.leader_rate,
            follower_rate=entry.follower_rate,
            config=dict(entry.config),
            limits=list(entry.limits),
            state=entry.state,
            used_by=list(entry.used_by),
            reassignment_running=entry.reassignment_running,
            problems=[ThrottleProblemOut.of(p) for p in entry.problems],
        )


class TopicThrottleOut(BaseModel):
    topic: str
    leader: ThrottledReplicasOut | None
    """``leader.replication.throttled.replicas``, parsed (null: not set)."""
    follower: ThrottledReplicasOut | None
    config: dict[str, str]
    limits: list[str]
    state: ThrottleState
    used_by: list[str]
    reassignment_running: bool
    problems: list[ThrottleProblemOut]

    @classmethod
    def of(cls, entry: TopicThrottle) -> TopicThrottleOut:
        return cls(
            topic=entry.topic,
            leader=ThrottledReplicasOut.of(entry.leader),
            follower=ThrottledReplicasOut.of(entry.follower),
            config=dict(entry.config),
            limits=list(entry.limits),
            state=entry.state,
            used_by=list(entry.used_by),
            reassignment_running=entry.reassignment_running,
            problems=[ThrottleProblemOut.of(p) for p in entry.problems],
        )


class BrokerRatesOut(BaseModel):
    broker: int
    leader: int | None
    follower: int | None


class ThrottleSummaryOut(BaseModel):
    leftover: int
    in_use: int
    broker_entities: int
    topics: int
    brokers_throttled: list[int]
    """Registered brokers with a rate in force (their own or ``<default>``'s)."""
    limiting: int
    """Entries that cap some replica now (both halves present)."""
    with_problems: int


class ThrottlesOut(BaseModel):
    snapshot_version: int
    summary: ThrottleSummaryOut
    brokers: list[BrokerThrottleOut]
    topics: list[TopicThrottleOut]
    rates: list[BrokerRatesOut]
    """The rates in force per registered broker."""

    @classmethod
    def of(cls, inventory: ThrottleInventory, snapshot_version: int) -> ThrottlesOut:
        entries = inventory.entries
        return cls(
            snapshot_version=snapshot_version,
            summary=ThrottleSummaryOut(
                leftover=inventory.count(ThrottleState.LEFTOVER),
                in_use=inventory.count(ThrottleState.IN_USE),
                broker_entities=len(inventory.brokers),
                topics=len(inventory.topics),
                brokers_throttled=sorted(inventory.rates),
                limiting=sum(1 for e in entries if e.limits),
                with_problems=sum(1 for e in entries if e.problems),
            ),
            brokers=[BrokerThrottleOut.of(b) for b in inventory.brokers],
            topics=[TopicThrottleOut.of(t) for t in inventory.topics],
            rates=[
                BrokerRatesOut(broker=b, leader=r.get("leader"), follower=r.get("follower"))
                for b, r in inventory.rates.items()
            ],
        )


class ClearThrottlesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dry_run: Flag = True
    """Dry run by default: say ``"dry_run": false`` to remove."""
    include_in_use: Flag = False
    """Also remove throttles an unfinished action or a running reassignment uses."""
    brokers: Annotated[list[JavaInt | BrokerEntity], Field(max_length=MAX_BROKERS)] | None = None
    """Broker ids, or ``"<default>"``; with ``topics``, only the entities named are cleared."""
    topics: Annotated[list[TopicName], Field(max_length=MAX_TOPICS)] | None = None

    def order(self) -> ClearOrder:
        return ClearOrder(
            dry_run=self.dry_run,
            include_in_use=self.include_in_use,
            brokers=None if self.brokers is None else tuple(self.brokers),
            topics=None if self.topics is None else tuple(self.topics),
        )


class EntityOut(BaseModel):
    entity_type: EntityType
    entity: str

    @classmethod
    def of(cls, ref: EntityRef) -> EntityOut:
        return cls(entity_type=ref.entity_type, entity=ref.entity)


class RemovedOut(EntityOut):
    keys: dict[str, str]
    """The throttle keys removed (in a dry run: that would be), with their values."""


class SkippedOut(EntityOut):
    reason: str
    action_ids: list[str]


class FailedOut(EntityOut):
    error: str


class ClearThrottlesOut(BaseModel):
    dry_run: bool
    outcome: str
    """``dry-run``, ``SUCCEEDED``, ``PARTIAL`` (some failed), ``FAILED``."""
    removed: list[RemovedOut]
    skipped: list[SkippedOut]
    failed: list[FailedOut]
    not_throttled: list[EntityOut]

    @classmethod
    def of(cls, outcome: ClearOutcome) -> ClearThrottlesOut:
        return cls(
            dry_run=outcome.dry_run,
            outcome=outcome.state,
            removed=[
                RemovedOut(entity_type=r.ref.entity_type, entity=r.ref.entity, keys=dict(r.keys))
                for r in outcome.removed
            ],
            skipped=[
                SkippedOut(
                    entity_type=s.ref.entity_type,
                    entity=s.ref.entity,
                    reason=s.reason,
                    action_ids=list(s.action_ids),
                )
                for s in outcome.skipped
            ],
            failed=[
                FailedOut(entity_type=f.ref.entity_type, entity=f.ref.entity, error=f.error)
                for f in outcome.failed
            ],
            not_throttled=[EntityOut.of(r) for r in outcome.not_throttled],
        )
