"""``GET /api/v1/clusters`` (viewer role): the clusters this service watches, each with its readiness and
health summary. Every other cluster route is served at ``/api/v1/clusters/{cluster}/...`` too
(:func:`scoped`), and at its unscoped path for the only cluster of a single-cluster service."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.routing import APIRoute

from app.service.container import ClusterComponents
from app.service.deps import Container, Viewer, cluster_path
from app.service.schemas.cluster import Summary
from app.service.schemas.clusters import WatchedClusterOut

API = "/api/v1"
SCOPED = f"{API}/clusters/{{cluster}}"

router = APIRouter(prefix=API, tags=["clusters"])


@router.get("/clusters", response_model=list[WatchedClusterOut])
def clusters(_: Viewer, container: Container) -> list[WatchedClusterOut]:
    """Every watched cluster, in name order (one entry, named null, for a single-cluster service)."""
    return [_watched(c) for c in container.clusters.values()]


def _watched(cluster: ClusterComponents) -> WatchedClusterOut:
    parts = cluster.parts
    if parts is None:
        reason = str(cluster.error or "its ZooKeeper has not been read yet")
        return WatchedClusterOut(
            name=cluster.name,
            key=cluster.key,
            cluster_id=None,
            zookeeper=cluster.zookeeper,
            reachable=False,
            ready=False,
            reason=f"ZooKeeper not reachable yet: {reason}",
            brokers=None,
            controller=None,
            summary=None,
        )
    state = parts.view.state
    snapshot, summary = state.snapshot, state.report.summary
    ready, reason = parts.view.readiness()
    return WatchedClusterOut(
        name=cluster.name,
        key=cluster.key,
        cluster_id=snapshot.cluster_id,
        zookeeper=cluster.zookeeper,
        reachable=not snapshot.stale,
        ready=ready,
        reason=reason,
        brokers=len(snapshot.brokers),
        controller=snapshot.controller.broker_id,
        summary=Summary.of(summary),
    )


def scoped(router: APIRouter) -> APIRouter:
    """``router``'s routes again at ``/api/v1/clusters/{cluster}/...`` (each with the ``{cluster}`` path
    parameter declared, which :func:`~app.service.deps.cluster_of` reads)."""
    copy = APIRouter()
    for route in router.routes:
        if not isinstance(route, APIRoute) or not route.path.startswith(API + "/"):
            raise ValueError(f"{route}: not a route under {API}")
        copy.add_api_route(
            SCOPED + route.path[len(API) :],
            route.endpoint,
            response_model=route.response_model,
            status_code=route.status_code,
            tags=list(route.tags),
            dependencies=[Depends(cluster_path), *route.dependencies],
            summary=route.summary,
            description=route.description,
            response_description=route.response_description,
            responses=dict(route.responses),
            deprecated=route.deprecated,
            methods=sorted(route.methods or ()),
            name=route.name,
            include_in_schema=route.include_in_schema,
            response_class=route.response_class,
        )
    return copy
