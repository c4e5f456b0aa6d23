"""The faults the reference cluster can be given: brokers stopped and started, the controller stopped, a
ZK→KRaft migration, stalled or slow followers, failed and filling log dirs, overridden metrics, a corrupted
state znode, a new topic, skewed traffic, records appended to a partition.

Each function takes the cluster and is safe from any thread: the work runs on the cluster's loop (or, for
the admin writes, on the caller's thread through the cluster's own ZooKeeper session), and a refusal is a
:class:`~app.embedded.reference_cluster.errors.ClusterError` with the status the control port answers.
:class:`~app.embedded.reference_cluster.cluster.ReferenceCluster` offers each as a method.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError

from app.embedded.reference_cluster.admin import TopicExistsError
from app.embedded.reference_cluster.broker import SimBroker
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.controller import Controller
from app.embedded.reference_cluster.errors import ClusterError
from app.embedded.reference_cluster.metrics import OverrideError, check_overrides, take_snapshot
from collectors.kafka import zkdata
from collectors.kafka.model import MigrationState, TopicPartition
from collectors.kafka.placement import (
    AdminOperationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
)

if TYPE_CHECKING:
    from app.embedded.reference_cluster.cluster import ReferenceCluster

log = logging.getLogger(__name__)

CORRUPT_STATE = b'{"version":1,"leader":"corrupted by the reference cluster","isr":'
"""What :func:`corrupt_partition_state` writes: not JSON (a hand edit gone wrong), so no decoder of
Kafka's or ours can read it."""


def known_broker(cluster: ReferenceCluster, broker_id: int) -> SimBroker:
    broker = cluster.brokers.get(broker_id)
    if broker is None:
        raise ClusterError(404, f"unknown broker {broker_id}: brokers are 0..{len(cluster.brokers) - 1}")
    return broker


def running_broker(cluster: ReferenceCluster, broker_id: int) -> SimBroker:
    broker = known_broker(cluster, broker_id)
    if not broker.alive:
        raise ClusterError(409, f"broker {broker_id} is stopped")
    return broker


def stop_broker(cluster: ReferenceCluster, broker_id: int, controlled: bool = False) -> None:
    """Stop a broker: with ``controlled`` it first hands its leaderships over (controlled shutdown);
    otherwise it crashes, its session closing at once."""

    def run() -> None:
        cluster._stop_broker(running_broker(cluster, broker_id), controlled)

    cluster.loop.call(run)


def start_broker(cluster: ReferenceCluster, broker_id: int) -> None:
    def run() -> None:
        broker = known_broker(cluster, broker_id)
        if broker.alive:
            raise ClusterError(409, f"broker {broker_id} is already running")
        cluster._start_broker(broker)

    cluster.loop.call(run)


def stop_controller(cluster: ReferenceCluster) -> int:
    def run() -> int:
        if cluster.controller is None:
            raise ClusterError(409, "there is no active controller")
        if cluster.controller.broker_id not in cluster.brokers:
            raise ClusterError(409, "the controller is the KRaft controller of a migration, not a broker")
        broker_id = cluster.controller.broker_id
        cluster._stop_broker(cluster.brokers[broker_id], controlled=False)
        return broker_id

    return cluster.loop.call(run)


