"""``/metrics``: a cluster's consumer groups as the latest consumer-lag round saw them
(``kafka_health_consumergroup_*``), the collector's own health (``kafka_health_consumer_lag_*``) and, with
``kafka.exporter_compatible_metrics``, kafka_exporter's names for the same figures
(``kafka_consumergroup_lag``, ``kafka_consumergroup_current_offset``,
``kafka_topic_partition_current_offset``), so that dashboards built on kafka_exporter keep working. Every
series has the ``cluster`` label, as the other per-cluster series do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from app.service.consumers import ConsumerLag
from collectors.consumers.verdicts import Status

STATUSES: tuple[str, ...] = get_args(Status)


def _gauge(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=("cluster", *labels))


def consumer_metrics(cluster: str, consumers: ConsumerLag) -> Iterator[Metric]:
    """The series of one cluster's consumer-lag collector."""
    stats = consumers.stats()
    up = _gauge("kafka_health_consumer_lag_up", "1 when the last consumer-lag round succeeded.")
    up.add_metric([cluster], 0 if consumers.error is not None or stats.rounds == 0 else 1)
    yield up
    rounds = CounterMetricFamily(
        "kafka_health_consumer_lag_rounds", "Consumer-lag rounds that succeeded.", labels=("cluster",)
    )
    rounds.add_metric([cluster], stats.rounds)
    yield rounds
    errors = CounterMetricFamily(
        "kafka_health_consumer_lag_errors",
        "Consumer-lag rounds that failed (no broker answered over Kafka's protocol, ...).",
        labels=("cluster",),
    )
    errors.add_metric([cluster], stats.errors)
    yield errors
    if stats.last_round_at is not None and stats.last_round_s is not None:
        last = _gauge("kafka_health_consumer_lag_last_round_timestamp_seconds", "When the last round ran.")
        last.add_metric([cluster], stats.last_round_at)
        yield last
        took = _gauge("kafka_health_consumer_lag_last_round_seconds", "Wall time of the last round.")
        took.add_metric([cluster], stats.last_round_s)
        yield took
    latest = consumers.latest
    if latest is None:
        return
    lag = _gauge(
        "kafka_health_consumergroup_lag",
        "Records the group is behind on the partition (log end - committed offset).",
        "group",
        "topic",
        "partition",
    )
    seconds = _gauge(
        "kafka_health_consumergroup_lag_seconds",
        "How long ago the partition's log end was at the group's committed offset (a lower bound when "
        "older than the collector's history).",
        "group",
        "topic",
        "partition",
    )
    status = _gauge(
        "kafka_health_consumergroup_status", "The group's verdict: 1 for its status.", "group", "status"
    )
    members = _gauge("kafka_health_consumergroup_members", "The group's members.", "group")
    exporter = consumers.settings.exporter_compatible_metrics
    k_lag = _gauge("kafka_consumergroup_lag", "kafka_exporter's: the group's lag.", *_EXPORTER_LABELS)
    k_offset = _gauge(
        "kafka_consumergroup_current_offset",
        "kafka_exporter's: the group's committed offset.",
        *_EXPORTER_LABELS,
    )
    k_end = _gauge(
        "kafka_topic_partition_current_offset",
        "kafka_exporter's: the partition's log-end offset.",
        "topic",
        "partition",
    )
    ends: dict[tuple[str, int], int] = {}
    for name in sorted(latest.groups):
        report = latest.groups[name]
        for value in STATUSES:
            status.add_metric([cluster, name, value], 1 if report.verdict.status == value else 0)
        members.add_metric([cluster, name], report.lag.members)
        for p in report.lag.partitions:
            labels = [cluster, name, p.topic, str(p.partition)]
            if p.lag is not None:
                lag.add_metric(labels, p.lag)
                if exporter:
                    k_lag.add_metric(labels, p.lag)
            if p.lag_seconds is not None:
                seconds.add_metric(labels, p.lag_seconds.value)
            if exporter and p.committed is not None:
                k_offset.add_metric(labels, p.committed)
            if p.log_end is not None:
                ends[p.topic, p.partition] = p.log_end
    yield from (lag, seconds, status, members)
    if exporter:
        for (topic, partition), end in sorted(ends.items()):
            k_end.add_metric([cluster, topic, str(partition)], end)
        yield from (k_lag, k_offset, k_end)


_EXPORTER_LABELS = ("consumergroup", "topic", "partition")
