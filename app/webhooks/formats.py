"""Webhook payloads (pure): one alert event as generic JSON, as an Alertmanager webhook message, as a
Slack incoming-webhook message, or as an alert posted to Alertmanager's own API (``/api/v2/alerts``).

:func:`render` returns the request body as text; the notifier renders it once, when it writes the outbox
row, and sends those exact bytes on every attempt. An ``alertmanager-api`` receiver also gets an open
alert again every re-send interval (rendered anew, with ``endsAt`` ahead), as Prometheus re-sends its
firing alerts. See ``docs/webhooks.md`` for the four formats.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from analytics.model import AlertEvent
from app.webhooks.model import AlertNotice, Webhook, WebhookFormat

__all__ = [
    "ALERTMANAGER_ALERTS_PATH",
    "ALERTMANAGER_ZERO_TIME",
    "DEFAULT_RESEND_INTERVAL_S",
    "ENDS_AT_RESENDS",
    "GENERIC_SCHEMA",
    "RULE_TITLES",
    "alertmanager_api_payload",
    "alertmanager_payload",
    "delivery_url",
    "generic_payload",
    "payload",
    "ping_notice",
    "render",
    "rfc3339",
    "slack_payload",
    "subject_labels",
]

GENERIC_SCHEMA: Final = "kafka-health.alert-event/v1"
ALERTMANAGER_ZERO_TIME: Final = "0001-01-01T00:00:00Z"
"""What Alertmanager sends as ``endsAt`` of a firing alert."""
ALERTMANAGER_ALERTS_PATH: Final = "/api/v2/alerts"
"""Where Alertmanager takes alerts (its API v2, ``postAlerts``)."""
DEFAULT_RESEND_INTERVAL_S: Final = 60.0
"""How often an open alert is posted to Alertmanager again (Prometheus' ``--rules.alert.resend-delay``
is one minute too)."""
ENDS_AT_RESENDS: Final = 4
"""An open alert's ``endsAt`` is this many re-send intervals ahead of the time it is sent, as Prometheus
sets it (4 × its resend delay or evaluation interval): Alertmanager resolves it by itself only after
several re-sends are missed (kafka-health stopped, or Alertmanager unreachable)."""
TEST_RULE: Final = 0
"""The rule number of :func:`ping_notice` (no real rule has it)."""

RULE_TITLES: Final[Mapping[int, str]] = {
    TEST_RULE: "webhook test",
    1: "offline partitions",
    2: "under-replicated partitions",
    3: "partitions under min ISR",
    4: "controller missing, duplicated or flapping",
    5: "broker not registered",
    6: "suspect broker",
    7: "preferred-leader imbalance",
    8: "broker load deviation",
    9: "cluster load imbalance",
    10: "URP gauges disagree with ZooKeeper",
    11: "collector stale",
    12: "runbook action stalled",
    13: "cluster state partly unreadable",
    14: "log dir filling",
    15: "log dir offline",
    16: "broker saturated",
    17: "file descriptors running out",
    18: "ISR flapping",
    19: "consumer group stopped, lagging or falling off the log",
}
"""Short titles of the alert rules (docs/alert-rules.md)."""

_SLACK_TEXT_MAX: Final = 3000
_SLACK_FIELD_MAX: Final = 2000
_SLACK_HEADER_MAX: Final = 150
_EVIDENCE_MAX: Final = 1500


def rfc3339(at: float) -> str:
    """Epoch seconds as RFC 3339 in UTC with milliseconds, e.g. ``2024-05-01T12:00:00.250Z``."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def status(notice: AlertNotice) -> str:
    """``firing`` (opened, updated) or ``resolved``."""
    return "resolved" if notice.event.kind == "resolved" else "firing"


def rule_title(rule: int) -> str:
    return RULE_TITLES.get(rule, f"rule {rule}")


def alertname(rule: int) -> str:
    return "KafkaHealthTest" if rule == TEST_RULE else f"KafkaHealthRule{rule}"


def _action_text(notice: AlertNotice) -> str | None:
    action = notice.action
    if action is None:
        return None
    body = f" {json.dumps(dict(action.body), sort_keys=True)}" if action.body else ""
    return f"{action.method} {action.path}{body}"


def _link(external_url: str, notice: AlertNotice) -> str:
    if not external_url or notice.rule == TEST_RULE:
        return ""
    return f"{external_url.rstrip('/')}/api/v1/alerts/{notice.event.fingerprint}"


def generic_payload(notice: AlertNotice, *, receiver: str = "", external_url: str = "") -> dict[str, Any]:
    """kafka-health's own schema (:data:`GENERIC_SCHEMA`): the event and its alert, flat."""
    event = notice.event
    return {
        "schema": GENERIC_SCHEMA,
        "idempotency_key": notice.idempotency_key,
        "receiver": receiver,
        "kind": event.kind,
        "status": status(notice),
        "at": event.at,
        "at_rfc3339": rfc3339(event.at),
        "fingerprint": event.fingerprint,
        "sequence": event.sequence,
        "cluster": notice.cluster,
        "rule": notice.rule,
        "rule_title": rule_title(notice.rule),
        "subject": notice.subject,
        "severity": event.severity,
        "summary": event.summary,
        "evidence": dict(event.evidence),
        "suggested_action": None if notice.action is None else notice.action.to_json(),
        "opened_at": notice.opened_at,
        "url": _link(external_url, notice) or None,
    }


