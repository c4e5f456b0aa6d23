"""Simulated client traffic and the host resources it costs, per broker.

Produce rates are set per partition and scaled by skew factors (per broker, per topic, per partition);
a broker's CPU, disk, memory and file descriptors follow from the bytes it moves and the replicas it holds,
so that the load model sees a coherent picture: skewing traffic onto one broker raises all of its metrics.
The same bytes make the broker's request threads busy (:func:`update_request_load`): idle ratios fall and
the produce latency rises as a broker handles more, whether produce, consumer or replication traffic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.embedded.reference_cluster.broker import BASE_FDS, SimBroker
from app.embedded.reference_cluster.config import TrafficSettings
from app.embedded.reference_cluster.groups import OFFSETS_TOPIC
from collectors.kafka.model import TopicPartition

CPU_BYTES_PER_CORE_SECOND = 16 * 1024 * 1024
"""Bytes a core moves per second (produce, fetch, replication, with TLS and compression) in the CPU model:
low enough that the default traffic keeps a core or so busy, so that skew shows in CPU as in bytes."""
CPU_BASE_CORES = 0.05
JVM_HEAP_BYTES = 6 * 1024**3
SEGMENT_BYTES = 1024**3
CONSUMER_CACHE_MISS = 0.05
"""Share of consumer reads served from disk rather than the page cache."""
PRODUCE_LATENCY_CAP_MS = 30_000.0
"""The produce latency never shows above the producers' default ``request.timeout.ms``: a request that
waits longer has failed on the client and been sent again."""
PRODUCE_QUANTILES: Mapping[str, float] = {
    "0.50": 0.3,
    "0.75": 0.45,
    "0.95": 0.75,
    "0.98": 0.9,
    "0.99": 1.0,
    "0.999": 1.6,
}
"""The percentiles a Kafka histogram exposes (``50thPercentile`` ... ``999thPercentile``, as jmx_exporter's
``quantile`` label writes them), each as a multiple of the 99th: a long-tailed shape that keeps them
ordered."""


class SkewError(ValueError):
    """A skew request names something unknown or a factor that is not a finite number >= 0."""


@dataclass(frozen=True, slots=True)
class TickTraffic:
    """What one broker moved during one tick, in bytes."""

    produce_in: float = 0.0
    consumer_out: float = 0.0
    replication_in: float = 0.0
    replication_out: float = 0.0


class TrafficModel:
    def __init__(self, settings: TrafficSettings) -> None:
        self.settings = settings
        self.broker_factors: dict[int, float] = {}
        self.topic_factors: dict[str, float] = {}
        self.partition_factors: dict[TopicPartition, float] = {}

    def produce_bytes_per_sec(self, tp: TopicPartition, leader: int) -> float:
        """The partition's produce rate; none for ``__consumer_offsets`` (clients do not produce to it)."""
        if tp.topic == OFFSETS_TOPIC:
            return 0.0
        return (
            self.settings.produce_bytes_per_sec
            * self.broker_factors.get(leader, 1.0)
            * self.topic_factors.get(tp.topic, 1.0)
            * self.partition_factors.get(tp, 1.0)
        )

    def apply_skew(self, body: Mapping[str, Any], brokers: set[int], topics: Mapping[str, int]) -> None:
        """Validate all of ``body`` first, then apply it: a bad request changes nothing.

        ``{"brokers": {"1": 3}, "topics": {"orders": 2}, "partitions": {"orders-0": 5}, "reset": true}``:
        factors multiply the produce rate of the partitions a broker leads, of a topic, of a partition.
        ``reset`` clears every factor before the others apply.
        """
        allowed = {"brokers", "topics", "partitions", "reset"}
        if not isinstance(body, Mapping) or not body or set(body) - allowed:
            raise SkewError(f"a skew body is an object with some of {sorted(allowed)}")
        reset = body.get("reset", False)
        if not isinstance(reset, bool):
            raise SkewError("reset must be true or false")
        new_brokers = {self._broker_key(k, brokers): _factor(v) for k, v in _section(body, "brokers").items()}
        new_topics = {self._topic_key(k, topics): _factor(v) for k, v in _section(body, "topics").items()}
        new_partitions = {
            self._partition_key(k, topics): _factor(v) for k, v in _section(body, "partitions").items()
        }
        if reset:
            self.broker_factors.clear()
            self.topic_factors.clear()
            self.partition_factors.clear()
        self.broker_factors.update(new_brokers)
        self.topic_factors.update(new_topics)
        self.partition_factors.update(new_partitions)

    @staticmethod
    def _broker_key(key: str, brokers: set[int]) -> int:
        if not str(key).lstrip("-").isdigit() or int(key) not in brokers:
            raise SkewError(f"unknown broker {key!r}")
        return int(key)

    @staticmethod
    def _topic_key(key: str, topics: Mapping[str, int]) -> str:
        if key not in topics:
            raise SkewError(f"unknown topic {key!r}")
        return key

    @staticmethod
    def _partition_key(key: str, topics: Mapping[str, int]) -> TopicPartition:
        topic, _, partition = key.rpartition("-")
        if not topic or not partition.isdigit() or topic not in topics or int(partition) >= topics[topic]:
            raise SkewError(f"unknown partition {key!r} (write TOPIC-PARTITION, e.g. orders-0)")
        return TopicPartition(topic, int(partition))

    def describe(self) -> dict[str, Any]:
        return {
            "produce_bytes_per_sec_per_partition": self.settings.produce_bytes_per_sec,
            "consumer_fanout": self.settings.consumer_fanout,
            "skew": {
                "brokers": {str(k): v for k, v in sorted(self.broker_factors.items())},
                "topics": dict(sorted(self.topic_factors.items())),
                "partitions": {str(k): v for k, v in sorted(self.partition_factors.items())},
            },
        }


