"""Reading the collectors' samples from a Kafka topic as a streaming DataFrame.

Two ways, chosen per query (:func:`read_kafka_samples`):

* **the spark-sql-kafka connector** (``spark.readStream.format("kafka")``) when its JVM class
  ``org.apache.spark.sql.kafka010.KafkaSourceProvider`` is on the classpath (``--packages
  org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``);
* otherwise **a PySpark 4 Python streaming data source** (:class:`KafkaSamplesSource`, registered as
  ``kafka_health_kafka``) that reads the topic with kafka-python: one Spark task per Kafka partition and
  micro-batch, offsets planned on the driver and kept in Spark's checkpoint (the offset log), never in a
  consumer group.

Both give the same records (``topic, partition, offset, value``), and :func:`parse_sample_lines` turns the
values into exactly the columns Spark's JSON file source gives for a spool file in PERMISSIVE mode: every
line of a record's value is one JSON document, a blank line is skipped, a line that is not a JSON object of
the schema keeps its raw text in ``_corrupt_record``.

Exactly once: a micro-batch's offset range is written to the checkpoint before it runs and is re-planned
identically after a restart (same batch id, same records); the store's processed-batches row makes the
re-run a no-op once the first run has committed. The source's ``commit`` is therefore a no-op.

The Kafka client the Python source uses is behind :class:`KafkaClient` (the part of kafka-python's
``KafkaConsumer`` it needs) and made by a factory named in the ``clientFactory`` option as
``module:function``: the reader runs in Spark's Python worker processes, where a monkeypatch in the driver
does not reach, so a test names a factory instead (``tests.support.kafka_fake:file_backed_client``).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from collectors.transport import TransportSpec

log = logging.getLogger(__name__)

SOURCE_NAME = "kafka_health_kafka"
"""The Python data source's short name (``spark.readStream.format(SOURCE_NAME)``)."""

CONNECTOR_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
"""The spark-sql-kafka connector's provider class: on the classpath means ``format("kafka")`` works."""

RECORD_DDL = "topic STRING, partition INT, offset BIGINT, value STRING"
"""The records either way of reading gives (the value decoded as UTF-8)."""

CORRUPT_RECORD = "_corrupt_record"

DEFAULT_MAX_OFFSETS_PER_TRIGGER = 100_000
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_CLIENT_FACTORY = "analytics.spark.kafka_source:kafka_python_client"
MAX_RECORDS_PER_POLL = 500


class KafkaSourceError(RuntimeError):
    """The topic cannot be read as configured (missing topic, lost data, no broker, a bad option)."""


# --- the client interface --------------------------------------------------------------------------------


class TopicPartition(NamedTuple):
    """Equal to (and hashed like) kafka-python's ``kafka.TopicPartition`` namedtuple."""

    topic: str
    partition: int


class KafkaRecord(Protocol):
    """The part of kafka-python's ``ConsumerRecord`` the reader uses."""

    @property
    def offset(self) -> int: ...

    @property
    def value(self) -> bytes | None: ...


class KafkaClient(Protocol):
    """The part of kafka-python's ``KafkaConsumer`` the source uses (one client: offsets and records).

    ``partitions_for_topic`` must ask the cluster (not a stale cache) and return None when the topic does
    not exist; the offset methods return ``{TopicPartition: offset}`` (end = the offset of the next record
    to be written); ``poll`` returns ``{TopicPartition: [records in offset order]}`` for assigned
    partitions; ``position`` is the offset of the next record ``poll`` will return.
    """

    def partitions_for_topic(self, topic: str) -> set[int] | None: ...

    def beginning_offsets(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, int]: ...

    def end_offsets(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, int]: ...

    def assign(self, partitions: list[TopicPartition]) -> None: ...

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[KafkaRecord]]: ...

    def position(self, partition: TopicPartition) -> int: ...

    def close(self) -> None: ...


ClientFactory = Callable[["SourceOptions"], KafkaClient]