def start_migration(
    cluster: ReferenceCluster, kraft_controller_id: int = 3000, kraft_controller_epoch: int = 1
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
    if kraft_controller_id in cluster.brokers or kraft_controller_id < 0:
        raise ClusterError(422, f"the KRaft controller's id {kraft_controller_id} must be no broker's")
    if kraft_controller_epoch < 0:
        raise ClusterError(422, "the KRaft controller epoch must be >= 0")

    def run() -> MigrationState:
        client = cluster._admin_client
        if client is None:
            raise ClusterError(409, "the cluster is not running")
        if cluster.migration is not None or client.exists(zkdata.MIGRATION_PATH):
            raise ClusterError(409, "a migration has already started (/migration exists)")
        empty = MigrationState(-1, -1, -1, -1)
        client.create(zkdata.MIGRATION_PATH, zkdata.encode_migration(empty))
        for broker in cluster.brokers.values():
            if broker.alive and broker.registered:
                _reregister(cluster, broker)
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
        if cluster.controller is not None:
            cluster.controller.resign()
        controller = Controller(cluster, kraft_controller_id, client, epoch, results[0].version)
        cluster.controller = controller
        controller.guarded(controller.failover)()
        records = len(controller.assignments) + len(controller.topic_ids) + len(cluster.brokers)
        migrated = MigrationState(
            kraft_controller_id, kraft_controller_epoch, records, kraft_controller_epoch
        )
        client.set(zkdata.MIGRATION_PATH, zkdata.encode_migration(migrated), 0)
        cluster.migration = migrated
        log.info("ZK→KRaft migration: KRaft controller %d holds /controller", kraft_controller_id)
        return migrated

    result: MigrationState = cluster.loop.call(run)
    return result


def _reregister(cluster: ReferenceCluster, broker: SimBroker) -> None:
    """A broker restarted in migration mode: its registration is created anew (a new czxid, so a new
    broker epoch) in one multi, so that no reader sees the broker gone."""
    client = broker.client
    assert client is not None
    registration = broker.registration(cluster.settings.broker_registration_version, zkdata.now_ms())
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


def stall_follower(cluster: ReferenceCluster, broker_id: int) -> None:
    """The broker's replica fetchers stop: its replicas fall out of the ISRs after the lag time."""
    cluster.loop.call(lambda: setattr(running_broker(cluster, broker_id), "stalled", True))


def slow_follower(cluster: ReferenceCluster, broker_id: int) -> None:
    """The broker's fetchers keep going but slower than the leaders take writes: never caught up."""
    cluster.loop.call(lambda: setattr(running_broker(cluster, broker_id), "slow", True))


def resume_follower(cluster: ReferenceCluster, broker_id: int) -> None:
    def run() -> None:
        broker = running_broker(cluster, broker_id)
        if not broker.stalled and not broker.slow:
            raise ClusterError(409, f"broker {broker_id} is neither stalled nor slow")
        broker.stalled = broker.slow = False

    cluster.loop.call(run)


def fail_log_dir(cluster: ReferenceCluster, broker_id: int, log_dir: int) -> list[TopicPartition]:
    """A log directory fails: its replicas go offline and the broker tells the controller through
    ``/log_dir_event_notification``. Returns the replicas lost."""

    def run() -> list[TopicPartition]:
        broker = _healthy_log_dir(cluster, broker_id, log_dir)
        return take_log_dir_offline(broker, log_dir)

    return cluster.loop.call(run)


def _healthy_log_dir(cluster: ReferenceCluster, broker_id: int, log_dir: int) -> SimBroker:
    broker = running_broker(cluster, broker_id)
    if not 0 <= log_dir < broker.log_dirs:
        raise ClusterError(404, f"broker {broker_id} has log dirs 0..{broker.log_dirs - 1}")
    if log_dir in broker.failed_log_dirs:
        raise ClusterError(409, f"log dir {log_dir} of broker {broker_id} has failed already")
    return broker


def take_log_dir_offline(broker: SimBroker, log_dir: int) -> list[TopicPartition]:
    """The broker's side of a failed log dir (loop thread): its replicas there go offline and a
    ``/log_dir_event_notification`` tells the controller. Returns the replicas lost."""
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
    cluster: ReferenceCluster,
    broker_id: int,
    log_dir: int,
    used_ratio: float | None,
    bytes_per_s: float | None,
) -> None:
    """Set how full a log dir's filesystem is now (``used_ratio``: other files take what the logs
    leave of it) and how fast the other files grow (``bytes_per_s``, from the next tick). A dir that
    is full fails at once, as it does when it fills up later."""

    def run() -> None:
        broker = _healthy_log_dir(cluster, broker_id, log_dir)
        disk = broker.disks[log_dir]
        if used_ratio is not None:
            broker.measure_log_dirs(cluster.settings.traffic.message_bytes)
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
            take_log_dir_offline(broker, log_dir)

    cluster.loop.call(run)


