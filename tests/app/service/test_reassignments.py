"""Reassignments through the API on the reference cluster: every validation problem named at once (422),
the dry run, a throttled reassignment in batches that completes with its throttles removed, and the 409
when a reassignment this service did not start is running."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient

from collectors.kafka import zkdata
from tests.support.reference_cluster import wait_for, zk_partitions
from tests.support.service import Service

pytestmark = pytest.mark.integration

REASSIGN = "/api/v1/actions/reassignments"
FOUR_BROKERS = pytest.mark.parametrize("service", [{"brokers": 4}], indirect=True)


def replicas_of(service: Service, partition: int) -> list[int]:
    body = service.get("/api/v1/topics/orders").json()
    replicas: list[int] = body["partition_details"][partition]["replicas"]
    return replicas


def moved_off(replicas: list[int], spare: int) -> list[int]:
    """The same replicas with the last one replaced by ``spare``."""
    return [*replicas[:-1], spare]


def test_every_validation_problem_is_named_at_once(service: Service) -> None:
    assert service.post(REASSIGN, json={"partitions": []}).status_code == 422
    current = replicas_of(service, 0)
    body = {
        "partitions": [
            {"topic": "orders", "partition": 0, "replicas": [0, 0, 1]},
            {"topic": "orders", "partition": 0, "replicas": current},
            {"topic": "orders", "partition": 99, "replicas": [0, 1, 2]},
            {"topic": "nope", "partition": 0, "replicas": [0, 1, 2]},
            {"topic": "orders", "partition": 1, "replicas": [0, 1, 7]},
            {"topic": "orders", "partition": 2, "replicas": [0, 1]},
        ]
    }
    response = service.post(REASSIGN, json=body)
    assert response.status_code == 422
    codes = {p["code"] for p in response.json()["problems"]}
    messages = " ".join(p["message"] for p in response.json()["problems"])
    assert len(codes) >= 5, codes
    assert "7" in messages
    assert "nope" in messages
    assert "99" in messages
    allowed = service.post(
        REASSIGN,
        json={"partitions": [body["partitions"][5]], "allow_replication_factor_change": True},
    )
    assert allowed.status_code == 200
    assert service.post(REASSIGN, json={"partitions": "x"}).status_code == 422


@FOUR_BROKERS
def test_a_throttled_reassignment_completes_and_removes_its_throttles(
    service: Service, zk_client: KazooClient
) -> None:
    items: list[dict[str, Any]] = []
    for partition in range(4):
        current = replicas_of(service, partition)
        spare = next(b for b in range(4) if b not in current)
        items.append({"topic": "orders", "partition": partition, "replicas": moved_off(current, spare)})
    body = {"partitions": items, "throttle_bytes_per_sec": 10_000_000, "max_concurrent_moves": 2}

    dry = service.post(REASSIGN, json=body).json()
    assert dry["dry_run"] is True
    assert dry["replicas_added"] == 4
    assert [len(batch) for batch in dry["batches"]] == [2, 2]
    assert all("leader.replication.throttled.rate" in c for c in dry["throttle_brokers"].values())

    run = service.post(REASSIGN, json=body | {"dry_run": False})
    assert run.status_code == 202
    action_id = run.json()["action_id"]

    def done() -> dict[str, Any] | None:
        action: dict[str, Any] = service.get(f"/api/v1/actions/{action_id}").json()
        return action if action["state"] not in ("PENDING", "RUNNING") else None

    action = wait_for(done, timeout=90, message="the reassignment done")
    assert action["state"] == "SUCCEEDED", action
    assert action["result"]["completed"] == 4
    assert action["result"]["throttles_removed"] is True
    assert action["progress"]["batches_done"] == 2
    partitions = zk_partitions(zk_client)
    for item in items:
        assert list(partitions[("orders", item["partition"])].replicas) == item["replicas"]
    for broker in range(4):
        path = zkdata.entity_config_path("brokers", str(broker))
        config = zkdata.decode_config(path, zk_client.get(path)[0]) if zk_client.exists(path) else {}
        assert not any("throttled" in key for key in config), config
    topic_path = zkdata.entity_config_path("topics", "orders")
    topic_config = zkdata.decode_config(topic_path, zk_client.get(topic_path)[0])
    assert not any("throttled" in key for key in topic_config), topic_config


@FOUR_BROKERS
def test_a_foreign_reassignment_in_progress_is_a_409(service: Service, zk_client: KazooClient) -> None:
    for broker in sorted(service.cluster.brokers):  # no controller: the znode stays
        service.cluster.stop_broker(broker)
    zk_client.create(
        zkdata.REASSIGN_PARTITIONS_PATH,
        b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[0,1,2]}]}',
        makepath=True,
    )
    wait_for(
        lambda: service.get("/api/v1/cluster").json()["pending"]["reassignments"],
        message="the pending reassignment in the snapshot",
    )
    current = replicas_of(service, 1)
    spare = next(b for b in range(4) if b not in current)
    body = {"partitions": [{"topic": "orders", "partition": 1, "replicas": moved_off(current, spare)}]}
    response = service.post(REASSIGN, json=body | {"dry_run": False})
    assert response.status_code == 409
    assert "did not start" in response.json()["detail"]


@FOUR_BROKERS
def test_a_drain_plan_submitted_as_a_reassignment_empties_the_broker(service: Service) -> None:
    plan = service.post("/api/v1/plans/drain-broker/3")
    assert plan.status_code == 200, plan.text
    body = plan.json()
    assert body["replica_moves"] == service.get("/api/v1/brokers/3").json()["replicas"]
    assert all(3 in m["old_replicas"] and 3 not in m["new_replicas"] for m in body["moves"])
    assert body["load_source"].startswith("replica and leader counts")
    assert service.post("/api/v1/plans/drain-broker/42").status_code == 422
    assert service.post("/api/v1/plans/nope/submit").status_code == 404

    run = service.post(f"/api/v1/plans/{body['id']}/submit", json={"max_concurrent_moves": 1})
    assert run.status_code == 202, run.text

    def done() -> dict[str, Any] | None:
        action: dict[str, Any] = service.get(f"/api/v1/actions/{run.json()['action_id']}").json()
        return action if action["state"] not in ("PENDING", "RUNNING") else None

    action = wait_for(done, timeout=90, message="the drain done")
    assert action["state"] == "SUCCEEDED", (action["result"], action["error"], action["progress"])
    assert service.get("/api/v1/brokers/3").json()["replicas"] == 0


def test_a_rebalance_plan_of_a_balanced_cluster_moves_nothing(service: Service) -> None:
    body = service.post("/api/v1/plans/rebalance", json={"rated_deviation": 0.5}).json()
    assert body["replica_moves"] == 0
    assert body["kafka_generate_moves"] is not None
    assert service.post(f"/api/v1/plans/{body['id']}/submit").status_code == 422
    assert service.post("/api/v1/plans/rebalance", json={"rated_deviation": 0}).status_code == 422
