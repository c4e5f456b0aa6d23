"""analytics.spark.kafka_source: options, offset planning and reading against the file-backed fake Kafka
(tests.support.kafka_fake; test_kafka_contract.py holds it to a real broker's behaviour), and the Python
streaming data source on local Spark: order per partition across micro-batches, parsing identical to the
JSON file source, restarts from the checkpoint without a record lost or read twice."""

from __future__ import annotations

import json
import pickle
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from analytics.spark import kafka_source
from analytics.spark.job import _SAMPLE_DDL
from analytics.spark.kafka_source import (
    CONNECTOR_CLASS,
    KafkaInputPartition,
    KafkaPythonClient,
    KafkaSourceError,
    KafkaStreamReader,
    SourceOptions,
    TopicPartition,
    connector_options,
    consumer_config,
    fair_shares,
    jvm_class_available,
    kafka_connector_available,
    kafka_records,
    offsets_json,
    read_kafka_samples,
    read_partition,
    source_options,
)
from collectors.samples import Sample
from collectors.transport import TransportSpec, parse_transport
from tests.support import kafka_fake
from tests.support.kafka_fake import FakeKafkaLog, FileBackedKafka, fake_options

SPEC = parse_transport("kafka:h1:9092,h2:9092/samples")
TOPIC = "samples"

unit = pytest.mark.unit
spark = pytest.mark.spark

# kafka-python 3.0 reads its protocol schemas with importlib.resources' legacy read_text/open_text,
# deprecated since Python 3.11.
pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")


@pytest.fixture
def kafka(tmp_path: Path) -> FakeKafkaLog:
    return FakeKafkaLog(tmp_path / "kafka.json")


def options_for(kafka: FakeKafkaLog, **more: str) -> SourceOptions:
    return source_options(SPEC, fake_options(kafka.path, **more))


def reader_for(kafka: FakeKafkaLog, **more: str) -> KafkaStreamReader:
    return KafkaStreamReader(options_for(kafka, **more))


def values(n: int, prefix: str = "r") -> list[str | None]:
    return [f"{prefix}{i}" for i in range(n)]


# --- options ---------------------------------------------------------------------------------------------


@unit
def test_options_defaults_and_case_insensitive_names() -> None:
    parsed = SourceOptions.parse(
        {"KAFKA.BOOTSTRAP.SERVERS": "h1:9092", "Subscribe": "t", "maxoffsetspertrigger": "7"}
    )
    assert parsed == SourceOptions("h1:9092", "t", max_offsets_per_trigger=7)
    assert parsed.starting_offsets == "earliest"
    assert parsed.fail_on_data_loss is True
    assert parsed.client_factory == "analytics.spark.kafka_source:kafka_python_client"
    assert SourceOptions.parse(parsed.to_options()) == parsed


@unit
def test_kafka_prefixed_options_reach_the_client_factory() -> None:
    parsed = source_options(SPEC, {"kafka.security.protocol": "SSL", "failOnDataLoss": "false"})
    assert parsed.bootstrap_servers == "h1:9092,h2:9092"
    assert parsed.topic == TOPIC
    assert parsed.client_options == {"security.protocol": "SSL"}
    assert parsed.fail_on_data_loss is False


@unit
@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers is required"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe must name one topic"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "a,b"}, "subscribe must name one topic"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "positive"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "x"}, "positive"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "maybe"}, "true or false"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "{}"}, "earliest or latest"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "clientFactory": "nocolon"}, "module:function"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "assign": "x"}, "unknown option(s)"),
    ],
)
def test_bad_options_are_named(given: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSourceError, match=re.escape(message)):
        SourceOptions.parse(given)


@unit
def test_a_spool_spec_is_not_a_kafka_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a Kafka source"):
        source_options(TransportSpec("spool", directory=tmp_path))


