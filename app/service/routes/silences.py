"""``/api/v1/silences``: mute the webhook deliveries of matching alerts for a while (create and expire:
operator; list: viewer). The silences are the service's, not a cluster's (a ``cluster`` matcher names one).

A silenced alert still opens, updates and resolves and is recorded (``silenced_by`` in the alerts API);
only its webhook deliveries are held, and it pages when the silence ends if it is still open
(docs/alert-rules.md, "Silences"). Creating and expiring are audited (``silence-create``,
``silence-expire``).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.exceptions import RequestValidationError

from app.actions.state import ActionLog, AuditEntry
from app.service.auth import Principal
from app.service.container import ServiceContainer
from app.service.deps import Container, NotifierDep, Operator, Viewer, WebhooksDep
from app.service.schemas.common import Page, Problem
from app.service.schemas.params import IdPath, Limit, Offset
from app.service.schemas.silences import SilenceIn, SilenceOut
from app.silences.model import SILENCE_STATES, Silence, SilenceDraft, SilenceState, check_draft
from app.silences.store import SilenceStore

router = APIRouter(prefix="/api/v1/silences", tags=["silences"])

CREATE = "silence-create"
EXPIRE = "silence-expire"


def _seconds(value: int | str | None, where: str, problems: list[dict[str, Any]]) -> float | None:
    """Epoch seconds, or an RFC 3339 timestamp with its offset, as seconds (a problem when it is not)."""
    if not isinstance(value, str):
        return None if value is None else float(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        why = "not a timestamp" if parsed is None else "a timestamp needs its offset (Z or +HH:MM)"
        problems.append({"loc": ("body", where), "msg": f"{why}: {value!r}", "type": "value_error"})
        return None
    return parsed.timestamp()


def _draft(body: SilenceIn, now: float) -> SilenceDraft:
    """The checked request, or a 422 naming every problem."""
    errors: list[dict[str, Any]] = []
    ends_at = _seconds(body.ends_at, "ends_at", errors)
    starts_at = _seconds(body.starts_at, "starts_at", errors)
    if not errors:
        checked = check_draft(
            matchers=[m.model_dump() for m in body.matchers],
            maintenance=None if body.maintenance is None else body.maintenance.model_dump(),
            duration_s=body.duration_s,
            ends_at=ends_at,
            starts_at=starts_at,
            comment=body.comment,
            now=now,
        )
        if isinstance(checked, SilenceDraft):
            return checked
        errors = [
            {"loc": ("body", *p.loc.split(".")), "msg": p.msg, "type": "value_error", "input": None}
            for p in checked
        ]
    raise RequestValidationError(errors)


def _audit_log(container: ServiceContainer, silence: Silence) -> ActionLog | None:
    """Where a silence's audit entries go: the cluster an exact ``cluster`` matcher names, else the only
    cluster (with several, the first by name), as the audit trail (``/api/v1/audit``) merges them."""
    if container.audit_log is not None:
        return container.audit_log
    ready = {key: c.parts for key, c in container.clusters.items() if c.parts is not None}
    named = next((m.value for m in silence.matchers if m.name == "cluster" and not m.regex), None)
    chosen = ready.get(named) if named is not None else None
    if chosen is None and ready:
        chosen = ready[sorted(ready)[0]]
    return None if chosen is None else chosen.actions


def _audit(
    container: ServiceContainer, who: Principal, action: str, silence: Silence, detail: dict[str, Any]
) -> None:
    log = _audit_log(container, silence)
    if log is not None:
        log.audit(AuditEntry(time.time(), who.name, who.role.name, action, False, "accepted", None, detail))


@router.post("", response_model=SilenceOut, status_code=201, responses={422: {"model": Problem}})
def create_silence(body: SilenceIn, who: Operator, store: WebhooksDep, container: Container) -> SilenceOut:
    """Silence the alerts every matcher matches (and, with ``maintenance``, that a broker's planned stop
    explains) from ``starts_at`` (default now) for ``duration_s`` or until ``ends_at``; the creator is the
    token's name."""
    now = time.time()
    draft = _draft(body, now)
    silence = SilenceStore(store.database).create(draft, created_by=who.name, now=now)
    detail = {
        "silence": silence.id,
        "matchers": [m.to_json() for m in silence.matchers],
        "maintenance": None if silence.maintenance is None else silence.maintenance.to_json(),
        "starts_at": silence.starts_at,
        "ends_at": silence.ends_at,
        "comment": silence.comment,
    }
    _audit(container, who, CREATE, silence, detail)
    return SilenceOut.of(silence, now)


@router.get("", response_model=Page[SilenceOut], responses={422: {"model": Problem}})
def list_silences(
    _: Viewer,
    store: WebhooksDep,
    state: Annotated[list[str] | None, Query(description="active, pending, expired (default: all)")] = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> Page[SilenceOut]:
    """The silences, newest first, each with its state now."""
    for value in state or []:
        if value not in SILENCE_STATES:
            raise HTTPException(422, f"state must be active, pending or expired, got {value!r}")
    now = time.time()
    states: list[SilenceState] | None = None if not state else [s for s in SILENCE_STATES if s in state]
    found, total = SilenceStore(store.database).silences(now, state=states, limit=limit, offset=offset)
    return Page[SilenceOut](
        items=[SilenceOut.of(s, now) for s in found], total=total, offset=offset, limit=limit
    )


@router.get("/{silence_id}", response_model=SilenceOut, responses={404: {"model": Problem}})
def get_silence(silence_id: IdPath, _: Viewer, store: WebhooksDep) -> SilenceOut:
    silence = SilenceStore(store.database).silence(silence_id)
    if silence is None:
        raise HTTPException(404, f"no silence with id {silence_id}")
    return SilenceOut.of(silence, time.time())


@router.post(
    "/{silence_id}/expire",
    response_model=SilenceOut,
    responses={404: {"model": Problem}, 409: {"model": Problem}},
)
def expire_silence(
    silence_id: IdPath, who: Operator, store: WebhooksDep, container: Container, notifier: NotifierDep
) -> SilenceOut:
    """End the silence now: the alerts it held that are still open page (one ``opened`` each). 409 when it
    has ended already."""
    now = time.time()
    silence, ended = SilenceStore(store.database).expire(silence_id, by=who.name, now=now)
    if silence is None:
        raise HTTPException(404, f"no silence with id {silence_id}")
    if not ended:
        raise HTTPException(409, f"silence {silence_id} has ended already (at {silence.ends_at:.3f})")
    _audit(container, who, EXPIRE, silence, {"silence": silence.id})
    if notifier is not None:
        notifier.wake()  # this replica's notifier, if it leads, pages the held alerts now
    return SilenceOut.of(silence, now)
