"""``/api/v1/brokers/{id}/disks``, ``/api/v1/risks`` and their ``/metrics`` series over real HTTP on the
reference cluster: its log dirs (node_exporter's filesystems per log dir), a fill growing at a set rate
(growth and time to full), the 404 and the empty answer with its note, topics with RF 1 and with
``min.insync.replicas`` = RF as risks. One service for the module (a 60 s disk fit window, so that growth
is known within seconds); the fill test is the only one that changes anything (broker 1's log dir 0)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.control import ControlApi
from app.embedded.reference_cluster.routes import reference_router
from app.embedded.zookeeper import pick_free_port
from app.incidents.config import IncidentSettings
from app.retention.config import RetentionSettings
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ViewSettings
from collectors.metrics import MetricsSettings
from collectors.risks import MIN_ISR_AT_RF, REPLICATION_FACTOR_ONE, RISK_KINDS
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.reference_cluster import small_settings, wait_for
from tests.support.service import ADMIN, TOKENS, VIEWER, Service, run_server
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

TOPICS = [
    TopicSpec(name="orders", partitions=4, replication_factor=3),
    TopicSpec(name="scratch", partitions=2, replication_factor=1),
    TopicSpec(name="payments", partitions=2, replication_factor=2, config={"min.insync.replicas": "2"}),
]
GIB = 1024**3


def serve(cluster: ReferenceCluster, zk_connect: str, metrics: bool) -> Iterator[Service]:
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    settings = ServiceSettings(
        tokens=SecretStr(TOKENS),
        view=ViewSettings(metrics_interval_s=0.3),
        incidents=IncidentSettings(enabled=False),
        retention=RetentionSettings(enabled=False),
    )
    spec = ClusterSpec(
        CollectorSpec(zk_connect),
        metrics=MetricsSettings(urls=urls, disk_fit_window_s=60) if metrics else None,
    )
    app = create_app(ServiceSpec(settings, [spec], extra_routers=[reference_router(ControlApi(cluster))]))
    server, thread = run_server(app, port := pick_free_port())
    try:
        yield Service(f"http://127.0.0.1:{port}", cluster, "", zk_connect)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def disks_service(zookeeper_server: ZooKeeperEndpoint) -> Iterator[Service]:
    with own_chroot(zookeeper_server, "disks") as zk_connect:
        cluster = ReferenceCluster(small_settings(topics=TOPICS), zk_connect)
        cluster.start()
        try:
            yield from serve(cluster, zk_connect, metrics=True)
        finally:
            cluster.stop()
        assert not cluster.errors, cluster.errors


def samples(service: Service, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = httpx.get(service.url + "/metrics").text
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_each_log_dir_of_a_broker_with_its_size_and_fill(disks_service: Service) -> None:
    body = wait_for(
        lambda: (r := disks_service.get("/api/v1/brokers/0/disks").json())["disks"] and r,
        message="broker 0's log dirs",
    )
    assert body["broker"] == 0
    assert body["fit_window_s"] == 60
    assert [d["mountpoint"] for d in body["disks"]] == ["/var/lib/kafka/data-0", "/var/lib/kafka/data-1"]
    for disk in body["disks"]:
        assert disk["size_bytes"] == 100 * GIB
        assert 0 < disk["avail_bytes"] < disk["size_bytes"]
        assert disk["used_ratio"] == pytest.approx(1 - disk["avail_bytes"] / disk["size_bytes"])
        assert set(disk) == {
            "mountpoint",
            "size_bytes",
            "avail_bytes",
            "used_ratio",
            "growth_bytes_per_s",
            "full_in_s",
            "top_topics",
        }
    scoped = disks_service.get(f"/api/v1/clusters/{cluster_key(disks_service)}/brokers/0/disks")
    assert scoped.status_code == 200
    assert [d["mountpoint"] for d in scoped.json()["disks"]] == [d["mountpoint"] for d in body["disks"]]


def cluster_key(service: Service) -> str:
    key: str = httpx.get(service.url + "/api/v1/clusters", headers=VIEWER).json()[0]["key"]
    return key


def test_a_filling_log_dir_shows_its_growth_time_to_full_and_series(disks_service: Service) -> None:
    rate = 20 * 1024**2
    filled = disks_service.post(
        "/api/v1/reference/brokers/1/log-dirs/0/fill",
        json={"used_ratio": 0.9, "bytes_per_s": rate},
        headers=ADMIN,
    )
    assert filled.status_code < 300, filled.text

    def growing() -> dict[str, Any] | None:
        disk: dict[str, Any] = disks_service.get("/api/v1/brokers/1/disks").json()["disks"][0]
        growth = disk["growth_bytes_per_s"]
        settled = growth is not None and abs(growth - rate) < 0.3 * rate  # the fill's step left the fit
        return disk if settled and disk["used_ratio"] >= 0.9 else None

    disk = wait_for(growing, timeout=120, message="broker 1's log dir 0 growing")
    assert disk["mountpoint"] == "/var/lib/kafka/data-0"
    assert disk["growth_bytes_per_s"] == pytest.approx(rate, rel=0.3)
    assert disk["full_in_s"] == pytest.approx(disk["avail_bytes"] / disk["growth_bytes_per_s"])

    labels = (
        ("broker", "1"),
        ("cluster", cluster_key(disks_service)),
        ("mountpoint", "/var/lib/kafka/data-0"),
    )
    used = wait_for(lambda: samples(disks_service, "kafka_health_broker_disk_used_ratio").get(labels))
    assert used >= 0.9
    full = wait_for(lambda: samples(disks_service, "kafka_health_broker_disk_full_in_seconds").get(labels))
    assert 0 < full < 0.1 * 100 * GIB / (rate / 2)
    # a series per log dir known; time to full only while growing (the reference cluster's all grow with
    # their produce traffic), never +Inf
    fulls = samples(disks_service, "kafka_health_broker_disk_full_in_seconds")
    assert set(fulls) <= set(samples(disks_service, "kafka_health_broker_disk_used_ratio"))
    assert all(0 <= v < float("inf") for v in fulls.values())

    def full_soon() -> list[str]:
        risks = disks_service.get("/api/v1/risks").json()["risks"]
        return [r["subject"] for r in risks if r["kind"] == "log_dir_full_soon"]

    assert "broker:1:/var/lib/kafka/data-0" in wait_for(full_soon, message="the log dir among the risks")
    stopped = disks_service.post(
        "/api/v1/reference/brokers/1/log-dirs/0/fill", json={"bytes_per_s": 0}, headers=ADMIN
    )
    assert stopped.status_code < 300, stopped.text


def test_an_unknown_broker_is_a_404_with_the_problem_body(disks_service: Service) -> None:
    response = disks_service.get("/api/v1/brokers/42/disks")
    assert response.status_code == 404
    body = response.json()
    assert body["detail"] == "broker 42 is neither registered nor assigned any replica"
    assert body["problems"] == []
    assert disks_service.get("/api/v1/brokers/0/disks", headers={}).status_code == 401


def test_rf_one_and_min_isr_at_rf_are_risks_with_their_fix(disks_service: Service) -> None:
    body = disks_service.get("/api/v1/risks").json()
    by_kind = {(r["kind"], r["subject"]): r for r in body["risks"]}
    scratch = by_kind[(REPLICATION_FACTOR_ONE, "topic:scratch")]
    assert scratch["partitions"] == 2
    payments = by_kind[(MIN_ISR_AT_RF, "topic:payments")]
    assert payments["partitions"] == 2
    assert "min.insync.replicas 2 (from topic) with replication factor 2" in payments["detail"]
    assert payments["fix"].endswith("--entity-name payments --add-config min.insync.replicas=1")
    assert not any(s == "topic:orders" for _, s in by_kind)
    assert set(body["counts"]) == set(RISK_KINDS)
    assert body["counts"][REPLICATION_FACTOR_ONE] == 1
    scoped = disks_service.get(f"/api/v1/clusters/{cluster_key(disks_service)}/risks").json()
    assert {(r["kind"], r["subject"]) for r in scoped["risks"]} >= set(list(by_kind)[:1])

    series = samples(disks_service, "kafka_health_risks")
    key = cluster_key(disks_service)
    assert series[(("cluster", key), ("kind", REPLICATION_FACTOR_ONE))] == 1
    assert series[(("cluster", key), ("kind", MIN_ISR_AT_RF))] == 1
    assert {dict(labels)["kind"] for labels in series} == set(RISK_KINDS)


def test_without_metrics_no_log_dir_is_known_and_the_note_says_why(
    zookeeper_server: ZooKeeperEndpoint,
) -> None:
    with own_chroot(zookeeper_server, "no-metrics") as zk_connect:
        cluster = ReferenceCluster(small_settings(), zk_connect)
        cluster.start()
        try:
            for service in serve(cluster, zk_connect, metrics=False):
                body = service.get("/api/v1/brokers/2/disks").json()
                assert body["disks"] == []
                assert "not scraped" in body["note"]
                risks = service.get("/api/v1/risks").json()
                assert risks["disks_known"] is False
                assert samples(service, "kafka_health_broker_disk_used_ratio") == {}
        finally:
            cluster.stop()
