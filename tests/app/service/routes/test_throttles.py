"""``/api/v1/throttles`` over real HTTP on the reference cluster: throttles written as Kafka's
``kafka-reassign-partitions`` writes them (the brokers' config changes notified, the simulated brokers
throttling) show in the API and in ``/metrics``; one call removes them, the other config keys survive and
the brokers stop throttling; a throttle an unfinished action holds is skipped unless asked for; viewers
cannot clear; every clear is audited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from app.actions.state import ActionRecord, ActionState
from app.embedded.reference_cluster.replication import Throttles
from app.storage import Storage
from collectors.kafka.admin import read_entity_config, write_entity_config
from collectors.kafka.throttles import (
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
)
from tests.support.reference_cluster import wait_for
from tests.support.service import ADMIN, VIEWER, Service

pytestmark = pytest.mark.integration

THROTTLES = "/api/v1/throttles"
CLEAR = "/api/v1/throttles/clear"
RATE = "1000000"
OTHER_BROKER_KEY = {"log.cleaner.threads": "2"}


def replicas_of(service: Service, partition: int) -> list[int]:
    body = service.get("/api/v1/topics/orders").json()
    replicas: list[int] = body["partition_details"][partition]["replicas"]
    return replicas


def throttle_as_kafkas_tool(service: Service, zk: KazooClient) -> dict[str, str]:
    """What ``kafka-reassign-partitions --throttle`` leaves when nobody runs ``--verify``: both rates on every
    broker, orders' leader list naming each partition's replicas, its follower list a destination. Broker 0
    also has a key of its own. Returns orders' config before the throttle."""
    for broker in sorted(service.cluster.brokers):
        extra = OTHER_BROKER_KEY if broker == 0 else {}
        write_entity_config(
            zk, "brokers", str(broker), {LEADER_THROTTLED_RATE: RATE, FOLLOWER_THROTTLED_RATE: RATE} | extra
        )
    before = read_entity_config(zk, "topics", "orders")
    leader = ",".join(sorted(f"{p}:{b}" for p in range(2) for b in replicas_of(service, p)))
    follower = f"0:{replicas_of(service, 0)[-1]}"
    write_entity_config(
        zk,
        "topics",
        "orders",
        before | {LEADER_THROTTLED_REPLICAS: leader, FOLLOWER_THROTTLED_REPLICAS: follower},
    )
    return before


def metric_samples(service: Service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(service.url + "/metrics").text
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "cluster"))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("kafka_health_replication_throttle")
    }


def counts(service: Service) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["state"], dict(labels)["entity_type"]): value
        for (name, labels), value in metric_samples(service).items()
        if name == "kafka_health_replication_throttles"
    }


def inventory(service: Service) -> dict[str, Any]:
    body: dict[str, Any] = service.get(THROTTLES).json()
    return body


