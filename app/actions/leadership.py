"""Demoting and promoting a broker without moving data: the plans and the journal (pure).

A broker is *demoted* when it leads nothing: every partition whose preferred leader (first replica) it is
gets its replica list reordered so that it comes last (a reassignment that only reorders: the replica set
is the same, so Kafka's controller completes it without copying a byte), then a preferred replica election
hands leadership to the new first replica. Partitions it leads without being their preferred leader (after
a failover) are elected too, so that their preferred replica takes them back.

A demotion records each reordered partition's replica list as it was (``restore_to``); *promoting* the
broker puts exactly those lists back, for the partitions whose replica set is still the same (a partition
reassigned to other brokers since, or deleted, is reported and left alone), and elects again.

:func:`demotion_plan` and :func:`restoration_plan` are the plans; :class:`LeadershipJournal` is what the
action records before it writes anything (the executor in :mod:`app.actions.executor` runs it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.actions.election import DEFAULT_BUDGET_BYTES
from app.actions.journal import JournalError, items_from_json, items_json
from app.actions.reassignment import ReassignmentRequest
from collectors.kafka.model import ClusterSnapshot, TopicPartition

ONLY_REPLICA = "only replica"
"""The broker is the partition's only replica: no other replica could lead it."""
BEING_REASSIGNED = "being reassigned"
TOPIC_BEING_DELETED = "topic being deleted"
PARTITION_GONE = "partition no longer exists"
REPLICAS_CHANGED = "replica set changed"
ALREADY_RESTORED = "already in the recorded order"

REORDER_BATCH = 2000
"""Partitions per reorder written to ``/admin/reassign_partitions`` (about 100 KB of JSON: well under
ZooKeeper's ``jute.maxbuffer``); the next is written once the controller completed the last."""

Direction = Literal["demote", "promote"]
DEMOTE_BROKER = "demote-broker"
PROMOTE_BROKER = "promote-broker"
"""The actions' kinds."""


class UnknownBrokerError(ValueError):
    """The broker is not registered and holds no replica."""


@dataclass(frozen=True, slots=True)
class Reorder:
    """One partition's replica list before and after (the same brokers, another order)."""

    tp: TopicPartition
    before: tuple[int, ...]
    after: tuple[int, ...]

    @property
    def request(self) -> ReassignmentRequest:
        return ReassignmentRequest(self.tp.topic, self.tp.partition, self.after)


@dataclass(frozen=True, slots=True)
class LeadershipPlan:
    """A demotion or a promotion of ``broker``: the reorders, the partitions to elect afterwards, and the
    partitions left alone with the reason."""

    direction: Direction
    broker: int
    reorders: tuple[Reorder, ...]
    to_elect: tuple[TopicPartition, ...]
    left: tuple[tuple[TopicPartition, str], ...]
    restore_to: tuple[ReassignmentRequest, ...] = ()
    """A demotion's record of the replica lists to restore (these reorders' ``before``, plus what an earlier
    demotion of the broker still in effect recorded); empty for a promotion."""

    def batches(self, size: int = REORDER_BATCH) -> list[list[ReassignmentRequest]]:
        requests = [r.request for r in self.reorders]
        return [requests[i : i + size] for i in range(0, len(requests), size)]


def known_broker(snapshot: ClusterSnapshot, broker: int) -> None:
    """:class:`UnknownBrokerError` unless ``broker`` is registered or holds a replica."""
    if broker in snapshot.brokers:
        return
    if any(broker in info.assignment.replicas for info in snapshot.partitions.values()):
        return
    registered = ", ".join(str(b) for b in sorted(snapshot.brokers)) or "none"
    raise UnknownBrokerError(
        f"broker {broker} is not registered and holds no replica (registered: {registered})"
    )


def _deleting(snapshot: ClusterSnapshot) -> set[str]:
    return {t for t, info in snapshot.topics.items() if info.marked_for_deletion} | set(
        snapshot.pending.deletions
    )


def _moving(snapshot: ClusterSnapshot, tp: TopicPartition) -> bool:
    info = snapshot.partitions[tp]
    return info.assignment.is_being_reassigned or tp in snapshot.pending.reassignments


def demotion_plan(
    snapshot: ClusterSnapshot, broker: int, in_effect: Sequence[ReassignmentRequest] = ()
) -> LeadershipPlan:
    """Every partition ``broker`` is the preferred leader of, reordered so that it comes last (its other
    replicas keep their order), and a preferred election of those and of the partitions it leads now;
    ``in_effect`` is the record of an earlier demotion of the broker not promoted since (kept in this one's
    ``restore_to``, so that promoting restores both). :class:`UnknownBrokerError` for an unknown broker."""
    known_broker(snapshot, broker)
    deleting = _deleting(snapshot)
    reorders: list[Reorder] = []
    left: list[tuple[TopicPartition, str]] = []
    to_elect: dict[TopicPartition, None] = {}
    for tp, info in sorted(snapshot.partitions.items()):
        replicas = tuple(info.assignment.replicas)
        if broker not in replicas or (replicas[0] != broker and info.leader != broker):
            continue
        if len(replicas) == 1:
            left.append((tp, ONLY_REPLICA))
        elif tp.topic in deleting:
            left.append((tp, TOPIC_BEING_DELETED))
        elif _moving(snapshot, tp):
            left.append((tp, BEING_REASSIGNED))
        elif replicas[0] == broker:
            reorders.append(Reorder(tp, replicas, (*replicas[1:], broker)))
            to_elect[tp] = None
        else:
            to_elect[tp] = None  # led by the broker after a failover: its preferred replica takes it back
    recorded = {r.tp: r.request for r in reorders}
    restore_to = [ReassignmentRequest(r.tp.topic, r.tp.partition, r.before) for r in reorders]
    restore_to += [item for item in in_effect if item.tp not in recorded]
    return LeadershipPlan(
        "demote",
        broker,
        tuple(reorders),
        tuple(to_elect),
        tuple(left),
        tuple(sorted(restore_to, key=lambda i: i.tp)),
    )


