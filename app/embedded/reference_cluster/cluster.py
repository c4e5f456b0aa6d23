"""The reference cluster: simulated ZK-mode Kafka brokers on a real ZooKeeper.

Each broker holds its own ZooKeeper session, registers itself, competes for ``/controller`` and, when it
wins, runs :class:`~app.embedded.reference_cluster.controller.Controller`. Brokers talk to each other
(LeaderAndIsr, AlterPartition, fetches) by method calls on one event loop; everything they tell the world goes
through ZooKeeper and their ``/metrics`` endpoints, in the formats Kafka uses.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import DataWatch

from app.embedded.reference_cluster import replication
from app.embedded.reference_cluster.admin import TopicExistsError, ZkAdmin
from app.embedded.reference_cluster.broker import SimBroker
from app.embedded.reference_cluster.config import ConsumerGroupSpec, ReferenceClusterSettings, TopicSpec
from app.embedded.reference_cluster.controller import Controller
from app.embedded.reference_cluster.dynamic_config import DynamicConfigs
from app.embedded.reference_cluster.groups import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIG,
    OFFSETS_TOPIC_MAX_RF,
    OFFSETS_TOPIC_PARTITIONS,
    ConsumerGroups,
    GroupError,
    offsets_partition,
)
from app.embedded.reference_cluster.kafka_protocol import BrokerProtocol, KafkaListener
from app.embedded.reference_cluster.loop import EventLoop
from app.embedded.reference_cluster.metrics import (
    BrokerMetricsServer,
    MetricsSnapshot,
    OverrideError,
    check_overrides,
    take_snapshot,
)
from app.embedded.reference_cluster.replication import Retention
from app.embedded.reference_cluster.traffic import TrafficModel, update_host, update_request_load
from collectors.kafka import zkdata
from collectors.kafka.model import (
    BrokerEndpoint,
    LeaderAndIsr,
    LeaderRecoveryState,
    MigrationState,
    ReplicaAssignment,
    TopicPartition,
)
from collectors.kafka.placement import (
    AdminOperationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
)
from collectors.metrics.names import Dialect

log = logging.getLogger(__name__)

ISR_PROPAGATION_LINGER_MS = 5000.0
ISR_PROPAGATION_MAX_DELAY_MS = 60000.0
"""Kafka's ``ZkIsrManager``: notify once changes have been quiet 5 s, or at least every 60 s."""
REGISTRATION_RETRY_MS = 500.0
CONNECT_TIMEOUT_S = 15.0
GIVE_UP_ERRORS = {"FENCED_LEADER_EPOCH", "INVALID_UPDATE_VERSION", "UNKNOWN_TOPIC_OR_PARTITION"}


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class ClusterError(Exception):
    """A fault or request the cluster refuses; ``status`` is the HTTP status the control port answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class MetadataView:
    """The partitions as the brokers' metadata caches hold them: the controller's (the last active one's
    while none is)."""

    assignments: Mapping[TopicPartition, ReplicaAssignment]
    topic_ids: Mapping[str, str | None]
    states: Mapping[TopicPartition, LeaderAndIsr]

    def partition_count(self, topic: str) -> int:
        """Partitions 0..n-1 of ``topic`` (0 when unknown), in time proportional to n."""
        if topic not in self.topic_ids:
            return 0
        n = 0
        while TopicPartition(topic, n) in self.assignments:
            n += 1
        return n


@dataclass
class _IsrNotifications:
    pending: set[TopicPartition]
    last_change_ms: float = 0.0
    last_propagation_ms: float = 0.0


class ReferenceCluster:
    """Start with :meth:`start`, stop with :meth:`stop`; fault methods are safe from any thread."""

    def __init__(self, settings: ReferenceClusterSettings, zookeeper: str) -> None:
        self.settings = settings
        self.zookeeper = zookeeper
        self.loop = EventLoop("reference-cluster", self._record_error)
        self.errors: list[str] = []
        self.brokers: dict[int, SimBroker] = {
            i: SimBroker(
                i,
                settings.rack_of(i),
                BrokerEndpoint("PLAINTEXT", settings.broker_host(i), settings.listener_port(i)),
                settings.log_dirs_per_broker,
                settings.log_dir_size_bytes,
                settings.log_dir_base_used_ratio * settings.log_dir_size_bytes,
            )
            for i in range(settings.brokers)
        }
        self.controller: Controller | None = None
        self.migration: MigrationState | None = None
        """Set once :meth:`start_migration` has simulated a ZK→KRaft migration."""
        self.traffic = TrafficModel(settings.traffic)
        self.configs = DynamicConfigs(
            self.brokers,
            settings.min_insync_replicas,
            Retention(
                None if settings.log_retention_bytes < 0 else float(settings.log_retention_bytes),
                float(settings.log_segment_bytes),
            ),
        )
        self._admin_client: KazooClient | None = None
        self.admin: ZkAdmin | None = None
        self._last_tick_ms: float | None = None
        self._isr_notifications: dict[int, _IsrNotifications] = {
            b: _IsrNotifications(set()) for b in self.brokers
        }
        self._metrics_servers: dict[int, BrokerMetricsServer] = {}
        self._kafka_listeners: dict[int, KafkaListener] = {
            i: KafkaListener(settings.broker_host(i), settings.listener_port(i), BrokerProtocol(self, i))
            for i in self.brokers
        }
        self.consumer_groups = ConsumerGroups()
        self._last_controller: Controller | None = None
        self._cluster_id: str | None = None
        self._offsets_topic_requested = False
        self._preload: set[tuple[TopicPartition, int]] = set()

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Connect, start every broker, wait for a controller, create the configured topics.

        Raises ``TimeoutError`` with a message when ZooKeeper cannot be reached or the cluster does not
        come up in time; whatever had started is stopped again.
        """
        try:
            self._start(timeout)
        except KazooTimeoutError:
            self.stop()
            raise TimeoutError(
                f"cannot reach ZooKeeper at {self.zookeeper} within {min(timeout, CONNECT_TIMEOUT_S):.0f} s"
            ) from None
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        self._ensure_chroot(timeout)
        self._admin_client = KazooClient(hosts=self.zookeeper, timeout=10.0)
        self._admin_client.start(timeout=min(timeout, CONNECT_TIMEOUT_S))
        rng = (
            random.Random(self.settings.placement_seed) if self.settings.placement_seed is not None else None
        )
        self.admin = ZkAdmin(self._admin_client, self.settings.topic_znode_version, rng)
        self.loop.start()
        common_port = self._common_metrics_port() if self.settings.address_per_broker else 0
        for index, broker in enumerate(self.brokers.values()):
            ports = self.settings.metrics_ports
            port = ports[index] if index < len(ports) else common_port
            self._metrics_servers[broker.id] = BrokerMetricsServer(
                self.settings.broker_host(broker.id),
                port,
                functools.partial(self.metrics_snapshot, broker.id),
                self.dialect_of(broker.id),
            )
        self.loop.call(self._start_all)
        self.wait_until(
            lambda: (
                self.controller is not None
                and self.controller.active
                and set(self.controller.live_brokers) == set(self.brokers)
            ),
            timeout,
            "a controller that sees every broker",
        )
        for topic in self.settings.topics:
            self._create_startup_topic(topic.name, topic.partitions, topic.replication_factor, topic.config)
        self.wait_until(self._all_partitions_online, timeout, "every partition of the start-up topics online")
        if self.settings.consumer_groups:
            self.add_consumer_groups(self.settings.consumer_groups, timeout)

    def stop(self) -> None:
        """Stop every broker (their sessions close, so their ephemeral znodes go) and the loop."""
        if self.loop.running:
            try:
                self.loop.call(self._stop_all, timeout=30)
            except Exception:
                log.exception("error while stopping the reference cluster")
        self.loop.stop()
        for server in self._metrics_servers.values():
            server.close()
        for listener in self._kafka_listeners.values():
            listener.close()
        if self._admin_client is not None:
            self._admin_client.stop()
            self._admin_client.close()
            self._admin_client = None

    def __enter__(self) -> ReferenceCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _ensure_chroot(self, timeout: float) -> None:
        hosts, slash, chroot = self.zookeeper.partition("/")
        if not slash or not chroot:
            return
        client = KazooClient(hosts=hosts, timeout=10.0)
        client.start(timeout=min(timeout, CONNECT_TIMEOUT_S))
        try:
            client.ensure_path("/" + chroot)
        finally:
            client.stop()
            client.close()

    def _start_all(self) -> None:
        assert self._admin_client is not None
        self.configs.start(self._admin_client, self.loop.post)
        for broker in self.brokers.values():
            self._start_broker(broker)
        self._last_tick_ms = self.now_ms()
        self.loop.post(self._tick, delay_ms=self.settings.tick_ms)

    def _stop_all(self) -> None:
        if self.controller is not None and self.controller.broker_id not in self.brokers:
            self.controller.resign()  # a migration's KRaft controller: it stops with the cluster
        for broker in self.brokers.values():
            if broker.alive:
                self._stop_broker(broker, controlled=False)

    def _record_error(self, exc: BaseException) -> None:
        self.errors.append(f"{type(exc).__name__}: {exc}")

    def now_ms(self) -> float:
        return time.monotonic() * 1000.0

    def post(self, fn: Callable[[], None], delay_ms: float = 0.0) -> None:
        self.loop.post(fn, delay_ms)

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.loop.call(predicate):
                return
            time.sleep(0.05)
        raise TimeoutError(f"reference cluster: no {what} after {timeout:.0f} s")

    def _all_partitions_online(self) -> bool:
        """Every partition of the start-up topics has a leader (a topic that existed before keeps its
        own partition count)."""
        controller = self.controller
        if controller is None:
            return False
        topics = {t.name for t in self.settings.topics}
        if not topics <= set(controller.topic_ids):
            return False
        return all(
            tp in controller.states and controller.states[tp].leader >= 0
            for tp in controller.assignments
            if tp.topic in topics
        )

    def _create_startup_topic(self, name: str, partitions: int, rf: int, config: Mapping[str, str]) -> None:
        assert self.admin is not None
        if self._admin_client is not None and self._admin_client.exists(zkdata.topic_path(name)):
            log.info("topic %s exists already; kept as it is", name)
            return
        admin = self.admin

        def create() -> None:
            # On the loop, so that the controller's LeaderAndIsr (posted by its topic watch) comes after
            # the preload is known: the replicas start with the data written "before" the simulation.
            assignment = admin.create_topic(name, partitions, rf, config)
            if self.settings.traffic.initial_log_bytes:
                self._preload.update(
                    (TopicPartition(name, p), b) for p, replicas in assignment.items() for b in replicas
                )

        self.loop.call(create)

    # --- broker lifecycle (loop thread) ----------------------------------------------------------

    def _start_broker(self, broker: SimBroker) -> None:
        client = KazooClient(
            hosts=self.zookeeper, timeout=self.settings.zookeeper_session_timeout_ms / 1000.0
        )

        def on_state(state: str) -> None:
            # Returns None on purpose: kazoo removes a listener that returns True.
            self.loop.post(lambda: self._on_session_state(broker, client, state))

        client.add_listener(on_state)
        client.start(timeout=30)
        broker.client = client
        broker.alive = True
        broker.session_lost = False
        broker.next_isr_check_ms = self.now_ms() + self.settings.replica_lag_time_max_ms / 2
        for path in zkdata.PERSISTENT_PATHS:
            client.ensure_path(path)
        self._ensure_cluster_id(client)
        self._metrics_servers[broker.id].open()
        port = self._kafka_listeners[broker.id].open()
        if port != broker.endpoint.port:
            broker.endpoint = replace(broker.endpoint, port=port)
        self._register(broker, client)

    @staticmethod
    def _ensure_cluster_id(client: KazooClient) -> None:
        if client.exists(zkdata.CLUSTER_ID_PATH):
            return
        with contextlib.suppress(NodeExistsError):
            client.create(
                zkdata.CLUSTER_ID_PATH, zkdata.encode_cluster_id(zkdata.new_kafka_uuid()), makepath=True
            )

    def _register(self, broker: SimBroker, client: KazooClient) -> None:
        """``CheckedEphemeral.create``: create the ephemeral node empty, set its data (version 1)."""
        current = broker.client
        if current is None or current is not client:
            return  # a stale retry: the broker stopped or has a new session since
        registration = broker.registration(self.settings.broker_registration_version, zkdata.now_ms())
        txn = current.transaction()
        txn.create(zkdata.broker_path(broker.id), b"", ephemeral=True)
        txn.set_data(zkdata.broker_path(broker.id), zkdata.encode_broker_registration(registration), 0)
        created, stat = txn.commit()
        if isinstance(created, NodeExistsError) or isinstance(stat, Exception):
            log.warning(
                "broker %d: /brokers/ids/%d still held by an old session; retrying", broker.id, broker.id
            )
            self.loop.post(lambda: self._register(broker, client), delay_ms=REGISTRATION_RETRY_MS)
            return
        broker.broker_epoch = stat.czxid
        broker.registered = True
        log.info("broker %d registered (epoch %d)", broker.id, stat.czxid)
        if not broker.controller_watch_set:
            broker.controller_watch_set = True
            DataWatch(client, zkdata.CONTROLLER_PATH, self._controller_watch(broker, client))
        self._maybe_elect(broker)

    def _controller_watch(
        self, broker: SimBroker, client: KazooClient
    ) -> Callable[[bytes | None, Any], bool]:
        def on_change(_data: bytes | None, _stat: Any) -> bool:
            if broker.client is not client:
                return False
            self.loop.post(lambda: self._maybe_elect(broker))
            return True

        return on_change

    def _maybe_elect(self, broker: SimBroker) -> None:
        """``KafkaController.elect``: resign if the znode names someone else; race for it when it is gone."""
        client = broker.client
        if client is None or not broker.registered:
            return
        try:
            data, _ = client.get(zkdata.CONTROLLER_PATH)
            active = zkdata.decode_controller(zkdata.CONTROLLER_PATH, data)
        except NoNodeError:
            active = -1
        except zkdata.ZnodeFormatError as exc:
            log.error("unreadable /controller: %s", exc)
            return
        current = self.controller
        if current is not None and current.broker_id == broker.id and active != broker.id:
            current.resign()
        if active != -1:
            return
        try:
            data, stat = client.get(zkdata.CONTROLLER_EPOCH_PATH)
            epoch, epoch_version = (
                zkdata.decode_controller_epoch(zkdata.CONTROLLER_EPOCH_PATH, data),
                stat.version,
            )
        except NoNodeError:
            try:
                client.create(zkdata.CONTROLLER_EPOCH_PATH, zkdata.encode_controller_epoch(0))
                epoch, epoch_version = 0, 0
            except NodeExistsError:
                self.loop.post(lambda: self._maybe_elect(broker))
                return
        txn = client.transaction()
        txn.create(
            zkdata.CONTROLLER_PATH,
            zkdata.encode_controller(broker.id, self.settings.controller_znode_version),
            ephemeral=True,
        )
        txn.set_data(zkdata.CONTROLLER_EPOCH_PATH, zkdata.encode_controller_epoch(epoch + 1), epoch_version)
        results = txn.commit()
        if any(isinstance(r, Exception) for r in results):
            return  # another broker won the race
        controller = Controller(self, broker.id, client, epoch + 1, results[1].version)
        self.controller = controller
        controller.guarded(controller.failover)()

    def controller_resigned(self, controller: Controller) -> None:
        if self.controller is controller:
            self._last_controller = controller
            self.controller = None

    def _on_session_state(self, broker: SimBroker, client: KazooClient, state: str) -> None:
        """A broker whose session expired loses its registration (and controllership) and re-registers
        with a new session, hence a new broker epoch, as Kafka's ``afterInitializingSession`` does."""
        if broker.client is not client:
            return
        if state == KazooState.LOST:
            broker.session_lost = True
            broker.registered = False
            if self.controller is not None and self.controller.broker_id == broker.id:
                self.controller.resign()
        elif state == KazooState.CONNECTED and broker.session_lost:
            broker.session_lost = False
            self._register(broker, client)

    def _stop_broker(self, broker: SimBroker, controlled: bool) -> None:
        if controlled and self.controller is not None and self.controller.active:
            self.controller.controlled_shutdown(broker.id)
        client = broker.client
        broker.client = None
        broker.controller_watch_set = False
        if self.controller is not None and self.controller.broker_id == broker.id:
            self.controller.resign()
        self._metrics_servers[broker.id].close()
        self._kafka_listeners[broker.id].close()
        broker.forget_session_state()
        self._isr_notifications[broker.id] = _IsrNotifications(set())
        if client is not None:
            client.stop()
            client.close()
        log.info("broker %d stopped", broker.id)

    # --- the controller's channel to the brokers -------------------------------------------------

    def send_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        updates: Mapping[TopicPartition, tuple[LeaderAndIsr, ReplicaAssignment]],
    ) -> None:
        now = self.now_ms()
        for broker_id in broker_ids:
            broker = self.brokers.get(broker_id)
            if broker is None or not broker.alive:
                continue
            for tp, (state, assignment) in updates.items():
                if not broker.is_replica_online(tp):
                    continue  # KAFKA_STORAGE_ERROR
                self.configs.ensure_topic(tp.topic)
                leader = self.brokers.get(state.leader)
                leader_log = leader.logs.get(tp) if leader is not None and leader.alive else None
                if (tp, broker_id) in self._preload and tp not in broker.logs:
                    self._preload.discard((tp, broker_id))
                    broker.create_log(
                        tp, self.settings.traffic.initial_log_bytes / self.settings.traffic.message_bytes
                    )
                broker.apply_leader_and_isr(
                    tp,
                    state,
                    assignment,
                    leader_log.leo if leader_log is not None and leader is not broker else None,
                    leader_log.log_start if leader_log is not None else 0.0,
                    now,
                )
            # the logs created here are on the broker's disks from now on, not from its next tick (a
            # scrape in between would serve their sizes on a dir that does not count them)
            broker.measure_log_dirs(self.settings.traffic.message_bytes)

    def send_stop_replica(self, broker_id: int, tp: TopicPartition, delete: bool) -> None:
        broker = self.brokers.get(broker_id)
        if broker is not None and broker.alive:
            broker.stop_replica(tp, delete)

    def offline_replicas_of(self, broker_id: int) -> list[TopicPartition]:
        broker = self.brokers.get(broker_id)
        return broker.offline_replicas() if broker is not None and broker.alive else []

    def record_unclean_election(self, controller_id: int) -> None:
        self.brokers[controller_id].counters.unclean_leader_elections += 1

    # --- the data plane (loop thread) -------------------------------------------------------------

    def _tick(self) -> None:
        now = self.now_ms()
        dt_s = min(1.0, (now - (self._last_tick_ms or now)) / 1000.0)
        self._last_tick_ms = now
        try:
            changes, moved = replication.advance(
                self.brokers,
                self.settings,
                self.traffic,
                self.configs.throttles,
                self.configs.min_insync_replicas,
                now,
                dt_s,
                self.configs.retention,
            )
            for broker in self.brokers.values():
                if broker.alive:
                    update_host(broker, moved[broker.id], dt_s, self.settings.traffic)
                    update_request_load(broker, moved[broker.id], dt_s, self.settings.traffic)
                    self._advance_disks(broker, dt_s)
            self._apply_isr_changes(changes, now)
            self._propagate_isr_notifications(now)
            self._commit_group_offsets(now)
        except KazooException as exc:
            log.warning("tick: ZooKeeper error %r", exc)
        finally:
            self.loop.post(self._tick, delay_ms=self.settings.tick_ms)

    def _advance_disks(self, broker: SimBroker, dt_s: float) -> None:
        """Grow the other files on the broker's log dirs (measured by ``update_host`` this tick) and fail
        a dir that is full, as Kafka fails a log dir on "No space left on device"."""
        for log_dir, disk in enumerate(broker.disks):
            if log_dir in broker.failed_log_dirs:
                continue
            if disk.growth_bytes_per_s:
                disk.base_bytes = max(0.0, disk.base_bytes + disk.growth_bytes_per_s * dt_s)
            if disk.full:
                log.warning("broker %d: log dir %d is full", broker.id, log_dir)
                self._fail_log_dir(broker, log_dir)

    def _apply_isr_changes(self, changes: list[replication.IsrChange], now: float) -> None:
        for change in changes:
            leader = self.brokers[change.leader]
            view = leader.partitions.get(change.tp)
            if view is None or view.leader != leader.id or view.isr_change_in_flight:
                continue
            proposed = replace(
                view.state, isr=change.new_isr, leader_recovery_state=LeaderRecoveryState.RECOVERED
            )
            if self.settings.alter_partition_enabled:
                self._alter_partition(leader, change, proposed)
            else:
                self._write_isr_to_zookeeper(leader, change, proposed, now)

    def _alter_partition(
        self, leader: SimBroker, change: replication.IsrChange, proposed: LeaderAndIsr
    ) -> None:
        controller = self.controller
        if controller is None or not controller.active:
            return  # NOT_CONTROLLER: resent at the next tick
        result = controller.alter_partition(leader.id, change.tp, proposed)
        view = leader.partitions.get(change.tp)
        if view is None:
            return
        if result.state is not None:
            self._isr_committed(leader, change, result.state)
        elif result.error in GIVE_UP_ERRORS:
            view.isr_change_in_flight = True  # until the controller's next LeaderAndIsr

    def _write_isr_to_zookeeper(
        self, leader: SimBroker, change: replication.IsrChange, proposed: LeaderAndIsr, now: float
    ) -> None:
        """Before IBP 2.7 the leader writes the state znode itself, stamped with the controller epoch of
        the LeaderAndIsr it last received, and leaves an ISR change notification for the controller."""
        assert leader.client is not None
        path = zkdata.partition_state_path(change.tp)
        try:
            stat = leader.client.set(path, zkdata.encode_partition_state(proposed), proposed.zk_version)
        except BadVersionError:
            data, stat = leader.client.get(path)
            try:
                current = zkdata.decode_partition_state(path, data, stat.version)
            except zkdata.ZnodeFormatError:  # corrupted (a fault): as a conflict, the controller decides
                current = None
            if current is None or replace(current, zk_version=-1) != replace(proposed, zk_version=-1):
                view = leader.partitions.get(change.tp)
                if view is not None:
                    view.isr_change_in_flight = True  # "Cached zkVersion not equal to that in zookeeper"
                return
        self._isr_committed(leader, change, replace(proposed, zk_version=stat.version))
        notifications = self._isr_notifications[leader.id]
        notifications.pending.add(change.tp)
        notifications.last_change_ms = now

    def _isr_committed(self, leader: SimBroker, change: replication.IsrChange, state: LeaderAndIsr) -> None:
        view = leader.partitions.get(change.tp)
        if view is None:
            return
        view.state = state
        if change.shrink:
            leader.counters.isr_shrinks += 1
            log.info("broker %d shrinks ISR of %s to %s", leader.id, change.tp, list(state.isr))
        else:
            leader.counters.isr_expands += 1
            log.info("broker %d expands ISR of %s to %s", leader.id, change.tp, list(state.isr))

    def _propagate_isr_notifications(self, now: float) -> None:
        for broker_id, notifications in self._isr_notifications.items():
            broker = self.brokers[broker_id]
            if not notifications.pending or broker.client is None:
                continue
            quiet = notifications.last_change_ms + ISR_PROPAGATION_LINGER_MS < now
            overdue = notifications.last_propagation_ms + ISR_PROPAGATION_MAX_DELAY_MS < now
            if quiet or overdue:
                broker.client.create(
                    f"{zkdata.ISR_CHANGE_NOTIFICATION_PATH}/{zkdata.ISR_CHANGE_PREFIX}",
                    zkdata.encode_partition_list(sorted(notifications.pending)),
                    sequence=True,
                )
                notifications.pending.clear()
                notifications.last_propagation_ms = now

    # --- Kafka's protocol and the consumer groups (loop thread unless said) -------------------------

    def metadata_view(self) -> MetadataView:
        controller = self.controller or self._last_controller
        if controller is None:
            return MetadataView({}, {}, {})
        return MetadataView(controller.assignments, controller.topic_ids, controller.states)

    def partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """The partition's leader and ISR as ZooKeeper's state znode has them: the leader's own view (it
        writes its ISR changes) when it leads at the controller's epoch or later, else the controller's."""
        state = self.metadata_view().states.get(tp)
        if state is None:
            return None
        leader = self.brokers.get(state.leader)
        if leader is not None and leader.leads(tp):
            own = leader.partitions[tp].state
            if own.leader_epoch >= state.leader_epoch:
                return own
        return state

    def replica_online(self, broker_id: int, tp: TopicPartition) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.alive and broker.is_replica_online(tp)

    @staticmethod
    def log_offsets(leader: SimBroker, tp: TopicPartition) -> tuple[int, int]:
        """(log-start offset, high watermark) of a partition at its leader: what ListOffsets answers for
        the earliest and the latest offset (a consumer reads up to the high watermark)."""
        log = leader.logs[tp]
        view = leader.partitions[tp]
        end = int(log.leo + 1e-9)
        for replica in view.isr:
            follower = view.followers.get(replica)
            if replica != leader.id and follower is not None:
                end = min(end, follower.leo)
        start = int(log.log_start + 1e-9)
        return start, max(start, end)

    def _leader_of(self, tp: TopicPartition) -> SimBroker | None:
        state = self.partition_state(tp)
        leader = self.brokers.get(state.leader) if state is not None else None
        return leader if leader is not None and leader.leads(tp) else None

    def high_watermark(self, tp: TopicPartition) -> int | None:
        leader = self._leader_of(tp)
        return self.log_offsets(leader, tp)[1] if leader is not None else None

    def group_coordinator(self, group: str) -> SimBroker | None:
        """The leader of the group's ``__consumer_offsets`` partition; None while there is none (the topic
        is created on the first request, as Kafka creates it)."""
        if OFFSETS_TOPIC not in self.metadata_view().topic_ids:
            self.ensure_offsets_topic()
            return None
        return self._leader_of(TopicPartition(OFFSETS_TOPIC, offsets_partition(group)))

    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` as a broker does on the first FindCoordinator: 50 partitions,
        RF min(3, brokers), compacted, through the admin path (so ZooKeeper shows it like any topic)."""
        if self._offsets_topic_requested or self.admin is None or self._admin_client is None:
            return
        self._offsets_topic_requested = True
        if self._admin_client.exists(zkdata.topic_path(OFFSETS_TOPIC)):
            return
        brokers = len(self.admin.registered_brokers())
        with contextlib.suppress(TopicExistsError):
            self.admin.create_topic(
                OFFSETS_TOPIC,
                OFFSETS_TOPIC_PARTITIONS,
                max(1, min(OFFSETS_TOPIC_MAX_RF, brokers)),
                OFFSETS_TOPIC_CONFIG,
            )

    def cluster_id(self) -> str | None:
        if self._cluster_id is None and self._admin_client is not None:
            with contextlib.suppress(NoNodeError, zkdata.ZnodeFormatError):
                data, _ = self._admin_client.get(zkdata.CLUSTER_ID_PATH)
                self._cluster_id = zkdata.decode_cluster_id(zkdata.CLUSTER_ID_PATH, data)
        return self._cluster_id

    def _commit_group_offsets(self, now: float) -> None:
        if not self.consumer_groups.groups:
            return
        view = self.metadata_view()
        message_bytes = self.settings.traffic.message_bytes
        leaders: dict[TopicPartition, SimBroker | None] = {}  # this tick's, each looked up once

        def leader_of(tp: TopicPartition) -> SimBroker | None:
            try:
                return leaders[tp]
            except KeyError:
                leader = leaders[tp] = self._leader_of(tp)
                return leader

        def log_end(tp: TopicPartition) -> int | None:
            leader = leader_of(tp)
            return self.log_offsets(leader, tp)[1] if leader is not None else None

        def produce_rate(tp: TopicPartition) -> float:
            leader = leader_of(tp)
            return (
                0.0 if leader is None else self.traffic.produce_bytes_per_sec(tp, leader.id) / message_bytes
            )

        self.consumer_groups.commit_due(now, log_end, produce_rate, view.partition_count)

    def _topic_partitions(self) -> dict[str, int]:
        view = self.metadata_view()
        return {t: view.partition_count(t) for t in view.topic_ids}

    def add_consumer_group(self, spec: ConsumerGroupSpec, timeout: float = 60.0) -> None:
        """Start a simulated group (any thread); its coordinator's topic is created first if needed, and
        the call returns once the group has a coordinator and has committed."""
        self.add_consumer_groups([spec], timeout)

    def add_consumer_groups(self, specs: Sequence[ConsumerGroupSpec], timeout: float = 60.0) -> None:
        """Start several simulated groups at once (any thread): all are added in one call on the loop (none
        when one is refused), then the call waits once until every one has a coordinator and has
        committed (thousands of groups start in about the time of one)."""
        names = [spec.name for spec in specs]

        def add() -> None:
            groups, partitions, now = self.consumer_groups, self._topic_partitions(), self.now_ms()
            try:
                groups.check_new(specs, partitions)
                for spec in specs:
                    groups.add(spec, partitions, now)
            except GroupError as exc:
                raise ClusterError(exc.status, exc.message) from None
            self.ensure_offsets_topic()

        def ready() -> bool:
            groups = self.consumer_groups.groups
            return all(
                bool(groups[name].committed) and self.group_coordinator(name) is not None for name in names
            )

        self.loop.call(add)
        what = f"consumer group {names[0]}" if len(names) == 1 else f"{len(names)} consumer groups"
        self.wait_until(ready, timeout, f"coordinator and first commit of {what}")

    def consumer_group_action(self, name: str, action: str, body: Mapping[str, Any]) -> None:
        """``stop``, ``start`` (``{"rate_factor"}`` optional), ``stall``, ``slow`` (``{"rate_factor"}``,
        default 0.5) or ``rewind`` (``{"records": N}``) a simulated group (any thread)."""

        def run() -> None:
            groups, now = self.consumer_groups, self.now_ms()
            try:
                if action == "stop":
                    groups.stop(name)
                elif action == "start":
                    groups.start(name, self._topic_partitions(), now, _rate_factor(body, None))
                elif action == "stall":
                    groups.stall(name, now, self.high_watermark)
                elif action == "slow":
                    groups.slow(name, _rate_factor(body, 0.5) or 0.0)
                elif action == "rewind":
                    records = body.get("records")
                    if isinstance(records, bool) or not isinstance(records, int) or records < 1:
                        raise GroupError(422, 'rewind takes {"records": N} with N a positive integer')
                    groups.rewind(name, records)
                else:
                    raise GroupError(404, f"no consumer group action {action!r}")
            except GroupError as exc:
                raise ClusterError(exc.status, exc.message) from None

        self.loop.call(run)

    def kafka_bootstrap(self) -> str:
        """``host:port`` of every broker's Kafka listener, comma-separated (a bootstrap server list)."""
        return ",".join(f"{b.endpoint.host}:{b.endpoint.port}" for b in self.brokers.values())

    # --- observation -------------------------------------------------------------------------------

    def metrics_snapshot(self, broker_id: int) -> MetricsSnapshot | None:
        """Taken on the loop, so a scrape sees one consistent moment (None when the broker is down)."""
        return self.loop.call(lambda: take_snapshot(self, self.brokers[broker_id]), timeout=10)

    def describe(self) -> dict[str, Any]:
        return self.loop.call(self._describe)

    def _describe(self) -> dict[str, Any]:
        controller = self.controller
        topics: dict[str, list[dict[str, Any]]] = {}
        if controller is not None:
            for tp in sorted(controller.assignments):
                state = controller.states.get(tp)
                assignment = controller.assignments[tp]
                topics.setdefault(tp.topic, []).append(
                    {
                        "partition": tp.partition,
                        "replicas": list(assignment.replicas),
                        "adding_replicas": list(assignment.adding_replicas),
                        "removing_replicas": list(assignment.removing_replicas),
                        "leader": state.leader if state else None,
                        "leader_epoch": state.leader_epoch if state else None,
                        "isr": list(state.isr) if state else [],
                    }
                )
        migration = self.migration
        return {
            "zookeeper": self.zookeeper,
            "migration": None
            if migration is None
            else {
                "kraft_controller_id": migration.kraft_controller_id,
                "kraft_controller_epoch": migration.kraft_controller_epoch,
                "kraft_metadata_offset": migration.kraft_metadata_offset,
                "kraft_metadata_epoch": migration.kraft_metadata_epoch,
            },
            "controller": {"broker_id": controller.broker_id, "epoch": controller.epoch}
            if controller
            else None,
            "brokers": [self._describe_broker(b) for b in self.brokers.values()],
            "topics": [{"name": name, "partitions": parts} for name, parts in sorted(topics.items())],
            "traffic": self.traffic.describe(),
            "consumer_groups": [g.describe() for _, g in sorted(self.consumer_groups.groups.items())],
        }

    def _describe_broker(self, broker: SimBroker) -> dict[str, Any]:
        return {
            "id": broker.id,
            "state": "running" if broker.alive else "stopped",
            "rack": broker.rack,
            "registered": broker.registered,
            "broker_epoch": broker.broker_epoch,
            "stalled": broker.stalled,
            "slow": broker.slow,
            "failed_log_dirs": sorted(broker.failed_log_dirs),
            "log_dirs": [
                {
                    "log_dir": n,
                    "mountpoint": self.settings.mountpoint(n),
                    "size_bytes": disk.size_bytes,
                    "used_bytes": disk.used_bytes,
                    "used_ratio": disk.used_bytes / disk.size_bytes,
                    "growth_bytes_per_s": disk.growth_bytes_per_s,
                    "failed": n in broker.failed_log_dirs,
                }
                for n, disk in enumerate(broker.disks)
            ],
            "metric_overrides": dict(sorted(broker.metric_overrides.items())),
            "metrics_url": self.metrics_url(broker.id),
            "kafka_listener": f"{broker.endpoint.host}:{broker.endpoint.port}",
            "partitions": len(broker.partitions),
            "leaders": len(broker.led_partitions()),
        }

    def metrics_url(self, broker_id: int) -> str | None:
        port = self._metrics_servers[broker_id].port if broker_id in self._metrics_servers else None
        return f"http://{self.settings.broker_host(broker_id)}:{port}/metrics" if port else None

    @property
    def metrics_port(self) -> int | None:
        """The brokers' common metrics port with ``address_per_broker`` (None otherwise)."""
        ports = {s.port for s in self._metrics_servers.values()}
        return ports.pop() if self.settings.address_per_broker and len(ports) == 1 else None

    def _common_metrics_port(self) -> int:
        """The configured port, or one that is free on every broker's address."""
        if self.settings.metrics_port:
            return self.settings.metrics_port
        hosts = [self.settings.broker_host(b) for b in self.brokers]
        for _ in range(20):
            with socket.socket() as probe:
                probe.bind((hosts[0], 0))
                port = int(probe.getsockname()[1])
            if all(_port_free(host, port) for host in hosts[1:]):
                return port
        raise ClusterError(409, "no metrics port is free on every broker address")

    # --- faults (any thread) -----------------------------------------------------------------------

    def _broker(self, broker_id: int) -> SimBroker:
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise ClusterError(404, f"unknown broker {broker_id}: brokers are 0..{len(self.brokers) - 1}")
        return broker

    def _running(self, broker_id: int) -> SimBroker:
        broker = self._broker(broker_id)
        if not broker.alive:
            raise ClusterError(409, f"broker {broker_id} is stopped")
        return broker

    def stop_broker(self, broker_id: int, controlled: bool = False) -> None:
        """Stop a broker: with ``controlled`` it first hands its leaderships over (controlled shutdown);
        otherwise it crashes, its session closing at once."""

        def run() -> None:
            self._stop_broker(self._running(broker_id), controlled)

        self.loop.call(run)

    def start_broker(self, broker_id: int) -> None:
        def run() -> None:
            broker = self._broker(broker_id)
            if broker.alive:
                raise ClusterError(409, f"broker {broker_id} is already running")
            self._start_broker(broker)

        self.loop.call(run)

    def stop_controller(self) -> int:
        def run() -> int:
            if self.controller is None:
                raise ClusterError(409, "there is no active controller")
            if self.controller.broker_id not in self.brokers:
                raise ClusterError(409, "the controller is the KRaft controller of a migration, not a broker")
            broker_id = self.controller.broker_id
            self._stop_broker(self.brokers[broker_id], controlled=False)
            return broker_id

        return self.loop.call(run)

    def start_migration(
        self, kraft_controller_id: int = 3000, kraft_controller_epoch: int = 1
    ) -> MigrationState:
        """Simulate a ZK→KRaft migration (KIP-866) as Kafka 3.6's ``KRaftMigrationDriver`` leaves ZooKeeper.

        In order: the KRaft controller creates ``/migration`` (``ZkMigrationLeadershipState.EMPTY``); the
        brokers re-register in migration mode (restarted: a new session, so a new broker epoch); the KRaft
        controller claims ``/controller`` (``KafkaZkClient.tryRegisterKRaftControllerAsActiveController``:
        one multi that bumps ``/controller_epoch``, deletes ``/controller`` and creates it *persistent* with
        its node id and ``kraftControllerEpoch``); the ZK controller resigns; having copied the metadata,
        the KRaft controller records the last offset and epoch it wrote in ``/migration``. From then on the
        simulated KRaft controller does the controller's work (elections, ISR, reassignments) with the
        ZooKeeper writes of the hybrid phase, as the real one does until the migration is finalized.
        """
        if kraft_controller_id in self.brokers or kraft_controller_id < 0:
            raise ClusterError(422, f"the KRaft controller's id {kraft_controller_id} must be no broker's")
        if kraft_controller_epoch < 0:
            raise ClusterError(422, "the KRaft controller epoch must be >= 0")

        def run() -> MigrationState:
            client = self._admin_client
            if client is None:
                raise ClusterError(409, "the cluster is not running")
            if self.migration is not None or client.exists(zkdata.MIGRATION_PATH):
                raise ClusterError(409, "a migration has already started (/migration exists)")
            empty = MigrationState(-1, -1, -1, -1)
            client.create(zkdata.MIGRATION_PATH, zkdata.encode_migration(empty))
            for broker in self.brokers.values():
                if broker.alive and broker.registered:
                    self._reregister(broker)
            data, stat = client.get(zkdata.CONTROLLER_EPOCH_PATH)
            epoch = zkdata.decode_controller_epoch(zkdata.CONTROLLER_EPOCH_PATH, data) + 1
            txn = client.transaction()
            txn.set_data(zkdata.CONTROLLER_EPOCH_PATH, zkdata.encode_controller_epoch(epoch), stat.version)
            controller_stat = client.exists(zkdata.CONTROLLER_PATH)
            if controller_stat is not None:
                txn.delete(zkdata.CONTROLLER_PATH, controller_stat.version)
            txn.create(
                zkdata.CONTROLLER_PATH,
                zkdata.encode_controller(
                    kraft_controller_id, version=2, kraft_controller_epoch=kraft_controller_epoch
                ),
            )
            results = txn.commit()
            if any(isinstance(r, Exception) for r in results):
                raise ClusterError(409, f"the KRaft controller could not claim /controller: {results!r}")
            if self.controller is not None:
                self.controller.resign()
            controller = Controller(self, kraft_controller_id, client, epoch, results[0].version)
            self.controller = controller
            controller.guarded(controller.failover)()
            records = len(controller.assignments) + len(controller.topic_ids) + len(self.brokers)
            migrated = MigrationState(
                kraft_controller_id, kraft_controller_epoch, records, kraft_controller_epoch
            )
            client.set(zkdata.MIGRATION_PATH, zkdata.encode_migration(migrated), 0)
            self.migration = migrated
            log.info("ZK→KRaft migration: KRaft controller %d holds /controller", kraft_controller_id)
            return migrated

        result: MigrationState = self.loop.call(run)
        return result

    def _reregister(self, broker: SimBroker) -> None:
        """A broker restarted in migration mode: its registration is created anew (a new czxid, so a new
        broker epoch) in one multi, so that no reader sees the broker gone."""
        client = broker.client
        assert client is not None
        registration = broker.registration(self.settings.broker_registration_version, zkdata.now_ms())
        path = zkdata.broker_path(broker.id)
        txn = client.transaction()
        txn.delete(path)
        txn.create(path, zkdata.encode_broker_registration(registration), ephemeral=True)
        results = txn.commit()
        if any(isinstance(r, Exception) for r in results):
            raise ClusterError(409, f"broker {broker.id} could not re-register: {results!r}")
        stat = client.exists(path)
        if stat is not None:
            broker.broker_epoch = stat.czxid

    def stall_follower(self, broker_id: int) -> None:
        """The broker's replica fetchers stop: its replicas fall out of the ISRs after the lag time."""
        self.loop.call(lambda: setattr(self._running(broker_id), "stalled", True))

    def slow_follower(self, broker_id: int) -> None:
        """The broker's fetchers keep going but slower than the leaders take writes: never caught up."""
        self.loop.call(lambda: setattr(self._running(broker_id), "slow", True))

    def resume_follower(self, broker_id: int) -> None:
        def run() -> None:
            broker = self._running(broker_id)
            if not broker.stalled and not broker.slow:
                raise ClusterError(409, f"broker {broker_id} is neither stalled nor slow")
            broker.stalled = broker.slow = False

        self.loop.call(run)

    def fail_log_dir(self, broker_id: int, log_dir: int) -> list[TopicPartition]:
        """A log directory fails: its replicas go offline and the broker tells the controller through
        ``/log_dir_event_notification``. Returns the replicas lost."""

        def run() -> list[TopicPartition]:
            broker = self._healthy_log_dir(broker_id, log_dir)
            return self._fail_log_dir(broker, log_dir)

        return self.loop.call(run)

    def _healthy_log_dir(self, broker_id: int, log_dir: int) -> SimBroker:
        broker = self._running(broker_id)
        if not 0 <= log_dir < broker.log_dirs:
            raise ClusterError(404, f"broker {broker_id} has log dirs 0..{broker.log_dirs - 1}")
        if log_dir in broker.failed_log_dirs:
            raise ClusterError(409, f"log dir {log_dir} of broker {broker_id} has failed already")
        return broker

    def _fail_log_dir(self, broker: SimBroker, log_dir: int) -> list[TopicPartition]:
        broker.failed_log_dirs.add(log_dir)
        lost = [tp for tp, lg in broker.logs.items() if lg.log_dir == log_dir]
        for tp in lost:
            broker.partitions.pop(tp, None)
        assert broker.client is not None
        broker.client.create(
            f"{zkdata.LOG_DIR_EVENT_NOTIFICATION_PATH}/{zkdata.LOG_DIR_EVENT_PREFIX}",
            zkdata.encode_log_dir_event(broker.id),
            sequence=True,
        )
        return lost

    def fill_log_dir(
        self, broker_id: int, log_dir: int, used_ratio: float | None, bytes_per_s: float | None
    ) -> None:
        """Set how full a log dir's filesystem is now (``used_ratio``: other files take what the logs
        leave of it) and how fast the other files grow (``bytes_per_s``, from the next tick). A dir that
        is full fails at once, as it does when it fills up later."""

        def run() -> None:
            broker = self._healthy_log_dir(broker_id, log_dir)
            disk = broker.disks[log_dir]
            if used_ratio is not None:
                broker.measure_log_dirs(self.settings.traffic.message_bytes)
                base = used_ratio * disk.size_bytes - disk.log_bytes
                if base < 0:
                    raise ClusterError(
                        409,
                        f"the logs in log dir {log_dir} of broker {broker_id} take "
                        f"{disk.log_bytes / disk.size_bytes:.6f} of it already: used_ratio {used_ratio} "
                        "cannot be set below that",
                    )
                disk.base_bytes = base
            if bytes_per_s is not None:
                disk.growth_bytes_per_s = bytes_per_s
            if disk.full:
                log.warning("broker %d: log dir %d is full", broker.id, log_dir)
                self._fail_log_dir(broker, log_dir)

        self.loop.call(run)

    def override_metrics(self, broker_id: int, values: Mapping[str, float], reset: bool) -> None:
        """Serve ``values`` for those series names (as the broker's dialect names them) instead of the
        simulation's, on every label set, until a ``reset``; a reset clears the earlier ones first. Every
        name must be a gauge the broker serves now (ClusterError 422 naming the others)."""

        def run() -> None:
            broker = self._running(broker_id)
            snapshot = take_snapshot(self, broker)
            assert snapshot is not None
            try:
                check_overrides(snapshot, self.dialect_of(broker_id), values)
            except OverrideError as exc:
                raise ClusterError(422, str(exc)) from None
            if reset:
                broker.metric_overrides.clear()
            broker.metric_overrides.update(values)

        self.loop.call(run)

    def dialect_of(self, broker_id: int) -> Dialect:
        return self.settings.broker_metrics_dialects.get(broker_id, self.settings.metrics_dialect)

    CORRUPT_STATE = b'{"version":1,"leader":"corrupted by the reference cluster","isr":'
    """What :meth:`corrupt_partition_state` writes: not JSON (a hand edit gone wrong), so no decoder of
    Kafka's or ours can read it."""

    def corrupt_partition_state(self, tp: TopicPartition) -> None:
        """Overwrite a partition's state znode with data no one can parse (a fault for the "state unknown"
        handling: an unreadable znode must not read as an offline partition). The brokers keep serving the
        partition as before; the controller's next write of that state (a leader or ISR change) repairs it."""
        if self._admin_client is None:
            raise ClusterError(409, "the cluster is not started")
        path = zkdata.partition_state_path(tp)
        try:
            self._admin_client.set(path, self.CORRUPT_STATE)
        except NoNodeError:
            raise ClusterError(404, f"partition {tp} has no state znode ({path})") from None

    def create_topic(self, spec: TopicSpec) -> dict[int, list[int]]:
        """Create a topic as ``kafka-topics --create`` would; returns the replica assignment."""
        if self.admin is None:
            raise ClusterError(409, "the cluster is not started")
        try:
            return self.admin.create_topic(spec.name, spec.partitions, spec.replication_factor, spec.config)
        except TopicExistsError as exc:
            raise ClusterError(409, str(exc)) from None
        except (InvalidReplicationFactorError, InvalidPartitionsError, AdminOperationError) as exc:
            raise ClusterError(422, str(exc)) from None

    def skew(self, body: Mapping[str, Any]) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            topics: dict[str, int] = {}
            if self.controller is not None:
                for tp in self.controller.assignments:
                    topics[tp.topic] = max(topics.get(tp.topic, 0), tp.partition + 1)
            self.traffic.apply_skew(body, set(self.brokers), topics)
            return self.traffic.describe()

        return self.loop.call(run)


def _rate_factor(body: Mapping[str, Any], default: float | None) -> float | None:
    value = body.get("rate_factor", default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1000:
        raise GroupError(422, f"rate_factor must be a number in [0, 1000], got {value!r}")
    return float(value)
