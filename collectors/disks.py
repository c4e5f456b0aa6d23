"""The brokers' log dirs as disks: how full each is, how fast it grows, when it will be full and which topics
grow fastest there. Pure (no I/O): :class:`DiskModel` is fed each broker's scrape (node_exporter's
filesystems and the partitions' log sizes, :class:`collectors.metrics.BrokerScrape`) and keeps a bounded
history.

**Which filesystems are log dirs** (:func:`log_dir_filesystems`): the mount points of the setting
``metrics.log_dir_mountpoints`` (``KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS``, in ``log.dirs`` order, the
same on every broker), else every mount point whose name contains ``kafka`` or ``data``.

**Growth** (:func:`fit_growth`): used bytes (``size - avail``) over the last ``disk_fit_window_s``. The fit
is what Prometheus' ``predict_linear`` gives for a straight line, but robust to level shifts: a retention
trim (a drop) or a sudden fill (a rise) is a *step*, an interval whose change is far from the typical
one (more than 8 robust standard deviations of the intervals' changes, 4 typical intervals' growth and
1 MiB), both against the window's median rate and against the median rate of the next 5 intervals (the
last interval: the 5 before it), so the intervals of a new, faster rate are not steps. The growth is
the Theil–Sen slope (median of the pairwise slopes, over at most :data:`MAX_FIT_POINTS` evenly spread
samples) of the samples since the last step; while fewer than
:data:`MIN_SEGMENT_SAMPLES` follow it, the median of the window's step-free intervals' rates. So a trim
neither makes the disk look as if it emptied forever nor hides the growth between trims, and a fill shows
its new rate a few scrapes later. Smaller trims (many partitions each deleting a segment now and then)
stay in the segment, where the median weighs them as Theil–Sen does. ``full_in_s`` is ``avail /
growth``, None when the disk is not growing or too few samples are there (:data:`MIN_SAMPLES`).

**Top topics**: Kafka's metrics do not say which log dir holds a partition (only the Admin API's
DescribeLogDirs does), so the topics growing fastest are counted **per broker**, over all its log dirs,
and each of its log dirs lists the broker's: exact with one log dir per broker, the common case. A
topic's growth is the Theil–Sen slope of its replicas' summed log sizes on the broker over at most
:data:`TOPIC_SNAPSHOTS` snapshots spread over the window.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from collectors.kafka.model import TopicPartition
from collectors.metrics import BrokerScrape, Filesystem, MetricsScrape

DEFAULT_WINDOW_S = 1800.0
MIN_SAMPLES = 3
"""Fewer samples in the window: no growth."""
MIN_SEGMENT_SAMPLES = 4
"""Samples after the last step needed to fit them alone."""
MAX_FIT_POINTS = 32
"""Theil–Sen over at most this many samples (496 pairs), evenly spread."""
MAX_SAMPLES = 360
"""Samples kept per log dir: one per ``window / MAX_SAMPLES`` at most (5 s for 30 minutes), the newest
always replacing a too-close predecessor."""
TOPIC_SNAPSHOTS = 12
"""Per broker, snapshots of each topic's bytes kept for the topics' growth."""
TOP_TOPICS = 3
_STEP_MADS = 8.0
_STEP_TYPICALS = 4.0
_STEP_FLOOR_BYTES = 1024.0 * 1024.0
_MAD_TO_SIGMA = 1.4826
_FOLLOWERS = 5
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class TopicGrowth:
    topic: str
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class LogDirDisk:
    """One log dir of a broker: the fields of ``GET /api/v1/brokers/{id}/disks``."""

    mountpoint: str
    size_bytes: float
    avail_bytes: float
    used_ratio: float
    """``1 - avail / size``."""
    growth_bytes_per_s: float | None
    """Used bytes per second (negative: shrinking); None with too few samples."""
    full_in_s: float | None
    """Seconds until ``avail`` is 0 at this growth; None when not growing."""
    top_topics: tuple[TopicGrowth, ...]
    """The broker's :data:`TOP_TOPICS` topics growing fastest (bytes/s > 0), fastest first (see the
    module's note: per broker)."""


