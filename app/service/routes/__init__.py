"""The REST API's routes, one module per area. Handlers parse, call and return: the work is in the
components they depend on (:mod:`app.service.deps`), the bodies in :mod:`app.service.schemas`.

:data:`ROUTERS` is the order ``create_app`` includes them in (the order of the OpenAPI document). The
routes about one cluster (:data:`CLUSTER_ROUTERS`) are served twice: at ``/api/v1/...`` for the only
cluster of a single-cluster service, and at ``/api/v1/clusters/{cluster}/...`` for any watched cluster
(:func:`~app.service.routes.clusters.scoped`). The probes, the audit trail, the webhooks and the
silences are the service's, not a cluster's.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.service.routes import (
    actions,
    alerts,
    audit,
    cluster,
    clusters,
    consumer_groups,
    disks,
    load,
    maintenance,
    migration,
    plans,
    probes,
    safe_to_stop,
    silences,
    throttles,
    webhooks,
)

CLUSTER_ROUTERS: tuple[APIRouter, ...] = (
    safe_to_stop.router,  # before cluster: its /brokers/{broker_id} would take /brokers/safe-to-stop
    cluster.router,
    disks.router,
    migration.router,
    load.router,
    alerts.router,
    actions.router,
    plans.router,
    throttles.router,
    consumer_groups.router,
    maintenance.router,
)

ROUTERS: tuple[APIRouter, ...] = (
    probes.router,
    clusters.router,
    *CLUSTER_ROUTERS,
    audit.router,
    webhooks.router,
    silences.router,
    *(clusters.scoped(router) for router in CLUSTER_ROUTERS),
)
