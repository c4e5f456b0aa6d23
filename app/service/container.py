"""The service's components, built and started together, stopped in reverse order.

:func:`service_components` is what ``create_app``'s lifespan runs: the ZooKeeper collector (first full
scan), the metrics scraper, the :class:`~app.service.state.ClusterView`, the analytics store, the webhook
notifier, the store's retention pruner, the ZooKeeper admin session of the runbook actions, the action
log, the :class:`~app.actions.runner.ActionRunner` and the :class:`~app.actions.throttles.ThrottleCleaner`.
It yields them as one frozen :class:`ServiceContainer`, installed as the one attribute
``app.state.container`` that :mod:`app.service.deps` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from starlette.applications import Starlette

from analytics.rules import RuleSettings, StalledAction
from analytics.store import Store
from app.actions.measure import PartitionMetricsReader
from app.actions.runner import ActionRunner
from app.actions.state import ActionLog, ActionState, MemoryActionLog
from app.actions.throttles import ThrottleCleaner
from app.incidents.changes import SnapshotChanges
from app.incidents.lane import IncidentLane
from app.retention.pruner import RetentionPruner
from app.service.auth import TokenStore
from app.service.config import ServiceSettings
from app.service.state import ClusterView, SnapshotCollector
from app.storage import Storage
from app.webhooks.notifier import Notifier, service_leadership, service_notifier
from app.webhooks.store import WebhookStore
from collectors.health import HealthReport
from collectors.kafka.admin import KazooAdmin
from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.zkclient import ZooKeeperSecurity
from collectors.metrics import MetricsCollector, MetricsSettings
from collectors.zookeeper.collector import ZooKeeperCollector


@dataclass(frozen=True, slots=True)
class ServiceContainer:
    view: ClusterView
    """The live snapshot, its health report and the brokers' scrape."""
    tokens: TokenStore
    store: Store | None
    """The analytics store (load, alerts); None when the service runs without one."""
    webhooks: WebhookStore | None
    """The webhooks and their outbox, on the same database; None without a store."""
    actions: ActionLog
    """Actions and the audit trail: in the store, else in memory."""
    runner: ActionRunner
    throttles: ThrottleCleaner
    """The replication throttles' inventory and cleanup."""
    notifier: Notifier | None
    """The webhook notifier (None without a store)."""
    incidents: IncidentLane | None = None
    """The incident lane (None without a store, or when disabled)."""
    retention: RetentionPruner | None = None
    """The store's retention pruner (None without a store); it prunes while this instance leads."""

    def install(self, app: Starlette) -> None:
        app.state.container = self

    @staticmethod
    def of(app: Starlette) -> ServiceContainer:
        """The container the lifespan installed (AttributeError before it started)."""
        container: ServiceContainer = app.state.container
        return container


@contextmanager
def service_components(
    settings: ServiceSettings,
    tokens: TokenStore,
    *,
    zookeeper: str,
    metrics: MetricsSettings | None = None,
    store_url: str | None = None,
    collector_factory: Callable[[str], SnapshotCollector] | None = None,
    connections: int = 4,
    session_timeout_s: float = 18.0,
    start_timeout_s: float = 60.0,
    actions: ActionLog | None = None,
    changes: SnapshotChanges | None = None,
    rules: RuleSettings | None = None,
    load_window_s: float = 30.0,
    zk_security: ZooKeeperSecurity | None = None,
) -> Iterator[ServiceContainer]:
    """Start every component for the cluster at ``zookeeper`` (``collector_factory`` instead of a
    ZooKeeper collector of its own: tests, ``serve`` which started it to fail early; ``changes``, the hub
    that collector calls on every new snapshot, wakes the incident lane); stop them in reverse order when
    the block ends. ``rules`` and ``load_window_s`` are the analytics settings the incident lane judges
    with (the rules' thresholds and durations, the load lane's window)."""
    with ExitStack() as stack:
        if collector_factory is not None:
            collector = collector_factory(zookeeper)
        else:
            changes = changes or SnapshotChanges()
            zk = ZooKeeperCollector(
                zookeeper,
                connections=connections,
                session_timeout_s=session_timeout_s,
                on_change=changes,
                security=zk_security,
            )
            zk.start(timeout=start_timeout_s)
            stack.callback(zk.stop)
            collector = zk
        scraper = MetricsCollector(metrics) if metrics is not None else None
        if scraper is not None:
            stack.callback(scraper.close)
        view = ClusterView(collector, scraper, settings.view)
        view.start()
        stack.callback(view.stop)
        storage = Storage.open(store_url) if store_url is not None else None
        if storage is not None:
            stack.callback(storage.close)
        store = None if storage is None else storage.analytics
        webhooks = None if storage is None else storage.webhooks
        leadership = service_leadership(zookeeper, settings.webhooks, security=zk_security)
        notifier = stack.enter_context(service_notifier(webhooks, zookeeper, settings.webhooks, leadership))
        actions = _action_log(storage, actions)

        def stalled_actions() -> list[StalledAction]:
            return [
                StalledAction(
                    r.id, r.kind, str((r.progress.get("stalled") or {}).get("reason", "")), r.started_at
                )
                for r in actions.unfinished()
                if r.state is ActionState.STALLED
            ]

        lane = None
        if store is not None and notifier is not None and settings.incidents.enabled:
            lane = IncidentLane(
                view,
                store,
                leadership,
                webhooks=webhooks,
                render=notifier.render,
                wake=notifier.wake,
                settings=settings.incidents,
                rules=rules,
                load_window_s=load_window_s,
                webhook_horizon_s=settings.webhooks.horizon_s,
                stalled_actions=stalled_actions,
            )
            if changes is not None:
                stack.callback(changes.subscribe(lane.changed))
            lane.start()
            stack.callback(lane.stop)
        retention = None
        if storage is not None and notifier is not None:
            # the notifier started the shared leadership: one replica prunes the shared database
            retention = RetentionPruner(storage.database, settings.retention, leadership)
            retention.start()
            stack.callback(retention.stop)
        admin = KazooAdmin(zookeeper, security=zk_security)
        stack.callback(admin.close)

        def cluster() -> tuple[ClusterSnapshot, HealthReport]:
            state = view.state
            return state.snapshot, state.report

        reader = None if scraper is None else PartitionMetricsReader(scraper, lambda: view.state.snapshot)
        runner = ActionRunner(
            actions,
            admin,
            cluster,
            latest_load=None if store is None else store.latest_load,
            settings=settings.actions,
            # one executor per action: the leader of the service's replicas (the notifier's leadership);
            # without a store the actions live in this process's memory, and it runs them
            leadership=leadership if notifier is not None else None,
            identity=getattr(leadership, "identity", None),
            scrape=None if scraper is None else (lambda: view.state.scrape),
            log_sizes=None if reader is None else reader.log_sizes,
            produce_rates=None if reader is None else reader.produce_rates,
        )
        runner.start()
        stack.callback(runner.shutdown)
        throttles = ThrottleCleaner(actions, admin, lambda: view.state.snapshot)
        yield ServiceContainer(
            view, tokens, store, webhooks, actions, runner, throttles, notifier, lane, retention
        )


def _action_log(storage: Storage | None, given: ActionLog | None) -> ActionLog:
    """``given``, else the store's (what a previous run left unfinished is adopted), else one in memory."""
    if given is not None:
        return given
    if storage is None:
        return MemoryActionLog()
    return storage.actions
