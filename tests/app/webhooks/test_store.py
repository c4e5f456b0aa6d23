"""The webhooks' store (:class:`app.webhooks.store.WebhookStore`, migration 2): subscriptions and the delivery
outbox, on an SQLite file and on a real PostgreSQL server (tests.support.postgres), as
tests/analytics/store/test_store.py does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics.model import AlertEvent, EventKind, Severity, fingerprint
from analytics.store import Store, StoreError
from app.storage import Storage
from app.webhooks.model import AlertNotice, Webhook
from app.webhooks.store import WebhookStore
from tests.support.health import alert_row
from tests.support.store import BACKENDS, database_url, write_alert

pytestmark = pytest.mark.integration

NOW = 1_000_000.0


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return database_url(request, tmp_path / "store.db")


@pytest.fixture
def store(url: str) -> Iterator[WebhookStore]:
    with Storage.open(url) as storage:
        yield storage.webhooks


class Alerts:
    """Writes alert events the way their lane's writer does (the alert row, then its events),
    on the webhook store's database."""

    def __init__(self, store: WebhookStore) -> None:
        self.store = Store(store.database)
        self.batch = 0
        self.sequences: dict[str, int] = {}

    def event(
        self,
        kind: EventKind,
        rule: int = 1,
        subject: str = "topic:orders",
        severity: Severity = "critical",
        at: float = NOW,
        cluster: str = "c1",
    ) -> AlertEvent:
        fp = fingerprint(cluster, rule, subject)
        sequence = self.sequences.get(fp, 0) + 1
        self.sequences[fp] = sequence
        state, event = alert_row(cluster, rule, subject, kind, severity, sequence, at)
        self.batch += 1
        write_alert(self.store, state, [event], self.batch)
        return event


def render(webhook: Webhook, notice: AlertNotice) -> str:
    return json.dumps(
        {
            "hook": webhook.name,
            "key": notice.idempotency_key,
            "kind": notice.event.kind,
            "rule": notice.rule,
            "opened_at": notice.opened_at,
        }
    )


def hook(store: WebhookStore, name: str = "h", **options: Any) -> Webhook:
    return store.create_webhook(
        name=name, url="http://127.0.0.1:9/x", format="generic", created_by="root", now=NOW, **options
    )


def states(store: WebhookStore, webhook_id: int) -> dict[str, str]:
    return {d.idempotency_key: d.state for d in store.deliveries(webhook_id, limit=1000)}


def test_webhooks_are_created_read_updated_and_deleted(store: WebhookStore) -> None:
    created = hook(store, rules=[3, 1, 1], severities=["info", "critical"], secret="x" * 16)
    assert created == Webhook(
        id=created.id,
        name="h",
        url="http://127.0.0.1:9/x",
        format="generic",
        rules=(1, 3),
        severities=("critical", "info"),
        secret="x" * 16,
        enabled=True,
        created_at=NOW,
        created_by="root",
        updated_at=NOW,
    )
    assert "x" * 16 not in repr(created)
    assert store.webhook(created.id) == created
    assert store.webhooks() == [created]
    updated = store.update_webhook(
        created.id, {"format": "slack", "rules": None, "secret": None, "name": " new "}, NOW + 1
    )
    assert updated is not None
    assert (updated.format, updated.rules, updated.secret, updated.name) == ("slack", None, None, "new")
    assert updated.updated_at == NOW + 1
    assert store.update_webhook(created.id + 100, {"name": "x"}, NOW) is None
    assert store.webhooks(enabled=False) == []
    assert store.delete_webhook(created.id)
    assert not store.delete_webhook(created.id)
    assert store.webhooks() == []
    second = hook(store)
    assert second.id > created.id  # ids are never reused


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"format": "xml"}, "format must be one of generic, alertmanager, slack"),
        ({"rules": []}, "rules must be None"),
        ({"rules": [0]}, "rules must be None"),
        ({"severities": ["urgent"]}, "severities must be None"),
        ({"name": ""}, "name must be a non-empty string"),
        ({"enabled": "yes"}, "enabled must be a boolean"),
        ({"colour": "red"}, "unknown fields"),
    ],
)
def test_bad_webhook_fields_are_refused(store: WebhookStore, changes: dict[str, Any], message: str) -> None:
    created = hook(store)
    with pytest.raises(StoreError, match=message):
        store.update_webhook(created.id, changes, NOW)


