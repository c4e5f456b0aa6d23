"""Runbook actions over REST (operator role) and the audit trail (admin).

Every request is audited, dry runs and refusals included. An execution answers 202 with the action's id at
once and runs in the background; ``GET /api/v1/actions/{id}`` follows it to a terminal state.
"""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.actions.election import ElectionScope, chunk_payloads, plan_preferred_election, validate_scope
from app.actions.executor import AdminZooKeeper, ElectionExecutor, ReassignmentExecutor
from app.actions.reassignment import (
    Problem,
    ReassignmentRequest,
    added_replicas,
    plan_batches,
    throttle_config,
    validate_reassignment,
)
from app.actions.state import (
    TERMINAL,
    ActionLog,
    ActionRecord,
    ActionState,
    AuditEntry,
    IllegalTransitionError,
    new_action_id,
)
from app.service.auth import Principal, Role
from app.service.deps import require, view_of
from app.service.state import ClusterView
from collectors import zkdata
from collectors.model import TopicPartition
from collectors.zkdata import PREFERRED_REPLICA_ELECTION_PATH

router = APIRouter(prefix="/api/v1", tags=["actions"])

Viewer = Annotated[Principal, Depends(require(Role.viewer))]
Operator = Annotated[Principal, Depends(require(Role.operator))]
Admin = Annotated[Principal, Depends(require(Role.admin))]
View = Annotated[ClusterView, Depends(view_of)]

ELECTION = "preferred-replica-election"


class PartitionRef(BaseModel):
    topic: str = Field(min_length=1)
    partition: int = Field(ge=0)


class ElectionIn(BaseModel):
    scope: Literal["all", "topics", "partitions"] = "all"
    topics: list[str] = Field(default_factory=list)
    partitions: list[PartitionRef] = Field(default_factory=list)
    dry_run: bool = True
    """Dry run by default: say ``"dry_run": false`` to change leaders."""
    budget_bytes: int = Field(default=512 * 1024, ge=1024, le=1024 * 1024 - 1024)


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


class ActionOut(BaseModel):
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


class AuditOut(BaseModel):
    sequence: int
    at: float
    who: str
    role: str
    action: str
    dry_run: bool
    outcome: str
    action_id: str | None
    detail: dict[str, Any]


def action_out(record: ActionRecord) -> ActionOut:
    return ActionOut(
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
    )


def _log(request: Request) -> ActionLog:
    actions: ActionLog = request.app.state.actions
    return actions


def _admin(request: Request) -> AdminZooKeeper:
    admin: AdminZooKeeper = request.app.state.admin
    return admin


def _audit(request: Request, who: Principal, action: str, dry_run: bool, outcome: str, **detail: Any) -> None:
    action_id = detail.pop("action_id", None)
    _log(request).audit(
        AuditEntry(time.time(), who.name, who.role.name, action, dry_run, outcome, action_id, detail)
    )


def _problems_response(problems: list[Problem]) -> JSONResponse:
    body = [
        {
            "code": p.code,
            "message": p.message,
            "topic": p.topic,
            "partition": p.partition,
            "brokers": list(p.brokers),
        }
        for p in problems
    ]
    summary = "; ".join(p.message for p in problems)
    return JSONResponse({"detail": f"invalid request: {summary}", "problems": body}, status_code=422)


