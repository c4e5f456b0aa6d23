"""The ZooKeeper collector against a real ZooKeeper: hand-written znode trees in every format version Kafka
2.0-3.9 writes (docs/kafka-reference.md §1), malformed znodes, incremental updates through watches without a
rescan, and session loss. Every collector test runs with both readers (the wire reader and kazoo).
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from collectors.kafka.model import (
    BrokerEndpoint,
    ClusterSnapshot,
    ControllerInfo,
    LeaderAndIsr,
    LogDirEvent,
    MigrationState,
    PartitionInfo,
    ReplicaAssignment,
    TopicPartition,
    ZnodeError,
)
from collectors.kafka.zkdata import encode_log_dir_event, parse_connect_string
from collectors.zookeeper.cluster_model import ClusterModel, Kind, PartitionMap
from collectors.zookeeper.collector import ZooKeeperCollector, scan
from collectors.zookeeper.wire import (
    Code,
    KazooReader,
    Op,
    Read,
    ReaderFactory,
    ReaderSpec,
    Reply,
    WireReader,
    ZooKeeperUnreachableError,
)
from tests.support.reference_cluster import wait_for
from tests.support.zookeeper import expire_session, lose_connection

ROOT = "/kafka"
"""The trees live one level below the test's chroot, so every test also reads through a nested chroot."""
TOPIC_ID = "Mk3OEXBSRvuMNIvPwUT3Bw"
START_TIMEOUT = 15.0

CollectorFactory = Callable[..., ZooKeeperCollector]


def js(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def state(
    leader: int, isr: list[int], leader_epoch: int = 0, controller_epoch: int = 7, **extra: Any
) -> bytes:
    return js(
        {"controller_epoch": controller_epoch, "leader": leader, "version": 1, "leader_epoch": leader_epoch,
         "isr": isr, **extra}
    )  # fmt: skip


def write(zk: KazooClient, tree: dict[str, bytes]) -> None:
    for path, data in tree.items():
        zk.create(ROOT + path, data, makepath=True)


def state_path(topic: str, partition: int) -> str:
    return f"/brokers/topics/{topic}/partitions/{partition}/state"


BROKERS: dict[int, dict[str, Any]] = {
    1: {"version": 1, "host": "b1", "port": 9092, "jmx_port": -1, "timestamp": "1700000000001"},
    2: {"version": 2, "host": "b2", "port": 9092, "jmx_port": 9999, "timestamp": "1700000000002",
        "endpoints": ["PLAINTEXT://b2:9092"]},
    3: {"version": 3, "host": "b3", "port": 9092, "jmx_port": -1, "timestamp": "1700000000003",
        "endpoints": ["PLAINTEXT://b3:9092"], "rack": None},
    4: {"version": 4, "host": None, "port": -1, "jmx_port": -1, "timestamp": "1700000000004",
        "endpoints": ["SSL://b4:9093"], "listener_security_protocol_map": {"SSL": "SSL"}, "rack": "r2"},
    5: {"listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SASL_SSL"},
        "endpoints": ["PLAINTEXT://b5:9092", "INTERNAL://[::1]:9094"], "rack": "r1", "jmx_port": -1,
        "features": {"metadata.version": {"min_version": 1, "max_version": 7}}, "host": "b5",
        "timestamp": "1700000000005", "port": 9092, "version": 5, "a_future_field": {"x": 1}},
}  # fmt: skip


def topic(version: int, partitions: dict[str, list[int]], **extra: Any) -> bytes:
    return js({"version": version, "partitions": partitions, **extra})


