"""The routes' dependencies, as ``Annotated`` types: who calls (``Viewer``, ``Operator``, ``Admin``) and the
service's components (``View``, ``StoreDep``, ``WebhooksDep``, ``Runner``, ``Throttles``, ...), all read
from the one :class:`~app.service.container.ServiceContainer` the lifespan installed.

Every dependency reads the request only (no header, query or body parameter of its own), so none of them
shows in the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request

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


def require(role: Role) -> Callable[[Request], Principal]:
    """The caller's principal from ``Authorization: Bearer <token>``: 401 without a known token, 403 when
    its role is below ``role``."""

    def check(request: Request) -> Principal:
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
        if principal.role < role:
            raise HTTPException(
                403, f"{principal.name} has role {principal.role.name}; this needs {role.name} or higher"
            )
        return principal

    return check


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
