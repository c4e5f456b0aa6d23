"""``/alerts``: alerts, their events and acknowledgements.

No ``from __future__ import annotations`` here: :class:`ActionOut` declares its published module (see
:mod:`app.service.schemas.common`).
"""

from typing import Any

from pydantic import BaseModel, Field

from app.service.schemas.common import PUBLISHED_SCHEMAS


class ActionOut(BaseModel):
    __module__ = PUBLISHED_SCHEMAS

    method: str
    path: str
    body: dict[str, Any]


class CauseOut(BaseModel):
    rule: int
    subject: str
    fingerprint: str = Field(description="the cause's alert: GET /api/v1/alerts/{fingerprint}")
    summary: str


class AlertOut(BaseModel):
    fingerprint: str
    cluster: str
    rule: int
    lane: str = Field(description="who raised it: incident (kafka-health serve) or load (the Spark job)")
    subject: str
    severity: str
    state: str
    summary: str
    evidence: dict[str, Any]
    suggested_action: ActionOut | None
    causes: list[CauseOut] = Field(
        default_factory=list,
        description="the alerts open on the brokers this page's partitions lag on (rules 5, 14-18), which "
        "its summary names (rules 1-3 and 6; kept in its evidence as causes)",
    )
    first_seen: float
    last_seen: float
    opened_at: float | None
    resolved_at: float | None
    acknowledged_by: str | None
    acknowledged_at: float | None
    silenced_by: list[int] = Field(
        default_factory=list,
        description="the silences that silence this open alert now (GET /api/v1/silences/{id}): its "
        "events are not sent to the webhooks; it pages when they end if it is still open",
    )


class AlertEventOut(BaseModel):
    sequence: int
    kind: str
    at: float
    severity: str
    summary: str
    evidence: dict[str, Any]
    silenced_by: list[int] = Field(
        default_factory=list,
        description="the silences active at the event's time that matched it: it was not sent",
    )


class AlertDetail(AlertOut):
    events: list[AlertEventOut]


class AckIn(BaseModel):
    comment: str | None = Field(default=None, max_length=1000)
