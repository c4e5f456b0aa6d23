"""The reference cluster speaks Kafka's protocol: kafka-python's own clients against its brokers.

Module-scoped: one cluster (listeners on free ports) with two simulated groups, which the read-only tests
share; the tests that stop a broker or a group use a cluster of their own.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.protocol.consumer import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ConsumerGroupSpec, TopicSpec
from app.embedded.reference_cluster.control import ControlApi
from app.embedded.reference_cluster.groups import OFFSETS_TOPIC, offsets_partition
from collectors.kafka import zkdata
from collectors.kafka.model import TopicPartition as Tp
from tests.support.reference_cluster import ClusterFactory, small_settings, wait_for, zk_partitions
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

GROUPS = [
    ConsumerGroupSpec(name="billing", topics=["orders"], members=2, commit_interval_ms=500),
    ConsumerGroupSpec(name="audit", topics=["orders", "payments"], members=3, commit_interval_ms=500),
]
TOPICS = [
    TopicSpec(name="orders", partitions=4, replication_factor=3),
    TopicSpec(name="payments", partitions=2, replication_factor=2),
]


def free_settings(**overrides: Any) -> Any:
    return small_settings(topics=TOPICS, listener_port_base=0, **overrides)


@pytest.fixture(scope="module")
def cluster(zookeeper_server: ZooKeeperEndpoint) -> Iterator[ReferenceCluster]:
    with own_chroot(zookeeper_server, "kproto") as connect:
        c = ReferenceCluster(free_settings(consumer_groups=GROUPS), connect)
        c.start()
        try:
            yield c
        finally:
            c.stop()
        assert c.errors == []


@pytest.fixture(scope="module")
def admin(cluster: ReferenceCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=20_000)
    yield client
    client.close()


@pytest.fixture(scope="module")
def consumer(cluster: ReferenceCluster) -> Iterator[KafkaConsumer]:
    client = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=20_000)
    yield client
    client.close()


def snapshot(cluster: ReferenceCluster) -> dict[str, Any]:
    """Committed offsets of every group and (log start, log end) of every partition, at one moment."""

    def take() -> dict[str, Any]:
        view = cluster.metadata_view()
        logs = {}
        for topic in ("orders", "payments"):
            for p in range(view.partition_count(topic)):
                tp = Tp(topic, p)
                leader = cluster._leader_of(tp)
                assert leader is not None
                logs[tp] = cluster.log_offsets(leader, tp)
        groups = {g.name: dict(g.committed) for g in cluster.consumer_groups.groups.values()}
        return {"logs": logs, "groups": groups}

    return cluster.loop.call(take)


# --- kafka-python's own clients ------------------------------------------------------------------------


def test_list_groups_lists_the_simulated_groups(admin: KafkaAdminClient) -> None:
    groups = admin.list_groups()
    assert sorted(g["group_id"] for g in groups) == ["audit", "billing"]
    assert {g["protocol_type"] for g in groups} == {"consumer"}


def test_list_group_offsets_returns_the_committed_offsets(
    cluster: ReferenceCluster, admin: KafkaAdminClient
) -> None:
    def matches() -> bool:
        before = snapshot(cluster)["groups"]
        got = admin.list_group_offsets(["billing", "audit"])
        after = snapshot(cluster)["groups"]
        for name in ("billing", "audit"):
            offsets = {Tp(tp.topic, tp.partition): om.offset for tp, om in got[name].items()}
            if offsets != before[name] and offsets != after[name]:
                return False
        return True

    wait_for(matches, message="list_group_offsets equal to the groups' committed offsets")
    got = admin.list_group_offsets("audit")["audit"]
    assert {(tp.topic, tp.partition) for tp in got} == {("orders", p) for p in range(4)} | {
        ("payments", 0),
        ("payments", 1),
    }


def test_end_and_beginning_offsets_are_the_logs(cluster: ReferenceCluster, consumer: KafkaConsumer) -> None:
    partitions = [TopicPartition("orders", p) for p in range(4)] + [TopicPartition("payments", 0)]

    def matches() -> bool:
        before = snapshot(cluster)["logs"]
        ends = consumer.end_offsets(partitions)
        starts = consumer.beginning_offsets(partitions)
        after = snapshot(cluster)["logs"]
        for tp in partitions:
            key = Tp(tp.topic, tp.partition)
            if not before[key][1] <= ends[tp] <= after[key][1]:
                return False
            if not before[key][0] <= starts[tp] <= after[key][0]:
                return False
        return True

    wait_for(matches, message="end/beginning offsets within one round of the logs")
    ends = consumer.end_offsets(partitions)
    assert all(offset > 0 for offset in ends.values())  # the logs hold the preloaded data and grow


def test_describe_groups_gives_state_members_and_assignment(admin: KafkaAdminClient) -> None:
    described = admin.describe_groups(["audit", "nobody"])
    audit = described["audit"]
    assert (audit["group_state"], audit["protocol_type"], audit["error"]) == ("Stable", "consumer", None)
    assert len(audit["members"]) == 3
    assigned = sorted(
        (assigned["topic"], p)
        for m in audit["members"]
        for assigned in m["member_assignment"]["assigned_partitions"]
        for p in assigned["partitions"]
    )
    assert assigned == sorted([("orders", p) for p in range(4)] + [("payments", 0), ("payments", 1)])
    assert all(m["client_id"].startswith("consumer-audit-") for m in audit["members"])
    assert described["nobody"]["group_state"] == "Dead"


def test_the_offsets_topic_is_created_as_kafka_creates_it(
    cluster: ReferenceCluster, make_zk_client: Any
) -> None:
    zk: KazooClient = make_zk_client(hosts=cluster.zookeeper)
    partitions = [p for p in zk_partitions(zk).values() if p.topic == OFFSETS_TOPIC]
    assert len(partitions) == 50
    assert {len(p.replicas) for p in partitions} == {3}
    data, _ = zk.get(f"/config/topics/{OFFSETS_TOPIC}")
    assert b'"cleanup.policy":"compact"' in data.replace(b" ", b"")


def test_find_coordinator_names_the_leader_of_the_hashed_partition(
    cluster: ReferenceCluster, admin: KafkaAdminClient, make_zk_client: Any
) -> None:
    zk: KazooClient = make_zk_client(hosts=cluster.zookeeper)
    leaders = {key: p.leader for key, p in zk_partitions(zk).items()}
    for group in ("audit", "billing"):
        expected = leaders[(OFFSETS_TOPIC, offsets_partition(group))]
        # ListGroups at that broker only lists the groups it coordinates
        listed = {g["group_id"] for g in admin.list_groups(broker_ids=[expected])}
        assert group in listed
        others = [b for b in cluster.brokers if b != expected]
        assert all(group not in {g["group_id"] for g in admin.list_groups(broker_ids=[b])} for b in others)


def raw_request(host: str, port: int, request: Any) -> Any:
    protocol = KafkaProtocol(client_id="test")
    with socket.create_connection((host, port), timeout=20) as sock:
        protocol.send_request(request)
        sock.sendall(protocol.send_bytes())
        while True:
            data = sock.recv(65536)
            assert data, "the broker closed the connection"
            responses = protocol.receive_bytes(data)
            if responses:
                return responses[0][1]


def test_list_offsets_at_a_follower_is_not_leader_or_follower(cluster: ReferenceCluster) -> None:
    tp = Tp("orders", 0)
    state = cluster.loop.call(lambda: cluster.partition_state(tp))
    assert state is not None
    follower = next(b for b in cluster.brokers if b != state.leader)
    endpoint = cluster.brokers[follower].endpoint
    topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        version=5,
        replica_id=-1,
        isolation_level=0,
        topics=[
            topic(name="orders", partitions=[topic.ListOffsetsPartition(partition_index=0, timestamp=-1)])
        ],
    )
    response = raw_request(endpoint.host, endpoint.port, request)
    assert isinstance(response, ListOffsetsResponse)
    assert response.topics[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
    leader = cluster.brokers[state.leader].endpoint
    response = raw_request(leader.host, leader.port, request)
    assert response.topics[0].partitions[0].error_code == 0
    assert response.topics[0].partitions[0].offset > 0


def test_metadata_answers_the_leaders_and_isrs_of_the_state_znodes(
    cluster: ReferenceCluster, make_zk_client: Any
) -> None:
    zk: KazooClient = make_zk_client(hosts=cluster.zookeeper)
    endpoint = cluster.brokers[2].endpoint
    topic = MetadataRequest.MetadataRequestTopic

    def matches() -> bool:
        response = raw_request(
            endpoint.host, endpoint.port, MetadataRequest(version=9, topics=[topic(name="orders")])
        )
        known = zk_partitions(zk)
        [answer] = response.topics
        got = {
            ("orders", p.partition_index): (p.leader_id, tuple(p.isr_nodes), tuple(p.replica_nodes))
            for p in answer.partitions
        }
        expected = {key: (z.leader, z.isr, z.replicas) for key, z in known.items() if key[0] == "orders"}
        return got == expected and sorted(b.node_id for b in response.brokers) == [0, 1, 2]

    wait_for(matches, message="Metadata equal to the state znodes")
    response = raw_request(
        endpoint.host, endpoint.port, MetadataRequest(version=9, topics=[topic(name="nope")])
    )
    assert response.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: no auto-creation


def test_the_registered_endpoint_is_where_the_broker_listens(
    cluster: ReferenceCluster, make_zk_client: Any
) -> None:
    zk: KazooClient = make_zk_client(hosts=cluster.zookeeper)
    for broker_id in cluster.brokers:
        path = zkdata.broker_path(broker_id)
        data, stat = zk.get(path)
        registration = zkdata.decode_broker_registration(path, broker_id, data, stat.czxid)
        endpoint = registration.endpoints[0]
        with socket.create_connection((endpoint.host, endpoint.port), timeout=10):
            pass


# --- faults: a cluster of their own --------------------------------------------------------------------


def test_a_stopped_broker_refuses_connections_and_listens_again_after_a_start(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster(free_settings())
    endpoint = cluster.brokers[1].endpoint
    socket.create_connection((endpoint.host, endpoint.port), timeout=10).close()
    cluster.stop_broker(1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((endpoint.host, endpoint.port), timeout=10)
    cluster.start_broker(1)
    assert cluster.brokers[1].endpoint.port == endpoint.port
    socket.create_connection((endpoint.host, endpoint.port), timeout=10).close()


def test_a_stopped_coordinator_hands_its_groups_to_the_new_leader(make_cluster: ClusterFactory) -> None:
    """Raw requests at the live brokers (kafka-python's clients would keep dialling the stopped one)."""
    cluster = make_cluster(free_settings(consumer_groups=GROUPS[:1]))
    coordinator = cluster.loop.call(lambda: cluster.group_coordinator("billing"))
    assert coordinator is not None
    cluster.stop_broker(coordinator.id)
    live = next(b for b in cluster.brokers.values() if b.id != coordinator.id)

    def new_coordinator() -> Any:
        answer = raw_request(
            live.endpoint.host,
            live.endpoint.port,
            FindCoordinatorRequest(version=3, key="billing", key_type=0),
        )
        return answer if answer.error_code == 0 and answer.node_id != coordinator.id else None

    found = wait_for(new_coordinator, message="a new coordinator for the group")
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    answer = raw_request(
        found.host, found.port, OffsetFetchRequest(version=8, groups=[group(group_id="billing", topics=None)])
    )
    [fetched] = answer.groups
    assert fetched.error_code == 0
    offsets = {(t.name, p.partition_index): p.committed_offset for t in fetched.topics for p in t.partitions}
    assert sorted(offsets) == [("orders", p) for p in range(4)]
    assert all(o > 0 for o in offsets.values())
    moved = cluster.loop.call(lambda: cluster.group_coordinator("billing"))
    assert moved is not None
    assert moved.id == found.node_id


def test_group_routes_start_stop_stall_slow_and_rewind_a_group(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(free_settings())
    api = ControlApi(cluster)

    def post(path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        return api.handle("POST", path, json.dumps(body or {}).encode())

    status, state = post(
        "/consumer-groups",
        {"name": "g", "topics": ["orders"], "members": 2, "commit_interval_ms": 200, "rate_factor": 1.0},
    )
    assert status == 200, state
    [described] = state["consumer_groups"]
    assert (described["name"], described["members"], described["state"]) == ("g", 2, "Stable")
    group = cluster.consumer_groups.groups["g"]

    def committed() -> dict[Tp, int]:
        return cluster.loop.call(lambda: dict(group.committed))

    def ends() -> dict[Tp, int | None]:
        return cluster.loop.call(lambda: {tp: cluster.high_watermark(tp) for tp in group.committed})

    first = committed()
    wait_for(lambda: all(committed()[tp] > o for tp, o in first.items()), message="commits that move")

    assert post("/consumer-groups/g/rewind", {"records": 1000})[0] == 200
    rewound = committed()
    log_ends = ends()
    lag = {tp: (log_ends[tp] or 0) - o for tp, o in rewound.items()}
    assert all(v >= 1000 for v in lag.values()), lag

    assert post("/consumer-groups/g/stall")[0] == 200
    stalled = committed()
    commits = cluster.loop.call(lambda: group.commits)
    wait_for(lambda: cluster.loop.call(lambda: group.commits) >= commits + 2, message="commits while stalled")
    assert committed() == stalled  # the commits go on; the offsets do not move

    assert post("/consumer-groups/g/slow", {"rate_factor": 0.5})[0] == 200
    assert post("/consumer-groups/g/start", {"rate_factor": 3.0})[0] == 200
    wait_for(lambda: all(committed()[tp] > o for tp, o in stalled.items()), message="a restarted group")

    assert post("/consumer-groups/g/stop")[0] == 200
    assert cluster.loop.call(lambda: (group.state, len(group.members))) == ("Empty", 0)
    stopped = committed()
    time.sleep(0.5)
    assert committed() == stopped

    # refusals: nothing applied
    assert post("/consumer-groups/g/stop")[0] == 409
    assert post("/consumer-groups/nobody/stop")[0] == 404
    assert post("/consumer-groups/g/rewind", {"records": -1})[0] == 422
    assert post("/consumer-groups/g/slow", {"rate_factor": "fast"})[0] == 422
    assert post("/consumer-groups", {"name": "g", "topics": ["orders"]})[0] == 409
    assert post("/consumer-groups", {"name": "h", "topics": ["nope"]})[0] == 422
    assert post("/consumer-groups", {"name": "h", "topics": ["orders"], "members": 0})[0] == 422
    assert sorted(cluster.consumer_groups.groups) == ["g"]
    assert committed() == stopped


def offset_commit(
    cluster: ReferenceCluster, group: str, offsets: dict[Tp, int], metadata: str = ""
) -> dict[Tp, int]:
    """OffsetCommit from outside the group (generation -1, no member id) at the group's coordinator:
    the error code of each partition."""
    coordinator = cluster.loop.call(lambda: cluster.group_coordinator(group))
    assert coordinator is not None
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            topic.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset, committed_metadata=metadata
            )
        )
    request = OffsetCommitRequest(
        version=8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[topic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    answer = raw_request(coordinator.endpoint.host, coordinator.endpoint.port, request)
    return {Tp(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def test_offset_commit_from_outside_a_group(make_cluster: ClusterFactory) -> None:
    """As Kafka's coordinator: a group nobody consumes in becomes a group of offsets only (Empty, no
    protocol type), with its metadata; a group with members refuses (UNKNOWN_MEMBER_ID), a stopped one
    takes the offsets and resumes from them; a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION."""
    cluster = make_cluster(free_settings(consumer_groups=GROUPS[:1]))
    orders_0, orders_1 = Tp("orders", 0), Tp("orders", 1)
    assert offset_commit(cluster, "reset-tool", {orders_0: 5, Tp("nope", 0): 1}, "by hand") == {
        orders_0: 0,
        Tp("nope", 0): 3,
    }
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=20_000)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert (listed["reset-tool"]["group_state"], listed["reset-tool"]["protocol_type"]) == ("Empty", "")
        fetched = admin.list_group_offsets("reset-tool")["reset-tool"]
        assert {(tp.topic, tp.partition): (o.offset, o.metadata) for tp, o in fetched.items()} == {
            ("orders", 0): (5, "by hand")
        }
        described = admin.describe_groups(["reset-tool"])["reset-tool"]
        assert (described["group_state"], described["members"]) == ("Empty", [])
    finally:
        admin.close()

    billing = cluster.consumer_groups.groups["billing"]
    before = cluster.loop.call(lambda: dict(billing.committed))
    assert offset_commit(cluster, "billing", {orders_0: 1}) == {orders_0: 25}  # UNKNOWN_MEMBER_ID
    assert cluster.loop.call(lambda: billing.committed[orders_0]) >= before[orders_0]

    cluster.consumer_group_action("billing", "stop", {})
    assert offset_commit(cluster, "billing", {orders_0: 1, orders_1: 2}) == {orders_0: 0, orders_1: 0}
    assert cluster.loop.call(lambda: (billing.committed[orders_0], billing.committed[orders_1])) == (1, 2)
    cluster.consumer_group_action("billing", "start", {"rate_factor": 1.0})
    wait_for(
        lambda: cluster.loop.call(lambda: billing.committed[orders_0] > 1),
        message="the restarted group consuming on from the committed offset",
    )


def test_append_writes_records_as_an_acks_all_producer(make_cluster: ClusterFactory) -> None:
    """Without simulated traffic the log end of a new topic is exactly what was appended, once the ISR
    has it (the start-up topics hold preloaded data)."""
    cluster = make_cluster(free_settings(traffic={"produce_bytes_per_sec": 0}))
    api = ControlApi(cluster)
    cluster.create_topic(TopicSpec(name="quiet", partitions=3, replication_factor=3))
    tp = Tp("quiet", 2)
    wait_for(lambda: cluster.loop.call(lambda: cluster.high_watermark(tp)) is not None, message="a leader")
    assert cluster.loop.call(lambda: cluster.high_watermark(tp)) == 0
    status, _ = api.handle("POST", "/topics/quiet/partitions/2/append", b'{"records": 7}')
    assert status == 200
    assert cluster.loop.call(lambda: cluster.high_watermark(tp)) == 7
    assert cluster.append_records(tp, 3) == 10
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=20_000)
    try:
        assert consumer.end_offsets([TopicPartition("quiet", 2)]) == {TopicPartition("quiet", 2): 10}
    finally:
        consumer.close()
    assert api.handle("POST", "/topics/quiet/partitions/2/append", b'{"records": 0}')[0] == 422
    assert api.handle("POST", "/topics/quiet/partitions/2/append", b'{"records": "7"}')[0] == 422
    assert api.handle("POST", "/topics/quiet/partitions/9/append", b'{"records": 1}')[0] == 404
    assert cluster.loop.call(lambda: cluster.high_watermark(tp)) == 10
