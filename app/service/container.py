"""The service's components, built from its :class:`~app.service.spec.ServiceSpec` and started together
when the service starts, stopped in reverse order.

:func:`service_components` is what ``create_app``'s lifespan runs. It builds the shared parts once
(:func:`start_shared`: the store, the leadership, the webhook notifier and the store's retention
pruner) and each watched cluster's own (:func:`start_cluster`, a :class:`ClusterParts`: its
:class:`~app.service.state.ClusterView` over its ZooKeeper collector and metrics scraper, its incident
lane, its consumer-lag collector (:class:`~app.service.consumers.ConsumerLag`, when its ``kafka`` settings
are given), the ZooKeeper admin session of its runbook actions, its :class:`~app.actions.runner.ActionRunner`
and :class:`~app.actions.throttle_removal.ThrottleCleaner`, and with several clusters its own leadership,
elected through its own ZooKeeper, for the lane and the runner). A new per-cluster component is added in
:func:`start_cluster` (and named in :class:`ClusterParts`), nowhere else. The shared parts lead through
the first cluster whose ZooKeeper answers (:func:`~app.webhooks.notifier.shared_leadership`) with
several clusters, through that cluster's leadership with one.

The clusters' first scans run in parallel (:func:`first_scans`, which ``serve`` also runs before its
banner and hands in). With one cluster, a cluster that cannot be read fails the start-up; with several,
a cluster that cannot be read is a warning and is retried in the background (its routes answer 503 until
it is read), and only no cluster read at all fails the start-up.

Everything is yielded as one frozen :class:`ServiceContainer`, installed as the one attribute
``app.state.container`` that :mod:`app.service.deps` reads.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

from starlette.applications import Starlette

from analytics.rules import StalledAction
from analytics.store import Store
from app.actions.measure import PartitionMetricsReader
from app.actions.runner import ActionRunner
from app.actions.state import ActionLog, ActionState, AuditEntry, MemoryActionLog
from app.actions.throttle_removal import ThrottleCleaner
from app.incidents.lane import IncidentLane
from app.incidents.observe import cluster_name
from app.leadership import Leadership, service_leadership, shared_leadership
from app.maintenance.conducting import LiveCluster, RollingRestarts
from app.maintenance.store import RestartStore
from app.retention.pruner import RetentionPruner
from app.service.auth import Principal, Role, TokenStore
from app.service.consumers import ConsumerLag
from app.service.maintenance import InProcessMaintenance
from app.service.schemas.common import MAX_ID
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ClusterView, SnapshotCollector
from app.storage import Storage
from app.webhooks.notifier import Notifier, service_notifier
from app.webhooks.store import WebhookStore
from collectors.consumers.collector import GroupReport
from collectors.health import HealthReport, no_kafka_cluster
from collectors.kafka.admin import AdminZooKeeper, KazooAdmin
from collectors.kafka.model import ClusterSnapshot
from collectors.metrics import MetricsCollector
from collectors.zookeeper import first_scan
from collectors.zookeeper.collector import ZooKeeperCollector, ZooKeeperCollectorError

log = logging.getLogger(__name__)

RETRY_INTERVAL_S = 5.0
"""How long a cluster that could not be read waits before it is tried again."""


def public_connect(connect: str) -> str:
    """The connect string as the API shows it: any ``user:password@`` before a host is dropped (the
    credentials live in the ZooKeeper settings, never in the answers)."""
    hosts, slash, chroot = connect.partition("/")
    hosts = ",".join(re.sub(r"^.*@", "", host) for host in hosts.split(","))
    return hosts + slash + chroot


@dataclass(frozen=True, slots=True)
class ClusterParts:
    """A cluster's started components."""

    view: ClusterView
    """The live snapshot, its health report and the brokers' scrape."""
    actions: ActionLog
    runner: ActionRunner
    throttles: ThrottleCleaner
    """The replication throttles' inventory and cleanup."""
    incidents: IncidentLane | None
    """The incident lane (None without a store, or when disabled)."""
    leadership: Leadership | None
    """Who writes the cluster's incident alerts (and runs its actions when they are in the store); None
    without a store."""
    consumers: ConsumerLag | None = None
    """The consumer-lag collector (None: consumer lag is not collected, ``kafka.enabled`` false)."""
    rolling_restarts: RollingRestarts | None = None
    """The service's rolling restarts (None without a store: their journal is in it)."""


