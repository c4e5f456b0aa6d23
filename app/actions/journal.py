"""What an action persists before it writes anything to ZooKeeper, so that any instance of the service can
finish it after a crash: the plan (:class:`ReassignmentJournal`, :class:`ElectionJournal`, kept in the
record's ``plan``) and where it stands (:class:`Step`, in its ``progress``).

A reassignment's journal holds its batches, each partition's assignment before the action began (for a
rollback and for the throttles to remove) and the throttle entities it sets. Each batch goes ``pending`` →
``writing`` (recorded before the znode is created) → ``written`` (the znode exists) → done (the controller
deleted it: ``batches_done`` moves on). A batch found ``writing`` after a crash may or may not have reached
ZooKeeper; :func:`resolve_writing` decides from what ZooKeeper and the snapshot show.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.actions.reassignment import ReassignmentRequest
from collectors.kafka.model import ClusterSnapshot, TopicPartition

StepState = Literal["pending", "writing", "written"]
STEP_STATES: tuple[StepState, ...] = ("pending", "writing", "written")


class JournalError(ValueError):
    """A record whose plan or progress is not a journal this code wrote (a record from an older version)."""


def _items(raw: object, what: str) -> tuple[ReassignmentRequest, ...]:
    if not isinstance(raw, list):
        raise JournalError(f"{what} is not a list")
    items = []
    for entry in raw:
        try:
            items.append(
                ReassignmentRequest(
                    str(entry["topic"]), int(entry["partition"]), tuple(int(b) for b in entry["replicas"])
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"{what}: bad entry {entry!r}: {exc}") from None
    return tuple(items)


def items_from_json(raw: object, what: str) -> tuple[ReassignmentRequest, ...]:
    """Items as :func:`items_json` wrote them (:class:`JournalError` naming ``what`` when malformed)."""
    return _items(raw, what)


def items_json(items: Iterable[ReassignmentRequest]) -> list[dict[str, Any]]:
    return [{"topic": i.topic, "partition": i.partition, "replicas": list(i.replicas)} for i in items]


@dataclass(frozen=True, slots=True)
class ReassignmentJournal:
    batches: tuple[tuple[ReassignmentRequest, ...], ...]
    original: tuple[ReassignmentRequest, ...]
    """Each partition's replicas when the action was accepted (what a rollback returns to)."""
    throttled_brokers: tuple[int, ...]
    """Brokers whose throttle rates the action sets (and always removes)."""
    throttled_topics: tuple[str, ...]

    @property
    def items(self) -> tuple[ReassignmentRequest, ...]:
        return tuple(item for batch in self.batches for item in batch)

    @staticmethod
    def of(
        batches: Sequence[Sequence[ReassignmentRequest]],
        snapshot: ClusterSnapshot,
        throttled_brokers: Iterable[int],
    ) -> ReassignmentJournal:
        original = []
        for batch in batches:
            for item in batch:
                info = snapshot.partitions.get(item.tp)
                replicas = info.assignment.replicas if info is not None else ()
                original.append(ReassignmentRequest(item.topic, item.partition, tuple(replicas)))
        return ReassignmentJournal(
            batches=tuple(tuple(batch) for batch in batches),
            original=tuple(original),
            throttled_brokers=tuple(sorted(set(throttled_brokers))),
            throttled_topics=tuple(sorted({item.topic for batch in batches for item in batch})),
        )

    def plan_json(self) -> dict[str, Any]:
        return {
            "batch_plan": [items_json(batch) for batch in self.batches],
            "original": items_json(self.original),
            "throttles": {"brokers": list(self.throttled_brokers), "topics": list(self.throttled_topics)},
        }

    @staticmethod
    def from_plan(plan: Mapping[str, Any]) -> ReassignmentJournal:
        raw_batches = plan.get("batch_plan")
        if not isinstance(raw_batches, list):
            raise JournalError("the action's plan has no batch_plan (recorded by an older kafka-health)")
        throttles = plan.get("throttles") or {}
        try:
            brokers = tuple(int(b) for b in throttles.get("brokers", ()))
            topics = tuple(str(t) for t in throttles.get("topics", ()))
        except (AttributeError, TypeError, ValueError) as exc:
            raise JournalError(f"the action's throttles are malformed: {exc}") from None
        return ReassignmentJournal(
            batches=tuple(_items(b, f"batch {n + 1}") for n, b in enumerate(raw_batches)),
            original=_items(plan.get("original", []), "original assignment"),
            throttled_brokers=brokers,
            throttled_topics=topics,
        )