def test_a_new_webhook_gets_only_events_recorded_after_it(store: WebhookStore) -> None:
    alerts = Alerts(store)
    alerts.event("opened", subject="topic:a")
    created = hook(store)
    assert states(store, created.id) == {f"{fingerprint('c1', 1, 'topic:a')}:1": "skipped"}
    (skipped,) = store.deliveries(created.id)
    assert skipped.last_error == "not sent: recorded before the webhook was created"
    assert skipped.payload is None

    resolved = alerts.event("resolved", subject="topic:a", at=NOW + 60)
    opened = alerts.event("opened", subject="topic:b", at=NOW + 60)
    assert store.enqueue_deliveries(NOW + 61, render) == 2
    assert store.enqueue_deliveries(NOW + 61, render) == 0  # idempotent
    rows = {d.idempotency_key: d for d in store.deliveries(created.id, state="pending")}
    assert set(rows) == {f"{resolved.fingerprint}:2", f"{opened.fingerprint}:1"}
    row = rows[f"{resolved.fingerprint}:2"]
    assert (row.kind, row.event_at, row.attempts, row.next_attempt_at) == ("resolved", NOW + 60, 0, NOW + 61)
    assert json.loads(row.payload or "") == {
        "hook": "h",
        "key": f"{resolved.fingerprint}:2",
        "kind": "resolved",
        "rule": 1,
        "opened_at": NOW,  # the run's opened event, although that one was before the webhook
    }


def test_filters_skip_events_but_follow_ups_of_sent_ones_go_out(store: WebhookStore) -> None:
    critical_only = hook(store, "critical", severities=["critical"])
    rule_2 = hook(store, "rule-2", rules=[2])
    alerts = Alerts(store)
    alerts.event("opened", severity="critical")  # 1: sent to critical
    alerts.event("updated", severity="warning", at=NOW + 1)  # 2: a follow-up: sent
    alerts.event("resolved", severity="warning", at=NOW + 2)  # 3: a follow-up: sent
    alerts.event("opened", severity="warning", at=NOW + 3)  # 4: a new run, filtered out
    alerts.event("resolved", severity="warning", at=NOW + 4)  # 5: its follow-up: nothing was sent, skipped
    assert store.enqueue_deliveries(NOW + 5, render) == 10  # rows written: 5 events for 2 webhooks
    fp = fingerprint("c1", 1, "topic:orders")
    assert states(store, critical_only.id) == {
        f"{fp}:1": "pending",
        f"{fp}:2": "pending",
        f"{fp}:3": "pending",
        f"{fp}:4": "skipped",
        f"{fp}:5": "skipped",
    }
    assert set(states(store, rule_2.id).values()) == {"skipped"}
    (reason,) = {d.last_error for d in store.deliveries(rule_2.id)}
    assert reason == "not sent: rule 1 is not in the webhook's rules [2]"
    (four,) = [d for d in store.deliveries(critical_only.id) if d.sequence == 4]
    assert four.last_error == "not sent: severity warning is not in the webhook's severities ['critical']"