@unit
def test_a_client_factory_that_cannot_be_loaded_is_a_clear_error() -> None:
    parsed = source_options(SPEC, {"clientFactory": "tests.support.kafka_fake:no_such_factory"})
    with pytest.raises(
        KafkaSourceError, match=re.escape("clientFactory 'tests.support.kafka_fake:no_such_factory'")
    ):
        parsed.make_client()


@unit
def test_connector_options_are_the_same_read() -> None:
    parsed = source_options(SPEC, {"maxOffsetsPerTrigger": "10", "kafka.security.protocol": "SSL"})
    assert connector_options(parsed) == {
        "kafka.bootstrap.servers": "h1:9092,h2:9092",
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "10",
        "failOnDataLoss": "true",
        "kafkaConsumer.pollTimeoutMs": "120000",
        "kafka.security.protocol": "SSL",
    }


# --- the kafka-python client ------------------------------------------------------------------------------


@unit
def test_the_consumer_has_no_group_and_the_given_bootstrap_servers() -> None:
    parsed = source_options(
        SPEC,
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.request.timeout.ms": "5000",
            "kafka.check.crcs": "false",
        },
    )
    config = consumer_config(parsed)
    assert config["bootstrap_servers"] == ["h1:9092", "h2:9092"]
    assert config["group_id"] is None
    assert config["enable_auto_commit"] is False
    assert config["allow_auto_create_topics"] is False
    assert config["security_protocol"] == "SASL_SSL"
    assert config["request_timeout_ms"] == 5000
    assert config["check_crcs"] is False


@unit
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("group.id", "g", "not a kafka-python consumer setting"),
        ("enable.auto.commit", "true", "not a kafka-python consumer setting"),
        ("no.such.setting", "1", "not a kafka-python consumer setting"),
        ("request.timeout.ms", "soon", "is not a int"),
        ("check.crcs", "yes", "is not a bool"),
    ],
)
def test_consumer_settings_that_are_not_allowed(key: str, value: str, message: str) -> None:
    with pytest.raises(KafkaSourceError, match=message):
        consumer_config(source_options(SPEC, {f"kafka.{key}": value}))


@unit
def test_the_default_factory_builds_a_consumer_with_those_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import kafka

    built: list[dict[str, Any]] = []

    class Recording(kafka.KafkaConsumer):  # type: ignore[misc]
        def __init__(self, **config: Any) -> None:
            built.append(config)

    monkeypatch.setattr(kafka, "KafkaConsumer", Recording)
    client = kafka_source.kafka_python_client(source_options(SPEC))
    assert isinstance(client, KafkaPythonClient)
    (config,) = built
    assert config == consumer_config(source_options(SPEC))
    assert config["bootstrap_servers"] == ["h1:9092", "h2:9092"]


@unit
def test_the_kafka_python_adapter_asks_the_cluster_for_partitions() -> None:
    import kafka

    class Consumer:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def topics(self) -> set[str]:
            self.calls.append("topics")
            return {TOPIC}

        def partitions_for_topic(self, topic: str) -> set[int]:
            self.calls.append("partitions_for_topic")
            return {0, 1}

        def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
            assert all(type(p) is kafka.TopicPartition for p in partitions)
            return {p: 10 + p.partition for p in partitions}

    consumer = Consumer()
    client = KafkaPythonClient(consumer)
    assert client.partitions_for_topic(TOPIC) == {0, 1}
    assert client.partitions_for_topic("other") is None
    assert consumer.calls == ["topics", "partitions_for_topic", "topics"]
    tp = TopicPartition(TOPIC, 1)
    assert client.end_offsets([tp]) == {tp: 11}
    assert kafka.TopicPartition(TOPIC, 1) == tp
    assert hash(kafka.TopicPartition(TOPIC, 1)) == hash(tp)


