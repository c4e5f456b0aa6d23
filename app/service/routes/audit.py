"""``/api/v1/audit`` (admin role): who did what and when."""

from __future__ import annotations

from fastapi import APIRouter

from app.service.deps import Admin, Container
from app.service.schemas.audit import AuditOut
from app.service.schemas.params import Limit, Offset

router = APIRouter(prefix="/api/v1", tags=["actions", "audit"])


@router.get("/audit", response_model=list[AuditOut])
def audit(
    _: Admin,
    container: Container,
    offset: Offset = 0,
    limit: Limit = 100,
) -> list[AuditOut]:
    """Who did what and when, newest first: every action, dry run and refusal (admin), of every watched
    cluster."""
    return [AuditOut.of(e) for e in container.audit_entries(limit=limit, offset=offset)]
