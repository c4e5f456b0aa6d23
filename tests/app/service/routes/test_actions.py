"""Runbook actions through the API on the reference cluster: the preferred replica election end to end
(docs/kafka-reference.md §2: a restarted broker's partitions back to their preferred leaders), its dry run,
its refusals, the action state machine, and the audit trail; reassignments: every validation problem named
at once (422), the dry run, a throttled reassignment in batches that completes with its throttles removed,
and the 409 when a reassignment this service did not start is running."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from collectors.kafka import zkdata
from tests.support.reference_cluster import wait_for, zk_partitions
from tests.support.service import ADMIN, OPERATOR, VIEWER, Service

pytestmark = pytest.mark.integration

ELECTION = "/api/v1/actions/preferred-replica-election"
REASSIGN = "/api/v1/actions/reassignments"
FOUR_BROKERS = pytest.mark.parametrize("service", [{"brokers": 4}], indirect=True)


def non_preferred(service: Service) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = service.get("/api/v1/partitions", non_preferred="true").json()["items"]
    return items


def lose_preferred_leadership(service: Service, broker: int = 0) -> list[tuple[str, int]]:
    """Restart ``broker``: its preferred partitions fail over and stay with the others (no auto rebalance)."""
    service.cluster.stop_broker(broker)
    wait_for(lambda: non_preferred(service), message=f"leaders moved off broker {broker}")
    service.cluster.start_broker(broker)
    wait_for(
        lambda: (
            service.get(f"/api/v1/brokers/{broker}").json()["registered"]
            and service.get("/api/v1/cluster").json()["summary"]["under_replicated"] == 0
        ),
        timeout=30,
        message=f"broker {broker} back in every ISR",
    )
    return [(p["topic"], p["partition"]) for p in non_preferred(service)]


def wait_done(service: Service, action_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = service.get(f"/api/v1/actions/{action_id}").json()
        return body if body["state"] not in ("PENDING", "RUNNING") else None

    return wait_for(done, timeout=60, message=f"action {action_id} finished")


def test_an_election_through_the_api_brings_partitions_back_to_their_preferred_leaders(
    service: Service,
) -> None:
    moved = lose_preferred_leadership(service)
    assert moved

    dry = service.post(ELECTION, json={"scope": "all"})
    assert dry.status_code == 200
    plan = dry.json()
    assert plan["dry_run"] is True
    assert sorted((p["topic"], p["partition"]) for p in plan["to_elect"]) == sorted(moved)
    assert {i["reason"] for i in plan["ineligible"]} == {"already leader"}
    assert plan["predicted_leaders"]["0"] > plan["current_leaders"]["0"]
    assert non_preferred(service), "a dry run changes nothing"

    run = service.post(ELECTION, json={"scope": "all", "dry_run": False})
    assert run.status_code == 202
    action = wait_done(service, run.json()["action_id"])
    assert action["state"] == "SUCCEEDED", action
    assert action["result"]["elected"] == len(moved)
    assert (action["progress"]["chunks_written"], action["progress"]["chunks"]) == (1, 1)
    assert non_preferred(service) == []

    audit = service.get("/api/v1/audit", headers=ADMIN).json()
    assert [(a["outcome"], a["dry_run"]) for a in audit[:2]] == [("accepted", False), ("dry-run", True)]
    assert audit[0]["who"] == "oncall"
    assert audit[0]["action_id"] == action["id"]


def test_a_tiny_budget_elects_in_several_chunks(service: Service) -> None:
    moved = lose_preferred_leadership(service)
    run = service.post(
        ELECTION, json={"scope": "topics", "topics": ["orders"], "dry_run": False, "budget_bytes": 1024}
    )
    assert run.status_code == 202
    assert run.json()["chunks"] >= 1
    action = wait_done(service, run.json()["action_id"])
    assert action["state"] == "SUCCEEDED"
    assert action["result"]["elected"] == len(moved)


def test_election_refusals(service: Service, zk_client: KazooClient) -> None:
    viewer = service.post(ELECTION, json={}, headers=VIEWER)
    assert viewer.status_code == 403
    unknown = service.post(ELECTION, json={"scope": "topics", "topics": ["nope", "orders", "nope"]})
    assert unknown.status_code == 422
    messages = " ".join(p["message"] for p in unknown.json()["problems"])
    assert "nope" in messages
    bad_scope = service.post(ELECTION, json={"scope": "everything"})
    assert bad_scope.status_code == 422
    assert bad_scope.json()["problems"][0]["location"] == "body.scope"
    not_json = service.post(ELECTION, content=b"{", headers=OPERATOR | {"content-type": "application/json"})
    assert not_json.status_code == 422

    # an election someone else started and the controller has not taken (no controller: every broker down)
    for broker in sorted(service.cluster.brokers):
        service.cluster.stop_broker(broker)
    zk_client.create(
        zkdata.PREFERRED_REPLICA_ELECTION_PATH,
        b'{"version":1,"partitions":[{"topic":"orders","partition":0}]}',
        makepath=True,
    )
    wait_for(
        lambda: service.get("/api/v1/cluster").json()["pending"]["preferred_election"],
        message="the pending election in the snapshot",
    )
    conflict = service.post(ELECTION, json={"dry_run": False})
    assert conflict.status_code == 409
    assert "did not start" in conflict.json()["detail"]
    audit = service.get("/api/v1/audit", headers=ADMIN).json()
    assert audit[0]["outcome"] == "refused"
    assert service.get("/api/v1/audit", headers=OPERATOR).status_code == 403


def test_actions_and_their_state_machine(service: Service) -> None:
    assert service.get("/api/v1/actions/nope").status_code == 404
    assert service.post("/api/v1/actions/nope/cancel").status_code == 404
    run = service.post(ELECTION, json={"dry_run": False})  # nothing to elect: done at once
    action = wait_done(service, run.json()["action_id"])
    assert action["state"] == "SUCCEEDED"
    assert action["result"]["partitions"] == 0
    again = service.post(f"/api/v1/actions/{action['id']}/cancel")
    assert again.status_code == 409
    assert "cannot become CANCELLED" in again.json()["detail"]
    listed = service.get("/api/v1/actions", state="SUCCEEDED").json()
    assert [a["id"] for a in listed] == [action["id"]]
    assert service.get("/api/v1/actions", state="DONE").status_code == 422
    assert httpx.get(service.url + "/api/v1/actions").status_code == 401


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


NOT_BOOLEANS: tuple[Any, ...] = (0, "no", "false", "0", "off", "f", None)
"""``dry_run`` values pydantic's lax mode took for false (``None``: not a boolean either): each ran the
action for real before booleans were strict (issue 22)."""


def trail(service: Service) -> tuple[Any, Any]:
    """The actions and the audit, as the API lists them."""
    return service.get("/api/v1/actions").json(), service.get("/api/v1/audit", headers=ADMIN).json()


@FOUR_BROKERS
def test_a_dry_run_that_is_not_a_boolean_is_a_422_and_leaves_nothing_behind(
    service: Service, zk_client: KazooClient
) -> None:
    """``"dry_run": 0`` (``"no"``, ``"false"``, ...) to the election and to a reassignment that would both
    change the cluster: a 422 naming ``dry_run``, no action, no audit row, no znode, no leader or replica
    moved."""
    moved = lose_preferred_leadership(service)
    assert moved
    current = replicas_of(service, 0)
    spare = next(b for b in range(4) if b not in current)
    reassignment = {
        "partitions": [{"topic": "orders", "partition": 0, "replicas": moved_off(current, spare)}]
    }
    assert service.post(ELECTION, json={"scope": "all"}).json()["to_elect"]  # dry runs: an audit row each
    assert service.post(REASSIGN, json=reassignment).json()["replicas_added"] == 1
    before = trail(service)

    for route, body in ((ELECTION, {"scope": "all"}), (REASSIGN, reassignment)):
        for value in NOT_BOOLEANS:
            response = service.post(route, json=body | {"dry_run": value})
            assert response.status_code == 422, (route, value, response.text)
            problems = response.json()["problems"]
            assert [p["location"] for p in problems] == ["body.dry_run"], (route, value, problems)
            assert "dry_run" in response.json()["detail"]
    flag = service.post(REASSIGN, json=reassignment | {"allow_replication_factor_change": 1})
    assert flag.status_code == 422, flag.text

    assert trail(service) == before
    assert not zk_client.exists(zkdata.PREFERRED_REPLICA_ELECTION_PATH)
    assert not zk_client.exists(zkdata.REASSIGN_PARTITIONS_PATH)
    assert sorted((p["topic"], p["partition"]) for p in non_preferred(service)) == sorted(moved)
    assert replicas_of(service, 0) == current