@router.post(
    "/actions/preferred-replica-election",
    response_model=ElectionPlanOut,
    status_code=200,
    responses={202: {"model": ElectionPlanOut}, 409: {}, 422: {}},
)
def preferred_replica_election(body: ElectionIn, request: Request, view: View, who: Operator) -> Any:
    """Dry run (default): which partitions would change leader, which cannot and why, leaders per broker
    before and after. ``"dry_run": false`` runs it in chunks under ``budget_bytes`` (202 + action id)."""
    snapshot = view.state.snapshot
    try:
        if body.scope == "topics":
            scope = ElectionScope.of_topics(body.topics)
        elif body.scope == "partitions":
            scope = ElectionScope.of_partitions(TopicPartition(p.topic, p.partition) for p in body.partitions)
        else:
            scope = ElectionScope.all_partitions()
    except ValueError as exc:
        _audit(request, who, ELECTION, body.dry_run, "refused", reason=str(exc))
        raise HTTPException(422, str(exc)) from None
    problems = validate_scope(snapshot, scope)
    if problems:
        _audit(request, who, ELECTION, body.dry_run, "refused", problems=[p.message for p in problems])
        return _problems_response(problems)
    plan = plan_preferred_election(snapshot, scope)
    out = ElectionPlanOut(
        dry_run=body.dry_run,
        to_elect=[PartitionRef(topic=tp.topic, partition=tp.partition) for tp in plan.to_elect],
        ineligible=[
            IneligibleOut(topic=tp.topic, partition=tp.partition, reason=r) for tp, r in plan.ineligible
        ],
        current_leaders={str(b): n for b, n in sorted(plan.current_leaders.items())},
        predicted_leaders={str(b): n for b, n in sorted(plan.predicted_leaders.items())},
        chunks=len(chunk_payloads(plan.to_elect, body.budget_bytes)) if plan.to_elect else 0,
    )
    summary = {"scope": body.scope, "to_elect": len(plan.to_elect), "ineligible": len(plan.ineligible)}
    if body.dry_run:
        _audit(request, who, ELECTION, True, "dry-run", **summary)
        return out
    admin = _admin(request)
    pending = plan.election_in_progress or snapshot.pending.preferred_election
    if pending or admin.exists(PREFERRED_REPLICA_ELECTION_PATH):
        reason = (
            f"a preferred replica election is already in progress ({len(pending)} partitions in "
            f"{PREFERRED_REPLICA_ELECTION_PATH}) that this service did not start; try again when it is done"
        )
        _audit(request, who, ELECTION, False, "refused", reason=reason, **summary)
        raise HTTPException(409, reason)
    record = ActionRecord(
        id=new_action_id(),
        kind=ELECTION,
        state=ActionState.PENDING,
        requested_by=who.name,
        requested_at=time.time(),
        request=body.model_dump(),
        plan={**summary, "chunks": out.chunks, "predicted_leaders": out.predicted_leaders},
    )
    actions = _log(request)
    actions.save(record)
    _audit(request, who, ELECTION, False, "accepted", action_id=record.id, **summary)
    executor = ElectionExecutor(admin, lambda: view.state.snapshot, actions, budget_bytes=body.budget_bytes)
    _start(request, lambda: executor.run(record, plan.to_elect))
    out.action_id = record.id
    return JSONResponse(out.model_dump(mode="json"), status_code=202)


def _start(request: Request, work: Any) -> None:
    threads: list[threading.Thread] = request.app.state.action_threads
    thread = threading.Thread(target=work, name="action", daemon=True)
    threads.append(thread)
    thread.start()


REASSIGNMENT = "reassignment"


class ReassignmentItem(BaseModel):
    topic: str
    partition: int
    replicas: list[int]


class ReassignmentIn(BaseModel):
    partitions: list[ReassignmentItem]
    throttle_bytes_per_sec: int | None = Field(default=None, ge=1)
    """Replication throttle while it runs (set before, always removed after); None: no throttle."""
    max_concurrent_moves: int = Field(default=10, ge=1, le=100_000)
    """Replicas added per batch: a batch is written only when the previous one completed."""
    allow_replication_factor_change: bool = False
    dry_run: bool = True


class ReassignmentPlanOut(BaseModel):
    dry_run: bool
    partitions: int
    replicas_added: int
    batches: list[list[ReassignmentItem]]
    throttle_brokers: dict[str, dict[str, str]]
    throttle_topics: dict[str, dict[str, str]]
    action_id: str | None = None


