"""Samples: what the collectors hand to the analytics job, one JSON object per line.

Each sample carries ``(collector_id, sequence)``: a collector numbers its samples from 0 under an id that
is new at every start, so the pair is unique and the analytics job can drop a sample it has seen (seed 001:
the idempotent producer's PID + sequence, applied to our own pipeline).

Two kinds: ``broker`` samples hold one broker's load-model metrics (KAFKA_REFERENCE §4: partitions,
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from collectors.model import ClusterSnapshot

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
"""The load model's metric names (seed 004), in the article's order."""

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
    """The cluster's id from ``/cluster/id`` (or the connect string when it has none)."""
    broker: int | None
    metrics: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": SAMPLE_SCHEMA_VERSION,
            "collector_id": self.collector_id,
            "sequence": self.sequence,
            "timestamp": self.timestamp,
            "kind": self.kind,
            "cluster": self.cluster,
            "broker": self.broker,
            "metrics": dict(self.metrics),
        }

    def to_line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)


class SampleNumbering:
    """Hands out ``(collector_id, sequence)`` pairs; one per collector process."""

    def __init__(self, collector_id: str) -> None:
        self.collector_id = collector_id
        self._counter: Iterator[int] = itertools.count()

    def next(self) -> int:
        return next(self._counter)


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
) -> list[Sample]:
    """One sample per registered broker: partitions and leaders from ZooKeeper, the rest from its scrape
    (only the load-model names; non-finite values dropped)."""
    taken = time.time() if timestamp is None else timestamp
    cluster = snapshot.cluster_id or "unknown"
    samples = []
    for broker_id, (partitions, leaders) in sorted(broker_counts(snapshot).items()):
        metrics = {k: v for k, v in _finite(scraped.get(broker_id, {})).items() if k in LOAD_METRICS}
        metrics["partitions"] = float(partitions)
        metrics["leaders"] = float(leaders)
        samples.append(
            Sample(numbering.collector_id, numbering.next(), taken, "broker", cluster, broker_id, metrics)
        )
    return samples


def cluster_sample(
    snapshot: ClusterSnapshot,
    health: Mapping[str, float],
    numbering: SampleNumbering,
    timestamp: float | None = None,
) -> Sample:
    """The cluster's health figures (e.g. the health summary's counts) as one sample."""
    taken = time.time() if timestamp is None else timestamp
    return Sample(
        numbering.collector_id,
        numbering.next(),
        taken,
        "cluster",
        snapshot.cluster_id or "unknown",
        None,
        _finite(health),
    )
