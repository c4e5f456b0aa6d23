"""The same checks of a :class:`GroupOffsetsReader` on the in-memory fake, on a real Kafka-protocol broker
(Tansu, ``kafka_broker``) for what Tansu answers, and on the reference cluster's brokers: ListOffsets (log
start and end, batched over topics and partitions) and OffsetFetch of offsets committed by a plain assigned
consumer (kafka-python's ``KafkaConsumer``, OffsetCommit over the wire on both real peers).

The reference cluster (one for the module, 3 brokers) has no simulated traffic, so that a partition's log
end is exactly the records written to it (:meth:`ReferenceCluster.append_records`, an ``acks=all``
producer's write)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.groups import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS
from collectors.consumers.client import GroupOffsetsReader, open_reader
from collectors.consumers.collector import ConsumerLagCollector
from collectors.consumers.config import KafkaSettings
from collectors.kafka.model import BrokerEndpoint, BrokerRegistration, TopicPartition
from tests.support.consumer_groups_fake import FakeGroupOffsets
from tests.support.reference_cluster import small_settings
from tests.support.tansu import TansuLog, unique_topic
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

# kafka-python 3 reads its protocol schemas with importlib.resources' legacy read_text
pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")


class Peer(Protocol):
    """A cluster the test writes to, and the reader under test on it."""

    reader: GroupOffsetsReader

    def create_topic(self, topic: str, partitions: int) -> None: ...
    def produce(self, tp: TopicPartition, records: int) -> None: ...
    def commit(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "") -> None: ...


class FakePeer:
    def __init__(self) -> None:
        self.fake = FakeGroupOffsets()
        self.reader: GroupOffsetsReader = self.fake

    def create_topic(self, topic: str, partitions: int) -> None:
        self.fake.create_topic(topic, partitions)

    def produce(self, tp: TopicPartition, records: int) -> None:
        self.fake.produce(tp, records)

    def commit(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "") -> None:
        for tp, offset in offsets.items():
            self.fake.commit(group, tp, offset, metadata)


class TansuPeer:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.log = TansuLog(bootstrap)
        host, _, port = bootstrap.rpartition(":")
        registered = {0: BrokerRegistration(0, (BrokerEndpoint("PLAINTEXT", host, int(port)),))}
        self.reader: GroupOffsetsReader = open_reader(KafkaSettings(timeout_s=30), registered)

    def create_topic(self, topic: str, partitions: int) -> None:
        self.log.create_topic(topic, partitions)

    def produce(self, tp: TopicPartition, records: int) -> None:
        """One record per producer batch: Tansu 0.x answers ListOffsets LATEST with the last batch's base
        offset + 1 (a Kafka broker, the high watermark), the same thing when every batch is one record."""
        for i in range(records):
            self.log.append(tp.topic, tp.partition, [f"r{i}"])

    def commit(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "") -> None:
        commit_as_plain_consumer(self.bootstrap, group, offsets, metadata)

    def close(self) -> None:
        self.reader.close()
        self.log.close()


def commit_as_plain_consumer(
    bootstrap: str, group: str, offsets: dict[TopicPartition, int], metadata: str
) -> None:
    """A plain consumer: ``group_id``, partitions assigned by hand, a synchronous commit."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer: Any = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","), group_id=group, enable_auto_commit=False
    )
    try:
        tps = {tp: KafkaTopicPartition(tp.topic, tp.partition) for tp in offsets}
        consumer.assign(list(tps.values()))
        consumer.commit({tps[tp]: OffsetAndMetadata(o, metadata, -1) for tp, o in offsets.items()})
    finally:
        consumer.close()


class ReferencePeer:
    """The reference cluster's brokers, bootstrapped from their registered endpoints as ``serve`` does."""

    def __init__(self, cluster: ReferenceCluster) -> None:
        self.cluster = cluster
        registered = {
            b.id: BrokerRegistration(b.id, (BrokerEndpoint("PLAINTEXT", b.endpoint.host, b.endpoint.port),))
            for b in cluster.brokers.values()
        }
        self.reader: GroupOffsetsReader = open_reader(KafkaSettings(timeout_s=30), registered)

    def create_topic(self, topic: str, partitions: int) -> None:
        """Created as ``kafka-topics --create`` does; returns once every partition has a leader."""
        self.cluster.create_topic(TopicSpec(name=topic, partitions=partitions, replication_factor=3))
        wait_for_leaders(self.cluster, [TopicPartition(topic, p) for p in range(partitions)])

    def produce(self, tp: TopicPartition, records: int) -> None:
        self.cluster.append_records(tp, records)

    def commit(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "") -> None:
        commit_as_plain_consumer(self.cluster.kafka_bootstrap(), group, offsets, metadata)

    def close(self) -> None:
        self.reader.close()


def wait_for_leaders(cluster: ReferenceCluster, partitions: list[TopicPartition]) -> None:
    cluster.wait_until(
        lambda: all(cluster.high_watermark(tp) is not None for tp in partitions),
        60,
        f"leaders of {partitions}",
    )


