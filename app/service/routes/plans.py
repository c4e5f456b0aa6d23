"""``/api/v1/plans`` (operator role): rebalance and drain plans (dry runs, kept by the
:class:`~app.actions.runner.ActionRunner`), and their submission as a reassignment."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.service.deps import Operator, Runner
from app.service.schemas.actions import ReassignmentPlanOut
from app.service.schemas.params import BrokerIdPath
from app.service.schemas.plans import DrainIn, PlanOut, RebalanceIn, SubmitIn

router = APIRouter(prefix="/api/v1", tags=["actions", "plans"])


@router.post("/plans/rebalance", response_model=PlanOut, responses={422: {}})
def rebalance(body: RebalanceIn, who: Operator, runner: Runner) -> PlanOut:
    """A reassignment (plus leader moves) that brings every |r_n| under the rated deviation with as few
    replica moves as it can; the predicted load after; Kafka's ``--generate`` move count for comparison."""
    return PlanOut.of(runner.plan_rebalance(who, body.order()))


@router.post("/plans/drain-broker/{broker_id}", response_model=PlanOut, responses={422: {}})
def drain_broker(
    broker_id: BrokerIdPath, who: Operator, runner: Runner, body: DrainIn | None = None
) -> PlanOut:
    """Every replica off the broker, spread to keep the load even, racks and replication factor kept."""
    return PlanOut.of(runner.plan_drain(who, (body or DrainIn()).order(broker_id)))


@router.post(
    "/plans/{plan_id}/submit",
    response_model=ReassignmentPlanOut,
    status_code=202,
    responses={404: {}, 409: {}, 422: {}},
)
def submit_plan(plan_id: str, who: Operator, runner: Runner, body: SubmitIn | None = None) -> JSONResponse:
    """Run a plan as a reassignment (the same checks and execution as ``/actions/reassignments``)."""
    body = body or SubmitIn()
    outcome = runner.submit_plan(who, plan_id, body.throttle_bytes_per_sec, body.max_concurrent_moves)
    return JSONResponse(ReassignmentPlanOut.of(outcome).model_dump(mode="json"), status_code=202)