def test_the_incident_lane_writes_the_outbox_rows_enqueue_deliveries_would_write(store: WebhookStore) -> None:
    """``enqueue_in`` inside ``commit_incidents``' transaction: for the same events, the same rows as the
    notifier's ``enqueue_deliveries`` afterwards (states, reasons, payloads), and nothing left for it."""
    hook(store, "critical", severities=["critical"])
    hook(store, "rule-2", rules=[2])
    hook(store, "old", rules=[1])
    analytics = Store(store.database)

    script: list[tuple[EventKind, Severity, float]] = [
        ("opened", "critical", NOW),
        ("updated", "warning", NOW + 1),
        ("resolved", "warning", NOW + 2),
        ("opened", "warning", NOW + 3),
    ]

    def run(subject: str, inline: bool) -> None:
        for sequence, (kind, severity, at) in enumerate(script, start=1):
            state, event = alert_row("c1", 1, subject, kind, severity, sequence, at)
            stored = analytics.alert(state.fingerprint)
            expected = None if stored is None else (stored.event_sequence, stored.last_window_end)

            def enqueue(conn: Any, fp: str = state.fingerprint, now: float = at) -> None:
                store.enqueue_in(conn, [fp], now, render)

            analytics.commit_incidents(
                "c1",
                [state],
                [event],
                expected={state.fingerprint: expected},
                also=enqueue if inline else None,
            )
            if not inline:
                assert store.enqueue_deliveries(at, render) == 3

    run("topic:inline", inline=True)
    assert store.enqueue_deliveries(NOW + 10, render) == 0  # the lane left nothing to enter
    run("topic:polled", inline=False)

    def rows(subject: str) -> list[tuple[Any, ...]]:
        fp = fingerprint("c1", 1, subject)
        return sorted(
            (d.webhook_id, d.sequence, d.kind, d.state, d.last_error, d.next_attempt_at,
             None if d.payload is None else json.loads(d.payload)["kind"])
            for d in store.deliveries(limit=1000)
            if d.fingerprint == fp
        )  # fmt: skip

    inline, polled = rows("topic:inline"), rows("topic:polled")
    assert inline == polled
    assert len(inline) == 12
    assert {r[3] for r in inline} == {"pending", "skipped"}


def test_events_beyond_the_horizon_and_disabled_webhooks_are_left_out(store: WebhookStore) -> None:
    enabled = hook(store, "on")
    disabled = hook(store, "off", enabled=False)
    alerts = Alerts(store)
    alerts.event("opened", subject="topic:old", at=NOW - 1000)
    alerts.event("opened", subject="topic:new", at=NOW)
    assert store.enqueue_deliveries(NOW, render, horizon_s=500) == 1
    assert len(states(store, enabled.id)) == 1
    assert states(store, disabled.id) == {}

    # re-enabling: the events recorded while disabled are skipped, later ones are sent
    store.update_webhook(disabled.id, {"enabled": True}, NOW + 1)
    assert set(states(store, disabled.id).values()) == {"skipped"}
    alerts.event("resolved", subject="topic:new", at=NOW + 2)
    assert store.enqueue_deliveries(NOW + 3, render, horizon_s=500) == 2


def test_a_failing_renderer_makes_a_dead_letter_not_a_stuck_outbox(store: WebhookStore) -> None:
    created = hook(store)
    Alerts(store).event("opened")

    def broken(webhook: Webhook, notice: AlertNotice) -> str:
        raise KeyError("oops")

    assert store.enqueue_deliveries(NOW, broken) == 1
    (dead,) = store.deliveries(created.id)
    assert dead.state == "dead"
    assert dead.last_error == "cannot render the payload: KeyError: 'oops'"
    assert not store.requeue_delivery(dead.id, NOW)  # nothing to send


