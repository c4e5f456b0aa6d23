"""Runbook actions through the API on the reference cluster: the preferred replica election end to end
(docs/kafka-reference.md §2: a restarted broker's partitions back to their preferred leaders), its dry run,
its refusals, the action state machine, and the audit trail."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from collectors.kafka import zkdata
from tests.support.reference_cluster import wait_for
from tests.support.service import ADMIN, OPERATOR, VIEWER, Service

pytestmark = pytest.mark.integration

ELECTION = "/api/v1/actions/preferred-replica-election"


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
    assert action["progress"] == {"chunks_written": 1, "chunks": 1}
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
