"""ZK→KRaft migration readiness (viewer role): ``/api/v1/migration/readiness``.

The checks are :func:`collectors.migration.migration_readiness` over the live snapshot, its health report
and the last scrape's ActiveControllerCount gauges, computed once per snapshot version and scrape. A view
out of sync with ZooKeeper fails the ``zookeeper_state_readable`` check (so the report is not ready).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.service.deps import View, Viewer
from app.service.schemas.migration import MigrationReadinessOut
from app.service.state import ClusterState
from collectors.migration import migration_readiness

router = APIRouter(prefix="/api/v1", tags=["migration"])


def _readiness(state: ClusterState) -> dict[str, Any]:
    gauges = None if state.scrape is None else state.scrape.total("active_controller")
    return migration_readiness(state.snapshot, state.report, active_controller_gauges=gauges).to_json()


@router.get("/migration/readiness", response_model=MigrationReadinessOut)
def readiness(_: Viewer, view: View) -> JSONResponse:
    """Whether the cluster is ready for a ZK→KRaft migration: each check Kafka's migration documentation
    asks for that ZooKeeper and the metrics can show (pass, fail or unknown, and why), and the migration
    phase the cluster is in."""
    body: dict[str, Any] = view.memo("migration_readiness", _readiness)
    return JSONResponse(body)
