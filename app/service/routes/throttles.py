"""``/api/v1/throttles``: every replication throttle in the cluster (viewer) and the one-call cleanup
(operator), a dry run unless ``"dry_run": false``; every clear request is audited as ``clear-throttles``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException

from app.actions.throttle_removal import InvalidThrottleRequestError
from app.service.deps import Operator, Throttles, View, Viewer
from app.service.schemas.throttles import ClearThrottlesIn, ClearThrottlesOut, ThrottlesOut

router = APIRouter(prefix="/api/v1", tags=["throttles"])


@router.get("/throttles", response_model=ThrottlesOut)
def throttles(_: Viewer, cleaner: Throttles, view: View) -> ThrottlesOut:
    """Every broker with a replication throttle rate and every topic with a throttled-replica list: in use
    (by an unfinished action, or a running reassignment) or leftover, whether it limits anything, and
    what is odd about it (unknown brokers or partitions, half a throttle)."""
    snapshot = view.state.snapshot
    return ThrottlesOut.of(cleaner.inventory(snapshot), snapshot.version)


@router.post("/throttles/clear", response_model=ClearThrottlesOut, responses={422: {}})
def clear(
    who: Operator, cleaner: Throttles, body: Annotated[ClearThrottlesIn | None, Body()] = None
) -> ClearThrottlesOut:
    """Dry run (default): which throttle keys would be removed, which are skipped as in use. With
    ``"dry_run": false`` removes them (only the four throttle keys; every other config key stays) and
    answers what was removed, skipped and failed. ``brokers``/``topics`` limit it to the entities named."""
    order = (body or ClearThrottlesIn()).order()
    try:
        outcome = cleaner.clear(who.name, who.role.name, order)
    except InvalidThrottleRequestError as exc:
        raise HTTPException(422, str(exc)) from None
    return ClearThrottlesOut.of(outcome)
