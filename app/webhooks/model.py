"""What a webhook is: the subscription, its outbox rows, the alert event it is sent (with its alert's
identity), and the checks a subscription's fields pass before they are stored.

The tables and queries are in :mod:`app.webhooks.store`; which event goes to which webhook is decided in
:mod:`app.webhooks.policy`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from analytics.model import SEVERITY_ORDER, ActionRef, AlertEvent, EventKind, Severity
from analytics.store import StoreError

__all__ = [
    "DELIVERY_STATES",
    "MAX_CLUSTER_KEY",
    "MAX_WEBHOOK_CLUSTERS",
    "RESENT_FORMATS",
    "WEBHOOK_FIELDS",
    "WEBHOOK_FORMATS",
    "AlertNotice",
    "DeliveryState",
    "Webhook",
    "WebhookDelivery",
    "WebhookFormat",
    "WebhookRenderer",
    "checked_fields",
    "idempotency_key",
    "is_cluster_key",
]

WebhookFormat = Literal["generic", "alertmanager", "slack", "alertmanager-api"]
DeliveryState = Literal["pending", "delivered", "dead", "skipped"]
WEBHOOK_FORMATS: Final[tuple[WebhookFormat, ...]] = ("generic", "alertmanager", "slack", "alertmanager-api")
RESENT_FORMATS: Final[frozenset[WebhookFormat]] = frozenset({"alertmanager-api"})
"""Formats whose receivers get an open alert again and again while it stays open (Alertmanager's API
resolves an alert that is not re-sent before its ``endsAt``): :meth:`app.webhooks.notifier.Notifier`."""
DELIVERY_STATES: Final[tuple[DeliveryState, ...]] = ("pending", "delivered", "dead", "skipped")
WEBHOOK_FIELDS: Final = frozenset(
    {"name", "url", "format", "rules", "severities", "clusters", "secret", "enabled"}
)
"""The fields of a subscription that can be set (and changed)."""
MAX_CLUSTER_KEY: Final = 255
"""The longest cluster key a webhook's ``clusters`` holds (a cluster name is at most 63, a cluster id 22)."""
MAX_WEBHOOK_CLUSTERS: Final = 100
"""The most clusters one webhook lists."""


@dataclass(frozen=True, slots=True)
class Webhook:
    """A webhook subscription: where to send which alert events, in which format, signed with which secret."""

    id: int
    name: str
    url: str = field(repr=False)
    """Where the events are POSTed; it may hold a credential, so it is shown only through
    :func:`app.webhooks.urls.mask_url` (and left out of the repr)."""
    format: WebhookFormat
    rules: tuple[int, ...] | None
    """Alert rules whose events are sent; None: every rule."""
    severities: tuple[Severity, ...] | None
    """Event severities that are sent; None: every severity."""
    secret: str | None = field(repr=False)
    """HMAC-SHA256 key of the signature header; None: deliveries are not signed."""
    enabled: bool
    created_at: float
    created_by: str
    updated_at: float
    clusters: tuple[str, ...] | None = None
    """The clusters whose alerts' events the webhook gets, by their key (a named cluster's name, else the
    cluster id of the single unnamed cluster); None: every cluster. The events of the other clusters never
    enter its outbox."""

    def watches(self, cluster: str) -> bool:
        """Whether the events of ``cluster``'s alerts go to this webhook (its outbox)."""
        return self.clusters is None or cluster in self.clusters

    def mismatch(self, rule: int, severity: str) -> str | None:
        """Why an event of ``rule`` at ``severity`` is filtered out, or None when it matches."""
        if self.rules is not None and rule not in self.rules:
            return f"rule {rule} is not in the webhook's rules {list(self.rules)}"
        if self.severities is not None and severity not in self.severities:
            return f"severity {severity} is not in the webhook's severities {list(self.severities)}"
        return None


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One row of the outbox: one alert event for one webhook (``idempotency_key`` = fingerprint:sequence).

    ``pending``: to be sent (again) at ``next_attempt_at``; ``delivered``: the receiver answered 2xx;
    ``dead``: given up (a permanent error or too many attempts), until requeued; ``skipped``: not sent, the
    reason in ``last_error`` (filtered out, or the event predates the webhook or happened while disabled).
    """

    id: int
    webhook_id: int
    fingerprint: str
    sequence: int
    idempotency_key: str
    kind: EventKind
    event_at: float
    payload: str | None
    """The request body, rendered once when the row was written (None for a skipped row)."""
    state: DeliveryState
    attempts: int
    next_attempt_at: float | None
    last_attempt_at: float | None
    last_status: int | None
    last_error: str | None
    created_at: float
    delivered_at: float | None


@dataclass(frozen=True, slots=True)
class AlertNotice:
    """An alert event with its alert's identity: everything a webhook payload is made of."""

    event: AlertEvent
    cluster: str
    rule: int
    subject: str
    action: ActionRef | None
    opened_at: float | None
    """When the run this event belongs to opened (its latest ``opened`` event's ``at``)."""

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.event.fingerprint, self.event.sequence)


