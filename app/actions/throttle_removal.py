"""Replication throttles: which the service's own unfinished actions use, and their removal.

:func:`remove_throttles` is the one removal of throttle configs: a read-modify-write of each entity's
config through :class:`~collectors.kafka.admin.AdminZooKeeper` (whose ``set_config`` notifies the brokers
through ``/config/changes``, as ``kafka-configs`` does) that drops only the four throttle keys and keeps
every other key; an entity without a throttle key is not written at all (no notification for nothing). It
keeps going past a failure and reports each, so that one unreachable entity does not leave the others
throttled. The reassignment executor's own removal and ``POST /api/v1/throttles/clear`` both use it.

:class:`ThrottleCleaner` is what the throttle routes call: the inventory of the live snapshot
(:func:`collectors.kafka.throttles.throttle_inventory`) with the actions of the log that are not finished
as its users (:func:`throttle_users`), and the one-call cleanup: a dry run by default, throttles in use
skipped unless asked for, each call audited as ``clear-throttles``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.actions.state import ActionLog, ActionRecord, ActionState, AuditEntry, request_digest
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.throttles import (
    EntityType,
    ThrottleEntry,
    ThrottleInventory,
    ThrottleState,
    ThrottleUser,
    throttle_inventory,
)
from collectors.kafka.zkdata import DEFAULT_BROKER_CONFIG_ENTITY

log = logging.getLogger(__name__)

CLEAR_THROTTLES = "clear-throttles"
"""The audit trail's action name of ``POST /api/v1/throttles/clear``."""
_REASSIGNMENT = "reassignment"
_AUDIT_LISTED = 100
_PROBLEMS_IN_MESSAGE = 5
"""Bad entries a refusal's message names; it counts the others."""


# --- who uses them ---------------------------------------------------------------------------------------


def throttle_user(record: ActionRecord) -> ThrottleUser | None:
    """The throttles an unfinished action holds: ``plan["throttles"] = {"brokers": [ids], "topics":
    [names]}`` as its executor records it. A throttled reassignment without that record (written before
    the executors recorded it) holds its request's topics and, since its brokers are not known, every
    broker: better a leftover kept than a running move unthrottled."""
    recorded = record.plan.get("throttles")
    if isinstance(recorded, Mapping):
        brokers = recorded.get("brokers") or []
        topics = recorded.get("topics") or []
        return ThrottleUser(
            record.id,
            brokers=frozenset(int(b) for b in brokers if _is_broker_id(b)),
            topics=frozenset(str(t) for t in topics),
        )
    if record.kind != _REASSIGNMENT or record.request.get("throttle_bytes_per_sec") is None:
        return None
    items = record.request.get("partitions") or []
    topics = {str(i["topic"]) for i in items if isinstance(i, Mapping) and "topic" in i}
    return ThrottleUser(record.id, topics=frozenset(topics), all_brokers=True)


