"""Bulk mode, the pure part: the spec of a large cluster, its plan (placement, faults, ids) and the
stream of znode operations that writes it exactly as ZK-mode Kafka would have.

No I/O here: :mod:`app.embedded.reference_cluster.bulk.writer` sends the operations to ZooKeeper.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from kazoo.protocol.serialization import Create, Delete, SetData

from app.embedded.reference_cluster.config import validate_topic_name
from collectors.kafka import zkdata
from collectors.kafka.model import (
    NO_LEADER,
    BrokerEndpoint,
    BrokerRegistration,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicPartition,
)
from collectors.kafka.placement import assign_replicas

MAX_MULTI_BYTES = 256 * 1024
"""A transaction's payload stays far below ZooKeeper's 1 MiB ``jute.maxbuffer``."""
MAX_ZNODE_BYTES = 1024 * 1024 - 1024
BROKER_PORT = 9092
_OP_OVERHEAD_BYTES = 64


class BulkWriteError(Exception):
    """The bulk write failed; the target may hold part of a cluster (write again with overwrite=True)."""


class ClusterExistsError(BulkWriteError):
    """The target already holds a Kafka cluster and ``overwrite`` was not asked for."""


class FaultKind(IntEnum):
    """What the spec's fault fractions did to a partition's state."""

    NONE = 0
    UNDER_REPLICATED = 1
    OFFLINE = 2
    NON_PREFERRED = 3


# --- the spec ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkClusterSpec:
    """The cluster to write; the same spec (seed included) always gives the same cluster.

    Brokers have ids ``0..brokers-1``. Placement is :func:`assign_replicas` over the topics in order
    (``topic_name(0)``, ``topic_name(1)``, ...) with one ``random.Random(seed)`` (rack-aware when ``racks`` >
    0: broker i is in ``rack-{i % racks}``). Each fault fraction marks ``round(fraction × partitions)``
    partitions, drawn at random without overlap:

    * under-replicated: the ISR lacks the last replica (a follower fell behind), leader epoch 0;
    * offline: leader -1 and ISR ``[replicas[0]]``, leader epoch 1 (the leader died as the last ISR member);
    * non-preferred: ``replicas[1]`` leads, leader epoch 1, ISR ``replicas[1:] + replicas[:1]`` (the
      preferred leader failed over and later rejoined the ISR at its end).
    """

    brokers: int = 1000
    topics: int = 1000
    partitions_per_topic: int = 200
    replication_factor: int = 3
    racks: int = 0
    under_replicated_fraction: float = 0.0
    offline_fraction: float = 0.0
    non_preferred_fraction: float = 0.0
    seed: int = 0
    topic_prefix: str = "bulk-topic-"
    broker_registration_version: int = 5
    controller_id: int = 0
    controller_epoch: int = 1
    topic_configs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_counts(self)
        _check_fractions(self)
        _check_kafka_fields(self)

    @property
    def partitions(self) -> int:
        return self.topics * self.partitions_per_topic

    def topic_name(self, index: int) -> str:
        """Zero-padded, so that names sort as the topics were created."""
        return f"{self.topic_prefix}{index:0{len(str(self.topics - 1))}d}"

    def broker_racks(self) -> dict[int, str | None]:
        return {b: f"rack-{b % self.racks}" if self.racks else None for b in range(self.brokers)}

    def fault_counts(self) -> dict[FaultKind, int]:
        """Partitions per fault kind: ``round(fraction × partitions)``, capped at what is left."""
        counts: dict[FaultKind, int] = {}
        left = self.partitions
        for kind, fraction in self._fractions().items():
            counts[kind] = min(round(fraction * self.partitions), left)
            left -= counts[kind]
        return counts

    def _fractions(self) -> dict[FaultKind, float]:
        return {
            FaultKind.UNDER_REPLICATED: self.under_replicated_fraction,
            FaultKind.OFFLINE: self.offline_fraction,
            FaultKind.NON_PREFERRED: self.non_preferred_fraction,
        }


def _check_counts(spec: BulkClusterSpec) -> None:
    for name in ("brokers", "topics", "partitions_per_topic", "replication_factor"):
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
    if spec.replication_factor > spec.brokers:
        raise ValueError(
            f"replication_factor {spec.replication_factor} is larger than "
            f"the number of brokers {spec.brokers}"
        )
    if spec.racks < 0:
        raise ValueError(f"racks must be 0 (no racks) or more, got {spec.racks}")


def _check_fractions(spec: BulkClusterSpec) -> None:
    fractions = {f"{kind.name.lower()}_fraction": value for kind, value in spec._fractions().items()}
    for name, value in fractions.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {value}")
    total = sum(fractions.values())
    if total > 1.0 + 1e-9:
        parts = " + ".join(f"{name} {value:g}" for name, value in fractions.items())
        raise ValueError(f"the fault fractions add up to {total:g} ({parts}); their sum must not exceed 1")
    for name in ("under_replicated_fraction", "non_preferred_fraction"):
        if fractions[name] > 0 and spec.replication_factor < 2:
            raise ValueError(f"{name} needs replication_factor >= 2: a single replica has no follower")


def _check_kafka_fields(spec: BulkClusterSpec) -> None:
    validate_topic_name(spec.topic_name(spec.topics - 1))
    if spec.broker_registration_version not in zkdata.BROKER_REGISTRATION_VERSIONS:
        raise ValueError(
            f"broker_registration_version must be one of {zkdata.BROKER_REGISTRATION_VERSIONS}, "
            f"got {spec.broker_registration_version}"
        )
    if spec.racks and spec.broker_registration_version < 3:
        raise ValueError("racks need broker_registration_version >= 3 (racks were added in v3)")
    if not 0 <= spec.controller_id < spec.brokers:
        raise ValueError(
            f"controller_id must be a broker id (0..{spec.brokers - 1}), got {spec.controller_id}"
        )
    if spec.controller_epoch < 1:
        raise ValueError(f"controller_epoch must be at least 1, got {spec.controller_epoch}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in spec.topic_configs.items()):
        raise ValueError("topic_configs keys and values must be strings, as Kafka stores them")


# --- the plan (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicPlan:
    name: str
    topic_id: str
    replicas: dict[int, list[int]]
    faults: dict[int, FaultKind]
    """Only the partitions with a fault."""


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    cluster_id: str
    topics: list[TopicPlan]


def plan_cluster(spec: BulkClusterSpec) -> ClusterPlan:
    """Everything random about the cluster, drawn from the seed: placement, faults, cluster and topic ids."""
    placement_rng = random.Random(spec.seed)
    id_rng = random.Random(f"{spec.seed}/ids")
    faults = _draw_faults(spec)
    cluster_id = seeded_kafka_uuid(id_rng)
    brokers: Sequence[int] | dict[int, str | None] = (
        spec.broker_racks() if spec.racks else range(spec.brokers)
    )
    topics = []
    for index in range(spec.topics):
        replicas = assign_replicas(
            spec.partitions_per_topic, spec.replication_factor, brokers, rng=placement_rng
        )
        topic_id = seeded_kafka_uuid(id_rng)
        topics.append(TopicPlan(spec.topic_name(index), topic_id, replicas, faults.get(index, {})))
    return ClusterPlan(cluster_id, topics)


def _draw_faults(spec: BulkClusterSpec) -> dict[int, dict[int, FaultKind]]:
    """Topic index → partition → fault kind, for the partitions drawn for a fault."""
    counts = spec.fault_counts()
    chosen = random.Random(f"{spec.seed}/faults").sample(range(spec.partitions), sum(counts.values()))
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    faults: dict[int, dict[int, FaultKind]] = {}
    for index, kind in zip(chosen, kinds, strict=True):
        topic, partition = divmod(index, spec.partitions_per_topic)
        faults.setdefault(topic, {})[partition] = kind
    return faults


def seeded_kafka_uuid(rng: random.Random) -> str:
    """Kafka's ``Uuid`` text from ``rng``: 22 URL-safe base64 characters, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def initial_state(replicas: Sequence[int], controller_epoch: int) -> LeaderAndIsr:
    """What the controller writes at topic creation: the preferred replica leads, every replica in sync."""
    return LeaderAndIsr(
        leader=replicas[0], leader_epoch=0, isr=tuple(replicas), controller_epoch=controller_epoch
    )


