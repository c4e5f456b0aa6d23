"""The notifier against a real HTTP receiver (app.embedded.webhook_receiver: verifies signatures, deduplicates
on Idempotency-Key, can fail or be down): delivery, retries with backoff, outages across a restart, dead
letters, and the ZooKeeper leadership on the real test ZooKeeper."""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from analytics.model import AlertEvent, EventKind, Severity, fingerprint
from app.embedded.webhook_receiver import Answer, WebhookReceiver
from app.embedded.zookeeper import pick_free_port
from app.incidents.config import IncidentSettings
from app.leadership import AlwaysLeader, Leadership, ZooKeeperLeadership
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.container import ServiceContainer
from app.service.spec import ClusterSpec, ServiceSpec
from app.storage import Storage
from app.webhooks.model import Webhook
from app.webhooks.notifier import (
    Notifier,
    NotifierSettings,
    backoff_s,
    post,
    probe_at,
    retry_delay_s,
    service_notifier,
)
from app.webhooks.signing import SIGNATURE_HEADER
from collectors.zookeeper.collector import scan
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.health import alert_row
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.store import write_alert
from tests.support.tcp_proxy import TcpProxy
from tests.support.zookeeper import expire_session

pytestmark = pytest.mark.integration

SECRET = "a-shared-secret-for-the-tests"
ADMIN = {"Authorization": "Bearer admin-token-1"}
FAST = NotifierSettings(
    poll_interval_s=0.05,
    timeout_s=2.0,
    backoff_base_s=0.05,
    backoff_max_s=0.3,
    max_attempts=1000,
    election="none",
    allow_networks=("127.0.0.1/32",),  # the receiver is on loopback, refused by default
)


class Highest(random.Random):
    """Full jitter at its top: every backoff is (almost) its ceiling, so the delays can be checked."""

    def random(self) -> float:
        return 0.999


class Alerts:
    """Writes alert events the way their lane's writer does (the alert row and its event)."""

    def __init__(self, storage: Storage) -> None:
        self.store = storage.analytics
        self.batch = 0
        self.sequences: dict[str, int] = {}
        self.keys: list[str] = []

    def event(
        self,
        kind: EventKind,
        subject: str,
        severity: Severity = "critical",
        rule: int = 1,
        at: float | None = None,
    ) -> AlertEvent:
        fp = fingerprint("c1", rule, subject)
        sequence = self.sequences.get(fp, 0) + 1
        self.sequences[fp] = sequence
        at = time.time() if at is None else at
        state, event = alert_row("c1", rule, subject, kind, severity, sequence, at)
        self.batch += 1
        write_alert(self.store, state, [event], self.batch)
        self.keys.append(f"{fp}:{sequence}")
        return event


NotifierFactory = Callable[..., Notifier]


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Storage.open(url).close()
    return url


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as running:
        yield running


@pytest.fixture
def notifiers() -> Iterator[NotifierFactory]:
    """``make(url, settings=FAST, leadership=None, **options)``: started notifiers, each on its own store
    (as separate service processes would be), all stopped after the test."""
    made: list[tuple[Notifier, Storage]] = []

    def make(
        url: str, settings: NotifierSettings = FAST, leadership: Leadership | None = None, **options: Any
    ) -> Notifier:
        storage = Storage.open(url)
        notifier = Notifier(
            storage.webhooks, settings=settings, leadership=leadership or AlwaysLeader(), **options
        )
        made.append((notifier, storage))
        notifier.start()
        return notifier

    yield make
    for notifier, storage in reversed(made):
        notifier.stop()
        storage.close()


def create_webhook(url: str, receiver: WebhookReceiver, **options: Any) -> Webhook:
    with Storage.open(url) as storage:
        return storage.webhooks.create_webhook(
            name="oncall",
            url=receiver.url,
            format=options.pop("format", "generic"),
            secret=options.pop("secret", SECRET),
            created_by="root",
            now=time.time(),
            **options,
        )


def deliveries(url: str) -> dict[str, Any]:
    with Storage.open(url) as storage:
        return {d.idempotency_key: d for d in storage.webhooks.deliveries(limit=10_000)}


def all_delivered(url: str, count: int) -> bool:
    rows = deliveries(url)
    return len(rows) == count and all(d.state == "delivered" for d in rows.values())