def _section(body: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = body.get(key, {})
    if not isinstance(value, Mapping):
        raise SkewError(f"{key} must be an object of name -> factor")
    return value


def _factor(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise SkewError(f"a skew factor must be a finite number >= 0, got {value!r}")
    return float(value)


def update_host(broker: SimBroker, moved: TickTraffic, dt_s: float, settings: TrafficSettings) -> None:
    """Advance the broker's host counters (node_exporter's) and gauges by one tick of ``moved`` bytes, and
    measure its log dirs (:meth:`SimBroker.measure_log_dirs`)."""
    c = broker.host_counters
    cores = settings.cpu_cores
    total_bytes = moved.produce_in + moved.consumer_out + moved.replication_in + moved.replication_out
    busy_cores = (
        min(cores * 0.95, CPU_BASE_CORES + total_bytes / dt_s / CPU_BYTES_PER_CORE_SECOND) if dt_s else 0
    )
    disk_write = moved.produce_in + moved.replication_in
    disk_read = moved.consumer_out * CONSUMER_CACHE_MISS + moved.replication_out * 0.5
    io_busy = min(1.0, (disk_write + disk_read) / (settings.disk_bytes_per_sec * dt_s)) if dt_s else 0.0
    iowait_cores = min(cores - busy_cores, io_busy * 0.5)
    c.cpu_seconds["user"] += busy_cores * 0.7 * dt_s
    c.cpu_seconds["system"] += busy_cores * 0.3 * dt_s
    c.cpu_seconds["iowait"] += iowait_cores * dt_s
    c.cpu_seconds["idle"] += max(0.0, cores - busy_cores - iowait_cores) * dt_s
    c.disk_written_bytes += disk_write
    c.disk_read_bytes += disk_read
    c.disk_io_time_seconds += io_busy * dt_s
    c.network_receive_bytes += moved.produce_in + moved.replication_in
    c.network_transmit_bytes += moved.consumer_out + moved.replication_out
    broker.measure_log_dirs(settings.message_bytes)
    log_bytes = sum(disk.log_bytes for disk in broker.disks)
    page_cache_hot = min(settings.memory_bytes * 0.5, (disk_write / dt_s if dt_s else 0) * 60)
    broker.host.memory_used_bytes = min(
        settings.memory_bytes * 0.98, JVM_HEAP_BYTES + 64 * 1024 * len(broker.logs) + page_cache_hot
    )
    segments = sum(1 + int(log_bytes_per_replica // SEGMENT_BYTES) for log_bytes_per_replica in [log_bytes])
    broker.host.open_fds = BASE_FDS + 3 * len(broker.logs) + 2 * segments + 4 * len(broker.partitions)


def busy_fraction(moved: TickTraffic, dt_s: float, capacity_bytes_per_sec: float) -> float:
    """The fraction of a broker's request-thread time that one tick's bytes took, in [0, 1]: every byte
    counts alike, produced, consumed or replicated in either direction."""
    if dt_s <= 0:
        return 0.0
    total = moved.produce_in + moved.consumer_out + moved.replication_in + moved.replication_out
    return min(1.0, max(0.0, total / dt_s / capacity_bytes_per_sec))


def smooth(previous: float, sample: float, dt_s: float, time_constant_s: float) -> float:
    """An exponentially weighted moving average over time, as Kafka's one-minute rates average (Yammer's
    EWMA with a 60 s time constant): after ``time_constant_s`` a step is 63 % reflected, after three 95 %."""
    if dt_s <= 0:
        return previous
    return previous + (1.0 - math.exp(-dt_s / time_constant_s)) * (sample - previous)


def produce_latency_ms(busy: float, p99_idle_ms: float, quantile_factor: float = 1.0) -> float:
    """A percentile of the Produce request's total time with the threads ``busy``: the idle latency over
    ``1 - busy``, the shape of a queue's waiting time (M/M/1), capped at :data:`PRODUCE_LATENCY_CAP_MS`."""
    free = 1.0 - min(1.0, max(0.0, busy))
    base = p99_idle_ms * quantile_factor
    if free <= base / PRODUCE_LATENCY_CAP_MS:
        return PRODUCE_LATENCY_CAP_MS
    return min(PRODUCE_LATENCY_CAP_MS, base / free)


def update_request_load(
    broker: SimBroker, moved: TickTraffic, dt_s: float, settings: TrafficSettings
) -> None:
    """Advance the broker's smoothed busy fraction by one tick of ``moved`` bytes."""
    load = broker.request_load
    now = busy_fraction(moved, dt_s, settings.request_capacity_bytes_per_sec)
    load.busy = min(1.0, max(0.0, smooth(load.busy, now, dt_s, settings.signal_smoothing_s)))
