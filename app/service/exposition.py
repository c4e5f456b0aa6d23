"""``/metrics``: kafka-health's own view of the cluster for Prometheus and Grafana, ``kafka_health_*``.

A custom prometheus_client collector renders the live state at scrape time (no background bookkeeping).
Every series carries a ``cluster`` label, the cluster's key (a named cluster's name, else its cluster id),
so that one Prometheus can watch several clusters; a service that watches several renders each family
once, with one set of series per cluster. The shared parts' series (webhook deliveries, retention) are the
deployment's, not a cluster's: they are repeated under each cluster's label with the same value (do not sum
them across clusters); the open alerts carry the cluster of each alert.

Per-topic and per-broker problem counts come from the partitions that have a problem only (one pass over
them), so a healthy 200k-partition cluster costs little more than a small one.

Per-broker problem counts (``kafka_health_broker_*_partitions``) count the partitions with a replica on
the broker; ``kafka_health_broker_led_under_replicated_partitions`` counts, like Kafka's own
``UnderReplicatedPartitions`` gauge, only those the broker leads.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from analytics.store import Store
from app.actions.state import ActionLog, ActionState
from app.actions.throttle_removal import inventory_of
from app.incidents.lane import IncidentLane
from app.retention.pruner import RetentionPruner
from app.service.consumer_metrics import consumer_metrics
from app.service.consumers import ConsumerLag
from app.service.safe_to_stop import cluster_safety
from app.service.state import ClusterView
from app.silences.model import SILENCE_STATES
from app.silences.store import SilenceStore
from app.webhooks.model import DELIVERY_STATES
from app.webhooks.store import WebhookStore
from collectors.health import problem_partitions
from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.throttles import DIRECTIONS, EntityType, ThrottleState
from collectors.migration import MIGRATION_PHASES, migration_view
from collectors.risks import risk_counts

PROBLEMS = ("under_replicated", "under_min_isr", "at_min_isr", "offline", "unknown")
"""The ``state`` label's problem values; ``unknown``: the state znode could not be read or parsed."""


def _gauge(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"kafka_health_{name}", doc, labels=("cluster", *labels))


def _counter(name: str, doc: str, *labels: str) -> CounterMetricFamily:
    return CounterMetricFamily(f"kafka_health_{name}", doc, labels=("cluster", *labels))


def _migration_metrics(snapshot: ClusterSnapshot, cluster: str) -> Iterator[Metric]:
    """The ZK→KRaft migration: the phase as a state set (1 for the current phase), whether a KRaft
    controller holds /controller, and /migration's KRaft controller epoch and last metadata offset/epoch
    (absent without /migration)."""
    view = migration_view(snapshot)
    phase = _gauge("migration_phase", "ZK→KRaft migration phase: 1 for the current one.", "phase")
    for phase_name in MIGRATION_PHASES:
        phase.add_metric([cluster, phase_name], 1 if view.phase == phase_name else 0)
    yield phase
    kraft = _gauge("controller_kraft", "1 while a KRaft controller holds /controller (ZK→KRaft migration).")
    kraft.add_metric([cluster], 1 if snapshot.controller.is_kraft else 0)
    yield kraft
    migration = snapshot.migration
    if migration is not None:
        for name, value, doc in (
            (
                "migration_kraft_controller_id",
                migration.kraft_controller_id,
                "/migration kraft_controller_id.",
            ),
            (
                "migration_kraft_controller_epoch",
                migration.kraft_controller_epoch,
                "/migration kraft_controller_epoch.",
            ),
            (
                "migration_metadata_offset",
                migration.kraft_metadata_offset,
                "The last KRaft metadata offset the controller wrote to ZooKeeper (-1: not migrated yet).",
            ),
            (
                "migration_metadata_epoch",
                migration.kraft_metadata_epoch,
                "The epoch of the last KRaft metadata the controller wrote to ZooKeeper.",
            ),
        ):
            gauge = _gauge(name, doc)
            gauge.add_metric([cluster], value)
            yield gauge


@dataclass(frozen=True, slots=True)
class ClusterMetrics:
    """One watched cluster's parts, as ``/metrics`` reads them."""

    key: str
    """Its ``cluster`` label: its name, else its cluster id."""
    view: ClusterView
    actions: ActionLog | None = None
    incidents: IncidentLane | None = None
    consumers: ConsumerLag | None = None
    """Its consumer-lag collector (:mod:`app.service.consumer_metrics`); None: consumer lag not collected."""


