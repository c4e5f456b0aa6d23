"""The methods a URL answers: the ``Allow`` header of ``OPTIONS`` and of every 405.

Starlette answers a method a path does not serve with the ``Allow`` of the first route at that path only
(``GET /api/v1/webhooks`` and ``POST /api/v1/webhooks`` are two routes: a 405 said ``Allow: POST``), and
has no ``OPTIONS`` of its own (it was that same 405). Here the list is every method some route serves at
the URL, found by asking the router's routes (``matches``, a full match for that method: FastAPI's
included routers answer it as the routes they hold), plus ``OPTIONS``, which :class:`OptionsMiddleware`
answers: 204 with ``Allow``, without a token (the methods are no secret: ``/openapi.json`` is public too).
A URL no route serves is a 404, ``OPTIONS`` or not.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
"""The methods a route may serve, in the order ``Allow`` lists them (``OPTIONS`` comes last)."""


def _served(routes: Sequence[BaseRoute], scope: Scope, method: str) -> bool:
    probe = {
        "type": "http",
        "method": method,
        "path": scope["path"],
        "root_path": scope.get("root_path", ""),
        "headers": scope.get("headers", []),
        "query_string": b"",
    }
    return any(route.matches(probe)[0] is Match.FULL for route in routes)


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """The methods served at the URL of ``scope`` (any method's), ``OPTIONS`` included; empty when no route
    serves the URL."""
    served = [method for method in METHODS if _served(routes, scope, method)]
    return [*served, "OPTIONS"] if served else []


def allow_header(methods: Sequence[str]) -> str:
    return ", ".join(methods)


class OptionsMiddleware:
    """Answers ``OPTIONS`` at a URL some route serves, when no route serves ``OPTIONS`` itself: 204 and the
    URL's full ``Allow``. Anything else goes on to the routes (``OPTIONS`` at an unknown URL: their 404)."""

    def __init__(self, app: ASGIApp, router: Router) -> None:
        self.app = app
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        routes = self.router.routes
        if scope["type"] == "http" and scope["method"] == "OPTIONS" and not _served(routes, scope, "OPTIONS"):
            methods = allowed_methods(routes, scope)
            if methods:
                await Response(status_code=204, headers={"Allow": allow_header(methods)})(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)
