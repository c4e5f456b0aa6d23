"""Builders of :mod:`collectors.kafka.model` objects for tests: cluster snapshots as ZooKeeper shows them.

Pure functions, no pytest: a test states only what is unusual about its cluster, the defaults making the
rest healthy. :func:`partition` defaults to a healthy partition (ISR = the replicas it had before any running
reassignment, leader = the first of them) and :func:`cluster` to three registered brokers (1, 2, 3),
controller 1 (epoch 5), one ``TopicInfo`` per topic named, no pending admin operation::

    snapshot = cluster(partition("t", 0, [1, 2, 3], isr=[1, 2]), brokers=[1, 2, 3, 4])

A file whose tests share other defaults binds them once, e.g.
``cluster = functools.partial(snapshots.cluster, brokers=(1, 2, 3, 4))``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from collectors.kafka.model import (
    NO_LEADER,
    BrokerEndpoint,
    BrokerRegistration,
    ClusterSnapshot,
    ControllerInfo,
    LeaderAndIsr,
    LeaderRecoveryState,
    PartitionInfo,
    PendingOperations,
    ReplicaAssignment,
    TopicInfo,
    TopicPartition,
)

DEFAULT_BROKERS: tuple[int, ...] = (1, 2, 3)
"""The brokers :func:`cluster` registers unless told otherwise."""

DEFAULT_CONTROLLER = ControllerInfo(1, 5)
"""The controller :func:`cluster` reports unless told otherwise: broker 1, controller epoch 5."""

DEFAULT_CLUSTER_ID = "c"


def broker(broker_id: int, rack: str | None = None) -> BrokerRegistration:
    """The registration of a broker with one PLAINTEXT listener on ``b<id>:9092``."""
    return BrokerRegistration(broker_id, (BrokerEndpoint("PLAINTEXT", f"b{broker_id}", 9092),), rack=rack)


def partition(
    topic: str,
    index: int,
    replicas: Iterable[int] | ReplicaAssignment,
    isr: Iterable[int] | None = None,
    leader: int | None = None,
    *,
    adding: Iterable[int] = (),
    removing: Iterable[int] = (),
    with_state: bool = True,
    leader_epoch: int = 1,
    controller_epoch: int = 1,
    recovering: bool = False,
    state_error: str | None = None,
) -> PartitionInfo:
    """Partition ``topic-index`` on ``replicas`` (broker ids, AR order, or a whole ``ReplicaAssignment``).

    ``adding`` and ``removing`` mark a running reassignment when ``replicas`` are broker ids. The ISR
    defaults to the origin replicas (AR without the ones being added), the leader to the first ISR member,
    else -1 (:data:`~collectors.kafka.model.NO_LEADER`). ``with_state=False`` leaves out the state znode (a
    partition no controller has initialised yet); ``recovering`` sets its ``leader_recovery_state``;
    ``state_error`` makes the state znode one that exists but cannot be read (the reason).
    """
    if isinstance(replicas, ReplicaAssignment):
        if adding or removing:
            raise ValueError("adding and removing go with broker ids, not with a ReplicaAssignment")
        assignment = replicas
    else:
        assignment = ReplicaAssignment(tuple(replicas), tuple(adding), tuple(removing))
    isr_ids = tuple(assignment.origin_replicas if isr is None else isr)
    if leader is None:
        leader = isr_ids[0] if isr_ids else NO_LEADER
    recovery = LeaderRecoveryState.RECOVERING if recovering else LeaderRecoveryState.RECOVERED
    state = LeaderAndIsr(leader, leader_epoch, isr_ids, controller_epoch, recovery) if with_state else None
    if state_error is not None:
        state = None
    return PartitionInfo(TopicPartition(topic, index), assignment, state, state_error)


def cluster(
    *partitions: PartitionInfo,
    brokers: Iterable[int] = DEFAULT_BROKERS,
    racks: Mapping[int, str] | None = None,
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    deleting: Iterable[str] = (),
    topics: Mapping[str, TopicInfo] | None = None,
    broker_default: Mapping[str, str] | None = None,
    pending: PendingOperations | None = None,
    controller: ControllerInfo | None = None,
    cluster_id: str | None = DEFAULT_CLUSTER_ID,
    version: int = 1,
    taken_at: float = 0.0,
    last_good_at: float | None = 0.0,
) -> ClusterSnapshot:
    """A snapshot, in sync, of ``partitions`` on the registered ``brokers`` (rack from ``racks``, if any).

    ``topics`` defaults to a ``TopicInfo`` for every topic that has a partition or an entry in
    ``topic_configs`` (its config), marked for deletion if in ``deleting``; pass ``topics`` to give them
    as they are instead (``{}``: no topic znode read), without ``topic_configs`` or ``deleting``.
    ``broker_default`` is the cluster-wide broker config (``/config/brokers/<default>``); ``controller``
    defaults to :data:`DEFAULT_CONTROLLER`.
    """
    marked = set(deleting)
    if topics is None:
        configs = topic_configs or {}
        names = {p.tp.topic for p in partitions} | set(configs)
        topics = {
            n: TopicInfo(n, config=dict(configs.get(n, {})), marked_for_deletion=n in marked) for n in names
        }
    elif topic_configs is not None or marked:
        raise ValueError("give topics, or topic_configs and deleting, not both")
    rack_of = racks or {}
    return ClusterSnapshot(
        version=version,
        taken_at=taken_at,
        last_good_at=last_good_at,
        stale=False,
        cluster_id=cluster_id,
        brokers={b: broker(b, rack_of.get(b)) for b in brokers},
        controller=DEFAULT_CONTROLLER if controller is None else controller,
        topics=topics,
        partitions={p.tp: p for p in partitions},
        broker_configs={} if broker_default is None else {"<default>": dict(broker_default)},
        pending=PendingOperations() if pending is None else pending,
    )