def assert_each_key_once(receiver: WebhookReceiver, keys: list[str]) -> None:
    """The receiver got every key, each in exactly one request, all signed correctly."""
    requests = receiver.requests()
    assert sorted(r.idempotency_key or "" for r in requests) == sorted(keys)
    assert set(receiver.accepted()) == set(keys)
    assert all(r.signature_error is None and r.status == 200 and not r.duplicate for r in requests)


# --- the service, the pipeline and a receiver: open and resolve ------------------------------------------


def run_server(app: Any, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), timeout=60, message="uvicorn started")
    assert server.started, "the service did not start"
    return server, thread


def test_open_and_resolve_reach_the_receiver_signed(
    make_cluster: ClusterFactory, zk_connect: str, store_url: str, receiver: WebhookReceiver
) -> None:
    """The notifier's whole path: a webhook created over the API, a rule-1 alert written into the store
    (opened, then resolved, as the incident lane writes them but without its outbox rows, so that the poll
    enters them), the service's own notifier (default poll interval, elected through ZooKeeper) delivering
    ``opened`` then ``resolved``, signed. The service's incident lane is off: the alert is made up."""
    make_cluster()
    settings = ServiceSettings(
        tokens=SecretStr("root:admin:admin-token-1"),
        incidents=IncidentSettings(enabled=False),
        webhooks=NotifierSettings(allow_networks=("127.0.0.1/32",)),  # the receiver is on loopback
    )
    app = create_app(ServiceSpec(settings, [ClusterSpec(CollectorSpec(zk_connect))], store_url=store_url))
    port = pick_free_port()
    server, thread = run_server(app, port)
    try:
        created = httpx.post(
            f"http://127.0.0.1:{port}/api/v1/webhooks",
            json={"name": "oncall", "url": receiver.url, "secret": SECRET, "rules": [1]},
            headers=ADMIN,
        )
        assert created.status_code == 201, created.text
        notifier = ServiceContainer.of(app).notifier
        assert notifier is not None
        with Storage.open(store_url) as storage:
            wait_for(lambda: notifier.stats().leader, message="the notifier elected")
            cluster_id = scan(zk_connect).cluster_id or "unknown"
            now = time.time()
            opened_row, opened_event = alert_row(cluster_id, 1, "topic:orders", "opened", "critical", 1, now)
            write_alert(storage.analytics, opened_row, [opened_event], 0)
            wait_for(lambda: len(receiver.accepted()) == 1, timeout=60, message="the opened event delivered")
            resolved_row, resolved_event = alert_row(
                cluster_id, 1, "topic:orders", "resolved", "critical", 2, now + 10
            )
            write_alert(storage.analytics, resolved_row, [resolved_event], 1)
            wait_for(lambda: len(receiver.accepted()) == 2, timeout=60, message="the resolved one delivered")
    finally:
        server.should_exit = True
        thread.join(timeout=30)

    opened, resolved = (r.json() for r in receiver.accepted_requests())
    fp = fingerprint(cluster_id, 1, "topic:orders")
    assert (opened["kind"], opened["status"], opened["idempotency_key"]) == ("opened", "firing", f"{fp}:1")
    assert (resolved["kind"], resolved["status"], resolved["idempotency_key"]) == (
        "resolved",
        "resolved",
        f"{fp}:2",
    )
    assert (opened["rule"], opened["subject"], opened["severity"]) == (1, "topic:orders", "critical")
    assert_each_key_once(receiver, [f"{fp}:1", f"{fp}:2"])
    assert all(r.headers[SIGNATURE_HEADER.lower()].startswith("sha256=") for r in receiver.requests())


# --- failures --------------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    Storage.open(url).close()
    return url