def faulted_state(kind: FaultKind, replicas: Sequence[int], controller_epoch: int) -> LeaderAndIsr:
    """The state after the fault (see :class:`BulkClusterSpec`)."""
    if kind == FaultKind.UNDER_REPLICATED:
        return LeaderAndIsr(replicas[0], 0, tuple(replicas[:-1]), controller_epoch)
    if kind == FaultKind.OFFLINE:
        return LeaderAndIsr(NO_LEADER, 1, (replicas[0],), controller_epoch)
    if kind == FaultKind.NON_PREFERRED:
        return LeaderAndIsr(replicas[1], 1, (*replicas[1:], replicas[0]), controller_epoch)
    return initial_state(replicas, controller_epoch)


# --- the operations ----------------------------------------------------------------------------------


class Op(NamedTuple):
    """One znode write; ``data=None`` is a null payload, as Kafka writes for its intermediate znodes."""

    kind: type[Create] | type[SetData] | type[Delete]
    path: str
    data: bytes | None = None


def create_op(path: str, data: bytes | None = None) -> Op:
    return Op(Create, path, data)


def persistent_paths_with_parents() -> list[str]:
    """Kafka's persistent paths and their parents, parents first."""
    paths: set[str] = set()
    for path in zkdata.PERSISTENT_PATHS:
        parts = path.strip("/").split("/")
        paths.update("/" + "/".join(parts[: i + 1]) for i in range(len(parts)))
    return sorted(paths, key=lambda p: (p.count("/"), p))


