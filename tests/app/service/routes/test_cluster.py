"""The cluster, broker, topic and partition routes over real HTTP on the reference cluster: auth, every read,
and the 4xx paths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from collectors.kafka.model import TopicPartition
from tests.support.reference_cluster import wait_for
from tests.support.service import Service, product_service
from tests.support.zookeeper import ZooKeeperEndpoint

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def unchanged(
    zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """One service on a cluster no test changes, for the tests that only read (those that stop a broker or
    stall a follower have the function-scoped ``service``)."""
    store = tmp_path_factory.mktemp("cluster-routes") / "store.db"
    with product_service(zookeeper_server, store, "cluster-routes") as service:
        yield service


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ({}, 401, "missing bearer token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, "malformed Authorization header"),
        ({"Authorization": "Bearer not-a-token"}, 401, "unknown or revoked token"),
    ],
)
def test_reads_need_a_valid_token(
    unchanged: Service, headers: dict[str, str], status: int, message: str
) -> None:
    response = unchanged.get("/api/v1/cluster", headers=headers)
    assert response.status_code == status
    assert message in response.json()["detail"]
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_cluster_summary_agrees_with_zookeeper(unchanged: Service) -> None:
    body = unchanged.get("/api/v1/cluster").json()
    assert body["summary"]["brokers"] == 3
    assert body["summary"]["partitions"] == 4
    assert body["summary"]["under_replicated"] == 0
    assert body["controller"]["active"] is True
    assert body["snapshot"]["stale"] is False
    assert body["snapshot"]["scan_reads"] > 0
    assert body["effective_settings"] == {
        "static_defaults": {"min_insync_replicas": None, "unclean_leader_election_enable": None},
        "unreadable": [],
        "partitions_with_unknown_min_isr": 0,
        "partitions_with_unknown_unclean_leader_election": 0,
    }
    wait_for(
        lambda: (unchanged.get("/api/v1/cluster").json()["urp_cross_check"] or {}).get("agrees"),
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
    first = detail["partition_details"][0]
    assert (first["min_isr"], first["min_isr_source"], first["min_isr_assumed_from"]) == (
        1,
        "kafka_default",
        None,
    )
    assert (first["unclean_leader_election"], first["unclean_leader_election_source"]) == (
        False,
        "kafka_default",
    )
    assert service.get("/api/v1/topics/nope").status_code == 404

    page = service.get("/api/v1/partitions", limit=3, offset=2).json()
    assert (page["total"], len(page["items"]), page["items"][0]["partition"]) == (4, 2, 2)
    assert service.get("/api/v1/partitions", topic="nope").status_code == 404

    service.cluster.stall_follower(1)
    wait_for(
        lambda: service.get("/api/v1/partitions", under_replicated="true").json()["total"] > 0,
        timeout=60,
        message="under-replicated partitions",
    )
    urps = service.get("/api/v1/partitions", under_replicated="true", broker=1).json()["items"]
    assert urps
    assert all(1 not in p["isr"] and 1 in p["replicas"] for p in urps)
    healthy = service.get("/api/v1/partitions", under_replicated="false").json()["items"]
    assert all(not p["under_replicated"] for p in healthy)


def test_an_unreadable_partition_state_is_unknown_in_the_api_and_metrics(service: Service) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    brokers = service.get("/api/v1/brokers").json()
    assert brokers[0]["listener"] == "PLAINTEXT"
    assert [e["listener"] for e in brokers[0]["endpoints"]] == ["PLAINTEXT"]
    assert brokers[0]["endpoints"][0]["security_protocol"] == "PLAINTEXT"

    service.cluster.corrupt_partition_state(TopicPartition("orders", 2))
    summary = wait_for(
        lambda: (s := service.get("/api/v1/cluster").json()["summary"])["unknown"] == 1 and s,
        message="the corrupted state seen",
    )
    assert (summary["offline"], summary["under_replicated"], summary["under_min_isr"]) == (0, 0, 0)
    errors = service.get("/api/v1/cluster").json()["errors"]
    assert [e["path"] for e in errors] == ["/brokers/topics/orders/partitions/2/state"]
    page = service.get("/api/v1/partitions", state_unknown="true").json()
    assert [(p["partition"], p["state_unknown"], p["offline"]) for p in page["items"]] == [(2, True, False)]
    assert service.get("/api/v1/partitions", offline="true").json()["total"] == 0
    (topic,) = service.get("/api/v1/topics").json()
    assert (topic["unknown"], topic["offline"]) == (1, 0)

    text = httpx.get(service.url + "/metrics").text
    samples = {
        (s.name, s.labels.get("state"), s.labels.get("topic")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("kafka_health_partitions", "unknown", None)] == 1
    assert samples[("kafka_health_partitions", "offline", None)] == 0
    assert samples[("kafka_health_topic_partitions", "unknown", "orders")] == 1
    assert ("kafka_health_topic_partitions", "offline", "orders") not in samples


@pytest.mark.parametrize(
    ("params", "location"),
    [({"limit": 0}, "query.limit"), ({"offset": -1}, "query.offset"), ({"broker": "x"}, "query.broker")],
)
def test_bad_query_parameters_are_422_naming_each(
    unchanged: Service, params: dict[str, Any], location: str
) -> None:
    response = unchanged.get("/api/v1/partitions", **params)
    assert response.status_code == 422
    body = response.json()
    assert [p["location"] for p in body["problems"]] == [location]
    assert body["detail"].startswith("invalid request: ")
