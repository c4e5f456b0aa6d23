"""The metrics collector against the reference cluster's brokers over real HTTP: every load and health
metric, the URP gauges against ZooKeeper (docs/kafka-reference.md §3), a stopped broker, and load skew.

Brokers come from ZooKeeper (``/brokers/ids``, through a separate kazoo session, as a collector reads
them); the simulated brokers serve ``/metrics`` on ports of their own, so the URLs are the explicit map.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from collectors.kafka import zkdata
from collectors.kafka.model import BrokerRegistration, TopicPartition
from collectors.metrics import DEFAULT_NAME_TABLE, MetricsCollector, MetricsScrape
from collectors.partition_metrics import bytes_in_rates, scrape_partition_metrics
from tests.support.reference_cluster import ClusterFactory, scrape, wait_for, zk_partitions

pytestmark = pytest.mark.integration

CPU = "node_cpu_seconds_total"
RATE_WINDOW_S = 1.0


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
    """A cluster whose data plane has ticked once: before that the host counters have no series."""
    cluster = make_cluster(**overrides)
    wait_for(
        lambda: all(scrape(url).series(CPU) for b in cluster.brokers if (url := cluster.metrics_url(b))),
        message="the first data-plane tick",
    )
    return cluster


def scrape_twice(collector: MetricsCollector, brokers: dict[int, BrokerRegistration]) -> MetricsScrape:
    collector.scrape(brokers)
    time.sleep(RATE_WINDOW_S)
    return collector.scrape(brokers)


def urp_in_zookeeper(zk: KazooClient) -> int:
    return sum(1 for p in zk_partitions(zk).values() if p.under_replicated)


def test_every_metric_is_there_for_every_live_broker_after_two_scrapes(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster)
    brokers = registrations(zk_client)
    partitions = zk_partitions(zk_client).values()
    with collector_for(cluster) as collector:
        first = collector.scrape(brokers)
        assert first.failures == {}
        assert all("cpuUsed" not in s.values for s in first.scrapes.values()), "no rate on a first scrape"
        time.sleep(RATE_WINDOW_S)
        second = collector.scrape(brokers)

    assert sorted(second.scrapes) == [0, 1, 2]
    for b, s in second.scrapes.items():
        missing = set(DEFAULT_NAME_TABLE) - set(s.values)
        assert not missing, f"broker {b} lacks {missing}"
        assert s.values["partitions"] == sum(1 for p in partitions if b in p.replicas)
        assert s.values["leaders"] == sum(1 for p in partitions if p.leader == b)
        assert s.values["cpuUsed"] > 0
        assert 0 <= s.values["ioutil"] <= 1
        assert 0 < s.values["memUsed"] < cluster.settings.traffic.memory_bytes
        assert s.values["fd"] > 0
        assert 0 < s.values["request_handler_idle"] <= 1
        assert s.values["network_processor_idle"] == s.values["request_handler_idle"]
        assert s.values["produce_p99_ms"] >= cluster.settings.traffic.produce_p99_ms, "every broker leads"
    assert second.total("active_controller") == 1
    assert second.total("nwBytesIn") == pytest.approx(
        4 * cluster.settings.traffic.produce_bytes_per_sec, rel=0.5
    ), "4 partitions at the default rate, measured over a short window"


def test_the_urp_sum_equals_zookeepers_count_with_a_stalled_follower(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster)
    brokers = registrations(zk_client)
    stalled = 2
    partitions = zk_partitions(zk_client).values()
    followed = sum(1 for p in partitions if stalled in p.replicas and p.leader != stalled)
    assert followed, "the placement seed should give broker 2 follower replicas"

    with collector_for(cluster) as collector:
        assert collector.scrape(brokers).total("urp") == 0
        cluster.stall_follower(stalled)
        wait_for(
            lambda: urp_in_zookeeper(zk_client) == followed,
            timeout=60,
            message=f"ZooKeeper to show {followed} under-replicated partitions",
        )
        scraped = collector.scrape(brokers)

    assert scraped.failures == {}
    assert scraped.total("urp") == urp_in_zookeeper(zk_client) == followed
    assert scraped.values("urp")[stalled] == 0, "a stalled follower leads nothing under-replicated"


def test_a_stopped_broker_is_a_failure_of_its_own(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster)
    brokers = registrations(zk_client)
    stopped = 1

    cluster.stop_broker(stopped)
    with collector_for(cluster) as collector:
        scraped = collector.scrape(brokers)
        wait_for(lambda: stopped not in registrations(zk_client), message="broker 1's registration to go")
        after = collector.scrape(registrations(zk_client))

    assert scraped.failures == {stopped: "cannot connect: Connection refused"}
    assert scraped.scrapes[stopped].url == cluster.metrics_url(stopped)
    assert all("urp" in scraped.scrapes[b].values for b in (0, 2))
    assert sorted(after.scrapes) == [0, 2]
    assert after.failures == {}


def test_load_skewed_onto_broker_1_shows_in_its_bytes_in_and_cpu(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    # 2 MiB/s per partition: at the default 64 KiB/s the CPU model barely moves
    cluster = start(make_cluster, traffic={"produce_bytes_per_sec": 2 * 1024 * 1024})
    skewed, factor = 1, 4.0
    cluster.skew({"brokers": {str(skewed): factor}})
    leaders = {b: sum(1 for p in zk_partitions(zk_client).values() if p.leader == b) for b in (0, 1, 2)}
    assert all(leaders.values()), f"every broker should lead something: {leaders}"

    with collector_for(cluster) as collector:
        scraped = scrape_twice(collector, registrations(zk_client))

    bytes_in, cpu = scraped.values("nwBytesIn"), scraped.values("cpuUsed")
    share = {b: leaders[b] * (factor if b == skewed else 1.0) for b in (0, 1, 2)}
    for b in (0, 2):
        assert bytes_in[skewed] / bytes_in[b] == pytest.approx(share[skewed] / share[b], rel=0.2)
        assert bytes_in[skewed] > 2 * bytes_in[b], bytes_in
        assert cpu[skewed] > 1.5 * cpu[b], cpu


# --- the targeted read of log sizes and topic counters (collectors/partition_metrics.py) --------------


def log_bytes(cluster: ReferenceCluster) -> dict[int, dict[TopicPartition, float]]:
    """Each live broker's log sizes in bytes, as the simulation holds them (on its loop: one moment)."""
    message_bytes = cluster.settings.traffic.message_bytes

    def read() -> dict[int, dict[TopicPartition, float]]:
        return {
            b: {tp: (lg.leo - lg.log_start) * message_bytes for tp, lg in broker.logs.items()}
            for b, broker in cluster.brokers.items()
            if broker.alive
        }

    return cluster.loop.call(read)


