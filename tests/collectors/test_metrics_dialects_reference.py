"""Each exporter dialect end to end: the reference cluster's brokers serve ``/metrics`` named as one rule file
names them (``metrics_dialect``), and the metrics collector, left on ``auto``, finds the dialect and reads
UnderReplicatedPartitions (against ZooKeeper's count, with a stalled follower) and the load metrics."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from collectors.kafka import zkdata
from collectors.kafka.model import BrokerRegistration
from collectors.metrics import DIALECT_TABLES, DIALECTS, Dialect, MetricsCollector
from tests.support.reference_cluster import ClusterFactory, scrape, wait_for, zk_partitions

pytestmark = pytest.mark.integration

CPU = "node_cpu_seconds_total"


def registrations(zk: KazooClient) -> dict[int, BrokerRegistration]:
    brokers = {}
    for child in zk.get_children(zkdata.BROKER_IDS_PATH):
        path = zkdata.broker_path(int(child))
        data, stat = zk.get(path)
        brokers[int(child)] = zkdata.decode_broker_registration(path, int(child), data, stat.czxid)
    return brokers


def collector_for(cluster: ReferenceCluster) -> MetricsCollector:
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    return MetricsCollector(urls=urls, timeout_s=2.0)


def start(make_cluster: ClusterFactory, **overrides: Any) -> ReferenceCluster:
    cluster = make_cluster(**overrides)
    wait_for(
        lambda: all(scrape(url).series(CPU) for b in cluster.brokers if (url := cluster.metrics_url(b))),
        message="the first data-plane tick",
    )
    return cluster


@pytest.mark.parametrize("dialect", DIALECTS)
def test_urp_and_the_load_metrics_are_read_from_a_cluster_serving_each_dialect(
    dialect: Dialect, make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster, metrics_dialect=dialect)
    brokers = registrations(zk_client)
    partitions = zk_partitions(zk_client).values()
    stalled = 2
    followed = sum(1 for p in partitions if stalled in p.replicas and p.leader != stalled)
    assert followed, "the placement seed should give broker 2 follower replicas"

    with collector_for(cluster) as collector:
        cluster.stall_follower(stalled)
        wait_for(
            lambda: sum(1 for p in zk_partitions(zk_client).values() if p.under_replicated) == followed,
            timeout=60,
            message=f"ZooKeeper to show {followed} under-replicated partitions",
        )
        collector.scrape(brokers)
        time.sleep(1.0)
        scraped = collector.scrape(brokers)

    assert scraped.failures == {}
    assert scraped.total("urp") == followed
    assert scraped.total("active_controller") == 1
    assert scraped.total("nwBytesIn") == pytest.approx(
        4 * cluster.settings.traffic.produce_bytes_per_sec, rel=0.5
    ), "4 partitions at the default rate, measured over a short window"
    for b, s in scraped.scrapes.items():
        assert s.dialect == dialect
        assert s.problems == ()
        missing = set(DIALECT_TABLES[dialect]) - set(s.values)
        assert not missing, f"broker {b} lacks {missing}"
        assert s.values["partitions"] == sum(1 for p in partitions if b in p.replicas)
        assert s.values["leaders"] == sum(1 for p in partitions if p.leader == b)
        assert s.values["nwBytesOut"] > 0
        assert s.values["cpuUsed"] > 0
        assert 0 < s.values["request_handler_idle"] <= 1
        assert 0 < s.values["network_processor_idle"] <= 1
    if dialect == "bitnami":
        assert all("produce_p99_ms" not in s.values for s in scraped.scrapes.values()), "no percentile rules"


def test_brokers_serving_different_dialects_are_each_read_in_their_own(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster, broker_metrics_dialects={1: "confluent", 2: "bitnami"})

    with collector_for(cluster) as collector:
        brokers = registrations(zk_client)
        collector.scrape(brokers)
        time.sleep(1.0)
        scraped = collector.scrape(brokers)

    assert {b: s.dialect for b, s in scraped.scrapes.items()} == {
        0: "jmx-exporter-example",
        1: "confluent",
        2: "bitnami",
    }
    assert scraped.total("urp") == 0
    assert set(scraped.values("nwBytesIn")) == {0, 1, 2}
    assert scraped.total("active_controller") == 1