def test_leftover_throttles_are_visible_and_one_call_removes_them(
    service: Service, zk_client: KazooClient, report_note: Callable[[str], None]
) -> None:
    assert inventory(service)["summary"]["leftover"] == 0
    assert service.cluster.configs.throttles == Throttles.none()
    orders_before = throttle_as_kafkas_tool(service, zk_client)
    wait_for(
        lambda: bool(
            service.cluster.configs.throttles.leader_rate
            and service.cluster.configs.throttles.leader_replicas
        ),
        message="the simulated brokers throttling",
    )

    found = wait_for(
        lambda: (body := inventory(service))["summary"]["leftover"] == 4 and body,
        message="the throttles in GET /api/v1/throttles",
    )
    assert found["summary"]["in_use"] == 0
    assert found["summary"]["brokers_throttled"] == [0, 1, 2]
    assert [b["entity"] for b in found["brokers"]] == ["0", "1", "2"]
    assert all(b["state"] == "leftover" and b["leader_rate"] == int(RATE) for b in found["brokers"])
    assert set(found["brokers"][0]["config"]) == {LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE}
    (orders,) = found["topics"]
    assert orders["topic"] == "orders"
    assert orders["limits"] == ["leader", "follower"]
    assert len(orders["leader"]["replicas"]) == 6
    assert orders["problems"] == []
    assert {r["broker"]: r["leader"] for r in found["rates"]} == {0: int(RATE), 1: int(RATE), 2: int(RATE)}

    wait_for(lambda: counts(service)[("leftover", "broker")] == 3, message="/metrics showing the throttles")
    assert counts(service) == {
        ("leftover", "broker"): 3,
        ("leftover", "topic"): 1,
        ("in_use", "broker"): 0,
        ("in_use", "topic"): 0,
    }
    rate_series = (("broker", "1"), ("direction", "follower"))
    assert metric_samples(service)[("kafka_health_replication_throttle_rate_bytes", rate_series)] == int(RATE)

    assert service.post(CLEAR, json={"dry_run": False}, headers=VIEWER).status_code == 403

    dry = service.post(CLEAR, json={})
    assert dry.status_code == 200, dry.text
    assert dry.json()["dry_run"] is True
    assert dry.json()["outcome"] == "dry-run"
    assert [(r["entity_type"], r["entity"]) for r in dry.json()["removed"]] == [
        ("broker", "0"),
        ("broker", "1"),
        ("broker", "2"),
        ("topic", "orders"),
    ]
    assert LEADER_THROTTLED_RATE in read_entity_config(zk_client, "brokers", "1"), "a dry run writes nothing"

    started = time.monotonic()
    cleared = service.post(CLEAR, json={"dry_run": False})
    assert cleared.status_code == 200, cleared.text
    body = cleared.json()
    assert body["outcome"] == "SUCCEEDED"
    assert len(body["removed"]) == 4
    assert body["removed"][3]["keys"][FOLLOWER_THROTTLED_REPLICAS] == f"0:{replicas_of(service, 0)[-1]}"
    assert body["skipped"] == body["failed"] == []
    assert read_entity_config(zk_client, "brokers", "0") == OTHER_BROKER_KEY
    assert read_entity_config(zk_client, "brokers", "2") == {}
    assert read_entity_config(zk_client, "topics", "orders") == orders_before

    wait_for(
        lambda: service.cluster.configs.throttles == Throttles.none(),
        message="the simulated brokers no longer throttling",
    )
    report_note(
        f"throttles: POST /api/v1/throttles/clear -> the simulated brokers unthrottled in "
        f"{(time.monotonic() - started) * 1000:.0f} ms (4 entities)"
    )
    wait_for(lambda: inventory(service)["summary"]["leftover"] == 0, message="the API showing no throttle")
    wait_for(lambda: sum(counts(service).values()) == 0, message="/metrics showing no throttle")
    assert not any(name.endswith("rate_bytes") for name, _ in metric_samples(service))

    audit = service.get("/api/v1/audit", headers=ADMIN).json()
    assert [(a["action"], a["outcome"], a["dry_run"], a["who"]) for a in audit[:2]] == [
        ("clear-throttles", "SUCCEEDED", False, "oncall"),
        ("clear-throttles", "dry-run", True, "oncall"),
    ]
    assert audit[0]["detail"]["removed"][0] == {
        "entity": "broker 0",
        "keys": {LEADER_THROTTLED_RATE: RATE, FOLLOWER_THROTTLED_RATE: RATE},
    }