def broker_registration(spec: BulkClusterSpec, broker_id: int, timestamp_ms: int) -> BrokerRegistration:
    return BrokerRegistration(
        id=broker_id,
        endpoints=(BrokerEndpoint("PLAINTEXT", f"broker-{broker_id}.bulk", BROKER_PORT),),
        rack=f"rack-{broker_id % spec.racks}" if spec.racks else None,
        timestamp_ms=timestamp_ms,
        version=spec.broker_registration_version,
    )


def cluster_ops(spec: BulkClusterSpec, plan: ClusterPlan) -> Iterator[Op]:
    """Cluster id, broker registrations, then the controller, in the order a starting cluster writes them.

    ``/brokers/ids/<id>`` and ``/controller`` are ephemeral in Kafka; here they are persistent, because an
    ephemeral znode would vanish with the writer's session. ``/controller_epoch`` is created with 0 and
    set to the epoch, as Kafka's first controller election does, so its version is 1.
    """
    now = zkdata.now_ms()
    yield create_op("/cluster")
    yield create_op(zkdata.CLUSTER_ID_PATH, zkdata.encode_cluster_id(plan.cluster_id))
    for broker_id in range(spec.brokers):
        data = zkdata.encode_broker_registration(broker_registration(spec, broker_id, now))
        yield create_op(zkdata.broker_path(broker_id), data)
    yield create_op(zkdata.CONTROLLER_EPOCH_PATH, zkdata.encode_controller_epoch(0))
    yield create_op(zkdata.CONTROLLER_PATH, zkdata.encode_controller(spec.controller_id, timestamp_ms=now))
    yield Op(SetData, zkdata.CONTROLLER_EPOCH_PATH, zkdata.encode_controller_epoch(spec.controller_epoch))


def topic_ops(spec: BulkClusterSpec, topic: TopicPlan) -> Iterator[Op]:
    """A topic as Kafka creates it: config, assignment, then the controller's partition znodes.

    A faulted partition's state is created healthy and then updated once, so its znode version (the
    partition epoch) is 1, as after a real change.
    """
    assignment = {p: ReplicaAssignment(tuple(r)) for p, r in topic.replicas.items()}
    yield create_op(zkdata.topic_config_path(topic.name), zkdata.encode_config(spec.topic_configs))
    yield create_op(zkdata.topic_path(topic.name), zkdata.encode_topic(assignment, topic.topic_id))
    yield create_op(zkdata.topic_partitions_path(topic.name))
    for partition, replicas in topic.replicas.items():
        tp = TopicPartition(topic.name, partition)
        state_path = zkdata.partition_state_path(tp)
        yield create_op(zkdata.partition_path(tp))
        yield create_op(
            state_path, zkdata.encode_partition_state(initial_state(replicas, spec.controller_epoch))
        )
        kind = topic.faults.get(partition)
        if kind is not None:
            state = faulted_state(kind, replicas, spec.controller_epoch)
            yield Op(SetData, state_path, zkdata.encode_partition_state(state))


def batches(ops: Iterable[Op], batch_ops: int, max_bytes: int = MAX_MULTI_BYTES) -> Iterator[list[Op]]:
    """Consecutive ops in transactions of at most ``batch_ops`` ops and about ``max_bytes`` of payload."""
    batch: list[Op] = []
    size = 0
    for op in ops:
        op_size = len(op.path) + len(op.data or b"") + _OP_OVERHEAD_BYTES
        if len(op.data or b"") > MAX_ZNODE_BYTES:
            raise BulkWriteError(f"{op.path}: {len(op.data or b'')} bytes exceed ZooKeeper's jute.maxbuffer")
        if batch and (len(batch) >= batch_ops or size + op_size > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(op)
        size += op_size
    if batch:
        yield batch
