"""What a scrape gives: each broker's values (:class:`BrokerScrape`), all brokers' (:class:`MetricsScrape`),
and one broker's samples as exposed (:class:`RawScrape`); and the labelled series a scrape keeps beside the
values, read from an exposition (:func:`read_filesystems`, :func:`read_log_sizes`; pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from collectors.kafka.model import TopicPartition
from collectors.metrics.names import FILESYSTEM_AVAIL, FILESYSTEM_SIZE, Dialect, Exposition, LabelSet


@dataclass(frozen=True, slots=True)
class Filesystem:
    """One mounted filesystem of a broker's host, as node_exporter shows it (bytes)."""

    size_bytes: float
    """``node_filesystem_size_bytes``."""
    avail_bytes: float
    """``node_filesystem_avail_bytes``: what a non-root process (the broker) may still write."""

    @property
    def used_bytes(self) -> float:
        """``size - avail``: as the usual disk alerts count it (the root-reserved blocks count as used)."""
        return self.size_bytes - self.avail_bytes

    @property
    def used_ratio(self) -> float:
        """``1 - avail / size`` (1.0 for a filesystem of size 0)."""
        return 1.0 - self.avail_bytes / self.size_bytes if self.size_bytes > 0 else 1.0


@dataclass(frozen=True, slots=True)
class BrokerScrape:
    broker_id: int
    url: str | None
    scraped_at: float
    """Epoch seconds when the request started (the collector's clock)."""
    duration_s: float
    values: Mapping[str, float]
    """Metric name (of the name table) -> value; a metric the broker could not give is absent."""
    error: str | None = None
    dialect: Dialect | None = None
    """The exporter dialect the values were read in (set or detected); None when the scrape failed."""
    problems: tuple[str, ...] = ()
    """What was wrong with what the broker served without failing the scrape (e.g. no dialect
    recognised: the example's names were tried)."""
    filesystems: Mapping[str, Filesystem] = field(default_factory=dict)
    """Mount point -> its filesystem (node_exporter's ``node_filesystem_{size,avail}_bytes``), for every
    mount point served with both; empty when the broker serves none (or the scrape failed)."""
    log_sizes: Mapping[TopicPartition, int] = field(default_factory=dict)
    """Each partition replica's log on this broker in bytes (``kafka.log:type=Log,name=Size``); a future
    log (an intra-broker move's copy, ``is_future="true"``) is left out."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class MetricsScrape:
    scrapes: Mapping[int, BrokerScrape]
    started_at: float
    duration_s: float

    @property
    def failures(self) -> dict[int, str]:
        """Broker id -> why its scrape failed."""
        return {b: s.error for b, s in self.scrapes.items() if s.error is not None}

    def values(self, name: str) -> dict[int, float]:
        """Broker id -> the metric, for the brokers that gave it."""
        return {b: s.values[name] for b, s in self.scrapes.items() if name in s.values}

    def total(self, name: str) -> float | None:
        """The metric summed over the brokers that gave it (e.g. the cluster's URP); None if none did."""
        given = self.values(name)
        return sum(given.values()) if given else None


@dataclass(frozen=True, slots=True)
class RawScrape:
    """One broker's endpoint read once, its samples as exposed (:meth:`MetricsCollector.fetch_series`)."""

    broker_id: int
    url: str | None
    scraped_at: float
    """Epoch seconds when the request started (the collector's clock)."""
    duration_s: float
    exposition: Exposition | None
    """Sample name -> series; None when the read failed."""
    error: str | None = None


# --- the labelled series (pure) ----------------------------------------------------------------------

MAX_SERIES_PROBLEMS = 20
"""Malformed labelled series listed one by one per family; beyond, a count."""
_FUTURE_LABELS = ("is_future", "is-future")


def read_filesystems(exposition: Exposition) -> tuple[dict[str, Filesystem], tuple[str, ...]]:
    """(mount point -> filesystem, problems) from node_exporter's size and avail gauges. A series without
    ``mountpoint``, a negative value, or a mount point with only one of the two gauges (or the same mount
    point twice, e.g. two devices: the first kept) is skipped and said in ``problems``."""
    problems: list[str] = []
    found: dict[str, list[float | None]] = {}
    for slot, name in enumerate((FILESYSTEM_SIZE, FILESYSTEM_AVAIL)):
        for labels, value in exposition.get(name, {}).items():
            mountpoint = _label(labels, "mountpoint")
            if not mountpoint:
                problems.append(f"{name}{_text(labels)} has no mountpoint: skipped")
                continue
            if value < 0:
                problems.append(f"{name}{_text(labels)} is negative ({value:g}): skipped")
                continue
            pair = found.setdefault(mountpoint, [None, None])
            if pair[slot] is not None:
                problems.append(f"{name} for mount point {mountpoint} given twice: the first kept")
            else:
                pair[slot] = value
    filesystems: dict[str, Filesystem] = {}
    for mountpoint, (size, avail) in sorted(found.items()):
        if size is None or avail is None:
            missing = FILESYSTEM_SIZE if size is None else FILESYSTEM_AVAIL
            problems.append(f"mount point {mountpoint} has no {missing}: skipped")
        else:
            filesystems[mountpoint] = Filesystem(size, avail)
    return filesystems, _capped(problems)


def read_log_sizes(exposition: Exposition, name: str) -> tuple[dict[TopicPartition, int], tuple[str, ...]]:
    """(partition -> bytes, problems) from the log size gauge ``name`` (:data:`LOG_SIZE_NAMES`). A series
    without a topic, with a partition that is not a partition number or with a negative value is skipped
    and said in ``problems`` (a fractional value is rounded); future logs are left out without a word."""
    problems: list[str] = []
    sizes: dict[TopicPartition, int] = {}
    for labels, value in exposition.get(name, {}).items():
        topic = partition = ""
        future = False
        for key, text in labels:
            if key == "topic":
                topic = text
            elif key == "partition":
                partition = text
            elif key in _FUTURE_LABELS and text == "true":
                future = True
        if future:
            continue
        if not topic:
            problems.append(f"{name}{_text(labels)} has no topic: skipped")
        elif not (partition.isdecimal() and partition.isascii()):
            problems.append(
                f"{name}{_text(labels)}: partition {partition!r} is not a partition number: skipped"
            )
        elif value < 0 or not math.isfinite(value):
            problems.append(f"{name}{_text(labels)} is not a size in bytes ({value:g}): skipped")
        else:
            tp = TopicPartition(topic, int(partition))
            if tp in sizes:
                problems.append(f"{name} for {tp} given twice: the first kept")
            else:
                sizes[tp] = round(value)
    return sizes, _capped(problems)


def _label(labels: LabelSet, key: str) -> str:
    for name, value in labels:
        if name == key:
            return value
    return ""


def _text(labels: LabelSet) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def _capped(problems: list[str]) -> tuple[str, ...]:
    if len(problems) > MAX_SERIES_PROBLEMS:
        problems[MAX_SERIES_PROBLEMS:] = [f"and {len(problems) - MAX_SERIES_PROBLEMS} more series skipped"]
    return tuple(problems)
