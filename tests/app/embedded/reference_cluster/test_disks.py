"""Capacity on the brokers' ``/metrics`` and its fault controls, over real HTTP: node_exporter's filesystem
gauges per log dir, each replica's log size (growing with produce, trimmed by retention), the descriptor
limit; ``POST /brokers/{id}/log-dirs/{n}/fill`` (a dir that fills up fails as Kafka fails it) and
``POST /brokers/{id}/metrics`` (gauge overrides).

Read-only tests share one module-scoped cluster whose four brokers serve the four dialects; tests that change
the cluster start their own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.control import ControlServer
from tests.support.reference_cluster import (
    LAG_MS,
    ClusterFactory,
    Sample,
    Scrape,
    ZkPartition,
    scrape,
    small_settings,
    wait_for,
    zk_partitions,
)
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

KIB = 1024
GIB = 1024**3
RETENTION = 256 * KIB
SEGMENT = 128 * KIB
PRODUCE = 64 * KIB
TOPICS = [
    TopicSpec(name="orders", partitions=4, replication_factor=3),
    TopicSpec(
        name="small",
        partitions=2,
        replication_factor=2,
        config={"retention.bytes": str(RETENTION), "segment.bytes": str(SEGMENT)},
    ),
]
DIALECTS = {0: "jmx-exporter-example", 1: "strimzi", 2: "confluent", 3: "bitnami"}
LOG_SIZE = "kafka_log_log_size"
LOG_SIZE_TYPE = {0: "gauge", 1: "gauge", 2: "unknown", 3: "unknown"}  # the parser calls untyped "unknown"
SIZE = "node_filesystem_size_bytes"
AVAIL = "node_filesystem_avail_bytes"
OFFLINE_DIRS = {
    "jmx-exporter-example": "kafka_log_logmanager_offlinelogdirectorycount",
    "confluent": "kafka_log_logmanager_offlinelogdirectorycount",
}
REQUEST_HANDLER_IDLE = {
    "jmx-exporter-example": "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
    "bitnami": "kafka_server_kafkarequesthandlerpool_total_requesthandleravgidlepercent_oneminuterate",
}
ISR_TIMEOUT = LAG_MS / 1000 * 6


class Control:
    def __init__(self, cluster: ReferenceCluster) -> None:
        self.cluster = cluster
        self.server = ControlServer(cluster)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        return httpx.post(f"{self.server.url}{path}", json=body, timeout=30, trust_env=False)

    def ok(self, path: str, body: Any = None) -> dict[str, Any]:
        response = self.post(path, body)
        assert response.status_code == 200, (response.status_code, response.text)
        state: dict[str, Any] = response.json()
        return state

    def error(self, status: int, path: str, body: Any = None) -> str:
        response = self.post(path, body)
        assert response.status_code == status, (path, body, response.status_code, response.text)
        message: str = response.json()["error"]
        assert message
        return message

    def scrape(self, broker_id: int) -> Scrape:
        return scrape(str(self.cluster.metrics_url(broker_id)))

    def scrape_when(self, broker_id: int, ready: Callable[[Scrape], bool], what: str) -> Scrape:
        """The first scrape of ``broker_id`` for which ``ready`` holds."""

        def attempt() -> Scrape | None:
            taken = self.scrape(broker_id)
            return taken if ready(taken) else None

        return wait_for(attempt, message=what)


def log_dir_state(state: dict[str, Any], broker_id: int, log_dir: int) -> dict[str, Any]:
    [broker] = [b for b in state["brokers"] if b["id"] == broker_id]
    found: dict[str, Any] = broker["log_dirs"][log_dir]
    return found


def hosted(partitions: dict[tuple[str, int], ZkPartition], broker_id: int) -> set[tuple[str, int]]:
    return {k for k, p in partitions.items() if broker_id in p.replicas}


def log_sizes(s: Scrape) -> dict[tuple[str, int], float]:
    return {(x.labels["topic"], int(x.labels["partition"])): x.value for x in s.series(LOG_SIZE)}


def filesystems(s: Scrape, name: str) -> dict[str, Sample]:
    return {x.labels["mountpoint"]: x for x in s.series(name)}


@pytest.fixture(scope="module")
def shared(zookeeper_server: ZooKeeperEndpoint) -> Iterator[Control]:
    """Four brokers, one per dialect; ``small`` keeps 256 KiB in 128 KiB segments. Tests only read."""
    with own_chroot(zookeeper_server, "disks") as connect:
        settings = small_settings(brokers=4, topics=TOPICS, broker_metrics_dialects=DIALECTS)
        cluster = ReferenceCluster(settings, connect)
        cluster.start()
        control = Control(cluster)
        control.server.start()
        try:
            yield control
        finally:
            control.server.close()
            cluster.stop()
        assert cluster.errors == []


@pytest.fixture
def control(make_cluster: ClusterFactory) -> Iterator[Control]:
    """Three brokers on 1 GiB log dirs (broker 2 in Bitnami's naming)."""
    cluster = make_cluster(log_dir_size_bytes=GIB, broker_metrics_dialects={2: "bitnami"})
    control = Control(cluster)
    control.server.start()
    yield control
    control.server.close()


# --- the series --------------------------------------------------------------------------------------


def test_every_dialect_serves_filesystems_log_sizes_and_descriptors(
    shared: Control, make_zk_client: Any
) -> None:
    cluster = shared.cluster
    zk: KazooClient = make_zk_client(hosts=cluster.zookeeper)
    partitions = zk_partitions(zk)
    size = cluster.settings.log_dir_size_bytes
    free = size * (1 - cluster.settings.log_dir_base_used_ratio)
    mountpoints = {"/var/lib/kafka/data-0", "/var/lib/kafka/data-1"}
    for broker_id in DIALECTS:
        expected = hosted(partitions, broker_id)
        s = shared.scrape_when(
            broker_id,
            lambda x, want=expected: set(log_sizes(x)) == want,  # type: ignore[misc]
            f"broker {broker_id}'s log sizes for every replica it hosts",
        )
        sizes = log_sizes(s)
        assert s.types[LOG_SIZE] == LOG_SIZE_TYPE[broker_id]
        assert all(set(x.labels) == {"topic", "partition"} for x in s.series(LOG_SIZE))
        assert all(v > 0 for v in sizes.values()), sizes
        for name in (SIZE, AVAIL):
            assert s.types[name] == "gauge"
            assert set(filesystems(s, name)) == mountpoints, name
            for mountpoint, sample in filesystems(s, name).items():
                n = mountpoint.rsplit("-", 1)[1]
                device = f"/dev/nvme0n1p{int(n) + 1}"
                assert sample.labels == {"device": device, "fstype": "xfs", "mountpoint": mountpoint}
        assert {x.value for x in s.series(SIZE)} == {size}
        # used = the base fill + the logs in the dir (measured at the last tick: a tick of produce apart)
        logs_in_dirs = sum(free - x.value for x in s.series(AVAIL))
        assert logs_in_dirs == pytest.approx(sum(sizes.values()), abs=len(sizes) * PRODUCE)
        assert s.unlabelled("process_max_fds") == cluster.settings.traffic.max_fds
        assert 0 < s.unlabelled("process_open_fds") < s.unlabelled("process_max_fds")


def test_log_size_grows_with_produce_and_drops_back_by_a_segment_at_retention(
    shared: Control, make_zk_client: Any
) -> None:
    zk: KazooClient = make_zk_client(hosts=shared.cluster.zookeeper)
    partitions = zk_partitions(zk)
    leader = partitions["orders", 0].leader
    assert leader is not None
    first = log_sizes(shared.scrape(leader))["orders", 0]
    wait_for(
        lambda: log_sizes(shared.scrape(leader))["orders", 0] >= first + PRODUCE / 2,
        message="orders-0 to grow by half a second of produce",
    )

    small_leader = partitions["small", 0].leader
    assert small_leader is not None
    seen: list[float] = []

    def dropped() -> bool:
        seen.append(log_sizes(shared.scrape(small_leader))["small", 0])
        return any(later < earlier for earlier, later in itertools.pairwise(seen))

    wait_for(dropped, timeout=30, message="small-0 to drop back at its retention")
    assert max(seen) - min(seen) >= PRODUCE / 4, seen  # it grew in between
    assert all(RETENTION - PRODUCE <= v <= RETENTION + SEGMENT + PRODUCE for v in seen), seen
    for broker_id in DIALECTS:
        for (topic, _), value in log_sizes(shared.scrape(broker_id)).items():
            if topic == "small":
                assert value <= RETENTION + SEGMENT + PRODUCE, (broker_id, value)


# --- fill -------------------------------------------------------------------------------------------


def test_fill_sets_the_used_ratio_and_its_growth_advances(control: Control, make_zk_client: Any) -> None:
    mount = "/var/lib/kafka/data-1"
    # every replica's log created first: a log created after the fill would add its data on top of it
    expected = hosted(zk_partitions(make_zk_client(hosts=control.cluster.zookeeper)), 1)
    control.scrape_when(
        1,
        lambda x: set(log_sizes(x)) == expected,
        "broker 1's log sizes for every replica it hosts",
    )
    state = control.ok("/brokers/1/log-dirs/1/fill", {"used_ratio": 0.5})
    assert log_dir_state(state, 1, 1)["used_ratio"] == pytest.approx(0.5)
    avail = filesystems(control.scrape(1), AVAIL)[mount].value
    assert avail == pytest.approx(GIB / 2, abs=8 * 1024**2)  # the logs grow a little meanwhile

    state = control.ok("/brokers/1/log-dirs/1/fill", {"bytes_per_s": 20 * 1024**2})
    assert log_dir_state(state, 1, 1)["growth_bytes_per_s"] == 20 * 1024**2
    wait_for(
        lambda: filesystems(control.scrape(1), AVAIL)[mount].value < avail - 40 * 1024**2,
        message="the fill to grow by two seconds of growth",
    )
    other = filesystems(control.scrape(1), AVAIL)["/var/lib/kafka/data-0"].value
    assert other > 0.7 * GIB, "the other log dir keeps its fill"
    # both at once: the fill now, growth from there (a negative growth shrinks it)
    state = control.ok("/brokers/1/log-dirs/1/fill", {"used_ratio": 0.6, "bytes_per_s": -(1024**2)})
    assert log_dir_state(state, 1, 1)["growth_bytes_per_s"] == -(1024**2)
    wait_for(
        lambda: filesystems(control.scrape(1), AVAIL)[mount].value > 0.4 * GIB + 1024**2,
        message="the fill to shrink",
    )


def test_a_log_dir_that_fills_up_fails_and_the_controller_moves_its_replicas_out(
    control: Control, zk_client: KazooClient
) -> None:
    cluster = control.cluster
    lost = cluster.loop.call(
        lambda: {(tp.topic, tp.partition) for tp, lg in cluster.brokers[0].logs.items() if lg.log_dir == 0}
    )
    assert lost
    notifications = "/log_dir_event_notification"
    cversion_before = zk_client.exists(notifications).cversion

    state = control.ok("/brokers/0/log-dirs/0/fill", {"used_ratio": 0.99, "bytes_per_s": 5 * 1024**2})
    assert log_dir_state(state, 0, 0)["failed"] is False
    s = control.scrape_when(
        0, lambda x: x.unlabelled(OFFLINE_DIRS["jmx-exporter-example"]) == 1, "log dir 0 to fill up and fail"
    )
    assert filesystems(s, AVAIL)["/var/lib/kafka/data-0"].value == 0
    assert not any(k in lost for k in log_sizes(s)), "a failed dir's logs are not served"
    state = control.ok("/brokers/0/log-dirs/1/fill", {"used_ratio": 0.5})
    assert state["brokers"][0]["failed_log_dirs"] == [0]
    wait_for(
        lambda: (
            not zk_client.get_children(notifications)
            and zk_client.exists(notifications).cversion >= cversion_before + 2
        ),
        message="the log dir event notification created and processed",
    )

    def moved_out() -> dict[tuple[str, int], ZkPartition] | None:
        partitions = zk_partitions(zk_client)
        return partitions if all(0 not in partitions[k].isr for k in lost) else None

    partitions = wait_for(moved_out, timeout=ISR_TIMEOUT, message="the failed replicas out of their ISRs")
    assert all(partitions[k].leader not in {0, -1} for k in lost)
    control.error(409, "/brokers/0/log-dirs/0/fill", {"used_ratio": 0.5})


def test_filling_to_one_fails_the_dir_at_once(control: Control) -> None:
    state = control.ok("/brokers/2/log-dirs/1/fill", {"used_ratio": 1})
    assert log_dir_state(state, 2, 1)["failed"] is True
    s = control.scrape(2)  # Bitnami's rules export no kafka.log MBean without a topic: no offline-dir gauge
    assert filesystems(s, AVAIL)["/var/lib/kafka/data-1"].value == 0
    assert s.unlabelled("kafka_server_replicamanager_total_offlinereplicacount_value") > 0


# --- metric overrides -------------------------------------------------------------------------------


def test_metric_overrides_apply_to_every_label_set_until_reset(control: Control) -> None:
    idle = REQUEST_HANDLER_IDLE["jmx-exporter-example"]
    control.ok(
        "/brokers/0/metrics",
        {"set": {idle: 0.05, "process_open_fds": 900_000, LOG_SIZE: 7, AVAIL: 1024}},
    )
    s = control.scrape(0)
    assert s.unlabelled(idle) == 0.05
    assert s.unlabelled("process_open_fds") == 900_000
    assert s.series(LOG_SIZE)
    assert {x.value for x in s.series(LOG_SIZE)} == {7}
    assert {x.value for x in s.series(AVAIL)} == {1024}
    assert control.scrape(1).unlabelled(idle) > 0.5, "other brokers keep theirs"

    # the names are the broker's dialect's
    control.error(422, "/brokers/2/metrics", {"set": {idle: 0.05}})
    bitnami_idle = REQUEST_HANDLER_IDLE["bitnami"]
    control.ok("/brokers/2/metrics", {"set": {bitnami_idle: 0.03}})
    assert control.scrape(2).unlabelled(bitnami_idle) == 0.03

    state = control.ok("/brokers/0/metrics", {"reset": True, "set": {"process_max_fds": 1000}})
    assert state["brokers"][0]["metric_overrides"] == {"process_max_fds": 1000}
    s = control.scrape(0)
    assert s.unlabelled("process_max_fds") == 1000
    assert s.unlabelled(idle) > 0.5
    assert s.unlabelled("process_open_fds") < 900_000
    assert s.series(LOG_SIZE)
    assert all(x.value > 1024**2 for x in s.series(LOG_SIZE))
    control.ok("/brokers/0/metrics", {"reset": True})
    assert control.scrape(0).unlabelled("process_max_fds") == control.cluster.settings.traffic.max_fds


# --- bad input ----------------------------------------------------------------------------------------

BAD = [
    (404, "/brokers/9/log-dirs/0/fill", {"used_ratio": 0.5}),
    (404, "/brokers/x/log-dirs/0/fill", {"used_ratio": 0.5}),
    (404, "/brokers/0/log-dirs/2/fill", {"used_ratio": 0.5}),
    (404, "/brokers/0/log-dirs/-1/fill", {"used_ratio": 0.5}),
    (404, "/brokers/0/log-dirs/a/fill", {"used_ratio": 0.5}),
    (422, "/brokers/0/log-dirs/0/fill", {"used_ratio": 1.5}),
    (422, "/brokers/0/log-dirs/0/fill", {"used_ratio": -0.1}),
    (422, "/brokers/0/log-dirs/0/fill", {"used_ratio": "0.5"}),
    (422, "/brokers/0/log-dirs/0/fill", {"used_ratio": True}),
    (422, "/brokers/0/log-dirs/0/fill", {"bytes_per_s": None}),
    (422, "/brokers/0/log-dirs/0/fill", {"used_ratio": 0.5, "size": 1}),
    (422, "/brokers/0/log-dirs/0/fill", {}),
    (422, "/brokers/0/log-dirs/0/fill", [0.5]),
    (409, "/brokers/0/log-dirs/0/fill", {"used_ratio": 0.0}),  # the logs take more than that
    (404, "/brokers/9/metrics", {"set": {"process_open_fds": 1}}),
    (422, "/brokers/0/metrics", {"set": {"process_open_fds": "many"}}),
    (422, "/brokers/0/metrics", {"set": {"process_open_fds": 1, "no_such_series": 2}}),
    (422, "/brokers/0/metrics", {"set": {"kafka_server_replicamanager_isrshrinks_total": 1}}),
    (422, "/brokers/0/metrics", {"set": ["process_open_fds"]}),
    (422, "/brokers/0/metrics", {"reset": "yes"}),
    (422, "/brokers/0/metrics", {"sett": {}}),
    (422, "/brokers/0/metrics", {}),
]


def test_bad_fill_and_metrics_requests_are_4xx_and_change_nothing(
    shared: Control, subtests: pytest.Subtests
) -> None:
    before = shared.cluster.describe()["brokers"]
    for status, path, body in BAD:
        with subtests.test(f"{path} {body}"):
            message = shared.error(status, path, body)
            if body == {"set": {"process_open_fds": 1, "no_such_series": 2}}:
                assert "no_such_series" in message
                assert "process_open_fds" not in message
            if "isrshrinks" in path + str(body):
                assert "counter" in message
    after = shared.cluster.describe()["brokers"]
    for old, new in zip(before, after, strict=True):
        assert new["metric_overrides"] == old["metric_overrides"] == {}
        for old_dir, new_dir in zip(old["log_dirs"], new["log_dirs"], strict=True):
            assert new_dir["growth_bytes_per_s"] == old_dir["growth_bytes_per_s"] == 0
            assert new_dir["used_ratio"] == pytest.approx(old_dir["used_ratio"], abs=0.001)
        assert new["failed_log_dirs"] == []