def alertmanager_payload(
    notice: AlertNotice, *, receiver: str = "", external_url: str = ""
) -> dict[str, Any]:
    """Alertmanager's webhook message (``version: "4"``) with one alert, so that tools that take
    Alertmanager's webhooks take ours. Labels identify the alert (they do not change between its events);
    the event itself is in the annotations."""
    event = notice.event
    state = status(notice)
    labels = {
        "alertname": alertname(notice.rule),
        "rule": str(notice.rule),
        "severity": event.severity,
        "cluster": notice.cluster,
        "subject": notice.subject,
    }
    annotations = {
        "summary": event.summary,
        "description": f"{rule_title(notice.rule)}: {event.summary}",
        "evidence": _compact(event.evidence),
        "event": event.kind,
        "sequence": str(event.sequence),
        "idempotency_key": notice.idempotency_key,
    }
    action = _action_text(notice)
    if action is not None:
        annotations["suggested_action"] = action
    link = _link(external_url, notice)
    if link:
        annotations["runbook_url"] = link
    starts = notice.opened_at if notice.opened_at is not None else event.at
    group_labels = {"alertname": labels["alertname"], "cluster": notice.cluster}
    return {
        "version": "4",
        "groupKey": "{}:{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in group_labels.items()) + "}",
        "truncatedAlerts": 0,
        "status": state,
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url,
        "alerts": [
            {
                "status": state,
                "labels": labels,
                "annotations": annotations,
                "startsAt": rfc3339(starts),
                "endsAt": rfc3339(event.at) if state == "resolved" else ALERTMANAGER_ZERO_TIME,
                "generatorURL": link,
                "fingerprint": event.fingerprint,
            }
        ],
    }


_SUBJECT_LABELS: Final = ("broker", "topic", "group", "action")
"""Subject kinds (``broker:3``, ``topic:orders``, ...) also given as a label of their own."""


def alertmanager_api_payload(
    notice: AlertNotice,
    *,
    receiver: str = "",
    external_url: str = "",
    now: float | None = None,
    resend_interval_s: float = DEFAULT_RESEND_INTERVAL_S,
) -> list[dict[str, Any]]:
    """The body of ``POST /api/v2/alerts`` (a list of Alertmanager's ``postableAlert``) with the alert.

    Labels identify the alert (Alertmanager deduplicates and groups on them, so they never change between
    its events): ``alertname``, ``cluster``, ``rule``, ``subject``, ``severity``, and ``broker``,
    ``topic``, ``group`` or ``action`` from the subject. The event is in the annotations. A firing alert
    (opened, updated) ends :data:`ENDS_AT_RESENDS` re-send intervals after ``now`` (the time it is
    rendered, i.e. sent: it is sent again before that while it stays open); a resolved one ends when it
    resolved. ``generatorURL`` is the alert in this service's API when ``external_url`` is set (else it
    is left out)."""
    del receiver  # Alertmanager routes on the labels: the webhook's name is not part of the alert
    event = notice.event
    at = time.time() if now is None else now
    labels = {
        "alertname": alertname(notice.rule),
        "cluster": notice.cluster,
        "rule": str(notice.rule),
        "subject": notice.subject,
        "severity": event.severity,
        **subject_labels(notice.subject),
    }
    annotations = {
        "summary": event.summary,
        "description": f"{rule_title(notice.rule)}: {event.summary}",
        "evidence": _compact(event.evidence),
        "event": event.kind,
        "sequence": str(event.sequence),
    }
    action = _action_text(notice)
    if action is not None:
        annotations["runbook"] = action
    link = _link(external_url, notice)
    if link:
        annotations["runbook_url"] = link
    starts = notice.opened_at if notice.opened_at is not None else event.at
    if status(notice) == "resolved":
        ends = max(event.at, starts)
    else:
        ends = max(at, starts) + ENDS_AT_RESENDS * resend_interval_s
    alert: dict[str, Any] = {
        "labels": {name: value for name, value in labels.items() if value},
        "annotations": {name: value for name, value in annotations.items() if value},
        "startsAt": rfc3339(starts),
        "endsAt": rfc3339(ends),
    }
    if link:
        alert["generatorURL"] = link
    return [alert]


def subject_labels(subject: str) -> dict[str, str]:
    """``broker``, ``topic``, ``group`` or ``action`` of a subject that names one (``broker:3``,
    ``broker:3:/data`` for a log dir, ``topic:orders``); none for the others (``cluster``, ...)."""
    kind, _, rest = subject.partition(":")
    if kind not in _SUBJECT_LABELS or not rest:
        return {}
    return {kind: rest.split(":", 1)[0] if kind == "broker" else rest}


