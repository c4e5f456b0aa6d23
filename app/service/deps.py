"""FastAPI dependencies: the caller's identity and role, and the service's components (set up by the
lifespan on ``app.state``)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import HTTPException, Request

from analytics.store import Store
from app.service.auth import Principal, Role, TokenStore
from app.service.state import ClusterView
from app.webhooks.store import WebhookStore

BEARER = {"WWW-Authenticate": "Bearer"}
NO_STORE = "no store is configured (load and alerts come from the analytics job's store)"


def require(role: Role) -> Callable[[Request], Principal]:
    def check(request: Request) -> Principal:
        tokens: TokenStore = request.app.state.tokens
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


def view_of(request: Request) -> ClusterView:
    view: ClusterView = request.app.state.view
    return view


def store_of(request: Request) -> Store:
    store: Store | None = request.app.state.store
    if store is None:
        raise HTTPException(503, NO_STORE)
    return store


def webhooks_of(request: Request) -> WebhookStore:
    webhooks: WebhookStore | None = request.app.state.webhooks
    if webhooks is None:
        raise HTTPException(503, NO_STORE)
    return webhooks