def log_dir_filesystems(
    filesystems: Mapping[str, Filesystem], mountpoints: Sequence[str] = ()
) -> dict[str, Filesystem]:
    """Mount point -> filesystem of a broker's log dirs, in log-dir order: ``mountpoints`` (those the broker
    serves), else every mount point whose name contains ``kafka`` or ``data``, sorted."""
    if mountpoints:
        return {m: filesystems[m] for m in mountpoints if m in filesystems}
    return {m: fs for m, fs in sorted(filesystems.items()) if "kafka" in m or "data" in m}


# --- the fit (pure) ----------------------------------------------------------------------------------


def theil_sen(points: Sequence[tuple[float, float]]) -> float | None:
    """The median of the slopes of all pairs of points with distinct times, over at most
    :data:`MAX_FIT_POINTS` of them evenly spread (the first and last kept); None without such a pair."""
    if len(points) > MAX_FIT_POINTS:
        last = len(points) - 1
        points = [points[round(i * last / (MAX_FIT_POINTS - 1))] for i in range(MAX_FIT_POINTS)]
    slopes = [
        (y2 - y1) / (t2 - t1) for i, (t1, y1) in enumerate(points) for t2, y2 in points[i + 1 :] if t2 != t1
    ]
    return statistics.median(slopes) if slopes else None


def fit_growth(samples: Sequence[tuple[float, float]]) -> float | None:
    """Growth per second of ``samples`` ((time, used bytes), oldest first), robust to steps (module note);
    None with fewer than :data:`MIN_SAMPLES`."""
    if len(samples) < MIN_SAMPLES:
        return None
    intervals = [(t2 - t1, y2 - y1) for (t1, y1), (t2, y2) in itertools.pairwise(samples) if t2 > t1]
    if not intervals:
        return None
    typical = statistics.median(d / dt for dt, d in intervals)
    residuals = [abs(d - typical * dt) for dt, d in intervals]
    spread = _MAD_TO_SIGMA * statistics.median(residuals)
    last_step = -1
    steady: list[float] = []
    for i, ((dt, d), residual) in enumerate(zip(intervals, residuals, strict=True)):
        step = residual > _threshold(spread, typical, dt)
        # far from the window's rate, but maybe one of a new rate: compare with the next intervals (the
        # last ones with the ones before them)
        near = intervals[i + 1 : i + 1 + _FOLLOWERS] or intervals[max(0, i - _FOLLOWERS) : i]
        if step and near:
            local = statistics.median(f_d / f_dt for f_dt, f_d in near)
            step = abs(d - local * dt) > _threshold(spread, local, dt)
        if step:
            last_step = i
        else:
            steady.append(d / dt)
    segment = samples[last_step + 1 :]
    if len(segment) >= MIN_SEGMENT_SAMPLES:
        return theil_sen(segment)
    return statistics.median(steady) if len(steady) >= MIN_SAMPLES - 1 else None


def _threshold(spread: float, rate: float, dt: float) -> float:
    return max(_STEP_MADS * spread, _STEP_TYPICALS * abs(rate) * dt, _STEP_FLOOR_BYTES)


def full_in(avail_bytes: float, growth_bytes_per_s: float | None) -> float | None:
    """Seconds until ``avail_bytes`` is used up at ``growth``; None when not growing."""
    if growth_bytes_per_s is None or growth_bytes_per_s <= 0 or not math.isfinite(growth_bytes_per_s):
        return None
    return max(0.0, avail_bytes) / growth_bytes_per_s


# --- the model ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _BrokerDisks:
    at: float
    filesystems: dict[str, Filesystem]
    used: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    topics: deque[tuple[float, dict[str, float]]] = field(default_factory=deque)
    cached: tuple[float, tuple[LogDirDisk, ...]] | None = None