def partition_list(*partitions: tuple[str, int]) -> bytes:
    return js({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def config(**entries: str) -> bytes:
    return js({"version": 1, "config": {k.replace("_", "."): v for k, v in entries.items()}})


def every_format_tree() -> dict[str, bytes]:
    """Brokers v1-v5, topics v1-v3, controller v1, a reassignment, a deletion, a pending election, an
    offline partition, an unclean election in recovery and a partition without a state znode."""
    reassignment = {"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [2, 5]}]}
    return {
        **{f"/brokers/ids/{b}": js(obj) for b, obj in BROKERS.items()},
        "/controller": js({"version": 1, "brokerid": 2, "timestamp": "1700000000000"}),
        "/controller_epoch": b"7",
        "/cluster/id": js({"version": "1", "id": "abcdefghijklmnopqrstuv"}),
        "/brokers/topics/orders": topic(1, {"0": [1, 2, 5], "1": [2, 5, 1], "2": [5, 1, 9]}),
        state_path("orders", 0): state(1, [1, 2, 5], leader_epoch=3),
        state_path("orders", 1): state(2, [2, 5], leader_epoch=1),
        state_path("orders", 2): state(-1, [9], leader_epoch=4),
        "/brokers/topics/moving": topic(
            2, {"0": [2, 5, 1]}, adding_replicas={"0": [5]}, removing_replicas={"0": [1]}
        ),
        state_path("moving", 0): state(2, [2, 1], leader_epoch=2),
        "/admin/reassign_partitions": js(reassignment),
        "/brokers/topics/events": topic(3, {"0": [5, 4], "1": [4, 5]}, topic_id=TOPIC_ID),
        state_path("events", 0): state(5, [5], leader_epoch=9, leader_recovery_state=1),
        "/brokers/topics/events/partitions/1": b"",
        "/brokers/topics/doomed": topic(3, {"0": [1]}, topic_id="AAAAAAAAAAAAAAAAAAAAAA"),
        state_path("doomed", 0): state(1, [1]),
        "/admin/delete_topics/doomed": b"",
        "/admin/preferred_replica_election": partition_list(("orders", 1)),
        "/config/topics/orders": config(min_insync_replicas="2"),
        "/config/topics/events": config(),
        "/config/brokers/<default>": config(min_insync_replicas="1"),
        "/config/brokers/1": config(leader_replication_throttled_rate="1000"),
        "/config/changes/config_change_0000000000": js({"version": 2, "entity_path": "brokers/1"}),
        "/isr_change_notification/isr_change_0000000000": partition_list(),
    }


def healthy_tree() -> dict[str, bytes]:
    controller = {"version": 2, "brokerid": 1, "timestamp": "1", "kraftControllerEpoch": -1}
    return {
        **{
            f"/brokers/ids/{b}": js(BROKERS[5] | {"endpoints": [f"PLAINTEXT://b{b}:9092"]}) for b in (1, 2, 5)
        },
        "/controller": js(controller),
        "/controller_epoch": b"7",
        "/brokers/topics/orders": topic(3, {"0": [1, 2, 5], "1": [2, 5, 1]}, topic_id=TOPIC_ID),
        state_path("orders", 0): state(1, [1, 2, 5]),
        state_path("orders", 1): state(2, [2, 5, 1]),
        "/config/topics/orders": config(),
        "/admin/delete_topics": b"",
    }


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(params=["wire", "kazoo"])
def reader_factory(request: pytest.FixtureRequest) -> ReaderFactory:
    return WireReader if request.param == "wire" else KazooReader


@pytest.fixture
def connect(zk_connect: str) -> str:
    return zk_connect + ROOT


@pytest.fixture
def start_collector(reader_factory: ReaderFactory, connect: str) -> Iterator[CollectorFactory]:
    """Start collectors (2 sessions each, so that sharding is exercised); all stopped after the test."""
    collectors: list[ZooKeeperCollector] = []

    def start(**options: Any) -> ZooKeeperCollector:
        collector = ZooKeeperCollector(
            options.pop("connect", connect), connections=2, reader_factory=reader_factory, **options
        )
        collectors.append(collector)
        collector.start(START_TIMEOUT)
        return collector

    yield start
    for collector in collectors:
        collector.stop()


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def czxid(zk: KazooClient, path: str) -> int:
    stat = zk.exists(ROOT + path)
    assert stat is not None
    return int(stat.czxid)


# --- full scans of hand-written trees ------------------------------------------------------------------


@pytest.mark.integration
def test_reads_every_format_version(zk_client: KazooClient, start_collector: CollectorFactory) -> None:
    write(zk_client, every_format_tree())
    collector = start_collector()
    snap = collector.snapshot

    assert (snap.version, snap.stale, snap.errors) == (1, False, ())
    assert snap.last_good_at is not None
    assert abs(snap.last_good_at - time.time()) < 30
    assert snap.cluster_id == "abcdefghijklmnopqrstuv"
    epoch_version = zk_client.exists(ROOT + "/controller_epoch").version
    assert snap.controller == ControllerInfo(broker_id=2, epoch=7, epoch_zk_version=epoch_version)

    assert sorted(snap.brokers) == [1, 2, 3, 4, 5]
    b1, b2, b3, b4, b5 = (snap.brokers[b] for b in (1, 2, 3, 4, 5))
    assert (b1.version, b1.endpoints, b1.host, b1.port) == (
        1,
        (BrokerEndpoint("PLAINTEXT", "b1", 9092),),
        "b1",
        9092,
    )
    assert (b1.timestamp_ms, b1.rack, b1.jmx_port) == (1700000000001, None, -1)
    assert (b2.endpoints, b2.jmx_port) == ((BrokerEndpoint("PLAINTEXT", "b2", 9092),), 9999)
    assert (b3.version, b3.rack) == (3, None)
    assert b4.endpoints == (BrokerEndpoint("SSL", "b4", 9093, "SSL"),)  # host null, port -1: from endpoints
    assert (b4.host, b4.port, b4.rack) == (None, -1, "r2")
    assert b5.endpoints == (
        BrokerEndpoint("PLAINTEXT", "b5", 9092),
        BrokerEndpoint("INTERNAL", "::1", 9094, "SASL_SSL"),
    )
    assert (b5.rack, b5.features) == ("r1", {"metadata.version": {"min_version": 1, "max_version": 7}})
    for b in (1, 2, 3, 4, 5):
        assert snap.brokers[b].broker_epoch == czxid(zk_client, f"/brokers/ids/{b}")

    assert sorted(snap.topics) == ["doomed", "events", "moving", "orders"]
    assert snap.topics["events"].topic_id == TOPIC_ID
    assert snap.topics["orders"].topic_id is None  # v1
    assert dict(snap.topics["orders"].config) == {"min.insync.replicas": "2"}
    assert dict(snap.topics["moving"].config) == {}
    assert [t for t, info in snap.topics.items() if info.marked_for_deletion] == ["doomed"]
    assert {k: dict(v) for k, v in snap.broker_configs.items()} == {
        "<default>": {"min.insync.replicas": "1"},
        "1": {"leader.replication.throttled.rate": "1000"},
    }

    def expect(
        topic: str, p: int, replicas: tuple[int, ...], state: LeaderAndIsr | None, **moving: Any
    ) -> PartitionInfo:
        return PartitionInfo(tp(topic, p), ReplicaAssignment(replicas, **moving), state)

    assert dict(snap.partitions) == {
        tp("orders", 0): expect("orders", 0, (1, 2, 5), LeaderAndIsr(1, 3, (1, 2, 5), 7, 0, 0)),
        tp("orders", 1): expect("orders", 1, (2, 5, 1), LeaderAndIsr(2, 1, (2, 5), 7, 0, 0)),
        tp("orders", 2): expect("orders", 2, (5, 1, 9), LeaderAndIsr(-1, 4, (9,), 7, 0, 0)),
        tp("moving", 0): expect(
            "moving",
            0,
            (2, 5, 1),
            LeaderAndIsr(2, 2, (2, 1), 7, 0, 0),
            adding_replicas=(5,),
            removing_replicas=(1,),
        ),
        tp("events", 0): expect("events", 0, (5, 4), LeaderAndIsr(5, 9, (5,), 7, 1, 0)),
        tp("events", 1): expect("events", 1, (4, 5), None),
        tp("doomed", 0): expect("doomed", 0, (1,), LeaderAndIsr(1, 0, (1,), 7, 0, 0)),
    }
    assert snap.partitions[tp("moving", 0)].assignment.target_replicas == (2, 5)
    assert snap.pending.preferred_election == (tp("orders", 1),)
    assert dict(snap.pending.reassignments) == {tp("moving", 0): (2, 5)}
    assert snap.pending.deletions == ("doomed",)
    assert collector.full_scans == 1


@pytest.mark.integration
def test_malformed_znodes_are_reported_and_the_rest_is_read(
    zk_client: KazooClient, start_collector: CollectorFactory
) -> None:
    write(
        zk_client,
        {
            "/brokers/ids/1": js(BROKERS[5]),
            "/brokers/ids/7": b"[1, 2]",
            "/brokers/ids/abc": js(BROKERS[5]),
            "/controller": js({"version": 2, "brokerid": 1, "timestamp": "1", "kraftControllerEpoch": -1}),
            "/controller_epoch": b"x",
            "/brokers/topics/good": js(
                {"version": 3, "partitions": {"0": [1], "1": [1]}, "topic_id": TOPIC_ID}
            ),
            state_path("good", 0): state(1, [1]),
            state_path("good", 1): b"{not json",
            "/brokers/topics/badkey": js({"version": 1, "partitions": {"x": [1]}}),
            "/admin/preferred_replica_election": b"garbage",
            "/config/topics/good": b'{"version":1,"config":"oops"}',
        },
    )
    collector = start_collector()
    snap = collector.snapshot

    assert [e.path for e in snap.errors] == [
        "/admin/preferred_replica_election",
        "/brokers/ids/7",
        "/brokers/ids/abc",
        "/brokers/topics/badkey",
        state_path("good", 1),
        "/config/topics/good",
        "/controller_epoch",
    ]
    reasons = {e.path: e.reason for e in snap.errors}
    assert "expected a JSON object" in reasons["/brokers/ids/7"]
    assert "not a broker id" in reasons["/brokers/ids/abc"]
    assert "invalid JSON" in reasons[state_path("good", 1)]
    assert "'x' is not a number" in reasons["/brokers/topics/badkey"]
    assert "plain integer" in reasons["/controller_epoch"]
    assert list(snap.brokers) == [1]
    assert snap.controller == ControllerInfo(
        broker_id=1, epoch=None, epoch_zk_version=None, kraft_controller_epoch=-1
    )
    assert list(snap.topics) == ["good"]
    assert dict(snap.topics["good"].config) == {}
    assert snap.partitions[tp("good", 0)].state == LeaderAndIsr(1, 0, (1,), 7, 0, 0)
    assert snap.partitions[tp("good", 1)].state is None
    assert "invalid JSON" in (snap.partitions[tp("good", 1)].state_error or "")
    assert snap.partitions[tp("good", 0)].state_error is None
    assert snap.pending.preferred_election == ()

    # Repairs reach the snapshot through the watches and clear the errors.
    zk_client.set(ROOT + state_path("good", 1), state(1, [1]))
    zk_client.set(ROOT + "/controller_epoch", b"8")
    zk_client.delete(ROOT + "/brokers/ids/7")
    snap = wait_for(
        lambda: collector.snapshot if len(collector.snapshot.errors) == 4 else None, 5, "the repairs"
    )
    assert [e.path for e in snap.errors] == [
        "/admin/preferred_replica_election",
        "/brokers/ids/abc",
        "/brokers/topics/badkey",
        "/config/topics/good",
    ]
    assert snap.partitions[tp("good", 1)].state == LeaderAndIsr(1, 0, (1,), 7, 0, 1)
    assert snap.partitions[tp("good", 1)].state_error is None
    assert snap.controller.epoch == 8
    assert collector.full_scans == 1


@pytest.mark.integration
def test_an_empty_chroot_gives_an_empty_snapshot_that_fills_as_kafka_arrives(
    zk_client: KazooClient, start_collector: CollectorFactory
) -> None:
    zk_client.ensure_path(ROOT)
    collector = start_collector()
    snap = collector.snapshot
    assert (len(snap.brokers), len(snap.topics), len(snap.partitions), snap.errors) == (0, 0, 0, ())
    assert snap.controller == ControllerInfo()

    write(zk_client, healthy_tree())  # the parents did not exist: exists watches wait for them
    snap = wait_for(
        lambda: collector.snapshot if len(collector.snapshot.partitions) == 2 else None, 5, "the new cluster"
    )
    wait_for(lambda: len(collector.snapshot.brokers) == 3 and collector.snapshot.controller.epoch == 7, 5)
    assert collector.full_scans == 1


# --- incremental updates -------------------------------------------------------------------------------


@pytest.mark.integration
def test_changes_reach_the_snapshot_without_a_rescan(
    zk_client: KazooClient, start_collector: CollectorFactory
) -> None:
    write(zk_client, healthy_tree())
    published: list[ClusterSnapshot] = []
    collector = start_collector(on_change=published.append)
    first = collector.snapshot
    orders_0 = first.partitions[tp("orders", 0)]

    def until(predicate: Callable[[ClusterSnapshot], object], what: str) -> ClusterSnapshot:
        return wait_for(lambda: collector.snapshot if predicate(collector.snapshot) else None, 5, what)

    def set_state(topic: str, p: int, data: bytes) -> None:
        zk_client.set(ROOT + state_path(topic, p), data)

    set_state("orders", 0, state(2, [1, 2, 5], leader_epoch=1))
    snap = until(lambda s: s.partitions[tp("orders", 0)].leader == 2, "a leader change")
    assert snap.partitions[tp("orders", 0)].state == LeaderAndIsr(2, 1, (1, 2, 5), 7, 0, 1)
    assert first.partitions[tp("orders", 0)] is orders_0  # an old version never changes

    set_state("orders", 1, state(2, [2], leader_epoch=0))
    until(lambda s: s.partitions[tp("orders", 1)].isr == (2,), "an ISR shrink")

    zk_client.create(
        ROOT + "/brokers/topics/fresh", js({"version": 3, "partitions": {"0": [1, 2]}, "topic_id": TOPIC_ID})
    )
    snap = until(lambda s: tp("fresh", 0) in s.partitions, "a new topic")
    assert snap.partitions[tp("fresh", 0)].state is None
    assert snap.topics["fresh"].topic_id == TOPIC_ID
    zk_client.create(ROOT + state_path("fresh", 0), state(1, [1, 2]), makepath=True)
    until(lambda s: s.partitions[tp("fresh", 0)].leader == 1, "the new topic's state")

    zk_client.set(
        ROOT + "/brokers/topics/orders",
        js(
            {
                "version": 3,
                "partitions": {"0": [1, 2, 5], "1": [2, 5, 1], "2": [5, 1, 2]},
                "topic_id": TOPIC_ID,
            }
        ),
    )
    until(lambda s: tp("orders", 2) in s.partitions, "an added partition")
    zk_client.create(ROOT + state_path("orders", 2), state(5, [5, 1, 2]), makepath=True)
    until(lambda s: s.partitions[tp("orders", 2)].leader == 5, "the added partition's state")

    zk_client.delete(ROOT + "/brokers/topics/fresh", recursive=True)
    snap = until(lambda s: "fresh" not in s.topics, "a deleted topic")
    assert tp("fresh", 0) not in snap.partitions
    assert len(snap.partitions) == 3

    zk_client.delete(ROOT + "/brokers/ids/5")
    until(lambda s: 5 not in s.brokers, "a broker gone")
    zk_client.create(ROOT + "/brokers/ids/5", js(BROKERS[5]))
    snap = until(lambda s: 5 in s.brokers, "the broker back")
    assert snap.brokers[5].broker_epoch == czxid(zk_client, "/brokers/ids/5")

    zk_client.delete(ROOT + "/controller")
    until(lambda s: s.controller.broker_id is None, "no controller")
    transaction = zk_client.transaction()
    transaction.create(ROOT + "/controller", js({"version": 1, "brokerid": 5, "timestamp": "2"}))
    transaction.set_data(ROOT + "/controller_epoch", b"8")
    transaction.commit()
    until(lambda s: (s.controller.broker_id, s.controller.epoch) == (5, 8), "a controller change")

    zk_client.set(ROOT + "/config/topics/orders", js({"version": 1, "config": {"min.insync.replicas": "2"}}))
    until(lambda s: s.topics["orders"].config.get("min.insync.replicas") == "2", "a config change")

    election = ROOT + "/admin/preferred_replica_election"
    zk_client.create(
        election, js({"version": 1, "partitions": [{"topic": "orders", "partition": 0}]}), makepath=True
    )
    until(lambda s: s.pending.preferred_election == (tp("orders", 0),), "a pending election")
    zk_client.delete(election)
    until(lambda s: s.pending.preferred_election == (), "the election done")

    zk_client.create(ROOT + "/admin/delete_topics/orders")
    until(lambda s: s.topics["orders"].marked_for_deletion, "a topic marked for deletion")

    assert collector.full_scans == 1
    versions = [s.version for s in published]
    assert versions == sorted(set(versions))
    assert versions[0] == 1
    assert all(not s.stale for s in published)


@pytest.mark.integration
def test_changes_that_arrive_together_make_one_version(
    zk_client: KazooClient, start_collector: CollectorFactory
) -> None:
    tree = healthy_tree()
    partitions = {str(p): [1, 2, 5] for p in range(50)}
    tree["/brokers/topics/orders"] = js({"version": 3, "partitions": partitions, "topic_id": TOPIC_ID})
    tree |= {state_path("orders", p): state(1, [1, 2, 5]) for p in range(50)}
    write(zk_client, tree)
    collector = start_collector()
    before = collector.snapshot.version

    transaction = zk_client.transaction()
    for p in range(50):
        transaction.set_data(ROOT + state_path("orders", p), state(1, [1], leader_epoch=0))
    transaction.commit()

    snap = wait_for(
        lambda: (
            collector.snapshot if all(i.isr == (1,) for i in collector.snapshot.partitions.values()) else None
        ),
        5,
        "50 ISR shrinks",
    )
    assert snap.version - before <= 3  # batched: not one version per znode


@pytest.mark.integration
def test_every_change_arrives_within_a_second(
    zk_client: KazooClient, start_collector: CollectorFactory
) -> None:
    """One change at a time, as on a quiet cluster: none may wait for some later I/O to be noticed."""
    write(zk_client, healthy_tree())
    collector = start_collector()

    def seen(partition: int, epoch: int) -> Callable[[], bool]:
        def check() -> bool:
            state = collector.snapshot.partitions[tp("orders", partition)].state
            return state is not None and state.leader_epoch == epoch

        return check

    for epoch in range(1, 31):
        partition = epoch % 2
        zk_client.set(ROOT + state_path("orders", partition), state(1, [1, 2, 5], leader_epoch=epoch))
        wait_for(seen(partition, epoch), 1.0, f"leader epoch {epoch}")
    assert collector.full_scans == 1


@pytest.mark.integration
def test_the_wire_reader_never_leaves_a_read_waiting(zk_client: KazooClient, connect: str) -> None:
    """Bursts of reads through a small window, each followed by a quiet moment: every burst must wake the
    idle reader and get all its replies promptly. (The lost wake-up this guards against showed only at
    200k partitions: ``bench/zk_scan.py`` checks the change latency there.)"""
    write(zk_client, {"/x": b"1"})
    replies: queue.SimpleQueue[Reply] = queue.SimpleQueue()

    def sink(items: list[Any]) -> None:
        for item in items:
            if isinstance(item, Reply):
                replies.put(item)

    servers, chroot = parse_connect_string(connect)
    reader = WireReader(ReaderSpec(tuple(servers), chroot, 10.0, in_flight=8), sink)
    reader.start(START_TIMEOUT)
    try:
        for _ in range(30):
            for _ in range(50):
                reader.submit([Read(Op.GET_DATA, "/x", False)])
            got = [replies.get(timeout=1.0) for _ in range(50)]
            assert {(r.code, r.data) for r in got} == {(Code.OK, b"1")}
    finally:
        reader.stop()


# --- sessions ------------------------------------------------------------------------------------------


def expire(collector: ZooKeeperCollector, index: int = 0) -> None:
    """Expire one of the collector's sessions on the server."""
    reader = collector.readers[index]
    if isinstance(reader, KazooReader):
        expire_session(reader.client)
        return
    assert isinstance(reader, WireReader)
    assert reader.server is not None
    assert reader.session_id is not None
    host, port = reader.server
    intruder = KazooClient(hosts=f"{host}:{port}", client_id=(reader.session_id, reader.session_password))
    try:
        intruder.start(timeout=START_TIMEOUT)  # takes the session over: our connection is closed
        intruder.stop()  # and closing it expires the session
    finally:
        intruder.close()


def drop(collector: ZooKeeperCollector, index: int = 0) -> None:
    reader = collector.readers[index]
    if isinstance(reader, KazooReader):
        lose_connection(reader.client)
    else:
        assert isinstance(reader, WireReader)
        reader.drop_connection()


@pytest.mark.integration
@pytest.mark.parametrize("fault", [expire, drop], ids=["session-expired", "connection-dropped"])
def test_session_trouble_marks_the_snapshot_stale_then_resyncs(
    zk_client: KazooClient, start_collector: CollectorFactory, fault: Callable[[ZooKeeperCollector], None]
) -> None:
    write(zk_client, healthy_tree())
    published: list[ClusterSnapshot] = []
    lock = threading.Lock()

    def record(snapshot: ClusterSnapshot) -> None:
        with lock:
            published.append(snapshot)

    collector = start_collector(on_change=record)
    good = collector.snapshot
    time.sleep(0.02)

    fault(collector)
    wait_for(lambda: any(s.stale for s in published), 10, "a stale snapshot")
    resynced = wait_for(
        lambda: collector.snapshot if collector.full_scans == 2 and not collector.snapshot.stale else None,
        15,
        "the resync",
    )
    with lock:
        stale = next(s for s in published if s.stale)
    assert stale.version == good.version + 1
    assert stale.last_good_at == good.last_good_at
    assert dict(stale.partitions) == dict(good.partitions)
    assert resynced.version > stale.version
    assert resynced.last_good_at is not None
    assert good.last_good_at is not None
    assert resynced.last_good_at > good.last_good_at
    assert dict(resynced.partitions) == dict(good.partitions)
    assert resynced.brokers == good.brokers

    # The new sessions' watches work: a change arrives without another scan.
    zk_client.set(ROOT + state_path("orders", 0), state(2, [2, 5], leader_epoch=1))
    wait_for(
        lambda: collector.snapshot.partitions[tp("orders", 0)].leader == 2, 5, "a change after the resync"
    )
    assert collector.full_scans == 2


# --- one-shot scans and start-up errors ----------------------------------------------------------------


@pytest.mark.integration
def test_scan_reads_the_same_as_a_collector(
    zk_client: KazooClient, start_collector: CollectorFactory, connect: str
) -> None:
    write(zk_client, every_format_tree())
    live = start_collector().snapshot
    once = scan(connect, timeout=START_TIMEOUT)
    assert (once.version, once.stale) == (1, False)
    assert dict(once.partitions) == dict(live.partitions)
    assert (once.brokers, once.topics, once.controller, once.pending) == (
        live.brokers,
        live.topics,
        live.controller,
        live.pending,
    )
    assert once.errors == live.errors == ()


@pytest.mark.integration
def test_an_unreachable_zookeeper_fails_start_with_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = threading.active_count()
    collector = ZooKeeperCollector(f"127.0.0.1:{port}/kafka", connections=2)
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnreachableError, match=f"127.0.0.1:{port}"):
        collector.start(timeout=2.0)
    assert time.monotonic() - started < 60  # it gave up (after its 2 s), rather than hang
    wait_for(lambda: threading.active_count() <= before, 60, "the collector's threads to end")


@pytest.mark.unit
@pytest.mark.parametrize("connect", ["", "zk1", "zk1:2181/kafka/", "zk1:notaport"])
def test_a_bad_connect_string_is_refused_without_io(connect: str) -> None:
    with pytest.raises(ValueError, match="ZooKeeper"):
        ZooKeeperCollector(connect)


REFUSED = "not authorised: the ZooKeeper ACL refuses this read (NoAuth, -102); see docs/collectors.md"


@pytest.mark.unit
def test_the_model_needs_no_zookeeper() -> None:
    """The cluster model is pure: a fake reader (here: hand-made replies) drives it."""
    model = ClusterModel()
    reads = model.root_reads()
    assert {r.path for r in reads} >= {"/brokers/ids", "/brokers/topics", "/controller", "/controller_epoch"}
    topics = next(r for r in reads if r.path == "/brokers/topics")
    [topic_read] = model.apply(Reply(topics, Code.OK, children=["orders"])) or []
    assert (topic_read.op, topic_read.path) == (Op.GET_DATA, "/brokers/topics/orders")
    state_reads = model.apply(Reply(topic_read, Code.OK, js({"partitions": {"0": [1, 2]}}))) or []
    assert [r.path for r in state_reads] == [state_path("orders", 0)]
    assert model.apply(Reply(state_reads[0], Code.OK, state(1, [1, 2]), version=3)) is None
    absent = model.apply(Reply(Read(Op.GET_DATA, "/controller", True, Kind.CONTROLLER), Code.NO_NODE))
    assert absent == [Read(Op.EXISTS, "/controller", True, Kind.CONTROLLER)]
    snap = model.build(version=1, taken_at=0.0, last_good_at=0.0, stale=False)
    assert isinstance(snap.partitions, PartitionMap)
    assert dict(snap.partitions) == {
        tp("orders", 0): PartitionInfo(
            tp("orders", 0), ReplicaAssignment((1, 2)), LeaderAndIsr(1, 0, (1, 2), 7, 0, 3)
        )
    }
    assert snap.errors == ()
    model.apply(Reply(state_reads[0], Code.NO_AUTH))
    refused = model.build(2, 0.0, 0.0, False)
    assert refused.errors == (ZnodeError(state_path("orders", 0), REFUSED),)
    # a state that cannot be read is unknown, not absent (which would read as offline)
    assert refused.partitions[tp("orders", 0)].state is None
    assert refused.partitions[tp("orders", 0)].state_error == REFUSED
    model.apply(Reply(state_reads[0], Code.OK, state(1, [1, 2]), version=4))
    readable = model.build(3, 0.0, 0.0, False)
    assert (readable.errors, readable.partitions[tp("orders", 0)].state_error) == ((), None)


@pytest.mark.unit
def test_the_model_reads_the_migration_znode_and_a_kraft_controller() -> None:
    """``/migration`` and the KRaft form of ``/controller`` (Kafka 3.4-3.9 formats), then a rollback to a ZK
    controller and ``/migration`` gone; a bad ``/migration`` is reported, not guessed."""
    model = ClusterModel()
    reads = {r.path: r for r in model.root_reads()}
    assert "/migration" in reads
    model.apply(
        Reply(reads["/controller"], Code.OK, js({"version": 2, "brokerid": 3000, "timestamp": "1",
                                                 "kraftControllerEpoch": 4}))
    )  # fmt: skip
    migration = js({"version": 0, "kraft_controller_id": 3000, "kraft_controller_epoch": 4,
                    "kraft_metadata_offset": 812, "kraft_metadata_epoch": 4})  # fmt: skip
    model.apply(Reply(reads["/migration"], Code.OK, migration, version=5))
    snap = model.build(1, 0.0, 0.0, False)
    assert snap.controller.broker_id == 3000
    assert snap.controller.is_kraft
    assert snap.migration == MigrationState(3000, 4, 812, 4, version=0, zk_version=5)

    model.apply(Reply(reads["/controller"], Code.OK, js({"version": 2, "brokerid": 1, "timestamp": "2",
                                                         "kraftControllerEpoch": -1})))  # fmt: skip
    model.apply(Reply(reads["/migration"], Code.OK, js({"version": 1}), version=6))
    snap = model.build(2, 0.0, 0.0, False)
    assert (snap.controller.broker_id, snap.controller.is_kraft, snap.migration) == (1, False, None)
    assert [e.path for e in snap.errors] == ["/migration"]
    model.apply(Reply(reads["/migration"], Code.NO_NODE))
    assert model.build(3, 0.0, 0.0, False).errors == ()


@pytest.mark.unit
def test_a_log_dir_notification_deleted_before_its_data_is_read_still_counts() -> None:
    """The controller deletes ``log_dir_event_<n>`` within milliseconds: a child listed but gone (NoNode)
    when its data is read advances ``log_dir_event_sequence`` (a log dir failed just now) with no event
    (the broker is unknown: never guessed); a later listing without it does not move the sequence back."""
    parent = "/log_dir_event_notification"
    model = ClusterModel()
    listing = next(r for r in model.root_reads() if r.path == parent)
    assert model.build(1, 0.0, 0.0, False).log_dir_event_sequence is None
    model.dirty = False
    reads = model.apply(Reply(listing, Code.OK, children=["log_dir_event_0000000007"])) or []
    assert model.dirty
    assert [r.path for r in reads] == [f"{parent}/log_dir_event_0000000007"]
    model.apply(Reply(reads[0], Code.NO_NODE))
    snap = model.build(2, 0.0, 0.0, False)
    assert (snap.log_dir_events, snap.log_dir_event_sequence, snap.errors) == ((), 7, ())

    model.apply(Reply(listing, Code.OK, children=[]))  # the controller's deletion
    assert model.build(3, 0.0, 0.0, False).log_dir_event_sequence == 7
    reads = model.apply(Reply(listing, Code.OK, children=["log_dir_event_0000000008"])) or []
    model.apply(Reply(reads[0], Code.OK, encode_log_dir_event(2)))
    snap = model.build(4, 0.0, 0.0, False)
    assert (snap.log_dir_events, snap.log_dir_event_sequence) == ((LogDirEvent(2, 8),), 8)


@pytest.mark.integration
def test_log_dir_failure_notifications_are_read_until_the_controller_deletes_them(
    zk_client: KazooClient, start_collector: CollectorFactory
) -> None:
    """``/log_dir_event_notification``'s children, as a broker writes them (Kafka's
    LogDirEventNotificationZNode), in the full scan and through the watch; a malformed one is an error."""
    parent = "/log_dir_event_notification"
    write(
        zk_client,
        {
            **healthy_tree(),
            f"{parent}/log_dir_event_0000000003": encode_log_dir_event(2),
            f"{parent}/log_dir_event_0000000004": b"{not json",
            f"{parent}/not_an_event": encode_log_dir_event(1),
        },
    )
    collector = start_collector()
    snap = collector.snapshot
    assert snap.log_dir_events == (LogDirEvent(broker=2, sequence=3),)
    reasons = {e.path: e.reason for e in snap.errors}
    assert "invalid JSON" in reasons[f"{parent}/log_dir_event_0000000004"]
    assert "not a log_dir_event_<sequence>" in reasons[f"{parent}/not_an_event"]

    zk_client.create(ROOT + f"{parent}/log_dir_event_0000000005", encode_log_dir_event(5))
    snap = wait_for(
        lambda: collector.snapshot if len(collector.snapshot.log_dir_events) == 2 else None, 5, "a new event"
    )
    assert snap.log_dir_events == (LogDirEvent(2, 3), LogDirEvent(5, 5))

    for name in ("log_dir_event_0000000003", "log_dir_event_0000000004", "log_dir_event_0000000005"):
        zk_client.delete(ROOT + f"{parent}/{name}")  # the controller handled them
    snap = wait_for(
        lambda: collector.snapshot if not collector.snapshot.log_dir_events else None, 5, "the deletions"
    )
    assert [e.path for e in snap.errors] == [f"{parent}/not_an_event"]
    assert collector.full_scans == 1
