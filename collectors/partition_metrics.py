"""A targeted read of a few brokers' per-partition and per-topic series, for a running reassignment: each
partition's log size (how far a new replica has copied) and each topic's produced bytes (how fast the
partitions being moved grow).

jmx_exporter's Kafka rules (and Strimzi's) expose ``kafka.log:type=Log,name=Size,topic=T,partition=P`` as
the gauge ``kafka_log_log_size{topic,partition}`` in bytes, and
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T`` as the counter
``kafka_server_brokertopicmetrics_bytesin_total{topic}``: bytes the broker took from producers for the
partitions of T it leads, since it started (Confluent's and Bitnami's rules name the counter differently:
:data:`TOPIC_BYTES_IN_NAMES`). A rate needs two reads, so a read returns the raw counters
and :func:`topic_rates` (pure) turns two of them into bytes per second.

The endpoints, the HTTP fetcher, the timeouts and the parser are the metrics collector's
(:meth:`collectors.metrics.MetricsCollector.fetch_series`). A series that is malformed (no ``topic``, a
``partition`` that is not a partition number, a negative size) is skipped and reported in the broker's
``problems``, as is a family missing altogether; a broker that cannot be read is its ``error``. Nothing
here raises for what a broker serves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from collectors.kafka.model import BrokerRegistration, TopicPartition
from collectors.metrics import Exposition, LabelSet, MetricsCollector, RawScrape

LOG_SIZE = "kafka_log_log_size"
TOPIC_BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
TOPIC_BYTES_IN_NAMES = (
    TOPIC_BYTES_IN,
    "kafka_server_brokertopicmetrics_bytesinpersec",
    "kafka_server_brokertopicmetrics_bytesinpersec_count",
)
"""The per-topic ``BytesInPerSec`` counter as each exporter dialect names it (docs/collectors.md
"Exporter dialects"): jmx_exporter's example and Strimzi's rules, Confluent's, Bitnami's; the first one a
broker serves is read. ``kafka_log_log_size`` is named alike by all four."""
WANTED = frozenset({LOG_SIZE, *TOPIC_BYTES_IN_NAMES})
MAX_PROBLEMS = 20
"""Problems listed per broker; beyond, only counted (a broker with 200k odd series says so in one line)."""
_FUTURE_LABELS = ("is_future", "is-future")
"""The label Kafka's ``is-future`` tag gets: a future log is an intra-broker move's copy (between log
directories), not the replica itself, so it is left out without a word."""


@dataclass(frozen=True, slots=True)
class BrokerPartitionMetrics:
    """What one broker's endpoint showed; empty maps and an ``error`` when it could not be read."""

    broker_id: int
    url: str | None
    scraped_at: float
    """Epoch seconds when the request started: the time of :attr:`topic_bytes_in`, for rates."""
    log_size_bytes: Mapping[TopicPartition, float] = field(default_factory=dict)
    """Each partition's log on this broker, in bytes (``kafka_log_log_size``)."""
    topic_bytes_in: Mapping[str, float] = field(default_factory=dict)
    """Each topic's produced bytes on this broker since it started (a counter; leaders only)."""
    problems: tuple[str, ...] = ()
    """Series skipped and families missing, one sentence each."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class PartitionMetricsScrape:
    brokers: Mapping[int, BrokerPartitionMetrics]
    started_at: float

    @property
    def failures(self) -> dict[int, str]:
        """Broker id -> why it could not be read."""
        return {b: m.error for b, m in self.brokers.items() if m.error is not None}

    @property
    def problems(self) -> dict[int, tuple[str, ...]]:
        """Broker id -> what was skipped, for the brokers that had something to say."""
        return {b: m.problems for b, m in self.brokers.items() if m.problems}

    def log_sizes(self) -> dict[int, Mapping[TopicPartition, float]]:
        """Broker id -> partition -> log size in bytes, for the brokers that were read."""
        return {b: m.log_size_bytes for b, m in self.brokers.items() if m.ok}


def scrape_partition_metrics(
    collector: MetricsCollector,
    brokers: Mapping[int, BrokerRegistration],
    topics: Collection[str] | None = None,
) -> PartitionMetricsScrape:
    """Read ``brokers``' endpoints once (concurrently, each with the collector's timeout) and keep the log
    sizes and topic byte counters of ``topics`` (all when None)."""
    started_at = collector.now()
    raws = collector.fetch_series(brokers, WANTED)
    return PartitionMetricsScrape({raw.broker_id: from_raw(raw, topics) for raw in raws}, started_at)


def from_raw(raw: RawScrape, topics: Collection[str] | None = None) -> BrokerPartitionMetrics:
    """One broker's read, as :class:`BrokerPartitionMetrics`."""
    if raw.exposition is None:
        return BrokerPartitionMetrics(raw.broker_id, raw.url, raw.scraped_at, error=raw.error or "not read")
    sizes, bytes_in, problems = read_partition_metrics(raw.exposition, topics)
    return BrokerPartitionMetrics(raw.broker_id, raw.url, raw.scraped_at, sizes, bytes_in, problems)


