"""``/healthz``, ``/readyz`` and ``/metrics`` over real HTTP: the probes on the reference cluster, ``/readyz``
503 with the reason when ZooKeeper is unreachable (the collector lost its session) or the snapshot is too
old (a stand-in collector behind the service's own SnapshotCollector interface), and ``/metrics`` parsed
and following the cluster."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import httpx
import pytest
from pydantic import SecretStr

from app.embedded.zookeeper import pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ViewSettings
from collectors.kafka.model import ClusterSnapshot, ControllerInfo
from collectors.zookeeper.collector import ScanStats, scan
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support import snapshots
from tests.support.reference_cluster import wait_for
from tests.support.service import Service, fill_store, run_server

pytestmark = pytest.mark.integration


def test_probes(service: Service) -> None:
    assert service.get("/healthz", headers={}).json() == {"status": "ok"}
    ready = service.get("/readyz", headers={})
    assert ready.status_code == 200
    body = ready.json()
    assert (body["ready"], body["reason"]) == (True, "ok")
    [cluster] = body["clusters"]
    assert cluster == {
        "name": None,
        "key": scan(service.zk_connect).cluster_id,
        "ready": True,
        "reason": "ok",
    }


@dataclass
class Collector:
    snapshot: ClusterSnapshot
    in_sync: bool = True
    last_scan: ScanStats | None = None


def test_readyz_says_why_the_service_is_not_ready(tmp_path: object) -> None:
    now = time.time()
    fresh = dataclasses.replace(
        snapshots.cluster(snapshots.partition("orders", 0, (1, 2, 3))), last_good_at=now
    )
    collector = Collector(fresh)
    settings = ServiceSettings(
        tokens=SecretStr("me:viewer:viewer-token-1"), view=ViewSettings(stale_after_s=30)
    )
    app = create_app(ServiceSpec(settings, [ClusterSpec(CollectorSpec("127.0.0.1:1"), collector=collector)]))
    port = pick_free_port()
    server, thread = run_server(app, port)
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        body = httpx.get(url).json()
        assert (body["ready"], body["reason"]) == (True, "ok")
        assert [c["ready"] for c in body["clusters"]] == [True]

        collector.in_sync = False
        collector.snapshot = dataclasses.replace(fresh, stale=True, version=2)
        lost = httpx.get(url)
        assert lost.status_code == 503
        assert "ZooKeeper is unreachable" in lost.json()["reason"]

        collector.snapshot = dataclasses.replace(fresh, version=3, last_good_at=now - 120)
        old = httpx.get(url)
        assert old.status_code == 503
        assert "more than 30 s" in old.json()["reason"]
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200, "alive though not ready"

        collector.in_sync = True
        collector.snapshot = dataclasses.replace(
            snapshots.cluster(brokers=(), cluster_id=None, controller=ControllerInfo(None, None)),
            version=4,
            last_good_at=time.time(),
        )
        empty = httpx.get(url)
        assert empty.status_code == 503
        assert "no Kafka cluster there" in empty.json()["reason"]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_metrics_parse_and_follow_the_cluster(service: Service) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    fill_store(service)
    service.cluster.stop_broker(2)
    # All 4 partitions have a replica on broker 2: those it led go under-replicated at once (the
    # controller's election), the others only after the lag time. Wait for all 4, so that /metrics and
    # the summary below are read from the same settled view.
    wait_for(
        lambda: service.get("/api/v1/cluster").json()["summary"]["under_replicated"] == 4,
        timeout=60,
        message="the 4 partitions under-replicated",
    )
    response = httpx.get(service.url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    samples = {
        (f.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "cluster"))): s.value
        for f in families.values()
        for s in f.samples
    }
    summary = service.get("/api/v1/cluster").json()["summary"]
    assert samples[("kafka_health_brokers_alive", ())] == 2
    assert samples[("kafka_health_broker_down", (("broker", "2"),))] == 1
    assert (
        samples[("kafka_health_partitions", (("state", "under_replicated"),))] == summary["under_replicated"]
    )
    assert (
        samples[("kafka_health_topic_partitions", (("state", "under_replicated"), ("topic", "orders")))] > 0
    )
    assert samples[("kafka_health_alerts_open", (("rule", "1"), ("severity", "critical")))] == 1
    assert ("kafka_health_broker_normalized_load", (("broker", "0"),)) in samples
    assert samples[("kafka_health_snapshot_stale", ())] == 0
    assert (
        samples[
            ("kafka_health_broker_metrics_dialect", (("broker", "0"), ("dialect", "jmx-exporter-example")))
        ]
        == 1
    )
    assert not any(
        k[0] == "kafka_health_broker_metrics_dialect" and ("broker", "2") in k[1] for k in samples
    ), "a stopped broker's failed scrape has no dialect"
    done = (("kind", "preferred-replica-election"), ("state", "SUCCEEDED"))
    assert samples[("kafka_health_actions", done)] == 0
    assert samples[("kafka_health_webhook_deliveries", (("state", "dead"),))] == 0
    assert samples[("kafka_health_scan_duration_seconds", ())] > 0
    assert {s.labels["cluster"] for f in families.values() for s in f.samples} == {
        service.get("/api/v1/cluster").json()["cluster_id"]
    }