def test_a_throttle_an_unfinished_action_holds_is_skipped_unless_asked_for(
    service: Service, zk_client: KazooClient
) -> None:
    throttle_as_kafkas_tool(service, zk_client)
    running = ActionRecord(
        "held1",
        "reassignment",
        ActionState.RUNNING,
        "oncall",
        time.time(),
        {"partitions": [], "throttle_bytes_per_sec": int(RATE)},
        plan={"throttles": {"brokers": [1], "topics": ["orders"]}},
    )
    with Storage.open(service.store_url) as storage:
        storage.actions.create(running)

    found = wait_for(
        lambda: (body := inventory(service))["summary"]["in_use"] == 2 and body,
        message="the held throttles in use",
    )
    assert [b["entity"] for b in found["brokers"] if b["used_by"] == ["held1"]] == ["1"]
    assert found["topics"][0]["used_by"] == ["held1"]
    assert counts(service)[("in_use", "broker")] == 1

    cleared = service.post(CLEAR, json={"dry_run": False}).json()
    assert [r["entity"] for r in cleared["removed"]] == ["0", "2"]
    assert [(s["entity"], s["action_ids"]) for s in cleared["skipped"]] == [
        ("1", ["held1"]),
        ("orders", ["held1"]),
    ]
    assert LEADER_THROTTLED_RATE in read_entity_config(zk_client, "brokers", "1")

    forced = service.post(CLEAR, json={"dry_run": False, "include_in_use": True, "topics": ["orders"]}).json()
    assert [r["entity"] for r in forced["removed"]] == ["orders"]
    assert LEADER_THROTTLED_REPLICAS not in read_entity_config(zk_client, "topics", "orders")


def test_bad_clear_requests_are_422_with_the_message(service: Service) -> None:
    refused = service.post(CLEAR, json={"brokers": [-1, "x"], "topics": ["a/b"]})
    assert refused.status_code == 422
    detail = refused.json()["detail"]
    assert "-1" in detail
    assert "'x'" in detail
    assert "'a/b'" in detail
    assert service.post(CLEAR, json={"brokers": [True]}).status_code == 422  # not broker 1
    typo = service.post(CLEAR, json={"dryrun": False})
    assert typo.status_code == 422
    assert typo.json()["problems"][0]["location"] == "body.dryrun"
    assert service.post(CLEAR).json()["dry_run"] is True  # no body: a dry run of everything
    audit = service.get("/api/v1/audit", headers=ADMIN).json()
    assert [a["outcome"] for a in audit if a["action"] == "clear-throttles"] == ["dry-run", "refused"]


def test_a_dry_run_that_is_not_a_boolean_is_a_422_and_removes_nothing(
    service: Service, zk_client: KazooClient
) -> None:
    """``"dry_run": "no"`` removed every throttle before booleans were strict (issue 22): now it, and any
    other value that is not JSON ``true``/``false``, is a 422 naming the field; no audit row, every
    throttle still in place. ``include_in_use`` likewise."""
    orders_before = throttle_as_kafkas_tool(service, zk_client)
    throttled = {
        str(b): read_entity_config(zk_client, "brokers", str(b)) for b in sorted(service.cluster.brokers)
    }
    orders_throttled = read_entity_config(zk_client, "topics", "orders")
    assert orders_throttled != orders_before
    wait_for(lambda: inventory(service)["summary"]["leftover"] == 4, message="the throttles in the API")
    assert service.post(CLEAR, json={}).json()["outcome"] == "dry-run"  # an audit row
    audit = service.get("/api/v1/audit", headers=ADMIN).json()

    bad = [{"dry_run": value} for value in (0, "no", "false", "0", "off", "f", None)]
    bad += [{"dry_run": False, "include_in_use": value} for value in (1, "yes", "true", None)]
    for body in bad:
        response = service.post(CLEAR, json=body)
        assert response.status_code == 422, (body, response.text)
        field = "include_in_use" if "include_in_use" in body else "dry_run"
        assert [p["location"] for p in response.json()["problems"]] == [f"body.{field}"], body

    assert service.get("/api/v1/audit", headers=ADMIN).json() == audit
    for broker, config in throttled.items():
        assert read_entity_config(zk_client, "brokers", broker) == config
    assert read_entity_config(zk_client, "topics", "orders") == orders_throttled
    assert inventory(service)["summary"]["leftover"] == 4