class KafkaHealthCollector(Collector):
    """``kafka_health_*`` of every cluster in ``clusters`` (each family once, a set of series per cluster)
    and of the shared ``store``, ``webhooks`` and ``retention``."""

    def __init__(
        self,
        clusters: Sequence[ClusterMetrics],
        store: Store | None = None,
        webhooks: WebhookStore | None = None,
        retention: RetentionPruner | None = None,
    ) -> None:
        self.clusters = tuple(clusters)
        self.store = store
        self.webhooks = webhooks
        self.retention = retention

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for cluster in self.clusters:
            for family in _OneCluster(cluster, self.store).collect():
                known = families.get(family.name)
                if known is None:
                    families[family.name] = family
                else:
                    known.samples.extend(family.samples)
        yield from families.values()
        keys = [c.key for c in self.clusters]
        if self.store is not None:
            yield _open_alerts(self.store)
        if self.webhooks is not None:
            yield _deliveries(self.webhooks, keys)
            yield _silences(SilenceStore(self.webhooks.database), keys)
        if self.retention is not None:
            yield from _retention(self.retention, keys)


class _OneCluster:
    """The series of one cluster."""

    def __init__(self, cluster: ClusterMetrics, store: Store | None) -> None:
        self.key = cluster.key
        self.view = cluster.view
        self.actions = cluster.actions
        self.incidents = cluster.incidents
        self.consumers = cluster.consumers
        self.store = store

    def collect(self) -> Iterator[Metric]:
        state = self.view.state
        snapshot, report = state.snapshot, state.report
        cluster = self.key

        alive = _gauge("brokers_alive", "Brokers registered in /brokers/ids.")
        alive.add_metric([cluster], len(snapshot.brokers))
        yield alive
        down = _gauge("broker_down", "1 for a broker that holds replicas but is not registered.", "broker")
        for broker in report.brokers_down:
            down.add_metric([cluster, str(broker)], 1)
        yield down
        controller = _gauge("controller_broker_id", "The active controller's broker id (-1: none).")
        controller.add_metric(
            [cluster], -1 if snapshot.controller.broker_id is None else snapshot.controller.broker_id
        )
        yield controller
        epoch = _gauge("controller_epoch", "/controller_epoch.")
        epoch.add_metric([cluster], snapshot.controller.epoch or 0)
        yield epoch
        yield from _migration_metrics(snapshot, cluster)

        summary = report.summary
        totals = _gauge("partitions", "Partitions by health state ('all' for every partition).", "state")
        totals.add_metric([cluster, "all"], summary.partitions)
        for name in PROBLEMS:
            totals.add_metric([cluster, name], getattr(summary, name))
        totals.add_metric([cluster, "non_preferred_leader"], summary.preferred_replica_imbalance)
        yield totals

        problems = problem_partitions(report) if any(getattr(summary, p) for p in PROBLEMS) else {}
        per_topic = _gauge(
            "topic_partitions", "A topic's partitions with a health problem.", "topic", "state"
        )
        per_broker = _gauge(
            "broker_partitions",
            "Partitions with a replica on the broker and a health problem.",
            "broker",
            "state",
        )
        led = _gauge(
            "broker_led_under_replicated_partitions",
            "Under-replicated partitions the broker leads (what its UnderReplicatedPartitions gauge counts).",
            "broker",
        )
        led_counts: Counter[int] = Counter()
        for name, tps in problems.items():
            topics: Counter[str] = Counter(tp.topic for tp in tps)
            brokers: Counter[int] = Counter()
            for tp in tps:
                info = snapshot.partitions[tp]
                brokers.update(set(info.assignment.replicas))
                if (
                    name == "under_replicated"
                    and info.state is not None
                    and info.state.leader in snapshot.brokers
                ):
                    led_counts[info.state.leader] += 1
            for topic, count in sorted(topics.items()):
                per_topic.add_metric([cluster, topic, name], count)
            for broker, count in sorted(brokers.items()):
                per_broker.add_metric([cluster, str(broker), name], count)
        for broker in sorted(snapshot.brokers):
            led.add_metric([cluster, str(broker)], led_counts[broker])
        yield per_topic
        yield per_broker
        yield led

        ratio = _gauge(
            "broker_preferred_leader_imbalance_ratio",
            "Of the partitions whose preferred leader is the broker, the share another broker leads.",
            "broker",
        )
        for broker, imbalance in sorted(report.imbalance.items()):
            ratio.add_metric([cluster, str(broker)], imbalance.ratio)
        yield ratio
        yield self._safe_to_stop(cluster)
        yield from self._disks(cluster)
        yield self._risks(cluster)

        yield from _throttles(cluster, snapshot, self.actions)
        yield from self._freshness(cluster)
        if self.store is not None:
            yield from self._load(cluster)
        if self.actions is not None:
            yield self._actions(cluster)
            yield from self._running_actions(cluster)
        if self.incidents is not None:
            yield from self._incidents(cluster)
        if self.consumers is not None:
            yield from consumer_metrics(cluster, self.consumers)

    def _safe_to_stop(self, cluster: str) -> Metric:
        """One series per known broker, from the answers the safe-to-stop routes give (computed once per
        snapshot version)."""
        family = _gauge(
            "broker_safe_to_stop",
            "1 when stopping the broker now takes no partition offline or under min ISR "
            "(0 also while the view of ZooKeeper is stale).",
            "broker",
        )
        for broker, answer in cluster_safety(self.view).brokers.items():
            family.add_metric([cluster, str(broker)], 1 if answer.safe else 0)
        return family

    def _disks(self, cluster: str) -> Iterator[Metric]:
        """Each known log dir's used ratio and, only while it grows, its time to full (no series when not
        growing: Prometheus' convention for an unknown value, rather than +Inf)."""
        used = _gauge(
            "broker_disk_used_ratio",
            "A broker's log dir: 1 - avail/size of its filesystem (node_exporter's), as last scraped.",
            "broker",
            "mountpoint",
        )
        full = _gauge(
            "broker_disk_full_in_seconds",
            "Seconds until the log dir is full at its growth over the disk fit window (absent when not "
            "growing or not known yet).",
            "broker",
            "mountpoint",
        )
        for broker, disks in sorted(self.view.all_disks().items()):
            for disk in disks:
                labels = [cluster, str(broker), disk.mountpoint]
                used.add_metric(labels, disk.used_ratio)
                if disk.full_in_s is not None:
                    full.add_metric(labels, disk.full_in_s)
        yield used
        yield full

    def _risks(self, cluster: str) -> Metric:
        """Standing risks by kind, every kind (0 included), from what ``GET /api/v1/risks`` lists."""
        family = _gauge(
            "risks",
            "Standing risks (GET /api/v1/risks) by kind: topics, brokers or log dirs at risk.",
            "kind",
        )
        for kind, count in risk_counts(self.view.risks()).items():
            family.add_metric([cluster, kind], count)
        return family

    def _incidents(self, cluster: str) -> Iterator[Metric]:
        assert self.incidents is not None
        stats = self.incidents.stats()
        leader = _gauge(
            "incident_lane_leader",
            "1 while this replica writes incident alerts (the leader, or the last leader with its "
            "ZooKeeper session disconnected, which writes rule 11 only).",
            "standing",
        )
        for standing in ("leader", "last-leader", "follower"):
            leader.add_metric([cluster, standing], 1 if stats.standing == standing else 0)
        yield leader
        last = _gauge("incident_lane_last_evaluation_timestamp_seconds", "When the lane last evaluated.")
        if stats.last_evaluated_at is not None:
            last.add_metric([cluster], stats.last_evaluated_at)
        yield last
        took = _gauge("incident_lane_evaluation_seconds", "The last evaluation, with its commit.")
        if stats.last_evaluation_s is not None:
            took.add_metric([cluster], stats.last_evaluation_s)
        yield took
        for name, value, doc in (
            ("incident_lane_evaluations", stats.evaluations, "Evaluations of the incident rules."),
            ("incident_lane_events", stats.events, "Alert events the lane wrote."),
            ("incident_lane_conflicts", stats.conflicts, "Commits another writer was first to."),
            ("incident_lane_errors", stats.errors, "Evaluations that failed (logged)."),
        ):
            counter = _counter(name, doc)
            counter.add_metric([cluster], value)
            yield counter

    def _actions(self, cluster: str) -> Metric:
        assert self.actions is not None
        counts: Counter[tuple[str, str]] = Counter(
            (r.kind, r.state.value) for r in self.actions.records(limit=100_000)
        )
        family = _gauge("actions", "Runbook actions by kind and state.", "kind", "state")
        for kind in (
            "preferred-replica-election",
            "reassignment",
            "demote-broker",
            "promote-broker",
            "decommission-broker",
        ):
            for state in ActionState:
                family.add_metric([cluster, kind, state.value], counts[(kind, state.value)])
        return family

    def _running_actions(self, cluster: str) -> Iterator[Metric]:
        """Each unfinished action: stalled or not, progress, ETA, its throttle (the operations dashboard)."""
        assert self.actions is not None
        labels = ("action", "kind")
        stalled = _gauge("action_stalled", "1 while an unfinished action is STALLED (no progress).", *labels)
        partitions = _gauge(
            "action_partitions_remaining", "Partitions an unfinished reassignment has still to move.", *labels
        )
        remaining = _gauge(
            "action_bytes_remaining",
            "Bytes an unfinished reassignment has still to copy (from the brokers' log sizes).",
            *labels,
        )
        rate = _gauge("action_copy_rate_bytes_per_second", "The measured copy rate (smoothed).", *labels)
        eta = _gauge(
            "action_eta_seconds", "Seconds until the reassignment is done at the measured rate.", *labels
        )
        throttle = _gauge(
            "action_throttle_bytes_per_second", "The replication throttle an action set (now).", *labels
        )
        for record in self.actions.unfinished():
            values = [cluster, record.id, record.kind]
            progress = record.progress
            stalled.add_metric(values, 1 if record.state is ActionState.STALLED else 0)
            for family, key in (
                (partitions, "partitions_remaining"),
                (remaining, "bytes_remaining"),
                (rate, "rate_bytes_per_s"),
                (eta, "eta_s"),
                (throttle, "throttle_bytes_per_s"),
            ):
                value = progress.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    family.add_metric(values, float(value))
        yield from (stalled, partitions, remaining, rate, eta, throttle)

    def _freshness(self, cluster: str) -> Iterator[Metric]:
        state = self.view.state
        scan = self.view.collector.last_scan
        duration = _gauge("scan_duration_seconds", "The last full ZooKeeper scan.")
        if scan is not None:
            duration.add_metric([cluster], scan.seconds)
        yield duration
        age = _gauge("snapshot_age_seconds", "Seconds since the snapshot was known good.")
        if state.last_good_at is not None:
            age.add_metric([cluster], max(0.0, time.time() - state.last_good_at))
        yield age
        stale = _gauge("snapshot_stale", "1 while the ZooKeeper session is lost.")
        stale.add_metric([cluster], 1 if state.snapshot.stale else 0)
        yield stale
        failures = _counter("scrape_failures", "Failed scrapes of a broker's metrics.", "broker")
        for broker, count in sorted(self.view.scrape_failures_total.items()):
            failures.add_metric([cluster, str(broker)], count)
        yield failures
        up = _gauge("broker_scrape_up", "1 when the broker's last metrics scrape worked.", "broker")
        if state.scrape is not None:
            for broker, scraped in sorted(state.scrape.scrapes.items()):
                up.add_metric([cluster, str(broker)], 1 if scraped.ok else 0)
        yield up
        dialect = _gauge(
            "broker_metrics_dialect",
            "1 for the exporter dialect (jmx_exporter rule file) the broker's last scrape was read in.",
            "broker",
            "dialect",
        )
        if state.scrape is not None:
            for broker, scraped in sorted(state.scrape.scrapes.items()):
                if scraped.dialect is not None:
                    dialect.add_metric([cluster, str(broker), scraped.dialect], 1)
        yield dialect

    def _load(self, cluster: str) -> Iterator[Metric]:
        """The cluster's latest load window (a single unnamed cluster: the store's latest of any cluster
        when there is none under its id)."""
        assert self.store is not None
        latest = self.store.latest_load(cluster)
        if latest is None and not _named(self.view, cluster):
            latest = self.store.latest_load()
        load = _gauge("broker_normalized_load", "Db: the broker's share of the cluster load.", "broker")
        deviation = _gauge("broker_deviation_rate", "r_n = (Db - 1/N) / (1/N).", "broker")
        stddev = _gauge("load_stddev", "σ of the brokers' normalised loads.")
        threshold = _gauge("load_stddev_threshold", "σ_max = r / N.")
        rated = _gauge("load_rated_deviation", "r.")
        if latest is not None:
            name = latest.window.cluster
            for b in latest.brokers:
                load.add_metric([name, str(b.broker)], b.normalized_load)
                deviation.add_metric([name, str(b.broker)], b.deviation_rate)
            stddev.add_metric([name], latest.stddev)
            threshold.add_metric([name], latest.stddev_threshold)
            rated.add_metric([name], latest.rated_deviation)
        yield from (load, deviation, stddev, threshold, rated)


