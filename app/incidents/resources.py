"""The brokers' resources as rules 14-18 read them (:class:`analytics.model.BrokerResources`), from the
service's live view: the disk model's log dirs, the scrape's gauges, and what only the snapshots say.

:class:`ResourceObserver` hears every snapshot (:meth:`record`, the lane's ``changed``, on the collector's
thread: quick, it only queues the snapshot and notes its log dir failure notices) and, on the lane's
thread (:meth:`observe`), compares each queued snapshot with the one before
(:func:`collectors.isr_churn.isr_churn`) into a bounded per-broker window of ISR changes over
``isr_flap_window_s``. Failure notices are transient (the controller deletes each once handled), so they
are counted per broker until the broker registers anew (a restart brings a failed log dir back).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from analytics.model import BrokerResources, LogDirUsage, PartitionName
from collectors.disks import LogDirDisk
from collectors.isr_churn import isr_churn
from collectors.kafka.model import ClusterSnapshot
from collectors.metrics import MetricsScrape

__all__ = ["MAX_CHANGES_PER_BROKER", "MAX_QUEUED_SNAPSHOTS", "ResourceObserver", "log_dir_usage"]

MAX_QUEUED_SNAPSHOTS = 256
"""Snapshots queued between two evaluations; beyond, the oldest are dropped (the next comparison then spans
them: a leave and rejoin in between is not counted)."""
MAX_CHANGES_PER_BROKER = 10_000
"""ISR changes kept per broker within the flap window (the oldest dropped first)."""


def log_dir_usage(disk: LogDirDisk) -> LogDirUsage:
    return LogDirUsage(
        mountpoint=disk.mountpoint,
        size_bytes=disk.size_bytes,
        avail_bytes=disk.avail_bytes,
        used_ratio=disk.used_ratio,
        growth_bytes_per_s=disk.growth_bytes_per_s,
        full_in_s=disk.full_in_s,
        top_topics=tuple((t.topic, t.bytes_per_s) for t in disk.top_topics),
    )


@dataclass(slots=True)
class _Failures:
    broker_epoch: int
    sequences: set[int] = field(default_factory=set)


class ResourceObserver:
    """Builds each broker's :class:`BrokerResources` (thread-safe between :meth:`record` and
    :meth:`observe`)."""

    def __init__(self, isr_flap_window_s: float) -> None:
        self.window_s = isr_flap_window_s
        self._lock = threading.Lock()
        self._queued: deque[tuple[float, ClusterSnapshot]] = deque(maxlen=MAX_QUEUED_SNAPSHOTS)
        self._failures: dict[int, _Failures] = {}
        self._last: ClusterSnapshot | None = None
        self._changes: dict[int, deque[tuple[float, PartitionName]]] = {}

    def record(self, at: float, snapshot: ClusterSnapshot) -> None:
        """A new snapshot (quick): queue it, note its log dir failure notices."""
        with self._lock:
            self._queued.append((at, snapshot))
            for event in snapshot.log_dir_events:
                registration = snapshot.brokers.get(event.broker)
                epoch = -1 if registration is None else registration.broker_epoch
                failures = self._failures.get(event.broker)
                if failures is None or failures.broker_epoch != epoch:
                    failures = self._failures[event.broker] = _Failures(epoch)
                failures.sequences.add(event.sequence)

    def observe(
        self,
        snapshot: ClusterSnapshot,
        scrape: MetricsScrape | None,
        disks: Mapping[int, tuple[LogDirDisk, ...]],
        now: float,
    ) -> dict[int, BrokerResources]:
        """Every known broker's resources at ``now`` (``snapshot``: the view's current one, which is the
        baseline of the first comparison when no snapshot was heard before: the changes the collector
        publishes next are then compared with it, not lost)."""
        self._churn(now, snapshot)
        failures = self._failures_now(snapshot)
        changes = self._changes_now(now)
        scrapes = {} if scrape is None else {b: s for b, s in scrape.scrapes.items() if s.ok}
        brokers = sorted({*snapshot.brokers, *scrapes, *disks, *failures, *changes})
        resources: dict[int, BrokerResources] = {}
        for broker in brokers:
            values = scrapes[broker].values if broker in scrapes else {}
            gauge = values.get("offline_log_dirs")
            failed = failures.get(broker, 0)
            offline = max(round(gauge) if gauge is not None else 0, failed)
            resources[broker] = BrokerResources(
                broker_id=broker,
                log_dirs=tuple(log_dir_usage(d) for d in disks.get(broker, ())),
                offline_log_dirs=None if gauge is None else round(gauge),
                log_dir_failures=failed,
                out_of_isr=_out_of_isr(snapshot, broker) if offline > 0 else (),
                request_handler_idle=values.get("request_handler_idle"),
                network_processor_idle=values.get("network_processor_idle"),
                open_fds=values.get("fd"),
                max_fds=values.get("max_fds"),
                isr_changes=changes.get(broker, ()),
                isr_shrinks_per_s=values.get("isr_shrinks_per_s"),
                isr_expands_per_s=values.get("isr_expands_per_s"),
            )
        return resources

    def _churn(self, now: float, current: ClusterSnapshot) -> None:
        with self._lock:
            queued = list(self._queued)
            self._queued.clear()
        if self._last is None and not queued:
            self._last = current
        for at, snapshot in queued:
            previous, self._last = self._last, snapshot
            if previous is None or previous.version == snapshot.version:
                continue
            churn = isr_churn(previous, snapshot)
            for broker in churn.brokers:
                kept = self._changes.setdefault(broker, deque(maxlen=MAX_CHANGES_PER_BROKER))
                for tp in (*churn.left.get(broker, ()), *churn.rejoined.get(broker, ())):
                    kept.append((at, (tp.topic, tp.partition)))
        since = now - self.window_s
        for broker in list(self._changes):
            kept = self._changes[broker]
            while kept and kept[0][0] < since:
                kept.popleft()
            if not kept:
                del self._changes[broker]

    def _changes_now(self, now: float) -> dict[int, tuple[tuple[PartitionName, int], ...]]:
        counted: dict[int, tuple[tuple[PartitionName, int], ...]] = {}
        for broker, kept in self._changes.items():
            per: dict[PartitionName, int] = {}
            for _, tp in kept:
                per[tp] = per.get(tp, 0) + 1
            counted[broker] = tuple(sorted(per.items(), key=lambda i: (-i[1], i[0])))
        return counted

    def _failures_now(self, snapshot: ClusterSnapshot) -> dict[int, int]:
        """Broker -> failures announced since it registered (forgetting those of an earlier registration)."""
        with self._lock:
            for broker in list(self._failures):
                registration = snapshot.brokers.get(broker)
                if registration is None or registration.broker_epoch != self._failures[broker].broker_epoch:
                    del self._failures[broker]
            return {b: len(f.sequences) for b, f in self._failures.items()}


def _out_of_isr(snapshot: ClusterSnapshot, broker: int) -> tuple[PartitionName, ...]:
    """Partitions with a replica on ``broker`` outside their ISR, or offline with it in their ISR (Kafka
    keeps the last replica in the ISR of a partition it takes offline)."""
    found = []
    for tp, info in snapshot.partitions.items():
        state = info.state
        if state is None or broker not in info.assignment.replicas:
            continue
        if broker not in state.isr or (state.leader < 0 and broker in state.isr):
            found.append((tp.topic, tp.partition))
    return tuple(sorted(found))
