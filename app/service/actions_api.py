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
from app.actions.executor import ElectionExecutor, ReassignmentExecutor
from app.actions.reassignment import (
    Problem,
    ReassignmentRequest,
    added_replicas,
    plan_batches,
    throttle_config,
    validate_reassignment,
)
from app.actions.rebalance import RebalancePlan, plan_drain, plan_rebalance
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
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import TopicPartition
from collectors.kafka.zkdata import PREFERRED_REPLICA_ELECTION_PATH

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


# --- plans -----------------------------------------------------------------------------------------------


class RebalanceIn(BaseModel):
    exclude_topics: list[str] = Field(default_factory=list)
    rated_deviation: float = Field(default=0.10, gt=0, le=1)
    brokers: list[int] | None = None
    """Brokers replicas and leadership may go to (default: every registered broker)."""
    leader_moves: bool = True


class DrainIn(BaseModel):
    brokers: list[int] | None = None
    rated_deviation: float = Field(default=0.10, gt=0, le=1)


class MoveOut(BaseModel):
    topic: str
    partition: int
    old_replicas: list[int]
    new_replicas: list[int]


class LoadOut(BaseModel):
    normalized_load: dict[str, float]
    deviation_rate: dict[str, float]
    stddev: float
    stddev_threshold: float
    imbalanced_brokers: list[int]


class PlanOut(BaseModel):
    id: str
    kind: str
    replica_moves: int
    leader_moves: int
    lower_bound_moves: int
    kafka_generate_moves: int | None
    moves: list[MoveOut]
    before: LoadOut
    after: LoadOut
    unresolved: list[int]
    warnings: list[str]
    load_source: str
    """``load window <start>-<end>`` from the store, or ``replica and leader counts`` when none."""


class SubmitIn(BaseModel):
    throttle_bytes_per_sec: int | None = Field(default=None, ge=1)
    max_concurrent_moves: int = Field(default=10, ge=1, le=100_000)


def _load_input(request: Request, view: ClusterView) -> tuple[dict[int, dict[str, float]] | None, str]:
    store = request.app.state.store
    if store is None:
        return None, "replica and leader counts (no store)"
    latest = store.latest_load(view.state.snapshot.cluster_id) or store.latest_load()
    if latest is None:
        return None, "replica and leader counts (no load window yet)"
    load = {b.broker: dict(b.metrics) for b in latest.brokers}
    return load, f"load window {latest.window.start:.0f}-{latest.window.end:.0f}"


def _summary(summary: Any) -> LoadOut:
    return LoadOut(
        normalized_load={str(b): v for b, v in sorted(summary.normalized_load.items())},
        deviation_rate={str(b): v for b, v in sorted(summary.deviation_rate.items())},
        stddev=summary.stddev,
        stddev_threshold=summary.stddev_threshold,
        imbalanced_brokers=list(summary.imbalanced_brokers),
    )


def _plan_out(plan_id: str, plan: RebalancePlan, source: str) -> PlanOut:
    return PlanOut(
        id=plan_id,
        kind=plan.kind,
        replica_moves=plan.replica_moves,
        leader_moves=len(plan.leader_moves),
        lower_bound_moves=plan.lower_bound_moves,
        kafka_generate_moves=plan.kafka_generate_moves,
        moves=[
            MoveOut(
                topic=m.tp.topic,
                partition=m.tp.partition,
                old_replicas=list(m.old_replicas),
                new_replicas=list(m.new_replicas),
            )
            for m in plan.moves
        ],
        before=_summary(plan.before),
        after=_summary(plan.after),
        unresolved=list(plan.unresolved),
        warnings=list(plan.warnings),
        load_source=source,
    )


def _keep_plan(request: Request, plan: RebalancePlan) -> str:
    plans: dict[str, RebalancePlan] = request.app.state.plans
    plan_id = new_action_id()
    plans[plan_id] = plan
    while len(plans) > 100:  # the oldest plans go first
        plans.pop(next(iter(plans)))
    return plan_id


@router.post("/plans/rebalance", response_model=PlanOut, responses={422: {}}, tags=["plans"])
def rebalance(body: RebalanceIn, request: Request, view: View, who: Operator) -> PlanOut:
    """A reassignment (plus leader moves) that brings every |r_n| under the rated deviation with as few
    replica moves as it can; the predicted load after; Kafka's ``--generate`` move count for comparison."""
    load, source = _load_input(request, view)
    try:
        plan = plan_rebalance(
            view.state.snapshot,
            load,
            body.rated_deviation,
            body.exclude_topics,
            body.brokers,
            leader_moves=body.leader_moves,
        )
    except ValueError as exc:
        _audit(request, who, "plan-rebalance", True, "refused", reason=str(exc))
        raise HTTPException(422, str(exc)) from None
    plan_id = _keep_plan(request, plan)
    _audit(request, who, "plan-rebalance", True, "dry-run", plan_id=plan_id, replica_moves=plan.replica_moves)
    return _plan_out(plan_id, plan, source)


@router.post("/plans/drain-broker/{broker_id}", response_model=PlanOut, responses={422: {}}, tags=["plans"])
def drain_broker(
    broker_id: int, request: Request, view: View, who: Operator, body: DrainIn | None = None
) -> PlanOut:
    """Every replica off the broker, spread to keep the load even, racks and replication factor kept."""
    body = body or DrainIn()
    load, source = _load_input(request, view)
    try:
        plan = plan_drain(view.state.snapshot, broker_id, load, body.rated_deviation, body.brokers)
    except ValueError as exc:
        _audit(request, who, "plan-drain", True, "refused", broker=broker_id, reason=str(exc))
        raise HTTPException(422, str(exc)) from None
    plan_id = _keep_plan(request, plan)
    _audit(request, who, "plan-drain", True, "dry-run", plan_id=plan_id, broker=broker_id)
    return _plan_out(plan_id, plan, source)


@router.post(
    "/plans/{plan_id}/submit",
    response_model=ReassignmentPlanOut,
    status_code=202,
    responses={404: {}, 409: {}, 422: {}},
    tags=["plans"],
)
def submit_plan(
    plan_id: str, request: Request, view: View, who: Operator, body: SubmitIn | None = None
) -> Any:
    """Run a plan as a reassignment (the same checks and execution as ``/actions/reassignments``)."""
    body = body or SubmitIn()
    plans: dict[str, RebalancePlan] = request.app.state.plans
    plan = plans.get(plan_id)
    if plan is None:
        raise HTTPException(404, f"no plan {plan_id!r} (plans are kept for the service's lifetime, last 100)")
    items = [
        ReassignmentItem(topic=r.topic, partition=r.partition, replicas=list(r.replicas))
        for r in plan.requests()
    ]
    if not items:
        raise HTTPException(422, f"plan {plan_id} moves nothing")
    reassignment = ReassignmentIn(
        partitions=items,
        throttle_bytes_per_sec=body.throttle_bytes_per_sec,
        max_concurrent_moves=body.max_concurrent_moves,
        allow_replication_factor_change=False,
        dry_run=False,
    )
    return reassignments(reassignment, request, view, who)
