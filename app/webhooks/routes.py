"""``/api/v1/webhooks`` (admin role): subscriptions, their outbox (dead letters included) and a test send.

Secrets are write-only: responses say ``has_secret``, and a password in a URL's user info is shown as
``***``. Invalid bodies are 422 naming each problem (the service's problem body), unknown ids 404, a retry
of a delivery that is not dead 409.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, field_validator

from app.service.auth import Principal, Role
from app.service.deps import require, webhooks_of
from app.service.schemas import Page, Problem
from app.webhooks.model import DeliveryState, Webhook, WebhookDelivery, WebhookFormat
from app.webhooks.notifier import Notifier, ping
from app.webhooks.store import WebhookStore

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])

Admin = Annotated[Principal, Depends(require(Role.admin))]
StoreDep = Annotated[WebhookStore, Depends(webhooks_of)]

MAX_URL = 2048
RuleNumber = Annotated[int, Field(ge=1, le=11)]
SeverityName = Literal["critical", "warning", "info"]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
Secret = Annotated[SecretStr, Field(min_length=16, max_length=256)]
Rules = Annotated[list[RuleNumber], Field(min_length=1, max_length=11)]
Severities = Annotated[list[SeverityName], Field(min_length=1, max_length=3)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem}}


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
    """A new subscription. ``rules`` / ``severities`` null: every rule / severity."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    url: str = Field(description="http:// or https:// URL the events are POSTed to")
    format: WebhookFormat = "generic"
    rules: Rules | None = None
    severities: Severities | None = None
    secret: Secret | None = Field(
        default=None, description="HMAC-SHA256 key of the X-Kafka-Health-Signature header (16-256 chars)"
    )
    enabled: bool = True

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _check_url(value)


class WebhookPatch(BaseModel):
    """Fields to change; ``rules``, ``severities`` and ``secret`` may be set to null (all rules, all
    severities, unsigned), the others not."""

    model_config = ConfigDict(extra="forbid")

    name: Name | None = None
    url: str | None = None
    format: WebhookFormat | None = None
    rules: Rules | None = None
    severities: Severities | None = None
    secret: Secret | None = None
    enabled: bool | None = None

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


class DeliveryCounts(BaseModel):
    pending: int
    delivered: int
    dead: int
    skipped: int


class WebhookOut(BaseModel):
    id: int
    name: str
    url: str
    format: WebhookFormat
    rules: list[int] | None
    severities: list[str] | None
    has_secret: bool
    enabled: bool
    created_at: float
    created_by: str
    updated_at: float
    deliveries: DeliveryCounts


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


class PingOut(BaseModel):
    """The result of one test send (not recorded in the outbox, not retried)."""

    delivered: bool
    outcome: Literal["delivered", "retry", "permanent"]
    status: int | None
    error: str | None
    idempotency_key: str
    duration_s: float