class ClusterComponents:
    """One watched cluster: its name and ZooKeeper, and its components once its ZooKeeper was read
    (:attr:`parts`; None while it is retried, :attr:`error` saying why)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.zookeeper = public_connect(spec.zookeeper.connect)
        self._parts: ClusterParts | None = None
        self.error: str | None = None
        self._key: str | None = spec.name

    @property
    def parts(self) -> ClusterParts | None:
        return self._parts

    def ready(self, parts: ClusterParts) -> None:
        if self._key is None:
            self._key = cluster_name(parts.view.state.snapshot)
        self._parts = parts
        self.error = None

    @property
    def key(self) -> str:
        """How the cluster is known everywhere (the store's ``cluster`` column, the ``cluster`` label, the
        ``{cluster}`` of the scoped routes): its name, else its cluster id (``unknown`` without one)."""
        if self._key is None:
            return "unknown"
        return self._key

    @property
    def label(self) -> str:
        """How messages name it: its name, else its ZooKeeper."""
        return self.name if self.name is not None else self.zookeeper

    def has_kafka(self) -> bool:
        """Whether its ZooKeeper was read and its snapshot shows a Kafka cluster (``describe``'s check,
        :func:`~collectors.health.no_kafka_cluster`): the service writes into the cluster's ZooKeeper (its
        election's znodes, the runbook actions' admin znodes) only then, never into a chroot that holds no
        Kafka cluster."""
        parts = self._parts
        return parts is not None and no_kafka_cluster(parts.view.collector.snapshot) is None

    # the started parts (ClusterNotReadyError while the cluster is not read yet)
    def _started(self) -> ClusterParts:
        if self._parts is None:
            raise ClusterNotReadyError(self)
        return self._parts

    @property
    def view(self) -> ClusterView:
        return self._started().view

    @property
    def actions(self) -> ActionLog:
        return self._started().actions

    @property
    def runner(self) -> ActionRunner:
        return self._started().runner

    @property
    def throttles(self) -> ThrottleCleaner:
        return self._started().throttles

    @property
    def incidents(self) -> IncidentLane | None:
        return self._started().incidents

    @property
    def consumers(self) -> ConsumerLag | None:
        return self._started().consumers

    @property
    def rolling_restarts(self) -> RollingRestarts | None:
        return self._started().rolling_restarts


class ClusterNotReadyError(Exception):
    """A cluster whose ZooKeeper has not been read yet (a 503)."""

    def __init__(self, cluster: ClusterComponents) -> None:
        why = f": {cluster.error}" if cluster.error else ""
        super().__init__(
            f"cluster {cluster.label}: ZooKeeper not reachable yet ({cluster.zookeeper}{why}); retried "
            f"every {RETRY_INTERVAL_S:g} s"
        )
        self.cluster = cluster


def audit_trail(logs: Sequence[ActionLog], *, limit: int, offset: int) -> list[AuditEntry]:
    """The audit entries of several clusters' logs, newest first (time, then each log's sequence), the page
    at ``offset`` of ``limit`` entries over them all. One log pages itself; of several, each gives its first
    ``offset + limit`` entries and the merge is cut. That count saturates at :data:`MAX_ID` (no log holds
    more): ``offset`` may be 2^63-1 itself, and a store's SQL integers are signed 64-bit, so the sum would
    not fit (SQLite raised OverflowError, a 500)."""
    if len(logs) == 1:
        return logs[0].audit_entries(limit=limit, offset=offset)
    head = min(offset + limit, MAX_ID)
    merged = [entry for log in logs for entry in log.audit_entries(limit=head)]
    merged.sort(key=lambda e: (e.at, e.sequence), reverse=True)
    return merged[offset : offset + limit]


@dataclass(frozen=True, slots=True)
class ServiceContainer:
    clusters: dict[str, ClusterComponents]
    """The watched clusters by name (the single unnamed one by its cluster id), in name order."""
    tokens: TokenStore
    store: Store | None
    """The analytics store (load, alerts); None when the service runs without one."""
    webhooks: WebhookStore | None
    """The webhooks and their outbox, on the same database; None without a store."""
    notifier: Notifier | None
    """The webhook notifier (None without a store)."""
    retention: RetentionPruner | None = None
    """The store's retention pruner (None without a store); it prunes while this instance leads."""
    leadership: Leadership | None = None
    """The shared parts' leadership (the notifier's and the pruner's)."""
    audit_log: ActionLog | None = None
    """One log every cluster shares (a test's); None: each cluster's own (the store's, else in memory)."""

    def install(self, app: Starlette) -> None:
        app.state.container = self

    @staticmethod
    def of(app: Starlette) -> ServiceContainer:
        """The container the lifespan installed (AttributeError before it started)."""
        container: ServiceContainer = app.state.container
        return container

    @property
    def named(self) -> bool:
        """Whether the clusters are named ones (``--cluster``), not the one cluster of ``--zookeeper``."""
        return any(c.name is not None for c in self.clusters.values())

    def cluster(self, name: str | None = None) -> ClusterComponents:
        """The cluster called ``name`` (its key; None: the only one). Raises :class:`UnknownClusterError`,
        :class:`SeveralClustersError`."""
        if name is None:
            if len(self.clusters) != 1:
                raise SeveralClustersError(list(self.clusters))
            return next(iter(self.clusters.values()))
        found = self.clusters.get(name)
        if found is None:
            raise UnknownClusterError(name, list(self.clusters))
        return found

    def audit_entries(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
        """The audit trail, newest first, of every cluster (:func:`audit_trail`)."""
        if self.audit_log is not None:
            return self.audit_log.audit_entries(limit=limit, offset=offset)
        logs = [c.parts.actions for c in self.clusters.values() if c.parts is not None]
        return audit_trail(logs, limit=limit, offset=offset)

    @property
    def only(self) -> ClusterComponents:
        """The one cluster (single-cluster call sites); SeveralClustersError with several."""
        return self.cluster(None)

    # the one cluster's parts (single-cluster call sites; SeveralClustersError with several)
    @property
    def view(self) -> ClusterView:
        return self.only.view

    @property
    def actions(self) -> ActionLog:
        return self.only.actions

    @property
    def runner(self) -> ActionRunner:
        return self.only.runner

    @property
    def throttles(self) -> ThrottleCleaner:
        return self.only.throttles

    @property
    def incidents(self) -> IncidentLane | None:
        return self.only.incidents


class UnknownClusterError(LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"no cluster named {name}; known: {', '.join(known)}")
        self.known = known


class SeveralClustersError(LookupError):
    def __init__(self, names: list[str]) -> None:
        super().__init__(f"{len(names)} clusters are watched: use /api/v1/clusters/{{name}}/...")
        self.names = names


@dataclass(frozen=True, slots=True)
class _Shared:
    """The shared parts, which every cluster's components use."""

    spec: ServiceSpec
    storage: Storage | None
    notifier: Notifier | None
    leadership: Leadership | None
    """The shared leadership, which is also the cluster's with one cluster."""
    retention: RetentionPruner | None

    @property
    def several(self) -> bool:
        return len(self.spec.clusters) > 1


@contextmanager
def service_components(spec: ServiceSpec, tokens: TokenStore) -> Iterator[ServiceContainer]:
    """Start every component of ``spec`` (one cluster or several), stop them in reverse order when the
    block ends. Raises ZooKeeperCollectorError when no cluster can be read (with one cluster: when it
    cannot)."""
    several = len(spec.clusters) > 1
    with ExitStack() as stack:
        clusters = _read_clusters(stack, spec.clusters)
        entries = [ClusterComponents(cluster) for cluster in clusters]
        shared = start_shared(stack, spec, entries)
        keyed: dict[str, ClusterComponents] = {}
        pending: list[ClusterComponents] = []
        for entry in entries:
            collector = entry.spec.collector
            assert collector is not None  # read (or handed in) by _read_clusters
            if isinstance(collector, Exception):
                entry.error = str(collector)
                pending.append(entry)
            else:
                entry.ready(start_cluster(stack, shared, entry, collector))
            keyed[entry.key] = entry
        if pending:
            retrier = _Retrier(pending, shared)
            retrier.start()
            stack.callback(retrier.stop)
        storage = shared.storage
        yield ServiceContainer(
            dict(sorted(keyed.items())) if several else keyed,
            tokens,
            None if storage is None else storage.analytics,
            None if storage is None else storage.webhooks,
            shared.notifier,
            shared.retention,
            shared.leadership if shared.notifier is not None else None,
            spec.actions,
        )


def first_scans(clusters: Sequence[ClusterSpec]) -> list[ClusterSpec]:
    """Each cluster's first full scan, in parallel (:func:`collectors.zookeeper.first_scan.first_scans`),
    for the clusters not read yet (``collector`` None): each returned with its started collector (on
    its ``changes``), or the ZooKeeperCollectorError that says why it could not be read. Any other
    failure is raised (the collectors started are stopped first)."""
    todo = [cluster for cluster in clusters if cluster.collector is None]
    results = iter(first_scan.first_scans([c.zookeeper for c in todo], [c.changes for c in todo]))
    scanned = [c if c.collector is not None else replace(c, collector=next(results)) for c in clusters]
    failed = [c.collector for c in scanned if _unexpected(c.collector)]
    if failed:
        for cluster, before in zip(scanned, clusters, strict=True):
            if before.collector is None and isinstance(cluster.collector, ZooKeeperCollector):
                cluster.collector.stop()
        assert isinstance(failed[0], Exception)
        raise failed[0]
    return scanned


def _unexpected(outcome: object) -> bool:
    return isinstance(outcome, Exception) and not isinstance(outcome, ZooKeeperCollectorError)


def _read_clusters(stack: ExitStack, clusters: Sequence[ClusterSpec]) -> list[ClusterSpec]:
    """The clusters with their first scans (:func:`first_scans`); the collectors started here are stopped
    by ``stack``. With one cluster its failure is raised; with several, each new failure is logged in one
    line (a failure handed in was reported by the caller), and raised only when every cluster failed."""
    scanned = first_scans(clusters)
    for cluster, before in zip(scanned, clusters, strict=True):
        if before.collector is None and isinstance(cluster.collector, ZooKeeperCollector):
            stack.callback(cluster.collector.stop)
    if len(scanned) == 1:
        if isinstance(scanned[0].collector, Exception):
            raise scanned[0].collector
        return scanned
    for cluster, before in zip(scanned, clusters, strict=True):
        if before.collector is None and isinstance(cluster.collector, Exception):
            log.warning(
                "cluster %s: cannot read its ZooKeeper at %s (retried in the background): %s",
                cluster.name,
                public_connect(cluster.zookeeper.connect),
                cluster.collector,
            )
    if all(isinstance(c.collector, Exception) for c in scanned):
        raise ZooKeeperCollectorError(
            "no cluster can be read: " + "; ".join(f"{c.name}: {c.collector}" for c in scanned)
        )
    return scanned


def start_shared(stack: ExitStack, spec: ServiceSpec, entries: Sequence[ClusterComponents]) -> _Shared:
    """Start the shared parts (``stack`` stops them): the store (when ``spec`` has one), the leadership
    (with several clusters, through the first whose ZooKeeper answers), the webhook notifier, which
    starts that leadership, and the store's retention pruner."""
    settings = spec.settings
    clusters = spec.clusters
    storage = Storage.open(spec.store_url) if spec.store_url is not None else None
    if storage is not None:
        stack.callback(storage.close)
    if len(clusters) > 1:
        leadership = shared_leadership(
            [(c.zookeeper.connect, c.zookeeper.security) for c in clusters],
            settings.webhooks,
            present=[entry.has_kafka for entry in entries],
        )
    else:
        leadership = service_leadership(
            clusters[0].zookeeper.connect,
            settings.webhooks,
            security=clusters[0].zookeeper.security,
            present=entries[0].has_kafka,
        )
    webhooks = None if storage is None else storage.webhooks
    notifier = stack.enter_context(
        service_notifier(webhooks, clusters[0].zookeeper.connect, settings.webhooks, leadership)
    )
    retention = None
    if storage is not None and notifier is not None:
        # the notifier started the shared leadership: one replica prunes the shared database
        retention = RetentionPruner(storage.database, settings.retention, leadership)
        retention.start()
        stack.callback(retention.stop)
    return _Shared(spec, storage, notifier, leadership, retention)


class _Retrier:
    """Reads the clusters that could not be read at start-up again, every :data:`RETRY_INTERVAL_S`, and
    starts each one's components once it is read; :meth:`stop` stops those too."""

    def __init__(self, pending: list[ClusterComponents], shared: _Shared) -> None:
        self._pending = list(pending)
        self._shared = shared
        self._stop = threading.Event()
        self._stack = ExitStack()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cluster-retry", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop retrying (an attempt under way is not waited for long: its collector is stopped when it
        ends) and stop the components of the clusters read meanwhile."""
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self._stack.close()

    def _run(self) -> None:
        first = True
        while self._pending and not self._stop.wait(0 if first else RETRY_INTERVAL_S):
            first = False
            for entry in list(self._pending):
                if self._stop.is_set():
                    return
                try:
                    collector = first_scan.start_collector(entry.spec.zookeeper, entry.spec.changes)
                except ZooKeeperCollectorError as exc:
                    entry.error = str(exc)
                    log.debug("cluster %s: still not readable: %s", entry.label, exc)
                    continue
                with self._lock:
                    if self._stop.is_set():
                        collector.stop()
                        return
                    self._stack.callback(collector.stop)
                    try:
                        entry.ready(start_cluster(self._stack, self._shared, entry, collector))
                    except Exception as exc:  # logged, retried: a start-up failure must not end the loop
                        log.warning("cluster %s: its components did not start: %s", entry.label, exc)
                        entry.error = str(exc)
                        continue
                log.warning("cluster %s: its ZooKeeper is read now; the cluster is served", entry.label)
                self._pending.remove(entry)


def start_cluster(
    stack: ExitStack, shared: _Shared, entry: ClusterComponents, collector: SnapshotCollector
) -> ClusterParts:
    """Start one cluster's components on its started ``collector`` (``stack`` stops them): its metrics
    scraper and view, its leadership (with several clusters), its incident lane, its actions' admin
    session, runner and throttle cleaner. The one place a per-cluster component is added."""
    cluster = entry.spec
    settings = shared.spec.settings
    scraper = MetricsCollector(cluster.metrics) if cluster.metrics is not None else None
    if scraper is not None:
        stack.callback(scraper.close)
    view = ClusterView(collector, scraper, settings.view)
    view.start()
    stack.callback(view.stop)
    stack.callback(cluster.changes.subscribe(view.changed))  # a log dir failure notice: scrape at once
    storage = shared.storage
    store = None if storage is None else storage.analytics
    notifier = shared.notifier
    leadership: Leadership | None = shared.leadership
    if shared.several and notifier is not None:
        # a leadership of its own, through its own ZooKeeper: its lane and its runner go on while another
        # cluster's ZooKeeper is down (the notifier starts and stops the shared one)
        leadership = service_leadership(
            cluster.zookeeper.connect,
            settings.webhooks,
            security=cluster.zookeeper.security,
            cluster=cluster.name,
            present=entry.has_kafka,
        )
        leadership.start()
        stack.callback(leadership.stop)
    actions = _action_log(storage, shared.spec.actions, cluster.name)
    woken: list[Callable[[], None]] = []  # the lane, once started: a new consumer round wakes it

    def new_round() -> None:
        for wake in woken:
            wake()

    consumers = None
    if cluster.kafka is not None:
        consumers = ConsumerLag(cluster.kafka, lambda: view.state.snapshot.brokers, on_round=new_round)
    lane = None
    if store is not None and notifier is not None and leadership is not None and settings.incidents.enabled:
        lane = IncidentLane(
            view,
            store,
            leadership,
            webhooks=None if storage is None else storage.webhooks,
            render=notifier.render,
            wake=notifier.wake,
            settings=settings.incidents,
            rules=shared.spec.rules,
            load_window_s=shared.spec.load_window_s,
            webhook_horizon_s=settings.webhooks.horizon_s,
            stalled_actions=lambda: _stalled(actions),
            cluster=cluster.name,
            consumer_groups=None if consumers is None else (lambda: _groups(consumers)),
        )
        stack.callback(cluster.changes.subscribe(lane.changed))
        lane.start()
        stack.callback(lane.stop)
        woken.append(lane.changed)
    if consumers is not None:
        consumers.start()
        stack.callback(consumers.stop)
    kazoo_admin = KazooAdmin(cluster.zookeeper.connect, security=cluster.zookeeper.security)
    stack.callback(kazoo_admin.close)
    admin = KafkaOnlyAdmin(kazoo_admin, entry.has_kafka, entry.zookeeper)
    # one executor per action: the leader of the service's replicas (the cluster's leadership); without a
    # store the actions live in this process's memory, and it runs them
    runner_leadership = leadership if notifier is not None else None

    def state() -> tuple[ClusterSnapshot, HealthReport]:
        current = view.state
        return current.snapshot, current.report

    reader = None if scraper is None else PartitionMetricsReader(scraper, lambda: view.state.snapshot)
    runner = ActionRunner(
        actions,
        admin,
        state,
        latest_load=None if store is None else store.latest_load,
        settings=settings.actions,
        leadership=runner_leadership,
        identity=getattr(runner_leadership, "identity", None),
        scrape=None if scraper is None else (lambda: view.state.scrape),
        log_sizes=None if reader is None else reader.log_sizes,
        produce_rates=None if reader is None else reader.produce_rates,
        log_dir_mountpoints=() if cluster.metrics is None else cluster.metrics.log_dir_mountpoints,
    )
    runner.start()
    stack.callback(runner.shutdown)
    throttles = ThrottleCleaner(actions, admin, lambda: view.state.snapshot)
    restarts = None
    if storage is not None and store is not None:
        restarts = _rolling_restarts(stack, shared, entry, view, actions, runner, runner_leadership)
    return ClusterParts(view, actions, runner, throttles, lane, runner_leadership, consumers, restarts)


def _rolling_restarts(
    stack: ExitStack,
    shared: _Shared,
    entry: ClusterComponents,
    view: ClusterView,
    actions: ActionLog,
    runner: ActionRunner,
    leadership: Leadership | None,
) -> RollingRestarts:
    """The cluster's rolling restarts, conducted by the runner's leader, journaled in the store."""
    storage = shared.storage
    assert storage is not None
    notifier = shared.notifier
    live = LiveCluster(lambda: view.collector.snapshot)
    stack.callback(entry.spec.changes.subscribe(live.on_change))

    def service(requested_by: str) -> InProcessMaintenance:
        return InProcessMaintenance(
            Principal(requested_by, Role.operator),
            runner,
            actions,
            storage.database,
            storage.analytics,
            wake_notifier=None if notifier is None else notifier.wake,
        )

    restarts = RollingRestarts(
        RestartStore(storage.database, entry.spec.name),
        live,
        service,
        leadership=leadership,
        identity=runner.identity,
        default_min_insync_replicas=shared.spec.settings.view.default_min_insync_replicas,
        adopt_interval_s=shared.spec.settings.actions.adopt_interval_s,
    )
    restarts.start()
    stack.callback(restarts.shutdown)
    return restarts


def _groups(consumers: ConsumerLag) -> dict[str, GroupReport] | None:
    """The groups of the current consumer round (rule 19); None without one."""
    current = consumers.current()
    return None if current is None else current.groups


def _stalled(actions: ActionLog) -> list[StalledAction]:
    """The cluster's stalled runbook actions, as the incident rules see them."""
    return [
        StalledAction(r.id, r.kind, str((r.progress.get("stalled") or {}).get("reason", "")), r.started_at)
        for r in actions.unfinished()
        if r.state is ActionState.STALLED
    ]


