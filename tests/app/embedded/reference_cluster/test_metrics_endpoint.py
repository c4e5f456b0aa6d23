"""Each simulated broker's ``/metrics`` over real HTTP: jmx_exporter's Kafka names (docs/kafka-reference.md
§5), node_exporter's host names, and values that agree with what ZooKeeper shows (§3).

Every scrape goes through httpx and prometheus_client's parser; every cross-check reads ZooKeeper through
a separate kazoo session (``zk_client``), as a collector would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from tests.support.reference_cluster import (
    LAG_MS,
    ClusterFactory,
    Scrape,
    ZkPartition,
    controller_id,
    live_broker_ids,
    scrape,
    small_settings,
    wait_for,
    zk_partitions,
)
from tests.support.zookeeper import ZkClientFactory, ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

TOPICS = [
    TopicSpec(name="orders", partitions=4, replication_factor=3),
    TopicSpec(name="payments", partitions=3, replication_factor=2),
]
REPLICAS_TOTAL = 4 * 3 + 3 * 2
PARTITIONS_TOTAL = 4 + 3

URP = "kafka_server_replicamanager_underreplicatedpartitions"
PARTITION_COUNT = "kafka_server_replicamanager_partitioncount"
LEADER_COUNT = "kafka_server_replicamanager_leadercount"
ACTIVE_CONTROLLER = "kafka_controller_kafkacontroller_activecontrollercount"
ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
ISR_EXPANDS = "kafka_server_replicamanager_isrexpands_total"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
REQUESTS = "kafka_network_requestmetrics_requests_total"
CPU = "node_cpu_seconds_total"

KAFKA_GAUGES = (
    URP,
    PARTITION_COUNT,
    LEADER_COUNT,
    "kafka_server_replicamanager_underminisrpartitioncount",
    "kafka_server_replicamanager_atminisrpartitioncount",
    "kafka_server_replicamanager_offlinereplicacount",
    ACTIVE_CONTROLLER,
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
)
CONTROLLER_GAUGES = tuple(name for name in KAFKA_GAUGES if name.startswith("kafka_controller_"))
KAFKA_COUNTERS = (
    ISR_SHRINKS,
    ISR_EXPANDS,
    "kafka_controller_controllerstats_uncleanleaderelections_total",
    BYTES_IN,
    BYTES_OUT,
    MESSAGES_IN,
)
TOPIC_COUNTERS = (BYTES_IN, BYTES_OUT, MESSAGES_IN)
HOST_GAUGES = ("node_memory_MemAvailable_bytes", "process_open_fds")
HOST_DEVICE_COUNTERS = (
    "node_disk_read_bytes_total",
    "node_disk_written_bytes_total",
    "node_disk_io_time_seconds_total",
    "node_network_receive_bytes_total",
    "node_network_transmit_bytes_total",
)


def start(make_cluster: ClusterFactory, **overrides: Any) -> ReferenceCluster:
    """The cluster, once its data plane has ticked: before the first tick a broker's host counters have
    no series at all (its CPU family is empty), so "before" scrapes would have nothing to compare."""
    cluster = make_cluster(topics=TOPICS, **overrides)
    await_first_tick(cluster)
    return cluster


def await_first_tick(cluster: ReferenceCluster) -> None:
    wait_for(
        lambda: all(scrape(url_of(cluster, b)).series(CPU) for b in cluster.brokers),
        message="the first data-plane tick",
    )


@pytest.fixture(scope="module")
def healthy_cluster(zookeeper_server: ZooKeeperEndpoint) -> Iterator[tuple[ReferenceCluster, str]]:
    """One healthy cluster (``TOPICS``, ticked once) and its connect string, in a chroot of its own, for
    the tests that only scrape and read ZooKeeper; the tests that stop, stall or skew start their own."""
    with own_chroot(zookeeper_server, "metrics-endpoint") as zk_connect:
        cluster = ReferenceCluster(small_settings(topics=TOPICS), zk_connect)
        cluster.start()
        try:
            await_first_tick(cluster)
            yield cluster, zk_connect
        finally:
            cluster.stop()
        assert not cluster.errors, cluster.errors


@pytest.fixture
def healthy(healthy_cluster: tuple[ReferenceCluster, str]) -> ReferenceCluster:
    return healthy_cluster[0]


@pytest.fixture
def healthy_zk(healthy_cluster: tuple[ReferenceCluster, str], make_zk_client: ZkClientFactory) -> KazooClient:
    """A kazoo client on the shared cluster's chroot."""
    return make_zk_client(hosts=healthy_cluster[1])


