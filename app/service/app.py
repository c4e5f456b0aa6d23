"""The FastAPI application: settings, lifespan (collectors up in order, down in reverse), error bodies.

``create_app(settings)`` builds it; ``kafka-health serve`` runs it under uvicorn. Every error is a JSON
body ``{"detail": ..., "problems": [...]}`` with a 4xx/5xx status: bad JSON and invalid parameters are 422
naming each problem, unknown things 404, conflicts 409, missing tokens 401, too low a role 403.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.actions.executor import KazooAdmin
from app.actions.state import ActionLog, ActionState, MemoryActionLog
from app.embedded.reference_cluster.control import ControlApi
from app.service.auth import TokenStore, parse_token_file, parse_tokens
from app.service.config import ServiceSettings
from app.service.state import ClusterView, SnapshotCollector
from app.storage import Storage
from app.webhooks.notifier import service_notifier
from collectors.metrics import MetricsCollector, MetricsSettings
from collectors.zookeeper.collector import ZooKeeperCollector

log = logging.getLogger(__name__)


def _problem(status: int, detail: str, problems: list[dict[str, Any]] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "problems": problems or []}, status_code=status)


def _validation_problems(exc: RequestValidationError) -> list[dict[str, Any]]:
    problems = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(
            {"location": location, "message": error.get("msg", "invalid"), "type": error.get("type")}
        )
    return problems


def interrupted(actions: ActionLog) -> None:
    """Actions a previous run of the service left PENDING or RUNNING: no thread runs them any more, so they
    are FAILED with the reason (what they wrote to ZooKeeper is left to the controller, as on a cancel)."""
    for state in (ActionState.PENDING, ActionState.RUNNING):
        for record in actions.records(state=state.value, limit=10_000):
            actions.save(
                record.moved_to(
                    ActionState.FAILED,
                    error="interrupted: the service stopped while the action ran; check its partitions",
                )
            )


def token_store(settings: ServiceSettings) -> TokenStore:
    entries = parse_tokens(settings.tokens.get_secret_value())
    if settings.tokens_file is not None:
        entries += parse_token_file(settings.tokens_file)
    return TokenStore(entries)


def create_app(
    settings: ServiceSettings,
    *,
    zookeeper: str,
    metrics: MetricsSettings | None = None,
    store_url: str | None = None,
    collector_factory: Callable[[str], SnapshotCollector] | None = None,
    connections: int = 4,
    session_timeout_s: float = 18.0,
    start_timeout_s: float = 60.0,
    actions: ActionLog | None = None,
    reference: ControlApi | None = None,
) -> FastAPI:
    """The service for the cluster at ``zookeeper``; the lifespan starts the ZooKeeper collector (first full
    scan), the metrics scraper and the store, and stops them in reverse order."""
    tokens = token_store(settings)  # validated now: a bad token definition fails at start-up

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if collector_factory is not None:
                collector = collector_factory(zookeeper)
            else:
                zk = ZooKeeperCollector(
                    zookeeper, connections=connections, session_timeout_s=session_timeout_s
                )
                zk.start(timeout=start_timeout_s)
                stack.callback(zk.stop)
                collector = zk
            scraper = MetricsCollector(metrics) if metrics is not None else None
            if scraper is not None:
                stack.callback(scraper.close)
            view = ClusterView(collector, scraper, settings.view)
            view.start()
            stack.callback(view.stop)
            storage = Storage.open(store_url) if store_url is not None else None
            if storage is not None:
                stack.callback(storage.close)
            webhooks = None if storage is None else storage.webhooks
            app.state.notifier = stack.enter_context(service_notifier(webhooks, zookeeper, settings.webhooks))
            admin = KazooAdmin(zookeeper)
            stack.callback(admin.close)
            app.state.view = view
            app.state.store = None if storage is None else storage.analytics
            app.state.webhooks = webhooks
            app.state.tokens = tokens
            app.state.admin = admin
            if actions is not None:
                app.state.actions = actions
            elif storage is not None:
                app.state.actions = storage.actions
                interrupted(app.state.actions)
            else:
                app.state.actions = MemoryActionLog()
            app.state.action_threads = []
            app.state.plans = {}
            app.state.reference = reference
            yield

    app = FastAPI(
        title="kafka-health",
        description="Cluster health for ZooKeeper-mode Apache Kafka: state, load, alerts, runbook actions.",
        version="0.1.0",
        lifespan=lifespan,
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = _validation_problems(exc)
        summary = "; ".join(f"{p['location']}: {p['message']}" for p in problems)
        return _problem(422, f"invalid request: {summary}", problems)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = _problem(exc.status_code, str(exc.detail))
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    from app.service.actions_api import router as actions_router
    from app.service.api import api, root
    from app.webhooks.routes import router as webhooks_router

    app.include_router(root)
    app.include_router(api)
    app.include_router(actions_router)
    app.include_router(webhooks_router)
    if reference is not None:
        from app.embedded.reference_cluster.routes import router as reference_router

        app.include_router(reference_router)
    return app
