"""pytest plugin: ``kafka-health serve`` over real HTTP (uvicorn on a free port) on a reference cluster,
with an analytics store, and tokens for each role; the reference cluster's fault controls are handed to
the service as the demo does. :func:`fill_store` writes an alert the way the incident lane does and a load
window the way the analytics job does.

The fixture's service runs without its incident lane: the route tests write made-up alerts, which a lane
judging the real cluster would resolve under them. The lane has tests of its own (tests/app/incidents)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from analytics.lifecycle import advance_timed
from analytics.model import BrokerLoad, HealthState, LoadWindow, Window
from analytics.pipeline import WindowInput, process_batch
from analytics.rules import RuleContext, RuleSettings, evaluate
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.control import ControlApi
from app.embedded.reference_cluster.routes import reference_router
from app.embedded.zookeeper import pick_free_port
from app.incidents.config import IncidentSettings
from app.retention.config import RetentionSettings
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ViewSettings
from app.storage import open_database
from collectors.health import assess
from collectors.metrics import MetricsSettings
from collectors.samples import health_document
from collectors.zookeeper.collector import scan
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.reference_cluster import ClusterFactory, small_settings, wait_for
from tests.support.store import open_store
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

TOKENS = "grafana:viewer:viewer-token-1,oncall:operator:operator-token-1,root:admin:admin-token-1"
VIEWER = {"Authorization": "Bearer viewer-token-1"}
OPERATOR = {"Authorization": "Bearer operator-token-1"}
ADMIN = {"Authorization": "Bearer admin-token-1"}


@dataclass
class Service:
    url: str
    cluster: ReferenceCluster
    store_url: str
    zk_connect: str

    def get(self, path: str, headers: dict[str, str] | None = None, **params: Any) -> httpx.Response:
        return httpx.get(self.url + path, headers=VIEWER if headers is None else headers, params=params)

    def post(self, path: str, headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, headers=OPERATOR if headers is None else headers, **kwargs)


def run_server(app: Any, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), timeout=60, message="uvicorn started")
    assert server.started, "the service did not start"
    return server, thread


@contextmanager
def serving(
    cluster: ReferenceCluster,
    zk_connect: str,
    store_url: str,
    *,
    reference: bool = True,
    retention: RetentionSettings | None = None,
) -> Iterator[Service]:
    """``create_app`` served by uvicorn on a free port for the ``with`` block, on ``cluster`` and a store
    at ``store_url`` (created here); ``reference``: with the reference cluster's fault controls;
    ``retention``: the store's retention (default: off, so that the made-up rows of the route tests, some
    dated 1970, stay put however long a test runs)."""
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    open_database(store_url).close()
    settings = ServiceSettings(
        tokens=SecretStr(TOKENS),
        view=ViewSettings(metrics_interval_s=0.3),
        incidents=IncidentSettings(enabled=False),
        retention=retention or RetentionSettings(enabled=False),
    )
    app = create_app(
        ServiceSpec(
            settings,
            [ClusterSpec(CollectorSpec(zk_connect), metrics=MetricsSettings(urls=urls))],
            store_url=store_url,
            extra_routers=[reference_router(ControlApi(cluster))] if reference else [],
        )
    )
    port = pick_free_port()
    server, thread = run_server(app, port)
    try:
        yield Service(f"http://127.0.0.1:{port}", cluster, store_url, zk_connect)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def product_service(endpoint: ZooKeeperEndpoint, store: Path, prefix: str) -> Iterator[Service]:
    """The product's routes only (no reference-cluster controls) on a small reference cluster in a chroot
    of its own and a SQLite store at ``store``, for a module-scoped fixture."""
    with own_chroot(endpoint, prefix) as zk_connect:
        cluster = ReferenceCluster(small_settings(), zk_connect)
        cluster.start()
        try:
            with serving(cluster, zk_connect, f"sqlite:///{store}", reference=False) as service:
                yield service
        finally:
            cluster.stop()
        assert not cluster.errors, cluster.errors


@pytest.fixture
def service(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Service]:
    """The service on a reference cluster (``small_settings``; parametrize indirectly with a dict of
    overrides, e.g. ``{"brokers": 4}``)."""
    overrides: dict[str, Any] = getattr(request, "param", {})
    cluster = make_cluster(**overrides)
    with serving(cluster, zk_connect, f"sqlite:///{tmp_path / 'store.db'}") as service:
        yield service


def fill_store(service: Service, offline_topic: str = "orders") -> str:
    """Health that shows 2 offline partitions of ``offline_topic``, through the incident lane's rules,
    lifecycle and writer (rule 1 opens), and a load window through the analytics pipeline; returns the
    cluster id."""
    snapshot = scan(service.zk_connect)
    doc = health_document(snapshot, assess(snapshot))
    doc["offline"] = {"count": 2, "by_topic": {offline_topic: 2}, "examples": {offline_topic: [0, 1]}}
    cluster_id = snapshot.cluster_id or "unknown"
    now = time.time()
    doc["snapshot"]["last_good_at"] = now
    window = Window(cluster_id, now - 10, now)
    load = LoadWindow(
        window,
        tuple(BrokerLoad(b, {"partitions": 4.0}, {"partitions": 1 / 3}, 1 / 3, 1 / 3, 0.0) for b in range(3)),
        0.0,
        0.1 / 3,
        0.1,
    )
    health = HealthState.from_json(doc, cluster=cluster_id, collector_id="c", timestamp=now)
    rules = RuleSettings(open_after=1, resolve_after=1)
    context = RuleContext(Window(cluster_id, now, now), now, health, (), None, rules)
    with open_store(service.store_url) as store:
        step = advance_timed(cluster_id, now, evaluate(context, "incident"), {}, rules)
        store.commit_incidents(
            cluster_id, step.states, step.events, expected=dict.fromkeys(s.fingerprint for s in step.states)
        )
        process_batch(store, "test", 0, [WindowInput(window, load)], rules)
    return cluster_id