# --- options ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The Python source's options (names as the connector's where it has the same option)."""

    bootstrap_servers: str
    """``kafka.bootstrap.servers``: ``HOST:PORT[,HOST:PORT...]``."""
    topic: str
    """``subscribe``: one topic."""
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    """``startingOffsets``: where a new query (no checkpoint) starts; a restart continues from the
    checkpoint."""
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    """``maxOffsetsPerTrigger``: offsets per micro-batch over all partitions, shared fairly."""
    fail_on_data_loss: bool = True
    """``failOnDataLoss``: fail when offsets to read are gone (retention, a re-created topic); false logs a
    warning and continues from the earliest offset still there."""
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    """``kafkaConsumer.pollTimeoutMs``: how long a task waits for the next record before it fails."""
    client_factory: str = DEFAULT_CLIENT_FACTORY
    """``clientFactory``: ``module:function`` making a :class:`KafkaClient` from these options."""
    client_options: Mapping[str, str] = field(default_factory=dict)
    """Every other ``kafka.*`` option, without the prefix (for the client factory)."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Options as Spark hands them to a data source (keys in any case); KafkaSourceError names a bad
        one."""
        given = {str(k).lower(): str(v) for k, v in options.items()}
        servers = given.pop("kafka.bootstrap.servers", "").strip()
        topic = given.pop("subscribe", "").strip()
        if not servers:
            raise KafkaSourceError("option kafka.bootstrap.servers is required (HOST:PORT[,HOST:PORT...])")
        if not topic or "," in topic:
            raise KafkaSourceError(f"option subscribe must name one topic, got {topic!r}")
        starting = given.pop("startingoffsets", "earliest").strip().lower()
        if starting not in ("earliest", "latest"):
            raise KafkaSourceError(f"option startingOffsets must be earliest or latest, got {starting!r}")
        factory = given.pop("clientfactory", DEFAULT_CLIENT_FACTORY).strip()
        module, colon, function = factory.partition(":")
        if not colon or not module or not function:
            raise KafkaSourceError(f"option clientFactory must be module:function, got {factory!r}")
        parsed = cls(
            bootstrap_servers=servers,
            topic=topic,
            starting_offsets="latest" if starting == "latest" else "earliest",
            max_offsets_per_trigger=_positive_int(
                given.pop("maxoffsetspertrigger", None),
                "maxOffsetsPerTrigger",
                DEFAULT_MAX_OFFSETS_PER_TRIGGER,
            ),
            fail_on_data_loss=_boolean(given.pop("failondataloss", None), "failOnDataLoss", True),
            poll_timeout_ms=_positive_int(
                given.pop("kafkaconsumer.polltimeoutms", None),
                "kafkaConsumer.pollTimeoutMs",
                DEFAULT_POLL_TIMEOUT_MS,
            ),
            client_factory=factory,
            client_options={k.removeprefix("kafka."): v for k, v in given.items() if k.startswith("kafka.")},
        )
        unknown = sorted(k for k in given if not k.startswith("kafka."))
        if unknown:
            raise KafkaSourceError(f"unknown option(s) for the {SOURCE_NAME} source: {', '.join(unknown)}")
        return parsed

    def to_options(self) -> dict[str, str]:
        """Back to data source options (what :meth:`parse` reads)."""
        return {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "subscribe": self.topic,
            "startingOffsets": self.starting_offsets,
            "maxOffsetsPerTrigger": str(self.max_offsets_per_trigger),
            "failOnDataLoss": str(self.fail_on_data_loss).lower(),
            "kafkaConsumer.pollTimeoutMs": str(self.poll_timeout_ms),
            "clientFactory": self.client_factory,
            **{f"kafka.{k}": v for k, v in self.client_options.items()},
        }

    def make_client(self) -> KafkaClient:
        """The client from ``clientFactory``; KafkaSourceError when it cannot be made."""
        module_name, _, function_name = self.client_factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as exc:
            raise KafkaSourceError(f"clientFactory {self.client_factory!r} cannot be loaded: {exc}") from exc
        try:
            client: KafkaClient = factory(self)
        except KafkaSourceError:
            raise
        except Exception as exc:
            raise KafkaSourceError(
                f"cannot connect to Kafka at {self.bootstrap_servers} (topic {self.topic!r}): "
                f"{_describe(exc)}"
            ) from exc
        return client


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}"


