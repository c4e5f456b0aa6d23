"""Bulk mode: a cluster written straight into a real ZooKeeper reads back as Kafka would have written it."""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Create

from app.embedded.reference_cluster.bulk import (
    BulkClusterSpec,
    BulkWriteReport,
    ClusterExistsError,
    FaultKind,
    write_bulk_cluster,
)
from app.embedded.reference_cluster.bulk.plan import Op, batches, plan_cluster
from app.embedded.reference_cluster.bulk.writer import delete_trees, kafka_layout_children
from collectors.kafka import zkdata
from collectors.kafka.model import (
    NO_LEADER,
    BrokerRegistration,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicPartition,
)
from collectors.kafka.placement import assign_replicas
from tests.support.zookeeper import ZkClientFactory, ZooKeeperEndpoint

SPEC = BulkClusterSpec(
    brokers=10,
    topics=20,
    partitions_per_topic=10,
    replication_factor=3,
    racks=3,
    under_replicated_fraction=0.1,
    offline_fraction=0.1,
    non_preferred_fraction=0.1,
    seed=7,
    topic_configs={"min.insync.replicas": "2", "retention.ms": "3600000"},
)
CHROOT = "/kafka"
_STATE = re.compile(r"^/brokers/topics/([^/]+)/partitions/(\d+)/state$")
_PARTITION = re.compile(r"^/brokers/topics/[^/]+/partitions(/\d+)?$")


@dataclass
class ReadBack:
    """Every znode of the cluster, decoded with the collectors' decoders."""

    znodes: int = 0
    cluster_id: str = ""
    controller: int = -1
    controller_epoch: tuple[int, int] = (0, -1)
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, tuple[dict[int, ReplicaAssignment], str | None]] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    null_data: list[str] = field(default_factory=list)
    undecoded: list[str] = field(default_factory=list)


def read_back(client: KazooClient) -> ReadBack:
    """Walk the whole tree level by level, every level's reads pipelined."""
    result = ReadBack()
    level = [f"/{child}" for child in client.get_children("/")]
    while level:
        reads = [(path, client.get_async(path), client.get_children_async(path)) for path in level]
        level = []
        for path, data, children in reads:
            _decode(result, path, *data.get(timeout=30))
            result.znodes += 1
            level.extend(f"{path}/{child}" for child in children.get(timeout=30))
    return result


def _decode(result: ReadBack, path: str, data: bytes | None, stat: Any) -> None:
    parent, _, name = path.rpartition("/")
    if state := _STATE.match(path):
        tp = TopicPartition(state.group(1), int(state.group(2)))
        result.states[tp] = zkdata.decode_partition_state(path, data, stat.version)
    elif parent == zkdata.BROKER_IDS_PATH:
        result.brokers[int(name)] = zkdata.decode_broker_registration(path, int(name), data, stat.czxid)
    elif parent == zkdata.BROKER_TOPICS_PATH:
        result.topics[name] = zkdata.decode_topic(path, data)
    elif parent == "/config/topics":
        result.configs[name] = zkdata.decode_config(path, data)
    elif path == zkdata.CLUSTER_ID_PATH:
        result.cluster_id = zkdata.decode_cluster_id(path, data)
    elif path == zkdata.CONTROLLER_PATH:
        result.controller = zkdata.decode_controller(path, data)
    elif path == zkdata.CONTROLLER_EPOCH_PATH:
        result.controller_epoch = (zkdata.decode_controller_epoch(path, data), stat.version)
    elif data is None:
        result.null_data.append(path)
    else:
        result.undecoded.append(path)


def write_and_read(
    connect: str, make_zk_client: ZkClientFactory, spec: BulkClusterSpec = SPEC, **options: Any
) -> tuple[BulkWriteReport, ReadBack]:
    report = write_bulk_cluster(connect, spec, **options)
    return report, read_back(make_zk_client(hosts=connect))


