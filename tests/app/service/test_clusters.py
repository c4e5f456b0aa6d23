"""One service watching two reference clusters (``create_app`` with two named clusters, over real HTTP):
each cluster's routes under its own ``/api/v1/clusters/{name}/...``, its alerts and its actions its own,
``/metrics`` labelled by cluster; and cluster b's ZooKeeper (a second server) stopped: a's routes and
alerts keep answering promptly while b shows as unreachable, until b's ZooKeeper is back.

Cluster a lives in a chroot of the run's ZooKeeper, cluster b on a ZooKeeper server of its own (started
once for the module, stopped and started again by the last test)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient
from pydantic import SecretStr

from analytics.rules import RuleSettings
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.zookeeper import EmbeddedZooKeeper, pick_free_port
from app.incidents.config import IncidentSettings
from app.retention.config import RetentionSettings
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ViewSettings
from app.storage import open_database
from collectors.metrics import MetricsSettings
from collectors.zookeeper.collector import scan
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.reference_cluster import small_settings, wait_for
from tests.support.service import ADMIN, OPERATOR, TOKENS, VIEWER, run_server
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

ELECTION = "actions/preferred-replica-election"


@dataclass
class Two:
    url: str
    a: ReferenceCluster
    b: ReferenceCluster
    zk_a: str
    zk_b: str
    b_server: EmbeddedZooKeeper

    def get(self, path: str, headers: dict[str, str] | None = None, **params: Any) -> httpx.Response:
        return httpx.get(self.url + path, headers=VIEWER if headers is None else headers, params=params)

    def post(self, path: str, body: Any) -> httpx.Response:
        return httpx.post(self.url + path, headers=OPERATOR, json=body)


def _metrics(cluster: ReferenceCluster) -> MetricsSettings:
    return MetricsSettings(urls={b: u for b in cluster.brokers if (u := cluster.metrics_url(b)) is not None})


@pytest.fixture(scope="module")
def two(zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Two]:
    workdir = tmp_path_factory.mktemp("clusters")
    b_server = EmbeddedZooKeeper(pick_free_port(), workdir / "zk-b", heap="256m")
    with own_chroot(zookeeper_server, "mc-a") as zk_a, b_server:
        root = KazooClient(hosts=b_server.connect_string)
        root.start(timeout=15)
        root.ensure_path("/b")
        root.stop()
        root.close()
        zk_b = b_server.connect_string + "/b"
        a = ReferenceCluster(small_settings(), zk_a)
        b = ReferenceCluster(small_settings(), zk_b)
        a.start()
        b.start()
        store_url = f"sqlite:///{workdir / 'store.db'}"
        open_database(store_url).close()
        settings = ServiceSettings(
            tokens=SecretStr(TOKENS),
            view=ViewSettings(metrics_interval_s=0.3),
            incidents=IncidentSettings(load_silence="off"),
            retention=RetentionSettings(enabled=False),
        )
        app = create_app(
            ServiceSpec(
                settings,
                [
                    ClusterSpec(CollectorSpec(zk_a, session_timeout_s=6.0), name="a", metrics=_metrics(a)),
                    ClusterSpec(CollectorSpec(zk_b, session_timeout_s=6.0), name="b", metrics=_metrics(b)),
                ],
                store_url=store_url,
                rules=RuleSettings(for_s={5: 0.0}, resolve_after_s={5: 0.0}),
            )
        )
        port = pick_free_port()
        server, thread = run_server(app, port)
        try:
            yield Two(f"http://127.0.0.1:{port}", a, b, zk_a, zk_b, b_server)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
            a.stop()
            b.stop()
        assert not a.errors, a.errors


def open_alerts(two: Two, cluster: str, rule: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = two.get(
        f"/api/v1/clusters/{cluster}/alerts", state="open", rule=str(rule)
    ).json()["items"]
    return items


def test_each_cluster_is_served_under_its_own_name(two: Two) -> None:
    listed = two.get("/api/v1/clusters").json()
    assert [(c["name"], c["key"], c["reachable"], c["ready"]) for c in listed] == [
        ("a", "a", True, True),
        ("b", "b", True, True),
    ]
    assert [c["zookeeper"] for c in listed] == [two.zk_a, two.zk_b]
    ids = {"a": scan(two.zk_a).cluster_id, "b": scan(two.zk_b).cluster_id}
    assert ids["a"] != ids["b"]
    for name in ("a", "b"):
        body = two.get(f"/api/v1/clusters/{name}/cluster").json()
        assert body["cluster_id"] == ids[name]
        assert body["summary"]["brokers"] == 3
        brokers = two.get(f"/api/v1/clusters/{name}/brokers").json()
        assert [(b["id"], b["registered"]) for b in brokers] == [(0, True), (1, True), (2, True)]
        assert two.get(f"/api/v1/clusters/{name}/alerts").json()["total"] == 0
        assert two.get(f"/api/v1/clusters/{name}/load").json() == {"latest": None, "history": []}

    # the unscoped paths cannot tell which cluster: 409 naming them; an unknown name: 404
    unscoped = two.get("/api/v1/brokers")
    assert unscoped.status_code == 409
    assert unscoped.json() == {
        "detail": "2 clusters are watched: use /api/v1/clusters/{name}/...",
        "problems": [{"cluster": "a"}, {"cluster": "b"}],
    }
    assert two.post(f"/api/v1/{ELECTION}", {"scope": "all"}).status_code == 409
    unknown = two.get("/api/v1/clusters/c/brokers")
    assert (unknown.status_code, unknown.json()["detail"]) == (404, "no cluster named c; known: a, b")
    assert two.get("/api/v1/clusters/c/brokers", headers={}).status_code == 401  # the token first

    ready = two.get("/readyz", headers={})
    assert ready.status_code == 200
    assert [(c["name"], c["ready"]) for c in ready.json()["clusters"]] == [("a", True), ("b", True)]

    metrics = two.get("/metrics", headers={}).text
    assert 'kafka_health_brokers_alive{cluster="a"} 3.0' in metrics
    assert 'kafka_health_brokers_alive{cluster="b"} 3.0' in metrics
    assert metrics.count("# HELP kafka_health_brokers_alive ") == 1  # one family, a series per cluster
    assert 'kafka_health_broker_scrape_up{broker="0",cluster="b"} 1.0' in metrics


def test_a_broker_stopped_on_a_opens_the_alert_of_a_only(two: Two) -> None:
    two.a.stop_broker(2)
    try:
        (alert,) = wait_for(lambda: open_alerts(two, "a", 5), timeout=15, message="rule 5 opened on a")
        assert (alert["cluster"], alert["subject"]) == ("a", "broker:2")
        assert open_alerts(two, "b", 5) == []
        metrics = two.get("/metrics", headers={}).text
        assert 'kafka_health_broker_down{broker="2",cluster="a"} 1.0' in metrics
        assert 'cluster="b"} 1.0' not in "\n".join(
            line for line in metrics.splitlines() if line.startswith("kafka_health_broker_down")
        )
        # the alert is a's: not found under b
        found = two.get(f"/api/v1/clusters/b/alerts/{alert['fingerprint']}")
        assert found.status_code == 404
        assert two.get(f"/api/v1/clusters/a/alerts/{alert['fingerprint']}").status_code == 200
    finally:
        two.a.start_broker(2)
    wait_for(lambda: not open_alerts(two, "a", 5), timeout=30, message="rule 5 resolved on a")
    wait_for(
        lambda: two.get("/api/v1/clusters/a/cluster").json()["summary"]["under_replicated"] == 0,
        timeout=30,
        message="a back in sync",
    )


def _partition_states(connect: str) -> dict[str, int]:
    """Each partition state znode of ``connect``'s cluster and its version (a write bumps it)."""
    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    try:
        states = {}
        for topic in client.get_children("/brokers/topics"):
            for partition in client.get_children(f"/brokers/topics/{topic}/partitions"):
                path = f"/brokers/topics/{topic}/partitions/{partition}/state"
                states[path] = client.exists(path).version
        return states
    finally:
        client.stop()
        client.close()


