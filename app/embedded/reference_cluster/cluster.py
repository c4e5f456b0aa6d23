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

from app.embedded.reference_cluster import faults, group_coordinator, replication
from app.embedded.reference_cluster.admin import ZkAdmin
from app.embedded.reference_cluster.broker import SimBroker
from app.embedded.reference_cluster.config import ConsumerGroupSpec, ReferenceClusterSettings, TopicSpec
from app.embedded.reference_cluster.controller import Controller
from app.embedded.reference_cluster.dynamic_config import DynamicConfigs
from app.embedded.reference_cluster.errors import ClusterError
from app.embedded.reference_cluster.groups import ConsumerGroups
from app.embedded.reference_cluster.kafka_protocol import BrokerProtocol, KafkaListener
from app.embedded.reference_cluster.loop import EventLoop
from app.embedded.reference_cluster.metrics import BrokerMetricsServer, MetricsSnapshot, take_snapshot
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
from collectors.metrics.names import Dialect

__all__ = ["ClusterError", "MetadataView", "ReferenceCluster"]

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
            group_coordinator.commit_group_offsets(self, now)
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
                faults.take_log_dir_offline(broker, log_dir)

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

    # --- what the brokers answer Kafka's clients (loop thread) -----------------------------------------

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

    def cluster_id(self) -> str | None:
        if self._cluster_id is None and self._admin_client is not None:
            with contextlib.suppress(NoNodeError, zkdata.ZnodeFormatError):
                data, _ = self._admin_client.get(zkdata.CLUSTER_ID_PATH)
                self._cluster_id = zkdata.decode_cluster_id(zkdata.CLUSTER_ID_PATH, data)
        return self._cluster_id

    def kafka_bootstrap(self) -> str:
        """``host:port`` of every broker's Kafka listener, comma-separated (a bootstrap server list)."""
        return ",".join(f"{b.endpoint.host}:{b.endpoint.port}" for b in self.brokers.values())

    # --- the consumer groups (group_coordinator.py) ----------------------------------------------------

    def group_coordinator(self, group: str) -> SimBroker | None:
        return group_coordinator.coordinator_of(self, group)

    def ensure_offsets_topic(self) -> None:
        group_coordinator.ensure_offsets_topic(self)

    def add_consumer_group(self, spec: ConsumerGroupSpec, timeout: float = 60.0) -> None:
        group_coordinator.add_consumer_group(self, spec, timeout)

    def add_consumer_groups(self, specs: Sequence[ConsumerGroupSpec], timeout: float = 60.0) -> None:
        group_coordinator.add_consumer_groups(self, specs, timeout)

    def consumer_group_action(self, name: str, action: str, body: Mapping[str, Any]) -> None:
        group_coordinator.consumer_group_action(self, name, action, body)

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

    def dialect_of(self, broker_id: int) -> Dialect:
        return self.settings.broker_metrics_dialects.get(broker_id, self.settings.metrics_dialect)

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

    # --- faults, safe from any thread (faults.py) ------------------------------------------------------

    CORRUPT_STATE = faults.CORRUPT_STATE

    def stop_broker(self, broker_id: int, controlled: bool = False) -> None:
        faults.stop_broker(self, broker_id, controlled)

    def start_broker(self, broker_id: int) -> None:
        faults.start_broker(self, broker_id)

    def stop_controller(self) -> int:
        return faults.stop_controller(self)

    def start_migration(
        self, kraft_controller_id: int = 3000, kraft_controller_epoch: int = 1
    ) -> MigrationState:
        return faults.start_migration(self, kraft_controller_id, kraft_controller_epoch)

    def stall_follower(self, broker_id: int) -> None:
        faults.stall_follower(self, broker_id)

    def slow_follower(self, broker_id: int) -> None:
        faults.slow_follower(self, broker_id)

    def resume_follower(self, broker_id: int) -> None:
        faults.resume_follower(self, broker_id)

    def fail_log_dir(self, broker_id: int, log_dir: int) -> list[TopicPartition]:
        return faults.fail_log_dir(self, broker_id, log_dir)

    def fill_log_dir(
        self, broker_id: int, log_dir: int, used_ratio: float | None, bytes_per_s: float | None
    ) -> None:
        faults.fill_log_dir(self, broker_id, log_dir, used_ratio, bytes_per_s)

    def override_metrics(self, broker_id: int, values: Mapping[str, float], reset: bool) -> None:
        faults.override_metrics(self, broker_id, values, reset)

    def corrupt_partition_state(self, tp: TopicPartition) -> None:
        faults.corrupt_partition_state(self, tp)

    def create_topic(self, spec: TopicSpec) -> dict[int, list[int]]:
        return faults.create_topic(self, spec)

    def skew(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return faults.skew(self, body)

    def append_records(self, tp: TopicPartition, records: int, timeout: float = 30.0) -> int:
        return faults.append_records(self, tp, records, timeout)