def _positive_int(text: str | None, name: str, default: int) -> int:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise KafkaSourceError(f"option {name} must be a positive integer, got {text!r}")
    return value


def _boolean(text: str | None, name: str, default: bool) -> bool:
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise KafkaSourceError(f"option {name} must be true or false, got {text!r}")
    return text.strip().lower() == "true"


# --- the default client: kafka-python --------------------------------------------------------------------

_FIXED_CONSUMER_CONFIG = {"group_id", "enable_auto_commit", "bootstrap_servers", "key_deserializer"}
_FIXED_CONSUMER_CONFIG |= {"value_deserializer", "allow_auto_create_topics", "auto_offset_reset"}


def consumer_config(options: SourceOptions) -> dict[str, Any]:
    """kafka-python ``KafkaConsumer`` arguments: no consumer group, no auto-commit (the offsets live in
    Spark's checkpoint), no topic auto-creation; ``kafka.<name.with.dots>`` options map to kafka-python's
    ``name_with_underscores`` arguments, converted to the type of kafka-python's default."""
    from kafka import KafkaConsumer

    config: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in options.bootstrap_servers.split(",") if s.strip()],
        "group_id": None,
        "enable_auto_commit": False,
        "allow_auto_create_topics": False,
        # Only when a seek target is out of range: read() has checked the start against the earliest offset.
        "auto_offset_reset": "earliest",
        "client_id": "kafka-health-analytics",
        "bootstrap_timeout_ms": 30_000,
    }
    defaults: Mapping[str, Any] = KafkaConsumer.DEFAULT_CONFIG
    for key, text in sorted(options.client_options.items()):
        name = key.replace(".", "_")
        if name in _FIXED_CONSUMER_CONFIG or name not in defaults:
            raise KafkaSourceError(
                f"option kafka.{key} is not a kafka-python consumer setting this source takes"
            )
        config[name] = _convert(text, defaults[name], key)
    return config


def _convert(text: str, default: Any, key: str) -> Any:
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError as exc:
        raise KafkaSourceError(f"option kafka.{key}: {text!r} is not a {type(default).__name__}") from exc
    if default is None or isinstance(default, str):
        return text
    raise KafkaSourceError(f"option kafka.{key} cannot be given as text")


END_OFFSET_PROBE_MS = 1_000
"""How long :meth:`KafkaPythonClient.end_offsets` waits for the fetch that confirms a partition's end."""


class KafkaPythonClient:
    """:class:`KafkaClient` on kafka-python's ``KafkaConsumer``.

    ``end_offsets`` does not trust ListOffsets(latest) alone: a broker may answer it with less than the
    high watermark (Tansu 0.x answers the last record batch's base offset + 1, so every record of that
    batch but the first would wait for the next batch). It also fetches from the last listed offset with
    a second consumer (``probe``, made on first use: Spark's workers never ask for end offsets) and takes
    the highest of the listed offset, the fetch response's high watermark and the last record fetched
    + 1. On Apache Kafka the three agree; the cost is one small fetch per partition and planning.
    """

    def __init__(self, consumer: Any, probe: Callable[[], Any] | None = None) -> None:
        self._consumer = consumer
        self._make_probe = probe
        self._probe: Any = None

    @staticmethod
    def _tp(partition: TopicPartition) -> Any:
        from kafka import TopicPartition as KafkaTopicPartition

        return KafkaTopicPartition(partition.topic, partition.partition)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        # topics() always asks the cluster; partitions_for_topic alone answers from a cache refreshed only
        # every metadata.max.age.ms, which would hide a partition added to the topic.
        if topic not in self._consumer.topics():
            return None
        return {int(p) for p in self._consumer.partitions_for_topic(topic) or ()}

    def beginning_offsets(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, int]:
        found = self._consumer.beginning_offsets([self._tp(p) for p in partitions])
        return {TopicPartition(tp.topic, tp.partition): int(o) for tp, o in found.items()}

    def end_offsets(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, int]:
        found = self._consumer.end_offsets([self._tp(p) for p in partitions])
        listed = {TopicPartition(tp.topic, tp.partition): int(o) for tp, o in found.items()}
        if self._make_probe is None:
            return listed
        return self._confirmed(listed)

    def _confirmed(self, listed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``listed`` raised to what a fetch from each partition's last listed offset shows."""
        probed = [tp for tp, end in listed.items() if end > 0]
        if not probed:
            return listed
        if self._probe is None and self._make_probe is not None:
            self._probe = self._make_probe()
        probe = self._probe
        probe.assign([self._tp(tp) for tp in probed])
        for tp in probed:
            probe.seek(self._tp(tp), listed[tp] - 1)
        confirmed = dict(listed)
        waiting = set(probed)
        deadline = time.monotonic() + END_OFFSET_PROBE_MS / 1000
        while waiting and time.monotonic() < deadline:
            for ktp, records in probe.poll(timeout_ms=100).items():
                tp = TopicPartition(ktp.topic, ktp.partition)
                if tp not in waiting or not records:
                    continue
                waiting.discard(tp)
                highwater = probe.highwater(ktp)
                confirmed[tp] = max(confirmed[tp], records[-1].offset + 1, int(highwater or 0))
        return confirmed

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._consumer.assign([self._tp(p) for p in partitions])

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._consumer.seek(self._tp(partition), offset)

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[KafkaRecord]]:
        # kafka-python's TopicPartition keys compare and hash equal to ours.
        found: Mapping[TopicPartition, Sequence[KafkaRecord]] = self._consumer.poll(
            timeout_ms=timeout_ms, max_records=max_records
        )
        return found

    def position(self, partition: TopicPartition) -> int:
        return int(self._consumer.position(self._tp(partition)))

    def close(self) -> None:
        try:
            if self._probe is not None:
                self._probe.close(autocommit=False)
        finally:
            self._consumer.close(autocommit=False)