def test_a_receiver_that_is_down_gets_everything_once_when_back_also_across_a_restart(
    any_store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    url = any_store_url
    receiver.stop()  # down: connections are refused
    create_webhook(url, receiver)
    job = Storage.open(url)
    alerts = Alerts(job)
    try:
        first = notifiers(url)
        alerts.event("opened", "topic:a")
        alerts.event("opened", "topic:b")
        alerts.event("updated", "topic:a", severity="warning")
        alerts.event("opened", "topic:c")
        alerts.event("resolved", "topic:b")
        wait_for(lambda: first.stats().retried >= 9, message="retries while the receiver is down")
        first.stop()  # the service restarts...
        attempts_before = {k: d.attempts for k, d in deliveries(url).items()}
        assert all(d.state == "pending" for d in deliveries(url).values())
        assert max(attempts_before.values()) >= 3
        alerts.event("resolved", "topic:a")  # ...events go on meanwhile...
        alerts.event("opened", "topic:d")
        second = notifiers(url)  # ...and comes back: a new notifier on a new connection to the store
        wait_for(lambda: second.stats().retried >= 4, message="retries after the restart")
        assert receiver.requests() == []
        receiver.start()  # the receiver is back, on the same port
        wait_for(lambda: all_delivered(url, 7), message="every delivery delivered")
    finally:
        job.close()
    assert_each_key_once(receiver, alerts.keys)
    rows = deliveries(url)
    assert all(rows[k].attempts > n for k, n in attempts_before.items() if n > 0)  # counted across restarts
    order = [r.idempotency_key or "" for r in receiver.requests()]
    for fp in {key.split(":")[0] for key in alerts.keys}:  # each alert's events arrived in order
        sequences = [int(key.split(":")[1]) for key in order if key.startswith(fp)]
        assert sequences == sorted(sequences)


def test_server_errors_are_retried_with_exponential_backoff(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    answers = iter([500, 502, 503, 408, 200])
    receiver.respond_with(lambda _request: next(answers))
    create_webhook(store_url, receiver)
    settings = FAST.model_copy(update={"backoff_base_s": 0.1, "backoff_max_s": 0.5})
    notifier = notifiers(store_url, settings, rng=Highest())
    with Storage.open(store_url) as job:
        alerts = Alerts(job)
        alerts.event("opened", "topic:a")
        wait_for(lambda: all_delivered(store_url, 1), message="delivered on the fifth attempt")
    requests = receiver.requests()
    assert [r.status for r in requests] == [500, 502, 503, 408, 200]
    assert {r.idempotency_key for r in requests} == {alerts.keys[0]}  # one key for every attempt
    assert [r.headers["x-kafka-health-attempt"] for r in requests] == ["1", "2", "3", "4", "5"]
    gaps = [b.received_at - a.received_at for a, b in itertools.pairwise(requests)]
    ceilings = [0.1, 0.2, 0.4, 0.5]  # base * 2**(n-1), capped at backoff_max_s
    for gap, ceiling in zip(gaps, ceilings, strict=True):
        assert gap >= ceiling * 0.999 - 0.01, (gaps, ceilings)  # never early; late only on a loaded machine
    (row,) = deliveries(store_url).values()
    assert (row.attempts, row.last_status, row.last_error) == (5, 200, None)
    assert notifier.stats().retried == 4


def test_retry_after_is_honoured(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    answers = iter([(429, {"Retry-After": "1"}), (200, {})])
    receiver.respond_with(lambda _request: next(answers))
    create_webhook(store_url, receiver)
    notifiers(store_url)
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: all_delivered(store_url, 1), message="delivered after Retry-After")
    first, second = receiver.requests()
    assert first.status == 429
    assert second.received_at - first.received_at >= 0.3  # Retry-After capped at backoff_max_s (0.3)


@pytest.mark.parametrize("failure", ["answers 503", "hangs"])
def test_a_receiver_that_answers_again_gets_its_backed_off_events_within_the_probe_interval(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory, failure: str
) -> None:
    """A receiver fails (503s, or no answer within the timeout) until the backoff is ten minutes away;
    once it answers again, its pending events (the backed-off ones, and the events of an alert queued
    behind its backed-off one) arrive within the probe interval, not when the backoff ends. The probes
    while it fails are not counted as attempts and leave the due time where the backoff put it."""
    settings = FAST.model_copy(
        update={"timeout_s": 0.5, "backoff_base_s": 600.0, "backoff_max_s": 600.0, "probe_interval_s": 0.5}
    )
    failing = threading.Event()
    failing.set()

    def respond(_request: Any) -> int:
        if not failing.is_set():
            return 200
        if failure == "hangs":
            time.sleep(settings.timeout_s + 0.3)  # the notifier gave up on the answer meanwhile
        return 503

    receiver.respond_with(respond)
    create_webhook(store_url, receiver)
    notifier = notifiers(store_url, settings, rng=Highest())  # every backoff ~600 s
    with Storage.open(store_url) as job:
        alerts = Alerts(job)
        alerts.event("opened", "topic:a")
        alerts.event("opened", "topic:b")
        wait_for(lambda: notifier.stats().retried == 2, message="both first attempts failed")
        alerts.event("resolved", "topic:a")  # queued behind the backed-off opened event of its alert
        wait_for(lambda: notifier.stats().probes >= 4, timeout=60, message="probes while the receiver fails")
        rows = deliveries(store_url)
        a1, b1, a2 = (rows[key] for key in alerts.keys)
        assert (a1.attempts, b1.attempts, a2.attempts) == (1, 1, 0)  # probes are not counted
        assert a1.last_error.startswith("probe before attempt 2: ")
        backoff_ends = {key: rows[key].next_attempt_at for key in alerts.keys[:2]}
        assert all(end is not None and end > time.time() + 500 for end in backoff_ends.values())
        failing.clear()  # the receiver answers again
        wait_for(lambda: all_delivered(store_url, 3), timeout=60, message="the pending events delivered")
    rows = deliveries(store_url)
    for key, end in backoff_ends.items():
        assert rows[key].delivered_at < end - 500  # long before the backoff would have sent it
        assert rows[key].attempts == 1
    assert set(receiver.accepted()) == set(alerts.keys)
    accepted = {r.idempotency_key: r for r in receiver.accepted_requests()}
    assert accepted[alerts.keys[0]].received_at < accepted[alerts.keys[2]].received_at  # the alert's order
    assert accepted[alerts.keys[0]].headers["x-kafka-health-attempt"] == "2"  # a probe: the next attempt
    assert accepted[alerts.keys[2]].headers["x-kafka-health-attempt"] == "1"
    assert notifier.stats().attempts == 3  # the two that failed, and the queued event's


def test_a_probe_waits_for_the_receivers_retry_after(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    answers = iter([(503, {"Retry-After": "2"}), (200, {})])
    receiver.respond_with(lambda _request: next(answers))
    create_webhook(store_url, receiver)
    settings = FAST.model_copy(
        update={"backoff_base_s": 600.0, "backoff_max_s": 600.0, "probe_interval_s": 0.1}
    )
    notifier = notifiers(store_url, settings, rng=Highest())  # the backoff: ~600 s
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: all_delivered(store_url, 1), timeout=60, message="delivered by a probe")
    first, second = receiver.requests()
    assert second.received_at - first.received_at >= 1.9  # not at the probe interval (0.1 s)
    assert second.headers["x-kafka-health-attempt"] == "2"
    assert (notifier.stats().attempts, notifier.stats().probes) == (1, 1)


def test_a_client_error_is_permanent_and_dead_at_once(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    receiver.respond_with(410)
    create_webhook(store_url, receiver)
    notifier = notifiers(store_url)
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: notifier.stats().dead == 1, message="the delivery dead")
    (row,) = deliveries(store_url).values()
    assert (row.state, row.attempts, row.last_status) == ("dead", 1, 410)
    assert row.last_error.startswith("permanent error, not retried: HTTP 410 Gone")
    time.sleep(0.3)
    assert len(receiver.requests()) == 1


INTERNAL_PAGE = b"<html>db-admin: password=hunter2-internal-only</html>"
"""What a receiver's reply may hold: never kept, logged or shown (a webhook must not read internal pages)."""


def test_no_reply_body_reaches_the_outbox_whatever_the_status(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    answers: Iterator[Answer] = iter([(503, {}, INTERNAL_PAGE), (404, {}, INTERNAL_PAGE)])
    receiver.respond_with(lambda _request: next(answers))
    create_webhook(store_url, receiver)
    notifier = notifiers(store_url)
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: notifier.stats().dead == 1, message="retried once, then dead")
    (row,) = deliveries(store_url).values()
    assert (row.state, row.attempts, row.last_status) == ("dead", 2, 404)
    assert row.last_error == (
        "permanent error, not retried: HTTP 404 Not Found; fix the webhook, then retry the delivery"
    )
    assert [r.status for r in receiver.requests()] == [503, 404]


def test_a_redirect_is_not_followed(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    receiver.respond_with(lambda _request: (302, {"Location": "http://169.254.169.254/latest/meta-data/"}))
    create_webhook(store_url, receiver)
    notifier = notifiers(store_url)
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: notifier.stats().dead == 1, message="the delivery dead")
    (row,) = deliveries(store_url).values()
    assert (row.state, row.last_status) == ("dead", 302)
    assert "HTTP 302 Found (redirects are not followed)" in row.last_error
    assert len(receiver.requests()) == 1


def test_a_delivery_the_policy_refuses_is_dead_at_once_and_nothing_is_sent(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    """A webhook stored before the policy existed (or whose name now resolves to a private address): the
    connect is refused, the row is dead with the reason, the receiver never hears of it."""
    create_webhook(store_url, receiver)
    notifier = notifiers(store_url, FAST.model_copy(update={"allow_networks": ()}))
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: notifier.stats().dead == 1, message="the delivery dead")
    (row,) = deliveries(store_url).values()
    assert (row.state, row.attempts, row.last_status) == ("dead", 1, None)
    assert row.last_error.startswith("not sent: refused by the egress policy: 127.0.0.1 is loopback;")
    assert "allow_networks" in row.last_error
    assert receiver.requests() == []


def test_a_bad_signature_secret_is_a_permanent_error(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    create_webhook(store_url, receiver, secret="not-the-receivers-secret")
    notifiers(store_url)
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: any(d.state == "dead" for d in deliveries(store_url).values()), message="dead")
    (request,) = receiver.requests()
    assert request.signature_error == "signature mismatch: wrong secret, or the body was changed"
    assert receiver.accepted() == {}


def test_after_max_attempts_the_delivery_is_dead_then_retryable(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    receiver.respond_with(503)
    create_webhook(store_url, receiver)
    notifier = notifiers(store_url, FAST.model_copy(update={"max_attempts": 3}))
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
        wait_for(lambda: notifier.stats().dead == 1, message="the delivery dead")
        (row,) = deliveries(store_url).values()
        assert (row.state, row.attempts, row.next_attempt_at) == ("dead", 3, None)
        assert row.last_error.startswith("gave up after 3 attempts: HTTP 503 Service Unavailable")
        assert len(receiver.requests()) == 3
        receiver.respond_with(200)
        assert job.webhooks.requeue_delivery(row.id, time.time())
        wait_for(lambda: all_delivered(store_url, 1), message="the requeued delivery delivered")
    assert len(receiver.accepted()) == 1


def test_a_crash_between_send_and_record_resends_the_same_key_once(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    """A sender that claimed a row and crashed (sent or not) leaves it leased; once the lease runs out it is
    sent again with the same key, and a receiver that deduplicates accepts it once."""
    webhook = create_webhook(store_url, receiver)
    with Storage.open(store_url) as storage:
        Alerts(storage).event("opened", "topic:a")
        store = storage.webhooks
        assert store.enqueue_deliveries(time.time(), lambda w, n: '{"crashed": true}') == 1
        (row,) = store.due_deliveries(time.time())
        claimed = store.claim_delivery(row.id, time.time(), lease_until=time.time() + 0.5)
        assert claimed is not None
        assert claimed.payload is not None
        # the crashed sender got its request out, then died before recording the outcome
        with httpx.Client() as client:
            sent = post(client, webhook.url, claimed.payload, claimed.idempotency_key, SECRET, timeout_s=2)
        assert sent.outcome == "delivered"
        notifiers(store_url)
        wait_for(lambda: all_delivered(store_url, 1), message="the leased row sent again")
    first, second = receiver.requests()
    assert first.idempotency_key == second.idempotency_key == row.idempotency_key
    assert second.received_at - first.received_at >= 0.3  # not before the lease ran out
    assert (first.duplicate, second.duplicate) == (False, True)
    assert len(receiver.accepted()) == 1
    assert deliveries(store_url)[row.idempotency_key].attempts == 2


def test_an_event_committed_late_is_found_by_the_full_scan(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    """Polls look at recent events only; an event whose window ended long ago (a job catching up) is
    found by the next full scan of the horizon."""
    create_webhook(store_url, receiver)
    settings = FAST.model_copy(update={"recent_s": 5.0, "full_scan_interval_s": 0.5})
    notifier = notifiers(store_url, settings)
    wait_for(lambda: notifier.stats().polls >= 3, message="the first full scan done")
    with Storage.open(store_url) as job:
        alerts = Alerts(job)
        alerts.event("opened", "topic:late", at=time.time() - 3600)
        wait_for(lambda: all_delivered(store_url, 1), timeout=60, message="the late event delivered")
    assert set(receiver.accepted()) == set(alerts.keys)


# --- leadership ------------------------------------------------------------------------------------------


def test_only_the_zookeeper_leader_delivers_and_another_takes_over(
    zk_connect: str, store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    create_webhook(store_url, receiver)
    settings = FAST.model_copy(update={"election": "zookeeper"})
    one = notifiers(store_url, settings, ZooKeeperLeadership(zk_connect, settings.lock_path, identity="one"))
    two = notifiers(store_url, settings, ZooKeeperLeadership(zk_connect, settings.lock_path, identity="two"))
    wait_for(lambda: one.stats().leader or two.stats().leader, message="a leader elected")
    leader, follower = (one, two) if one.stats().leader else (two, one)
    assert isinstance(leader.leadership, ZooKeeperLeadership)
    assert leader.leadership.leader() == ("one" if leader is one else "two")

    with Storage.open(store_url) as job:
        alerts = Alerts(job)
        for n in range(5):
            alerts.event("opened", f"topic:{n}")
        wait_for(lambda: all_delivered(store_url, 5), message="the first five delivered")
        assert not follower.stats().leader
        wait_for(lambda: follower.stats().polls > 3, message="the follower kept polling")
        assert (leader.stats().delivered, follower.stats().attempts) == (5, 0)  # polled, never sent

        leader.stop()
        wait_for(lambda: follower.stats().leader, timeout=60, message="the follower took over")
        for n in range(3):
            alerts.event("resolved", f"topic:{n}")
        wait_for(lambda: all_delivered(store_url, 8), message="the next three delivered")
    assert follower.stats().delivered == 3
    assert_each_key_once(receiver, alerts.keys)


def test_a_leader_whose_session_expires_loses_the_leadership(
    zk_connect: str, store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    create_webhook(store_url, receiver)
    settings = FAST.model_copy(update={"election": "zookeeper"})
    one_election = ZooKeeperLeadership(zk_connect, settings.lock_path, identity="one")
    one = notifiers(store_url, settings, one_election)
    wait_for(lambda: one.stats().leader, message="the first one elected")
    two = notifiers(store_url, settings, ZooKeeperLeadership(zk_connect, settings.lock_path, identity="two"))
    wait_for(lambda: two.stats().polls >= 3, message="the second one polling")
    assert not two.stats().leader

    expire_session(one_election.client)  # the server drops its session, and with it the znode

    def single_leader() -> Notifier | None:
        leaders = [n for n in (one, two) if n.stats().leader]
        return leaders[0] if len(leaders) == 1 else None

    leader = wait_for(single_leader, message="one leader again")
    time.sleep(5 * FAST.poll_interval_s)
    assert single_leader() is leader  # and it stays so
    assert isinstance(leader.leadership, ZooKeeperLeadership)
    assert one_election.leader() == leader.leadership.identity
    with Storage.open(store_url) as job:
        alerts = Alerts(job)
        alerts.event("opened", "topic:a")
        wait_for(lambda: all_delivered(store_url, 1), message="delivered by the new leader")
    assert leader.stats().delivered == 1
    assert_each_key_once(receiver, alerts.keys)


def test_the_last_leader_keeps_delivering_while_its_session_is_disconnected(
    zk_connect: str, store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    """The leader cut off from ZooKeeper (a proxy between them): nobody can tell yet whether its session
    will expire, so it stays the ``last-leader`` and keeps delivering (the database's claims keep one
    sender per row); once its session expired on the server, the other instance is elected, and the old
    one, connected again, is a follower."""
    create_webhook(store_url, receiver)
    settings = FAST.model_copy(update={"election": "zookeeper"})
    servers, _, chroot = zk_connect.partition("/")
    host, port = servers.split(",")[0].rsplit(":", 1)
    with TcpProxy((host, int(port))) as proxy:
        one_election = ZooKeeperLeadership(
            proxy.address("/" + chroot), settings.lock_path, identity="one", session_timeout_s=4.0
        )
        one = notifiers(store_url, settings, one_election)
        wait_for(lambda: one.stats().leader, message="the first one elected")
        two_election = ZooKeeperLeadership(zk_connect, settings.lock_path, identity="two")
        two = notifiers(store_url, settings, two_election)
        wait_for(lambda: two.stats().polls >= 3, message="the second one polling")
        assert two_election.standing() == "follower"

        proxy.cut()
        wait_for(lambda: not one_election.client.connected, message="the leader cut off")
        assert one_election.standing() == "last-leader"
        assert not one_election.is_leader()
        assert one.stats().leader
        with Storage.open(store_url) as job:
            alerts = Alerts(job)
            alerts.event("opened", "topic:a")
            wait_for(lambda: all_delivered(store_url, 1), message="delivered by the last leader")
            assert (one.stats().delivered, two.stats().attempts) == (1, 0)

            wait_for(two_election.is_leader, timeout=20, message="the other elected once the session expired")
            assert one_election.standing() == "last-leader"  # it cannot know yet
            alerts.event("resolved", "topic:a")
            wait_for(lambda: all_delivered(store_url, 2), message="the next one delivered")
            proxy.restore()
            wait_for(lambda: one_election.standing() == "follower", timeout=20, message="the old one follows")
        assert two_election.is_leader()
    assert_each_key_once(receiver, alerts.keys)


def test_a_wake_polls_at_once(store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory) -> None:
    """The incident lane wakes the notifier after a commit: a delivery does not wait for the poll."""
    create_webhook(store_url, receiver)
    notifier = notifiers(store_url, FAST.model_copy(update={"poll_interval_s": 60.0}))
    wait_for(lambda: notifier.stats().polls == 1, message="the first poll")
    with Storage.open(store_url) as job:
        alerts = Alerts(job)
        alerts.event("opened", "topic:a")
        notifier.wake()
        wait_for(lambda: all_delivered(store_url, 1), timeout=50, message="delivered after the wake")
    assert notifier.stats().wakes == 1  # delivered within 50 s: by the woken poll, not the timer's (60 s)
    assert_each_key_once(receiver, alerts.keys)


def test_a_notifier_without_zookeeper_is_not_the_leader_and_sends_nothing(
    store_url: str, receiver: WebhookReceiver, notifiers: NotifierFactory
) -> None:
    create_webhook(store_url, receiver)
    down = f"127.0.0.1:{pick_free_port()}"  # nothing listens there
    notifier = notifiers(store_url, FAST, ZooKeeperLeadership(down, identity="lonely"))
    with Storage.open(store_url) as job:
        Alerts(job).event("opened", "topic:a")
    wait_for(lambda: notifier.stats().polls >= 5, message="a few polls")
    assert not notifier.stats().leader
    assert receiver.requests() == []
    assert deliveries(store_url) == {}  # not even entered in the outbox: only a leader does that


def test_stopping_leaves_no_thread_behind(store_url: str, zk_connect: str, receiver: WebhookReceiver) -> None:
    before = {t.ident for t in threading.enumerate()}
    create_webhook(store_url, receiver)
    with Storage.open(store_url) as storage:
        notifier = Notifier(storage.webhooks, settings=FAST, leadership=ZooKeeperLeadership(zk_connect))
        with notifier:
            Alerts(storage).event("opened", "topic:a")
            wait_for(lambda: all_delivered(store_url, 1), message="delivered")
        assert not notifier.running
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.ident not in before and t.is_alive()],
        timeout=5,
        message="the notifier's threads gone",
    )


def test_the_service_notifier_runs_only_with_a_store(zk_connect: str, store_url: str) -> None:
    with service_notifier(None, zk_connect) as nothing:
        assert nothing is None
    settings = FAST.model_copy(update={"election": "zookeeper"})
    with (
        Storage.open(store_url) as storage,
        service_notifier(storage.webhooks, zk_connect, settings) as notifier,
    ):
        assert notifier is not None
        assert notifier.running
        assert isinstance(notifier.leadership, ZooKeeperLeadership)
        wait_for(lambda: notifier.stats().leader, message="elected")
        started: Notifier = notifier
    assert not started.running
    with Storage.open(store_url) as storage, service_notifier(storage.webhooks, "unused:1", FAST) as alone:
        assert alone is not None
        assert isinstance(alone.leadership, AlwaysLeader)


# --- settings and backoff --------------------------------------------------------------------------------


@pytest.mark.unit
def test_backoff_is_full_jitter_under_an_exponential_ceiling() -> None:
    settings = NotifierSettings(backoff_base_s=1.0, backoff_max_s=300.0)
    top = Highest()
    assert [round(backoff_s(n, settings, top), 2) for n in (1, 2, 3, 9, 10, 500)] == [
        1.0,
        2.0,
        4.0,
        255.74,
        299.7,
        299.7,
    ]
    rng = random.Random(1)
    samples = [backoff_s(4, settings, rng) for _ in range(1000)]
    assert 0 <= min(samples) < 0.5
    assert 7.5 < max(samples) <= 8.0


@pytest.mark.unit
def test_a_receiver_is_probed_after_the_probe_interval_not_before_its_retry_after() -> None:
    settings = NotifierSettings(probe_interval_s=30.0)
    assert probe_at(None, settings) == -math.inf  # never tried: at once
    assert probe_at(100.0, settings) == 130.0
    assert probe_at(100.0, settings, quiet_until=120.0) == 130.0
    assert probe_at(100.0, settings, quiet_until=190.0) == 190.0
    assert retry_delay_s(5.0, None, settings) == 5.0
    assert retry_delay_s(5.0, 60.0, settings) == 60.0
    assert retry_delay_s(5.0, 1e6, settings) == 300.0  # Retry-After capped at backoff_max_s
    assert retry_delay_s(5.0, 1.0, settings) == 5.0


@pytest.mark.unit
@pytest.mark.parametrize("jitter", [Highest(), random.Random(7)])
def test_the_retry_schedule_tries_a_failing_receiver_every_probe_interval_and_gives_up_as_before(
    jitter: random.Random,
) -> None:
    """One delivery to a receiver that never answers, with the default settings: the counted attempts
    follow the backoff (at the top of the jitter: 1, 2, 4, ..., 256, 300, 300 s apart: dead after the 12th,
    ~1,110 s after the first, as without probes), and between them the receiver is probed whenever nobody
    tried it for ``probe_interval_s``; so whenever it answers again, it is tried within 30 s."""
    settings = NotifierSettings()
    tries: list[tuple[float, str]] = [(0.0, "attempt")]
    attempts, due = 1, backoff_s(1, settings, jitter)
    while attempts < settings.max_attempts:
        probe = probe_at(tries[-1][0], settings)
        if probe < due:
            tries.append((probe, "probe"))  # fails: not counted, the due time stays
            continue
        tries.append((due, "attempt"))
        attempts += 1
        due += backoff_s(attempts, settings, jitter)
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(tries)]
    assert max(gaps) <= settings.probe_interval_s + 1e-9
    assert [kind for _, kind in tries].count("attempt") == settings.max_attempts
    if isinstance(jitter, Highest):
        ceilings = [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
        assert tries[-1][0] == pytest.approx(0.999 * sum(ceilings))  # ~18.5 minutes, as without probes
        probes = [round(at) for at, kind in tries if kind == "probe"]
        assert probes[:7] == [61, 93, 123, 157, 187, 217, 247]  # between the attempts 32, 64, 128 s apart
        assert len(probes) == 1 + 2 + 4 + 8 + 9 + 9  # then 8 in the 256 s gap, 9 in each 300 s one
    else:
        assert tries[-1][0] < sum([1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300])


@pytest.mark.unit
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"backoff_base_s": 10, "backoff_max_s": 5}, "backoff_max_s .5. must be at least backoff_base_s"),
        ({"lock_path": "relative"}, "lock_path must be an absolute znode path"),
        ({"lock_path": "/trailing/"}, "lock_path must be an absolute znode path"),
        ({"poll_interval_s": 0}, "greater than 0"),
        ({"election": "etcd"}, "'zookeeper' or 'none'"),
        ({"recent_s": 100, "horizon_s": 10}, r"recent_s \(100\) must not exceed horizon_s \(10\)"),
    ],
)
def test_bad_settings_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NotifierSettings(**values)
