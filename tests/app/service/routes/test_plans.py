"""Rebalance and drain plans through the API on the reference cluster: a drain plan submitted as a
reassignment empties its broker; a balanced cluster's rebalance plan moves nothing and cannot be
submitted."""

from __future__ import annotations

from typing import Any

import pytest

from app.embedded.reference_cluster.config import TopicSpec
from tests.support.reference_cluster import wait_for
from tests.support.service import Service

pytestmark = pytest.mark.integration

FOUR_BROKERS = pytest.mark.parametrize("service", [{"brokers": 4}], indirect=True)


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


@FOUR_BROKERS
def test_plans_and_the_dry_run_say_how_many_bytes_each_move_copies(service: Service) -> None:
    def sized() -> dict[str, Any] | None:
        body: dict[str, Any] = service.post("/api/v1/plans/drain-broker/3").json()
        return body if body["moves"] and body["bytes_to_copy"] is not None else None

    body = wait_for(sized, message="a drain plan with sizes")
    assert body["moves_with_unknown_size"] == 0
    for move in body["moves"]:
        added = len(set(move["new_replicas"]) - set(move["old_replicas"]))
        assert isinstance(move["log_size_bytes"], int)
        assert move["bytes_to_copy"] == move["log_size_bytes"] * added
    assert body["bytes_to_copy"] == sum(m["bytes_to_copy"] for m in body["moves"])
    assert body["bytes_to_copy"] > 0, "the reference cluster's partitions hold data"

    partitions = [
        {"topic": m["topic"], "partition": m["partition"], "replicas": m["new_replicas"]}
        for m in body["moves"]
    ]
    rate = 1024**2
    dry = service.post(
        "/api/v1/actions/reassignments",
        json={"partitions": partitions, "throttle_bytes_per_sec": rate, "max_concurrent_moves": 1},
    ).json()
    assert dry["dry_run"] is True
    assert dry["moves_with_unknown_size"] == 0
    assert dry["bytes_to_copy"] >= body["bytes_to_copy"]  # read again later: logs only grow here
    # one move per batch: the batches' copies one after the other, each at the throttle
    assert dry["estimated_s"] == pytest.approx(dry["bytes_to_copy"] / rate)
    unthrottled = service.post("/api/v1/actions/reassignments", json={"partitions": partitions}).json()
    assert unthrottled["estimated_s"] is None


RACKS_AND_DISKS = {
    "brokers": 4,
    "racks": ["a", "b"],
    "topics": [TopicSpec(name="orders", partitions=8, replication_factor=2)],
}


@pytest.mark.parametrize("service", [RACKS_AND_DISKS], indirect=True)
def test_goals_on_racks_and_a_disk_filled_to_90_percent(service: Service) -> None:
    """Broker 3's log dir at 90 %: a plan with disk_capacity first never places a replica on it, a light
    plan (only_over) moves replicas off it only, and a plan that cannot meet topic_leaders says why."""
    # broker 1 loses its leaderships (stopped, then back without leader rebalancing): they crowd on the
    # others, topic_leaders is unmet
    service.cluster.stop_broker(1)
    wait_for(
        lambda: service.get("/api/v1/brokers/1").json()["leaders"] == 0, message="broker 1 leads nothing"
    )
    service.cluster.start_broker(1)
    wait_for(lambda: service.get("/api/v1/brokers/1").json()["registered"], message="broker 1 back")
    service.cluster.fill_log_dir(3, 0, 0.9, None)

    def plan(**body: Any) -> dict[str, Any]:
        response = service.post("/api/v1/plans/rebalance", json=body)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def seen_full() -> dict[str, Any] | None:
        body = plan(goals=["disk_capacity", "replica_count", "load"], rated_deviation=0.01)
        return body if body["goals"][0]["satisfied"] is False else None

    full = wait_for(seen_full, message="a plan that sees broker 3's disk over 80 %")
    assert all(3 not in m["new_replicas"] or 3 in m["old_replicas"] for m in full["moves"])
    disk = full["goals"][0]
    assert disk["goal"] == "disk_capacity"
    assert disk["hard"] is True
    assert "broker 3" in disk["why_not"]
    assert {g["goal"] for g in full["goals"]} == {"disk_capacity", "replica_count", "load"}

    light = plan(goals=["disk_capacity", "load"], only_over={"disk_used_ratio": 0.85})
    assert light["moves"], "broker 3 holds replicas the disk goal moves off"
    assert all(set(m["old_replicas"]) - set(m["new_replicas"]) == {3} for m in light["moves"])

    leaders = plan(goals=["topic_leaders"], leader_moves=False, only_over={"disk_used_ratio": 0.85})
    report = leaders["goals"][0]
    assert report["satisfied"] is False
    assert "excluded brokers" in report["why_not"]
    assert "still outside: topic orders on broker" in report["why_not"]

    unknown = service.post("/api/v1/plans/rebalance", json={"goals": ["load", "rack_awareness"]})
    assert unknown.status_code == 422
    assert "unknown goal(s) 'rack_awareness'" in unknown.json()["detail"]
