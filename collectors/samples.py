"""Samples: what the collectors hand to the analytics job, one JSON object per line.

Each sample carries ``(collector_id, sequence)``: a collector numbers its samples from 0 under an id that
is new at every start, so the pair is unique and the analytics job can drop a sample it has seen
(docs/kafka-reference.md §7: the idempotent producer's PID + sequence, applied to our own pipeline).

Two kinds: ``broker`` samples hold one broker's load-model metrics (docs/kafka-reference.md §4: partitions,
leaders, cpuUsed, nwBytesIn, nwBytesOut, ioRead, ioWrite, iowait, ioutil, fd, memUsed; a metric the broker
could not give is absent, not zero), ``cluster`` samples the health summary.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from collectors.health import HealthReport, problem_partitions
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.metrics import MetricsScrape

LOAD_METRICS = (
    "partitions",
    "leaders",
    "cpuUsed",
    "nwBytesIn",
    "nwBytesOut",
    "ioRead",
    "ioWrite",
    "iowait",
    "ioutil",
    "fd",
    "memUsed",
)
"""The load model's metric names (docs/kafka-reference.md §4), in the order listed there."""

SAMPLE_SCHEMA_VERSION = 1


def new_collector_id(name: str | None = None) -> str:
    """``<name or host>-<8 hex>``: new at every start, so sequences never collide across restarts."""
    base = name or socket.gethostname() or f"pid{os.getpid()}"
    return f"{base}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class Sample:
    collector_id: str
    sequence: int
    timestamp: float
    """Epoch seconds when the values were taken (event time for the analytics job's windows)."""
    kind: Literal["broker", "cluster"]
    cluster: str
    """The cluster's key: its name when the deployment watches several (``--cluster NAME=...``), else its id
    from ``/cluster/id`` (``unknown`` when it has none)."""
    broker: int | None
    metrics: Mapping[str, float] = field(default_factory=dict)
    health: Mapping[str, Any] | None = None
    """``cluster`` samples: the health document (:func:`health_document`) the alert rules read."""

    def to_json(self) -> dict[str, Any]:
        doc = {
            "v": SAMPLE_SCHEMA_VERSION,
            "collector_id": self.collector_id,
            "sequence": self.sequence,
            "timestamp": self.timestamp,
            "kind": self.kind,
            "cluster": self.cluster,
            "broker": self.broker,
            "metrics": dict(self.metrics),
        }
        if self.health is not None:
            doc["health"] = self.health
        return doc

    def to_line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)


class SampleNumbering:
    """Hands out ``(collector_id, sequence)`` pairs; one per collector process."""

    def __init__(self, collector_id: str) -> None:
        self.collector_id = collector_id
        self._counter: Iterator[int] = itertools.count()

    def next(self) -> int:
        return next(self._counter)


def cluster_key(snapshot: ClusterSnapshot, name: str | None = None) -> str:
    """What a sample's ``cluster`` says: the watched cluster's ``name`` when it has one, else the cluster id
    from ``/cluster/id`` (``unknown`` when it has none), as a single-cluster deployment always did."""
    if name is not None:
        return name
    return snapshot.cluster_id or "unknown"


def _finite(values: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)}


def broker_counts(snapshot: ClusterSnapshot) -> dict[int, tuple[int, int]]:
    """(replicas hosted, partitions led) per registered broker, from ZooKeeper: the load model's
    ``partitions`` and ``leaders`` for every broker, scraped or not."""
    counts = {b: [0, 0] for b in snapshot.brokers}
    for info in snapshot.partitions.values():
        for replica in info.assignment.replicas:
            if replica in counts:
                counts[replica][0] += 1
        if info.state is not None and info.state.leader in counts:
            counts[info.state.leader][1] += 1
    return {b: (c[0], c[1]) for b, c in counts.items()}


def broker_samples(
    snapshot: ClusterSnapshot,
    scraped: Mapping[int, Mapping[str, float]],
    numbering: SampleNumbering,
    timestamp: float | None = None,
    *,
    cluster: str | None = None,
) -> list[Sample]:
    """One sample per registered broker: partitions and leaders from ZooKeeper, the rest from its scrape
    (only the load-model names; non-finite values dropped). ``cluster``: the watched cluster's name
    (:func:`cluster_key`)."""
    taken = time.time() if timestamp is None else timestamp
    key = cluster_key(snapshot, cluster)
    samples = []
    for broker_id, (partitions, leaders) in sorted(broker_counts(snapshot).items()):
        metrics = {k: v for k, v in _finite(scraped.get(broker_id, {})).items() if k in LOAD_METRICS}
        metrics["partitions"] = float(partitions)
        metrics["leaders"] = float(leaders)
        samples.append(
            Sample(numbering.collector_id, numbering.next(), taken, "broker", key, broker_id, metrics)
        )
    return samples


EXAMPLES_PER_TOPIC = 20
"""Partition numbers listed per topic and problem in a health document (counts are always exact)."""


def _partition_set(tps: Sequence[TopicPartition]) -> dict[str, Any]:
    by_topic: dict[str, int] = {}
    examples: dict[str, list[int]] = {}
    for tp in tps:
        by_topic[tp.topic] = by_topic.get(tp.topic, 0) + 1
        listed = examples.setdefault(tp.topic, [])
        if len(listed) < EXAMPLES_PER_TOPIC:
            listed.append(tp.partition)
    return {"count": len(tps), "by_topic": by_topic, "examples": examples}


