"""The reference cluster's fault controls served by the service under ``/api/v1/reference`` (handed in by
the test fixture as the demo does): admins only, the control port's statuses, and audited."""

from __future__ import annotations

import pytest

from tests.support.reference_cluster import wait_for
from tests.support.service import OPERATOR, Service

pytestmark = pytest.mark.integration


def test_the_reference_cluster_controls_are_served_to_admins(service: Service) -> None:
    from tests.support.service import ADMIN

    assert service.get("/api/v1/reference", headers=OPERATOR).status_code == 403
    described = service.get("/api/v1/reference", headers=ADMIN).json()
    assert [b["id"] for b in described["brokers"]] == [0, 1, 2]
    stopped = service.post("/api/v1/reference/brokers/1/stop", headers=ADMIN)
    assert stopped.status_code == 200
    wait_for(lambda: service.get("/api/v1/brokers/1").json()["registered"] is False, message="broker 1 down")
    again = service.post("/api/v1/reference/brokers/1/stop", headers=ADMIN)
    assert again.status_code == 409
    assert "stopped" in again.json()["detail"]
    assert service.post("/api/v1/reference/brokers/9/start", headers=ADMIN).status_code == 404
    bad = service.post("/api/v1/reference/load/skew", headers=ADMIN, json={"brokers": {"0": -1}})
    assert bad.status_code == 422
    audit = service.get("/api/v1/audit", headers=ADMIN).json()
    assert audit[0]["action"] == "reference /load/skew"
    assert audit[0]["outcome"] == "refused"


def test_the_fill_and_metrics_controls_are_served_too(service: Service) -> None:
    from tests.support.service import ADMIN

    filled = service.post(
        "/api/v1/reference/brokers/0/log-dirs/1/fill", headers=ADMIN, json={"used_ratio": 0.5}
    )
    assert filled.status_code == 200
    [broker] = [b for b in filled.json()["brokers"] if b["id"] == 0]
    assert broker["log_dirs"][1]["used_ratio"] == pytest.approx(0.5)
    assert broker["log_dirs"][1]["mountpoint"] == "/var/lib/kafka/data-1"
    out_of_range = service.post(
        "/api/v1/reference/brokers/0/log-dirs/1/fill", headers=ADMIN, json={"used_ratio": 2}
    )
    assert out_of_range.status_code == 422
    assert "used_ratio" in out_of_range.json()["detail"]
    idle = "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent"
    overridden = service.post(
        "/api/v1/reference/brokers/2/metrics", headers=ADMIN, json={"set": {idle: 0.05}}
    )
    assert overridden.status_code == 200
    [broker] = [b for b in overridden.json()["brokers"] if b["id"] == 2]
    assert broker["metric_overrides"] == {idle: 0.05}
    unknown = service.post("/api/v1/reference/brokers/2/metrics", headers=ADMIN, json={"set": {"nope": 1}})
    assert unknown.status_code == 422
    assert "nope" in unknown.json()["detail"]
    reset = service.post("/api/v1/reference/brokers/2/metrics", headers=ADMIN, json={"reset": True})
    assert reset.status_code == 200
