"""The routes' dependencies, as ``Annotated`` types: who calls (``Viewer``, ``Operator``, ``Admin``) and the
service's components (``View``, ``StoreDep``, ``WebhooksDep``, ``Runner``, ``Throttles``, ...), all read
from the one :class:`~app.service.container.ServiceContainer` the lifespan installed.

Every dependency reads the request only (no header, query or body parameter of its own), so none of them
shows in the OpenAPI document as a parameter; the role checks declare the bearer security scheme
(:data:`BEARER_SCHEME`), and :mod:`app.service.openapi` documents each operation's error statuses from
these dependencies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from analytics.store import Store
from app.actions.runner import ActionRunner
from app.actions.state import ActionLog
from app.actions.throttles import ThrottleCleaner
from app.service.auth import Principal, Role
from app.service.container import ServiceContainer
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


def view_of(container: Container) -> ClusterView:
    return container.view


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


def actions_of(container: Container) -> ActionLog:
    return container.actions


def runner_of(container: Container) -> ActionRunner:
    return container.runner


def throttles_of(container: Container) -> ThrottleCleaner:
    return container.throttles


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