def url_of(cluster: ReferenceCluster, broker_id: int) -> str:
    url = cluster.metrics_url(broker_id)
    assert url is not None, f"broker {broker_id} has no metrics URL"
    return url


def scrape_brokers(cluster: ReferenceCluster, broker_ids: list[int]) -> dict[int, Scrape]:
    return {b: scrape(url_of(cluster, b)) for b in broker_ids}


def urp_from_zookeeper(zk: KazooClient) -> set[tuple[str, int]]:
    return {key for key, p in zk_partitions(zk).items() if p.under_replicated}


def urp_from_metrics(cluster: ReferenceCluster, zk: KazooClient) -> int:
    """The cluster-wide URP as a collector computes it: the gauge summed over the live brokers."""
    return int(sum(s.value(URP) for s in scrape_brokers(cluster, live_broker_ids(zk)).values()))


def counter_total(scrapes: dict[int, Scrape], name: str) -> float:
    return sum(s.value(name) for s in scrapes.values())


def busy_cpu_seconds(s: Scrape) -> float:
    return sum(x.value for x in s.series(CPU) if x.labels["mode"] not in {"idle", "iowait"})


def assert_urp_agrees(cluster: ReferenceCluster, zk: KazooClient, expected: set[tuple[str, int]]) -> None:
    """Wait until ZooKeeper shows exactly ``expected`` as under-replicated, then require the brokers'
    gauges to agree, on two scrapes (the state is settled: no ISR change is left to happen)."""
    wait_for(
        lambda: urp_from_zookeeper(zk) == expected,
        timeout=60,
        message=f"ZooKeeper to show exactly {sorted(expected)} under-replicated",
    )
    for _ in range(2):
        zk_urp = urp_from_zookeeper(zk)
        assert zk_urp == expected
        assert urp_from_metrics(cluster, zk) == len(zk_urp)


# --- names and shapes ---------------------------------------------------------------------------------


def test_every_broker_serves_kafka_and_host_metrics_under_exporter_names(
    healthy: ReferenceCluster, healthy_zk: KazooClient
) -> None:
    cluster = healthy
    partitions = zk_partitions(healthy_zk)
    cores = cluster.settings.traffic.cpu_cores

    def led_topics(b: int) -> set[str]:
        return {p.topic for p in partitions.values() if p.leader == b}

    def every_leader_shows_its_topics() -> dict[int, Scrape] | None:
        """Topic-labelled series appear with a broker's first produce to a partition it leads."""
        scrapes = scrape_brokers(cluster, [0, 1, 2])
        shown = {b: {x.labels.get("topic") for x in s.series(BYTES_IN)} - {None} for b, s in scrapes.items()}
        return scrapes if all(shown[b] == led_topics(b) for b in scrapes) else None

    scrapes = wait_for(every_leader_shows_its_topics, message="each broker's bytesin series by led topic")
    for b, s in scrapes.items():
        assert s.content_type.startswith("text/plain; version=0.0.4"), s.content_type
        for name in KAFKA_GAUGES + HOST_GAUGES:
            assert s.types.get(name) == "gauge", f"broker {b}: {name} missing or not a gauge"
            assert s.unlabelled(name) >= 0
        for name in KAFKA_COUNTERS + HOST_DEVICE_COUNTERS + (REQUESTS, CPU):
            assert s.types.get(name.removesuffix("_total")) == "counter", f"broker {b}: {name} not a counter"
            assert s.series(name), f"broker {b}: no series of {name}"
        for name in TOPIC_COUNTERS:
            by_topic = {x.labels["topic"]: x.value for x in s.series(name) if "topic" in x.labels}
            assert set(by_topic) == led_topics(b), f"broker {b}: {name} topics"
            # jmx_exporter's topic-less bean is the broker-wide total of the per-topic ones
            assert s.unlabelled(name) == pytest.approx(sum(by_topic.values()))
        requests = {x.labels["request"] for x in s.series(REQUESTS)}
        if led_topics(b):
            assert {"Produce", "FetchConsumer"} <= requests, f"broker {b}: {requests}"
        if any(b in p.replicas and p.leader != b for p in partitions.values()):
            assert "FetchFollower" in requests, f"broker {b}: {requests}"
        cpu = s.series(CPU)
        assert all(set(x.labels) == {"cpu", "mode"} for x in cpu)
        assert {x.labels["cpu"] for x in cpu} == {str(i) for i in range(cores)}
        assert {x.labels["mode"] for x in cpu} >= {"idle", "user", "system", "iowait"}
        for name in HOST_DEVICE_COUNTERS:
            assert all(set(x.labels) == {"device"} for x in s.series(name)), name
        assert 0 < s.unlabelled("node_memory_MemAvailable_bytes") <= cluster.settings.traffic.memory_bytes
        assert s.unlabelled("process_open_fds") > 0