@router.post(
    "/actions/reassignments",
    response_model=ReassignmentPlanOut,
    responses={202: {"model": ReassignmentPlanOut}, 409: {}, 422: {}},
)
def reassignments(body: ReassignmentIn, request: Request, view: View, who: Operator) -> Any:
    """Validate (every problem named at once, 422), dry run by default (the batches and throttles), or run
    in the background (202 + action id): throttles set, batches one after another, never while a partition
    is under min ISR or offline, throttles removed at the end whatever happened."""
    state = view.state
    snapshot = state.snapshot
    items = [ReassignmentRequest(i.topic, i.partition, tuple(i.replicas)) for i in body.partitions]
    problems = validate_reassignment(snapshot, items, body.allow_replication_factor_change)
    summary = {"partitions": len(items), "throttle": body.throttle_bytes_per_sec}
    admin = _admin(request)
    if snapshot.pending.reassignments or admin.exists(zkdata.REASSIGN_PARTITIONS_PATH):
        reason = (
            f"a reassignment is already in progress ({len(snapshot.pending.reassignments)} partitions in "
            f"{zkdata.REASSIGN_PARTITIONS_PATH}) that this service did not start; try again when it is done"
        )
        _audit(request, who, REASSIGNMENT, body.dry_run, "refused", reason=reason, **summary)
        raise HTTPException(409, reason)
    if problems:
        _audit(request, who, REASSIGNMENT, body.dry_run, "refused", problems=[p.message for p in problems])
        return _problems_response(problems)
    batches = plan_batches(items, snapshot, body.max_concurrent_moves)
    throttles = (
        throttle_config(items, snapshot, body.throttle_bytes_per_sec)
        if body.throttle_bytes_per_sec is not None
        else None
    )
    out = ReassignmentPlanOut(
        dry_run=body.dry_run,
        partitions=len(items),
        replicas_added=sum(len(added_replicas(item, snapshot)) for item in items),
        batches=[
            [ReassignmentItem(topic=i.topic, partition=i.partition, replicas=list(i.replicas)) for i in batch]
            for batch in batches
        ],
        throttle_brokers={}
        if throttles is None
        else {str(b): dict(c) for b, c in throttles.broker_configs.items()},
        throttle_topics={} if throttles is None else {t: dict(c) for t, c in throttles.topic_configs.items()},
    )
    if body.dry_run:
        _audit(request, who, REASSIGNMENT, True, "dry-run", **summary)
        return out
    record = ActionRecord(
        id=new_action_id(),
        kind=REASSIGNMENT,
        state=ActionState.PENDING,
        requested_by=who.name,
        requested_at=time.time(),
        request=body.model_dump(),
        plan={"batches": len(batches), "replicas_added": out.replicas_added},
    )
    actions = _log(request)
    actions.save(record)
    _audit(request, who, REASSIGNMENT, False, "accepted", action_id=record.id, **summary)

    def current() -> tuple[Any, Any]:
        now = view.state
        return now.snapshot, now.report

    executor = ReassignmentExecutor(admin, current, actions)
    _start(
        request,
        lambda: executor.run(record, items, body.throttle_bytes_per_sec, body.max_concurrent_moves),
    )
    out.action_id = record.id
    return JSONResponse(out.model_dump(mode="json"), status_code=202)


@router.get("/actions", response_model=list[ActionOut])
def actions(
    request: Request,
    _: Viewer,
    state: Annotated[ActionState | None, Query()] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ActionOut]:
    return [action_out(r) for r in _log(request).records(state=state, limit=limit, offset=offset)]


@router.get("/actions/{action_id}", response_model=ActionOut, responses={404: {}})
def action(
    action_id: str, request: Request, _: Annotated[Principal, Depends(require(Role.viewer))]
) -> ActionOut:
    record = _log(request).get(action_id)
    if record is None:
        raise HTTPException(404, f"no action {action_id!r}")
    return action_out(record)


@router.post("/actions/{action_id}/cancel", response_model=ActionOut, responses={404: {}, 409: {}})
def cancel(action_id: str, request: Request, who: Operator) -> ActionOut:
    """Stop further chunks or batches; what is already written to ZooKeeper is left to the controller."""
    actions = _log(request)
    record = actions.get(action_id)
    if record is None:
        raise HTTPException(404, f"no action {action_id!r}")
    if record.state in TERMINAL:
        _audit(request, who, "cancel", False, "refused", action_id=action_id, state=record.state.value)
        raise HTTPException(409, str(IllegalTransitionError(action_id, record.state, ActionState.CANCELLED)))
    if record.state is ActionState.PENDING:
        record = record.moved_to(ActionState.CANCELLED, cancel_requested=True)
    else:
        from dataclasses import replace

        record = replace(record, cancel_requested=True)
    actions.save(record)
    _audit(request, who, "cancel", False, "accepted", action_id=action_id)
    return action_out(record)


@router.get("/audit", response_model=list[AuditOut], tags=["audit"])
def audit(
    request: Request,
    _: Admin,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[AuditOut]:
    """Who did what and when, newest first: every action, dry run and refusal (admin)."""
    return [
        AuditOut(
            sequence=e.sequence,
            at=e.at,
            who=e.who,
            role=e.role,
            action=e.action,
            dry_run=e.dry_run,
            outcome=e.outcome,
            action_id=e.action_id,
            detail=dict(e.detail),
        )
        for e in _log(request).audit_entries(limit=limit, offset=offset)
    ]