class DiskModel:
    """Each broker's log dirs over the last ``window_s``: feed it scrapes (:meth:`observe_scrape`), read
    :meth:`disks`. Memory is bounded: at most :data:`MAX_SAMPLES` samples per log dir and
    :data:`TOPIC_SNAPSHOTS` topic snapshots per broker; a broker not seen for a window is forgotten. Not
    thread-safe: its owner serialises calls (the service's view does, under its lock)."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, mountpoints: Sequence[str] = ()) -> None:
        if window_s <= 0:
            raise ValueError(f"the disk fit window must be positive, got {window_s:g} s")
        self.window_s = window_s
        self.mountpoints = tuple(mountpoints)
        self._spacing = window_s / MAX_SAMPLES
        self._brokers: dict[int, _BrokerDisks] = {}

    def observe_scrape(self, scrape: MetricsScrape) -> None:
        """Every broker scraped well; then forget brokers not seen for a window."""
        for broker in scrape.scrapes.values():
            if broker.ok:
                self.observe(broker)
        self.prune(scrape.started_at)

    def observe(self, scrape: BrokerScrape) -> None:
        """One broker's scrape (ignored when it failed, has no log-dir filesystem, or is older than the
        last one kept)."""
        if not scrape.ok:
            return
        at = scrape.scraped_at
        dirs = log_dir_filesystems(scrape.filesystems, self.mountpoints)
        state = self._brokers.get(scrape.broker_id)
        if state is not None and at <= state.at:
            return
        if state is None:
            state = self._brokers[scrape.broker_id] = _BrokerDisks(at, dirs)
        state.at, state.filesystems, state.cached = at, dirs, None
        for mountpoint, fs in dirs.items():
            self._add(state.used.setdefault(mountpoint, deque()), (at, fs.used_bytes), self._spacing)
        for mountpoint in [
            m for m, h in state.used.items() if m not in dirs and h[-1][0] < at - self.window_s
        ]:
            del state.used[mountpoint]
        if scrape.log_sizes:
            self._add(state.topics, (at, _topic_bytes(scrape.log_sizes)), self.window_s / TOPIC_SNAPSHOTS)

    def _add(self, history: deque[tuple[float, _T]], sample: tuple[float, _T], spacing: float) -> None:
        if len(history) >= 2 and history[-1][0] - history[-2][0] < spacing:
            history[-1] = sample
        else:
            history.append(sample)
        while history and history[0][0] < sample[0] - self.window_s:
            history.popleft()

    def prune(self, now: float) -> None:
        """Forget the brokers whose last scrape is more than a window before ``now``."""
        for broker_id in [b for b, s in self._brokers.items() if s.at < now - self.window_s]:
            del self._brokers[broker_id]

    @property
    def brokers(self) -> tuple[int, ...]:
        return tuple(sorted(self._brokers))

    def disks(self, broker_id: int) -> tuple[LogDirDisk, ...]:
        """The broker's log dirs as last scraped, in log-dir order (empty when unknown)."""
        state = self._brokers.get(broker_id)
        if state is None:
            return ()
        if state.cached is not None and state.cached[0] == state.at:
            return state.cached[1]
        top = _top_topics(list(state.topics))
        records = []
        for mountpoint, fs in state.filesystems.items():
            growth = fit_growth(list(state.used.get(mountpoint, ())))
            records.append(
                LogDirDisk(
                    mountpoint,
                    fs.size_bytes,
                    fs.avail_bytes,
                    fs.used_ratio,
                    growth,
                    full_in(fs.avail_bytes, growth),
                    top,
                )
            )
        state.cached = (state.at, tuple(records))
        return state.cached[1]

    def all_disks(self) -> dict[int, tuple[LogDirDisk, ...]]:
        """Broker id -> :meth:`disks`, for every broker known."""
        return {b: self.disks(b) for b in self.brokers}

    def sample_count(self) -> int:
        """Samples held (log dirs' and topic snapshots'): what bounds the model's memory."""
        return sum(sum(len(h) for h in s.used.values()) + len(s.topics) for s in self._brokers.values())


def _topic_bytes(log_sizes: Mapping[TopicPartition, int]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for tp, size in log_sizes.items():
        totals[tp.topic] = totals.get(tp.topic, 0.0) + size
    return totals


def _top_topics(snapshots: Sequence[tuple[float, dict[str, float]]]) -> tuple[TopicGrowth, ...]:
    if len(snapshots) < 2:
        return ()
    growth: list[TopicGrowth] = []
    for topic in snapshots[-1][1]:
        slope = theil_sen([(t, sizes[topic]) for t, sizes in snapshots if topic in sizes])
        if slope is not None and slope > 0:
            growth.append(TopicGrowth(topic, slope))
    growth.sort(key=lambda g: (-g.bytes_per_s, g.topic))
    return tuple(growth[:TOP_TOPICS])