@dataclass(frozen=True, slots=True)
class ElectionJournal:
    partitions: tuple[TopicPartition, ...]
    """The partitions to elect, in chunk order (chunks are cut from this list by the recorded budget)."""
    budget_bytes: int

    def plan_json(self) -> dict[str, Any]:
        return {
            "to_elect_partitions": [[tp.topic, tp.partition] for tp in self.partitions],
            "budget_bytes": self.budget_bytes,
        }

    @staticmethod
    def from_plan(plan: Mapping[str, Any]) -> ElectionJournal:
        raw = plan.get("to_elect_partitions")
        if not isinstance(raw, list):
            raise JournalError("the action's plan has no partition list (recorded by an older kafka-health)")
        try:
            partitions = tuple(TopicPartition(str(t), int(p)) for t, p in raw)
            budget = int(plan["budget_bytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"the action's election plan is malformed: {exc}") from None
        return ElectionJournal(partitions, budget)


@dataclass(frozen=True, slots=True)
class Step:
    """Where the action stands: ``done`` chunks or batches finished, and the state of the next one."""

    done: int
    state: StepState = "pending"

    def json(self) -> dict[str, Any]:
        return {"done": self.done, "state": self.state}

    @staticmethod
    def from_progress(progress: Mapping[str, Any]) -> Step:
        raw = progress.get("step")
        if raw is None:
            return Step(0)
        try:
            done, state = int(raw["done"]), str(raw["state"])
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"the action's step is malformed: {exc}") from None
        if state not in STEP_STATES or done < 0:
            raise JournalError(f"the action's step is malformed: {raw!r}")
        return Step(done, state)


Resolution = Literal["written", "done", "rewrite", "foreign"]


def resolve_writing(
    znode: Mapping[TopicPartition, tuple[int, ...]] | None,
    targets: Mapping[TopicPartition, tuple[int, ...]],
    completed: Iterable[TopicPartition],
) -> Resolution:
    """A batch recorded ``writing`` when its executor stopped: did its znode reach ZooKeeper?

    ``znode`` is the content of the admin znode now (None: absent), ``targets`` the batch, ``completed`` the
    batch's partitions that the snapshot shows at their target and not moving. The controller shrinks the
    znode as partitions complete, so a znode naming only partitions of the batch, with their targets, is
    ours (``written``). Another content is someone else's (``foreign``: wait for it). No znode: ``done`` when
    every partition is at its target, else it never reached ZooKeeper (``rewrite``; writing a partition's
    current assignment again is a no-op for the controller).
    """
    if znode is not None:
        ours = all(targets.get(tp) == replicas for tp, replicas in znode.items())
        return "written" if ours else "foreign"
    return "done" if set(targets) <= set(completed) else "rewrite"


def rollback_items(
    journal: ReassignmentJournal, snapshot: ClusterSnapshot
) -> tuple[ReassignmentRequest, ...]:
    """The reassignment back to the recorded original replicas, for the partitions whose assignment differs
    from it now (the ones the action changed, or started to); partitions deleted since are left out."""
    items = []
    for original in journal.original:
        info = snapshot.partitions.get(original.tp)
        if info is None or not original.replicas:
            continue
        if tuple(info.assignment.replicas) != tuple(original.replicas) or info.assignment.is_being_reassigned:
            items.append(original)
    return tuple(items)