def test_exactly_one_broker_reports_the_active_controller_also_after_a_failover(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster)

    def active_controllers() -> dict[int, float]:
        return {
            b: s.unlabelled(ACTIVE_CONTROLLER)
            for b, s in scrape_brokers(cluster, live_broker_ids(zk_client)).items()
        }

    first = controller_id(zk_client)
    counts = active_controllers()
    assert sum(counts.values()) == 1
    assert counts == {b: float(b == first) for b in (0, 1, 2)}
    for b, s in scrape_brokers(cluster, [0, 1, 2]).items():
        if b != first:
            assert all(s.unlabelled(name) == 0 for name in CONTROLLER_GAUGES), f"broker {b}"

    assert cluster.stop_controller() == first
    second = wait_for(
        lambda: (c := controller_id(zk_client)) is not None and c != first and c,
        message="a new /controller",
    )
    counts = wait_for(
        lambda: c if (c := active_controllers()).get(second) == 1 else None,
        message=f"broker {second} to report itself active controller",
    )
    assert set(counts) == {0, 1, 2} - {first}
    assert sum(counts.values()) == 1


def test_counters_only_increase_between_two_scrapes(
    healthy: ReferenceCluster, healthy_zk: KazooClient
) -> None:
    cluster = healthy
    partitions = zk_partitions(healthy_zk)
    before = scrape_brokers(cluster, [0, 1, 2])

    def rising(b: int) -> list[str]:
        names = [CPU, REQUESTS, *HOST_DEVICE_COUNTERS]
        if any(p.leader == b for p in partitions.values()):
            names += [BYTES_IN, BYTES_OUT, MESSAGES_IN]
        if any(b in p.replicas and p.leader != b for p in partitions.values()):
            names.append("kafka_server_brokertopicmetrics_replicationbytesin_total")
        return names

    def all_rose() -> dict[int, Scrape] | None:
        after = scrape_brokers(cluster, [0, 1, 2])
        rose = all(after[b].value(n) > before[b].value(n) for b in after for n in rising(b))
        return after if rose else None

    after = wait_for(all_rose, message="every broker's traffic and host counters to rise")
    for b in (0, 1, 2):
        for name, family_type in before[b].types.items():
            if family_type != "counter":
                continue
            old = {tuple(sorted(x.labels.items())): x.value for x in before[b].series(f"{name}_total")}
            new = {tuple(sorted(x.labels.items())): x.value for x in after[b].series(f"{name}_total")}
            assert set(old) <= set(new), f"broker {b}: series of {name} disappeared"
            for labels, value in old.items():
                assert new[labels] >= value, f"broker {b}: {name}{dict(labels)} went down"


def test_partition_and_leader_counts_match_zookeeper(
    healthy: ReferenceCluster, healthy_zk: KazooClient
) -> None:
    cluster = healthy
    partitions = zk_partitions(healthy_zk).values()
    scrapes = scrape_brokers(cluster, [0, 1, 2])

    assert sum(s.unlabelled(PARTITION_COUNT) for s in scrapes.values()) == REPLICAS_TOTAL
    assert sum(s.unlabelled(LEADER_COUNT) for s in scrapes.values()) == PARTITIONS_TOTAL
    for b, s in scrapes.items():
        assert s.unlabelled(PARTITION_COUNT) == sum(1 for p in partitions if b in p.replicas)
        assert s.unlabelled(LEADER_COUNT) == sum(1 for p in partitions if p.leader == b)


# --- URP: the gauges against ZooKeeper ----------------------------------------------------------------


def test_urp_is_zero_on_a_healthy_cluster(healthy: ReferenceCluster, healthy_zk: KazooClient) -> None:
    cluster = healthy
    assert_urp_agrees(cluster, healthy_zk, expected=set())
    assert all(p.isr and set(p.isr) == set(p.replicas) for p in zk_partitions(healthy_zk).values())


