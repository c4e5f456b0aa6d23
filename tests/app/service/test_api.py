"""The REST API over real HTTP (uvicorn on a free port) on the reference cluster, with the analytics store
filled the way the analytics job fills it (``process_batch``): every read route, auth, and every 4xx path
of the read side."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from analytics.model import BrokerLoad, LoadWindow, Window
from analytics.pipeline import HealthSample, WindowInput, process_batch
from analytics.rules import RuleSettings
from collectors.health import assess
from collectors.samples import health_document
from collectors.zookeeper.collector import scan
from tests.support.reference_cluster import LAG_MS, wait_for
from tests.support.service import OPERATOR, VIEWER, Service
from tests.support.store import open_store

pytestmark = pytest.mark.integration


def fill_store(service: Service, offline_topic: str = "orders") -> str:
    """One window whose health shows 2 offline partitions of ``offline_topic`` and a load window, through
    the analytics pipeline; returns the cluster id."""
    snapshot = scan(service.zk_connect)
    doc = health_document(snapshot, assess(snapshot))
    doc["offline"] = {"count": 2, "by_topic": {offline_topic: 2}, "examples": {offline_topic: [0, 1]}}
    cluster_id = snapshot.cluster_id or "unknown"
    now = time.time()
    doc["snapshot"]["last_good_at"] = now
    window = Window(cluster_id, now - 10, now)
    load = LoadWindow(
        window,
        tuple(BrokerLoad(b, {"partitions": 4.0}, {"partitions": 1 / 3}, 1 / 3, 1 / 3, 0.0) for b in range(3)),
        0.0,
        0.1 / 3,
        0.1,
    )
    with open_store(service.store_url) as store:
        process_batch(
            store,
            "test",
            0,
            [WindowInput(window, load, None, HealthSample("c", now, doc))],
            RuleSettings(open_after=1, resolve_after=1),
        )
    return cluster_id


def test_probes(service: Service) -> None:
    assert service.get("/healthz", headers={}).json() == {"status": "ok"}
    ready = service.get("/readyz", headers={})
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "reason": "ok"}


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ({}, 401, "missing bearer token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, "malformed Authorization header"),
        ({"Authorization": "Bearer not-a-token"}, 401, "unknown or revoked token"),
    ],
)
def test_reads_need_a_valid_token(
    service: Service, headers: dict[str, str], status: int, message: str
) -> None:
    response = service.get("/api/v1/cluster", headers=headers)
    assert response.status_code == status
    assert message in response.json()["detail"]
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_cluster_summary_agrees_with_zookeeper(service: Service) -> None:
    body = service.get("/api/v1/cluster").json()
    assert body["summary"]["brokers"] == 3
    assert body["summary"]["partitions"] == 4
    assert body["summary"]["under_replicated"] == 0
    assert body["controller"]["active"] is True
    assert body["snapshot"]["stale"] is False
    assert body["snapshot"]["scan_reads"] > 0
    wait_for(
        lambda: (service.get("/api/v1/cluster").json()["urp_cross_check"] or {}).get("agrees"),
        message="the URP gauges scraped and agreeing",
    )


def test_brokers_and_a_stopped_one(service: Service) -> None:
    brokers = service.get("/api/v1/brokers").json()
    assert [b["id"] for b in brokers] == [0, 1, 2]
    assert sum(b["replicas"] for b in brokers) == 12
    assert sum(b["controller"] for b in brokers) == 1
    service.cluster.stop_broker(2)
    wait_for(lambda: service.get("/api/v1/brokers/2").json()["registered"] is False, message="broker 2 down")
    assert service.get("/api/v1/cluster").json()["summary"]["brokers_down"] == [2]
    missing = service.get("/api/v1/brokers/9")
    assert missing.status_code == 404
    assert "broker 9" in missing.json()["detail"]


def test_topics_and_partitions_with_filters_and_pages(service: Service) -> None:
    (topic,) = service.get("/api/v1/topics").json()
    assert (topic["name"], topic["partitions"], topic["replication_factor"]) == ("orders", 4, 3)
    detail = service.get("/api/v1/topics/orders").json()
    assert [p["partition"] for p in detail["partition_details"]] == [0, 1, 2, 3]
    assert service.get("/api/v1/topics/nope").status_code == 404

    page = service.get("/api/v1/partitions", limit=3, offset=2).json()
    assert (page["total"], len(page["items"]), page["items"][0]["partition"]) == (4, 2, 2)
    assert service.get("/api/v1/partitions", topic="nope").status_code == 404

    service.cluster.stall_follower(1)
    wait_for(
        lambda: service.get("/api/v1/partitions", under_replicated="true").json()["total"] > 0,
        timeout=LAG_MS / 1000 * 6,
        message="under-replicated partitions",
    )
    urps = service.get("/api/v1/partitions", under_replicated="true", broker=1).json()["items"]
    assert urps
    assert all(1 not in p["isr"] and 1 in p["replicas"] for p in urps)
    healthy = service.get("/api/v1/partitions", under_replicated="false").json()["items"]
    assert all(not p["under_replicated"] for p in healthy)


@pytest.mark.parametrize(
    ("params", "location"),
    [({"limit": 0}, "query.limit"), ({"offset": -1}, "query.offset"), ({"broker": "x"}, "query.broker")],
)
def test_bad_query_parameters_are_422_naming_each(
    service: Service, params: dict[str, Any], location: str
) -> None:
    response = service.get("/api/v1/partitions", **params)
    assert response.status_code == 422
    body = response.json()
    assert [p["location"] for p in body["problems"]] == [location]
    assert body["detail"].startswith("invalid request: ")


def test_load_and_alerts_from_the_store(service: Service) -> None:
    assert service.get("/api/v1/load").json() == {"latest": None, "history": []}
    cluster_id = fill_store(service)
    load = service.get("/api/v1/load", since=0).json()
    assert load["latest"]["cluster"] == cluster_id
    assert [b["broker"] for b in load["latest"]["brokers"]] == [0, 1, 2]
    assert len(load["history"]) == 1

    alerts = service.get("/api/v1/alerts").json()
    (alert,) = [a for a in alerts["items"] if a["rule"] == 1]
    assert (alert["state"], alert["subject"], alert["severity"]) == ("open", "topic:orders", "critical")
    assert alert["suggested_action"]["path"].startswith("/api/v1/partitions")
    assert service.get("/api/v1/alerts", state="resolved").json()["total"] == 0
    assert service.get("/api/v1/alerts", rule=1, severity="critical").json()["total"] == 1
    assert service.get("/api/v1/alerts", state="closed").status_code == 422
    assert service.get("/api/v1/alerts", rule=12).status_code == 422

    detail = service.get(f"/api/v1/alerts/{alert['fingerprint']}").json()
    assert [e["kind"] for e in detail["events"]] == ["opened"]
    assert service.get("/api/v1/alerts/0123456789abcdef").status_code == 404


def test_acknowledging_needs_an_operator_and_an_open_alert(service: Service) -> None:
    fill_store(service)
    (alert,) = service.get("/api/v1/alerts", rule=1).json()["items"]
    path = f"/api/v1/alerts/{alert['fingerprint']}/ack"
    denied = service.post(path, headers=VIEWER)
    assert denied.status_code == 403
    assert "needs operator" in denied.json()["detail"]
    bad_json = service.post(
        path, content=b"{not json", headers=OPERATOR | {"content-type": "application/json"}
    )
    assert bad_json.status_code == 422
    acked = service.post(path, json={"comment": "looking"})
    assert acked.status_code == 200
    assert acked.json()["acknowledged_by"] == "oncall"
    assert service.post("/api/v1/alerts/0123456789abcdef/ack").status_code == 404


def test_openapi_documents_every_route(service: Service) -> None:
    spec = httpx.get(service.url + "/openapi.json").json()
    for path in ("/api/v1/cluster", "/api/v1/partitions", "/api/v1/alerts/{fingerprint}/ack", "/readyz"):
        assert path in spec["paths"]
    assert httpx.get(service.url + "/docs").status_code == 200


def test_metrics_parse_and_follow_the_cluster(service: Service) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    fill_store(service)
    service.cluster.stop_broker(2)
    wait_for(
        lambda: service.get("/api/v1/cluster").json()["summary"]["under_replicated"] > 0,
        timeout=LAG_MS / 1000 * 6,
        message="under-replicated partitions",
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
    done = (("kind", "preferred-replica-election"), ("state", "SUCCEEDED"))
    assert samples[("kafka_health_actions", done)] == 0
    assert samples[("kafka_health_webhook_deliveries", (("state", "dead"),))] == 0
    assert samples[("kafka_health_scan_duration_seconds", ())] > 0
    assert {s.labels["cluster"] for f in families.values() for s in f.samples} == {
        service.get("/api/v1/cluster").json()["cluster_id"]
    }


def test_the_reference_cluster_controls_are_served_to_admins(service: Service) -> None:
    from tests.support.service import ADMIN

    assert service.get("/api/v1/reference", headers=OPERATOR).status_code == 403
    described = service.get("/api/v1/reference", headers=ADMIN).json()
    assert [b["id"] for b in described["brokers"]] == [0, 1, 2]
    stopped = service.post("/api/v1/reference/brokers/1/stop", headers=ADMIN)
    assert stopped.status_code == 200
    wait_for(lambda: service.get("/api/v1/brokers/1").json()["registered"] is False, message="broker 1 down")
    again = service.post("/api/v1/reference/brokers/1/stop", headers=ADMIN)
    assert again.status_code == 409
    assert "stopped" in again.json()["detail"]
    assert service.post("/api/v1/reference/brokers/9/start", headers=ADMIN).status_code == 404
    bad = service.post("/api/v1/reference/load/skew", headers=ADMIN, json={"brokers": {"0": -1}})
    assert bad.status_code == 422
    audit = service.get("/api/v1/audit", headers=ADMIN).json()
    assert audit[0]["action"] == "reference /load/skew"
    assert audit[0]["outcome"] == "refused"
