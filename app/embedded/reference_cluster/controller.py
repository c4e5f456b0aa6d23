"""The active controller of the reference cluster, after Kafka's ``KafkaController`` (ZooKeeper mode).

One instance exists per controller epoch, owned by the broker that won ``/controller``. Like Kafka's it
processes one event at a time (the cluster's loop thread calls its ``on_*`` methods), keeps a context
cached from ZooKeeper, and fences every write with a check on ``/controller_epoch``'s version, so that a
deposed controller can write nothing. Partition state writes are compare-and-set on the state znode's
version; on a conflict the state is re-read and the decision made again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from app.embedded.reference_cluster.config import ReferenceClusterSettings
from collectors.kafka import election, zkdata
from collectors.kafka.model import (
    NO_LEADER,
    LeaderAndIsr,
    LeaderRecoveryState,
    ReplicaAssignment,
    TopicPartition,
)

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.protocol.states import ZnodeStat

log = logging.getLogger(__name__)

MAX_CAS_ATTEMPTS = 20
FIRST_REBALANCE_DELAY_MS = 5000.0
"""Kafka schedules the first auto leader rebalance check 5 s after a controller failover."""


class ControllerMovedError(Exception):
    """The ``/controller_epoch`` check failed: another broker is the controller now."""


class ControllerChannel(Protocol):
    """What the controller needs from the cluster runtime: its loop, the brokers' network, a clock."""

    settings: ReferenceClusterSettings

    def post(self, fn: Callable[[], None], delay_ms: float = 0.0) -> None: ...

    def now_ms(self) -> float: ...

    def send_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        updates: Mapping[TopicPartition, tuple[LeaderAndIsr, ReplicaAssignment]],
    ) -> None: ...

    def send_stop_replica(self, broker_id: int, tp: TopicPartition, delete: bool) -> None: ...

    def offline_replicas_of(self, broker_id: int) -> list[TopicPartition]: ...

    def record_unclean_election(self, controller_id: int) -> None: ...

    def controller_resigned(self, controller: Controller) -> None: ...


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    state: LeaderAndIsr | None
    error: str | None = None