def _is_broker_id(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and value.isdecimal()


def throttle_users(actions: ActionLog) -> list[ThrottleUser]:
    return [user for record in actions.unfinished() if (user := throttle_user(record)) is not None]


def inventory_of(snapshot: ClusterSnapshot, actions: ActionLog | None) -> ThrottleInventory:
    """The snapshot's throttles with the log's unfinished actions as their users (none without a log).
    The log is read only when the snapshot has a throttle (``/metrics`` asks at every scrape)."""
    return throttle_inventory(snapshot, _lazy_users(actions) if actions is not None else ())


def _lazy_users(actions: ActionLog) -> Iterator[ThrottleUser]:
    yield from throttle_users(actions)


# --- the removal -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntityRef:
    entity_type: EntityType
    entity: str

    def __str__(self) -> str:
        return f"{self.entity_type.value} {self.entity}"


@dataclass(frozen=True, slots=True)
class Removed:
    ref: EntityRef
    keys: Mapping[str, str]
    """The throttle keys removed, with the values they had."""


@dataclass(frozen=True, slots=True)
class Failed:
    ref: EntityRef
    error: str


@dataclass(frozen=True, slots=True)
class RemovalReport:
    removed: tuple[Removed, ...] = ()
    unchanged: tuple[EntityRef, ...] = ()
    """Entities whose config held no throttle key when read: nothing written."""
    failed: tuple[Failed, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def first_error(self) -> str | None:
        return (
            None
            if self.ok
            else f"could not remove the throttle of {self.failed[0].ref}: " + (self.failed[0].error)
        )


def remove_throttles(
    admin: AdminZooKeeper, *, brokers: Iterable[int | str] = (), topics: Iterable[str] = ()
) -> RemovalReport:
    """Remove the rates from each broker entity (an id or ``<default>``) and the replica lists from each
    topic, keeping every other key (see the module docstring). Each entity is read, then written only if
    it held a throttle key; a failure is recorded and the next entity tried."""
    refs = [EntityRef(EntityType.BROKER, str(b)) for b in dict.fromkeys(brokers)]
    refs += [EntityRef(EntityType.TOPIC, t) for t in dict.fromkeys(topics)]
    removed: list[Removed] = []
    unchanged: list[EntityRef] = []
    failed: list[Failed] = []
    for ref in refs:
        keys = ref.entity_type.keys
        zk_type = ref.entity_type.zk_type
        try:
            config = admin.get_config(zk_type, ref.entity)
            dropped = {k: v for k, v in config.items() if k in keys}
            if not dropped:
                unchanged.append(ref)
                continue
            admin.set_config(zk_type, ref.entity, {k: v for k, v in config.items() if k not in keys})
        except Exception as exc:
            log.warning("could not remove the throttle of %s: %s", ref, exc)
            failed.append(Failed(ref, f"{type(exc).__name__}: {exc}"))
        else:
            removed.append(Removed(ref, dropped))
    return RemovalReport(tuple(removed), tuple(unchanged), tuple(failed))


# --- the cleanup -----------------------------------------------------------------------------------------


class InvalidThrottleRequestError(ValueError):
    """A clear request that names something no entity can be (the service answers 422)."""


@dataclass(frozen=True, slots=True)
class ClearOrder:
    """``POST /api/v1/throttles/clear``: which throttles to remove. With neither ``brokers`` nor
    ``topics`` every throttle; with either, only the entities named (an absent list: none of that type)."""

    dry_run: bool = True
    include_in_use: bool = False
    brokers: tuple[int | str, ...] | None = None
    """Broker ids, or ``"<default>"`` for the cluster-wide broker config."""
    topics: tuple[str, ...] | None = None

    def selection(self) -> tuple[set[str] | None, set[str] | None]:
        """The broker entities and topics named (None: every one), checked; InvalidThrottleRequestError
        naming every bad entry."""
        problems: list[str] = []
        brokers: set[str] | None = None
        if self.brokers is not None:
            brokers = set()
            for b in self.brokers:
                if b == DEFAULT_BROKER_CONFIG_ENTITY or _is_broker_id(b):
                    brokers.add(str(b))
                else:
                    problems.append(f"brokers: {b!r} is not a broker id (an integer >= 0) or '<default>'")
        topics: set[str] | None = None
        if self.topics is not None:
            topics = set()
            for t in self.topics:
                if not t or t in (".", "..") or "/" in t:
                    problems.append(f"topics: {t!r} is not a topic name")
                else:
                    topics.add(t)
        if problems:
            message = "; ".join(problems[:_PROBLEMS_IN_MESSAGE])
            if len(problems) > _PROBLEMS_IN_MESSAGE:
                message += (
                    f"; and {len(problems) - _PROBLEMS_IN_MESSAGE:,} more ({len(problems):,} bad entries)"
                )
            raise InvalidThrottleRequestError(message)
        if brokers is None and topics is None:
            return None, None
        return brokers or set(), topics or set()

    def as_request(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "include_in_use": self.include_in_use,
            "brokers": None if self.brokers is None else list(self.brokers),
            "topics": None if self.topics is None else list(self.topics),
        }


@dataclass(frozen=True, slots=True)
class Skipped:
    ref: EntityRef
    reason: str
    action_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClearPlan:
    targets: tuple[ThrottleEntry, ...]
    """The entries to remove."""
    skipped: tuple[Skipped, ...]
    not_throttled: tuple[EntityRef, ...]
    """Entities named in the order that have no throttle."""


def plan_clear(
    inventory: ThrottleInventory,
    *,
    include_in_use: bool = False,
    brokers: set[str] | None = None,
    topics: set[str] | None = None,
) -> ClearPlan:
    """The inventory's entries selected by ``brokers`` and ``topics`` (None and None: all of them), minus
    those in use unless ``include_in_use``."""
    everything = brokers is None and topics is None
    targets: list[ThrottleEntry] = []
    skipped: list[Skipped] = []
    for entry in inventory.entries:
        names = brokers if entry.entity_type is EntityType.BROKER else topics
        if not everything and entry.entity not in (names or set()):
            continue
        if entry.state is ThrottleState.IN_USE and not include_in_use:
            skipped.append(Skipped(EntityRef(entry.entity_type, entry.entity), _in_use(entry), entry.used_by))
        else:
            targets.append(entry)
    not_throttled = [
        EntityRef(entity_type, name)
        for entity_type, names in ((EntityType.BROKER, brokers), (EntityType.TOPIC, topics))
        for name in sorted(names or ())
        if inventory.find(entity_type, name) is None
    ]
    return ClearPlan(tuple(targets), tuple(skipped), tuple(not_throttled))


def _in_use(entry: ThrottleEntry) -> str:
    reasons = []
    if entry.used_by:
        reasons.append(f"in use by action {', '.join(entry.used_by)}, which has not finished")
    if entry.reassignment_running:
        what = (
            "partitions of the topic" if entry.entity_type is EntityType.TOPIC else "replicas on the broker"
        )
        reasons.append(f"a reassignment running in ZooKeeper moves {what}")
    return "; ".join(reasons) + " (include_in_use removes it anyway)"


@dataclass(frozen=True, slots=True)
class ClearOutcome:
    dry_run: bool
    removed: tuple[Removed, ...]
    """Removed; in a dry run, what would be (the keys as the snapshot shows them)."""
    skipped: tuple[Skipped, ...]
    failed: tuple[Failed, ...]
    not_throttled: tuple[EntityRef, ...]
    """Named but without a throttle (in the snapshot, or in ZooKeeper when read before writing)."""

    @property
    def state(self) -> str:
        """The audit's outcome: ``dry-run``, else SUCCEEDED, PARTIAL (some failed) or FAILED (all did)."""
        if self.dry_run:
            return "dry-run"
        if not self.failed:
            return ActionState.SUCCEEDED.value
        return ActionState.PARTIAL.value if self.removed else ActionState.FAILED.value


class ThrottleCleaner:
    """What the throttle routes call (see the module docstring). ``snapshot`` reads the live snapshot."""

    def __init__(
        self, actions: ActionLog, admin: AdminZooKeeper, snapshot: Callable[[], ClusterSnapshot]
    ) -> None:
        self._actions = actions
        self._admin = admin
        self._snapshot = snapshot

    def inventory(self, snapshot: ClusterSnapshot | None = None) -> ThrottleInventory:
        """The inventory of ``snapshot`` (else the live one) with the log's unfinished actions."""
        return inventory_of(self._snapshot() if snapshot is None else snapshot, self._actions)

    def clear(self, who: str, role: str, order: ClearOrder) -> ClearOutcome:
        """The dry run, or the removal; audited either way, refusals included."""
        try:
            brokers, topics = order.selection()
        except InvalidThrottleRequestError as exc:
            self._audit(who, role, order, "refused", {"reason": str(exc)})
            raise
        inventory = self.inventory()
        plan = plan_clear(inventory, include_in_use=order.include_in_use, brokers=brokers, topics=topics)
        if order.dry_run:
            removed = tuple(Removed(EntityRef(e.entity_type, e.entity), e.config) for e in plan.targets)
            outcome = ClearOutcome(True, removed, plan.skipped, (), plan.not_throttled)
        else:
            report = remove_throttles(
                self._admin,
                brokers=[e.entity for e in plan.targets if e.entity_type is EntityType.BROKER],
                topics=[e.entity for e in plan.targets if e.entity_type is EntityType.TOPIC],
            )
            outcome = ClearOutcome(
                False, report.removed, plan.skipped, report.failed, (*plan.not_throttled, *report.unchanged)
            )
        self._audit(who, role, order, outcome.state, _detail(outcome))
        return outcome

    def _audit(self, who: str, role: str, order: ClearOrder, outcome: str, detail: Mapping[str, Any]) -> None:
        self._actions.audit(
            AuditEntry(
                time.time(),
                who,
                role,
                CLEAR_THROTTLES,
                order.dry_run,
                outcome,
                None,
                # the request's lists are cut to their first entries in the row (ActionLog.audit): its
                # digest tells which request it was
                {
                    "request": order.as_request(),
                    "request_sha256": request_digest(order.as_request()),
                    **detail,
                },
            )
        )


def _detail(outcome: ClearOutcome) -> dict[str, Any]:
    def refs(items: Sequence[EntityRef]) -> list[str]:
        return [str(r) for r in items[:_AUDIT_LISTED]]

    return {
        "removed": [{"entity": str(r.ref), "keys": dict(r.keys)} for r in outcome.removed[:_AUDIT_LISTED]],
        "skipped": [
            {"entity": str(s.ref), "actions": list(s.action_ids)} for s in outcome.skipped[:_AUDIT_LISTED]
        ],
        "failed": [{"entity": str(f.ref), "error": f.error} for f in outcome.failed],
        "not_throttled": refs(outcome.not_throttled),
    }