_NO_BROKER_PROBE = """
import json, sys, threading, time
from analytics.spark.kafka_source import KafkaSourceError, source_options
from collectors.transport import parse_transport
port = int(sys.argv[1])
spec = parse_transport(f"kafka:127.0.0.1:{port}/samples")
options = source_options(spec, {"kafka.bootstrap.timeout.ms": "1000"})
started = time.monotonic()
try:
    options.make_client().close()
    message = ""
except KafkaSourceError as exc:
    message = str(exc)
elapsed = time.monotonic() - started
threads = [t.name for t in threading.enumerate() if t.name.startswith("kafka-io-")]
print(json.dumps({"message": message, "elapsed": elapsed, "threads": threads}))
"""


@pytest.mark.integration
def test_no_broker_is_a_clear_error_within_the_bootstrap_timeout() -> None:
    """Connects to a local port nobody listens on, in a child process: kafka-python 3.0.12 leaves the
    refused connections' sockets to the garbage collector, and their ResourceWarnings would land in
    whichever test runs next (warnings are errors here)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _NO_BROKER_PROBE, str(port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    message = outcome["message"]
    assert re.match(rf"cannot connect to Kafka at 127\.0\.0\.1:{port} .*Unable to bootstrap", message), (
        message
    )
    print(f"\nno broker -> KafkaSourceError after {outcome['elapsed']:.1f} s (bootstrap timeout 1 s)")
    assert outcome["threads"] == [], "the client's IO thread must be stopped"


# --- offsets ---------------------------------------------------------------------------------------------


@unit
def test_offsets_are_json_in_partition_order() -> None:
    assert list(offsets_json({10: 1, 2: 5, 0: 3})) == ["0", "2", "10"]
    assert json.dumps(offsets_json({1: 2, 0: 1})) == '{"0": 1, "1": 2}'


@unit
@pytest.mark.parametrize(
    ("backlogs", "budget", "expected"),
    [
        ({0: 5, 1: 3}, 100, {0: 5, 1: 3}),
        ({0: 100, 1: 100}, 10, {0: 5, 1: 5}),
        ({0: 2, 1: 100, 2: 100}, 12, {0: 2, 1: 5, 2: 5}),
        ({0: 5, 1: 3}, 3, {0: 2, 1: 1}),
        ({0: 4, 1: 6, 2: 5}, 1, {0: 0, 1: 1, 2: 0}),
        ({0: 0, 1: 7}, 4, {0: 0, 1: 4}),
    ],
)
def test_fair_shares(backlogs: dict[int, int], budget: int, expected: dict[int, int]) -> None:
    assert fair_shares(backlogs, budget) == expected


@unit
def test_fair_shares_move_every_partition_even_with_a_tiny_budget() -> None:
    backlogs = {0: 3, 1: 3, 2: 3}
    moved: list[int] = []
    while any(backlogs.values()):
        shares = fair_shares(backlogs, 1)
        assert sum(shares.values()) == 1
        (p,) = [p for p, s in shares.items() if s]
        moved.append(p)
        backlogs[p] -= 1
    assert sorted(moved) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert set(moved[:3]) == {0, 1, 2}


@unit
def test_initial_offset_is_the_earliest_of_every_partition(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 3)
    kafka.append(TOPIC, 0, values(5))
    kafka.append(TOPIC, 2, values(4))
    kafka.delete_before(TOPIC, 2, 3)  # retention
    assert reader_for(kafka).initialOffset() == {"0": 0, "1": 0, "2": 3}
    assert reader_for(kafka, startingOffsets="latest").initialOffset() == {"0": 5, "1": 0, "2": 4}


@unit
def test_latest_offset_is_capped_per_trigger_and_shared_fairly(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 3)
    kafka.append(TOPIC, 0, values(50))
    kafka.append(TOPIC, 1, values(2))
    kafka.append(TOPIC, 2, values(50))
    reader = reader_for(kafka, maxOffsetsPerTrigger="20")
    assert reader.getDefaultReadLimit() == ReadMaxRows(20)
    start = reader.initialOffset()
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first == {"0": 9, "1": 2, "2": 9}
    assert reader.latestOffset(first, ReadMaxRows(20)) == {"0": 19, "1": 2, "2": 19}
    # Trigger.AvailableNow or processAllAvailable: everything, whatever the option says
    assert reader.latestOffset(first, ReadAllAvailable()) == {"0": 50, "1": 2, "2": 50}
    assert reader.reportLatestOffset() == {"0": 50, "1": 2, "2": 50}


@unit
def test_no_new_records_gives_the_same_offset(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 2)
    kafka.append(TOPIC, 1, values(3))
    reader = reader_for(kafka)
    end = reader.latestOffset(reader.initialOffset(), ReadMaxRows(100))
    assert end == {"0": 0, "1": 3}
    assert json.dumps(reader.latestOffset(json.loads(json.dumps(end)), ReadMaxRows(100))) == json.dumps(end)


@unit
def test_a_partition_added_later_is_read_from_its_earliest_offset(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, values(2))
    reader = reader_for(kafka)
    start = reader.initialOffset()
    assert start == {"0": 0}
    kafka.add_partitions(TOPIC, 2)  # partition 2 stays empty: not in the offset until it has records
    kafka.append(TOPIC, 1, values(4))
    kafka.delete_before(TOPIC, 1, 1)
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end == {"0": 2, "1": 4}
    assert [(p.partition, p.start, p.end) for p in reader.partitions(start, end)] == [(0, 0, 2), (1, 1, 4)]
    kafka.append(TOPIC, 2, values(1))
    assert reader.latestOffset(end, ReadMaxRows(100)) == {"0": 2, "1": 4, "2": 1}


@unit
def test_partitions_plan_one_task_per_kafka_partition_with_records(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 3)
    reader = reader_for(kafka)
    planned = reader.partitions({"0": 3, "1": 5, "2": 0}, {"0": 7, "1": 5, "2": 2})
    assert [(p.topic, p.partition, p.start, p.end) for p in planned] == [(TOPIC, 0, 3, 7), (TOPIC, 2, 0, 2)]
    assert all(isinstance(p, KafkaInputPartition) for p in planned)
    assert reader.partitions({"0": 3}, {"0": 3}) == []


@unit
def test_a_missing_topic_is_a_clear_error(kafka: FakeKafkaLog) -> None:
    with pytest.raises(KafkaSourceError, match="Kafka topic 'samples' does not exist on h1:9092,h2:9092"):
        reader_for(kafka).initialOffset()
    kafka.create_topic(TOPIC, 1)
    reader = reader_for(kafka)
    start = reader.initialOffset()
    kafka.delete_topic(TOPIC)
    with pytest.raises(KafkaSourceError, match="does not exist"):
        reader.latestOffset(start, ReadMaxRows(10))


@unit
def test_a_recreated_topic_is_data_loss(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 2)
    kafka.append(TOPIC, 0, values(5))
    reader = reader_for(kafka)
    end = reader.latestOffset(reader.initialOffset(), ReadMaxRows(100))
    kafka.create_topic(TOPIC, 1)  # re-created with one partition, fewer records
    kafka.append(TOPIC, 0, values(2))
    with pytest.raises(KafkaSourceError, match=r"partition\(s\) \[1\] of topic 'samples' no longer exist"):
        reader.latestOffset(end, ReadMaxRows(100))
    lenient = reader_for(kafka, failOnDataLoss="false")
    latest = lenient.latestOffset(end, ReadMaxRows(100))
    assert latest == {"0": 2}
    with pytest.raises(KafkaSourceError, match="ends at offset 2, before offset 5"):
        reader.partitions(end, latest)
    assert [(p.partition, p.start, p.end) for p in lenient.partitions(end, latest)] == [(0, 0, 2)]


@unit
def test_available_now_stops_at_the_offsets_there_when_it_started(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, values(3))
    reader = reader_for(kafka)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    kafka.append(TOPIC, 0, values(3))
    kafka.add_partitions(TOPIC, 1)
    kafka.append(TOPIC, 1, values(3))
    assert reader.latestOffset(start, ReadMaxRows(100)) == {"0": 3}


@unit
def test_the_reader_pickles_without_its_client(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 1)
    reader = reader_for(kafka)
    reader.initialOffset()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options
    assert copy._client is None
    assert copy.initialOffset() == {"0": 0}
    reader.stop()
    copy.stop()


# --- reading a partition ---------------------------------------------------------------------------------


def read_all(kafka: FakeKafkaLog, partition: int, start: int, end: int, **more: str) -> list[Any]:
    return list(read_partition(options_for(kafka, **more), KafkaInputPartition(TOPIC, partition, start, end)))


@unit
def test_a_partition_is_read_in_offset_order_up_to_its_end(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 2)
    kafka.append(TOPIC, 1, [*values(1200), None, "é", "x"])
    got = read_all(kafka, 1, 3, 1201)
    assert [r[2] for r in got] == list(range(3, 1201))
    assert got[0] == (TOPIC, 1, 3, "r3")
    assert got[-1] == (TOPIC, 1, 1200, None)  # a tombstone
    assert read_all(kafka, 1, 1201, 1202) == [(TOPIC, 1, 1201, "é")]


@unit
def test_gaps_in_the_offsets_are_not_waited_for(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, values(2))
    kafka.skip(TOPIC, 0, 3)  # compacted away, or transaction markers
    kafka.append(TOPIC, 0, values(1, "late"))
    kafka.skip(TOPIC, 0, 2)
    got = read_all(kafka, 0, 0, 8, **{"kafkaConsumer.pollTimeoutMs": "60000"})
    assert [(r[2], r[3]) for r in got] == [(0, "r0"), (1, "r1"), (5, "late0")]


@unit
def test_a_partition_that_does_not_deliver_times_out_with_a_clear_error(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, values(3))
    kafka.stall(TOPIC, 0)
    expected = r"no record from Kafka samples-0 .* for 200 ms: expected offsets 0\.\.2"
    with pytest.raises(KafkaSourceError, match=expected):
        read_all(kafka, 0, 0, 3, **{"kafkaConsumer.pollTimeoutMs": "200"})


@unit
def test_records_deleted_before_they_were_read_are_data_loss(kafka: FakeKafkaLog) -> None:
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, values(6))
    kafka.delete_before(TOPIC, 0, 4)
    with pytest.raises(KafkaSourceError, match=r"offsets 1\.\.3 of samples-0 were deleted"):
        read_all(kafka, 0, 1, 6)
    assert [r[2] for r in read_all(kafka, 0, 1, 6, failOnDataLoss="false")] == [4, 5]


@unit
def test_every_task_closes_its_client(kafka: FakeKafkaLog, monkeypatch: pytest.MonkeyPatch) -> None:
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, values(3))
    made: list[FileBackedKafka] = []
    real: Callable[[SourceOptions], FileBackedKafka] = kafka_fake.file_backed_client

    def recording(options: SourceOptions) -> FileBackedKafka:
        made.append(real(options))
        return made[-1]

    monkeypatch.setattr(kafka_fake, "file_backed_client", recording)
    assert len(read_all(kafka, 0, 0, 3)) == 3
    rows = read_partition(options_for(kafka), KafkaInputPartition(TOPIC, 0, 0, 3))
    next(rows)
    rows.close()  # Spark stopped reading early
    kafka.stall(TOPIC, 0)
    with pytest.raises(KafkaSourceError):
        read_all(kafka, 0, 0, 3, **{"kafkaConsumer.pollTimeoutMs": "50"})
    assert [c.closed for c in made] == [True, True, True]


# --- on Spark --------------------------------------------------------------------------------------------


class Batches:
    """A foreachBatch sink: each micro-batch's rows, in the order Spark ran the batches."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.batches: list[tuple[int, list[dict[str, Any]]]] = []
        self.fail_at = fail_at

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.batches.append((batch_id, [row.asDict(recursive=True) for row in frame.collect()]))
        if batch_id == self.fail_at:
            raise RuntimeError(f"the sink failed in batch {batch_id}")

    def rows(self) -> list[dict[str, Any]]:
        return [row for _, rows in self.batches for row in rows]