def test_due_deliveries_keep_each_alerts_events_in_order(store: WebhookStore) -> None:
    created = hook(store)
    alerts = Alerts(store)
    a1 = alerts.event("opened", subject="topic:a")
    a2 = alerts.event("resolved", subject="topic:a", at=NOW + 1)
    b1 = alerts.event("opened", subject="topic:b")
    store.enqueue_deliveries(NOW + 1, render)
    due = store.due_deliveries(NOW + 1)
    assert {d.idempotency_key for d in due} == {f"{a1.fingerprint}:1", f"{b1.fingerprint}:1"}
    assert store.due_deliveries(NOW + 1, limit=1)[0].next_attempt_at == NOW + 1
    assert store.due_deliveries(NOW) == []  # not yet due

    first = next(d for d in due if d.fingerprint == a1.fingerprint)
    claimed = store.claim_delivery(first.id, NOW + 2, lease_until=NOW + 30)
    assert claimed is not None
    assert (claimed.attempts, claimed.last_attempt_at, claimed.next_attempt_at) == (1, NOW + 2, NOW + 30)
    assert store.claim_delivery(first.id, NOW + 2, lease_until=NOW + 30) is None  # leased
    # the lease ran out (a crashed sender): the same row is due again, and its successor still waits
    assert [d.sequence for d in store.due_deliveries(NOW + 40) if d.fingerprint == a2.fingerprint] == [1]

    assert store.mark_failed(first.id, next_attempt_at=NOW + 50, error="HTTP 503", status=503)
    failed = store.delivery(first.id)
    assert failed is not None
    assert (failed.state, failed.last_status, failed.last_error) == ("pending", 503, "HTTP 503")
    assert store.mark_delivered(first.id, at=NOW + 51, status=200)
    assert not store.mark_delivered(first.id, at=NOW + 52, status=200)  # only once
    done = store.delivery(first.id)
    assert done is not None
    assert (done.state, done.delivered_at, done.last_error, done.next_attempt_at) == (
        "delivered",
        NOW + 51,
        None,
        None,
    )
    assert [d.sequence for d in store.due_deliveries(NOW + 60) if d.fingerprint == a1.fingerprint] == [2]

    store.update_webhook(created.id, {"enabled": False}, NOW)
    assert store.due_deliveries(NOW + 60) == []  # held while disabled


def test_deliveries_waiting_on_a_backoff_are_probed_without_counting_an_attempt(store: WebhookStore) -> None:
    """What the notifier's probe reads and writes: the webhooks with a delivery waiting on a backoff and when
    any of their pending deliveries was last tried, those deliveries (first of each alert, oldest first),
    and the probe's claim, which leases the row without counting an attempt; a failed probe puts the due
    time back."""
    created = hook(store)
    other = hook(store, "other")
    alerts = Alerts(store)
    a1 = alerts.event("opened", subject="topic:a")
    alerts.event("updated", subject="topic:a", at=NOW + 1)
    b1 = alerts.event("opened", subject="topic:b")
    store.enqueue_deliveries(NOW + 1, render)
    assert store.backed_off_webhooks(NOW + 1) == {}  # everything is due: nothing waits on a backoff
    rows = {(d.webhook_id, d.fingerprint, d.sequence): d for d in store.deliveries(limit=100)}
    for fp, tried in ((a1.fingerprint, NOW + 2), (b1.fingerprint, NOW + 3)):
        row = rows[(created.id, fp, 1)]
        assert store.claim_delivery(row.id, tried, lease_until=tried + 25) is not None
        assert store.mark_failed(row.id, next_attempt_at=tried + 600, error="attempt 1: HTTP 503", status=503)
    assert store.backed_off_webhooks(NOW + 10) == {created.id: NOW + 3}  # not the other one: all due
    waiting = store.backed_off_deliveries(created.id, NOW + 10)
    assert [(d.fingerprint, d.sequence) for d in waiting] == [(a1.fingerprint, 1), (b1.fingerprint, 1)]
    assert store.backed_off_deliveries(other.id, NOW + 10) == []
    assert store.backed_off_deliveries(created.id, NOW + 700) == []  # due by then

    first = waiting[0]
    assert first.next_attempt_at == NOW + 602
    assert store.claim_probe(first, NOW + 603, lease_until=NOW + 628) is None  # due: an attempt, not a probe
    probed = store.claim_probe(first, NOW + 40, lease_until=NOW + 65)
    assert probed is not None
    assert (probed.attempts, probed.last_attempt_at, probed.next_attempt_at) == (1, NOW + 40, NOW + 602)
    assert store.claim_probe(first, NOW + 41, lease_until=NOW + 66) is None  # tried meanwhile
    # a lease that ends after the due time holds the row until then
    leased = store.claim_probe(probed, NOW + 590, lease_until=NOW + 615)
    assert leased is not None
    assert leased.next_attempt_at == NOW + 615
    assert store.claim_delivery(first.id, NOW + 603, lease_until=NOW + 628) is None  # held by the probe
    assert store.backed_off_webhooks(NOW + 591) == {created.id: NOW + 590}
    assert store.mark_failed(first.id, next_attempt_at=NOW + 602, error="probe before attempt 2: HTTP 503")
    again = store.delivery(first.id)
    assert again is not None
    assert (again.attempts, again.next_attempt_at, again.state) == (1, NOW + 602, "pending")

    store.update_webhook(created.id, {"enabled": False}, NOW)
    assert store.backed_off_webhooks(NOW + 10) == {}  # held while disabled
    assert store.backed_off_deliveries(created.id, NOW + 10) == []


