"""The load and alert routes over real HTTP, with the store filled the way the lanes fill it (a rule-1 alert
as the incident lane writes it, a load window through ``process_batch``: :func:`tests.support.service.
fill_store`): reads, filters, acknowledgement and their 4xx paths."""

from __future__ import annotations

import pytest

from tests.support.service import OPERATOR, VIEWER, Service, fill_store

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
    assert service.get("/api/v1/alerts", rule=14).status_code == 422

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
