"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus), no token needed."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app.service.deps import Container, View
from app.service.exposition import render
from app.service.schemas.probes import Healthz, Readyz

router = APIRouter(tags=["probes"])


@router.get("/healthz", response_model=Healthz)
def healthz() -> Healthz:
    """The process is up (liveness)."""
    return Healthz(status="ok")


@router.get("/readyz", response_model=Readyz, responses={503: {"model": Readyz}})
def readyz(view: View, response: Response) -> Readyz:
    """Ready when the snapshot is in sync with ZooKeeper (or recent); 503 with the reason otherwise."""
    ready, reason = view.readiness()
    if not ready:
        response.status_code = 503
    return Readyz(ready=ready, reason=reason)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def metrics(container: Container) -> PlainTextResponse:
    """``kafka_health_*`` in Prometheus text format, rendered at scrape time (no token needed)."""
    body = render(
        container.view,
        container.store,
        container.webhooks,
        container.actions,
        container.incidents,
        container.retention,
    )
    return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)
