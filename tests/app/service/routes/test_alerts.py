"""The load and alert routes over real HTTP, with the store filled the way the lanes fill it (a rule-1 alert
as the incident lane writes it, a load window through ``process_batch``: :func:`tests.support.service.
fill_store`): reads, filters, acknowledgement and their 4xx paths."""

from __future__ import annotations

import time

import pytest

from analytics.lifecycle import advance_timed
from analytics.model import Finding, fingerprint
from analytics.rules import Evaluation, RuleSettings
from tests.support.service import OPERATOR, VIEWER, Service, fill_store
from tests.support.store import open_store

pytestmark = pytest.mark.integration


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
    assert alert["lane"] == "incident"
    assert alert["suggested_action"]["path"].startswith("/api/v1/partitions")
    assert service.get("/api/v1/alerts", state="resolved").json()["total"] == 0
    assert service.get("/api/v1/alerts", rule=1, severity="critical").json()["total"] == 1
    assert service.get("/api/v1/alerts", state="closed").status_code == 422
    assert service.get("/api/v1/alerts", rule=20).status_code == 422

    detail = service.get(f"/api/v1/alerts/{alert['fingerprint']}").json()
    assert [e["kind"] for e in detail["events"]] == ["opened"]
    assert detail["causes"] == []  # no broker trouble behind it
    assert service.get("/api/v1/alerts/0123456789abcdef").status_code == 404


def test_an_alert_shows_the_causes_the_lane_linked(service: Service) -> None:
    cluster_id = fill_store(service)
    cause = {
        "rule": 15,
        "subject": "broker:1",
        "fingerprint": fingerprint(cluster_id, 15, "broker:1"),
        "summary": "broker 1 has 1 log dir offline",
    }
    page = Finding(
        3,
        "topic:payments",
        "critical",
        "payments: 1 partition below min.insync.replicas (payments-0): acks=all producers are failing. "
        "1 partition of payments lacks broker 1 in its ISR: broker 1's log dir is offline (rule 15)",
        {"topic": "payments", "causes": [cause, {"rule": 16}]},  # a malformed entry is left out
    )
    now, rules = time.time(), RuleSettings()
    step = advance_timed(cluster_id, now, Evaluation(frozenset({3}), (page,)), {}, rules)
    with open_store(service.store_url) as store:
        store.commit_incidents(
            cluster_id, step.states, step.events, expected={step.states[0].fingerprint: None}
        )
    detail = service.get(f"/api/v1/alerts/{fingerprint(cluster_id, 3, 'topic:payments')}").json()
    assert detail["causes"] == [cause]
    assert detail["summary"].endswith("broker 1's log dir is offline (rule 15)")


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