def test_urp_with_a_stalled_follower_matches_zookeeper_and_clears_on_resume(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster)
    stalled = 2
    followed = {
        k for k, p in zk_partitions(zk_client).items() if stalled in p.replicas and p.leader != stalled
    }
    assert followed, "the placement seed should give broker 2 follower replicas"
    before = scrape_brokers(cluster, [0, 1, 2])

    stalled_at = time.monotonic()
    cluster.stall_follower(stalled)
    first_shrink = wait_for(
        lambda: time.monotonic() if urp_from_zookeeper(zk_client) else None,
        timeout=60,
        message="a first ISR shrink",
    )
    tick_s = cluster.settings.tick_ms / 1000
    assert first_shrink - stalled_at >= LAG_MS / 1000 - 2 * tick_s, "ISR shrank before the lag time"
    assert_urp_agrees(cluster, zk_client, expected=followed)
    in_zk = zk_partitions(zk_client)
    assert all(stalled not in in_zk[k].isr for k in followed)
    shrunk = scrape_brokers(cluster, [0, 1, 2])
    assert counter_total(shrunk, ISR_SHRINKS) - counter_total(before, ISR_SHRINKS) == len(followed)

    cluster.resume_follower(stalled)
    assert_urp_agrees(cluster, zk_client, expected=set())
    resumed = scrape_brokers(cluster, [0, 1, 2])
    assert counter_total(resumed, ISR_EXPANDS) - counter_total(shrunk, ISR_EXPANDS) == len(followed)


