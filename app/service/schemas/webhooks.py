"""``/webhooks``: subscriptions, their outbox of deliveries, and the test send.

Secrets are write-only: responses say ``has_secret``, and a password in a URL's user info is shown as
``***``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictInt, StringConstraints, field_validator

from analytics.rules import RULE_NUMBERS
from app.service.schemas.common import Flag
from app.webhooks.model import (
    MAX_CLUSTER_KEY,
    MAX_WEBHOOK_CLUSTERS,
    AlertNotice,
    DeliveryState,
    Webhook,
    WebhookDelivery,
    WebhookFormat,
    is_cluster_key,
)
from app.webhooks.notifier import AttemptResult
from app.webhooks.urls import mask_url

MAX_URL = 2048
RuleNumber = Annotated[StrictInt, Field(ge=RULE_NUMBERS.start, le=RULE_NUMBERS.stop - 1)]
SeverityName = Literal["critical", "warning", "info"]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
Secret = Annotated[SecretStr, Field(min_length=16, max_length=256)]
Rules = Annotated[list[RuleNumber], Field(min_length=1, max_length=len(RULE_NUMBERS))]
Severities = Annotated[list[SeverityName], Field(min_length=1, max_length=3)]
ClusterKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CLUSTER_KEY, pattern=r"^\S+$")]
Clusters = Annotated[
    list[ClusterKey],
    Field(
        min_length=1,
        max_length=MAX_WEBHOOK_CLUSTERS,
        description="the clusters whose alerts' events are sent, by name (a named cluster) or cluster id"
        " (the single unnamed cluster); null: every cluster",
    ),
]


def _check_clusters(value: list[str] | None) -> list[str] | None:
    if value is not None:
        for key in value:
            if not is_cluster_key(key):
                raise ValueError(
                    f"{key!r} is not a cluster name or id (1-{MAX_CLUSTER_KEY} characters, no whitespace)"
                )
    return value


def _check_url(value: str) -> str:
    value = value.strip()
    if len(value) > MAX_URL:
        raise ValueError(f"the URL is longer than {MAX_URL} characters")
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ValueError(f"not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https"):
        raise ValueError(f"the URL must be http:// or https://, not {url.scheme or 'relative'}")
    if not url.host:
        raise ValueError("the URL has no host")
    return value


class WebhookIn(BaseModel):
    """A new subscription. ``rules`` / ``severities`` / ``clusters`` null: every rule / severity /
    cluster."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    url: str = Field(max_length=MAX_URL, description="http:// or https:// URL the events are POSTed to")
    format: WebhookFormat = "generic"
    rules: Rules | None = None
    severities: Severities | None = None
    clusters: Clusters | None = None
    secret: Secret | None = Field(
        default=None, description="HMAC-SHA256 key of the X-Kafka-Health-Signature header (16-256 chars)"
    )
    enabled: Flag = True

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _check_url(value)

    @field_validator("clusters")
    @classmethod
    def _clusters(cls, value: list[str] | None) -> list[str] | None:
        return _check_clusters(value)


class WebhookPatch(BaseModel):
    """Fields to change; ``rules``, ``severities``, ``clusters`` and ``secret`` may be set to null (all
    rules, all severities, every cluster, unsigned), the others not."""

    model_config = ConfigDict(extra="forbid")

    name: Name | None = None
    url: Annotated[str, Field(max_length=MAX_URL)] | None = None
    format: WebhookFormat | None = None
    rules: Rules | None = None
    severities: Severities | None = None
    clusters: Clusters | None = None
    secret: Secret | None = None
    enabled: Flag | None = None

    @field_validator("name", "url", "format", "enabled")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("must not be null")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _check_url(value)

    @field_validator("clusters")
    @classmethod
    def _clusters(cls, value: list[str] | None) -> list[str] | None:
        return _check_clusters(value)


class DeliveryCounts(BaseModel):
    pending: int
    delivered: int
    dead: int
    skipped: int


class WebhookOut(BaseModel):
    id: int
    name: str
    url: str = Field(
        description="the URL with its secrets masked (password, query values, Slack's key): the stored URL,"
        " used for delivery, is never shown"
    )
    format: WebhookFormat
    rules: list[int] | None
    severities: list[str] | None
    clusters: list[str] | None = Field(description="the clusters whose events it gets; null: every cluster")
    has_secret: bool
    enabled: bool
    created_at: float
    created_by: str
    updated_at: float
    deliveries: DeliveryCounts

    @classmethod
    def of(cls, webhook: Webhook, counts: dict[DeliveryState, int] | None) -> WebhookOut:
        counts = counts or {}
        return cls(
            id=webhook.id,
            name=webhook.name,
            url=mask_url(webhook.url),
            format=webhook.format,
            rules=None if webhook.rules is None else list(webhook.rules),
            severities=None if webhook.severities is None else list(webhook.severities),
            clusters=None if webhook.clusters is None else list(webhook.clusters),
            has_secret=webhook.secret is not None,
            enabled=webhook.enabled,
            created_at=webhook.created_at,
            created_by=webhook.created_by,
            updated_at=webhook.updated_at,
            deliveries=DeliveryCounts(
                pending=counts.get("pending", 0),
                delivered=counts.get("delivered", 0),
                dead=counts.get("dead", 0),
                skipped=counts.get("skipped", 0),
            ),
        )


class DeliveryOut(BaseModel):
    id: int
    webhook_id: int
    fingerprint: str
    sequence: int
    idempotency_key: str
    kind: str
    event_at: float
    state: DeliveryState
    attempts: int
    next_attempt_at: float | None
    last_attempt_at: float | None
    last_status: int | None
    last_error: str | None
    created_at: float
    delivered_at: float | None
    payload: Any = Field(description="the body sent (JSON), frozen when the row was written; null if skipped")

    @classmethod
    def of(cls, delivery: WebhookDelivery) -> DeliveryOut:
        payload: Any = None
        if delivery.payload is not None:
            try:
                payload = json.loads(delivery.payload)
            except ValueError:
                payload = delivery.payload
        return cls(
            id=delivery.id,
            webhook_id=delivery.webhook_id,
            fingerprint=delivery.fingerprint,
            sequence=delivery.sequence,
            idempotency_key=delivery.idempotency_key,
            kind=delivery.kind,
            event_at=delivery.event_at,
            state=delivery.state,
            attempts=delivery.attempts,
            next_attempt_at=delivery.next_attempt_at,
            last_attempt_at=delivery.last_attempt_at,
            last_status=delivery.last_status,
            last_error=delivery.last_error,
            created_at=delivery.created_at,
            delivered_at=delivery.delivered_at,
            payload=payload,
        )


class PingOut(BaseModel):
    """The result of one test send (not recorded in the outbox, not retried): the receiver's status and
    the time it took, never its body."""

    delivered: bool
    outcome: Literal["delivered", "retry", "permanent"]
    status: int | None
    error: str | None
    idempotency_key: str
    duration_s: float

    @classmethod
    def of(cls, notice: AlertNotice, result: AttemptResult) -> PingOut:
        """The route's answer to a send that was made (a refused one is the route's 422)."""
        outcome = result.outcome
        if outcome == "refused":
            raise ValueError("a send the egress policy refused was not made: it has no PingOut")
        return cls(
            delivered=outcome == "delivered",
            outcome=outcome,
            status=result.status,
            error=result.error,
            idempotency_key=notice.idempotency_key,
            duration_s=result.duration_s,
        )
