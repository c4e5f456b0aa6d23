"""The incident lane end to end, as an operator runs it: the reference cluster, real ``kafka-health serve``
processes (no ``collect``, no Spark) on one store, a webhook subscribed through the API and a real HTTP
receiver (app.embedded.webhook_receiver: verifies signatures, deduplicates on the idempotency key).

- a broker crash that takes RF-1 partitions offline is paged (rule 1's ``opened`` at the receiver),
  and ``resolved`` after the broker returns, with the default settings (how fast: bench/alert_latency.py);
- two replicas on one SQLite file: the leader SIGKILLed during an incident, the other takes over, and the
  receiver gets every event of the incident exactly once, keys gapless per alert;
- the service cut off from ZooKeeper (a proxy between them): its view goes stale, and the last leader,
  which cannot know whether anyone took over, still pages rule 11 and resolves it once back.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from analytics.model import fingerprint
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.webhook_receiver import WebhookReceiver
from collectors.zookeeper.collector import scan
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.serve_process import ADMIN, START_TIMEOUT_S, Serve
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

SECRET = "a-shared-secret-for-the-tests"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as running:
        yield running


RECEIVER_ALLOWED = {"KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS": "127.0.0.1/32"}
"""The receiver is on loopback, which the webhook egress policy refuses unless allowed (as an operator
would allow an on-premises receiver: through the environment)."""


def subscribe(serve: Serve, receiver: WebhookReceiver, rules: list[int] | None = None) -> int:
    body: dict[str, Any] = {"name": "oncall", "url": receiver.url, "secret": SECRET, "rules": rules}
    created = httpx.post(serve.url + "/api/v1/webhooks", json=body, headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


def pending_deliveries(serve: Serve, webhook_id: int) -> int:
    url = f"{serve.url}/api/v1/webhooks/{webhook_id}/deliveries"
    page = httpx.get(url, params={"state": "pending"}, headers=ADMIN, timeout=10)
    assert page.status_code == 200, page.text
    return int(page.json()["total"])


def singles_cluster(make_cluster: ClusterFactory) -> ReferenceCluster:
    return make_cluster(
        topics=[
            TopicSpec(name="orders", partitions=4, replication_factor=3),
            TopicSpec(name="singles", partitions=3, replication_factor=1),
        ]
    )


def broker_with_singles(zk_connect: str) -> int:
    snapshot = scan(zk_connect)
    return min(
        info.assignment.replicas[0] for tp, info in snapshot.partitions.items() if tp.topic == "singles"
    )


def received(receiver: WebhookReceiver, rule: int, kind: str) -> list[dict[str, Any]]:
    found = [body for body in receiver.accepted().values() if body["rule"] == rule and body["kind"] == kind]
    if len(found) > 1:
        print("\n".join(f"{b['idempotency_key']} {b['kind']} {b['subject']} {b['summary']}" for b in found))
    return found


def assert_each_event_once_and_gapless(receiver: WebhookReceiver) -> dict[str, list[int]]:
    """Every accepted key once, signed, no request twice; per alert the sequences 1..n without a gap."""
    requests = receiver.requests()
    assert all(r.signature_error is None and r.status == 200 for r in requests)
    keys = [r.idempotency_key or "" for r in requests]
    assert len(keys) == len(set(keys)), f"a key was sent twice: {sorted(keys)}"
    per_alert: dict[str, list[int]] = {}
    for key in receiver.accepted():
        fp, _, sequence = key.partition(":")
        per_alert.setdefault(fp, []).append(int(sequence))
    for fp, sequences in per_alert.items():
        assert sorted(sequences) == list(range(1, len(sequences) + 1)), (fp, sorted(sequences))
    return per_alert


# --- serve alone pages a broker crash -----------------------------------------------------------------------


def test_a_broker_crash_is_paged_by_serve_alone(
    make_cluster: ClusterFactory,
    zk_connect: str,
    tmp_path: Path,
    serves: Callable[..., Serve],
    receiver: WebhookReceiver,
) -> None:
    cluster = singles_cluster(make_cluster)
    broker = broker_with_singles(zk_connect)
    serve = serves(zk_connect, f"sqlite:///{tmp_path / 'store.db'}", **RECEIVER_ALLOWED)
    wait_for(serve.ready, timeout=START_TIMEOUT_S, message="serve ready")
    wait_for(lambda: serve.standing() == "leader", timeout=30, message="its incident lane elected")
    subscribe(serve, receiver, rules=[1])

    crashed_at = time.time()
    cluster.stop_broker(broker)
    (opened,) = wait_for(lambda: received(receiver, 1, "opened"), timeout=60, message="rule 1 opened")
    latency = receiver.accepted_requests()[0].received_at - crashed_at
    assert opened["subject"] == "topic:singles"
    assert opened["severity"] == "critical"
    assert (
        opened["idempotency_key"]
        == f"{fingerprint(scan(zk_connect).cluster_id or 'unknown', 1, 'topic:singles')}:1"
    )

    cluster.start_broker(broker)
    wait_for(lambda: received(receiver, 1, "resolved"), timeout=60, message="rule 1 resolved")
    per_alert = assert_each_event_once_and_gapless(receiver)
    assert len(per_alert) == 1, per_alert
    # opened ... resolved; an update between them is right when the lane saw the restarted broker
    # registered before the controller had elected it (the partitions became electable: a new summary)
    kinds = [b["kind"] for b in sorted(receiver.accepted().values(), key=lambda b: b["sequence"])]
    assert kinds[0] == "opened"
    assert kinds[-1] == "resolved"
    assert set(kinds[1:-1]) <= {"updated"}, kinds
    # how long it took is bench/alert_latency.py's figure (docs/benchmarks.md), not a test's bound
    print(f"\nbroker crash -> rule 1 opened at the receiver: {latency * 1000:.0f} ms")


# --- two replicas, the leader killed mid-incident -----------------------------------------------------------


def test_two_replicas_the_leader_killed_mid_incident_every_event_once(
    make_cluster: ClusterFactory,
    zk_connect: str,
    tmp_path: Path,
    serves: Callable[..., Serve],
    receiver: WebhookReceiver,
) -> None:
    cluster = singles_cluster(make_cluster)
    broker = broker_with_singles(zk_connect)
    store_url = f"sqlite:///{tmp_path / 'shared.db'}"
    fast = {  # rule 5 (broker down) opens after 2 s, so that the incident has more than one alert
        "KAFKA_HEALTH_ANALYTICS__RULES__FOR_S": '{"5": 2}',
        "KAFKA_HEALTH_ANALYTICS__RULES__RESOLVE_AFTER_S": '{"1": 3, "5": 3}',
        **RECEIVER_ALLOWED,
    }
    one = serves(zk_connect, store_url, **fast)
    two = serves(zk_connect, store_url, **fast)
    for serve in (one, two):
        wait_for(serve.ready, timeout=START_TIMEOUT_S, message="serve ready")
    leader = wait_for(
        lambda: next((s for s in (one, two) if s.standing() == "leader"), None),
        timeout=30,
        message="a leader",
    )
    other = two if leader is one else one
    assert other.standing() == "follower"
    webhook_id = subscribe(other, receiver, rules=[1, 5])  # through either replica: they share the store

    cluster.stop_broker(broker)
    wait_for(lambda: received(receiver, 1, "opened"), timeout=60, message="rule 1 opened")
    wait_for(lambda: received(receiver, 5, "opened"), timeout=60, message="rule 5 opened")
    # The receiver's 200 reaches the leader a moment before the leader records the delivery; a kill in
    # between re-sends that event with the same key (at least once, documented in docs/webhooks.md). This
    # test is about the events of the incident's end, so it kills the leader once both are recorded.
    wait_for(lambda: pending_deliveries(other, webhook_id) == 0, timeout=60, message="deliveries recorded")

    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(10)
    cluster.start_broker(broker)  # the incident ends while nobody leads yet
    wait_for(lambda: other.standing() == "leader", timeout=40, message="the other replica took over")
    wait_for(
        lambda: received(receiver, 1, "resolved"), timeout=30, message="rule 1 resolved by the new leader"
    )
    wait_for(
        lambda: received(receiver, 5, "resolved"), timeout=30, message="rule 5 resolved by the new leader"
    )
    time.sleep(2.0)  # nothing more arrives
    assert_each_event_once_and_gapless(receiver)
    events: dict[int, list[dict[str, Any]]] = {}
    by_sequence = sorted(receiver.accepted().items(), key=lambda item: int(item[0].partition(":")[2]))
    for _, body in by_sequence:
        events.setdefault(body["rule"], []).append(body)
    assert [e["kind"] for e in events[5]] == ["opened", "resolved"]
    # rule 1 opened, then (once rule 5 opened: its 2 s ``for``) updated to name the broker down as its
    # cause, then resolved; each once
    kinds = [e["kind"] for e in events[1]]
    assert kinds[0] == "opened", kinds
    assert kinds[-1] == "resolved", kinds
    assert set(kinds[1:-1]) <= {"updated"}, kinds
    assert len(kinds) <= 3, kinds


# --- cut off from ZooKeeper: the last leader pages rule 11 --------------------------------------------------


def test_cut_off_from_zookeeper_the_last_leader_pages_rule_11(
    make_cluster: ClusterFactory,
    zk_connect: str,
    tmp_path: Path,
    serves: Callable[..., Serve],
    receiver: WebhookReceiver,
) -> None:
    make_cluster()
    servers, _, chroot = zk_connect.partition("/")
    host, port = servers.split(",")[0].rsplit(":", 1)
    with TcpProxy((host, int(port))) as proxy:
        serve = serves(
            proxy.address("/" + chroot),
            f"sqlite:///{tmp_path / 'store.db'}",
            KAFKA_HEALTH_ANALYTICS__RULES__FOR_S='{"11": 2}',
            KAFKA_HEALTH_ZOOKEEPER__SESSION_TIMEOUT_S="6",
            **RECEIVER_ALLOWED,
        )
        wait_for(serve.ready, timeout=START_TIMEOUT_S, message="serve ready")
        wait_for(lambda: serve.standing() == "leader", timeout=30, message="its incident lane elected")
        subscribe(serve, receiver, rules=[11])

        proxy.cut()
        (opened,) = wait_for(lambda: received(receiver, 11, "opened"), timeout=60, message="rule 11 opened")
        assert opened["subject"] == "view:zookeeper"
        assert opened["severity"] == "critical"
        assert "view of ZooKeeper is stale" in opened["summary"]
        assert serve.standing() == "last-leader"
        proxy.restore()
        wait_for(lambda: received(receiver, 11, "resolved"), timeout=60, message="rule 11 resolved")
        wait_for(lambda: serve.standing() == "leader", timeout=30, message="elected again")
    assert [len(s) for s in assert_each_event_once_and_gapless(receiver).values()] == [2]
