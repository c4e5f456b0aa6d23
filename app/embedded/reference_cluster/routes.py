"""The embedded reference cluster's fault controls under ``/api/v1/reference`` (admin), so that runbooks and
alert routing can be rehearsed through the same service; absent when serving a real cluster.

``GET /api/v1/reference`` describes the simulated cluster; ``POST /api/v1/reference/brokers/{id}/stop``
(``{"controlled": true}``), ``.../start``, ``.../stall``, ``.../slow``, ``.../resume``,
``.../brokers/{id}/log-dirs/{n}/fail``, ``/controller/stop``, ``/load/skew``, ``/topics``: the control
port's routes (docs/reference-cluster.md), with the service's auth and error bodies.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from app.actions.state import AuditEntry
from app.embedded.reference_cluster.control import ControlApi
from app.service.auth import Principal, Role
from app.service.deps import require

router = APIRouter(prefix="/api/v1/reference", tags=["reference cluster"])

Admin = Annotated[Principal, Depends(require(Role.admin))]


def _respond(request: Request, method: str, path: str, body: bytes, who: Principal) -> JSONResponse:
    control: ControlApi = request.app.state.reference
    status, payload = control.handle(method, path, body)
    if method == "POST":
        request.app.state.actions.audit(
            AuditEntry(
                time.time(), who.name, who.role.name, f"reference {path}", False,
                "accepted" if status == 200 else "refused", None, {"status": status},
            )
        )  # fmt: skip
    if status != 200:
        return JSONResponse(
            {"detail": str(payload.get("error", payload)), "problems": []}, status_code=status
        )
    return JSONResponse(payload)


@router.get("", response_model=dict[str, Any])
def describe(request: Request, who: Admin) -> JSONResponse:
    """The simulated cluster: brokers (running or stopped), controller, topics, traffic skew."""
    return _respond(request, "GET", "/", b"", who)


@router.post("/{path:path}", response_model=dict[str, Any])
async def control(path: str, request: Request, who: Admin) -> JSONResponse:
    """Inject a fault or undo one (see the module docstring for the routes)."""
    return _respond(request, "POST", "/" + path, await request.body(), who)
