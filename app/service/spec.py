"""What the service is made of: :class:`ServiceSpec`, the one object ``create_app`` takes, and a
:class:`ClusterSpec` per watched cluster (one cluster is a list of one).

The composition roots make them: ``serve`` from the settings (:meth:`app.settings.Settings.service_spec`),
the demo and the tests directly. The components themselves are built from them by
:mod:`app.service.container` when the service starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fastapi import APIRouter

from analytics.config import DEFAULT_WINDOW_S
from analytics.rules import RuleSettings
from app.actions.state import ActionLog
from app.incidents.changes import SnapshotChanges
from app.service.config import ServiceSettings
from app.service.state import SnapshotCollector
from collectors.consumers.config import KafkaSettings
from collectors.metrics import MetricsSettings
from collectors.zookeeper.first_scan import CollectorSpec


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A cluster the service watches."""

    zookeeper: CollectorSpec
    """Its ZooKeeper: connect string, sessions, timeouts, credentials (for every session the service
    opens on it: the collector, the actions' writer, the leadership)."""
    name: str | None = None
    """Its name (``--cluster NAME=...``); None: the one cluster of a single-cluster service, known by its
    cluster id."""
    metrics: MetricsSettings | None = None
    """Where its brokers' metrics are; None: ZooKeeper only."""
    collector: SnapshotCollector | Exception | None = None
    """Its first scan when the caller ran it (:func:`app.service.container.first_scans`, which ``serve``
    runs before its banner; the demo's collector, which its sampler shares; a test's): a started collector,
    which its caller stops, or why the cluster could not be read (retried in the background at once).
    None: the service runs the first scan and stops the collector."""
    changes: SnapshotChanges = field(default_factory=SnapshotChanges)
    """The hub its collector calls on every new snapshot (wakes the incident lane)."""
    kafka: KafkaSettings | None = None
    """How its brokers are reached over Kafka's protocol: the consumer-lag collector
    (:mod:`app.service.consumers`); None: no consumer lag."""


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """The service: its settings, its clusters and the shared parts' store."""

    settings: ServiceSettings
    clusters: Sequence[ClusterSpec]
    """The watched clusters, at least one."""
    store_url: str | None = None
    """The store (load, alerts, webhooks, actions); None: no store (no incident lane, no webhooks)."""
    rules: RuleSettings | None = None
    """The analytics rules the incident lanes judge with (their thresholds and durations)."""
    load_window_s: float = DEFAULT_WINDOW_S
    """The load lane's window (the analytics job's ``window_s``)."""
    actions: ActionLog | None = None
    """One action log every cluster shares (a test's); None: each cluster's own (the store's, else in
    memory)."""
    extra_routers: Sequence[APIRouter] = ()
    """Routers beyond the service's own: the demo and the tests hand in the embedded reference cluster's
    fault controls, which the product never imports."""

    def __post_init__(self) -> None:
        if not self.clusters:
            raise ValueError("no cluster to serve")
        object.__setattr__(self, "clusters", tuple(self.clusters))
        object.__setattr__(self, "extra_routers", tuple(self.extra_routers))