def _non_preferred(two: Two, cluster: str) -> list[Any]:
    items: list[Any] = two.get(f"/api/v1/clusters/{cluster}/partitions", non_preferred="true").json()["items"]
    return items


def test_an_election_posted_for_b_runs_on_b_only(two: Two) -> None:
    two.b.stop_broker(0)
    wait_for(lambda: _non_preferred(two, "b"), message="leaders moved off b's broker 0")
    two.b.start_broker(0)
    wait_for(
        lambda: two.get("/api/v1/clusters/b/cluster").json()["summary"]["under_replicated"] == 0,
        timeout=30,
        message="b's broker 0 back in every ISR",
    )
    moved = _non_preferred(two, "b")
    assert moved
    a_before = _partition_states(two.zk_a)

    run = two.post(f"/api/v1/clusters/b/{ELECTION}", {"scope": "all", "dry_run": False})
    assert run.status_code == 202, run.text
    action_id = run.json()["action_id"]

    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = two.get(f"/api/v1/clusters/b/actions/{action_id}").json()
        return body if body["state"] not in ("PENDING", "RUNNING") else None

    action = wait_for(done, timeout=60, message="b's election finished")
    assert (action["state"], action["cluster"]) == ("SUCCEEDED", "b"), action
    assert action["result"]["elected"] == len(moved)
    assert _non_preferred(two, "b") == []
    assert _partition_states(two.zk_a) == a_before  # not one of a's partition states written
    assert two.get(f"/api/v1/clusters/a/actions/{action_id}").status_code == 404
    assert [a["id"] for a in two.get("/api/v1/clusters/b/actions").json()] == [action_id]
    assert two.get("/api/v1/clusters/a/actions").json() == []
    audit = two.get("/api/v1/audit", headers=ADMIN).json()
    assert (audit[0]["action_id"], audit[0]["cluster"]) == (action_id, "b")