def run_available_now(frame: Any, checkpoint: Path, sink: Batches) -> None:
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "the availableNow query did not finish"
    finally:
        if query.isActive:
            query.stop()


def offsets_by_partition(rows: list[dict[str, Any]]) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = {}
    for row in rows:
        by_partition.setdefault(row["partition"], []).append(row["offset"])
    return by_partition


@spark
def test_the_connector_is_not_on_the_classpath_here(spark_session: Any) -> None:
    assert kafka_connector_available(spark_session) is False
    assert jvm_class_available(spark_session, CONNECTOR_CLASS) is False
    assert jvm_class_available(spark_session, "org.apache.spark.sql.SparkSession") is True  # the probe works


@spark
def test_forcing_the_connector_without_it_is_spark_s_own_error(spark_session: Any) -> None:
    with pytest.raises(Exception, match=r"(?i)failed to find (the )?data source: kafka"):
        kafka_records(spark_session, SPEC, use_connector=True)


@spark
def test_records_are_read_in_order_per_partition_across_micro_batches(
    spark_session: Any, kafka: FakeKafkaLog, tmp_path: Path
) -> None:
    kafka.create_topic(TOPIC, 3)
    kafka.append(TOPIC, 0, values(25, "a"))
    kafka.append(TOPIC, 1, values(4, "b"))
    kafka.append(TOPIC, 2, values(13, "c"))
    sink = Batches()
    records = kafka_records(spark_session, SPEC, fake_options(kafka.path, maxOffsetsPerTrigger="10"))
    assert records.isStreaming
    assert records.schema.simpleString() == "struct<topic:string,partition:int,offset:bigint,value:string>"
    run_available_now(records, tmp_path / "checkpoint", sink)

    assert [batch_id for batch_id, _ in sink.batches] == list(range(5))
    assert all(len(rows) <= 10 for _, rows in sink.batches)
    assert offsets_by_partition(sink.rows()) == {0: list(range(25)), 1: list(range(4)), 2: list(range(13))}
    assert {(r["partition"], r["value"]) for r in sink.rows()} == {
        *((0, f"a{i}") for i in range(25)),
        *((1, f"b{i}") for i in range(4)),
        *((2, f"c{i}") for i in range(13)),
    }
    # every micro-batch moved every partition that had records left (a fair share each)
    first = offsets_by_partition(sink.batches[0][1])
    assert {p: len(o) for p, o in first.items()} == {0: 4, 1: 3, 2: 3}


