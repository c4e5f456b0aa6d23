"""The reference cluster's simulated ZK→KRaft migration, end to end: the readiness report before it, then
``describe``, the REST API, ``/metrics`` and the alert rules during it (a KRaft controller, not a missing
one), and the KRaft controller doing the controller's work."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from analytics.model import HealthState, Window
from analytics.rules import RuleContext, RuleSettings, evaluate
from app.cli.main import main
from app.embedded.reference_cluster.control import ControlApi
from collectors.health import assess
from collectors.samples import health_document
from collectors.zookeeper.collector import scan
from tests.support.reference_cluster import read_json, wait_for
from tests.support.service import Service

pytestmark = pytest.mark.integration


def describe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["describe", *args])
    captured = capsys.readouterr()
    assert not captured.err, captured.err
    return code, captured.out


def metrics(service: Service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = service.get("/metrics").text
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "cluster"))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(("kafka_health_migration", "kafka_health_controller"))
    }


def test_a_migration_seen_by_describe_the_api_metrics_and_the_rules(
    service: Service, zk_client: KazooClient, capsys: pytest.CaptureFixture[str]
) -> None:
    zk = service.zk_connect
    # Before: ready (the reference brokers register as Kafka 3.6 does, v5 with metadata.version up to 14).
    wait_for(
        lambda: service.get("/api/v1/migration/readiness").json()["ready"],
        message="the service's readiness report to be ready (the gauges scraped)",
    )
    before = service.get("/api/v1/migration/readiness").json()
    assert {c["name"]: c["status"] for c in before["checks"]}["single_active_controller"] == "pass"
    assert before["migration"]["phase"] == "none"
    code, out = describe(capsys, "--zookeeper", zk, "--migration-readiness")
    assert code == 0
    assert out.startswith("ZK→KRaft migration readiness: READY\n")
    assert "UNKNOWN single_active_controller" in out  # describe without --metrics-url-template
    assert metrics(service)[("kafka_health_migration_phase", (("phase", "none"),))] == 1.0

    # The control route starts it (as the fault port and /api/v1/reference serve it).
    status, state = ControlApi(service.cluster).handle(
        "POST", "/migration/start", b'{"kraft_controller_id": 3000}'
    )
    assert status == 200, state
    assert state["migration"]["kraft_controller_id"] == 3000
    again = ControlApi(service.cluster).handle("POST", "/migration/start", b"{}")
    assert again == (409, {"error": "a migration has already started (/migration exists)"})

    controller = read_json(zk_client, "/controller")
    assert controller["brokerid"] == 3000
    assert controller["kraftControllerEpoch"] == 1
    assert (
        zk_client.exists("/controller").ephemeralOwner == 0
    )  # persistent, as the KRaft controller writes it

    body = wait_for(
        lambda: (b := service.get("/api/v1/cluster").json())["migration"]["phase"] == "hybrid" and b,
        message="the API to show the migration",
    )
    assert body["controller"]["broker_id"] == 3000
    assert body["controller"]["kraft"] is True
    assert body["controller"]["active"] is True
    assert body["migration"]["kraft_controller_epoch"] == 1
    assert body["migration"]["metadata_offset"] > 0
    readiness = service.get("/api/v1/migration/readiness").json()
    failed = {c["name"] for c in readiness["checks"] if c["status"] == "fail"}
    assert "migration_not_started" in failed
    assert "controller_healthy" not in failed

    wait_for(
        lambda: metrics(service).get(("kafka_health_controller_kraft", ())) == 1.0,
        message="/metrics to show the KRaft controller",
    )
    series = metrics(service)
    assert series[("kafka_health_migration_phase", (("phase", "hybrid"),))] == 1.0
    assert series[("kafka_health_migration_phase", (("phase", "none"),))] == 0.0
    assert series[("kafka_health_controller_broker_id", ())] == 3000.0
    assert series[("kafka_health_migration_metadata_offset", ())] == body["migration"]["metadata_offset"]

    code, out = describe(capsys, "--zookeeper", zk, "--format", "json", "--fail-on-unhealthy")
    assert code == 0  # the KRaft controller is active: the cluster is healthy
    described: dict[str, Any] = json.loads(out)
    assert described["migration"]["phase"] == "hybrid"
    assert described["controller"]["kraft_controller_epoch"] == 1
    assert described["controller_health"] == {"active": True, "kraft": True}
    code, out = describe(capsys, "--zookeeper", zk)
    assert "controller: KRaft controller 3000" in out
    assert "ZK→KRaft migration: hybrid (KRaft controller 3000 epoch 1" in out
    assert "NOT a registered broker" not in out

    # The rules, on the health document as both lanes build it: no controller finding.
    snapshot = scan(zk)
    now = time.time()
    doc = health_document(snapshot, assess(snapshot), last_good_at=now)
    health = HealthState.from_json(doc, cluster="c", collector_id="t", timestamp=now)
    context = RuleContext(Window("c", now, now), now, health, (), None, RuleSettings())
    evaluation = evaluate(context, "incident")
    assert 4 in evaluation.evaluated
    assert [f for f in evaluation.findings if f.rule == 4] == []
    assert health.controller_is_kraft

    # The KRaft controller acts as the controller: a broker's crash moves its leaderships.
    service.cluster.stop_broker(2)
    wait_for(
        lambda: (
            (s := service.get("/api/v1/cluster").json()["summary"])["brokers_down"] == [2]
            and s["offline"] == 0
        ),
        timeout=15,
        message="the KRaft controller to elect new leaders",
    )
