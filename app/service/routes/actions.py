"""Runbook actions over REST (operator role to run, viewer to read): ``/api/v1/actions``.

Every request is audited, dry runs and refusals included (by the
:class:`~app.actions.runner.ActionRunner`). An execution answers 202 with the action's id at once and runs
in the background; ``GET /api/v1/actions/{id}`` follows it to a terminal state.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from app.actions.state import ActionState
from app.service.deps import Actions, Operator, Runner, Viewer
from app.service.schemas.actions import (
    ActionOut,
    DecommissionIn,
    DecommissionPlanOut,
    ElectionIn,
    ElectionPlanOut,
    LeadershipIn,
    LeadershipPlanOut,
    ReassignmentIn,
    ReassignmentPlanOut,
    RollbackIn,
)
from app.service.schemas.params import Limit, Offset

router = APIRouter(prefix="/api/v1", tags=["actions"])

Plan = TypeVar("Plan", ElectionPlanOut, ReassignmentPlanOut, LeadershipPlanOut, DecommissionPlanOut)


@router.post(
    "/actions/preferred-replica-election",
    response_model=ElectionPlanOut,
    status_code=200,
    responses={202: {"model": ElectionPlanOut}, 409: {}, 422: {}},
)
def preferred_replica_election(
    body: ElectionIn, who: Operator, runner: Runner
) -> ElectionPlanOut | JSONResponse:
    """Dry run (default): which partitions would change leader, which cannot and why, leaders per broker
    before and after. ``"dry_run": false`` runs it in chunks under ``budget_bytes`` (202 + action id)."""
    outcome = runner.elect_preferred_leaders(who, body.order())
    return _accepted_or_dry_run(ElectionPlanOut.of(outcome, body.dry_run), outcome.action is not None)


@router.post(
    "/actions/reassignments",
    response_model=ReassignmentPlanOut,
    responses={202: {"model": ReassignmentPlanOut}, 409: {}, 422: {}},
)
def reassignments(body: ReassignmentIn, who: Operator, runner: Runner) -> ReassignmentPlanOut | JSONResponse:
    """Validate (every problem named at once, 422), dry run by default (the batches and throttles), or run
    in the background (202 + action id): throttles set, batches one after another, never while a partition
    is under min ISR or offline, throttles removed at the end whatever happened."""
    outcome = runner.reassign(who, body.order())
    return _accepted_or_dry_run(ReassignmentPlanOut.of(outcome), outcome.action is not None)


@router.post(
    "/actions/demote-broker",
    response_model=LeadershipPlanOut,
    responses={202: {"model": LeadershipPlanOut}, 409: {}, 422: {}},
)
def demote_broker(body: LeadershipIn, who: Operator, runner: Runner) -> LeadershipPlanOut | JSONResponse:
    """Dry run (default): the partitions the broker is the preferred leader of, reordered so that it comes
    last (the same replicas: nothing is copied), and the partitions to elect. ``"dry_run": false`` runs it
    (202 + action id): the reorders, then a preferred election, so that the broker leads nothing. The
    replica lists before are recorded with the action, for ``promote-broker``. 422 for an unknown broker;
    partitions it is the only replica of are ``left`` (it cannot hand them over)."""
    outcome = runner.demote(who, body.order())
    return _accepted_or_dry_run(LeadershipPlanOut.of(outcome, body.dry_run), outcome.action is not None)


@router.post(
    "/actions/promote-broker",
    response_model=LeadershipPlanOut,
    responses={202: {"model": LeadershipPlanOut}, 409: {}, 422: {}},
)
def promote_broker(body: LeadershipIn, who: Operator, runner: Runner) -> LeadershipPlanOut | JSONResponse:
    """Dry run (default), or run (202 + action id): the replica lists the broker's last demotion recorded,
    restored for the partitions whose replica set is still the same (the others are ``left``, with the
    reason), then elected, so that it leads its preferred partitions again. 409 when the broker has no
    demotion in effect."""
    outcome = runner.promote(who, body.order())
    return _accepted_or_dry_run(LeadershipPlanOut.of(outcome, body.dry_run), outcome.action is not None)


@router.post(
    "/actions/decommission-broker",
    response_model=DecommissionPlanOut,
    responses={202: {"model": DecommissionPlanOut}, 409: {}, 422: {}},
)
def decommission_broker(
    body: DecommissionIn, who: Operator, runner: Runner
) -> DecommissionPlanOut | JSONResponse:
    """Dry run (default): the broker's drain plan as a reassignment (internal topics included), what it
    would leave and what is verified. ``"dry_run": false`` runs it (202 + action id) as a reassignment
    (throttled, resumable, cancellable), then verifies that nothing is left of the broker: the action's
    result says ``removable: true``, or ``false`` with the list of what is ``left`` and why."""
    outcome = runner.decommission(who, body.order())
    return _accepted_or_dry_run(DecommissionPlanOut.of(outcome), outcome.action is not None)


@router.get("/actions", response_model=list[ActionOut])
def actions(
    _: Viewer,
    log: Actions,
    state: Annotated[ActionState | None, Query()] = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> list[ActionOut]:
    return [ActionOut.of(r) for r in log.records(state=state, limit=limit, offset=offset)]


@router.get("/actions/{action_id}", response_model=ActionOut, responses={404: {}})
def action(action_id: str, _: Viewer, runner: Runner) -> ActionOut:
    return ActionOut.of(runner.action(action_id))


@router.post("/actions/{action_id}/cancel", response_model=ActionOut, responses={404: {}, 409: {}})
def cancel(action_id: str, who: Operator, runner: Runner) -> ActionOut:
    """Stop the action before its next write to ZooKeeper: no further chunk or batch, its throttles
    removed, CANCELLED. A batch already written is the controller's to finish (a rollback undoes it)."""
    return ActionOut.of(runner.cancel(who, action_id))


@router.post(
    "/actions/{action_id}/rollback",
    response_model=ReassignmentPlanOut,
    responses={202: {"model": ReassignmentPlanOut}, 404: {}, 409: {}, 422: {}},
)
def rollback(
    action_id: str, who: Operator, runner: Runner, body: RollbackIn | None = None
) -> ReassignmentPlanOut | JSONResponse:
    """A reassignment back to the replicas recorded before reassignment ``action_id`` began, for the
    partitions it changed: dry run by default, ``"dry_run": false`` runs it as a new action linked to the
    first (``rollback_of``). The action must have ended (cancel it first)."""
    outcome = runner.rollback(who, action_id, (body or RollbackIn()).order())
    return _accepted_or_dry_run(ReassignmentPlanOut.of(outcome), outcome.action is not None)


def _accepted_or_dry_run(out: Plan, accepted: bool) -> Plan | JSONResponse:
    """The plan; with 202 when an execution started."""
    if not accepted:
        return out
    return JSONResponse(out.model_dump(mode="json"), status_code=202)
