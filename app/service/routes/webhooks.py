"""``/api/v1/webhooks`` (admin role): subscriptions, their outbox (dead letters included) and a test send.

Secrets are write-only (:mod:`app.service.schemas.webhooks`). Invalid bodies are 422 naming each problem
(the service's problem body), unknown ids 404, a retry of a delivery that is not dead 409.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import SecretStr

from app.service.deps import Admin, NotifierDep, WebhooksDep
from app.service.schemas.common import Page, Problem
from app.service.schemas.params import IdPath, Limit, Offset
from app.service.schemas.webhooks import DeliveryOut, PingOut, WebhookIn, WebhookOut, WebhookPatch
from app.webhooks.model import DeliveryState, Webhook, WebhookDelivery
from app.webhooks.notifier import Notifier, NotifierSettings, egress_guard, ping
from app.webhooks.store import WebhookStore
from app.webhooks.transport import EgressGuard

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem}}


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


def _egress(notifier: Notifier | None) -> EgressGuard:
    return notifier.egress if notifier is not None else egress_guard(NotifierSettings())


def _check_egress(notifier: Notifier | None, url: str) -> None:
    """422 naming ``body.url`` when the egress policy refuses the URL's host now (its addresses, resolved
    as a delivery would resolve them); every delivery checks again when it connects."""
    reason = _egress(notifier).check_url(url)
    if reason is not None:
        raise RequestValidationError(
            [{"loc": ("body", "url"), "msg": reason, "type": "egress_refused", "input": None}]
        )


@router.post("", response_model=WebhookOut, status_code=201, responses={422: {"model": Problem}})
def create_webhook(body: WebhookIn, who: Admin, store: WebhooksDep, notifier: NotifierDep) -> WebhookOut:
    """Subscribe a URL to alert events (those recorded from now on). A URL the egress policy refuses
    (private, loopback, link-local, metadata addresses, unless allowed by the settings) is a 422."""
    _check_egress(notifier, body.url)
    webhook = store.create_webhook(
        name=body.name,
        url=body.url,
        format=body.format,
        rules=body.rules,
        severities=body.severities,
        clusters=body.clusters,
        secret=None if body.secret is None else body.secret.get_secret_value(),
        enabled=body.enabled,
        created_by=who.name,
        now=time.time(),
    )
    return WebhookOut.of(webhook, None)


@router.get("", response_model=list[WebhookOut])
def list_webhooks(_: Admin, store: WebhooksDep) -> list[WebhookOut]:
    """Every webhook with its outbox counts."""
    stats = store.delivery_stats()
    return [WebhookOut.of(w, stats.get(w.id)) for w in store.webhooks()]


@router.get("/{webhook_id}", response_model=WebhookOut, responses=NOT_FOUND)
def get_webhook(webhook_id: IdPath, _: Admin, store: WebhooksDep) -> WebhookOut:
    webhook = _webhook_or_404(store, webhook_id)
    return WebhookOut.of(webhook, store.delivery_stats().get(webhook_id))


@router.patch("/{webhook_id}", response_model=WebhookOut, responses=NOT_FOUND)
def update_webhook(
    webhook_id: IdPath, body: WebhookPatch, _: Admin, store: WebhooksDep, notifier: NotifierDep
) -> WebhookOut:
    """Change some fields. Outbox rows keep their payload; URL and secret are read when they are sent. A
    URL the egress policy refuses is a 422, as at creation."""
    if body.url is not None:
        _check_egress(notifier, body.url)
    changes: dict[str, Any] = {}
    for name in body.model_fields_set:
        value = getattr(body, name)
        changes[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
    webhook = store.update_webhook(webhook_id, changes, time.time())
    if webhook is None:
        raise HTTPException(404, f"no webhook with id {webhook_id}")
    return WebhookOut.of(webhook, store.delivery_stats().get(webhook_id))


@router.delete("/{webhook_id}", status_code=204, response_class=Response, responses=NOT_FOUND)
def delete_webhook(webhook_id: IdPath, _: Admin, store: WebhooksDep) -> Response:
    """Delete the webhook and its outbox (pending deliveries are not sent)."""
    if not store.delete_webhook(webhook_id):
        raise HTTPException(404, f"no webhook with id {webhook_id}")
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=Page[DeliveryOut], responses=NOT_FOUND)
def list_deliveries(
    webhook_id: IdPath,
    _: Admin,
    store: WebhooksDep,
    state: Annotated[
        list[DeliveryState] | None, Query(description="pending, delivered, dead, skipped")
    ] = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> Page[DeliveryOut]:
    """The webhook's outbox, newest first; ``state=dead`` lists the dead letters."""
    _webhook_or_404(store, webhook_id)
    counts = store.delivery_stats().get(webhook_id, {})
    total = sum(n for s, n in counts.items() if state is None or s in state)
    rows = store.deliveries(webhook_id, state=state, limit=limit, offset=offset)
    return Page[DeliveryOut](items=[DeliveryOut.of(d) for d in rows], total=total, offset=offset, limit=limit)


@router.get("/{webhook_id}/deliveries/{delivery_id}", response_model=DeliveryOut, responses=NOT_FOUND)
def get_delivery(webhook_id: IdPath, delivery_id: IdPath, _: Admin, store: WebhooksDep) -> DeliveryOut:
    return DeliveryOut.of(_delivery_or_404(store, webhook_id, delivery_id))


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/retry",
    response_model=DeliveryOut,
    responses={**NOT_FOUND, 409: {"model": Problem}},
)
def retry_delivery(webhook_id: IdPath, delivery_id: IdPath, _: Admin, store: WebhooksDep) -> DeliveryOut:
    """Send a dead delivery again (from its first attempt, with the same idempotency key)."""
    delivery = _delivery_or_404(store, webhook_id, delivery_id)
    if delivery.state != "dead" or not store.requeue_delivery(delivery_id, time.time()):
        current = store.delivery(delivery_id)
        shown = delivery.state if current is None else current.state
        raise HTTPException(409, f"delivery {delivery_id} is {shown}; only a dead delivery can be retried")
    requeued = store.delivery(delivery_id)
    if requeued is None:  # deleted meanwhile
        raise HTTPException(404, f"webhook {webhook_id} has no delivery with id {delivery_id}")
    return DeliveryOut.of(requeued)


@router.post("/{webhook_id}/test", response_model=PingOut, responses={**NOT_FOUND, 422: {"model": Problem}})
def send_test_event(webhook_id: IdPath, _: Admin, notifier: NotifierDep, store: WebhooksDep) -> PingOut:
    """Send a made-up event (rule 0, severity info, its own fingerprint) now, once, signed like any
    delivery, and say what the receiver answered: its status and the time it took, never its body.
    Disabled webhooks can be tested too. A URL the egress policy refuses is a 422, and nothing is sent."""
    webhook = _webhook_or_404(store, webhook_id)
    notice, result = notifier.ping(webhook) if notifier is not None else ping(webhook)
    if result.outcome == "refused":
        raise HTTPException(422, f"not sent: {result.error}")
    return PingOut.of(notice, result)
