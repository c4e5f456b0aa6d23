"""The service's view keeps each broker's disks: every scrape feeds the disk model, and ``view.disks``
gives the log dirs with their growth (a real metrics collector over served text, a real snapshot); a new
log dir failure notice scrapes every broker at once."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from app.service.state import EARLY_SCRAPE_MIN_GAP_S, ClusterView, ViewSettings
from collectors.kafka.model import ClusterSnapshot
from collectors.metrics import MetricsCollector, MetricsSettings
from collectors.zookeeper.collector import ScanStats
from tests.support.reference_cluster import wait_for
from tests.support.snapshots import cluster

pytestmark = pytest.mark.unit

MB = 1024.0**2
SIZE = 1.0e12


class Snapshots:
    """The view's source of snapshots: a fixed one, in sync."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.in_sync = True
        self.last_scan: ScanStats | None = None


class Bodies:
    """Each broker's text, as its metrics endpoint would serve it now."""

    def __init__(self) -> None:
        self.used: dict[str, float] = {}

    def fetch(self, url: str, timeout: float) -> str:
        lines = ["# TYPE node_filesystem_size_bytes gauge"]
        lines += [f'node_filesystem_size_bytes{{mountpoint="{m}"}} {SIZE}' for m in self.used]
        lines.append("# TYPE node_filesystem_avail_bytes gauge")
        lines += [f'node_filesystem_avail_bytes{{mountpoint="{m}"}} {SIZE - u}' for m, u in self.used.items()]
        return "\n".join(lines) + "\n"


class Clock:
    now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_each_scrape_feeds_the_disks_the_view_gives_per_broker() -> None:
    bodies, clock = Bodies(), Clock()
    settings = MetricsSettings(
        url_template="http://{host}:7071/metrics",
        log_dir_mountpoints=("/disk-a", "/disk-b"),
        disk_fit_window_s=600,
    )
    with MetricsCollector(settings, fetcher=bodies, clock=clock) as metrics:
        view = ClusterView(Snapshots(cluster(brokers=(1,))), metrics, clock=clock)
        assert view.disks(1) == ()
        for i in range(10):
            bodies.used = {"/disk-a": 0.5 * SIZE + 5 * MB * 10 * i, "/disk-b": 0.1 * SIZE, "/other": 1.0}
            view.scrape_now()
            clock.now += 10.0

    disk_a, disk_b = view.disks(1)
    assert disk_a.mountpoint == "/disk-a"
    assert disk_a.used_ratio == pytest.approx(0.5 + 5 * MB * 90 / SIZE)
    assert disk_a.growth_bytes_per_s == pytest.approx(5 * MB)
    assert disk_a.full_in_s == pytest.approx(disk_a.avail_bytes / (5 * MB))
    assert disk_b.full_in_s is None
    assert view.all_disks() == {1: (disk_a, disk_b)}
    assert view.disks(2) == ()


class CountingBodies:
    """Counts the scrapes (one fetch per broker) and serves Kafka's offline-log-dir gauge."""

    def __init__(self) -> None:
        self.fetches = 0
        self._lock = threading.Lock()

    def fetch(self, url: str, timeout: float) -> str:
        with self._lock:
            self.fetches += 1
        return "# TYPE kafka_log_logmanager_offlinelogdirectorycount gauge\n" + (
            "kafka_log_logmanager_offlinelogdirectorycount 1.0\n"
        )


def test_a_new_log_dir_failure_notice_scrapes_every_broker_at_once() -> None:
    """The scrape interval is an hour: only the notice (``log_dir_event_sequence`` advancing, its data
    possibly gone) makes the second scrape; a snapshot with the same sequence or none makes no other."""
    bodies = CountingBodies()
    settings = MetricsSettings(url_template="http://{host}:7071/metrics")
    quiet = cluster(brokers=(1, 2, 3))
    with MetricsCollector(settings, fetcher=bodies) as metrics:
        view = ClusterView(Snapshots(quiet), metrics, ViewSettings(metrics_interval_s=3600))
        view.start()
        try:
            assert bodies.fetches == 3  # the first scrape, in start()
            view.changed(quiet)
            failed = dataclasses.replace(quiet, version=quiet.version + 1, log_dir_event_sequence=7)
            view.changed(failed)
            wait_for(lambda: bodies.fetches >= 6 or None, 30, "the out-of-schedule scrape")
            assert view.early_scrapes == 1
            state = view.state
            assert state.scrape is not None
            assert state.scrape.values("offline_log_dirs") == {1: 1.0, 2: 1.0, 3: 1.0}
            view.changed(dataclasses.replace(failed, version=failed.version + 1))  # the same notice
            view.changed(quiet)
            time.sleep(EARLY_SCRAPE_MIN_GAP_S + 0.5)  # a wrongly woken scraper would have scraped by now
        finally:
            view.stop()
    assert (bodies.fetches, view.early_scrapes) == (6, 1)