def _named(view: ClusterView, key: str) -> bool:
    """Whether ``key`` is a name given to the cluster rather than its cluster id."""
    return key != (view.state.snapshot.cluster_id or "unknown")


def _open_alerts(store: Store) -> Metric:
    """Open alerts by cluster (each alert's own), rule and severity."""
    alerts = _gauge("alerts_open", "Open alerts by rule and severity.", "rule", "severity")
    counts: Counter[tuple[str, int, str]] = Counter(
        (a.cluster, a.rule, a.severity) for a in store.alerts(state="open", limit=100_000)
    )
    for (name, rule, severity), count in sorted(counts.items()):
        alerts.add_metric([name, str(rule), severity], count)
    return alerts


def _deliveries(webhooks: WebhookStore, keys: Sequence[str]) -> Metric:
    deliveries = _gauge(
        "webhook_deliveries",
        "Webhook deliveries in the outbox by state (finished rows are pruned by retention).",
        "state",
    )
    totals: Counter[str] = Counter()
    for per_state in webhooks.delivery_stats().values():
        totals.update(per_state)
    for cluster in keys:
        for state in DELIVERY_STATES:
            deliveries.add_metric([cluster, state], totals[state])
    return deliveries


def _silences(silences: SilenceStore, keys: Sequence[str]) -> Metric:
    family = _gauge("silences", "Silences by state: active, pending (not started), expired.", "state")
    counts = silences.counts(time.time())
    for cluster in keys:
        for state in SILENCE_STATES:
            family.add_metric([cluster, state], counts[state])
    return family


