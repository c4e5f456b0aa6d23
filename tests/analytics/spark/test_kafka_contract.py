"""The contract of :class:`analytics.spark.kafka_source.KafkaClient`, checked on both implementations the
tests use: the file-backed fake (``tests.support.kafka_fake``, behind the source's ``clientFactory``) and
kafka-python against a real Kafka-protocol broker (Tansu, ``tests.support.tansu``). What the source's unit
tests assume of the fake holds of the real thing; and the source reads a real broker's partitions in order,
whole, through Spark."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from analytics.spark.kafka_source import (
    KafkaClient,
    KafkaInputPartition,
    KafkaSourceError,
    KafkaStreamReader,
    SourceOptions,
    TopicPartition,
    kafka_records,
    read_partition,
    source_options,
)
from collectors.transport import parse_transport
from tests.support.kafka_fake import FakeKafkaLog, fake_options
from tests.support.tansu import TansuLog, unique_topic

pytestmark = [
    pytest.mark.integration,
    # kafka-python 3.0 reads its protocol schemas with importlib.resources' legacy read_text/open_text.
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]


class Log(Protocol):
    def create_topic(self, topic: str, partitions: int = 1) -> None: ...

    def append(self, topic: str, partition: int, values: list[str | None]) -> list[int]: ...


class Kafka:
    """One implementation: where records are written, and the source options that read them."""

    def __init__(self, log: Log, options: Callable[[str], SourceOptions]) -> None:
        self.log = log
        self.options = options

    def client(self, topic: str) -> KafkaClient:
        return self.options(topic).make_client()


@pytest.fixture(params=["fake", "tansu"])
def kafka(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kafka]:
    if request.param == "fake":
        fake = FakeKafkaLog(tmp_path / "kafka.json")
        yield Kafka(
            fake,
            lambda topic: source_options(
                parse_transport(f"kafka:fake:9092/{topic}"), fake_options(fake.path)
            ),
        )
        return
    bootstrap: str = request.getfixturevalue("kafka_broker")
    log = TansuLog(bootstrap)
    try:
        yield Kafka(log, lambda topic: source_options(parse_transport(f"kafka:{bootstrap}/{topic}")))
    finally:
        log.close()


def values(n: int, prefix: str = "r") -> list[str | None]:
    return [f"{prefix}{i}" for i in range(n)]


def test_partitions_and_offsets(kafka: Kafka) -> None:
    topic = unique_topic()
    kafka.log.create_topic(topic, 2)
    assert kafka.log.append(topic, 0, values(5)) == [0, 1, 2, 3, 4]
    assert kafka.log.append(topic, 0, values(3, "s")) == [5, 6, 7]
    client = kafka.client(topic)
    try:
        assert client.partitions_for_topic(topic) == {0, 1}
        assert client.partitions_for_topic(unique_topic("missing")) is None
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert dict(client.beginning_offsets(tps)) == {tps[0]: 0, tps[1]: 0}
        # the end is the offset of the next record: every record of the last batch counts
        assert dict(client.end_offsets(tps)) == {tps[0]: 8, tps[1]: 0}
    finally:
        client.close()


def test_assigned_partitions_poll_in_offset_order_from_a_seek(kafka: Kafka) -> None:
    topic = unique_topic()
    kafka.log.create_topic(topic, 1)
    kafka.log.append(topic, 0, values(6))
    kafka.log.append(topic, 0, values(4, "s"))
    tp = TopicPartition(topic, 0)
    client = kafka.client(topic)
    try:
        client.assign([tp])
        client.seek(tp, 3)
        got: list[tuple[int, bytes | None]] = []
        for _ in range(20):
            for record in client.poll(timeout_ms=200).get(tp, ()):
                got.append((record.offset, record.value))
            if len(got) >= 7:
                break
        # a fetch may start before the requested offset (at its batch): the source skips those
        assert [(o, v) for o, v in got if o >= 3] == [
            *((i, f"r{i}".encode()) for i in range(3, 6)),
            *((6 + i, f"s{i}".encode()) for i in range(4)),
        ]
        assert client.position(tp) == 10
    finally:
        client.close()


def test_read_partition_gives_exactly_the_planned_range(kafka: Kafka) -> None:
    topic = unique_topic()
    kafka.log.create_topic(topic, 1)
    kafka.log.append(topic, 0, values(10))
    rows = list(read_partition(kafka.options(topic), KafkaInputPartition(topic, 0, 2, 7)))
    assert [(r[2], r[3]) for r in rows] == [(i, f"r{i}") for i in range(2, 7)]


def test_the_planner_sees_every_record_and_a_missing_topic(kafka: Kafka) -> None:
    topic = unique_topic()
    kafka.log.create_topic(topic, 2)
    kafka.log.append(topic, 0, values(7))
    kafka.log.append(topic, 1, values(2))
    reader = KafkaStreamReader(kafka.options(topic))
    try:
        start = reader.initialOffset()
        assert start == {"0": 0, "1": 0}
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert end == {"0": 7, "1": 2}
        planned = reader.partitions(start, end)
        assert [(p.partition, p.start, p.end) for p in planned] == [(0, 0, 7), (1, 0, 2)]
    finally:
        reader.stop()
    missing = KafkaStreamReader(kafka.options(unique_topic("missing")))
    try:
        with pytest.raises(KafkaSourceError, match="does not exist"):
            missing.initialOffset()
    finally:
        missing.stop()


@pytest.mark.spark
def test_spark_reads_every_partition_whole_and_in_order(
    kafka: Kafka, spark_session: Any, tmp_path: Path
) -> None:
    topic = unique_topic()
    kafka.log.create_topic(topic, 3)
    kafka.log.append(topic, 0, values(25, "a"))
    kafka.log.append(topic, 1, values(4, "b"))
    kafka.log.append(topic, 2, values(13, "c"))
    options = kafka.options(topic)
    batches: list[list[dict[str, Any]]] = []
    frame = kafka_records(
        spark_session,
        parse_transport(f"kafka:{options.bootstrap_servers}/{topic}"),
        {**options.to_options(), "maxOffsetsPerTrigger": "10"},
    )
    query = (
        frame.writeStream.foreachBatch(lambda df, _: batches.append([r.asDict() for r in df.collect()]))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    assert all(len(b) <= 10 for b in batches)
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for row in (r for b in batches for r in b):
        by_partition.setdefault(row["partition"], []).append((row["offset"], row["value"]))
    assert by_partition == {
        0: [(i, f"a{i}") for i in range(25)],
        1: [(i, f"b{i}") for i in range(4)],
        2: [(i, f"c{i}") for i in range(13)],
    }