def _timed(two: Two, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """A request while b's ZooKeeper is down: answered from a's view (the client's timeout is the limit, not
    a bound of this test: the machine may be loaded)."""
    return two.get(path, headers=headers)


def test_b_zookeeper_down_leaves_a_answering_and_alerting(two: Two) -> None:
    two.b_server.stop()
    try:
        wait_for(
            lambda: not two.get("/api/v1/clusters").json()[1]["reachable"],
            timeout=15,
            message="b reported unreachable",
        )
        for path in ("/api/v1/clusters/a/cluster", "/api/v1/clusters/a/brokers", "/api/v1/clusters/a/alerts"):
            assert _timed(two, path).status_code == 200
        listed = _timed(two, "/api/v1/clusters").json()
        assert [(c["name"], c["reachable"]) for c in listed] == [("a", True), ("b", False)]
        ready = _timed(two, "/readyz", headers={})
        assert ready.status_code == 200  # a is ready
        assert [(c["name"], c["ready"]) for c in ready.json()["clusters"]] == [("a", True), ("b", False)]
        assert "ZooKeeper is unreachable" in ready.json()["clusters"][1]["reason"]
        metrics = _timed(two, "/metrics", headers={}).text
        assert 'kafka_health_snapshot_stale{cluster="b"} 1.0' in metrics
        assert 'kafka_health_snapshot_stale{cluster="a"} 0.0' in metrics
        b_view = _timed(two, "/api/v1/clusters/b/cluster").json()
        assert b_view["snapshot"]["stale"] is True

        # a's incident lane goes on: a broker stopped on a opens its alert meanwhile
        two.a.stop_broker(1)
        try:
            wait_for(lambda: open_alerts(two, "a", 5), timeout=15, message="rule 5 opened on a, b down")
        finally:
            two.a.start_broker(1)
        wait_for(lambda: not open_alerts(two, "a", 5), timeout=30, message="rule 5 resolved on a")
    finally:
        two.b_server.start()
    wait_for(
        lambda: two.get("/api/v1/clusters").json()[1]["reachable"],
        timeout=30,
        message="b reachable again",
    )
    assert two.get("/api/v1/clusters/b/cluster").json()["snapshot"]["stale"] is False
