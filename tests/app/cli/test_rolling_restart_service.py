"""``kafka-health rolling-restart`` with demotion and silences against a real ``kafka-health serve`` (issue
26, "Done means"): one 5-broker reference cluster (replication factor 3, ``min.insync.replicas`` 2, traffic
on) for the module, one ``serve`` (rule 5 opening at once and every rule a restart raises resolving within
a second or two, so that the silences are really put to work) with a webhook subscribed to every rule by a
real receiver, and an operator's token (``KAFKA_HEALTH_TOKEN``) for the conductor.

- (a) ``--brokers all --restart-command ... --service-url ...``, demotion and silences on: exit 0, every
  broker restarted exactly once, the controller last, no partition under min ISR or offline at any moment
  (every state znode watched), each broker's rule 5 opened and resolved under its silence (the alerts API's
  ``silenced_by``) and no page at the receiver, every broker leading its preferred partitions again;
- (b) the same with a second broker stopped by hand midway: exit 3 naming it, and its page (rule 5)
  reaches the receiver. It runs after (a) and restores the cluster.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.control import ControlServer
from app.embedded.webhook_receiver import WebhookReceiver
from tests.support.cli import REPO, Cli, CliFactory
from tests.support.reference_cluster import small_settings, wait_for, zk_partitions
from tests.support.serve_process import ADMIN_TOKEN, START_TIMEOUT_S, Serve
from tests.support.state_watcher import StateWatcher
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

BROKERS = 5
MIN_ISR = 2
TOPICS = [
    TopicSpec(name="payments", partitions=10, replication_factor=3, config={"min.insync.replicas": "2"}),
]
SECRET = "a-shared-secret-for-the-tests"
OPERATOR_TOKEN = "operator-token-for-the-conductor"
RESTART_SCRIPT = REPO / "tests" / "support" / "restart_broker.py"
DOWN_S = 1.0
"""How long the restart command keeps a broker stopped (a real restart takes seconds too): long enough for
the incident lane to see it unregistered and open rule 5 under its silence."""
RUN_TIMEOUT = 600.0
SERVE_ENV = {
    "KAFKA_HEALTH_SERVICE__TOKENS": f"root:admin:{ADMIN_TOKEN},conductor:operator:{OPERATOR_TOKEN}",
    "KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS": "127.0.0.1/32",  # the receiver is on loopback
    # rule 5 (broker down) opens at once; what a restart raises resolves within a second or two
    "KAFKA_HEALTH_ANALYTICS__RULES__FOR_S": '{"5": 0, "6": 1}',
    "KAFKA_HEALTH_ANALYTICS__RULES__URP_FOR_S": "1",
    "KAFKA_HEALTH_ANALYTICS__RULES__RESOLVE_AFTER_S": '{"2": 1, "5": 4, "6": 1}',
}


class Reference:
    """The module's cluster, its control port, the watcher of every state znode, the service and the
    receiver."""

    def __init__(
        self, cluster: ReferenceCluster, zk: KazooClient, serve: Serve, receiver: WebhookReceiver, where: Path
    ) -> None:
        self.cluster = cluster
        self.zk = zk
        self.serve = serve
        self.receiver = receiver
        self.where = where
        self.control = ControlServer(cluster)
        self.control.start()
        partitions = zk_partitions(zk)
        self.preferred = {tp: p.replicas for tp, p in partitions.items()}
        replicas = {f"{t}-{p}": len(z.replicas) for (t, p), z in partitions.items()}
        self.watcher = StateWatcher(zk, replicas, {t: MIN_ISR for t, _ in partitions})
        for topic, index in partitions:
            self.watcher.watch(topic, index)

    def command(self, log: Path) -> str:
        words = [sys.executable, str(RESTART_SCRIPT), self.control.url, "{broker}", str(log), str(DOWN_S)]
        return shlex.join(words)

    def args(self, name: str, *extra: str) -> list[str]:
        return [
            "rolling-restart",
            "--zookeeper",
            self.cluster.zookeeper,
            "--brokers",
            "all",
            "--restart-command",
            self.command(self.where / f"{name}.log"),
            "--service-url",
            self.serve.url,
            "--state-dir",
            str(self.where / name),
            "--default-min-isr",
            str(MIN_ISR),
            *extra,
        ]

    def restarts(self, name: str) -> list[int]:
        log = self.where / f"{name}.log"
        return [int(line) for line in log.read_text().split()] if log.exists() else []

    def full_isrs(self) -> bool:
        return all(len(p.isr) == len(p.replicas) for p in zk_partitions(self.zk).values())

    def pages(self) -> list[dict[str, Any]]:
        return list(self.receiver.accepted().values())

    def pending_deliveries(self) -> int:
        page = self.serve.get("/api/v1/webhooks/1/deliveries", state="pending")
        assert page.status_code == 200, page.text
        return int(page.json()["total"])

    def rule_5(self, broker: int) -> dict[str, Any] | None:
        """Broker ``broker``'s rule 5 alert with its events, once it has opened."""
        found = self.serve.get("/api/v1/alerts", rule=5)
        assert found.status_code == 200, found.text
        alert = next((a for a in found.json()["items"] if a["subject"] == f"broker:{broker}"), None)
        if alert is None:
            return None
        detail = self.serve.get(f"/api/v1/alerts/{alert['fingerprint']}")
        assert detail.status_code == 200, detail.text
        body: dict[str, Any] = detail.json()
        return body