def test_urp_after_a_broker_crash_is_counted_by_the_live_leaders(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = start(make_cluster)
    crashed = 2
    hosted = {k for k, p in zk_partitions(zk_client).items() if crashed in p.replicas}
    partition_count_before = scrape(url_of(cluster, crashed)).unlabelled(PARTITION_COUNT)

    cluster.stop_broker(crashed)
    wait_for(lambda: live_broker_ids(zk_client) == [0, 1], message="broker 2's registration to go")
    assert_urp_agrees(cluster, zk_client, expected=hosted)

    def led_by_the_living(p: ZkPartition) -> bool:
        return p.leader is not None and p.leader in {0, 1} and p.leader in p.isr

    assert all(led_by_the_living(p) for p in zk_partitions(zk_client).values()), "a partition lost its leader"
    # docs/kafka-reference.md §3: the offline broker's partition count equals the others' URP sum
    assert urp_from_metrics(cluster, zk_client) == partition_count_before == len(hosted)
    controller = controller_id(zk_client)
    assert controller is not None
    offline = scrape(url_of(cluster, controller)).unlabelled(
        "kafka_controller_kafkacontroller_offlinepartitionscount"
    )
    assert offline == 0


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the exceptions it was raised from (httpx wraps the socket's error)."""
    cause: BaseException | None = error
    while cause is not None:
        yield cause
        cause = cause.__cause__ or cause.__context__


# --- the endpoint's lifecycle ----------------------------------------------------------------------------


def test_a_stopped_broker_refuses_scrapes_and_comes_back_on_the_same_port(
    make_cluster: ClusterFactory,
) -> None:
    cluster = start(make_cluster)
    url = url_of(cluster, 1)
    assert scrape(url).unlabelled("kafka_server_kafkaserver_brokerstate") == 3
    with pytest.raises(httpx.HTTPStatusError) as not_found:
        scrape(url.replace("/metrics", "/other"))
    assert not_found.value.response.status_code == 404

    cluster.stop_broker(1)
    assert cluster.metrics_url(1) == url
    with pytest.raises(httpx.ConnectError) as refused:
        scrape(url)
    assert any(isinstance(e, ConnectionRefusedError) for e in causes(refused.value)), refused.value
    assert all(scrape(url_of(cluster, b)).unlabelled(URP) >= 0 for b in (0, 2))

    cluster.start_broker(1)
    assert cluster.metrics_url(1) == url
    assert scrape(url).unlabelled("kafka_server_kafkaserver_brokerstate") == 3


# --- load skew ----------------------------------------------------------------------------------------


def test_skewing_load_onto_one_broker_raises_its_bytes_in_and_cpu_rates(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    # 2 MiB/s per partition: at the default 64 KiB/s the CPU model barely moves (150 MiB/s per core)
    produce = 2 * 1024 * 1024
    cluster = start(make_cluster, traffic={"produce_bytes_per_sec": produce})
    skewed, factor = 1, 4.0
    answer = cluster.skew({"brokers": {str(skewed): factor}})
    assert answer["skew"]["brokers"] == {str(skewed): factor}
    leaders = {b: sum(1 for p in zk_partitions(zk_client).values() if p.leader == b) for b in (0, 1, 2)}
    assert all(leaders.values()), f"every broker should lead something: {leaders}"

    before = scrape_brokers(cluster, [0, 1, 2])
    time.sleep(2.0)  # the measurement window: rates need elapsed time
    after = scrape_brokers(cluster, [0, 1, 2])

    bytes_in = {b: after[b].unlabelled(BYTES_IN) - before[b].unlabelled(BYTES_IN) for b in (0, 1, 2)}
    busy = {b: busy_cpu_seconds(after[b]) - busy_cpu_seconds(before[b]) for b in (0, 1, 2)}
    expected_share = {b: leaders[b] * (factor if b == skewed else 1.0) for b in (0, 1, 2)}
    for b in (0, 2):
        # all brokers advance on the same ticks, so their ratio does not depend on the loop's pace; the
        # tolerance covers a tick falling between the (sequential) scrapes of two brokers
        assert bytes_in[skewed] / bytes_in[b] == pytest.approx(
            expected_share[skewed] / expected_share[b], rel=0.15
        )
        assert bytes_in[skewed] > 2 * bytes_in[b], bytes_in
        assert busy[skewed] > 1.5 * busy[b], busy


# --- request load: idle ratios and produce latency ---------------------------------------------------

HANDLER_IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent"
NETWORK_IDLE = "kafka_network_socketserver_networkprocessoravgidlepercent"
TOTAL_TIME = "kafka_network_requestmetrics_totaltimems"


Signals = dict[int, tuple[float, float, float]]
"""Broker -> (request-handler idle, network-processor idle, Produce p99 in ms)."""


def request_signals(s: Scrape) -> tuple[float, float, float]:
    """(request-handler idle, network-processor idle, Produce p99 in ms) from one scrape."""
    return s.unlabelled(HANDLER_IDLE), s.unlabelled(NETWORK_IDLE), s.value(TOTAL_TIME, quantile="0.99")


def test_idle_ratios_fall_and_produce_latency_rises_with_a_skew_and_come_back_after_it(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    """1 MiB/s per partition against 128 MiB/s of capacity keeps every broker mostly idle (a led partition
    of orders costs 5 MiB/s: produce in, two consumers, two followers; 17 MiB/s at most on a broker);
    x12 on the partitions broker 1 leads takes it past 80 % busy; the reset brings it back."""
    smoothing_s = 0.3
    cluster = start(
        make_cluster,
        traffic={
            "produce_bytes_per_sec": 1024 * 1024,
            "request_capacity_bytes_per_sec": 128 * 1024 * 1024,
            "signal_smoothing_s": smoothing_s,
            "produce_p99_ms": 5.0,
        },
    )
    skewed = 1
    assert any(p.leader == skewed for p in zk_partitions(zk_client).values()), "broker 1 should lead"

    def settled(check: Callable[[Signals], bool]) -> Signals:
        deadline = time.monotonic() + 60
        seen: Signals = {}
        while time.monotonic() < deadline:
            seen = {b: request_signals(s) for b, s in scrape_brokers(cluster, [0, 1, 2]).items()}
            if check(seen):
                return seen
            time.sleep(0.05)
        raise AssertionError(f"the request signals did not settle; last seen {seen}")

    calm = settled(
        lambda s: all(idle > 0.8 and net > 0.8 and 5.0 <= p99 < 6.5 for idle, net, p99 in s.values())
    )
    for b, s in scrape_brokers(cluster, [0, 1, 2]).items():
        assert s.types.get(HANDLER_IDLE) == s.types.get(NETWORK_IDLE) == s.types.get(TOTAL_TIME) == "gauge"
        quantiles = {x.labels["quantile"] for x in s.series(TOTAL_TIME)}
        assert quantiles == {"0.50", "0.75", "0.95", "0.98", "0.99", "0.999"}, b
        assert all(x.labels["request"] == "Produce" for x in s.series(TOTAL_TIME)), b
        by_quantile = [s.value(TOTAL_TIME, quantile=q) for q in sorted(quantiles, key=float)]
        assert by_quantile == sorted(by_quantile), b

    cluster.skew({"brokers": {str(skewed): 12}})
    busy = settled(lambda s: s[skewed][0] < 0.2)
    _, net, p99 = busy[skewed]
    assert net < 0.2
    assert p99 > 3 * calm[skewed][2], (calm, busy)

    cluster.skew({"reset": True})
    back = settled(lambda s: s[skewed][0] > 0.8)
    assert back[skewed][2] < 6.5, back