@pytest.fixture(scope="module")
def reference_cluster(zookeeper_server: ZooKeeperEndpoint) -> Iterator[ReferenceCluster]:
    """3 brokers, no topic and no simulated traffic; ``__consumer_offsets`` created and led up front."""
    settings = small_settings(topics=[], listener_port_base=0, traffic={"produce_bytes_per_sec": 0})
    with own_chroot(zookeeper_server, "contract") as connect:
        cluster = ReferenceCluster(settings, connect)
        cluster.start()
        try:
            cluster.ensure_offsets_topic()
            wait_for_leaders(
                cluster, [TopicPartition(OFFSETS_TOPIC, p) for p in range(OFFSETS_TOPIC_PARTITIONS)]
            )
            yield cluster
        finally:
            cluster.stop()
        assert cluster.errors == []


@pytest.fixture(
    params=[
        pytest.param("fake", marks=pytest.mark.unit),
        pytest.param("tansu", marks=pytest.mark.integration),
        pytest.param("reference", marks=pytest.mark.integration),
    ]
)
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    if request.param == "fake":
        yield FakePeer()
        return
    real: TansuPeer | ReferencePeer
    if request.param == "tansu":
        real = TansuPeer(request.getfixturevalue("kafka_broker"))
    else:
        real = ReferencePeer(request.getfixturevalue("reference_cluster"))
    try:
        yield real
    finally:
        real.close()


def test_log_offsets_of_partitions_of_several_topics(peer: Peer) -> None:
    a, b = unique_topic("lag-a"), unique_topic("lag-b")
    peer.create_topic(a, 2)
    peer.create_topic(b, 1)
    peer.produce(TopicPartition(a, 0), 5)
    peer.produce(TopicPartition(a, 1), 2)
    peer.produce(TopicPartition(a, 0), 3)
    offsets = peer.reader.log_offsets([TopicPartition(a, 0), TopicPartition(a, 1), TopicPartition(b, 0)])
    assert offsets == {
        TopicPartition(a, 0): (0, 8),
        TopicPartition(a, 1): (0, 2),
        TopicPartition(b, 0): (0, 0),
    }
    assert peer.reader.log_offsets([]) == {}


def test_log_offsets_leave_out_a_topic_that_does_not_exist(peer: Peer) -> None:
    """A group keeps its commits on a deleted topic: its partitions get no log offsets, the rest do."""
    topic = unique_topic("lag-f")
    peer.create_topic(topic, 1)
    peer.produce(TopicPartition(topic, 0), 2)
    gone = TopicPartition(unique_topic("lag-gone"), 0)
    assert peer.reader.log_offsets([TopicPartition(topic, 0), gone]) == {TopicPartition(topic, 0): (0, 2)}


def test_committed_offsets_of_a_plain_assigned_consumer(peer: Peer) -> None:
    topic = unique_topic("lag-c")
    group = f"lag-{uuid.uuid4().hex[:8]}"
    peer.create_topic(topic, 2)
    for partition in (0, 1):
        peer.produce(TopicPartition(topic, partition), 10)
    peer.commit(group, {TopicPartition(topic, 0): 7, TopicPartition(topic, 1): 10}, metadata="m")
    committed = peer.reader.committed_offsets(group)
    assert {tp: c.offset for tp, c in committed.items()} == {
        TopicPartition(topic, 0): 7,
        TopicPartition(topic, 1): 10,
    }
    peer.commit(group, {TopicPartition(topic, 0): 9})
    assert peer.reader.committed_offsets(group)[TopicPartition(topic, 0)].offset == 9


def test_a_group_that_never_committed_has_no_committed_offsets(peer: Peer) -> None:
    assert peer.reader.committed_offsets(f"lag-none-{uuid.uuid4().hex[:8]}") == {}


def test_a_group_that_committed_is_listed_and_described(peer: Peer) -> None:
    topic = unique_topic("lag-d")
    group = f"lag-{uuid.uuid4().hex[:8]}"
    peer.create_topic(topic, 1)
    peer.produce(TopicPartition(topic, 0), 3)
    peer.commit(group, {TopicPartition(topic, 0): 1})
    assert group in peer.reader.list_groups()
    described = peer.reader.describe_groups([group])
    assert described[group].group == group
    assert described[group].members == ()  # a plain assigned consumer never joins the group


def test_a_collector_round_on_the_peer(peer: Peer) -> None:
    topic = unique_topic("lag-e")
    group = f"lag-{uuid.uuid4().hex[:8]}"
    peer.create_topic(topic, 2)
    for partition, records in ((0, 4), (1, 2)):
        peer.produce(TopicPartition(topic, partition), records)
    peer.commit(group, {TopicPartition(topic, 0): 1, TopicPartition(topic, 1): 2})
    collector = ConsumerLagCollector(peer.reader, KafkaSettings(include=(re.escape(group),)))
    report = collector.round().groups[group]
    assert [(p.partition, p.committed, p.log_end, p.lag) for p in report.lag.partitions] == [
        (0, 1, 4, 3),
        (1, 2, 2, 0),
    ]
    assert report.lag.lag == 3
    assert report.lag.members == 0
    assert report.verdict.status == "no_consumer"