def test_dead_letters_are_counted_listed_and_requeued(store: WebhookStore) -> None:
    created = hook(store)
    other = hook(store, "other")
    Alerts(store).event("opened")
    store.enqueue_deliveries(NOW, render)
    (row,) = store.deliveries(created.id)
    assert store.claim_delivery(row.id, NOW, lease_until=NOW + 10) is not None
    assert store.mark_dead(row.id, error="x" * 1000, status=404)
    dead = store.delivery(row.id)
    assert dead is not None
    assert dead.state == "dead"
    assert len(dead.last_error or "") == 500
    assert store.due_deliveries(NOW + 100) != []  # the other webhook's
    assert all(d.webhook_id == other.id for d in store.due_deliveries(NOW + 100))
    assert store.delivery_stats()[created.id] == {"pending": 0, "delivered": 0, "dead": 1, "skipped": 0}
    assert store.delivery_stats()[other.id]["pending"] == 1
    assert [d.id for d in store.deliveries(state="dead")] == [row.id]
    assert store.deliveries(created.id, state=["pending", "delivered"]) == []

    assert store.requeue_delivery(row.id, NOW + 200)
    assert not store.requeue_delivery(row.id, NOW + 200)  # no longer dead
    again = store.delivery(row.id)
    assert again is not None
    assert (again.state, again.attempts, again.next_attempt_at) == ("pending", 0, NOW + 200)


def test_pruning_and_deleting_a_webhook_remove_its_rows(store: WebhookStore) -> None:
    created = hook(store)
    alerts = Alerts(store)
    alerts.event("opened", at=NOW)
    alerts.event("opened", subject="topic:later", at=NOW + 100)
    store.enqueue_deliveries(NOW + 100, render)
    for row in store.deliveries(created.id):
        store.claim_delivery(row.id, NOW + 100, NOW + 110)
        store.mark_delivered(row.id, at=NOW + 101, status=204)
    assert store.prune_deliveries(before=NOW + 50) == 1
    assert len(store.deliveries(created.id)) == 1
    assert store.delete_webhook(created.id)
    assert store.deliveries() == []
    assert store.delivery_stats() == {}


