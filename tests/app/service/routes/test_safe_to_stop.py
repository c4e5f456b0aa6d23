"""``/api/v1/brokers/{id}/safe-to-stop``, ``/api/v1/brokers/safe-to-stop`` and the
``kafka_health_broker_safe_to_stop`` gauge over real HTTP on the reference cluster: a healthy cluster, a
``min.insync.replicas=2`` topic with a broker down, the 4xx paths, and 503 on a stale view (a stand-in
collector behind the service's own SnapshotCollector interface, as in test_probes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.zookeeper import pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.schemas.safe_to_stop import (
    BrokerSafetyOut,
    ClusterSafeToStopOut,
    SafeToStopOut,
    UnhealthyPartitionOut,
)
from app.service.spec import ClusterSpec, ServiceSpec
from collectors.kafka.model import ClusterSnapshot
from collectors.safe_to_stop import answer_json, assess_safe_to_stop, cluster_json, safe_to_stop
from collectors.zookeeper.collector import ScanStats
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support import snapshots
from tests.support.reference_cluster import wait_for
from tests.support.service import VIEWER, Service, product_service, run_server
from tests.support.zookeeper import ZooKeeperEndpoint


@pytest.fixture(scope="module")
def healthy(
    zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """One service on a healthy cluster no test changes, for the tests that only read (the one that stops
    a broker has the function-scoped ``service``)."""
    store = tmp_path_factory.mktemp("safe-to-stop") / "store.db"
    with product_service(zookeeper_server, store, "safe-to-stop") as service:
        yield service


def gauges(service: Service) -> dict[str, float]:
    text = httpx.get(service.url + "/metrics").text
    return {
        s.labels["broker"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "kafka_health_broker_safe_to_stop"
        for s in f.samples
    }


@pytest.mark.integration
def test_a_healthy_cluster_is_safe_to_stop_broker_by_broker(healthy: Service) -> None:
    whole = healthy.get("/api/v1/brokers/safe-to-stop")
    assert whole.status_code == 200
    body = whole.json()
    assert body["trusted"] is True
    assert body["safe_to_stop"] == [0, 1, 2]
    assert [b["broker"] for b in body["brokers"]] == [0, 1, 2]
    assert sum(b["leaderships"] for b in body["brokers"]) == 4
    assert body["already_under_replicated"] == []

    one = healthy.get("/api/v1/brokers/1/safe-to-stop").json()
    assert one["safe"] is True
    assert one["reasons"] == []
    assert len(one["leaderships_to_move"]) == body["brokers"][1]["leaderships"]
    assert gauges(healthy) == {"0": 1.0, "1": 1.0, "2": 1.0}


@pytest.mark.integration
def test_min_isr_2_with_a_broker_down(service: Service) -> None:
    service.cluster.create_topic(
        TopicSpec(name="payments", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    )

    def created() -> bool:  # 404 until the service's view has the new topic
        answer = service.get("/api/v1/partitions", topic="payments")
        return answer.status_code == 200 and len(answer.json()["items"]) == 2

    wait_for(created, message="payments created")
    service.cluster.stop_broker(2)

    def unsafe() -> dict[str, Any] | None:
        """The answer once the controller has taken broker 2 out of every ISR (the partitions' states change
        one by one: in between, only some of them are at min ISR)."""
        partitions = service.get("/api/v1/partitions", limit=1000).json()["items"]
        if any(2 in p["isr"] for p in partitions):
            return None
        body = service.get("/api/v1/brokers/safe-to-stop").json()
        return body if body["safe_to_stop"] == [2] else None

    body = wait_for(unsafe, message="brokers 0 and 1 unsafe once 2 is down")
    zero, _, down = body["brokers"]
    assert zero["would_go_under_min_isr"] == [
        {"topic": "payments", "partition": 0},
        {"topic": "payments", "partition": 1},
    ]
    assert zero["would_go_offline"] == []
    assert "2 partitions would go under min ISR: payments-0, payments-1" in zero["reasons"][0]
    assert down["registered"] is False
    assert {(u["topic"], tuple(u["out_of_isr"])) for u in body["already_under_replicated"]} == {
        ("orders", (2,)),
        ("payments", (2,)),
    }
    detail = service.get("/api/v1/brokers/0/safe-to-stop").json()
    assert detail["safe"] is False
    assert detail["would_go_under_min_isr"] == zero["would_go_under_min_isr"]
    assert any("already unhealthy" in n for n in detail["notes"])
    assert gauges(service) == {"0": 0.0, "1": 0.0, "2": 1.0}


@pytest.mark.integration
def test_unknown_and_malformed_ids_and_tokens(healthy: Service) -> None:
    unknown = healthy.get("/api/v1/brokers/9/safe-to-stop")
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == (
        "broker 9 is neither registered nor assigned any replica (known brokers: 0, 1, 2)"
    )
    malformed = healthy.get("/api/v1/brokers/x/safe-to-stop")
    assert malformed.status_code == 422
    assert [p["location"] for p in malformed.json()["problems"]] == ["path.broker_id"]
    assert healthy.get("/api/v1/brokers/safe-to-stop", headers={}).status_code == 401
    assert healthy.get("/api/v1/brokers/0/safe-to-stop", headers={}).status_code == 401
    assert healthy.get("/api/v1/brokers/0").status_code == 200  # the broker route still answers


@dataclass
class Collector:
    snapshot: ClusterSnapshot
    in_sync: bool = True
    last_scan: ScanStats | None = None


@pytest.mark.integration
def test_a_stale_view_answers_503_with_the_reason() -> None:
    fresh = snapshots.cluster(snapshots.partition("orders", 0, (1, 2, 3)))
    collector = Collector(fresh)
    settings = ServiceSettings(tokens=SecretStr("me:viewer:viewer-token-1"))
    app = create_app(ServiceSpec(settings, [ClusterSpec(CollectorSpec("127.0.0.1:1"), collector=collector)]))
    port = pick_free_port()
    server, thread = run_server(app, port)
    url = f"http://127.0.0.1:{port}/api/v1/brokers"
    try:
        assert httpx.get(f"{url}/2/safe-to-stop", headers=VIEWER).json()["safe"] is True

        collector.in_sync = False
        collector.snapshot = dataclasses.replace(fresh, stale=True, version=2)
        for path in ("/2/safe-to-stop", "/9/safe-to-stop", "/safe-to-stop"):
            response = httpx.get(url + path, headers=VIEWER)
            assert response.status_code == 503, path
            assert response.json()["detail"].startswith("the view of the cluster is stale")
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert 'kafka_health_broker_safe_to_stop{broker="2",cluster="c"} 0.0' in metrics
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.mark.unit
def test_the_documented_schemas_are_the_bodies_served() -> None:
    """The routes serve :mod:`collectors.safe_to_stop`'s JSON as it is (no re-validation of long lists):
    the OpenAPI models must name exactly its fields, and accept it."""
    snapshot = snapshots.cluster(
        snapshots.partition("t", 0, [1, 2, 3], isr=[1, 2]), snapshots.partition("one", 0, [2])
    )
    whole = cluster_json(assess_safe_to_stop(snapshot))
    one = answer_json(safe_to_stop(snapshot, 2))
    assert set(one) == set(SafeToStopOut.model_fields)
    assert set(whole) == set(ClusterSafeToStopOut.model_fields)
    assert {frozenset(b) for b in whole["brokers"]} == {frozenset(BrokerSafetyOut.model_fields)}
    assert set(one["already_under_replicated"][0]) == set(UnhealthyPartitionOut.model_fields)
    assert SafeToStopOut.model_validate(one).model_dump() == one
    assert ClusterSafeToStopOut.model_validate(whole).model_dump() == whole