def _shown_url(url: str) -> str:
    """The URL with a password in its user info replaced by ``***``."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return url
    if not parsed.password:
        return url
    return str(parsed.copy_with(username=parsed.username, password="***"))


def _webhook_out(webhook: Webhook, counts: dict[DeliveryState, int] | None) -> WebhookOut:
    counts = counts or {}
    return WebhookOut(
        id=webhook.id,
        name=webhook.name,
        url=_shown_url(webhook.url),
        format=webhook.format,
        rules=None if webhook.rules is None else list(webhook.rules),
        severities=None if webhook.severities is None else list(webhook.severities),
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


def _delivery_out(delivery: WebhookDelivery) -> DeliveryOut:
    payload: Any = None
    if delivery.payload is not None:
        try:
            payload = json.loads(delivery.payload)
        except ValueError:
            payload = delivery.payload
    return DeliveryOut(
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


def _webhook_or_404(store: WebhookStore, webhook_id: int) -> Webhook:
    webhook = store.webhook(webhook_id)
    if webhook is None:
        raise HTTPException(404, f"no webhook with id {webhook_id}")
    return webhook


def _delivery_or_404(store: WebhookStore, webhook_id: int, delivery_id: int) -> WebhookDelivery:
    _webhook_or_404(store, webhook_id)
    delivery = store.delivery(delivery_id)
    if delivery is None or delivery.webhook_id != webhook_id:
        raise HTTPException(404, f"webhook {webhook_id} has no delivery with id {delivery_id}")
    return delivery


@router.post("", response_model=WebhookOut, status_code=201, responses={422: {"model": Problem}})
def create_webhook(body: WebhookIn, store: StoreDep, who: Admin) -> WebhookOut:
    """Subscribe a URL to alert events (those recorded from now on)."""
    webhook = store.create_webhook(
        name=body.name,
        url=body.url,
        format=body.format,
        rules=body.rules,
        severities=body.severities,
        secret=None if body.secret is None else body.secret.get_secret_value(),
        enabled=body.enabled,
        created_by=who.name,
        now=time.time(),
    )
    return _webhook_out(webhook, None)


@router.get("", response_model=list[WebhookOut])
def list_webhooks(store: StoreDep, _: Admin) -> list[WebhookOut]:
    """Every webhook with its outbox counts."""
    stats = store.delivery_stats()
    return [_webhook_out(w, stats.get(w.id)) for w in store.webhooks()]


@router.get("/{webhook_id}", response_model=WebhookOut, responses=NOT_FOUND)
def get_webhook(webhook_id: int, store: StoreDep, _: Admin) -> WebhookOut:
    webhook = _webhook_or_404(store, webhook_id)
    return _webhook_out(webhook, store.delivery_stats().get(webhook_id))


@router.patch("/{webhook_id}", response_model=WebhookOut, responses=NOT_FOUND)
def update_webhook(webhook_id: int, body: WebhookPatch, store: StoreDep, _: Admin) -> WebhookOut:
    """Change some fields. Outbox rows keep their payload; URL and secret are read when they are sent."""
    changes: dict[str, Any] = {}
    for name in body.model_fields_set:
        value = getattr(body, name)
        changes[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
    webhook = store.update_webhook(webhook_id, changes, time.time())
    if webhook is None:
        raise HTTPException(404, f"no webhook with id {webhook_id}")
    return _webhook_out(webhook, store.delivery_stats().get(webhook_id))


@router.delete("/{webhook_id}", status_code=204, response_class=Response, responses=NOT_FOUND)
def delete_webhook(webhook_id: int, store: StoreDep, _: Admin) -> Response:
    """Delete the webhook and its outbox (pending deliveries are not sent)."""
    if not store.delete_webhook(webhook_id):
        raise HTTPException(404, f"no webhook with id {webhook_id}")
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=Page[DeliveryOut], responses=NOT_FOUND)
def list_deliveries(
    webhook_id: int,
    store: StoreDep,
    _: Admin,
    state: Annotated[
        list[DeliveryState] | None, Query(description="pending, delivered, dead, skipped")
    ] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Page[DeliveryOut]:
    """The webhook's outbox, newest first; ``state=dead`` lists the dead letters."""
    _webhook_or_404(store, webhook_id)
    counts = store.delivery_stats().get(webhook_id, {})
    total = sum(n for s, n in counts.items() if state is None or s in state)
    rows = store.deliveries(webhook_id, state=state, limit=limit, offset=offset)
    return Page[DeliveryOut](items=[_delivery_out(d) for d in rows], total=total, offset=offset, limit=limit)


@router.get("/{webhook_id}/deliveries/{delivery_id}", response_model=DeliveryOut, responses=NOT_FOUND)
def get_delivery(webhook_id: int, delivery_id: int, store: StoreDep, _: Admin) -> DeliveryOut:
    return _delivery_out(_delivery_or_404(store, webhook_id, delivery_id))


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/retry",
    response_model=DeliveryOut,
    responses={**NOT_FOUND, 409: {"model": Problem}},
)
def retry_delivery(webhook_id: int, delivery_id: int, store: StoreDep, _: Admin) -> DeliveryOut:
    """Send a dead delivery again (from its first attempt, with the same idempotency key)."""
    delivery = _delivery_or_404(store, webhook_id, delivery_id)
    if delivery.state != "dead" or not store.requeue_delivery(delivery_id, time.time()):
        current = store.delivery(delivery_id)
        shown = delivery.state if current is None else current.state
        raise HTTPException(409, f"delivery {delivery_id} is {shown}; only a dead delivery can be retried")
    requeued = store.delivery(delivery_id)
    if requeued is None:  # deleted meanwhile
        raise HTTPException(404, f"webhook {webhook_id} has no delivery with id {delivery_id}")
    return _delivery_out(requeued)


@router.post("/{webhook_id}/test", response_model=PingOut, responses=NOT_FOUND)
def send_test_event(webhook_id: int, request: Request, store: StoreDep, _: Admin) -> PingOut:
    """Send a made-up event (rule 0, severity info, its own fingerprint) now, once, signed like any
    delivery, and say what the receiver answered. Disabled webhooks can be tested too."""
    webhook = _webhook_or_404(store, webhook_id)
    notifier: Notifier | None = getattr(request.app.state, "notifier", None)
    notice, result = notifier.ping(webhook) if notifier is not None else ping(webhook)
    return PingOut(
        delivered=result.outcome == "delivered",
        outcome=result.outcome,
        status=result.status,
        error=result.error,
        idempotency_key=notice.idempotency_key,
        duration_s=result.duration_s,
    )
