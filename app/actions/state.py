"""Runbook actions: their state machine, their record, and the log that keeps them (and the audit trail).

PENDING → RUNNING → SUCCEEDED | PARTIAL | FAILED | CANCELLED; PENDING may also go straight to CANCELLED
or FAILED. Terminal states stay terminal; any other transition raises :class:`IllegalTransitionError`.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol


class ActionState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    PARTIAL = "PARTIAL"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TRANSITIONS: Mapping[ActionState, frozenset[ActionState]] = {
    ActionState.PENDING: frozenset({ActionState.RUNNING, ActionState.CANCELLED, ActionState.FAILED}),
    ActionState.RUNNING: frozenset(
        {ActionState.SUCCEEDED, ActionState.PARTIAL, ActionState.FAILED, ActionState.CANCELLED}
    ),
    ActionState.SUCCEEDED: frozenset(),
    ActionState.PARTIAL: frozenset(),
    ActionState.FAILED: frozenset(),
    ActionState.CANCELLED: frozenset(),
}
TERMINAL = frozenset(s for s, nexts in TRANSITIONS.items() if not nexts)


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

    def moved_to(self, state: ActionState, **changes: Any) -> ActionRecord:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransitionError(self.id, self.state, state)
        now = time.time()
        extra: dict[str, Any] = {}
        if state is ActionState.RUNNING:
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


class ActionLog(Protocol):
    """Where actions and the audit trail are kept (the store in the service; memory in unit tests)."""

    def save(self, record: ActionRecord) -> None: ...

    def get(self, action_id: str) -> ActionRecord | None: ...

    def records(self, state: str | None = None, limit: int = 100, offset: int = 0) -> list[ActionRecord]: ...

    def audit(self, entry: AuditEntry) -> None: ...

    def audit_entries(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]: ...


def new_action_id() -> str:
    return uuid.uuid4().hex[:12]


class MemoryActionLog:
    """An :class:`ActionLog` in memory (tests, or a service without a store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actions: dict[str, ActionRecord] = {}
        self._audit: list[AuditEntry] = []
        self._sequence = itertools.count(1)

    def save(self, record: ActionRecord) -> None:
        with self._lock:
            self._actions[record.id] = record

    def get(self, action_id: str) -> ActionRecord | None:
        with self._lock:
            return self._actions.get(action_id)

    def records(self, state: str | None = None, limit: int = 100, offset: int = 0) -> list[ActionRecord]:
        with self._lock:
            records = sorted(self._actions.values(), key=lambda r: r.requested_at, reverse=True)
        if state is not None:
            records = [r for r in records if r.state == state]
        return records[offset : offset + limit]

    def audit(self, entry: AuditEntry) -> None:
        with self._lock:
            self._audit.append(replace(entry, sequence=next(self._sequence)))

    def audit_entries(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
        with self._lock:
            entries = list(reversed(self._audit))
        return entries[offset : offset + limit]


class StoreActionLog:
    """An :class:`ActionLog` in the store (``actions`` and ``audit_log`` tables): survives restarts and is
    shared by every instance of the service on one database."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def save(self, record: ActionRecord) -> None:
        self._store.save_action(
            {
                "id": record.id,
                "kind": record.kind,
                "state": record.state.value,
                "requested_by": record.requested_by,
                "requested_at": record.requested_at,
                "request": dict(record.request),
                "plan": dict(record.plan),
                "progress": dict(record.progress),
                "result": dict(record.result),
                "error": record.error,
                "started_at": record.started_at,
                "finished_at": record.finished_at,
                "cancel_requested": record.cancel_requested,
            }
        )

    def get(self, action_id: str) -> ActionRecord | None:
        row = self._store.action(action_id)
        return None if row is None else _record(row)

    def records(self, state: str | None = None, limit: int = 100, offset: int = 0) -> list[ActionRecord]:
        return [_record(row) for row in self._store.actions(state=state, limit=limit, offset=offset)]

    def audit(self, entry: AuditEntry) -> None:
        self._store.append_audit(
            {
                "at": entry.at,
                "who": entry.who,
                "role": entry.role,
                "action": entry.action,
                "dry_run": entry.dry_run,
                "outcome": entry.outcome,
                "action_id": entry.action_id,
                "detail": dict(entry.detail),
            }
        )

    def audit_entries(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
        return [
            AuditEntry(
                at=row["at"],
                who=row["who"],
                role=row["role"],
                action=row["action"],
                dry_run=bool(row["dry_run"]),
                outcome=row["outcome"],
                action_id=row["action_id"],
                detail=row["detail"] or {},
                sequence=int(row["sequence"]),
            )
            for row in self._store.audit_log(limit=limit, offset=offset)
        ]


def _record(row: Mapping[str, Any]) -> ActionRecord:
    return ActionRecord(
        id=row["id"],
        kind=row["kind"],
        state=ActionState(row["state"]),
        requested_by=row["requested_by"],
        requested_at=row["requested_at"],
        request=row["request"] or {},
        plan=row["plan"] or {},
        progress=row["progress"] or {},
        result=row["result"] or {},
        error=row["error"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        cancel_requested=bool(row["cancel_requested"]),
    )
