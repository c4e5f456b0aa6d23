"""``/readyz`` over real HTTP: 503 with the reason when ZooKeeper is unreachable (the collector lost its
session) or the snapshot is too old, 200 when it is in sync. The collector is a stand-in behind the
service's own SnapshotCollector interface (the real one is exercised by test_api.py)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import httpx
import pytest
from pydantic import SecretStr

from app.embedded.zookeeper import pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.state import ViewSettings
from collectors.kafka.model import ClusterSnapshot
from collectors.zookeeper.collector import ScanStats
from tests.support import snapshots
from tests.support.service import run_server

pytestmark = pytest.mark.integration


@dataclass
class Collector:
    snapshot: ClusterSnapshot
    in_sync: bool = True
    last_scan: ScanStats | None = None


def test_readyz_says_why_the_service_is_not_ready(tmp_path: object) -> None:
    now = time.time()
    fresh = dataclasses.replace(
        snapshots.cluster(snapshots.partition("orders", 0, (1, 2, 3))), last_good_at=now
    )
    collector = Collector(fresh)
    settings = ServiceSettings(
        tokens=SecretStr("me:viewer:viewer-token-1"), view=ViewSettings(stale_after_s=30)
    )
    app = create_app(settings, zookeeper="127.0.0.1:1", collector_factory=lambda _: collector)
    port = pick_free_port()
    server, thread = run_server(app, port)
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        assert httpx.get(url).json() == {"ready": True, "reason": "ok"}

        collector.in_sync = False
        collector.snapshot = dataclasses.replace(fresh, stale=True, version=2)
        lost = httpx.get(url)
        assert lost.status_code == 503
        assert "ZooKeeper is unreachable" in lost.json()["reason"]

        collector.snapshot = dataclasses.replace(fresh, version=3, last_good_at=now - 120)
        old = httpx.get(url)
        assert old.status_code == 503
        assert "more than 30 s" in old.json()["reason"]
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200, "alive though not ready"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
