"""``/api/v1/alerts``: alerts that opened (viewer role), their events, and acknowledgement (operator).

At ``/api/v1/clusters/{cluster}/alerts...`` only that cluster's alerts are listed and found (the store's
``cluster`` column is the cluster's key); at ``/api/v1/alerts`` of a single-cluster service, every alert
in the store, ``cluster`` filtering them."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request

from analytics.model import AlertEvent, AlertState
from analytics.rules import RULE_LANES, RULE_NUMBERS
from analytics.store import Acknowledgement, Store
from app.service.deps import ClusterDep, Operator, Runner, StoreDep, Viewer
from app.service.schemas.alerts import AckIn, AlertDetail, AlertEventOut, AlertOut
from app.service.schemas.common import Page, Problem
from app.service.schemas.params import Limit, Offset
from app.silences.model import AlertFacts, Silence, silencers
from app.silences.store import SilenceStore

router = APIRouter(prefix="/api/v1", tags=["alerts"])

STATES = ("open", "resolved")
SEVERITIES = ("critical", "warning", "info")


@router.get("/alerts", response_model=Page[AlertOut])
def alerts(
    _: Viewer,
    __: ClusterDep,
    store: StoreDep,
    state: Annotated[list[str] | None, Query(description="open, resolved")] = None,
    rule: Annotated[int | None, Query(ge=RULE_NUMBERS.start, le=RULE_NUMBERS.stop - 1)] = None,
    severity: Annotated[list[str] | None, Query(description="critical, warning, info")] = None,
    cluster: str | None = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> Page[AlertOut]:
    """Alerts that opened at least once (pending ones, still inside their hysteresis, are not shown)."""
    _check_filters(state or [], severity or [])
    found = [
        a
        for a in store.alerts(
            cluster=cluster, state=state or STATES, rule=rule, severity=severity, limit=100_000
        )
        if a.event_sequence > 0
    ]
    page = found[offset : offset + limit]
    acks = store.acknowledgements([a.fingerprint for a in page])
    now = time.time()
    silences = SilenceStore(store.database).ending_after(now) if page else []
    return Page[AlertOut](
        items=[AlertOut(**_alert_out(a, acks.get(a.fingerprint), silences, now)) for a in page],
        total=len(found),
        offset=offset,
        limit=limit,
    )


@router.get("/alerts/{fingerprint}", response_model=AlertDetail, responses={404: {"model": Problem}})
def alert(fingerprint: str, _: Viewer, watched: ClusterDep, store: StoreDep, request: Request) -> AlertDetail:
    found = _alert_or_404(store, fingerprint, _scope(request, watched.key))
    ack = store.acknowledgements([fingerprint]).get(fingerprint)
    recorded = store.alert_events(fingerprint)
    now = time.time()
    since = min((e.at for e in recorded), default=now)
    silences = SilenceStore(store.database).ending_after(min(since, now))
    events = [_event_out(e, _silenced_by(found, e.severity, e.evidence, silences, e.at)) for e in recorded]
    return AlertDetail(**_alert_out(found, ack, silences, now), events=events)


@router.post(
    "/alerts/{fingerprint}/ack",
    response_model=AlertOut,
    responses={404: {"model": Problem}, 409: {"model": Problem}},
)
def acknowledge(
    fingerprint: str,
    who: Operator,
    watched: ClusterDep,
    store: StoreDep,
    runner: Runner,
    request: Request,
    body: AckIn | None = None,
) -> AlertOut:
    """Acknowledge an open alert (operator); the acknowledgement lasts until the alert opens anew."""
    found = _alert_or_404(store, fingerprint, _scope(request, watched.key))
    if found.state != "open":
        runner.audit(who, "ack", dry_run=False, outcome="refused", detail={"alert": fingerprint})
        raise HTTPException(
            409, f"alert {fingerprint} is {found.state}, only an open alert can be acknowledged"
        )
    store.acknowledge(fingerprint, who.name, time.time())
    comment = None if body is None else body.comment
    detail = {"alert": fingerprint, "comment": comment}
    runner.audit(who, "ack", dry_run=False, outcome="accepted", detail=detail)
    ack = store.acknowledgements([fingerprint]).get(fingerprint)
    now = time.time()
    return AlertOut(**_alert_out(found, ack, SilenceStore(store.database).ending_after(now), now))


def _check_filters(states: list[str], severities: list[str]) -> None:
    for value in states:
        if value not in STATES:
            raise HTTPException(422, f"state must be open or resolved, got {value!r}")
    for value in severities:
        if value not in SEVERITIES:
            raise HTTPException(422, f"severity must be critical, warning or info, got {value!r}")


def _scope(request: Request, key: str) -> str | None:
    """The cluster a scoped route is about (its key), None at an unscoped path."""
    return key if "cluster" in request.path_params else None


def _alert_or_404(store: Store, fingerprint: str, cluster: str | None) -> AlertState:
    alert = store.alert(fingerprint)
    if alert is None or alert.event_sequence == 0 or (cluster is not None and alert.cluster != cluster):
        where = "" if cluster is None else f" on cluster {cluster}"
        raise HTTPException(404, f"no alert with fingerprint {fingerprint!r}{where}")
    return alert


def _silenced_by(
    alert: AlertState, severity: str, evidence: Mapping[str, Any], silences: list[Silence], at: float
) -> list[int]:
    """The silences active at ``at`` that match the alert in this state (its severity and evidence)."""
    facts = AlertFacts(alert.cluster, alert.rule, alert.subject, severity, evidence)
    return silencers(silences, facts, at)


def _alert_out(
    alert: AlertState, ack: Acknowledgement | None, silences: list[Silence], now: float
) -> dict[str, Any]:
    silenced = alert.state == "open" and bool(silences)
    return {
        "silenced_by": _silenced_by(alert, alert.severity, alert.evidence, silences, now) if silenced else [],
        "fingerprint": alert.fingerprint,
        "cluster": alert.cluster,
        "rule": alert.rule,
        "lane": RULE_LANES.get(alert.rule, "unknown"),
        "subject": alert.subject,
        "severity": alert.severity,
        "state": alert.state,
        "summary": alert.summary,
        "evidence": dict(alert.evidence),
        "suggested_action": None if alert.action is None else alert.action.to_json(),
        "causes": _causes(alert.evidence),
        "first_seen": alert.first_seen,
        "last_seen": alert.last_seen,
        "opened_at": alert.opened_at,
        "resolved_at": alert.resolved_at,
        "acknowledged_by": None if ack is None else ack.by,
        "acknowledged_at": None if ack is None else ack.at,
    }


def _causes(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The causes the lane linked (``evidence.causes``, analytics.rules.causes); those not shaped so are
    left out (an alert written before they existed has none)."""
    causes = evidence.get("causes")
    if not isinstance(causes, list):
        return []
    keys = ("rule", "subject", "fingerprint", "summary")
    return [{k: c[k] for k in keys} for c in causes if isinstance(c, Mapping) and all(k in c for k in keys)]


def _event_out(event: AlertEvent, silenced_by: list[int]) -> AlertEventOut:
    return AlertEventOut(
        silenced_by=silenced_by,
        sequence=event.sequence,
        kind=event.kind,
        at=event.at,
        severity=event.severity,
        summary=event.summary,
        evidence=dict(event.evidence),
    )
