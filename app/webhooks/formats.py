"""Webhook payloads (pure): one alert event as generic JSON, as an Alertmanager webhook message, or as a
Slack incoming-webhook message.

:func:`render` returns the request body as text; the notifier renders it once, when it writes the outbox
row, and sends those exact bytes on every attempt. See ``docs/webhooks.md`` for the three formats.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from analytics.model import AlertEvent
from app.webhooks.model import AlertNotice, Webhook, WebhookFormat

__all__ = [
    "ALERTMANAGER_ZERO_TIME",
    "GENERIC_SCHEMA",
    "RULE_TITLES",
    "alertmanager_payload",
    "generic_payload",
    "payload",
    "ping_notice",
    "render",
    "rfc3339",
    "slack_payload",
]

GENERIC_SCHEMA: Final = "kafka-health.alert-event/v1"
ALERTMANAGER_ZERO_TIME: Final = "0001-01-01T00:00:00Z"
"""What Alertmanager sends as ``endsAt`` of a firing alert."""
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


PayloadBuilder = Callable[..., dict[str, Any]]

_BUILDERS: Final[Mapping[WebhookFormat, PayloadBuilder]] = {
    "generic": generic_payload,
    "alertmanager": alertmanager_payload,
    "slack": slack_payload,
}


def payload(
    format: WebhookFormat, notice: AlertNotice, *, receiver: str = "", external_url: str = ""
) -> dict[str, Any]:
    """The message for ``notice`` in ``format``."""
    try:
        builder = _BUILDERS[format]
    except KeyError:
        raise ValueError(f"unknown webhook format {format!r}: use one of {', '.join(_BUILDERS)}") from None
    return builder(notice, receiver=receiver, external_url=external_url)


def render(webhook: Webhook, notice: AlertNotice, *, external_url: str = "") -> str:
    """The request body (compact JSON text) of ``notice`` for ``webhook``."""
    body = payload(webhook.format, notice, receiver=webhook.name, external_url=external_url)
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
