"""Is it safe to stop a broker now (viewer role): ``/api/v1/brokers/{id}/safe-to-stop`` and the cluster-wide
``/api/v1/brokers/safe-to-stop``.

Answers come from the live snapshot, one computation per snapshot version for every broker
(:mod:`app.service.safe_to_stop`). A view out of sync with ZooKeeper cannot say: 503 with the reason.
This router is included before the cluster routes, whose ``/brokers/{broker_id}`` would otherwise take
``/brokers/safe-to-stop`` for a broker id (and answer 422).
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse

from app.service.deps import View, Viewer
from app.service.safe_to_stop import cluster_safety
from app.service.schemas.common import Problem
from app.service.schemas.params import BrokerIdPath
from app.service.schemas.safe_to_stop import ClusterSafeToStopOut, SafeToStopOut
from collectors.safe_to_stop import ClusterSafeToStop, UnknownBrokerError, answer_json, cluster_json

router = APIRouter(prefix="/api/v1", tags=["brokers"])


def _trusted(answers: ClusterSafeToStop) -> None:
    if answers.untrusted_reason is not None:
        raise HTTPException(503, answers.untrusted_reason)


@router.get(
    "/brokers/safe-to-stop",
    response_model=ClusterSafeToStopOut,
    responses={503: {"model": Problem}},
)
def cluster_safe_to_stop(_: Viewer, view: View) -> JSONResponse:
    """Which brokers are safe to stop right now (each assuming the others keep running): per broker the
    verdict, the partitions that would go offline or under min ISR, and the partitions already unhealthy."""
    answers = cluster_safety(view)
    _trusted(answers)
    return JSONResponse(cluster_json(answers))


@router.get(
    "/brokers/{broker_id}/safe-to-stop",
    response_model=SafeToStopOut,
    responses={404: {"model": Problem}, 503: {"model": Problem}},
)
def broker_safe_to_stop(broker_id: BrokerIdPath, _: Viewer, view: View) -> JSONResponse:
    """Whether stopping the broker now would take a partition offline or under min ISR, with the reasons,
    the leaderships a controlled shutdown moves and the partitions already unhealthy."""
    answers = cluster_safety(view)
    _trusted(answers)  # before the id: a stale or empty view must not call a broker unknown
    try:
        answer = answers.broker(broker_id)
    except UnknownBrokerError as exc:
        raise HTTPException(404, str(exc)) from None
    return JSONResponse(answer_json(answer))
