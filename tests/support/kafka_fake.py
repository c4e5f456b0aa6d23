"""A file-backed fake Kafka for testing :mod:`analytics.spark.kafka_source` without a broker: retention, gaps,
stalls and re-created topics that a real broker (Tansu, ``tests.support.tansu``) cannot be made to show on
demand. ``tests/analytics/spark/test_kafka_contract.py`` runs the same checks on it and on Tansu.

**A test double, not a Kafka client.** :class:`FileBackedKafka` implements the source's narrow
:class:`analytics.spark.kafka_source.KafkaClient` interface over a JSON file that :class:`FakeKafkaLog` writes
(atomically, so Spark's driver and worker processes, which open their own clients through the
``clientFactory`` option, always see a whole file):

    {"topics": {"<topic>": [{"log_start": 0, "end": 3, "stall": false,
                             "records": [[0, "<value>"], [1, null], [2, "<value>"]]}, ...]}}

one entry per partition: ``records`` as ``[offset, value or null]`` in offset order (gaps allowed, like a
compacted topic), ``log_start`` the earliest offset still there (retention), ``end`` the next offset to be
written, ``stall`` a partition whose fetches return nothing (a broker that does not answer).

Use it as the source's client with the options of :func:`fake_options`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytics.spark.kafka_source import KafkaSourceError, SourceOptions, TopicPartition

FACTORY = "tests.support.kafka_fake:file_backed_client"
PATH_OPTION = "kafka.fake.path"
"""The data source option naming the fake's file (reaches the factory as ``client_options["fake.path"]``)."""

DEFAULT_MAX_POLL_RECORDS = 500


def fake_options(path: Path, **more: str) -> dict[str, str]:
    """Data source options that make the source use the fake at ``path``."""
    return {"clientFactory": FACTORY, PATH_OPTION: str(path)} | more


def file_backed_client(options: SourceOptions) -> FileBackedKafka:
    """The ``clientFactory`` for the fake."""
    path = options.client_options.get("fake.path")
    if not path:
        raise KafkaSourceError(f"the fake Kafka needs option {PATH_OPTION}")
    return FileBackedKafka(Path(path))


class FakeKafkaLog:
    """Writes the fake's file: topics, partitions and records, as a test needs them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            self._save({"topics": {}})

    def _load(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.path.read_text())
        return loaded

    def _save(self, doc: Mapping[str, Any]) -> None:
        fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=self.path.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle)
        os.replace(temp, self.path)

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        doc = self._load()
        doc["topics"][topic] = [_empty_partition() for _ in range(partitions)]
        self._save(doc)

    def add_partitions(self, topic: str, count: int) -> None:
        doc = self._load()
        doc["topics"][topic].extend(_empty_partition() for _ in range(count))
        self._save(doc)

    def append(self, topic: str, partition: int, values: Iterable[str | None]) -> list[int]:
        """Append records; returns their offsets."""
        doc = self._load()
        state = doc["topics"][topic][partition]
        offsets = []
        for value in values:
            offsets.append(state["end"])
            state["records"].append([state["end"], value])
            state["end"] += 1
        self._save(doc)
        return offsets

    def skip(self, topic: str, partition: int, count: int) -> None:
        """Advance the end offset without records (transaction markers, compacted-away records)."""
        doc = self._load()
        doc["topics"][topic][partition]["end"] += count
        self._save(doc)

    def delete_before(self, topic: str, partition: int, offset: int) -> None:
        """Retention: drop records before ``offset``."""
        doc = self._load()
        state = doc["topics"][topic][partition]
        state["log_start"] = max(state["log_start"], offset)
        state["records"] = [r for r in state["records"] if r[0] >= offset]
        self._save(doc)

    def stall(self, topic: str, partition: int, stalled: bool = True) -> None:
        doc = self._load()
        doc["topics"][topic][partition]["stall"] = stalled
        self._save(doc)

    def delete_topic(self, topic: str) -> None:
        doc = self._load()
        del doc["topics"][topic]
        self._save(doc)


def _empty_partition() -> dict[str, Any]:
    return {"log_start": 0, "end": 0, "stall": False, "records": []}


@dataclass(frozen=True, slots=True)
class FakeRecord:
    topic: str
    partition: int
    offset: int
    value: bytes | None


class FileBackedKafka:
    """The test double: a :class:`~analytics.spark.kafka_source.KafkaClient` reading :class:`FakeKafkaLog`'s
    file at every call (so it sees what the test appended since)."""

    def __init__(self, path: Path, max_poll_records: int = DEFAULT_MAX_POLL_RECORDS) -> None:
        if not path.exists():
            raise KafkaSourceError(f"fake Kafka file {path} does not exist")
        self.path = path
        self.max_poll_records = max_poll_records
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self.closed = False

    def _partition(self, tp: TopicPartition) -> dict[str, Any]:
        self._check_open()
        topics = json.loads(self.path.read_text())["topics"]
        try:
            state: dict[str, Any] = topics[tp.topic][tp.partition]
        except (KeyError, IndexError):
            raise KafkaSourceError(f"fake Kafka: no partition {tp.topic}-{tp.partition}") from None
        return state

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("fake Kafka client used after close()")

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self._check_open()
        partitions = json.loads(self.path.read_text())["topics"].get(topic)
        return None if partitions is None else set(range(len(partitions)))

    def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: int(self._partition(tp)["log_start"]) for tp in partitions}

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: int(self._partition(tp)["end"]) for tp in partitions}

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        self._assigned = list(partitions)
        self._positions = {tp: self._positions.get(tp, 0) for tp in self._assigned}

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if partition not in self._assigned:
            raise RuntimeError(f"fake Kafka: {partition} is not assigned")
        self._positions[partition] = offset

    def position(self, partition: TopicPartition) -> int:
        if partition not in self._assigned:
            raise RuntimeError(f"fake Kafka: {partition} is not assigned")
        return self._positions[partition]

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[FakeRecord]]:
        limit = min(max_records or self.max_poll_records, self.max_poll_records)
        found: dict[TopicPartition, list[FakeRecord]] = {}
        for tp in self._assigned:
            state = self._partition(tp)
            if state["stall"]:
                continue
            position = max(self._positions[tp], int(state["log_start"]))  # auto_offset_reset=earliest
            records = [
                FakeRecord(tp.topic, tp.partition, int(offset), None if value is None else value.encode())
                for offset, value in state["records"]
                if offset >= position
            ][:limit]
            if records:
                found[tp] = records
                self._positions[tp] = records[-1].offset + 1
            else:
                self._positions[tp] = max(position, int(state["end"]))  # past markers and gaps at the end
        if not found and timeout_ms > 0:
            time.sleep(min(timeout_ms, 20) / 1000)  # a real poll blocks while there is nothing to fetch
        return found

    def close(self) -> None:
        self.closed = True


def records_of(rows: Sequence[Any]) -> dict[int, list[int]]:
    """``{partition: [offsets in the order read]}`` from collected record rows."""
    by_partition: dict[int, list[int]] = {}
    for row in rows:
        by_partition.setdefault(int(row["partition"]), []).append(int(row["offset"]))
    return by_partition