def delete_fast(hosts: str, path: str) -> None:
    """Remove a written cluster with the bulk deleter: the harness's sequential delete takes seconds."""
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        delete_trees([client], [path], batch_ops=200, in_flight=16)
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def written(zookeeper_server: ZooKeeperEndpoint) -> Iterator[tuple[BulkWriteReport, ReadBack, str]]:
    """SPEC written once, into a nested chroot that does not exist yet, and read back fully."""
    chroot = f"/t-bulk-{uuid.uuid4().hex[:8]}{CHROOT}"
    connect = f"{zookeeper_server.connect_string}{chroot}"
    try:
        report = write_bulk_cluster(connect, SPEC)
        client = KazooClient(hosts=connect)
        client.start(timeout=15)
        try:
            cluster = read_back(client)
        finally:
            client.stop()
            client.close()
        yield report, cluster, chroot
    finally:
        delete_fast(zookeeper_server.connect_string, chroot.rsplit("/", 1)[0])


@pytest.fixture
def cluster_connect(zk_connect: str, zk_chroot: str, zookeeper_server: ZooKeeperEndpoint) -> Iterator[str]:
    """Where a test writes its own cluster: ``<the test's chroot>/kafka``, removed fast afterwards."""
    yield f"{zk_connect}{CHROOT}"
    delete_fast(zookeeper_server.connect_string, zk_chroot)


def fault_of(state: LeaderAndIsr, replicas: tuple[int, ...]) -> FaultKind:
    if state.leader == NO_LEADER:
        assert (state.isr, state.leader_epoch) == ((replicas[0],), 1)
        return FaultKind.OFFLINE
    if state.leader != replicas[0]:
        assert (state.leader, state.leader_epoch, set(state.isr)) == (replicas[1], 1, set(replicas))
        return FaultKind.NON_PREFERRED
    assert state.leader_epoch == 0
    if state.isr != replicas:
        assert state.isr == replicas[:-1]
        return FaultKind.UNDER_REPLICATED
    return FaultKind.NONE


# --- integration: a real ZooKeeper -------------------------------------------------------------------


@pytest.mark.integration
def test_every_znode_decodes_and_the_counts_match(written: tuple[BulkWriteReport, ReadBack, str]) -> None:
    report, cluster, _ = written

    assert cluster.undecoded == []
    assert cluster.znodes == report.znodes
    assert (report.brokers, report.topics, report.partitions) == (10, 20, 200)
    assert sorted(cluster.brokers) == list(range(10))
    assert sorted(cluster.topics) == [SPEC.topic_name(i) for i in range(20)]
    assert len(cluster.states) == 200
    assert all(len(assignment) == 10 for assignment, _ in cluster.topics.values())
    assert cluster.configs == dict.fromkeys(cluster.topics, SPEC.topic_configs)
    topic_ids = {topic_id for _, topic_id in cluster.topics.values()}
    assert len(topic_ids) == 20
    assert all(topic_id is not None and len(topic_id) == 22 for topic_id in topic_ids)
    assert len(cluster.cluster_id) == 22


@pytest.mark.integration
def test_kafka_paths_hold_null_data_and_the_controller_is_set(
    written: tuple[BulkWriteReport, ReadBack, str],
    zookeeper_server: ZooKeeperEndpoint,
    make_zk_client: ZkClientFactory,
) -> None:
    _, cluster, chroot = written

    for path in zkdata.PERSISTENT_PATHS:
        assert path in cluster.null_data
    assert sum(bool(_PARTITION.match(p)) for p in cluster.null_data) == 20 + 200
    assert cluster.controller == SPEC.controller_id
    assert cluster.controller_epoch == (SPEC.controller_epoch, 1)
    root = make_zk_client(hosts=zookeeper_server.connect_string)
    assert root.get(chroot)[0] is None  # the chroot was created, with null data as Kafka creates it