WebhookRenderer = Callable[[Webhook, AlertNotice], str]
"""Renders the request body of one event for one webhook (called when the outbox row is written)."""


def idempotency_key(fingerprint: str, sequence: int) -> str:
    """The key a receiver deduplicates on: one per alert event (and per webhook, as each has its own row)."""
    return f"{fingerprint}:{sequence}"


# --- checking a subscription's fields ----------------------------------------------------------------------


def checked_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """Checked column values of the webhook fields in ``values`` (lists sorted, duplicates dropped; other
    names are left out). Raises :class:`StoreError` naming the field."""
    return {
        name: check(value, f"webhook {name}")
        for name, value in values.items()
        if (check := _FIELD_CHECKS.get(name)) is not None
    }


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StoreError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def _format(value: Any, where: str) -> WebhookFormat:
    if value not in WEBHOOK_FORMATS:
        raise StoreError(f"{where} must be one of {', '.join(WEBHOOK_FORMATS)}, got {value!r}")
    return cast(WebhookFormat, value)


def _rules(value: Any, where: str) -> list[int] | None:
    if value is not None and (
        isinstance(value, str)
        or not value
        or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in value)
    ):
        raise StoreError(f"{where} must be None (every rule) or positive rule numbers, got {value!r}")
    return None if value is None else sorted(set(value))


def _severities(value: Any, where: str) -> list[str] | None:
    if value is not None and (
        isinstance(value, str) or not value or any(s not in SEVERITY_ORDER for s in value)
    ):
        raise StoreError(
            f"{where} must be None (every severity) or some of critical, warning, info, got {value!r}"
        )
    return None if value is None else sorted(set(value), key=lambda s: -SEVERITY_ORDER[s])


def _clusters(value: Any, where: str) -> list[str] | None:
    if value is not None and (
        isinstance(value, str)
        or not isinstance(value, Collection)
        or not value
        or len(value) > MAX_WEBHOOK_CLUSTERS
        or any(not is_cluster_key(c) for c in value)
    ):
        raise StoreError(
            f"{where} must be None (every cluster) or 1-{MAX_WEBHOOK_CLUSTERS} cluster names or ids"
            f" (1-{MAX_CLUSTER_KEY} characters, no whitespace), got {value!r}"
        )
    return None if value is None else sorted(set(value))


def is_cluster_key(value: Any) -> bool:
    """A cluster's key as the store knows it: a named cluster's name or a cluster id (any 1-255 characters
    without whitespace)."""
    return (
        isinstance(value, str) and 0 < len(value) <= MAX_CLUSTER_KEY and not any(c.isspace() for c in value)
    )


def _secret(value: Any, where: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise StoreError("webhook secret must be None (unsigned) or a non-empty string")
    return None if value is None else str(value)


def _enabled(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise StoreError(f"{where} must be a boolean, got {value!r}")
    return value


_FIELD_CHECKS: Final[Mapping[str, Callable[[Any, str], Any]]] = {
    "name": _text,
    "url": _text,
    "format": _format,
    "rules": _rules,
    "severities": _severities,
    "clusters": _clusters,
    "secret": _secret,
    "enabled": _enabled,
}
