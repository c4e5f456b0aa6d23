"""The FastAPI application: lifespan, error bodies, routers.

``create_app(spec)`` builds it from a :class:`~app.service.spec.ServiceSpec` (the settings, the watched
clusters, one or several, the store); ``kafka-health serve`` runs it under uvicorn. The lifespan starts the
service's components (:func:`~app.service.container.service_components`: one set per watched cluster, and
the shared ones) and installs them on ``app.state.container``. Every error is a JSON body ``{"detail": ...,
"problems": [...]}`` with a 4xx/5xx status: bad JSON and invalid parameters are 422 naming each problem,
unknown things 404, conflicts 409, missing tokens 401, too low a role 403, a body over
``service.max_body_bytes`` 413 (before it is read: :mod:`app.service.limits`); the action runner's refusals
map the same way. A cluster's routes at an unscoped path answer 409 when several clusters are watched (the
problems name them), 404 at ``/api/v1/clusters/{cluster}/...`` for an unknown name, and 503 while that
cluster's ZooKeeper has not been read yet. At most 100 problems are listed, ``problems_total`` counting them
all when there are more. The OpenAPI document says so per operation (:mod:`app.service.openapi`). A method
the URL does not serve is a 405 whose ``Allow`` lists every method served there, as ``OPTIONS`` does
(:mod:`app.service.allow`); no URL redirects (a trailing slash is a 404: Starlette's slash redirect named
whatever host the request's ``Host`` said).

Routers beyond the service's own (the spec's ``extra_routers``) come from the composition root: the demo and
the tests hand in the embedded reference cluster's fault controls, which the product never imports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.actions.orders import ActionError, ConflictError, InvalidRequestError, NotFoundError
from app.actions.reassignment import Problem
from app.service.allow import OptionsMiddleware, allow_header, allowed_methods
from app.service.auth import TokenStore, parse_token_file, parse_tokens
from app.service.config import ServiceSettings
from app.service.container import service_components
from app.service.deps import ProblemsError
from app.service.limits import (
    MAX_PROBLEMS,
    MAX_PROBLEMS_IN_DETAIL,
    BodyLimitMiddleware,
    BodyTooLargeError,
    bounded_problems,
    too_large_body,
)
from app.service.openapi import install_openapi
from app.service.routes import ROUTERS
from app.service.spec import ServiceSpec


def _problem(
    status: int, detail: str, problems: list[dict[str, Any]] | None = None, *, total: int | None = None
) -> JSONResponse:
    """The error body; at most :data:`~app.service.limits.MAX_PROBLEMS` problems, with ``problems_total``
    counting them all (``total``, else ``problems``) when some were left out."""
    listed, counted = bounded_problems(problems or [])
    total = counted if total is None else total
    body: dict[str, Any] = {"detail": detail, "problems": listed}
    if total is not None and total > len(listed):
        body["problems_total"] = total
    return JSONResponse(body, status_code=status)


def _validation_problems(exc: RequestValidationError) -> list[dict[str, Any]]:
    problems = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(
            {"location": location, "message": error.get("msg", "invalid"), "type": error.get("type")}
        )
    return problems


def _action_problem(problem: Problem) -> dict[str, Any]:
    return {
        "code": problem.code,
        "message": problem.message,
        "topic": problem.topic,
        "partition": problem.partition,
        "brokers": list(problem.brokers),
    }


def _action_status(exc: ActionError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    return 422


def token_store(settings: ServiceSettings) -> TokenStore:
    entries = parse_tokens(settings.tokens.get_secret_value())
    if settings.tokens_file is not None:
        entries += parse_token_file(settings.tokens_file)
    return TokenStore(entries)


def create_app(spec: ServiceSpec) -> FastAPI:
    """The service ``spec`` describes: its clusters (each with its own ZooKeeper, metrics and
    credentials), its store, its analytics rules and its routers. The lifespan starts each cluster's
    ZooKeeper collector (first full scan, unless the spec's cluster was read already), metrics scraper,
    incident lane and action runner, and the store, the notifier and the retention pruner, and stops them
    in reverse order. The tokens are validated here: a bad token definition fails at once."""
    tokens = token_store(spec.settings)
    settings = spec.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with service_components(spec, tokens) as container:
            container.install(app)
            yield

    app = FastAPI(
        title="kafka-health",
        description="Cluster health for ZooKeeper-mode Apache Kafka: state, load, alerts, runbook actions.",
        version="0.1.0",
        lifespan=lifespan,
        redirect_slashes=False,  # a redirect's Location would name whatever host the request's Host said
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = _validation_problems(exc)
        summary = "; ".join(f"{p['location']}: {p['message']}" for p in problems[:MAX_PROBLEMS_IN_DETAIL])
        if len(problems) > MAX_PROBLEMS_IN_DETAIL:
            summary += f"; and {len(problems) - MAX_PROBLEMS_IN_DETAIL:,} more"
        return _problem(422, f"invalid request: {summary}", problems)

    @app.exception_handler(BodyTooLargeError)
    async def body_too_large(request: Request, exc: BodyTooLargeError) -> JSONResponse:
        return JSONResponse(too_large_body(exc.limit), status_code=413, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        problems = exc.problems if isinstance(exc, ProblemsError) else None
        response = _problem(exc.status_code, str(exc.detail), problems)
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        if exc.status_code == 405:  # the route's own Allow names its methods, not the path's
            response.headers["Allow"] = allow_header(
                allowed_methods(request.app.router.routes, request.scope)
            )
        return response

    @app.exception_handler(ActionError)
    async def action_refused(request: Request, exc: ActionError) -> JSONResponse:
        problems = exc.problems if isinstance(exc, InvalidRequestError) else ()
        listed = [_action_problem(p) for p in problems[:MAX_PROBLEMS]]
        return _problem(_action_status(exc), exc.message, listed, total=len(problems))

    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(OptionsMiddleware, router=app.router)
    routers = (*ROUTERS, *spec.extra_routers)
    for router in routers:
        app.include_router(router)
    install_openapi(app, routers)  # every error status documented with the problem body above
    return app