def delivery_url(format: WebhookFormat, url: str) -> str:
    """Where a webhook's deliveries are POSTed: its URL, except that an ``alertmanager-api`` webhook's URL
    may be Alertmanager's base URL (``http://alertmanager:9093``, or with a route prefix, ``.../am``), to
    which ``/api/v2/alerts`` is added, or end with it already (a trailing ``/`` is dropped)."""
    if format != "alertmanager-api":
        return url
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith(ALERTMANAGER_ALERTS_PATH):
        path += ALERTMANAGER_ALERTS_PATH
    return urlunsplit(parts._replace(path=path))


_SLACK_ICONS: Final[Mapping[str, str]] = {
    "critical": ":red_circle:",
    "warning": ":large_orange_circle:",
    "info": ":large_blue_circle:",
}


def slack_payload(notice: AlertNotice, *, receiver: str = "", external_url: str = "") -> dict[str, Any]:
    """A Slack incoming-webhook message: ``text`` (the notification's fallback) and Block Kit ``blocks``."""
    event = notice.event
    icon = ":white_check_mark:" if event.kind == "resolved" else _SLACK_ICONS.get(event.severity, "")
    verb = {"opened": "Firing", "updated": "Updated", "resolved": "Resolved"}[event.kind]
    title = f"{verb}: {rule_title(notice.rule)} (rule {notice.rule}) on {notice.cluster}"
    text = f"{icon} [{verb.upper()}] {event.severity} · {notice.cluster} · {notice.subject}: {event.summary}"
    fields = [
        ("Cluster", notice.cluster),
        ("Subject", notice.subject),
        ("Severity", event.severity),
        ("Event", f"{event.kind} #{event.sequence} at {rfc3339(event.at)}"),
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(f"{title}", _SLACK_HEADER_MAX)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _clip(f"{icon} *{_esc(event.summary)}*")}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": _clip(f"*{name}*\n{_esc(value)}", _SLACK_FIELD_MAX)}
                for name, value in fields
            ],
        },
    ]
    action = _action_text(notice)
    if action is not None:
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": _clip(f"*Suggested action* (dry run first)\n`{_esc(action)}`"),
                },
            }
        )
    if event.evidence:
        evidence = _clip(_compact(event.evidence), _EVIDENCE_MAX)
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*Evidence*\n```{_esc(evidence)}```"}}
        )
    link = _link(external_url, notice)
    context = f"fingerprint `{event.fingerprint}` · key `{notice.idempotency_key}`"
    if link:
        context += f" · <{link}|alert>"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(context)}]})
    return {"text": _clip(text), "blocks": blocks}


PayloadBuilder = Callable[..., Any]

_BUILDERS: Final[Mapping[WebhookFormat, PayloadBuilder]] = {
    "generic": generic_payload,
    "alertmanager": alertmanager_payload,
    "slack": slack_payload,
    "alertmanager-api": alertmanager_api_payload,
}


def payload(
    format: WebhookFormat,
    notice: AlertNotice,
    *,
    receiver: str = "",
    external_url: str = "",
    now: float | None = None,
    resend_interval_s: float = DEFAULT_RESEND_INTERVAL_S,
) -> Any:
    """The message for ``notice`` in ``format`` (a JSON object; a list of alerts for
    ``alertmanager-api``, whose firing alerts end ahead of ``now``: :func:`alertmanager_api_payload`)."""
    try:
        builder = _BUILDERS[format]
    except KeyError:
        raise ValueError(f"unknown webhook format {format!r}: use one of {', '.join(_BUILDERS)}") from None
    if format == "alertmanager-api":
        return alertmanager_api_payload(
            notice,
            receiver=receiver,
            external_url=external_url,
            now=now,
            resend_interval_s=resend_interval_s,
        )
    return builder(notice, receiver=receiver, external_url=external_url)


def render(
    webhook: Webhook,
    notice: AlertNotice,
    *,
    external_url: str = "",
    now: float | None = None,
    resend_interval_s: float = DEFAULT_RESEND_INTERVAL_S,
) -> str:
    """The request body (compact JSON text) of ``notice`` for ``webhook``, rendered at ``now``."""
    body = payload(
        webhook.format,
        notice,
        receiver=webhook.name,
        external_url=external_url,
        now=now,
        resend_interval_s=resend_interval_s,
    )
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def ping_notice(webhook: Webhook, now: float | None = None) -> AlertNotice:
    """A made-up ``opened`` event for ``POST /api/v1/webhooks/{id}/test`` (rule 0, its own fingerprint, so
    that a receiver never confuses it with a real alert)."""
    at = time.time() if now is None else now
    return AlertNotice(
        event=AlertEvent(
            fingerprint=f"test-{uuid.uuid4().hex[:12]}",
            sequence=1,
            kind="opened",
            at=at,
            severity="info",
            summary=f"kafka-health test notification for webhook {webhook.name!r}",
            evidence={"webhook_id": webhook.id, "test": True},
        ),
        cluster="kafka-health",
        rule=TEST_RULE,
        subject=f"webhook:{webhook.id}",
        action=None,
        opened_at=at,
    )


def _compact(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _esc(text: str) -> str:
    """Slack's mrkdwn escaping: &, < and > only."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int = _SLACK_TEXT_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