@pytest.mark.integration
def test_brokers_register_as_kafka_brokers_in_their_racks(
    written: tuple[BulkWriteReport, ReadBack, str],
) -> None:
    _, cluster, _ = written

    for broker_id, broker in cluster.brokers.items():
        assert broker.version == 5
        assert broker.rack == f"rack-{broker_id % 3}"
        assert [e.connection_string() for e in broker.endpoints] == [
            f"PLAINTEXT://broker-{broker_id}.bulk:9092"
        ]
        assert (broker.host, broker.port) == (f"broker-{broker_id}.bulk", 9092)
        assert broker.broker_epoch > 0


@pytest.mark.integration
def test_replicas_follow_kafka_placement_with_the_seed(
    written: tuple[BulkWriteReport, ReadBack, str],
) -> None:
    _, cluster, _ = written

    rng = random.Random(SPEC.seed)
    racks = {b: f"rack-{b % 3}" for b in range(10)}
    for index in range(SPEC.topics):
        expected = assign_replicas(10, 3, racks, rng=rng)
        assignment, _ = cluster.topics[SPEC.topic_name(index)]
        assert {p: list(a.replicas) for p, a in assignment.items()} == expected
    for assignment, _ in cluster.topics.values():
        for a in assignment.values():
            assert len({racks[b] for b in a.replicas}) == 3


@pytest.mark.integration
def test_fault_fractions_give_the_partition_states(written: tuple[BulkWriteReport, ReadBack, str]) -> None:
    report, cluster, _ = written

    kinds: Counter[FaultKind] = Counter()
    for tp, state in cluster.states.items():
        replicas = cluster.topics[tp.topic][0][tp.partition].replicas
        kind = fault_of(state, replicas)
        kinds[kind] += 1
        assert state.controller_epoch == SPEC.controller_epoch
        assert state.zk_version == (0 if kind == FaultKind.NONE else 1)
    assert kinds == {
        FaultKind.NONE: 140,
        FaultKind.UNDER_REPLICATED: 20,
        FaultKind.OFFLINE: 20,
        FaultKind.NON_PREFERRED: 20,
    }
    assert (report.under_replicated, report.offline, report.non_preferred) == (20, 20, 20)


@pytest.mark.integration
def test_an_existing_cluster_is_refused_unless_overwrite(
    cluster_connect: str, make_zk_client: ZkClientFactory
) -> None:
    first, _ = write_and_read(cluster_connect, make_zk_client)
    client = make_zk_client(hosts=cluster_connect)
    client.create("/not-kafka", b"keep me")
    # Off Kafka's layout, which the fast delete assumes at first: the fallback must remove these too.
    topic = SPEC.topic_name(3)
    client.create(f"/brokers/topics/{topic}/partitions/0/extra", b"x")
    client.delete(f"/brokers/topics/{topic}/partitions/1/state")
    client.create("/brokers/ids/4/extra", b"x")

    with pytest.raises(
        ClusterExistsError,
        match=r"already holds a Kafka cluster \(/brokers/topics has children.*overwrite=True",
    ):
        write_bulk_cluster(cluster_connect, SPEC)

    other = replace(SPEC, seed=8, topics=5, under_replicated_fraction=0.0)
    report, cluster = write_and_read(
        cluster_connect, make_zk_client, other, overwrite=True, connections=3, batch_ops=7
    )
    assert report.deleted_znodes == first.znodes + 1
    assert cluster.znodes == report.znodes + 1  # + /not-kafka
    assert client.get("/not-kafka")[0] == b"keep me"
    assert sorted(cluster.topics) == [other.topic_name(i) for i in range(5)]
    assert report.under_replicated == 0


@pytest.mark.integration
def test_existing_empty_kafka_paths_are_no_cluster(
    cluster_connect: str, make_zk_client: ZkClientFactory
) -> None:
    client = make_zk_client()
    client.ensure_path(f"{CHROOT}/brokers/topics")
    client.ensure_path(f"{CHROOT}/config/topics")

    report, cluster = write_and_read(cluster_connect, make_zk_client, replace(SPEC, topics=2))

    assert cluster.znodes == report.znodes + 4  # /brokers, /brokers/topics, /config, /config/topics
    assert len(cluster.states) == 20