def test_the_targeted_read_gives_each_replicas_log_size_and_a_stopped_broker_fails_alone(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster, topics=[TopicSpec.parse("orders:4:3"), TopicSpec.parse("payments:2:2")])
    brokers = registrations(zk_client)
    hosted = {
        b: {TopicPartition(t, p) for (t, p), z in zk_partitions(zk_client).items() if b in z.replicas}
        for b in brokers
    }

    with collector_for(cluster) as collector:
        before = log_bytes(cluster)
        scraped = scrape_partition_metrics(collector, brokers, topics=["orders", "payments"])
        after = log_bytes(cluster)
        only_orders = scrape_partition_metrics(collector, {0: brokers[0]}, topics=["orders"])
        cluster.stop_broker(2)
        with_one_down = scrape_partition_metrics(collector, brokers)

    assert scraped.failures == {}
    assert scraped.problems == {}
    for b, sizes in scraped.log_sizes().items():
        assert set(sizes) == hosted[b], f"broker {b}: one size per replica it hosts"
        for tp, size in sizes.items():
            assert before[b][tp] <= size <= after[b][tp], f"broker {b} {tp}: the size at the read"
            assert size >= cluster.settings.traffic.initial_log_bytes
    assert {tp.topic for tp in only_orders.log_sizes()[0]} == {"orders"}
    assert with_one_down.failures == {2: "cannot connect: Connection refused"}
    assert sorted(with_one_down.log_sizes()) == [0, 1]


def test_two_targeted_reads_give_each_leaders_produced_bytes_per_topic(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    produce = 256 * 1024
    cluster = start(make_cluster, traffic={"produce_bytes_per_sec": produce})
    cluster.skew({"partitions": {"orders-0": 3}})
    brokers = registrations(zk_client)
    partitions = zk_partitions(zk_client)
    expected = {
        b: sum(
            produce * (3 if (t, p) == ("orders", 0) else 1)
            for (t, p), z in partitions.items()
            if z.leader == b
        )
        for b in brokers
    }

    with collector_for(cluster) as collector:
        first = scrape_partition_metrics(collector, brokers, topics=["orders"])
        time.sleep(RATE_WINDOW_S)
        second = scrape_partition_metrics(collector, brokers, topics=["orders"])

    rates = bytes_in_rates(first, second)
    assert sorted(rates) == sorted(brokers)
    for b, by_topic in rates.items():
        if expected[b]:
            # the reads are sequential: the window between two reads of one broker is not exactly a second
            assert by_topic["orders"] == pytest.approx(expected[b], rel=0.25), (b, rates, expected)
        else:
            assert by_topic.get("orders", 0.0) == 0.0
