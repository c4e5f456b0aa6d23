"""The cluster's health as the incident rules read it, from the service's live view.

The same document the collectors write into each ``cluster`` sample (:func:`collectors.samples.
health_document`), parsed by :meth:`analytics.model.HealthState.from_json`: both lanes' rules read one
format, and a rule cannot tell the service's view from a sample. Building it costs a pass over the
partitions with a problem's flags (the whole cluster's, at 200k partitions a few tenths of a second), so it
is built once per snapshot version and scrape; what depends on the instant (``timestamp``,
``last_good_at``) is set at every evaluation.

:class:`ControllerHistory` keeps the controller epochs seen over rule 4's flap window, recorded on every
snapshot whether or not this replica leads, so that a replica that takes over judges flapping from the
elections it saw itself.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from analytics.model import HealthState
from collectors.disks import LogDirDisk
from collectors.health import HealthReport
from collectors.kafka.model import ClusterSnapshot
from collectors.metrics import MetricsScrape
from collectors.samples import health_document

__all__ = ["ControllerHistory", "HealthObserver", "LiveState", "LiveView", "cluster_name"]


class LiveState(Protocol):
    """What the incident lane reads of the service's live state (``app.service.state.ClusterState``)."""

    @property
    def snapshot(self) -> ClusterSnapshot: ...

    @property
    def report(self) -> HealthReport: ...

    @property
    def scrape(self) -> MetricsScrape | None: ...

    @property
    def last_good_at(self) -> float | None: ...


class LiveView(Protocol):
    """The service's live view (``app.service.state.ClusterView``): the current state, computed once per
    snapshot version and scrape, and the brokers' log dirs (the disk model: rule 14)."""

    @property
    def state(self) -> LiveState: ...

    def all_disks(self) -> Mapping[int, tuple[LogDirDisk, ...]]: ...


def cluster_name(snapshot: ClusterSnapshot) -> str:
    """The cluster's name in the store: its id from ``/cluster/id``, as the collectors' samples name it, so
    that both lanes' alerts of one cluster share their fingerprints."""
    return snapshot.cluster_id or "unknown"


class HealthObserver:
    """Builds the cluster's :class:`HealthState` from the live state, once per snapshot version and scrape."""

    def __init__(self, collector_id: str, cluster: str | None = None) -> None:
        self.collector_id = collector_id
        self.cluster = cluster
        """The cluster's name in the store (a named cluster); None: its cluster id (:func:`cluster_name`)."""
        """Who observed (the replica's identity): the evidence of rule 11, never a subject."""
        self._key: tuple[int, MetricsScrape | None] | None = None
        self._built: HealthState | None = None

    def observe(self, state: LiveState, now: float) -> HealthState:
        snapshot = state.snapshot
        key = (snapshot.version, state.scrape)
        built = self._built
        if built is None or self._key is None or self._key[0] != key[0] or self._key[1] is not key[1]:
            doc = health_document(snapshot, state.report, scrape=state.scrape)
            built = HealthState.from_json(
                doc,
                cluster=self.cluster if self.cluster is not None else cluster_name(snapshot),
                collector_id=self.collector_id,
                timestamp=now,
            )
            self._key, self._built = key, built
        good = state.last_good_at
        return replace(built, timestamp=now, last_good_at=0.0 if good is None else good, stale=snapshot.stale)


class ControllerHistory:
    """``(time, controller epoch)`` at each change of the epoch, over the last ``horizon_s`` (thread-safe:
    recorded on the collector's thread, read on the lane's)."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._lock = threading.Lock()
        self._epochs: deque[tuple[float, int]] = deque()

    def record(self, at: float, epoch: int | None) -> None:
        if epoch is None:
            return
        with self._lock:
            if self._epochs and self._epochs[-1][1] == epoch:
                return
            self._epochs.append((at, epoch))
            while len(self._epochs) > 1 and self._epochs[0][0] < at - self.horizon_s:
                self._epochs.popleft()

    def states(self, current: HealthState) -> tuple[HealthState, ...]:
        """The recorded epochs as states shaped like ``current`` (rule 4 reads only time and epoch), oldest
        first, those within the horizon of ``current``'s time."""
        since = current.timestamp - self.horizon_s
        with self._lock:
            epochs = [(at, epoch) for at, epoch in self._epochs if since <= at <= current.timestamp]
        return tuple(replace(current, timestamp=at, controller_epoch=epoch) for at, epoch in epochs)
