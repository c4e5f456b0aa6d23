"""Silences in the store (app.silences.store) and what they do to the webhook outbox
(WebhookStore.enqueue_deliveries, release_silenced), on an SQLite file and on a real PostgreSQL server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.model import AlertEvent, EventKind, Severity, fingerprint
from analytics.store import Store
from app.silences.model import Maintenance, Matcher, SilenceDraft
from app.silences.store import SilenceStore
from app.storage import Storage
from app.webhooks.model import AlertNotice, Webhook
from app.webhooks.store import WebhookStore
from tests.support.health import alert_row
from tests.support.store import BACKENDS, database_url, write_alert

pytestmark = pytest.mark.integration

NOW = 1_000_000.0


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    with Storage.open(database_url(request, tmp_path / "store.db")) as opened:
        yield opened


class Alerts:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.batch = 0
        self.sequences: dict[str, int] = {}

    def event(self, kind: EventKind, rule: int = 5, subject: str = "broker:3", at: float = NOW) -> AlertEvent:
        severity: Severity = "critical"
        fp = fingerprint("c1", rule, subject)
        sequence = self.sequences[fp] = self.sequences.get(fp, 0) + 1
        state, event = alert_row("c1", rule, subject, kind, severity, sequence, at)
        self.batch += 1
        write_alert(self.store, state, [event], self.batch)
        return event


def render(webhook: Webhook, notice: AlertNotice) -> str:
    return json.dumps(
        {"key": notice.idempotency_key, "kind": notice.event.kind, "summary": notice.event.summary}
    )


def rows(webhooks: WebhookStore, webhook_id: int) -> dict[str, tuple[str, str | None]]:
    return {
        d.idempotency_key: (d.state, None if d.payload is None else json.loads(d.payload)["kind"])
        for d in webhooks.deliveries(webhook_id, limit=1000)
    }


def draft(
    *matchers: Matcher, start: float = NOW, end: float = NOW + 600, broker: int | None = None
) -> SilenceDraft:
    return SilenceDraft(matchers, None if broker is None else Maintenance(broker), start, end, "restart")


def test_silences_are_created_listed_counted_and_expired(storage: Storage) -> None:
    silences = SilenceStore(storage.database)
    first = silences.create(draft(Matcher("broker", "3")), created_by="root", now=NOW)
    later = silences.create(draft(broker=4, start=NOW + 100), created_by="ops", now=NOW)
    assert silences.silence(first.id) == first
    assert first.matchers == (Matcher("broker", "3"),)
    assert later.maintenance == Maintenance(4)
    assert silences.counts(NOW) == {"active": 1, "pending": 1, "expired": 0}
    assert silences.silences(NOW, state=["pending"]) == ([later], 1)
    assert silences.silences(NOW) == ([later, first], 2)  # newest first
    expired, ended = silences.expire(later.id, by="ops", now=NOW + 1)  # a pending one can be expired
    assert ended
    assert expired is not None
    assert (expired.state(NOW + 1), expired.expired_by, expired.ends_at) == ("expired", "ops", NOW + 1)
    assert silences.expire(later.id, by="ops", now=NOW + 2) == (expired, False)
    assert silences.expire(999, by="ops", now=NOW) == (None, False)
    assert silences.counts(NOW + 1) == {"active": 1, "pending": 0, "expired": 1}


def test_a_silenced_alert_is_recorded_not_sent_and_pages_once_when_its_silence_is_expired(
    storage: Storage,
) -> None:
    webhooks, alerts = storage.webhooks, Alerts(storage.analytics)
    hook = webhooks.create_webhook(
        name="h", url="http://127.0.0.1:9/x", format="generic", created_by="root", now=NOW - 10
    )
    silences = SilenceStore(storage.database)
    silence = silences.create(draft(Matcher("broker", "3")), created_by="root", now=NOW)
    other = alerts.event("opened", subject="broker:4", at=NOW + 1)
    opened = alerts.event("opened", at=NOW + 1)
    alerts.event("updated", at=NOW + 2)
    assert webhooks.enqueue_deliveries(NOW + 3, render) == 3
    assert rows(webhooks, hook.id) == {
        f"{other.fingerprint}:1": ("pending", "opened"),
        f"{opened.fingerprint}:1": ("skipped", None),
        f"{opened.fingerprint}:2": ("skipped", None),
    }
    held = webhooks.deliveries(hook.id, state="skipped", limit=10)
    assert all(d.last_error is not None and f"silence {silence.id}" in d.last_error for d in held)
    assert webhooks.release_silenced(NOW + 4, render) == 0  # still silenced

    silences.expire(silence.id, by="root", now=NOW + 5)
    # an event entered before the release is held with its opening (no update before the page)
    alerts.event("updated", at=NOW + 5.5)
    assert webhooks.enqueue_deliveries(NOW + 5.5, render) == 1
    assert rows(webhooks, hook.id)[f"{opened.fingerprint}:3"] == ("skipped", None)
    assert webhooks.release_silenced(NOW + 6, render, ended_since=NOW + 5) == 0  # ended before: not looked
    assert webhooks.release_silenced(NOW + 6, render, ended_since=NOW + 4) == 1
    assert webhooks.release_silenced(NOW + 7, render) == 0  # once
    after = rows(webhooks, hook.id)
    assert after[f"{opened.fingerprint}:1"] == ("pending", "opened")
    released = next(d for d in webhooks.deliveries(hook.id, limit=10) if d.idempotency_key.endswith(":1"))
    assert released.payload is not None
    assert json.loads(released.payload)["summary"] == "rule 5 on broker:3"  # the alert as it is now
    # what follows the page is sent as any follow-up
    alerts.event("resolved", at=NOW + 8)
    webhooks.enqueue_deliveries(NOW + 8, render)
    assert rows(webhooks, hook.id)[f"{opened.fingerprint}:4"] == ("pending", "resolved")


def test_an_alert_resolved_under_its_silence_never_pages(storage: Storage) -> None:
    webhooks, alerts = storage.webhooks, Alerts(storage.analytics)
    hook = webhooks.create_webhook(
        name="h", url="http://127.0.0.1:9/x", format="generic", created_by="root", now=NOW - 10
    )
    SilenceStore(storage.database).create(draft(broker=3, end=NOW + 10), created_by="root", now=NOW)
    opened = alerts.event("opened", at=NOW + 1)
    alerts.event("resolved", at=NOW + 2)
    webhooks.enqueue_deliveries(NOW + 3, render)
    assert webhooks.release_silenced(NOW + 20, render) == 0  # the silence ran its course; nothing open
    assert set(rows(webhooks, hook.id).values()) == {("skipped", None)}
    assert len(rows(webhooks, hook.id)) == 2
    assert opened.sequence == 1


def test_a_silence_that_runs_its_course_releases_the_alert_still_open(storage: Storage) -> None:
    webhooks, alerts = storage.webhooks, Alerts(storage.analytics)
    hook = webhooks.create_webhook(
        name="h", url="http://127.0.0.1:9/x", format="generic", created_by="root", now=NOW - 10
    )
    SilenceStore(storage.database).create(draft(broker=3, end=NOW + 10), created_by="root", now=NOW)
    opened = alerts.event("opened", at=NOW + 1)
    webhooks.enqueue_deliveries(NOW + 2, render)
    assert webhooks.release_silenced(NOW + 9, render, ended_since=NOW + 2) == 0
    assert webhooks.release_silenced(NOW + 11, render, ended_since=NOW + 9) == 1
    assert rows(webhooks, hook.id) == {f"{opened.fingerprint}:1": ("pending", "opened")}
