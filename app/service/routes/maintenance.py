"""``/api/v1/maintenance/rolling-restarts``: the rolling-restart conductor in the service, in external mode
(start and cancel: operator; read: viewer). The automation that stops the brokers (Ansible, systemd,
Kubernetes) polls a run's ``next`` and stops ``next.broker`` when ``may_stop`` is true, then starts it
again; the service's leader conducts the run (:class:`app.maintenance.conducting.RollingRestarts`) and
resumes it after a restart. Starting and cancelling are audited (``rolling-restart``,
``rolling-restart-cancel``).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException

from app.actions.state import AuditEntry
from app.maintenance.conducting import RollingRestarts
from app.maintenance.journal import RUNNING, Options, RunRecord
from app.maintenance.rolling_restart import known_brokers, plan_order
from app.maintenance.store import FINISHED, RunInProgressError
from app.service.auth import Principal
from app.service.deps import ClusterDep, Operator, ProblemsError, Viewer
from app.service.schemas.common import Page, Problem
from app.service.schemas.maintenance import RollingRestartIn, RollingRestartOut
from app.service.schemas.params import Limit, Offset

router = APIRouter(prefix="/api/v1/maintenance", tags=["maintenance"])

START = "rolling-restart"
CANCEL = "rolling-restart-cancel"


def restarts_of(cluster: ClusterDep) -> RollingRestarts:
    """The cluster's rolling restarts; 503 when the service runs without a store (their journal is in
    it)."""
    restarts = cluster.rolling_restarts
    if restarts is None:
        raise HTTPException(
            503, "rolling restarts need the service's store (--store-url): none is configured"
        )
    return restarts


Restarts = Annotated[RollingRestarts, Depends(restarts_of)]


def _audit(cluster: ClusterDep, who: Principal, action: str, outcome: str, run: str | None,
           detail: dict[str, Any]) -> None:  # fmt: skip
    cluster.actions.audit(
        AuditEntry(time.time(), who.name, who.role.name, action, False, outcome, None, {"run": run, **detail})
    )


def _out(restarts: Restarts, run_id: str) -> RollingRestartOut:
    row = restarts.store.get(run_id)
    if row is None:
        raise HTTPException(404, f"no rolling restart with id {run_id}")
    return RollingRestartOut.of(row, [e.to_json() for e in restarts.events(run_id)])


@router.post(
    "/rolling-restarts",
    response_model=RollingRestartOut,
    status_code=202,
    responses={409: {"model": Problem}, 422: {"model": Problem}, 503: {"model": Problem}},
)
def start_rolling_restart(
    body: RollingRestartIn, who: Operator, cluster: ClusterDep, restarts: Restarts
) -> RollingRestartOut:
    """Start a rolling restart in external mode: for each broker, in order, the controller last, it waits
    until the broker is safe to stop, demotes and silences it, then says in ``next`` that it may be stopped
    and waits for its registration to end and come back with a new session, for it to rejoin every ISR,
    promotes it and lifts its silence. 409 while another one is unfinished; 422 for unknown brokers."""
    snapshot = restarts.cluster.snapshot
    known = known_brokers(snapshot)
    requested = sorted(snapshot.brokers) if body.brokers == "all" else list(body.brokers)
    problems: list[dict[str, object]] = []
    if body.brokers != "all" and len(set(requested)) != len(requested):
        problems.append({"location": "body.brokers", "message": "a broker is named twice"})
    unknown = [b for b in requested if b not in known]
    if unknown:
        listed = ", ".join(map(str, known)) or "none"
        message = (
            f"broker {', '.join(map(str, unknown))} is neither registered nor assigned any replica "
            f"(known brokers: {listed})"
        )
        problems.append({"location": "body.brokers", "message": message})
    if not requested:
        problems.append(
            {"location": "body.brokers", "message": "no broker is registered: nothing to restart"}
        )
    detail = {"brokers": body.brokers, "demote": body.demote, "silence": body.silence}
    if problems:
        _audit(cluster, who, START, "refused", None, {**detail, "problems": [p["message"] for p in problems]})
        raise ProblemsError(422, "; ".join(str(p["message"]) for p in problems), problems)
    record = RunRecord(
        zookeeper=cluster.spec.zookeeper.connect,
        order=plan_order(requested, snapshot.controller.broker_id),
        known_brokers=known,
        options=Options(
            demote=body.demote,
            silence=body.silence,
            restart_command=None,
            wait_rejoined_s=body.wait_rejoined_s,
            max_unsafe_wait_s=body.max_unsafe_wait_s,
        ),
        started_at=time.time(),
        state=RUNNING,
    )
    try:
        row = restarts.store.create(record, requested_by=who.name)
    except RunInProgressError as exc:
        reason = (
            f"rolling restart {exc} has not finished: wait for it, or cancel it "
            f"(POST /api/v1/maintenance/rolling-restarts/{exc}/cancel)"
        )
        _audit(cluster, who, START, "refused", str(exc), {**detail, "reason": reason})
        raise HTTPException(409, reason) from None
    _audit(cluster, who, START, "accepted", row.id, {**detail, "order": record.order})
    restarts.wake()
    return RollingRestartOut.of(row)


@router.get("/rolling-restarts", response_model=Page[RollingRestartOut], responses={503: {"model": Problem}})
def rolling_restarts(
    _: Viewer, restarts: Restarts, offset: Offset = 0, limit: Limit = 100
) -> Page[RollingRestartOut]:
    """The rolling restarts, newest first."""
    rows, total = restarts.store.runs(limit=limit, offset=offset)
    return Page[RollingRestartOut](
        items=[RollingRestartOut.of(r) for r in rows], total=total, offset=offset, limit=limit
    )


@router.get(
    "/rolling-restarts/{run_id}",
    response_model=RollingRestartOut,
    responses={404: {"model": Problem}, 503: {"model": Problem}},
)
def rolling_restart(run_id: str, _: Viewer, restarts: Restarts) -> RollingRestartOut:
    """The run's progress per broker, where it stopped, and ``next``: ``{"broker", "may_stop", "reason"}``
    for the automation that stops the brokers."""
    return _out(restarts, run_id)


@router.post(
    "/rolling-restarts/{run_id}/cancel",
    response_model=RollingRestartOut,
    responses={404: {"model": Problem}, 409: {"model": Problem}, 503: {"model": Problem}},
)
def cancel_rolling_restart(
    run_id: str, who: Operator, cluster: ClusterDep, restarts: Restarts
) -> RollingRestartOut:
    """Stop the run at its next wait (``cancelled``); what it did to the broker in progress stays (its
    demotion and silence: promote it and expire the silence, or let the silence end). 409 when it has
    ended already."""
    row = restarts.store.get(run_id)
    if row is None:
        raise HTTPException(404, f"no rolling restart with id {run_id}")
    if row.state in FINISHED:
        _audit(cluster, who, CANCEL, "refused", run_id, {"state": row.state})
        raise HTTPException(409, f"rolling restart {run_id} has ended already ({row.state})")
    restarts.store.request_cancel(run_id)
    _audit(cluster, who, CANCEL, "accepted", run_id, {"state": row.state})
    restarts.wake()
    return _out(restarts, run_id)