def sample_lines() -> list[str | None]:
    broker = Sample("c-1", 0, 1_800_000_001.5, "broker", "cl", 3, {"partitions": 10.0, "cpuUsed": 0.25})
    health = {"snapshot": {"version": 7, "stale": False}, "brokers": [1, 2], "offline": {"count": 0}}
    cluster = Sample("c-1", 1, 1_800_000_002.0, "cluster", "cl", None, {"brokers": 2.0}, health)
    return [
        broker.to_line(),
        cluster.to_line(),
        "this is not json",
        '{"v":"one","collector_id":"c-2","sequence":5}',  # a type error: the rest parsed, the text kept
        "[1,2]",
        "42",
        "",
        "   ",
        None,  # a tombstone
        broker.to_line() + "\n" + "second line not json\r\n",  # a value holding two lines
        '{"v":1,"health":{"a": [1, 2], "b": {"c": null}}}',
    ]


def rows_key(row: dict[str, Any]) -> str:
    """A row as comparable text; ``health`` as the JSON document it holds (the file source keeps the
    object's text verbatim, from_json re-serialises it compactly)."""
    health = row["health"]
    return json.dumps(row | {"health": None if health is None else json.loads(health)}, sort_keys=True)


@spark
def test_samples_parse_exactly_as_the_json_file_source_reads_the_same_lines(
    spark_session: Any, kafka: FakeKafkaLog, tmp_path: Path
) -> None:
    lines = sample_lines()
    kafka.create_topic(TOPIC, 2)
    kafka.append(TOPIC, 0, lines[:6])
    kafka.append(TOPIC, 1, lines[6:])
    sink = Batches()
    samples = read_kafka_samples(spark_session, SPEC, _SAMPLE_DDL, fake_options(kafka.path))
    assert samples.schema == spark_session.createDataFrame([], _SAMPLE_DDL).schema
    run_available_now(samples, tmp_path / "checkpoint", sink)

    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "lines.ndjson").write_text("".join(line + "\n" for line in lines if line is not None))
    expected = (
        spark_session.read.schema(_SAMPLE_DDL)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .json(str(spool))
        .collect()
    )
    got = sink.rows()
    assert sorted(map(rows_key, got)) == sorted(rows_key(r.asDict(recursive=True)) for r in expected)
    corrupt = {r["_corrupt_record"] for r in got if r["_corrupt_record"] is not None}
    assert corrupt == {
        "this is not json",
        '{"v":"one","collector_id":"c-2","sequence":5}',
        "[1,2]",
        "42",
        "second line not json",
    }
    (bad,) = [r for r in got if r["_corrupt_record"] == "this is not json"]
    assert set(bad.values()) == {None, "this is not json"}
    (cluster,) = [r for r in got if r["kind"] == "cluster"]
    assert json.loads(cluster["health"]) == json.loads(lines[1] or "")["health"]
    (other,) = [r for r in got if r["health"] is not None and r["kind"] is None]
    assert other["health"] == '{"a":[1,2],"b":{"c":null}}'  # from_json re-serialises the object's text


