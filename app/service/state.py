"""The live cluster as the service sees it: the ZooKeeper collector's snapshot (kept current by watches), a
scrape of every broker's metrics at a fixed interval on a background thread, and the health report,
computed once per (snapshot version, scrape) and shared by every request. Each scrape also feeds the disk
model (``collectors.disks``: each broker's log dirs, their growth and time to full), read with
:meth:`ClusterView.disks`.

A new log dir failure notice (the snapshot's ``log_dir_event_sequence`` advanced, :meth:`ClusterView.changed`)
scrapes every broker at once, out of schedule (at most once per :data:`EARLY_SCRAPE_MIN_GAP_S`): the
controller deletes the notice within milliseconds, often before the collector reads which broker wrote it,
and the failed broker's offline-log-dir gauge says it (rule 15) without waiting for the next scrape.

Readers never wait for I/O: :attr:`ClusterView.state` returns the cached state, recomputing it (under a
lock, once) only when the snapshot or the scrape changed since.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from collectors.disks import DiskModel, LogDirDisk
from collectors.health import HealthReport, assess, no_kafka_cluster
from collectors.kafka.model import ClusterSnapshot
from collectors.metrics import MetricsCollector, MetricsScrape
from collectors.risks import Risk, disk_risks, layout_risks
from collectors.zookeeper.collector import ScanStats

log = logging.getLogger(__name__)

EARLY_SCRAPE_MIN_GAP_S = 1.0
"""An out-of-schedule scrape (a log dir failure notice) starts at least this long after the previous scrape
started: a burst of notices (a broker failing several log dirs) is one or two scrapes, not one each."""


class ViewSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics_interval_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    """How often the brokers' metrics are scraped (the URP cross-check and ``/metrics``)."""
    stale_after_s: Annotated[float, Field(gt=0)] = 60.0
    """``/readyz`` fails when the snapshot was last known good longer ago than this."""
    default_min_insync_replicas: Annotated[int | None, Field(ge=1)] = None
    """The brokers' static ``min.insync.replicas`` (``server.properties``, which ZooKeeper never holds);
    unset: Kafka's default of 1 applies and the partitions' ``min_isr_source`` says ``kafka_default``."""
    default_unclean_leader_election_enable: bool | None = None
    """The brokers' static ``unclean.leader.election.enable``; unset: Kafka's default (false)."""


class SnapshotCollector(Protocol):
    """What the view needs of the ZooKeeper collector."""

    @property
    def snapshot(self) -> ClusterSnapshot: ...

    @property
    def in_sync(self) -> bool: ...

    @property
    def last_scan(self) -> ScanStats | None: ...


@dataclass(frozen=True, slots=True)
class ClusterState:
    snapshot: ClusterSnapshot
    report: HealthReport
    scrape: MetricsScrape | None
    last_good_at: float | None
    """When the snapshot was last known to match ZooKeeper (now, while the watches are armed)."""
    computed_at: float


