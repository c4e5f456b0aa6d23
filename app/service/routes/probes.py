"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus), no token needed."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app.service.auth import NO_TOKEN
from app.service.container import ClusterComponents, ClusterNotReadyError
from app.service.deps import Container
from app.service.exposition import ClusterMetrics, render
from app.service.schemas.probes import ClusterReadiness, Healthz, Readyz

router = APIRouter(tags=["probes"])


@router.get("/healthz", response_model=Healthz)
def healthz() -> Healthz:
    """The process is up (liveness)."""
    return Healthz(status="ok")


@router.get("/readyz", response_model=Readyz, responses={503: {"model": Readyz}})
def readyz(container: Container, response: Response) -> Readyz:
    """Ready while at least one watched cluster's snapshot is in sync with ZooKeeper (or recent); 503
    otherwise. The body lists each cluster's readiness."""
    clusters = [_readiness(c) for c in container.clusters.values()]
    ready = any(c.ready for c in clusters)
    if len(clusters) == 1:
        reason = clusters[0].reason
    else:
        reason = "ok" if ready else "; ".join(f"{c.key}: {c.reason}" for c in clusters)
    if not ready:
        response.status_code = 503
    warnings = [] if len(container.tokens) else [NO_TOKEN]
    return Readyz(ready=ready, reason=reason, clusters=clusters, warnings=warnings)


def _readiness(cluster: ClusterComponents) -> ClusterReadiness:
    parts = cluster.parts
    if parts is None:
        return ClusterReadiness(
            name=cluster.name, key=cluster.key, ready=False, reason=str(ClusterNotReadyError(cluster))
        )
    ready, reason = parts.view.readiness()
    return ClusterReadiness(name=cluster.name, key=cluster.key, ready=ready, reason=reason)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def metrics(container: Container) -> PlainTextResponse:
    """``kafka_health_*`` in Prometheus text format, rendered at scrape time (no token needed)."""
    clusters = [
        ClusterMetrics(c.key, c.parts.view, c.parts.actions, c.parts.incidents, c.parts.consumers)
        for c in container.clusters.values()
        if c.parts is not None
    ]
    body = render(clusters, container.store, container.webhooks, container.retention)
    return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)
