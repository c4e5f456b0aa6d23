"""``/api/v1/audit`` (admin role): who did what and when."""

from __future__ import annotations

from fastapi import APIRouter

from app.service.deps import Actions, Admin
from app.service.schemas.audit import AuditOut
from app.service.schemas.params import Limit, Offset

router = APIRouter(prefix="/api/v1", tags=["actions", "audit"])


@router.get("/audit", response_model=list[AuditOut])
def audit(
    _: Admin,
    log: Actions,
    offset: Offset = 0,
    limit: Limit = 100,
) -> list[AuditOut]:
    """Who did what and when, newest first: every action, dry run and refusal (admin)."""
    return [AuditOut.of(e) for e in log.audit_entries(limit=limit, offset=offset)]