def _lagging(
    snapshot: ClusterSnapshot, tps: Sequence[TopicPartition], *, offline: bool
) -> dict[str, dict[str, int]]:
    """Topic -> broker id -> how many of ``tps`` have a replica on that broker outside their ISR (of an
    offline partition: every replica, since none leads it)."""
    found: dict[str, dict[str, int]] = {}
    for tp in tps:
        info = snapshot.partitions[tp]
        state = info.state
        if state is None:
            continue
        isr = () if offline else state.isr
        brokers = found.setdefault(tp.topic, {})
        for broker in info.assignment.replicas:
            if broker not in isr:
                brokers[str(broker)] = brokers.get(str(broker), 0) + 1
    return {topic: brokers for topic, brokers in found.items() if brokers}


def health_document(
    snapshot: ClusterSnapshot,
    report: HealthReport,
    *,
    last_good_at: float | None = None,
    scrape: MetricsScrape | None = None,
) -> dict[str, Any]:
    """The cluster's health as the alert rules read it (``analytics.model.HealthState.from_json``).

    Counts are exact; partitions are listed per topic up to :data:`EXAMPLES_PER_TOPIC` so that a sample stays
    small when a whole cluster is down. ``offline_electable`` are the offline partitions whose ISR still has
    a registered broker: the controller can give them a leader (a broker's crash makes its leaderships
    offline until the controller has moved them), where the others stay offline until a replica returns.
    ``last_good_at`` overrides the snapshot's (a collector whose watches are armed knows a quiet snapshot
    is current although no new version was published). ``lagging`` counts, per problem, topic and broker,
    the partitions missing that broker's replica from their ISR (any replica of an offline partition):
    what names a broker's trouble as the cause of a topic's page.
    """
    problems = problem_partitions(report)
    live = snapshot.brokers
    electable = [
        tp
        for tp in problems["offline"]
        if (state := snapshot.partitions[tp].state) is not None and any(b in live for b in state.isr)
    ]
    cross = report.urp_cross_check
    good = last_good_at if last_good_at is not None else snapshot.last_good_at
    return {
        "snapshot": {
            "version": snapshot.version,
            "taken_at": snapshot.taken_at,
            "last_good_at": good if good is not None else 0.0,
            "stale": snapshot.stale,
            "errors": len(snapshot.errors),
        },
        "controller": {
            "broker_id": snapshot.controller.broker_id,
            "epoch": snapshot.controller.epoch,
            "kraft_controller_epoch": snapshot.controller.kraft_controller_epoch,
            "active_controller_gauges": None if scrape is None else scrape.total("active_controller"),
        },
        "brokers": sorted(snapshot.brokers),
        "brokers_down": list(report.brokers_down),
        "topics": report.summary.topics,
        "partitions": report.summary.partitions,
        "preferred_replica_imbalance": report.summary.preferred_replica_imbalance,
        **{name: _partition_set(tps) for name, tps in problems.items()},
        "offline_electable": _partition_set(electable),
        "lagging": {
            kind: _lagging(snapshot, problems[kind], offline=kind == "offline")
            for kind in ("offline", "under_replicated", "under_min_isr")
        },
        "suspects": [
            {"broker_id": s.broker_id, "missing_from": s.missing_from, "share": s.share}
            for s in report.suspects
        ],
        "imbalance": [
            {
                "broker_id": i.broker_id,
                "preferred_partitions": i.preferred_partitions,
                "led_by_others": i.led_by_others,
                "ratio": i.ratio,
            }
            for i in sorted(report.imbalance.values(), key=lambda i: i.broker_id)
        ],
        "urp_cross_check": None
        if cross is None
        else {
            "zookeeper": cross.zookeeper,
            "gauges": cross.gauges,
            "missing": list(cross.missing),
            "agrees": cross.agrees,
            "offline_not_counted": cross.offline_not_counted,
        },
        "scrape_errors": {} if scrape is None else {str(b): e for b, e in sorted(scrape.failures.items())},
    }


def cluster_sample(
    snapshot: ClusterSnapshot,
    report: HealthReport,
    numbering: SampleNumbering,
    timestamp: float | None = None,
    *,
    last_good_at: float | None = None,
    scrape: MetricsScrape | None = None,
    cluster: str | None = None,
) -> Sample:
    """The cluster's health as one sample: the summary's counts as metrics, the whole health document for
    the alert rules. ``cluster``: the watched cluster's name (:func:`cluster_key`)."""
    taken = time.time() if timestamp is None else timestamp
    summary = report.summary
    counts = {
        "brokers": summary.brokers,
        "topics": summary.topics,
        "partitions": summary.partitions,
        "under_replicated": summary.under_replicated,
        "under_min_isr": summary.under_min_isr,
        "at_min_isr": summary.at_min_isr,
        "offline": summary.offline,
        "preferred_replica_imbalance": summary.preferred_replica_imbalance,
        "brokers_down": len(summary.brokers_down),
    }
    return Sample(
        numbering.collector_id,
        numbering.next(),
        taken,
        "cluster",
        cluster_key(snapshot, cluster),
        None,
        _finite(counts),
        health_document(snapshot, report, last_good_at=last_good_at, scrape=scrape),
    )
