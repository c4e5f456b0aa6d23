"""The routes' dependencies, as ``Annotated`` types: who calls (``Viewer``, ``Operator``, ``Admin``) and the
service's components (``View``, ``StoreDep``, ``WebhooksDep``, ``Runner``, ``Throttles``, ...), all read
from the one :class:`~app.service.container.ServiceContainer` the lifespan installed.

A cluster's components (``ClusterDep``, ``View``, ``Runner``, ``Actions``, ``Throttles``) are those of the
cluster the path names (``/api/v1/clusters/{cluster}/...``: 404 for a name the service does not watch),
and at the unscoped paths those of the only cluster (409 naming the clusters when it watches several);
503 while that cluster's ZooKeeper has not been read yet. Each route takes its role check before any of
these, so that a caller without a token learns nothing of the clusters.

Every dependency reads the request only (no header, query or body parameter of its own), so none of them
shows in the OpenAPI document as a parameter; the role checks declare the bearer security scheme
(:data:`BEARER_SCHEME`), and :mod:`app.service.openapi` documents each operation's error statuses from
these dependencies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from analytics.store import Store
from app.actions.runner import ActionRunner
from app.actions.state import ActionLog
from app.actions.throttle_removal import ThrottleCleaner
from app.service.auth import Principal, Role
from app.service.container import (
    ClusterComponents,
    ClusterNotReadyError,
    ServiceContainer,
    SeveralClustersError,
    UnknownClusterError,
)
from app.service.state import ClusterView
from app.webhooks.notifier import Notifier
from app.webhooks.store import WebhookStore

BEARER = {"WWW-Authenticate": "Bearer"}
NO_STORE = "no store is configured (load and alerts come from the analytics job's store)"


def container_of(request: Request) -> ServiceContainer:
    return ServiceContainer.of(request.app)


Container = Annotated[ServiceContainer, Depends(container_of)]


BEARER_SCHEME = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token from the service's token list; its role decides what it may do.",
)
"""Declares the HTTP bearer scheme on every protected operation of the OpenAPI document (so that client
generators and fuzzers send the token); :class:`RoleCheck` reads and judges the header itself."""


class RoleCheck:
    """The caller's principal from ``Authorization: Bearer <token>``: 401 without a known token, 403 when
    its role is below ``role``. A class, not a closure, so that the OpenAPI document can tell each
    operation's role from its dependencies (:mod:`app.service.openapi`)."""

    def __init__(self, role: Role) -> None:
        self.role = role

    def __call__(
        self,
        request: Request,
        _scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER_SCHEME)],
    ) -> Principal:
        tokens = container_of(request).tokens
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if not header:
            raise HTTPException(
                401,
                "missing bearer token: send Authorization: Bearer <token>",
                BEARER,
            )
        if scheme.lower() != "bearer" or not token.strip():
            raise HTTPException(401, "malformed Authorization header: expected Bearer <token>", BEARER)
        principal = tokens.authenticate(token.strip())
        if principal is None:
            raise HTTPException(
                401, "unknown or revoked token", {"WWW-Authenticate": 'Bearer error="invalid_token"'}
            )
        if principal.role < self.role:
            raise HTTPException(
                403, f"{principal.name} has role {principal.role.name}; this needs {self.role.name} or higher"
            )
        return principal


def require(role: Role) -> RoleCheck:
    """The dependency that admits callers of ``role`` or higher."""
    return RoleCheck(role)


Viewer = Annotated[Principal, Depends(require(Role.viewer))]
Operator = Annotated[Principal, Depends(require(Role.operator))]
Admin = Annotated[Principal, Depends(require(Role.admin))]


class ProblemsError(HTTPException):
    """An HTTP error whose body lists ``problems`` too (the app's handler writes them)."""

    def __init__(self, status_code: int, detail: str, problems: list[dict[str, object]]) -> None:
        super().__init__(status_code, detail)
        self.problems = problems


def cluster_of(request: Request) -> ClusterComponents:
    """The cluster the request is about: the path's ``{cluster}``, else the only one watched."""
    container = container_of(request)
    name = request.path_params.get("cluster")
    try:
        cluster = container.cluster(name)
    except UnknownClusterError as exc:
        raise HTTPException(404, str(exc)) from None
    except SeveralClustersError as exc:
        raise ProblemsError(409, str(exc), [{"cluster": n} for n in exc.names]) from None
    if cluster.parts is None:
        raise HTTPException(503, str(ClusterNotReadyError(cluster)))
    return cluster


ClusterDep = Annotated[ClusterComponents, Depends(cluster_of)]


def cluster_path(
    cluster: Annotated[
        str,
        Path(
            description="The cluster's name (`--cluster NAME=...`); a single unnamed cluster's is its "
            "cluster id. `GET /api/v1/clusters` lists them."
        ),
    ],
) -> str:
    """Declares the scoped routes' ``{cluster}`` (:func:`cluster_of` reads it)."""
    return cluster


def view_of(cluster: ClusterDep) -> ClusterView:
    return cluster.view


def store_of(container: Container) -> Store:
    """The analytics store; 503 when the service runs without one."""
    if container.store is None:
        raise HTTPException(503, NO_STORE)
    return container.store


def webhooks_of(container: Container) -> WebhookStore:
    """The webhooks' store; 503 when the service runs without a store."""
    if container.webhooks is None:
        raise HTTPException(503, NO_STORE)
    return container.webhooks


def optional_store_of(container: Container) -> Store | None:
    return container.store


def actions_of(cluster: ClusterDep) -> ActionLog:
    return cluster.actions


def runner_of(cluster: ClusterDep) -> ActionRunner:
    return cluster.runner


def throttles_of(cluster: ClusterDep) -> ThrottleCleaner:
    return cluster.throttles


def notifier_of(container: Container) -> Notifier | None:
    return container.notifier


View = Annotated[ClusterView, Depends(view_of)]
StoreDep = Annotated[Store, Depends(store_of)]
WebhooksDep = Annotated[WebhookStore, Depends(webhooks_of)]
OptionalStore = Annotated[Store | None, Depends(optional_store_of)]
Actions = Annotated[ActionLog, Depends(actions_of)]
Runner = Annotated[ActionRunner, Depends(runner_of)]
Throttles = Annotated[ThrottleCleaner, Depends(throttles_of)]
NotifierDep = Annotated[Notifier | None, Depends(notifier_of)]