def restoration_plan(
    snapshot: ClusterSnapshot, broker: int, restore_to: Sequence[ReassignmentRequest]
) -> LeadershipPlan:
    """The replica lists a demotion recorded, back, for each partition whose replica set is still the one
    recorded (in any order); then a preferred election of every recorded partition ``broker`` is first in
    and does not lead. Partitions deleted since, reassigned to another set of brokers, or moving now are
    left, with the reason."""
    known_broker(snapshot, broker)
    deleting = _deleting(snapshot)
    reorders: list[Reorder] = []
    left: list[tuple[TopicPartition, str]] = []
    to_elect: list[TopicPartition] = []
    for item in sorted(restore_to, key=lambda i: i.tp):
        tp, recorded = item.tp, tuple(item.replicas)
        info = snapshot.partitions.get(tp)
        if info is None:
            left.append((tp, PARTITION_GONE))
            continue
        now = tuple(info.assignment.replicas)
        if tp.topic in deleting:
            left.append((tp, TOPIC_BEING_DELETED))
        elif _moving(snapshot, tp):
            left.append((tp, BEING_REASSIGNED))
        elif sorted(now) != sorted(recorded):
            left.append((tp, f"{REPLICAS_CHANGED}: recorded {list(recorded)}, now {list(now)}"))
        else:
            if now != recorded:
                reorders.append(Reorder(tp, now, recorded))
            if recorded[0] == broker and (now != recorded or info.leader != broker):
                to_elect.append(tp)
    return LeadershipPlan("promote", broker, tuple(reorders), tuple(to_elect), tuple(left))


def led_by(snapshot: ClusterSnapshot, broker: int) -> list[TopicPartition]:
    """The partitions ``broker`` leads in the snapshot."""
    return sorted(tp for tp, info in snapshot.partitions.items() if info.leader == broker)


# --- the journal -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeadershipJournal:
    """What a demotion or promotion records before it writes: the broker, the reorder batches, the
    partitions to elect (in chunk order, cut by ``budget_bytes``), what it leaves alone, and, for a
    demotion, the replica lists a promotion restores."""

    broker: int
    batches: tuple[tuple[ReassignmentRequest, ...], ...]
    to_elect: tuple[TopicPartition, ...]
    budget_bytes: int
    restore_to: tuple[ReassignmentRequest, ...] = ()
    left: tuple[tuple[TopicPartition, str], ...] = ()

    @staticmethod
    def of(plan: LeadershipPlan, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> LeadershipJournal:
        return LeadershipJournal(
            plan.broker,
            tuple(tuple(batch) for batch in plan.batches()),
            plan.to_elect,
            budget_bytes,
            plan.restore_to,
            plan.left,
        )

    @property
    def items(self) -> tuple[ReassignmentRequest, ...]:
        return tuple(item for batch in self.batches for item in batch)

    def plan_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "batch_plan": [items_json(batch) for batch in self.batches],
            "to_elect_partitions": [[tp.topic, tp.partition] for tp in self.to_elect],
            "budget_bytes": self.budget_bytes,
            "restore_to": items_json(self.restore_to),
            "left": [{"topic": tp.topic, "partition": tp.partition, "reason": r} for tp, r in self.left],
        }

    @staticmethod
    def from_plan(plan: Mapping[str, Any]) -> LeadershipJournal:
        raw_batches = plan.get("batch_plan")
        raw_elect = plan.get("to_elect_partitions")
        if not isinstance(raw_batches, list) or not isinstance(raw_elect, list):
            raise JournalError("the action's plan has no reorder batches or partitions to elect")
        try:
            broker = int(plan["broker"])
            to_elect = tuple(TopicPartition(str(t), int(p)) for t, p in raw_elect)
            budget = int(plan["budget_bytes"])
            left = tuple(
                (TopicPartition(str(e["topic"]), int(e["partition"])), str(e["reason"]))
                for e in plan.get("left") or []
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"the action's plan is malformed: {exc}") from None
        return LeadershipJournal(
            broker,
            tuple(items_from_json(b, f"reorder batch {n + 1}") for n, b in enumerate(raw_batches)),
            to_elect,
            budget,
            items_from_json(plan.get("restore_to") or [], "recorded replica lists"),
            left,
        )


def restore_record(plan: Mapping[str, Any]) -> tuple[ReassignmentRequest, ...]:
    """A demotion's ``restore_to`` from its recorded plan (JournalError when malformed)."""
    return items_from_json(plan.get("restore_to") or [], "recorded replica lists")


def partitions_json(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]