# --- unit: no sockets --------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"brokers": 0}, "brokers must be an integer of at least 1, got 0"),
        ({"topics": 0}, "topics must be an integer of at least 1, got 0"),
        ({"partitions_per_topic": -1}, "partitions_per_topic must be an integer of at least 1, got -1"),
        ({"replication_factor": 0}, "replication_factor must be an integer of at least 1, got 0"),
        ({"brokers": 2}, "replication_factor 3 is larger than the number of brokers 2"),
        ({"racks": -1}, "racks must be 0 (no racks) or more, got -1"),
        ({"offline_fraction": 1.5}, "offline_fraction must be between 0 and 1, got 1.5"),
        ({"under_replicated_fraction": -0.1}, "under_replicated_fraction must be between 0 and 1, got -0.1"),
        (
            {"under_replicated_fraction": 0.5, "offline_fraction": 0.4, "non_preferred_fraction": 0.3},
            "the fault fractions add up to 1.2 (under_replicated_fraction 0.5 + offline_fraction 0.4 + "
            "non_preferred_fraction 0.3); their sum must not exceed 1",
        ),
        (
            {"replication_factor": 1, "non_preferred_fraction": 0.1},
            "non_preferred_fraction needs replication_factor >= 2",
        ),
        ({"topic_prefix": "bad topic "}, "illegal topic name 'bad topic 999'"),
        (
            {"broker_registration_version": 6},
            "broker_registration_version must be one of (1, 2, 3, 4, 5), got 6",
        ),
        ({"racks": 3, "broker_registration_version": 2}, "racks need broker_registration_version >= 3"),
        ({"controller_id": 1000}, "controller_id must be a broker id (0..999), got 1000"),
        ({"controller_epoch": 0}, "controller_epoch must be at least 1, got 0"),
    ],
)
def test_spec_validation_explains_the_mistake(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        BulkClusterSpec(**options)


@pytest.mark.unit
def test_writer_options_are_checked_before_any_connection() -> None:
    with pytest.raises(ValueError, match="connections, batch_ops and in_flight must each be at least 1"):
        write_bulk_cluster("unreachable:1/kafka", SPEC, connections=0)


@pytest.mark.unit
def test_fault_counts_round_and_never_exceed_the_partitions() -> None:
    spec = BulkClusterSpec(
        brokers=3, topics=1, partitions_per_topic=3, under_replicated_fraction=0.5, offline_fraction=0.5
    )
    assert spec.fault_counts() == {
        FaultKind.UNDER_REPLICATED: 2,
        FaultKind.OFFLINE: 1,
        FaultKind.NON_PREFERRED: 0,
    }
    assert sum(len(t.faults) for t in plan_cluster(spec).topics) == 3


@pytest.mark.unit
def test_the_plan_is_reproducible_from_the_seed() -> None:
    assert plan_cluster(SPEC) == plan_cluster(SPEC)
    assert plan_cluster(SPEC) != plan_cluster(replace(SPEC, seed=8))


@pytest.mark.unit
def test_the_fast_delete_assumes_only_kafkas_own_layout() -> None:
    assert kafka_layout_children("/brokers/topics/t/partitions/7") == ("state",)
    assert kafka_layout_children("/brokers/topics/t/partitions/7/state") == ()
    assert kafka_layout_children("/brokers/ids/3") == ()
    assert kafka_layout_children("/config/topics/t") == ()
    for listed in (
        "/brokers/topics/t",
        "/brokers/topics/t/partitions",
        "/config/users/u",
        "/t/brokers/ids/3",
    ):
        assert kafka_layout_children(listed) is None


@pytest.mark.unit
def test_batches_keep_the_order_and_both_limits() -> None:
    ops = [Op(Create, f"/n{i}", b"x" * 100) for i in range(25)]
    assert [len(b) for b in batches(ops, batch_ops=10)] == [10, 10, 5]
    by_bytes = list(batches(ops, batch_ops=100, max_bytes=1000))
    assert all(len(b) <= 5 for b in by_bytes)
    assert [op for b in by_bytes for op in b] == ops
