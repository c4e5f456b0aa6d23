"""Runbook actions: their state machine, their record, and the log that keeps them (and the audit trail):
:class:`MemoryActionLog` here, :class:`app.actions.store.StoreActionLog` in the database.

PENDING → RUNNING → SUCCEEDED | PARTIAL | FAILED | CANCELLED; PENDING may also go straight to CANCELLED
or FAILED; RUNNING ⇄ STALLED (no progress for the set time, or falling behind that long: the action
still runs, and ends as a running one does). Terminal states stay terminal; any other transition raises
:class:`IllegalTransitionError`.

Several writers touch one record: its executor (progress, state), a cancel (any replica of the service), a
new executor adopting it after a crash or a failover. Every update is therefore a compare-and-set on the
record's ``version`` (:meth:`ActionLog.update`): a writer that read an old copy gets
:class:`StaleRecordError` with the current one instead of overwriting what another wrote (a cancel is never
lost under a progress update).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol


class ActionState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STALLED = "STALLED"
    SUCCEEDED = "SUCCEEDED"
    PARTIAL = "PARTIAL"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TRANSITIONS: Mapping[ActionState, frozenset[ActionState]] = {
    ActionState.PENDING: frozenset({ActionState.RUNNING, ActionState.CANCELLED, ActionState.FAILED}),
    ActionState.RUNNING: frozenset(
        {
            ActionState.STALLED,
            ActionState.SUCCEEDED,
            ActionState.PARTIAL,
            ActionState.FAILED,
            ActionState.CANCELLED,
        }
    ),
    ActionState.STALLED: frozenset(
        {
            ActionState.RUNNING,
            ActionState.SUCCEEDED,
            ActionState.PARTIAL,
            ActionState.FAILED,
            ActionState.CANCELLED,
        }
    ),
    ActionState.SUCCEEDED: frozenset(),
    ActionState.PARTIAL: frozenset(),
    ActionState.FAILED: frozenset(),
    ActionState.CANCELLED: frozenset(),
}
TERMINAL = frozenset(s for s, nexts in TRANSITIONS.items() if not nexts)
UNFINISHED = frozenset(ActionState) - TERMINAL
"""PENDING, RUNNING, STALLED: an executor runs these (or will adopt them)."""


class StaleRecordError(Exception):
    """An update based on an old copy of the record: ``current`` is the record as stored now (None: it is
    gone). The writer reads what changed (a cancel, a new owner) and decides again."""

    def __init__(self, action_id: str, current: ActionRecord | None) -> None:
        super().__init__(f"action {action_id} was changed by another writer")
        self.current = current


class IllegalTransitionError(ValueError):
    def __init__(self, action_id: str, current: ActionState, wanted: ActionState) -> None:
        super().__init__(f"action {action_id} is {current}: it cannot become {wanted}")
        self.current = current
        self.wanted = wanted


@dataclass(frozen=True, slots=True)
class ActionRecord:
    id: str
    kind: str
    """``preferred-replica-election``, ``reassignment``."""
    state: ActionState
    requested_by: str
    requested_at: float
    request: Mapping[str, Any]
    plan: Mapping[str, Any] = field(default_factory=dict)
    progress: Mapping[str, Any] = field(default_factory=dict)
    result: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    version: int = 0
    """Bumped by every update (compare-and-set: :meth:`ActionLog.update`)."""
    owner: str | None = None
    """The service instance executing it (None: none yet); a new leader takes it over."""
    parent: str | None = None
    """The action this one rolls back (a rollback's link to what it undoes)."""
    cluster: str | None = None
    """The named cluster it acts on (the key of ``[clusters.NAME]``); None: the single unnamed cluster of a
    deployment without named clusters. The log it is created in sets it (:meth:`ActionLog.create`)."""

    def moved_to(self, state: ActionState, **changes: Any) -> ActionRecord:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransitionError(self.id, self.state, state)
        now = time.time()
        extra: dict[str, Any] = {}
        if state is ActionState.RUNNING and self.started_at is None:
            extra["started_at"] = now
        if state in TERMINAL:
            extra["finished_at"] = now
        return replace(self, state=state, **(extra | changes))


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """Who did what, when, with which outcome: every action, dry run and refusal."""

    at: float
    who: str
    role: str
    action: str
    """``preferred-replica-election``, ``reassignment``, ``cancel``, ``ack``, ..."""
    dry_run: bool
    outcome: str
    """``accepted``, ``refused``, ``dry-run``, or the action's final state."""
    action_id: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    """The request, why it was refused, before/after summaries."""
    sequence: int = 0
    cluster: str | None = None
    """The named cluster the entry is about (None: the single unnamed cluster); the log it is appended to
    sets it."""


AUDIT_LISTED = 100
"""Items of a list an audit entry keeps (the first ones); ``<name>_total`` counts them all."""
AUDIT_TEXT = 1000
"""Characters of a text an audit entry keeps."""
AUDIT_DETAIL_BYTES = 64 * 1024
"""The most an audit entry's detail takes as JSON; a larger one keeps only its size and digest."""


def bounded_detail(detail: Mapping[str, Any]) -> dict[str, Any]:
    """``detail`` as the audit trail keeps it: every list cut to its first :data:`AUDIT_LISTED` items (with
    ``<key>_total``, the full count, beside it), every text to :data:`AUDIT_TEXT` characters, and, should it
    still pass :data:`AUDIT_DETAIL_BYTES`, replaced by its size and SHA-256. An audit row records who asked
    what; a request of 100,000 partitions once made a 16 MB row (issue 13), in a table kept for a year."""
    bounded = _bounded_mapping(detail)
    encoded = json.dumps(bounded, default=str, sort_keys=True).encode()
    if len(encoded) <= AUDIT_DETAIL_BYTES:
        return bounded
    return {"truncated": True, "bytes": len(encoded), "sha256": hashlib.sha256(encoded).hexdigest()}


def request_digest(request: Mapping[str, Any]) -> str:
    """The SHA-256 of a request (canonical JSON): the audit keeps it instead of the request itself, so that
    a request can be matched to its audit entry however large it was."""
    canonical = json.dumps(request, default=str, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _bounded_mapping(detail: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in detail.items():
        key = str(name)
        if isinstance(value, list | tuple) and len(value) > AUDIT_LISTED:
            out[key] = [_bounded(v) for v in value[:AUDIT_LISTED]]
            out.setdefault(f"{key}_total", len(value))
        else:
            out[key] = _bounded(value)
    if len(out) > AUDIT_LISTED:  # a mapping keyed by the request (partition -> replicas)
        kept = dict(list(out.items())[:AUDIT_LISTED])
        kept["keys_total"] = len(out)
        return kept
    return out


def _bounded(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _bounded_mapping(value)
    if isinstance(value, list | tuple):
        return [_bounded(v) for v in value[:AUDIT_LISTED]]
    if isinstance(value, str) and len(value) > AUDIT_TEXT:
        return value[:AUDIT_TEXT] + f"... ({len(value):,} characters)"
    return value


class ActionLog(Protocol):
    """Where actions and the audit trail are kept (the store in the service; memory in unit tests).

    A log is one cluster's: it creates, reads, lists and adopts only that cluster's actions and audit
    entries, and writes its cluster on the ones it creates (``record.cluster`` / ``entry.cluster`` are
    set to the log's). An action of another cluster is, to this log, an action that does not exist.
    """

    def create(self, record: ActionRecord) -> ActionRecord:
        """Insert a new action of the log's cluster (ValueError if its id exists, in any cluster); returns
        it as stored (version 1, ``cluster`` the log's)."""

    def update(self, record: ActionRecord) -> ActionRecord:
        """Replace the stored action if its version is still ``record.version``; returns it with the next
        version. :class:`StaleRecordError` (with the stored record) when another writer was first."""

    def get(self, action_id: str) -> ActionRecord | None: ...

    def records(
        self,
        state: str | None = None,
        limit: int = 100,
        offset: int = 0,
        kinds: Collection[str] | None = None,
    ) -> list[ActionRecord]:
        """The log's actions, newest first; ``state`` and ``kinds`` filter them."""

    def unfinished(self) -> list[ActionRecord]:
        """Every PENDING, RUNNING or STALLED action, oldest first (what an executor must run or adopt)."""

    def audit(self, entry: AuditEntry) -> None:
        """Append the entry, its detail bounded (:func:`bounded_detail`)."""

    def audit_entries(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]: ...


def new_action_id() -> str:
    return uuid.uuid4().hex[:12]


class MemoryActionLog:
    """An :class:`ActionLog` in memory (tests, or a service without a store): one cluster's (``cluster``,
    None: the single unnamed cluster), as each instance keeps its own actions."""

    def __init__(self, cluster: str | None = None) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self._actions: dict[str, ActionRecord] = {}
        self._audit: list[AuditEntry] = []
        self._sequence = itertools.count(1)

    def create(self, record: ActionRecord) -> ActionRecord:
        with self._lock:
            if record.id in self._actions:
                raise ValueError(f"action {record.id} exists already")
            stored = replace(record, version=1, cluster=self.cluster)
            self._actions[record.id] = stored
            return stored

    def update(self, record: ActionRecord) -> ActionRecord:
        with self._lock:
            current = self._actions.get(record.id)
            if current is None or current.version != record.version:
                raise StaleRecordError(record.id, current)
            stored = replace(record, version=record.version + 1, cluster=self.cluster)
            self._actions[record.id] = stored
            return stored

    def unfinished(self) -> list[ActionRecord]:
        with self._lock:
            records = [r for r in self._actions.values() if r.state in UNFINISHED]
        return sorted(records, key=lambda r: (r.requested_at, r.id))

    def get(self, action_id: str) -> ActionRecord | None:
        with self._lock:
            return self._actions.get(action_id)

    def records(
        self,
        state: str | None = None,
        limit: int = 100,
        offset: int = 0,
        kinds: Collection[str] | None = None,
    ) -> list[ActionRecord]:
        with self._lock:
            records = sorted(self._actions.values(), key=lambda r: r.requested_at, reverse=True)
        if state is not None:
            records = [r for r in records if r.state == state]
        if kinds is not None:
            records = [r for r in records if r.kind in kinds]
        return records[offset : offset + limit]

    def audit(self, entry: AuditEntry) -> None:
        detail = bounded_detail(entry.detail)
        with self._lock:
            self._audit.append(
                replace(entry, detail=detail, sequence=next(self._sequence), cluster=self.cluster)
            )

    def audit_entries(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
        with self._lock:
            entries = list(reversed(self._audit))
        return entries[offset : offset + limit]