@pytest.fixture(scope="module")
def zk(zookeeper_server: ZooKeeperEndpoint) -> Iterator[str]:
    with own_chroot(zookeeper_server, "rolling-restart") as connect:
        yield connect


@pytest.fixture(scope="module")
def reference(zk: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    where = tmp_path_factory.mktemp("rolling-restart")
    settings = small_settings(
        brokers=BROKERS, topics=TOPICS, min_insync_replicas=MIN_ISR, listener_port_base=0
    )
    cluster = ReferenceCluster(settings, zk)
    cluster.start()
    client = KazooClient(hosts=zk)
    client.start(timeout=30)
    receiver = WebhookReceiver(secret=SECRET)
    receiver.start()
    serve = Serve(zk, f"sqlite:///{where / 'store.db'}", where / "serve.log", **SERVE_ENV)
    ref: Reference | None = None
    try:
        wait_for(serve.ready, timeout=START_TIMEOUT_S, message="serve ready")
        wait_for(lambda: serve.standing() == "leader", timeout=30, message="its incident lane elected")
        body = {"name": "oncall", "url": receiver.url, "secret": SECRET, "rules": None}
        created = serve.post("/api/v1/webhooks", body)
        assert created.status_code == 201, created.text
        assert created.json()["id"] == 1
        ref = Reference(cluster, client, serve, receiver, where)
        yield ref
    finally:
        if ref is not None:
            ref.control.close()
        serve.stop()
        receiver.stop()
        client.stop()
        client.close()
        cluster.stop()
    assert cluster.errors == []


@pytest.fixture
def operator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_TOKEN", OPERATOR_TOKEN)


def report(cli: Cli) -> dict[str, Any]:
    last = json.loads(cli.stdout[-1])
    assert last["event"] == "report", cli.output()
    return dict(last)


@pytest.mark.usefixtures("operator")
def test_a_demoted_silenced_rolling_restart_pages_nobody_and_restores_the_leaders(
    reference: Reference, run_cli: CliFactory
) -> None:
    controller = reference.cluster.controller
    assert controller is not None
    cli = run_cli(*reference.args("a", "--format", "json"))
    assert cli.wait(RUN_TIMEOUT) == 0, cli.output() + reference.serve.output()

    restarts = reference.restarts("a")
    assert sorted(restarts) == list(range(BROKERS)), restarts
    assert restarts[-1] == controller.broker_id
    assert reference.watcher.events >= 2 * BROKERS, "the watcher saw the restarts' state changes"
    assert reference.watcher.violations == [], reference.watcher.violations
    body = report(cli)
    assert (body["result"], body["order"]) == ("done", restarts)
    for entry in body["brokers"]:
        assert entry["done"] is True
        assert list(entry["steps"]) == [
            "wait_safe", "demote", "silence", "restart", "rejoin", "promote", "unsilence"
        ]  # fmt: skip

    # each broker's absence opened its rule 5 under its silence, and it resolved before the silence was
    # lifted: the incident lane has acted on every restart
    for broker in restarts:

        def resolved(b: int = broker) -> dict[str, Any] | None:
            alert = reference.rule_5(b)
            return alert if alert is not None and alert["state"] == "resolved" else None

        alert = wait_for(resolved, timeout=60, message=f"broker {broker}'s rule 5 opened and resolved")
        kinds = [(e["kind"], bool(e["silenced_by"])) for e in alert["events"]]
        assert ("opened", True) in kinds, (broker, alert["events"])
        assert all(silenced for kind, silenced in kinds if kind != "resolved"), (broker, alert["events"])
    wait_for(lambda: reference.pending_deliveries() == 0, timeout=30, message="the outbox drained")
    assert reference.pages() == [], reference.pages()
    silences = reference.serve.get("/api/v1/silences", state="active")
    assert silences.json()["total"] == 0, silences.text

    # leaderships moved away and back: every partition's replica order as before, its first replica leads
    def preferred_leaders() -> bool:
        partitions = zk_partitions(reference.zk)
        return all(
            p.replicas == reference.preferred[tp] and p.leader == p.replicas[0]
            for tp, p in partitions.items()
        )

    wait_for(preferred_leaders, timeout=30, message="every broker leading its preferred partitions")
    actions = reference.serve.get("/api/v1/actions", limit=100).json()
    done = sorted((a["kind"], a["request"]["broker"], a["state"]) for a in actions)
    assert done == sorted(
        [(k, b, "SUCCEEDED") for b in range(BROKERS) for k in ("demote-broker", "promote-broker")]
    )
    assert {a["requested_by"] for a in actions} == {"conductor"}


@pytest.mark.usefixtures("operator")
def test_a_second_broker_stopped_by_hand_midway_stops_with_3_and_pages(
    reference: Reference, run_cli: CliFactory
) -> None:
    controller = reference.cluster.controller
    assert controller is not None
    cli = run_cli(*reference.args("b"))
    first = cli.expect(r"broker (\d+): restarted and back in every ISR", timeout=RUN_TIMEOUT)
    done = int(first.group(1))
    by_hand = [b for b in range(BROKERS) if b not in (done, controller.broker_id)][-1]
    httpx.post(f"{reference.control.url}/brokers/{by_hand}/stop", json={}, timeout=30).raise_for_status()
    try:
        assert cli.wait(RUN_TIMEOUT) == 3, cli.output()
        assert f"broker {by_hand} is down (not registered in /brokers/ids)" in cli.stderr[-1], cli.output()
        assert cli.stderr[-1].startswith("stopped at broker "), cli.output()
        assert by_hand not in reference.restarts("b")
        assert reference.restarts("b").count(done) == 1

        def paged() -> list[dict[str, Any]]:
            return [
                p
                for p in reference.pages()
                if (p["rule"], p["subject"], p["kind"]) == (5, f"broker:{by_hand}", "opened")
            ]

        wait_for(paged, timeout=60, message=f"broker {by_hand}'s page at the receiver")
    finally:
        httpx.post(f"{reference.control.url}/brokers/{by_hand}/start", json={}, timeout=30)
        wait_for(reference.full_isrs, timeout=120, message="every ISR full again")


def test_the_service_conducts_a_rolling_restart_that_automation_follows_through_next(
    reference: Reference,
) -> None:
    controller = reference.cluster.controller
    assert controller is not None
    brokers = [b for b in range(BROKERS) if b != controller.broker_id][:2]
    wait_for(reference.full_isrs, timeout=120, message="every ISR full")
    refused = reference.serve.post("/api/v1/maintenance/rolling-restarts", {"brokers": [99]})
    assert refused.status_code == 422, refused.text
    assert "broker 99 is neither registered nor assigned any replica" in refused.json()["detail"]
    started = reference.serve.post(
        "/api/v1/maintenance/rolling-restarts",
        {"brokers": brokers, "demote": True, "silence": True, "restart": "external", "wait_rejoined_s": 300},
    )
    assert started.status_code == 202, started.text
    run = started.json()
    assert (run["state"], run["order"]) == ("running", brokers)
    busy = reference.serve.post("/api/v1/maintenance/rolling-restarts", {"brokers": brokers})
    assert busy.status_code == 409, busy.text

    # the automation: poll next, stop the broker it may stop, start it again
    stopped: list[int] = []

    def follow() -> dict[str, Any] | None:
        body: dict[str, Any] = reference.serve.get(f"/api/v1/maintenance/rolling-restarts/{run['id']}").json()
        if body["state"] != "running":
            return body
        following = body["next"]
        if following is not None and following["may_stop"] and following["broker"] not in stopped:
            broker = following["broker"]
            stopped.append(broker)
            control = f"{reference.control.url}/brokers/{broker}"
            httpx.post(f"{control}/stop", json={"controlled": True}, timeout=60).raise_for_status()
            httpx.post(f"{control}/start", json={}, timeout=60).raise_for_status()
        return None

    body = wait_for(follow, timeout=RUN_TIMEOUT, message="the service's rolling restart to end")
    assert body["state"] == "done", body
    assert body["next"] is None
    assert stopped == brokers
    assert [(b["broker"], b["done"]) for b in body["brokers"]] == [(b, True) for b in brokers]
    for entry in body["brokers"]:
        assert list(entry["steps"]) == [
            "wait_safe", "demote", "silence", "restart", "rejoin", "promote", "unsilence"
        ]  # fmt: skip
    listed = reference.serve.get("/api/v1/maintenance/rolling-restarts").json()
    assert listed["items"][0]["id"] == run["id"]
    audit = reference.serve.get("/api/v1/audit").json()
    assert ("rolling-restart", "accepted") in [(e["action"], e["outcome"]) for e in audit]
    ended = reference.serve.post(f"/api/v1/maintenance/rolling-restarts/{run['id']}/cancel")
    assert ended.status_code == 409, ended.text
    wait_for(reference.full_isrs, timeout=120, message="every ISR full again")