class NoKafkaClusterError(RuntimeError):
    """A write into a cluster's ZooKeeper refused: its chroot holds no Kafka cluster (now)."""


class KafkaOnlyAdmin:
    """:class:`~collectors.kafka.admin.AdminZooKeeper` over ``admin`` that refuses to write while
    ``present()`` is False (the cluster's snapshot shows no Kafka cluster): an admin znode's ``makepath``
    would otherwise create the chroot of a wrong connect string. Reads pass through."""

    def __init__(self, admin: AdminZooKeeper, present: Callable[[], bool], zookeeper: str) -> None:
        self._admin = admin
        self._present = present
        self._zookeeper = zookeeper

    def _writable(self) -> None:
        if not self._present():
            raise NoKafkaClusterError(f"{self._zookeeper}: no Kafka cluster there; nothing is written")

    def exists(self, path: str) -> bool:
        return self._admin.exists(path)

    def read(self, path: str) -> bytes | None:
        return self._admin.read(path)

    def create(self, path: str, data: bytes) -> None:
        self._writable()
        self._admin.create(path, data)

    def wait_deleted(self, path: str, timeout_s: float) -> bool:
        return self._admin.wait_deleted(path, timeout_s)

    def get_config(self, entity_type: str, entity: str) -> dict[str, str]:
        return self._admin.get_config(entity_type, entity)

    def set_config(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        self._writable()
        self._admin.set_config(entity_type, entity, config)


def _action_log(storage: Storage | None, given: ActionLog | None, cluster: str | None) -> ActionLog:
    """``given``, else the cluster's log in the store (what a previous run left unfinished is adopted;
    each cluster's runner sees only its own cluster's actions), else one in memory. ``cluster``: a named
    cluster's name, None for the single unnamed cluster."""
    if given is not None:
        return given
    if storage is None:
        return MemoryActionLog(cluster)
    return storage.actions_for(cluster)