@spark
def test_a_json_array_of_objects_is_one_corrupt_record(
    spark_session: Any, kafka: FakeKafkaLog, tmp_path: Path
) -> None:
    """The one known difference from the file source, which would read each element as a row."""
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, ['[{"v":1},{"v":2}]'])
    sink = Batches()
    run_available_now(
        read_kafka_samples(spark_session, SPEC, _SAMPLE_DDL, fake_options(kafka.path)),
        tmp_path / "checkpoint",
        sink,
    )
    assert [(r["v"], r["_corrupt_record"]) for r in sink.rows()] == [(None, '[{"v":1},{"v":2}]')]


@spark
def test_a_restarted_query_continues_after_the_committed_offsets(
    spark_session: Any, kafka: FakeKafkaLog, tmp_path: Path
) -> None:
    kafka.create_topic(TOPIC, 2)
    kafka.append(TOPIC, 0, values(6))
    kafka.append(TOPIC, 1, values(4))
    checkpoint = tmp_path / "checkpoint"
    options = fake_options(kafka.path, maxOffsetsPerTrigger="4")

    first = Batches()
    run_available_now(kafka_records(spark_session, SPEC, options), checkpoint, first)
    assert offsets_by_partition(first.rows()) == {0: list(range(6)), 1: list(range(4))}
    last_batch = first.batches[-1][0]

    # while it was down: more records, and a partition added to the topic
    kafka.append(TOPIC, 0, values(5, "more"))
    kafka.add_partitions(TOPIC, 1)
    kafka.append(TOPIC, 2, values(3, "new"))

    # the next run fails in its second batch after reading it: Spark has logged the batch's offsets
    failing = Batches(fail_at=last_batch + 2)
    with pytest.raises(Exception, match="the sink failed in batch"):
        run_available_now(kafka_records(spark_session, SPEC, options), checkpoint, failing)
    assert [b for b, _ in failing.batches] == [last_batch + 1, last_batch + 2]

    third = Batches()
    run_available_now(kafka_records(spark_session, SPEC, options), checkpoint, third)
    # the failed batch runs again with the same id and exactly the same records ...
    assert third.batches[0] == failing.batches[-1]
    # ... and over the three runs every record was handed over once, none twice, none lost
    committed = first.rows() + failing.rows()[: len(failing.batches[0][1])] + third.rows()
    assert offsets_by_partition(committed) == {0: list(range(11)), 1: list(range(4)), 2: list(range(3))}
    assert len({(r["partition"], r["offset"]) for r in committed}) == len(committed)


