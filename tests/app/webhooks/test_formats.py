"""The three payload formats (pure): what each carries for opened, updated and resolved events."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from analytics.model import ActionRef, AlertEvent, EventKind
from app.webhooks import formats
from app.webhooks.model import AlertNotice, Webhook, WebhookFormat

pytestmark = pytest.mark.unit

OPENED_AT = 1_700_000_000.0


def notice(kind: EventKind = "opened", sequence: int = 1, **event: Any) -> AlertNotice:
    at = OPENED_AT if kind == "opened" else OPENED_AT + 60.0 * sequence
    values: dict[str, Any] = {
        "fingerprint": "0123456789abcdef",
        "sequence": sequence,
        "kind": kind,
        "at": at,
        "severity": "critical",
        "summary": "2 offline partitions of topic orders",
        "evidence": {"count": 2, "examples": {"orders": [0, 1]}},
    }
    values.update(event)
    return AlertNotice(
        event=AlertEvent(**values),
        cluster="prod",
        rule=1,
        subject="topic:orders",
        action=ActionRef("GET", "/api/v1/partitions", {"offline": True}),
        opened_at=OPENED_AT,
    )


def webhook(format: WebhookFormat = "generic") -> Webhook:
    return Webhook(
        id=7,
        name="oncall",
        url="https://hooks.example/x",
        format=format,
        rules=None,
        severities=None,
        secret="s3cret-s3cret-s3cret",
        enabled=True,
        created_at=0.0,
        created_by="root",
        updated_at=0.0,
    )


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert formats.rfc3339(0.0) == "1970-01-01T00:00:00.000Z"
    assert formats.rfc3339(OPENED_AT + 0.25) == "2023-11-14T22:13:20.250Z"


def test_generic_carries_the_event_and_its_alert() -> None:
    body = formats.generic_payload(
        notice("resolved", 2), receiver="oncall", external_url="https://kh.example/"
    )
    assert body == {
        "schema": "kafka-health.alert-event/v1",
        "idempotency_key": "0123456789abcdef:2",
        "receiver": "oncall",
        "kind": "resolved",
        "status": "resolved",
        "at": OPENED_AT + 120.0,
        "at_rfc3339": "2023-11-14T22:15:20.000Z",
        "fingerprint": "0123456789abcdef",
        "sequence": 2,
        "cluster": "prod",
        "rule": 1,
        "rule_title": "offline partitions",
        "subject": "topic:orders",
        "severity": "critical",
        "summary": "2 offline partitions of topic orders",
        "evidence": {"count": 2, "examples": {"orders": [0, 1]}},
        "suggested_action": {"method": "GET", "path": "/api/v1/partitions", "body": {"offline": True}},
        "opened_at": OPENED_AT,
        "url": "https://kh.example/api/v1/alerts/0123456789abcdef",
    }
    assert formats.generic_payload(notice())["url"] is None
    assert formats.generic_payload(notice("updated", 2))["status"] == "firing"


@pytest.mark.parametrize(
    ("kind", "status", "ends_at"),
    [
        ("opened", "firing", "0001-01-01T00:00:00Z"),
        ("updated", "firing", "0001-01-01T00:00:00Z"),
        ("resolved", "resolved", "2023-11-14T22:16:20.000Z"),
    ],
)
def test_alertmanager_webhook_format(kind: EventKind, status: str, ends_at: str) -> None:
    body = formats.alertmanager_payload(notice(kind, 3), receiver="oncall", external_url="https://kh.example")
    assert body["version"] == "4"
    assert body["status"] == status
    assert body["receiver"] == "oncall"
    assert body["truncatedAlerts"] == 0
    assert body["externalURL"] == "https://kh.example"
    assert body["groupLabels"] == {"alertname": "KafkaHealthRule1", "cluster": "prod"}
    assert body["groupKey"] == '{}:{alertname="KafkaHealthRule1", cluster="prod"}'
    (alert,) = body["alerts"]
    assert alert["status"] == status
    assert alert["labels"] == {
        "alertname": "KafkaHealthRule1",
        "rule": "1",
        "severity": "critical",
        "cluster": "prod",
        "subject": "topic:orders",
    }
    assert body["commonLabels"] == alert["labels"]
    annotations = alert["annotations"]
    assert annotations["summary"] == "2 offline partitions of topic orders"
    assert annotations["description"] == "offline partitions: 2 offline partitions of topic orders"
    assert annotations["suggested_action"] == 'GET /api/v1/partitions {"offline": true}'
    assert annotations["runbook_url"] == "https://kh.example/api/v1/alerts/0123456789abcdef"
    assert (annotations["event"], annotations["sequence"]) == (kind, "3")
    assert annotations["idempotency_key"] == "0123456789abcdef:3"
    assert json.loads(annotations["evidence"]) == {"count": 2, "examples": {"orders": [0, 1]}}
    assert alert["startsAt"] == "2023-11-14T22:13:20.000Z"  # when the run opened, for every event
    assert alert["endsAt"] == ends_at
    assert alert["fingerprint"] == "0123456789abcdef"
    assert alert["generatorURL"] == "https://kh.example/api/v1/alerts/0123456789abcdef"
    every_value = [*alert["labels"].values(), *annotations.values()]
    assert all(isinstance(v, str) for v in every_value)  # Alertmanager's labels and annotations are strings


def test_alertmanager_without_an_external_url_has_no_links() -> None:
    (alert,) = formats.alertmanager_payload(notice())["alerts"]
    assert alert["generatorURL"] == ""
    assert "runbook_url" not in alert["annotations"]


@pytest.mark.parametrize("kind", ["opened", "updated"])
def test_alertmanager_api_posts_a_firing_alert_that_ends_four_resend_intervals_ahead(kind: EventKind) -> None:
    """Alertmanager's ``postableAlert`` (api/v2/openapi.yaml: labels, annotations, startsAt, endsAt,
    generatorURL), in a list: a firing alert ends ``ENDS_AT_RESENDS`` re-send intervals after it is sent,
    as Prometheus sets it, so that Alertmanager keeps it only while it is re-sent."""
    sent_at = OPENED_AT + 600.25
    body = formats.alertmanager_api_payload(
        notice(kind, 3), external_url="https://kh.example/", now=sent_at, resend_interval_s=30.0
    )
    assert body == [
        {
            "labels": {
                "alertname": "KafkaHealthRule1",
                "cluster": "prod",
                "rule": "1",
                "subject": "topic:orders",
                "severity": "critical",
                "topic": "orders",
            },
            "annotations": {
                "summary": "2 offline partitions of topic orders",
                "description": "offline partitions: 2 offline partitions of topic orders",
                "evidence": '{"count":2,"examples":{"orders":[0,1]}}',
                "event": kind,
                "sequence": "3",
                "runbook": 'GET /api/v1/partitions {"offline": true}',
                "runbook_url": "https://kh.example/api/v1/alerts/0123456789abcdef",
            },
            "startsAt": "2023-11-14T22:13:20.000Z",  # when the run opened, on every event and re-send
            "endsAt": formats.rfc3339(sent_at + 4 * 30.0),
            "generatorURL": "https://kh.example/api/v1/alerts/0123456789abcdef",
        }
    ]
    assert formats.ENDS_AT_RESENDS == 4
    later = formats.alertmanager_api_payload(notice(kind, 3), now=sent_at + 60, resend_interval_s=30.0)
    assert later[0]["endsAt"] == formats.rfc3339(sent_at + 60 + 120.0)  # a re-send moves it on


def test_alertmanager_api_resolves_the_alert_at_its_resolution() -> None:
    (alert,) = formats.alertmanager_api_payload(notice("resolved", 4), now=OPENED_AT + 10_000)
    assert alert["startsAt"] == "2023-11-14T22:13:20.000Z"
    assert alert["endsAt"] == formats.rfc3339(OPENED_AT + 240.0)  # the resolved event's time, not now
    assert alert["annotations"]["event"] == "resolved"
    assert "generatorURL" not in alert  # no external URL: left out (it is a URI in Alertmanager's API)
    assert "runbook_url" not in alert["annotations"]


@pytest.mark.parametrize(
    ("subject", "labels"),
    [
        ("broker:3", {"broker": "3"}),
        ("broker:3:/var/lib/kafka", {"broker": "3"}),
        ("topic:orders", {"topic": "orders"}),
        ("group:billing:v2", {"group": "billing:v2"}),
        ("action:a-17", {"action": "a-17"}),
        ("cluster", {}),
        ("cluster:state", {}),
        ("broker:", {}),
    ],
)
def test_alertmanager_api_labels_name_the_broker_topic_or_group(subject: str, labels: dict[str, str]) -> None:
    assert formats.subject_labels(subject) == labels
    (alert,) = formats.alertmanager_api_payload(replace(notice(), subject=subject), now=OPENED_AT)
    assert alert["labels"] == {
        "alertname": "KafkaHealthRule1",
        "cluster": "prod",
        "rule": "1",
        "subject": subject,
        "severity": "critical",
        **labels,
    }
    assert all(isinstance(v, str) and v for v in [*alert["labels"].values(), *alert["annotations"].values()])


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("http://am:9093", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/", "http://am:9093/api/v2/alerts"),
        ("https://am.example/alertmanager", "https://am.example/alertmanager/api/v2/alerts"),
        ("http://am:9093/api/v2/alerts", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/api/v2/alerts/", "http://am:9093/api/v2/alerts"),
        ("https://u:p@am.example/am/api/v2/alerts", "https://u:p@am.example/am/api/v2/alerts"),
        ("http://am:9093/?x=1", "http://am:9093/api/v2/alerts?x=1"),
    ],
)
def test_an_alertmanager_api_webhook_takes_the_base_url_or_the_alerts_url(url: str, target: str) -> None:
    assert formats.delivery_url("alertmanager-api", url) == target
    assert formats.delivery_url("alertmanager", url) == url  # the other formats post to the URL as given


def test_slack_message_has_fallback_text_and_escaped_blocks() -> None:
    body = formats.slack_payload(
        notice(summary="lag <high> & rising", evidence={"note": "<b>"}), external_url="https://kh"
    )
    assert body["text"].startswith(":red_circle: [FIRING] critical · prod · topic:orders: lag <high>")
    types = [block["type"] for block in body["blocks"]]
    assert types == ["header", "section", "section", "section", "section", "context"]
    text = json.dumps(body["blocks"])
    assert "lag &lt;high&gt; &amp; rising" in text
    assert "<b>" not in text
    assert body["blocks"][0]["text"] == {
        "type": "plain_text",
        "text": "Firing: offline partitions (rule 1) on prod",
    }
    fields = [f["text"] for f in body["blocks"][2]["fields"]]
    assert fields[0] == "*Cluster*\nprod"
    assert "<https://kh/api/v1/alerts/0123456789abcdef|alert>" in body["blocks"][-1]["elements"][0]["text"]


def test_slack_resolved_and_long_texts_are_clipped() -> None:
    long = "x" * 5000
    body = formats.slack_payload(notice("resolved", 2, summary=long, evidence={"big": long}))
    assert body["text"].startswith(":white_check_mark: [RESOLVED]")
    assert len(body["text"]) <= 3000
    assert all(len(json.dumps(block)) < 3200 for block in body["blocks"])
    assert len(body["blocks"][0]["text"]["text"]) <= 150


@pytest.mark.parametrize("format", ["generic", "alertmanager", "slack", "alertmanager-api"])
def test_render_is_compact_json_of_the_payload(format: WebhookFormat) -> None:
    text = formats.render(webhook(format), notice(), external_url="https://kh", now=OPENED_AT + 5)
    assert json.loads(text) == formats.payload(
        format, notice(), receiver="oncall", external_url="https://kh", now=OPENED_AT + 5
    )
    assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    assert "s3cret" not in text  # the secret signs the body, it is never in it


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown webhook format 'xml'"):
        formats.payload("xml", notice())  # type: ignore[arg-type]


def test_ping_notices_are_not_alerts() -> None:
    first, second = formats.ping_notice(webhook(), now=5.0), formats.ping_notice(webhook(), now=5.0)
    assert first.event.fingerprint != second.event.fingerprint
    assert first.idempotency_key == f"{first.event.fingerprint}:1"
    (alert,) = formats.alertmanager_payload(first, external_url="https://kh")["alerts"]
    assert alert["labels"]["alertname"] == "KafkaHealthTest"
    assert alert["generatorURL"] == ""
    assert formats.generic_payload(first)["rule_title"] == "webhook test"
