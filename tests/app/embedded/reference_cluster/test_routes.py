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