def read_partition_metrics(
    exposition: Exposition, topics: Collection[str] | None = None
) -> tuple[dict[TopicPartition, float], dict[str, float], tuple[str, ...]]:
    """(log size per partition, produced bytes per topic, problems) from one exposition; pure."""
    wanted = None if topics is None else frozenset(topics)
    problems = _Problems()
    sizes: dict[TopicPartition, float] = {}
    log_series = exposition.get(LOG_SIZE)
    if not log_series:
        problems.add(f"no {LOG_SIZE} series: the brokers' Log MBeans are not exported")
    for labels, value in (log_series or {}).items():
        as_dict = dict(labels)
        if any(as_dict.get(k) == "true" for k in _FUTURE_LABELS):
            continue
        tp = _partition(as_dict, labels, problems)
        if tp is None or (wanted is not None and tp.topic not in wanted):
            continue
        if value < 0:
            problems.add(f"{LOG_SIZE}{_text(labels)} is negative ({value:g}): skipped")
        elif tp in sizes:
            problems.add(f"{LOG_SIZE} for {tp} given twice: the first kept")
        else:
            sizes[tp] = value
    bytes_in: dict[str, float] = {}
    counter = next((n for n in TOPIC_BYTES_IN_NAMES if exposition.get(n)), TOPIC_BYTES_IN)
    counter_series = exposition.get(counter)
    if not counter_series:
        problems.add(f"no {TOPIC_BYTES_IN} series")
    for labels, value in (counter_series or {}).items():
        topic = dict(labels).get("topic", "")
        if not topic or (wanted is not None and topic not in wanted):
            continue  # the series without a topic is the broker's total
        if value < 0:
            problems.add(f"{counter}{_text(labels)} is negative ({value:g}): skipped")
        elif topic in bytes_in:
            problems.add(f"{counter} for topic {topic!r} given twice: the first kept")
        else:
            bytes_in[topic] = value
    return sizes, bytes_in, problems.done()


def _partition(labels: Mapping[str, str], raw: LabelSet, problems: _Problems) -> TopicPartition | None:
    topic, partition = labels.get("topic", ""), labels.get("partition", "")
    if not topic:
        problems.add(f"{LOG_SIZE}{_text(raw)} has no topic: skipped")
        return None
    if not partition.isdecimal() or not partition.isascii():
        problems.add(f"{LOG_SIZE}{_text(raw)}: partition {partition!r} is not a partition number: skipped")
        return None
    return TopicPartition(topic, int(partition))


def _text(labels: LabelSet) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


class _Problems:
    """At most :data:`MAX_PROBLEMS` sentences, then a count of the rest."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self.more = 0

    def add(self, sentence: str) -> None:
        if len(self.listed) < MAX_PROBLEMS:
            self.listed.append(sentence)
        else:
            self.more += 1

    def done(self) -> tuple[str, ...]:
        return (*self.listed, f"... and {self.more} more") if self.more else tuple(self.listed)


# --- rates (pure) ------------------------------------------------------------------------------------


def counter_rates(
    before: Mapping[str, float], after: Mapping[str, float], elapsed_s: float
) -> dict[str, float]:
    """Per-second increase of each counter read both times, as Prometheus' ``rate``: a value that went
    down counts as a restart from 0 (the broker restarted). None of them without elapsed time."""
    if elapsed_s <= 0:
        return {}
    return {
        key: (value - before[key] if value >= before[key] else value) / elapsed_s
        for key, value in after.items()
        if key in before
    }


def topic_rates(before: BrokerPartitionMetrics, after: BrokerPartitionMetrics) -> dict[str, float]:
    """Each topic's produced bytes per second on one broker between two reads of it (the topics it led at
    both); empty when either read failed. ValueError for reads of two different brokers."""
    if before.broker_id != after.broker_id:
        raise ValueError(
            f"rates need two reads of one broker, got brokers {before.broker_id} and {after.broker_id}"
        )
    if not before.ok or not after.ok:
        return {}
    return counter_rates(before.topic_bytes_in, after.topic_bytes_in, after.scraped_at - before.scraped_at)


def bytes_in_rates(
    before: PartitionMetricsScrape, after: PartitionMetricsScrape
) -> dict[int, dict[str, float]]:
    """Broker id -> topic -> produced bytes per second, for the brokers read well both times."""
    return {
        b: topic_rates(before.brokers[b], m)
        for b, m in after.brokers.items()
        if b in before.brokers and m.ok and before.brokers[b].ok
    }