def test_concurrent_enqueues_write_each_row_once(url: str) -> None:
    with Storage.open(url) as storage:
        created = hook(storage.webhooks)
        alerts = Alerts(storage.webhooks)
        for n in range(20):
            alerts.event("opened", subject=f"topic:{n}")
    storages = [Storage.open(url) for _ in range(4)]
    barrier = threading.Barrier(len(storages))
    counts: list[int] = []

    def enqueue(store: WebhookStore) -> None:
        barrier.wait()
        counts.append(store.enqueue_deliveries(NOW, render))

    threads = [threading.Thread(target=enqueue, args=(s.webhooks,)) for s in storages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for storage in storages:
        storage.close()
    assert sum(counts) == 20  # each row written by exactly one of them
    with Storage.open(url) as storage:
        assert len(storage.webhooks.deliveries(created.id, limit=1000)) == 20


# --- per cluster -----------------------------------------------------------------------------------------


def keys(store: WebhookStore, webhook_id: int, state: str | None = None) -> set[str]:
    return {d.idempotency_key for d in store.deliveries(webhook_id, state=state, limit=1000)}


def test_a_webhook_of_some_clusters_gets_only_their_events(store: WebhookStore) -> None:
    every = hook(store, "every")
    only_a = hook(store, "only-a", clusters=["a"])
    assert (every.clusters, only_a.clusters) == (None, ("a",))
    alerts = Alerts(store)
    on_a = [alerts.event("opened", cluster="a"), alerts.event("resolved", cluster="a", at=NOW + 1)]
    on_b = [alerts.event("opened", cluster="b"), alerts.event("resolved", cluster="b", at=NOW + 1)]
    a_keys = {f"{e.fingerprint}:{e.sequence}" for e in on_a}
    b_keys = {f"{e.fingerprint}:{e.sequence}" for e in on_b}
    assert store.enqueue_deliveries(NOW + 2, render, limit=2) == 2  # b's events never take the limit
    assert store.enqueue_deliveries(NOW + 2, render, limit=2) == 2
    assert store.enqueue_deliveries(NOW + 2, render) == 2
    assert store.enqueue_deliveries(NOW + 2, render) == 0
    assert keys(store, every.id, "pending") == a_keys | b_keys
    assert keys(store, only_a.id) == keys(store, only_a.id, "pending") == a_keys  # b's: no row at all
    due = {(d.webhook_id, d.idempotency_key) for d in store.due_deliveries(NOW + 2, limit=1000)}
    assert {k for w, k in due if w == only_a.id} == {f"{on_a[0].fingerprint}:1"}  # in order, a's only


def test_the_incident_lane_enters_only_the_watched_clusters_events(store: WebhookStore) -> None:
    only_b = hook(store, "only-b", clusters=["b"])
    analytics = Store(store.database)
    for cluster in ("a", "b"):
        state, event = alert_row(cluster, 1, "topic:orders", "opened", "critical", 1, NOW)

        def enqueue(conn: Any, fp: str = state.fingerprint) -> None:
            store.enqueue_in(conn, [fp], NOW, render)

        analytics.commit_incidents(
            cluster, [state], [event], expected={state.fingerprint: None}, also=enqueue
        )
    assert keys(store, only_b.id, "pending") == {f"{fingerprint('b', 1, 'topic:orders')}:1"}
    assert keys(store, only_b.id) == keys(store, only_b.id, "pending")
    assert store.enqueue_deliveries(NOW + 1, render) == 0  # a's event is nothing the notifier must enter


def test_a_webhooks_clusters_are_checked_kept_sorted_and_changed(store: WebhookStore) -> None:
    created = hook(store, clusters=["prod", "dev", "prod", "lkc-Xy_z.1"])
    assert created.clusters == ("dev", "lkc-Xy_z.1", "prod")  # names, or a cluster id as it is
    assert store.webhook(created.id) == created
    widened = store.update_webhook(created.id, {"clusters": None}, NOW + 1)
    assert widened is not None
    assert widened.clusters is None
    for bad in ([], "prod", ["two words"], [""], ["x" * 256], [1], ["tab\t"], [f"c{n}" for n in range(101)]):
        with pytest.raises(StoreError, match="clusters must be None"):
            store.update_webhook(created.id, {"clusters": bad}, NOW)
        with pytest.raises(StoreError, match="clusters must be None"):
            hook(store, clusters=bad)
    assert store.webhook(created.id) == widened
    assert len(store.webhooks()) == 1


def test_widening_a_webhooks_clusters_sends_the_new_clusters_events_from_then_on(store: WebhookStore) -> None:
    only_a = hook(store, "only-a", clusters=["a"])
    alerts = Alerts(store)
    a_old = alerts.event("opened", cluster="a")
    b_old = alerts.event("opened", cluster="b")
    c_old = alerts.event("opened", cluster="c")
    store.update_webhook(only_a.id, {"clusters": ["a", "b"]}, NOW + 1)  # b's history: skipped
    assert states(store, only_a.id) == {f"{b_old.fingerprint}:1": "skipped"}
    (skipped,) = store.deliveries(only_a.id)
    assert skipped.last_error == "not sent: recorded before the webhook watched its cluster"
    assert store.enqueue_deliveries(NOW + 1, render) == 1  # a's, recorded before the change, is still sent
    b_new = alerts.event("resolved", cluster="b", at=NOW + 2)
    store.update_webhook(only_a.id, {"clusters": None}, NOW + 3)  # every cluster: c's history skipped
    assert store.enqueue_deliveries(NOW + 3, render) == 1
    assert states(store, only_a.id) == {
        f"{a_old.fingerprint}:1": "pending",
        f"{b_old.fingerprint}:1": "skipped",
        f"{b_new.fingerprint}:2": "pending",  # recorded while b was watched
        f"{c_old.fingerprint}:1": "skipped",
    }
    store.update_webhook(only_a.id, {"clusters": ["c"]}, NOW + 4)  # narrowed: nothing new to skip
    c_new = alerts.event("resolved", cluster="c", at=NOW + 5)
    a_new = alerts.event("resolved", cluster="a", at=NOW + 5)
    assert store.enqueue_deliveries(NOW + 5, render) == 1
    assert states(store, only_a.id)[f"{c_new.fingerprint}:2"] == "pending"
    assert f"{a_new.fingerprint}:2" not in states(store, only_a.id)


def test_a_disabled_webhook_of_some_clusters_skips_only_their_history_when_enabled(
    store: WebhookStore,
) -> None:
    only_a = hook(store, "only-a", clusters=["a"], enabled=False)
    alerts = Alerts(store)
    a_old = alerts.event("opened", cluster="a")
    alerts.event("opened", cluster="b")
    store.update_webhook(only_a.id, {"enabled": True}, NOW + 1)
    assert states(store, only_a.id) == {f"{a_old.fingerprint}:1": "skipped"}
    assert store.enqueue_deliveries(NOW + 1, render) == 0


def test_open_alerts_sent_to_an_alertmanager_api_webhook_are_listed_for_re_sending(
    store: WebhookStore,
) -> None:
    """What the notifier re-sends to an ``alertmanager-api`` receiver: the open alerts whose current run it
    was sent and that wait for nothing in its outbox, each as its latest event, with the run's opening time
    and when its newest outbox row was written; not a generic webhook's, not a skipped alert, not a
    resolved one."""
    am = store.create_webhook(
        name="am", url="http://127.0.0.1:9", format="alertmanager-api", rules=[1], created_by="root", now=NOW
    )
    generic = hook(store, "generic")  # the formats asked for are the only ones listed
    alerts = Alerts(store)
    assert store.open_alerts_sent(["alertmanager-api"]) == []
    opened = alerts.event("opened", at=NOW + 10)
    alerts.event("opened", rule=2, subject="topic:other", at=NOW + 10)  # filtered out: skipped for am
    store.enqueue_deliveries(NOW + 11, render)
    assert store.open_alerts_sent(["alertmanager-api"]) == []  # its delivery is pending
    for delivery in store.due_deliveries(NOW + 11, limit=1000):
        claimed = store.claim_delivery(delivery.id, NOW + 12, lease_until=NOW + 20)
        assert claimed is not None
        store.mark_delivered(claimed.id, at=NOW + 12, status=200)
    ((webhook_id, notice, rendered_at),) = store.open_alerts_sent(["alertmanager-api"])
    assert (webhook_id, notice.event, notice.opened_at, rendered_at) == (am.id, opened, NOW + 10, NOW + 11)
    assert (notice.cluster, notice.rule, notice.subject) == ("c1", 1, "topic:orders")
    assert {w for w, _, _ in store.open_alerts_sent(["generic"])} == {generic.id}
    updated = alerts.event("updated", at=NOW + 30)
    store.enqueue_deliveries(NOW + 31, render)
    assert store.open_alerts_sent(["alertmanager-api"]) == []  # the update waits in the outbox
    for delivery in store.due_deliveries(NOW + 31, limit=1000):
        store.mark_dead(delivery.id, error="gave up")  # a dead row was sent too: re-sending goes on
    ((_, notice, rendered_at),) = store.open_alerts_sent(["alertmanager-api"])
    assert (notice.event, notice.opened_at, rendered_at) == (updated, NOW + 10, NOW + 31)
    alerts.event("resolved", at=NOW + 40)
    assert store.open_alerts_sent(["alertmanager-api"]) == []  # resolved: nothing to re-send
    store.update_webhook(am.id, {"enabled": False}, NOW + 41)
    alerts.event("opened", at=NOW + 50)
    assert store.open_alerts_sent(["alertmanager-api"]) == []  # a disabled webhook, a run it was not sent