@spark
def test_a_running_query_picks_up_new_records_and_partitions(
    spark_session: Any, kafka: FakeKafkaLog, tmp_path: Path
) -> None:
    kafka.create_topic(TOPIC, 1)
    kafka.append(TOPIC, 0, values(3))
    sink = Batches()
    query = (
        kafka_records(spark_session, SPEC, fake_options(kafka.path))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert offsets_by_partition(sink.rows()) == {0: [0, 1, 2]}
        kafka.add_partitions(TOPIC, 2)
        kafka.append(TOPIC, 2, values(2, "two"))
        kafka.append(TOPIC, 0, values(1, "zero"))
        query.processAllAvailable()
        assert offsets_by_partition(sink.rows()) == {0: [0, 1, 2, 3], 2: [0, 1]}
        assert query.exception() is None
    finally:
        query.stop()


@spark
def test_a_missing_topic_fails_the_query_with_a_clear_error(
    spark_session: Any, kafka: FakeKafkaLog, tmp_path: Path
) -> None:
    kafka.create_topic("other", 1)
    query = (
        kafka_records(spark_session, SPEC, fake_options(kafka.path))
        .writeStream.foreachBatch(Batches())
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(Exception, match="Kafka topic 'samples' does not exist on h1:9092,h2:9092"):
            query.awaitTermination(120)
    finally:
        query.stop()


@spark
def test_a_bad_option_fails_when_the_stream_is_defined(spark_session: Any, kafka: FakeKafkaLog) -> None:
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be a positive integer"):
        kafka_records(spark_session, SPEC, fake_options(kafka.path, maxOffsetsPerTrigger="-1"))


VOLATILE = frozenset({"event_time", "dedup_id"})
"""Columns of the job's rows that hold the processing time for a malformed line (or a hash of it)."""


def normalised(value: Any) -> Any:
    """Rows compared across the two sources: JSON text as the document it holds (from_json re-serialises
    an object held in a STRING column, the file source keeps its text verbatim), without the volatile
    columns."""
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return normalised(json.loads(value))
        except ValueError:
            return value
    return value


@spark
def test_the_job_reads_kafka_samples_like_spool_samples(
    spark_session: Any, kafka: FakeKafkaLog, tmp_path: Path
) -> None:
    """analytics.spark.job's sample_rows (validation, dedup, malformed rows) over the Kafka stream and over a
    spool directory holding the same lines give the same rows."""
    from analytics.config import AnalyticsSettings
    from analytics.spark.job import read_samples, sample_rows

    lines = [*sample_lines(), sample_lines()[0]]  # the first sample delivered twice (a retried publish)
    kafka.create_topic(TOPIC, 2)
    kafka.append(TOPIC, 0, lines[:5])
    kafka.append(TOPIC, 1, lines[5:])
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "lines.ndjson").write_text("".join(line + "\n" for line in lines if line is not None))

    got: dict[str, list[Any]] = {}
    for name, source, options in (
        ("kafka", str(SPEC), fake_options(kafka.path)),
        ("spool", f"spool:{spool}", None),
    ):
        settings = AnalyticsSettings(source=source, watermark_s=0.0)
        raw = (
            read_kafka_samples(spark_session, SPEC, _SAMPLE_DDL, options)
            if options is not None
            else read_samples(spark_session, settings)
        )
        sink = Batches()
        run_available_now(sample_rows(raw, settings), tmp_path / f"checkpoint-{name}", sink)
        got[name] = sorted(map(normalised, sink.rows()), key=lambda r: json.dumps(r, sort_keys=True))
    assert got["kafka"] == got["spool"]
    assert len(got["kafka"]) >= 8  # two samples and six malformed lines, whatever the job's row shape
