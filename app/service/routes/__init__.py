"""The REST API's routes, one module per area. Handlers parse, call and return: the work is in the
components they depend on (:mod:`app.service.deps`), the bodies in :mod:`app.service.schemas`.

:data:`ROUTERS` is the order ``create_app`` includes them in (the order of the OpenAPI document).
"""

from __future__ import annotations

from fastapi import APIRouter

from app.service.routes import (
    actions,
    alerts,
    audit,
    cluster,
    load,
    migration,
    plans,
    probes,
    safe_to_stop,
    throttles,
    webhooks,
)

ROUTERS: tuple[APIRouter, ...] = (
    probes.router,
    safe_to_stop.router,  # before cluster: its /brokers/{broker_id} would take /brokers/safe-to-stop
    cluster.router,
    migration.router,
    load.router,
    alerts.router,
    actions.router,
    audit.router,
    plans.router,
    throttles.router,
    webhooks.router,
)