class Controller:
    """Kafka's controller for one epoch. Call :meth:`failover` once, then the ``on_*`` event handlers."""

    def __init__(
        self, channel: ControllerChannel, broker_id: int, zk: KazooClient, epoch: int, epoch_zk_version: int
    ) -> None:
        self.channel = channel
        self.settings = channel.settings
        self.broker_id = broker_id
        self.zk = zk
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.active = True
        self.live_brokers: dict[int, int] = {}
        self.assignments: dict[TopicPartition, ReplicaAssignment] = {}
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.topic_ids: dict[str, str | None] = {}
        self.offline_dir_replicas: set[tuple[TopicPartition, int]] = set()
        self.reassigning: set[TopicPartition] = set()
        self.topics_to_delete: set[str] = set()
        self._last_preferred_czxid = 0
        self._last_reassign_czxid = 0
        self._isr_watches: set[TopicPartition] = set()
        self._topic_watches: set[str] = set()

    # --- lifecycle -------------------------------------------------------------------------------

    def failover(self) -> None:
        """``onControllerFailover``: load the context, then bring every partition and replica online."""
        log.info("broker %d is the controller, epoch %d", self.broker_id, self.epoch)
        self._load_context()
        self._fenced_delete_children(zkdata.ISR_CHANGE_NOTIFICATION_PATH)
        self._fenced_delete_children(zkdata.LOG_DIR_EVENT_NOTIFICATION_PATH)
        self._register_watches()
        self._remove_offline_replicas_from_isr(
            [(tp, r) for tp, a in self.assignments.items() for r in a.replicas if not self._online(tp, r)]
        )
        self._trigger_online_partition_state_change()
        self._send_all()
        self._resume_reassignments()
        self._resume_preferred_replica_election()
        if self.settings.auto_leader_rebalance_enable:
            self.channel.post(
                self.guarded(self._auto_rebalance_and_reschedule), delay_ms=FIRST_REBALANCE_DELAY_MS
            )

    def resign(self) -> None:
        """``onControllerResignation``: stop acting; the watches stop at their next callback."""
        if self.active:
            log.info("controller %d (epoch %d) resigns", self.broker_id, self.epoch)
            self.active = False
            self.channel.controller_resigned(self)

    def guarded(self, handler: Callable[[], None]) -> Callable[[], None]:
        """Wrap an event so that it does nothing after resignation and resigns on a fencing failure."""

        def run() -> None:
            if not self.active:
                return
            try:
                handler()
            except ControllerMovedError:
                self.resign()

        return run

    # --- ZooKeeper reads --------------------------------------------------------------------------

    def _load_context(self) -> None:
        self.live_brokers = self._read_live_brokers()
        for topic in self.zk.get_children(zkdata.BROKER_TOPICS_PATH):
            self._load_topic(topic)
        self.topics_to_delete = set(self.zk.get_children(zkdata.DELETE_TOPICS_PATH)) & set(self.topic_ids)

    def _read_live_brokers(self) -> dict[int, int]:
        brokers: dict[int, int] = {}
        for child in self.zk.get_children(zkdata.BROKER_IDS_PATH):
            if not child.isdigit():
                continue
            stat = self.zk.exists(zkdata.broker_path(int(child)))
            if stat is not None:
                brokers[int(child)] = stat.czxid
        return brokers

    def _load_topic(self, topic: str) -> list[TopicPartition]:
        path = zkdata.topic_path(topic)
        try:
            data, _ = self.zk.get(path)
            assignment, topic_id = zkdata.decode_topic(path, data)
        except NoNodeError:
            return []
        except zkdata.ZnodeFormatError as exc:
            log.error("controller skips topic %s: %s", topic, exc)
            return []
        self.topic_ids[topic] = topic_id
        self._watch_topic(topic)
        tps = []
        for partition, replica_assignment in assignment.items():
            tp = TopicPartition(topic, partition)
            self.assignments[tp] = replica_assignment
            tps.append(tp)
        self._reload_states(tps)
        return tps

    def _reload_states(self, tps: Iterable[TopicPartition]) -> None:
        asyncs = [(tp, self.zk.get_async(zkdata.partition_state_path(tp))) for tp in tps]
        for tp, result in asyncs:
            try:
                data, stat = result.get()
                self.states[tp] = zkdata.decode_partition_state(
                    zkdata.partition_state_path(tp), data, stat.version
                )
            except NoNodeError:
                self.states.pop(tp, None)
            except zkdata.ZnodeFormatError as exc:
                log.error("controller skips a malformed state: %s", exc)

    def _topic_config(self, topic: str) -> dict[str, str]:
        path = zkdata.topic_config_path(topic)
        try:
            data, _ = self.zk.get(path)
            return zkdata.decode_config(path, data)
        except (NoNodeError, zkdata.ZnodeFormatError):
            return {}

    def _unclean_enabled(self, topic: str) -> bool:
        value = self._topic_config(topic).get("unclean.leader.election.enable")
        if value is None:
            return self.settings.unclean_leader_election_enable
        return value.strip().lower() == "true"

    # --- watches ----------------------------------------------------------------------------------

    def _register_watches(self) -> None:
        def children(path: str, handler: Callable[[], None]) -> None:
            def on_children(_children: list[str]) -> bool:
                if not self.active:
                    return False
                self.channel.post(self.guarded(handler))
                return True

            ChildrenWatch(self.zk, path, on_children)

        def created(path: str, handler: Callable[[int], None]) -> None:
            def on_data(_data: bytes | None, stat: ZnodeStat | None) -> bool:
                if not self.active:
                    return False
                if stat is not None:
                    czxid = stat.czxid
                    self.channel.post(self.guarded(lambda: handler(czxid)))
                return True

            DataWatch(self.zk, path, on_data)

        children(zkdata.BROKER_IDS_PATH, self.on_broker_change)
        children(zkdata.BROKER_TOPICS_PATH, self.on_topic_change)
        children(zkdata.DELETE_TOPICS_PATH, self.on_topic_deletion)
        children(zkdata.ISR_CHANGE_NOTIFICATION_PATH, self.on_isr_change_notification)
        children(zkdata.LOG_DIR_EVENT_NOTIFICATION_PATH, self.on_log_dir_event)
        created(zkdata.PREFERRED_REPLICA_ELECTION_PATH, self.on_preferred_replica_election)
        created(zkdata.REASSIGN_PARTITIONS_PATH, self.on_reassign_partitions)

    def _watch_topic(self, topic: str) -> None:
        """Kafka's ``PartitionModificationsHandler``: partitions added to a topic znode get created."""
        if topic in self._topic_watches:
            return
        self._topic_watches.add(topic)

        def on_topic(_data: bytes | None, stat: ZnodeStat | None) -> bool:
            if not self.active or stat is None or topic not in self._topic_watches:
                self._topic_watches.discard(topic)
                return False
            self.channel.post(self.guarded(lambda: self.on_partition_modifications(topic)))
            return True

        DataWatch(self.zk, zkdata.topic_path(topic), on_topic)

    def _watch_state_for_reassignment(self, tp: TopicPartition) -> None:
        """Kafka's ``PartitionReassignmentIsrChangeHandler``: re-check a reassignment at each ISR change."""
        if tp in self._isr_watches:
            return
        self._isr_watches.add(tp)

        def on_state(_data: bytes | None, _stat: ZnodeStat | None) -> bool:
            if not self.active or tp not in self._isr_watches:
                return False
            self.channel.post(self.guarded(lambda: self.on_reassignment_isr_change(tp)))
            return True

        DataWatch(self.zk, zkdata.partition_state_path(tp), on_state)

    # --- fenced writes ----------------------------------------------------------------------------

    def _commit_fenced(self, builders: Sequence[Callable[[Any], None]]) -> list[list[Any]]:
        """One multi per builder, each led by a check of ``/controller_epoch``'s version; all pipelined."""
        pending = []
        for build in builders:
            txn = self.zk.transaction()
            txn.check(zkdata.CONTROLLER_EPOCH_PATH, self.epoch_zk_version)
            build(txn)
            pending.append(txn.commit_async())
        results = [p.get() for p in pending]
        for result in results:
            # A failed op leaves RolledBackError before it: only a failure of the check itself means that
            # the epoch moved.
            if result and isinstance(result[0], Exception) and not isinstance(result[0], RolledBackError):
                raise ControllerMovedError(f"controller epoch check failed: {result[0]!r}")
        return [r[1:] for r in results]

    def _write_states(
        self,
        tps: Iterable[TopicPartition],
        decide: Callable[[TopicPartition, LeaderAndIsr], LeaderAndIsr | None],
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """Decide each partition's new state from the cached one and compare-and-set it; on a version
        conflict re-read and decide again (Kafka's retry loop in ``doElectLeaderForPartitions``)."""
        pending = [tp for tp in tps if tp in self.states]
        written: dict[TopicPartition, LeaderAndIsr] = {}
        for _ in range(MAX_CAS_ATTEMPTS):
            decisions: dict[TopicPartition, LeaderAndIsr] = {}
            for tp in pending:
                new_state = decide(tp, self.states[tp])
                if new_state is not None:
                    decisions[tp] = replace(new_state, controller_epoch=self.epoch)
            order = list(decisions)
            results = self._commit_fenced(
                [self._set_state_op(tp, decisions[tp], self.states[tp].zk_version) for tp in order]
            )
            conflicts = []
            for tp, result in zip(order, results, strict=True):
                outcome = result[0]
                if isinstance(outcome, BadVersionError):
                    conflicts.append(tp)
                elif isinstance(outcome, Exception):
                    log.error("controller could not write the state of %s: %r", tp, outcome)
                else:
                    state = replace(decisions[tp], zk_version=outcome.version)
                    self.states[tp] = written[tp] = state
            if not conflicts:
                break
            self._reload_states(conflicts)
            pending = [tp for tp in conflicts if tp in self.states]
        return written

    @staticmethod
    def _set_state_op(tp: TopicPartition, state: LeaderAndIsr, version: int) -> Callable[[Any], None]:
        data = zkdata.encode_partition_state(state)
        return lambda txn: txn.set_data(zkdata.partition_state_path(tp), data, version)

    def _fenced_delete_children(self, path: str) -> None:
        try:
            children = self.zk.get_children(path)
        except NoNodeError:
            return
        self._commit_fenced([self._delete_op(f"{path}/{c}") for c in children])

    @staticmethod
    def _delete_op(path: str) -> Callable[[Any], None]:
        return lambda txn: txn.delete(path)

    # --- helpers ----------------------------------------------------------------------------------

    def _online(self, tp: TopicPartition, replica: int) -> bool:
        return replica in self.live_brokers and (tp, replica) not in self.offline_dir_replicas

    def _live_replicas(self, tp: TopicPartition) -> list[int]:
        return [r for r in self.assignments[tp].replicas if self._online(tp, r)]

    def _send(self, tps: Iterable[TopicPartition], extra_brokers: Collection[int] = ()) -> None:
        """LeaderAndIsr to every live replica of each partition (and to ``extra_brokers``)."""
        by_broker: dict[int, dict[TopicPartition, tuple[LeaderAndIsr, ReplicaAssignment]]] = {}
        for tp in tps:
            state, assignment = self.states.get(tp), self.assignments.get(tp)
            if state is None or assignment is None:
                continue
            for replica in {*assignment.replicas, *extra_brokers}:
                if self._online(tp, replica):
                    by_broker.setdefault(replica, {})[tp] = (state, assignment)
        for broker_id, updates in by_broker.items():
            self.channel.send_leader_and_isr([broker_id], updates)

    def _send_all(self) -> None:
        self._send(list(self.states))

    def _partitions_on(self, broker_ids: Collection[int]) -> list[tuple[TopicPartition, int]]:
        return [(tp, r) for tp, a in self.assignments.items() for r in a.replicas if r in broker_ids]

    # --- partition and replica state machines -----------------------------------------------------

    def _trigger_online_partition_state_change(self) -> None:
        """New partitions get their first leader; offline ones an offline election."""
        new, offline = [], []
        for tp in self.assignments:
            if tp.topic in self.topics_to_delete:
                continue
            state = self.states.get(tp)
            if state is None:
                new.append(tp)
            elif state.leader == NO_LEADER or not self._online(tp, state.leader):
                offline.append(tp)
        self._initialize_partitions(new)
        self._elect_offline(offline)

    def _initialize_partitions(self, tps: Sequence[TopicPartition]) -> None:
        """NewPartition -> OnlinePartition: leader = first live replica, ISR = live replicas, epoch 0."""
        creates: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in tps:
            live = self._live_replicas(tp)
            if not live:
                log.error("no live replica of new partition %s: it stays without a leader", tp)
                continue
            creates[tp] = LeaderAndIsr(live[0], 0, tuple(live), self.epoch)
        if not creates:
            return
        parents = {zkdata.topic_partitions_path(tp.topic) for tp in creates}
        parents |= {zkdata.partition_path(tp) for tp in creates}
        for result in [self.zk.create_async(p, b"") for p in sorted(parents)]:
            with contextlib.suppress(NodeExistsError):
                result.get()
        order = list(creates)
        results = self._commit_fenced([self._create_state_op(tp, creates[tp]) for tp in order])
        for tp, result in zip(order, results, strict=True):
            if isinstance(result[0], NodeExistsError):
                self._reload_states([tp])
            elif isinstance(result[0], Exception):
                log.error("controller could not create the state of %s: %r", tp, result[0])
            else:
                self.states[tp] = replace(creates[tp], zk_version=0)
        self._send(order)

    @staticmethod
    def _create_state_op(tp: TopicPartition, state: LeaderAndIsr) -> Callable[[Any], None]:
        data = zkdata.encode_partition_state(state)
        return lambda txn: txn.create(zkdata.partition_state_path(tp), data)

    def _elect_offline(self, tps: Sequence[TopicPartition]) -> None:
        if not tps:
            return
        unclean_by_topic = {tp.topic: self._unclean_enabled(tp.topic) for tp in tps}
        unclean: set[TopicPartition] = set()

        def decide(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
            if current.leader != NO_LEADER and self._online(tp, current.leader):
                return None  # someone else elected it meanwhile
            result = election.elect_offline(
                current,
                self.assignments[tp].replicas,
                [r for r in self.assignments[tp].replicas if self._online(tp, r)],
                self.epoch,
                unclean_leader_election_enable=unclean_by_topic[tp.topic],
                leader_recovery_supported=self.settings.leader_recovery_supported,
            )
            if result is None:
                return None
            state, was_unclean = result
            if was_unclean:
                unclean.add(tp)
            else:
                unclean.discard(tp)
            return state

        written = self._write_states(tps, decide)
        for tp in written:
            if tp in unclean:
                log.warning("unclean leader election for %s: leader %d", tp, written[tp].leader)
                self.channel.record_unclean_election(self.broker_id)
        for tp in tps:
            if tp not in written:
                log.error("no leader can be elected for offline partition %s", tp)
        self._send(written)

    def _remove_offline_replicas_from_isr(self, replicas: Sequence[tuple[TopicPartition, int]]) -> None:
        """OfflineReplica: drop each replica from its partition's ISR, replica by replica as Kafka does."""
        by_replica: dict[int, list[TopicPartition]] = {}
        for tp, replica in replicas:
            by_replica.setdefault(replica, []).append(tp)
        for replica, tps in sorted(by_replica.items()):
            self._send(self._write_states(tps, self._isr_removal(replica)))

    # --- brokers ----------------------------------------------------------------------------------

    def on_broker_change(self) -> None:
        current = self._read_live_brokers()
        bounced = {
            b for b, epoch in current.items() if b in self.live_brokers and self.live_brokers[b] != epoch
        }
        dead = (set(self.live_brokers) - set(current)) | bounced
        new = (set(current) - set(self.live_brokers)) | bounced
        if not dead and not new:
            return
        log.info("controller %d: brokers up %s, down %s", self.broker_id, sorted(new), sorted(dead))
        if dead:
            for broker_id in dead:
                self.live_brokers.pop(broker_id, None)
            self.offline_dir_replicas = {(tp, r) for tp, r in self.offline_dir_replicas if r not in dead}
            self._on_replicas_offline(self._partitions_on(dead))
        if new:
            self.live_brokers.update({b: current[b] for b in new})
            self.offline_dir_replicas = {(tp, r) for tp, r in self.offline_dir_replicas if r not in new}
            self._on_broker_startup(new)

    def _on_replicas_offline(self, replicas: Sequence[tuple[TopicPartition, int]]) -> None:
        """``onReplicasBecomeOffline``: elections first (every leaderless partition gets another chance),
        then the offline replicas leave the ISRs they are still in."""
        self._trigger_online_partition_state_change()
        self._remove_offline_replicas_from_isr(
            [(tp, r) for tp, r in replicas if tp.topic not in self.topics_to_delete]
        )

    def _isr_removal(self, replica: int) -> Callable[[TopicPartition, LeaderAndIsr], LeaderAndIsr | None]:
        return lambda _tp, current: election.remove_replica_from_isr(current, replica, self.epoch)

    def _on_broker_startup(self, new: Collection[int]) -> None:
        """``onBrokerStartup``: the new brokers learn every partition they host (as followers), offline
        partitions get a chance of a leader, reassignments waiting for them go on."""
        self._send([tp for tp, a in self.assignments.items() if set(a.replicas) & set(new)])
        self._trigger_online_partition_state_change()
        for tp in list(self.reassigning):
            self.on_reassignment_isr_change(tp)
        if self.topics_to_delete:
            self.on_topic_deletion()

    def controlled_shutdown(self, broker_id: int) -> None:
        """``doControlledShutdown``: move leadership off the broker and drop it from the ISRs it is in."""
        if broker_id not in self.live_brokers:
            return
        led = [
            tp
            for tp, s in self.states.items()
            if s.leader == broker_id and len(self.assignments[tp].replicas) > 1
        ]
        live = set(self.live_brokers)

        def decide(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
            return election.elect_for_controlled_shutdown(
                current, self.assignments[tp].replicas, live, {broker_id}, self.epoch
            )

        self._send(self._write_states(led, decide))
        followers = [
            (tp, broker_id) for tp, s in self.states.items() if broker_id in s.isr and s.leader != broker_id
        ]
        self._remove_offline_replicas_from_isr(followers)

    # --- topics -----------------------------------------------------------------------------------

    def on_topic_change(self) -> None:
        topics = set(self.zk.get_children(zkdata.BROKER_TOPICS_PATH))
        for gone in set(self.topic_ids) - topics:
            self._forget_topic(gone)
        new_tps: list[TopicPartition] = []
        for topic in sorted(topics - set(self.topic_ids)):
            new_tps += self._load_topic(topic)
        if new_tps:
            log.info("controller %d: new partitions %s", self.broker_id, [str(tp) for tp in new_tps[:10]])
            self._initialize_partitions([tp for tp in new_tps if tp not in self.states])
            self._send([tp for tp in new_tps if tp in self.states])

    def on_partition_modifications(self, topic: str) -> None:
        """New partitions in a topic znode are created; a topic queued for deletion gets its znode back."""
        if topic not in self.topic_ids:
            return
        path = zkdata.topic_path(topic)
        try:
            data, _ = self.zk.get(path)
            assignment, _ = zkdata.decode_topic(path, data)
        except NoNodeError:
            return
        except zkdata.ZnodeFormatError as exc:
            log.error("controller ignores a malformed topic change: %s", exc)
            return
        added = {
            TopicPartition(topic, p): a
            for p, a in assignment.items()
            if TopicPartition(topic, p) not in self.assignments
        }
        if not added:
            return
        if topic in self.topics_to_delete:
            log.warning("partitions added to %s, which is queued for deletion: znode restored", topic)
            self._write_assignment(topic, {})
            return
        log.info(
            "controller %d: partitions added to %s: %s",
            self.broker_id,
            topic,
            sorted(tp.partition for tp in added),
        )
        self.assignments.update(added)
        self._initialize_partitions(list(added))

    def _forget_topic(self, topic: str) -> None:
        self.topic_ids.pop(topic, None)
        self._topic_watches.discard(topic)
        self.topics_to_delete.discard(topic)
        for tp in [tp for tp in self.assignments if tp.topic == topic]:
            self.assignments.pop(tp, None)
            self.states.pop(tp, None)
            self.reassigning.discard(tp)
            self._isr_watches.discard(tp)

    def on_topic_deletion(self) -> None:
        """``TopicDeletionManager``, simplified to what ZooKeeper shows: a marked topic is deleted once no
        reassignment of it runs and all its replicas are online; until then the mark stays."""
        try:
            marked = set(self.zk.get_children(zkdata.DELETE_TOPICS_PATH))
        except NoNodeError:
            return
        unknown = marked - set(self.topic_ids)
        if unknown:
            self._commit_fenced([self._delete_op(zkdata.delete_topic_path(t)) for t in sorted(unknown)])
        self.topics_to_delete = marked & set(self.topic_ids)
        for topic in sorted(self.topics_to_delete):
            tps = [tp for tp in self.assignments if tp.topic == topic]
            if any(tp in self.reassigning for tp in tps):
                continue
            if not all(self._online(tp, r) for tp in tps for r in self.assignments[tp].replicas):
                continue
            self._delete_topic(topic, tps)

    def _delete_topic(self, topic: str, tps: list[TopicPartition]) -> None:
        for tp in tps:
            for replica in self.assignments[tp].replicas:
                self.channel.send_stop_replica(replica, tp, delete=True)
        paths = [zkdata.partition_state_path(tp) for tp in tps]
        paths += [zkdata.partition_path(tp) for tp in tps]
        paths += [
            zkdata.topic_partitions_path(topic),
            zkdata.topic_path(topic),
            zkdata.topic_config_path(topic),
        ]
        existing = [p for p in paths if self.zk.exists(p)]
        # One fenced multi per znode, pipelined in order on one connection: children before parents.
        self._commit_fenced([self._delete_op(p) for p in [*existing, zkdata.delete_topic_path(topic)]])
        self._forget_topic(topic)
        log.info("controller %d deleted topic %s", self.broker_id, topic)

    # --- ISR changes --------------------------------------------------------------------------------

    def on_isr_change_notification(self) -> None:
        """Leaders before IBP 2.7 write ISR changes themselves and leave a notification; the controller
        refreshes its cache from the state znodes and deletes the notifications."""
        try:
            children = sorted(self.zk.get_children(zkdata.ISR_CHANGE_NOTIFICATION_PATH))
        except NoNodeError:
            return
        changed: set[TopicPartition] = set()
        for child in children:
            path = f"{zkdata.ISR_CHANGE_NOTIFICATION_PATH}/{child}"
            try:
                data, _ = self.zk.get(path)
                changed.update(zkdata.decode_partition_list(path, data))
            except NoNodeError:
                continue
            except zkdata.ZnodeFormatError as exc:
                log.error("controller skips a malformed ISR change notification: %s", exc)
        self._commit_fenced([self._delete_op(f"{zkdata.ISR_CHANGE_NOTIFICATION_PATH}/{c}") for c in children])
        self._reload_states(tp for tp in changed if tp in self.assignments)

    def alter_partition(
        self, broker_id: int, tp: TopicPartition, proposed: LeaderAndIsr
    ) -> AlterPartitionResult:
        """``processAlterPartition`` (IBP 2.7+): a leader asks for a new ISR; the controller checks its
        epochs and writes it with the current controller epoch."""
        current = self.states.get(tp)
        if current is None or tp not in self.assignments:
            return AlterPartitionResult(None, "UNKNOWN_TOPIC_OR_PARTITION")
        if broker_id not in self.live_brokers:
            return AlterPartitionResult(None, "STALE_BROKER_EPOCH")
        if current.leader != broker_id or proposed.leader_epoch != current.leader_epoch:
            return AlterPartitionResult(None, "FENCED_LEADER_EPOCH")
        if proposed.zk_version != current.zk_version:
            return AlterPartitionResult(None, "INVALID_UPDATE_VERSION")
        if proposed.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(proposed.isr) > 1:
            return AlterPartitionResult(None, "INVALID_REQUEST")
        if self.settings.ibp >= (3, 3) and not set(proposed.isr) <= set(self.live_brokers):
            return AlterPartitionResult(None, "INELIGIBLE_REPLICA")
        written = self._write_states(
            [tp],
            lambda _tp, cur: (
                replace(cur, isr=proposed.isr, leader_recovery_state=proposed.leader_recovery_state)
                if cur.leader_epoch == proposed.leader_epoch
                else None
            ),
        )
        if tp not in written:
            return AlterPartitionResult(None, "INVALID_UPDATE_VERSION")
        return AlterPartitionResult(written[tp])

    # --- log dirs -----------------------------------------------------------------------------------

    def on_log_dir_event(self) -> None:
        try:
            children = sorted(self.zk.get_children(zkdata.LOG_DIR_EVENT_NOTIFICATION_PATH))
        except NoNodeError:
            return
        brokers: set[int] = set()
        for child in children:
            path = f"{zkdata.LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}"
            try:
                data, _ = self.zk.get(path)
                broker_id, _event = zkdata.decode_log_dir_event(path, data)
                brokers.add(broker_id)
            except NoNodeError:
                continue
            except zkdata.ZnodeFormatError as exc:
                log.error("controller skips a malformed log dir event: %s", exc)
        self._commit_fenced(
            [self._delete_op(f"{zkdata.LOG_DIR_EVENT_NOTIFICATION_PATH}/{c}") for c in children]
        )
        newly_offline: list[tuple[TopicPartition, int]] = []
        for broker_id in sorted(brokers & set(self.live_brokers)):
            for tp in self.channel.offline_replicas_of(broker_id):
                if tp in self.assignments and (tp, broker_id) not in self.offline_dir_replicas:
                    self.offline_dir_replicas.add((tp, broker_id))
                    newly_offline.append((tp, broker_id))
        if newly_offline:
            self._on_replicas_offline(newly_offline)

    # --- preferred replica election -----------------------------------------------------------------

    def _resume_preferred_replica_election(self) -> None:
        stat = self.zk.exists(zkdata.PREFERRED_REPLICA_ELECTION_PATH)
        if stat is not None:
            self.on_preferred_replica_election(stat.czxid)

    def on_preferred_replica_election(self, czxid: int) -> None:
        """The znode was created: elect AR[0] where it is alive and in the ISR, then delete the znode
        (after every pass, whatever the outcome, as Kafka does)."""
        if czxid == self._last_preferred_czxid:
            return
        self._last_preferred_czxid = czxid
        path = zkdata.PREFERRED_REPLICA_ELECTION_PATH
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return
        try:
            partitions = zkdata.decode_partition_list(path, data)
        except zkdata.ZnodeFormatError as exc:
            log.error("preferred replica election ignored: %s", exc)
            partitions = []
        try:
            self.elect_preferred(partitions)
        finally:
            self._commit_fenced([self._delete_op(path)])

    def elect_preferred(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, LeaderAndIsr]:
        candidates = [
            tp
            for tp in dict.fromkeys(partitions)
            if tp in self.states
            and tp.topic not in self.topics_to_delete
            and self.states[tp].leader != self.assignments[tp].preferred_leader
        ]

        def decide(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
            assignment = self.assignments[tp]
            if current.leader == assignment.preferred_leader:
                return None
            live = [r for r in assignment.replicas if self._online(tp, r)]
            return election.elect_preferred(current, assignment.replicas, live, self.epoch)

        written = self._write_states(candidates, decide)
        skipped = [str(tp) for tp in candidates if tp not in written]
        if skipped:
            log.warning("preferred replica not electable (dead or out of ISR) for %s", skipped[:20])
        self._send(written)
        return written

    def _auto_rebalance_and_reschedule(self) -> None:
        try:
            self.on_auto_rebalance()
        finally:
            delay = self.settings.leader_imbalance_check_interval_seconds * 1000
            self.channel.post(self.guarded(self._auto_rebalance_and_reschedule), delay_ms=delay)

    def on_auto_rebalance(self) -> None:
        """``checkAndTriggerAutoLeaderRebalance``: per preferred broker, elect when the share of its
        partitions led by others is strictly above ``leader.imbalance.per.broker.percentage``."""
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp, assignment in self.assignments.items():
            if tp in self.states and tp.topic not in self.topics_to_delete:
                by_preferred.setdefault(assignment.preferred_leader, []).append(tp)
        to_elect: list[TopicPartition] = []
        for broker_id, tps in sorted(by_preferred.items()):
            not_led = [tp for tp in tps if self.states[tp].leader != broker_id]
            ratio = len(not_led) / len(tps)
            if ratio * 100 > self.settings.leader_imbalance_per_broker_percentage:
                to_elect += [
                    tp
                    for tp in not_led
                    if tp not in self.reassigning
                    and broker_id in self.live_brokers
                    and broker_id in self.states[tp].isr
                ]
        if to_elect:
            log.info("auto leader rebalance: %d partitions", len(to_elect))
            self.elect_preferred(to_elect)

    # --- reassignment -------------------------------------------------------------------------------

    def on_reassign_partitions(self, czxid: int) -> None:
        """``processZkPartitionReassignment``: the znode was created; start each partition's move and
        drop from the znode the partitions that cannot move (unknown, being deleted, no change)."""
        if czxid == self._last_reassign_czxid:
            return
        self._last_reassign_czxid = czxid
        self._process_reassign_znode()

    def _process_reassign_znode(self) -> None:
        path = zkdata.REASSIGN_PARTITIONS_PATH
        try:
            data, _ = self.zk.get(path)
            targets = zkdata.decode_reassignment(path, data)
        except NoNodeError:
            return
        except zkdata.ZnodeFormatError as exc:
            log.error("reassignment znode ignored (it stays until removed): %s", exc)
            return
        failed: list[TopicPartition] = []
        for tp, target in targets.items():
            current = self.assignments.get(tp)
            if current is None or tp.topic in self.topics_to_delete or not target:
                failed.append(tp)
                continue
            origin = current.origin_replicas if current.is_being_reassigned else current.replicas
            if not current.is_being_reassigned and tuple(target) == current.replicas:
                failed.append(tp)
                continue
            self._on_partition_reassignment(tp, ReplicaAssignment.for_reassignment(origin, tuple(target)))
        if failed:
            log.warning("reassignment refused for %s", [str(tp) for tp in failed])
            self._remove_from_reassign_znode(lambda tp, _replicas: tp in failed)

    def _resume_reassignments(self) -> None:
        self._process_reassign_znode()
        for tp, assignment in list(self.assignments.items()):
            if assignment.is_being_reassigned and tp not in self.reassigning:
                self._on_partition_reassignment(tp, assignment)

    def _on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        """``onPartitionReassignment``, phase A (start the new replicas) or B (finish) as the ISR allows."""
        current = self.assignments[tp]
        if reassignment != current:
            self._write_assignment(tp.topic, {tp: reassignment})
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            self._stop_removed_replicas(tp, unneeded)
        self.reassigning.add(tp)
        self._watch_state_for_reassignment(tp)
        if not self._reassignment_complete(tp, reassignment):
            bumped = self._write_states(
                [tp], lambda _tp, cur: replace(cur, leader_epoch=cur.leader_epoch + 1)
            )
            self._send(bumped)
            return
        completed = ReplicaAssignment(reassignment.target_replicas)
        self.assignments[tp] = completed
        state = self.states[tp]
        if state.leader not in completed.replicas or not self._online(tp, state.leader):
            live = [r for r in completed.replicas if self._online(tp, r)]
            written = self._write_states(
                [tp],
                lambda _tp, cur: election.elect_for_reassignment(cur, completed.replicas, live, self.epoch),
            )
        else:
            written = self._write_states(
                [tp], lambda _tp, cur: replace(cur, leader_epoch=cur.leader_epoch + 1)
            )
        self._send(written)
        self._stop_removed_replicas(tp, reassignment.removing_replicas)
        self._write_assignment(tp.topic, {tp: completed})
        self.reassigning.discard(tp)
        self._isr_watches.discard(tp)
        self._remove_from_reassign_znode(lambda p, replicas: p == tp and replicas == completed.replicas)
        log.info("reassignment of %s complete: %s", tp, list(completed.replicas))

    def _stop_removed_replicas(self, tp: TopicPartition, replicas: Sequence[int]) -> None:
        """OfflineReplica (one ISR write each, leader epoch + 1), then StopReplica with delete."""
        for replica in replicas:
            self._send(self._write_states([tp], self._isr_removal(replica)))
            self.channel.send_stop_replica(replica, tp, delete=True)

    def _reassignment_complete(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> bool:
        self._reload_states([tp])
        state = self.states.get(tp)
        return state is not None and all(r in state.isr for r in reassignment.target_replicas)

    def on_reassignment_isr_change(self, tp: TopicPartition) -> None:
        if tp in self.reassigning and self._reassignment_complete(tp, self.assignments[tp]):
            self._on_partition_reassignment(tp, self.assignments[tp])

    def _write_assignment(self, topic: str, changes: Mapping[TopicPartition, ReplicaAssignment]) -> None:
        """Rewrite the topic znode (fenced, any version, as Kafka's ``setTopicAssignment``)."""
        assignment = {tp.partition: a for tp, a in self.assignments.items() if tp.topic == topic}
        assignment.update({tp.partition: a for tp, a in changes.items()})
        data = zkdata.encode_topic(
            assignment, self.topic_ids.get(topic), version=self.settings.topic_znode_version
        )
        self._commit_fenced([lambda txn: txn.set_data(zkdata.topic_path(topic), data)])
        self.assignments.update(changes)

    def _remove_from_reassign_znode(self, remove: Callable[[TopicPartition, tuple[int, ...]], bool]) -> None:
        path = zkdata.REASSIGN_PARTITIONS_PATH
        try:
            data, stat = self.zk.get(path)
            targets = zkdata.decode_reassignment(path, data)
        except (NoNodeError, zkdata.ZnodeFormatError):
            return
        remaining = {tp: r for tp, r in targets.items() if not remove(tp, r)}
        if len(remaining) == len(targets):
            return
        if remaining:
            payload = zkdata.encode_reassignment(remaining)
            self._commit_fenced([lambda txn: txn.set_data(path, payload, stat.version)])
        else:
            self._commit_fenced([lambda txn: txn.delete(path, stat.version)])