def override_metrics(
    cluster: ReferenceCluster, broker_id: int, values: Mapping[str, float], reset: bool
) -> None:
    """Serve ``values`` for those series names (as the broker's dialect names them) instead of the
    simulation's, on every label set, until a ``reset``; a reset clears the earlier ones first. Every
    name must be a gauge the broker serves now (ClusterError 422 naming the others)."""

    def run() -> None:
        broker = running_broker(cluster, broker_id)
        snapshot = take_snapshot(cluster, broker)
        assert snapshot is not None
        try:
            check_overrides(snapshot, cluster.dialect_of(broker_id), values)
        except OverrideError as exc:
            raise ClusterError(422, str(exc)) from None
        if reset:
            broker.metric_overrides.clear()
        broker.metric_overrides.update(values)

    cluster.loop.call(run)


def corrupt_partition_state(cluster: ReferenceCluster, tp: TopicPartition) -> None:
    """Overwrite a partition's state znode with data no one can parse (a fault for the "state unknown"
    handling: an unreadable znode must not read as an offline partition). The brokers keep serving the
    partition as before; the controller's next write of that state (a leader or ISR change) repairs it."""
    client = cluster._admin_client
    if client is None:
        raise ClusterError(409, "the cluster is not started")
    path = zkdata.partition_state_path(tp)
    try:
        client.set(path, CORRUPT_STATE)
    except NoNodeError:
        raise ClusterError(404, f"partition {tp} has no state znode ({path})") from None


def create_topic(cluster: ReferenceCluster, spec: TopicSpec) -> dict[int, list[int]]:
    """Create a topic as ``kafka-topics --create`` would; returns the replica assignment."""
    if cluster.admin is None:
        raise ClusterError(409, "the cluster is not started")
    try:
        return cluster.admin.create_topic(spec.name, spec.partitions, spec.replication_factor, spec.config)
    except TopicExistsError as exc:
        raise ClusterError(409, str(exc)) from None
    except (InvalidReplicationFactorError, InvalidPartitionsError, AdminOperationError) as exc:
        raise ClusterError(422, str(exc)) from None


def skew(cluster: ReferenceCluster, body: Mapping[str, Any]) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        topics: dict[str, int] = {}
        if cluster.controller is not None:
            for tp in cluster.controller.assignments:
                topics[tp.topic] = max(topics.get(tp.topic, 0), tp.partition + 1)
        cluster.traffic.apply_skew(body, set(cluster.brokers), topics)
        return cluster.traffic.describe()

    return cluster.loop.call(run)


def append_records(cluster: ReferenceCluster, tp: TopicPartition, records: int, timeout: float = 30.0) -> int:
    """Write ``records`` records to a partition as a producer with ``acks=all`` does (any thread): at its
    leader, counted in the leader's produce meters, then wait until the in-sync followers have them;
    returns the new high watermark. On a cluster or topic without simulated traffic (``traffic.
    produce_bytes_per_sec`` 0, a topic skewed to 0) the log end is then exactly what was written, which
    tests comparing a Kafka client's offsets need (``POST /topics/{topic}/partitions/{p}/append``,
    ``{"records": N}``). ClusterError 404 for an unknown partition, 409 while it has no leader, 422 for a
    count below 1. The ``min.insync.replicas`` check of ``acks=all`` is not made."""
    if isinstance(records, bool) or not isinstance(records, int) or records < 1:
        raise ClusterError(422, 'append takes {"records": N} with N a positive integer')

    def write() -> int:
        leader = cluster._leader_of(tp)
        if leader is None:
            if tp not in cluster.metadata_view().assignments:
                raise ClusterError(404, f"unknown partition {tp}")
            raise ClusterError(409, f"partition {tp} has no leader")
        log = leader.logs[tp]
        log.leo += records
        counters = leader.counters
        counters.bytes_in[tp.topic] += records * cluster.settings.traffic.message_bytes
        counters.messages_in[tp.topic] += records
        counters.requests["Produce"] += 1
        return int(log.leo + 1e-9)

    end: int = cluster.loop.call(write)
    cluster.wait_until(
        lambda: (cluster.high_watermark(tp) or 0) >= end, timeout, f"high watermark {end} of {tp}"
    )
    return end
