"""``/audit``: the audit trail."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.actions.state import AuditEntry


class AuditOut(BaseModel):
    sequence: int
    at: float
    who: str
    role: str
    action: str
    dry_run: bool
    outcome: str
    action_id: str | None
    detail: dict[str, Any]
    cluster: str | None = None
    """The named cluster the entry is about; null: the single unnamed cluster."""

    @classmethod
    def of(cls, entry: AuditEntry) -> AuditOut:
        return cls(
            sequence=entry.sequence,
            at=entry.at,
            who=entry.who,
            role=entry.role,
            action=entry.action,
            dry_run=entry.dry_run,
            outcome=entry.outcome,
            action_id=entry.action_id,
            detail=dict(entry.detail),
            cluster=entry.cluster,
        )