def kafka_python_client(options: SourceOptions) -> KafkaClient:
    """The default ``clientFactory``: a kafka-python consumer (:func:`consumer_config`). It connects at
    once and raises kafka-python's ``KafkaTimeoutError`` when no broker answers within
    ``kafka.bootstrap.timeout.ms`` (30 s)."""
    from kafka import KafkaConsumer

    def make() -> Any:
        consumer = KafkaConsumer.__new__(KafkaConsumer)
        try:
            consumer.__init__(**consumer_config(options))
        except BaseException:
            # kafka-python 3 starts its IO thread before it bootstraps and does not stop it when that fails.
            client = getattr(consumer, "_client", None)
            if client is not None:
                client.close()
            raise
        return consumer

    return KafkaPythonClient(make(), probe=make)


# --- offsets ---------------------------------------------------------------------------------------------


def offsets_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """``{partition: offset}`` as the JSON-serialisable offset Spark stores, in partition order (Spark
    compares offsets as JSON text: the same offsets must give the same text)."""
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def parse_offsets(offset: Mapping[str, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in offset.items()}


def fair_shares(backlogs: Mapping[int, int], budget: int) -> dict[int, int]:
    """How many offsets each partition may advance when ``budget`` is less than the total backlog:
    max-min fair (equal shares, a partition needing less than its share passes the rest on); the
    remainder of an uneven split goes to the partitions furthest behind, so that even a budget smaller
    than the number of partitions moves every partition in turn."""
    alloc = dict.fromkeys(backlogs, 0)
    remaining = max(0, budget)
    active = sorted(p for p, b in backlogs.items() if b > 0)
    while remaining > 0 and active:
        share = remaining // len(active)
        if share == 0:
            behind = sorted(active, key=lambda p: (alloc[p] - backlogs[p], p))
            for p in behind[:remaining]:
                alloc[p] += 1
            break
        for p in active:
            give = min(share, backlogs[p] - alloc[p])
            alloc[p] += give
            remaining -= give
        active = [p for p in active if alloc[p] < backlogs[p]]
    return alloc


# --- the Python data source ------------------------------------------------------------------------------


class KafkaInputPartition(InputPartition):
    """One Kafka partition's offsets ``[start, end)`` in one micro-batch: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


class KafkaSamplesSource(DataSource):
    """The Python streaming data source ``kafka_health_kafka``: records of one topic (``RECORD_DDL``)."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.source_options = SourceOptions.parse(options)  # a bad option fails at load()

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RECORD_DDL

    def streamReader(self, schema: StructType) -> KafkaStreamReader:  # noqa: N802 (PySpark's name)
        return KafkaStreamReader(self.source_options)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"<partition>": next offset}``. Spark calls ``initialOffset``/``latestOffset``/``partitions``
    in one long-lived Python process on the driver (one client, kept open) and ``read`` in its Python
    workers (a client per task)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: KafkaClient | None = None
        self._target: dict[int, int] | None = None
        self._latest: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to its workers: without the driver's client.
        return {"options": self.options, "_client": None, "_target": None, "_latest": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # driver side ----------------------------------------------------------------------------------------

    def _planning_client(self) -> KafkaClient:
        if self._client is None:
            self._client = self.options.make_client()
        return self._client

    def _ask(self, what: str, call: Callable[[KafkaClient], Any]) -> Any:
        try:
            return call(self._planning_client())
        except KafkaSourceError:
            raise
        except Exception as exc:
            self._drop_client()  # a fresh connection next time
            raise KafkaSourceError(
                f"cannot {what} of topic {self.options.topic!r} from {self.options.bootstrap_servers}: "
                f"{_describe(exc)}"
            ) from exc

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:
                log.debug("closing the Kafka client failed", exc_info=True)

    def _partitions(self) -> list[int]:
        found = self._ask("list the partitions", lambda c: c.partitions_for_topic(self.options.topic))
        if not found:
            raise KafkaSourceError(
                f"Kafka topic {self.options.topic!r} does not exist on {self.options.bootstrap_servers} "
                "(create it before starting the job: the source does not create topics)"
            )
        return sorted(int(p) for p in found)

    def _offsets(self, kind: Literal["beginning", "end"], partitions: Sequence[int]) -> dict[int, int]:
        if not partitions:
            return {}
        tps = [TopicPartition(self.options.topic, p) for p in partitions]
        if kind == "beginning":
            found = self._ask("read the earliest offsets", lambda c: c.beginning_offsets(tps))
        else:
            found = self._ask("read the latest offsets", lambda c: c.end_offsets(tps))
        return {tp.partition: int(found[tp]) for tp in tps}

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (PySpark's name)
        partitions = self._partitions()
        kind: Literal["beginning", "end"] = (
            "beginning" if self.options.starting_offsets == "earliest" else "end"
        )
        return offsets_json(self._offsets(kind, partitions))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (PySpark's name)
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (PySpark's name)
        partitions = self._partitions()
        self._target = self._offsets("end", partitions)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:  # noqa: N802 (PySpark's name)
        current = parse_offsets(start)
        partitions = self._partitions()
        gone = sorted(set(current) - set(partitions))
        if gone:
            self._data_loss(f"partition(s) {gone} of topic {self.options.topic!r} no longer exist")
        if self._target is not None:  # Trigger.AvailableNow: nothing beyond what was there at the start
            partitions = [p for p in partitions if p in self._target]
        new = [p for p in partitions if p not in current]
        begin = self._offsets("beginning", new)
        end = self._offsets("end", partitions)
        self._latest = dict(end)
        if self._target is not None:
            end = {p: min(e, self._target[p]) for p, e in end.items()}
        if new:
            log.info(
                "topic %s: new partition(s) %s, read from their earliest offsets", self.options.topic, new
            )
        starts = {p: current.get(p, begin.get(p, 0)) for p in partitions}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        backlog = {p: max(0, end[p] - starts[p]) for p in partitions}
        if budget is None or sum(backlog.values()) <= budget:
            latest = end
        else:
            shares = fair_shares(backlog, budget)
            latest = {p: starts[p] + shares[p] if end[p] >= starts[p] else end[p] for p in partitions}
        # A partition not yet started and given nothing this time stays out of the offset.
        latest = {p: o for p, o in latest.items() if p in current or o > starts[p]}
        return offsets_json(latest)

    def reportLatestOffset(self) -> dict[str, int] | None:  # noqa: N802 (PySpark's name)
        return None if self._latest is None else offsets_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaInputPartition]:
        first, last = parse_offsets(start), parse_offsets(end)
        begin = self._offsets("beginning", sorted(p for p in last if p not in first))
        planned = []
        for p, stop in sorted(last.items()):
            offset = first.get(p, begin.get(p, 0))
            if offset > stop:
                self._data_loss(
                    f"partition {p} of topic {self.options.topic!r} ends at offset {stop}, before offset "
                    f"{offset} where the query stopped reading (was the topic deleted and re-created?)"
                )
                offset = self._offsets("beginning", [p])[p]
            if offset < stop:
                planned.append(KafkaInputPartition(self.options.topic, p, offset, stop))
        return planned

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        self._drop_client()

    def _data_loss(self, what: str) -> None:
        if self.options.fail_on_data_loss:
            raise KafkaSourceError(
                f"{what}: records the query has not read are lost (set failOnDataLoss=false to go on)"
            )
        log.warning("%s: records lost, going on (failOnDataLoss=false)", what)

    # worker side ----------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, str | None]]:
        if not isinstance(partition, KafkaInputPartition):
            raise TypeError(f"not a Kafka input partition: {partition!r}")
        return read_partition(self.options, partition)


def read_partition(
    options: SourceOptions, partition: KafkaInputPartition
) -> Generator[tuple[str, int, int, str | None], None, None]:
    """The records of ``[partition.start, partition.end)`` in offset order as ``(topic, partition, offset,
    value)``; KafkaSourceError when no record comes for ``kafkaConsumer.pollTimeoutMs``."""
    tp = TopicPartition(partition.topic, partition.partition)
    client = options.make_client()
    try:
        start = partition.start
        earliest = client.beginning_offsets([tp])[tp]
        if start < earliest:
            message = (
                f"offsets {start}..{earliest - 1} of {tp.topic}-{tp.partition} were deleted (retention) "
                "before the query read them"
            )
            if options.fail_on_data_loss:
                raise KafkaSourceError(f"{message} (set failOnDataLoss=false to go on)")
            log.warning("%s: skipped (failOnDataLoss=false)", message)
            start = earliest
        client.assign([tp])
        client.seek(tp, start)
        expected = start
        waited_since = time.monotonic()
        while expected < partition.end:
            wait_ms = max(1, min(1000, options.poll_timeout_ms))
            batch = client.poll(
                timeout_ms=wait_ms, max_records=min(MAX_RECORDS_PER_POLL, partition.end - expected)
            )
            progressed = False
            for record in batch.get(tp, ()):
                if record.offset < expected:
                    continue  # already returned (a fetch can start before the requested offset)
                if record.offset >= partition.end:
                    expected = partition.end
                    break
                value = (
                    None if record.value is None else bytes(record.value).decode("utf-8", errors="replace")
                )
                yield (tp.topic, tp.partition, record.offset, value)
                expected = record.offset + 1
                progressed = True
            if expected >= partition.end:
                break
            if progressed:
                waited_since = time.monotonic()
            elif client.position(tp) >= partition.end:
                break  # the rest of the range holds no records (compaction, transaction markers)
            elif (time.monotonic() - waited_since) * 1000 >= options.poll_timeout_ms:
                raise KafkaSourceError(
                    f"no record from Kafka {tp.topic}-{tp.partition} at {options.bootstrap_servers} for "
                    f"{options.poll_timeout_ms} ms: expected offsets {expected}..{partition.end - 1} "
                    "(raise kafkaConsumer.pollTimeoutMs if the brokers are slow)"
                )
    finally:
        client.close()


# --- choosing the way and parsing ------------------------------------------------------------------------


def kafka_connector_available(spark: Any) -> bool:
    """Whether the spark-sql-kafka connector is on the session's classpath (False on a Spark Connect
    session, where the driver's JVM cannot be asked: the Python source works there)."""
    return jvm_class_available(spark, CONNECTOR_CLASS)


def jvm_class_available(spark: Any, class_name: str) -> bool:
    """Whether the driver's JVM can load ``class_name`` with Spark's class loader (the one that sees
    ``--jars``/``--packages``), without initialising it."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    try:
        jvm.org.apache.spark.util.Utils.classForName(class_name, False, False)
    except Py4JJavaError:  # ClassNotFoundException, NoClassDefFoundError
        return False
    return True


def connector_options(options: SourceOptions) -> dict[str, str]:
    """The spark-sql-kafka connector's options for the same read (the client factory and the poll timeout
    are the Python source's own)."""
    return {
        "kafka.bootstrap.servers": options.bootstrap_servers,
        "subscribe": options.topic,
        "startingOffsets": options.starting_offsets,
        "maxOffsetsPerTrigger": str(options.max_offsets_per_trigger),
        "failOnDataLoss": str(options.fail_on_data_loss).lower(),
        "kafkaConsumer.pollTimeoutMs": str(options.poll_timeout_ms),
        **{f"kafka.{k}": v for k, v in options.client_options.items()},
    }


def source_options(spec: TransportSpec, options: Mapping[str, str] | None = None) -> SourceOptions:
    if spec.kind != "kafka" or not spec.bootstrap_servers or not spec.topic:
        raise ValueError(f"{spec}: not a Kafka source (kafka:BOOTSTRAP/TOPIC)")
    return SourceOptions.parse(
        {"kafka.bootstrap.servers": spec.bootstrap_servers, "subscribe": spec.topic} | dict(options or {})
    )


def register_source(spark: Any) -> None:
    """Register :class:`KafkaSamplesSource` with the session (again is harmless)."""
    spark.dataSource.register(KafkaSamplesSource)


def kafka_records(
    spark: Any,
    spec: TransportSpec,
    options: Mapping[str, str] | None = None,
    *,
    use_connector: bool | None = None,
) -> Any:
    """The topic's records as a streaming DataFrame (``RECORD_DDL``): through the connector when
    ``use_connector`` (None: when it is on the classpath), else through the Python source. ``options``
    are the Python source's (:class:`SourceOptions`), mapped to the connector's when it is used."""
    from pyspark.sql import functions as F

    parsed = source_options(spec, options)
    if use_connector is None:
        use_connector = kafka_connector_available(spark)
    if use_connector:
        log.info("reading %s with the spark-sql-kafka connector", spec)
        raw = spark.readStream.format("kafka").options(**connector_options(parsed)).load()
        return raw.select(
            F.col("topic").cast("string").alias("topic"),
            F.col("partition").cast("int").alias("partition"),
            F.col("offset").cast("bigint").alias("offset"),
            F.col("value").cast("string").alias("value"),
        )
    log.info("reading %s with the Python data source %s (kafka-python)", spec, SOURCE_NAME)
    register_source(spark)
    return spark.readStream.format(SOURCE_NAME).options(**parsed.to_options()).load()


def parse_sample_lines(records: Any, ddl: str, corrupt_column: str = CORRUPT_RECORD) -> Any:
    """Record values → the columns of ``ddl``, as Spark's JSON file source reads a spool file in PERMISSIVE
    mode: one row per non-blank line of a value (``\\n``, ``\\r\\n`` or ``\\r``), a null value (a
    tombstone) gives none, a line that is not a JSON object of the schema keeps its text in
    ``corrupt_column`` (columns that did parse keep their values, as in the file source), and a STRING
    column holding a JSON object or array gets its JSON text (re-serialised: compact, numbers as Jackson
    writes them; the same document for ``json.loads``)."""
    from pyspark.sql import functions as F

    lines = records.select(F.explode(F.split(F.col("value"), r"\r\n|\r|\n")).alias("line"))
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt_column}
    return (
        lines.filter(~F.col("line").rlike(r"^\s*$"))
        .select(F.from_json(F.col("line"), ddl, options).alias("sample"))
        .select("sample.*")
    )


def read_kafka_samples(
    spark: Any,
    spec: TransportSpec,
    ddl: str,
    options: Mapping[str, str] | None = None,
    *,
    use_connector: bool | None = None,
) -> Any:
    """The samples on ``spec``'s topic as a streaming DataFrame with the columns of ``ddl`` (what
    :func:`analytics.spark.job.read_samples` reads from a spool directory with the JSON file source)."""
    return parse_sample_lines(kafka_records(spark, spec, options, use_connector=use_connector), ddl)
