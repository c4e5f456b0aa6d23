"""``/api/v1/audit`` (admin role): who did what and when."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.service.deps import Actions, Admin
from app.service.schemas.audit import AuditOut

router = APIRouter(prefix="/api/v1", tags=["actions", "audit"])


@router.get("/audit", response_model=list[AuditOut])
def audit(
    log: Actions,
    _: Admin,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[AuditOut]:
    """Who did what and when, newest first: every action, dry run and refusal (admin)."""
    return [AuditOut.of(e) for e in log.audit_entries(limit=limit, offset=offset)]
