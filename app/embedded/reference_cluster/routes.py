"""The embedded reference cluster's fault controls under ``/api/v1/reference`` (admin), so that runbooks and
alert routing can be rehearsed through the same service; absent when serving a real cluster.

``GET /api/v1/reference`` describes the simulated cluster; ``POST /api/v1/reference/brokers/{id}/stop``
(``{"controlled": true}``), ``.../start``, ``.../stall``, ``.../slow``, ``.../resume``,
``.../brokers/{id}/log-dirs/{n}/fail``, ``.../brokers/{id}/log-dirs/{n}/fill``, ``.../brokers/{id}/metrics``,
``/controller/stop``, ``/load/skew``, ``/topics``, ``/topics/{topic}/partitions/{p}/append``,
``/consumer-groups``, ``/consumer-groups/{name}/stop|start|stall|slow|rewind``: the control port's routes
(docs/reference-cluster.md), with the service's auth and error bodies; every POST is audited.

The composition roots that embed a cluster (the demo, the tests) hand :func:`reference_router` to
``create_app`` in their ``ServiceSpec(..., extra_routers=[...])``; the service itself never imports the
simulator.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.actions.runner import ActionRunner
from app.embedded.reference_cluster.control import ControlApi
from app.service.auth import Principal
from app.service.deps import Admin, Runner


def reference_router(control_api: ControlApi) -> APIRouter:
    """The routes of ``control_api``'s cluster, authenticated and audited by the service they are added to."""
    router = APIRouter(prefix="/api/v1/reference", tags=["reference cluster"])

    def respond(method: str, path: str, body: bytes, who: Principal, runner: ActionRunner) -> JSONResponse:
        status, payload = control_api.handle(method, path, body)
        if method == "POST":
            outcome = "accepted" if status == 200 else "refused"
            runner.audit(who, f"reference {path}", dry_run=False, outcome=outcome, detail={"status": status})
        if status != 200:
            return JSONResponse(
                {"detail": str(payload.get("error", payload)), "problems": []}, status_code=status
            )
        return JSONResponse(payload)

    @router.get("", response_model=dict[str, Any])
    def describe(who: Admin, runner: Runner) -> JSONResponse:
        """The simulated cluster: brokers (running or stopped), controller, topics, traffic skew."""
        return respond("GET", "/", b"", who, runner)

    @router.post("/{path:path}", response_model=dict[str, Any])
    async def control(path: str, request: Request, who: Admin, runner: Runner) -> JSONResponse:
        """Inject a fault or undo one (see the module docstring for the routes)."""
        return respond("POST", "/" + path, await request.body(), who, runner)

    return router
