"""Transports: the spool directory on a real file system; the Kafka sink through its producer interface."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from collectors.samples import Sample
from collectors.transport import (
    KafkaTopicSink,
    MissingSpoolError,
    SpoolDirectorySink,
    TransportError,
    open_sink,
    parse_transport,
)

pytestmark = pytest.mark.unit


def samples(n: int, start: int = 0) -> list[Sample]:
    return [
        Sample("c-1", start + i, 100.0 + i, "broker", "c", i % 3, {"cpuUsed": float(i)}) for i in range(n)
    ]


def test_spool_writes_whole_files_atomically(tmp_path: Path) -> None:
    sink = SpoolDirectorySink(tmp_path, clock=lambda: 1000.0)
    sink.write(samples(3))
    sink.write(samples(2, start=3))
    files = sink.files()
    assert len(files) == 2
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert [line["sequence"] for line in lines] == [0, 1, 2, 3, 4]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temp file left behind"


def test_spool_ignores_an_empty_batch(tmp_path: Path) -> None:
    sink = SpoolDirectorySink(tmp_path)
    sink.write([])
    assert sink.files() == []


def test_spool_retention_deletes_old_files(tmp_path: Path) -> None:
    now = [1000.0]
    sink = SpoolDirectorySink(tmp_path, retention_s=60, clock=lambda: now[0])
    sink.write(samples(1))
    [old] = sink.files()
    os.utime(old, (900.0, 900.0))
    now[0] = 1000.5
    sink.write(samples(1, start=1))
    assert old not in sink.files()
    assert len(sink.files()) == 1


def test_spool_refuses_a_non_positive_retention(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retention must be positive"):
        SpoolDirectorySink(tmp_path, retention_s=0)


def test_a_missing_spool_is_created_only_when_asked(tmp_path: Path) -> None:
    spec = parse_transport(f"spool:{tmp_path / 'a' / 'spool'}")
    with pytest.raises(MissingSpoolError, match=f"spool directory {tmp_path / 'a' / 'spool'} does not exist"):
        open_sink(spec, create_spool=False)
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(MissingSpoolError, match="is not a directory"):
        SpoolDirectorySink(tmp_path / "file", create=False)
    open_sink(spec, create_spool=True).write(samples(1))
    assert len(SpoolDirectorySink(tmp_path / "a" / "spool", create=False).files()) == 1


def test_spool_failure_is_a_transport_error(tmp_path: Path) -> None:
    sink = SpoolDirectorySink(tmp_path / "spool")
    (tmp_path / "spool").rmdir()
    (tmp_path / "spool").write_text("a file where the spool directory was")
    with pytest.raises(TransportError, match="cannot write samples"):
        sink.write(samples(1))


class FakeFuture:
    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def get(self, timeout: float | None = None) -> None:
        if self.error is not None:
            raise self.error


class FakeProducer:
    def __init__(self, fail_on: int | None = None) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []
        self.fail_on = fail_on
        self.closed = False

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None) -> Any:
        self.records.append((topic, value, key))
        failing = self.fail_on is not None and len(self.records) - 1 == self.fail_on
        return FakeFuture(RuntimeError("NotEnoughReplicas") if failing else None)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


def decoded(records: Sequence[tuple[str, bytes | None, bytes | None]]) -> list[dict[str, Any]]:
    return [json.loads(value or b"") for _, value, _ in records]


def test_kafka_sink_sends_one_keyed_record_per_sample() -> None:
    producer = FakeProducer()
    sink = KafkaTopicSink("b1:9092", "kafka-health-samples", producer=producer)
    sink.write(samples(3))
    assert [(t, k) for t, _, k in producer.records] == [("kafka-health-samples", b"c-1")] * 3
    assert [r["sequence"] for r in decoded(producer.records)] == [0, 1, 2]
    sink.close()
    assert producer.closed


def test_kafka_sink_failure_is_a_transport_error() -> None:
    sink = KafkaTopicSink("b1:9092", "t", producer=FakeProducer(fail_on=1))
    with pytest.raises(TransportError, match="NotEnoughReplicas"):
        sink.write(samples(3))


def test_kafka_sink_needs_a_topic() -> None:
    with pytest.raises(ValueError, match="topic name is required"):
        KafkaTopicSink("b1:9092", "", producer=FakeProducer())