class ClusterView:
    def __init__(
        self,
        collector: SnapshotCollector,
        metrics: MetricsCollector | None = None,
        settings: ViewSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or ViewSettings()
        self.collector = collector
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._scrape: MetricsScrape | None = None
        self._cached: ClusterState | None = None
        self._cached_key: tuple[int, int] | None = None
        self._scrapes = 0
        self._previous: ClusterSnapshot | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._scrape_started = float("-inf")
        self._sequence_lock = threading.Lock()  # not the state's: the collector's thread never waits on it
        self._log_dir_event_sequence = collector.snapshot.log_dir_event_sequence
        self.early_scrapes = 0
        """Scrapes made out of schedule, for a log dir failure notice."""
        self.scrape_failures_total: dict[int, int] = {}
        self._memo: dict[str, tuple[tuple[int, int] | None, Any]] = {}
        self._layout_risks: tuple[int, tuple[Risk, ...]] | None = None
        self._disks = (
            DiskModel()
            if metrics is None
            else DiskModel(metrics.settings.disk_fit_window_s, metrics.settings.log_dir_mountpoints)
        )

    @property
    def listener(self) -> str | None:
        """The listener whose endpoint the brokers are shown (and scraped) at: ``metrics.listener``."""
        return None if self._metrics is None else self._metrics.endpoints.listener

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Scrape once (so the first state has the gauges) and keep scraping in the background."""
        if self._metrics is None:
            return
        self.scrape_now()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def changed(self, snapshot: ClusterSnapshot) -> None:
        """A new snapshot was published (the collector's ``on_change``; quick, never raises): when its
        ``log_dir_event_sequence`` advanced (a broker's log dir failed just now, which broker the notice may
        no longer say), wake the scraper for an out-of-schedule scrape of every broker."""
        sequence = snapshot.log_dir_event_sequence
        with self._sequence_lock:
            seen = self._log_dir_event_sequence
            if sequence is None or (seen is not None and sequence <= seen):
                return
            self._log_dir_event_sequence = sequence
        if self._metrics is not None:
            self._wake.set()

    def _run(self) -> None:
        while True:
            early = self._wake.wait(self.settings.metrics_interval_s)
            if self._stop.is_set():
                return
            if early:
                self._wake.clear()
                gap = EARLY_SCRAPE_MIN_GAP_S - (time.monotonic() - self._scrape_started)
                if gap > 0 and self._stop.wait(gap):
                    return
                self.early_scrapes += 1
            try:
                self.scrape_now()
            except Exception:
                log.exception("metrics scrape failed")

    def scrape_now(self) -> MetricsScrape | None:
        if self._metrics is None:
            return None
        self._scrape_started = time.monotonic()
        scrape = self._metrics.scrape(self.collector.snapshot.brokers)
        with self._lock:
            self._scrape = scrape
            self._scrapes += 1
            self._disks.observe_scrape(scrape)
            for broker in scrape.failures:
                self.scrape_failures_total[broker] = self.scrape_failures_total.get(broker, 0) + 1
        return scrape

    # --- reading -------------------------------------------------------------------------------------

    @property
    def state(self) -> ClusterState:
        snapshot = self.collector.snapshot
        now = self._clock()
        with self._lock:
            key = (snapshot.version, self._scrapes)
            cached = self._cached
            if cached is None or self._cached_key != key:
                scrape = self._scrape
                gauges = None if scrape is None else scrape.values("urp")
                report = assess(
                    snapshot,
                    previous=self._previous,
                    urp_gauges=gauges,
                    default_min_insync_replicas=self.settings.default_min_insync_replicas,
                    default_unclean_leader_election_enable=self.settings.default_unclean_leader_election_enable,
                )
                if cached is not None and cached.snapshot.version != snapshot.version:
                    self._previous = cached.snapshot
                cached = ClusterState(snapshot, report, scrape, snapshot.last_good_at, now)
                self._cached, self._cached_key = cached, key
        good = now if self.collector.in_sync else snapshot.last_good_at
        return ClusterState(cached.snapshot, cached.report, cached.scrape, good, cached.computed_at)

    def disks(self, broker_id: int) -> tuple[LogDirDisk, ...]:
        """The broker's log dirs as last scraped, in log-dir order, with their growth over the disk fit
        window (empty: no metrics, no log-dir filesystem served, or an unknown broker)."""
        with self._lock:
            return self._disks.disks(broker_id)

    def all_disks(self) -> dict[int, tuple[LogDirDisk, ...]]:
        """Broker id -> :meth:`disks`, for every broker whose log dirs are known."""
        with self._lock:
            return self._disks.all_disks()

    @property
    def metrics_enabled(self) -> bool:
        """Whether the brokers' metrics are scraped at all (a metrics URL template is set)."""
        return self._metrics is not None

    @property
    def disk_fit_window_s(self) -> float:
        """The window each log dir's growth is fitted over."""
        return self._disks.window_s

    def risks(self) -> tuple[Risk, ...]:
        """The standing risks (:func:`collectors.risks.standing_risks`) of the current snapshot, its
        effective settings and the log dirs as last scraped: the layout's once per snapshot version (a pass
        over the partitions), the log dirs' once per scrape."""
        state = self.state
        version = state.snapshot.version
        with self._lock:
            layout = self._layout_risks
        if layout is None or layout[0] != version:
            layout = (version, layout_risks(state.snapshot, state.report.settings))
            with self._lock:
                self._layout_risks = layout
        found: tuple[Risk, ...] = self.memo("disk-risks", lambda _: disk_risks(self.all_disks()))
        return layout[1] + found

    def memo(self, name: str, build: Callable[[ClusterState], Any]) -> Any:
        """``build(state)``, computed once per (snapshot version, scrape) and shared by every request: the
        cached reads of the REST API (treat the value as read-only)."""
        state = self.state
        with self._lock:
            key = self._cached_key
            hit = self._memo.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = build(state)
        with self._lock:
            self._memo[name] = (key, value)
        return value

    def readiness(self) -> tuple[bool, str]:
        """(ready, why not): the snapshot must be in sync, or at least recent."""
        state = self.state
        snapshot = state.snapshot
        if state.last_good_at is None:
            return False, "no full scan of ZooKeeper has completed yet"
        age = max(0.0, self._clock() - state.last_good_at)
        if snapshot.stale:
            return False, (
                f"ZooKeeper is unreachable (session lost, resync pending): the snapshot was last known "
                f"good {age:.0f} s ago"
            )
        if age > self.settings.stale_after_s:
            return False, f"the snapshot is {age:.0f} s old (more than {self.settings.stale_after_s:g} s)"
        missing = no_kafka_cluster(snapshot)
        if missing is not None:
            return False, missing
        return True, "ok"