def _retention(retention: RetentionPruner, keys: Sequence[str]) -> Iterator[Metric]:
    stats = retention.stats()
    pruned = _counter("retention_pruned_rows", "Rows the retention pruner deleted, by table.", "table")
    rolled = _counter("retention_rolled_up_windows", "Load windows folded into hourly rollups.")
    passes = _counter("retention_passes", "Retention passes run (by this replica, while it led).")
    errors = _counter("retention_errors", "Retention passes that failed (logged).")
    last = _gauge("retention_last_pass_timestamp_seconds", "When the last retention pass started.")
    took = _gauge("retention_last_pass_duration_seconds", "How long the last retention pass took.")
    for cluster in keys:
        for table, count in stats.pruned_total.items():
            pruned.add_metric([cluster, table], count)
        rolled.add_metric([cluster], stats.rolled_up_windows_total)
        passes.add_metric([cluster], stats.passes)
        errors.add_metric([cluster], stats.errors)
        if stats.last_pass_at is not None and stats.last_pass_duration_s is not None:
            last.add_metric([cluster], stats.last_pass_at)
            took.add_metric([cluster], stats.last_pass_duration_s)
    yield from (pruned, rolled, passes, errors, last, took)


def _throttles(cluster: str, snapshot: ClusterSnapshot, actions: ActionLog | None) -> Iterator[Metric]:
    """Replication throttles: entities by state (every combination, 0 included, so that a leftover shows
    as a change), and the rates in force on each registered broker (its own, else ``<default>``'s)."""
    inventory = inventory_of(snapshot, actions)
    counts = _gauge(
        "replication_throttles",
        "Broker and topic entities with replication throttle configs, leftover or in use by an unfinished "
        "action or a running reassignment.",
        "state",
        "entity_type",
    )
    for state in ThrottleState:
        for entity_type in EntityType:
            counts.add_metric([cluster, state.value, entity_type.value], inventory.count(state, entity_type))
    yield counts
    rates = _gauge(
        "replication_throttle_rate_bytes",
        "The replication throttle rate in force on the broker (bytes/s): its own, else <default>'s.",
        "broker",
        "direction",
    )
    for broker, by_direction in inventory.rates.items():
        for direction in DIRECTIONS:
            if direction in by_direction:
                rates.add_metric([cluster, str(broker), direction], by_direction[direction])
    yield rates


def render(
    clusters: Sequence[ClusterMetrics],
    store: Store | None,
    webhooks: WebhookStore | None = None,
    retention: RetentionPruner | None = None,
) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KafkaHealthCollector(clusters, store, webhooks, retention))
    return generate_latest(registry)
