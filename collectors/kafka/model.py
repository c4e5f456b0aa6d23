"""Types shared by every layer of kafka-health (collectors ← analytics ← app).

Names follow Kafka's own vocabulary: a partition has ``replicas`` (the assigned replicas, AR, whose first
entry is the preferred leader), an ``isr``, a ``leader`` (-1 when there is none) and a ``leader_epoch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

NO_LEADER = -1
"""Kafka's ``LeaderAndIsr.NoLeader``: the partition is offline."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class LeaderRecoveryState:
    """Values of ``leader_recovery_state`` in the partition state znode (Kafka 3.2+, KIP-704)."""

    RECOVERED = 0
    RECOVERING = 1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The content of ``/brokers/topics/<T>/partitions/<P>/state``.

    ``zk_version`` is the znode's version (Kafka's partition epoch), the token of every compare-and-set
    write; it is -1 for a state that has not been written yet.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED
    zk_version: int = -1

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """One partition's entry in the topic znode: AR plus, during a reassignment, adding/removing."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas a running reassignment moves to (AR without the ones being removed)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        """The replicas before the running reassignment (AR without the ones being added)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @staticmethod
    def for_reassignment(origin: tuple[int, ...], target: tuple[int, ...]) -> ReplicaAssignment:
        """Kafka's ``ReplicaAssignment.fromOriginAndTarget``: RS = (target ++ origin).distinct."""
        replicas = tuple(dict.fromkeys(target + origin))
        return ReplicaAssignment(
            replicas=replicas,
            adding_replicas=tuple(r for r in replicas if r not in origin),
            removing_replicas=tuple(r for r in replicas if r not in target),
        )


DEFAULT_INTER_BROKER_LISTENER = "PLAINTEXT"
"""Kafka's inter-broker listener when ``inter.broker.listener.name`` is not set: the listener named after
``security.inter.broker.protocol``, whose default is PLAINTEXT (``KafkaConfig.interBrokerListenerName``)."""


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        """Kafka's ``EndPoint.connectionString``: IPv6 hosts in brackets (``Utils.formatAddress``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """The content of ``/brokers/ids/<id>``; ``broker_epoch`` is the znode's czxid (-1 if unknown)."""

    id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    features: dict[str, dict[str, int]] = field(default_factory=dict)
    version: int = 5
    broker_epoch: int = -1

    @property
    def host(self) -> str | None:
        """Top-level host as Kafka writes it: the first PLAINTEXT endpoint's, else null."""
        plaintext = self._plaintext()
        return plaintext.host if plaintext else None

    @property
    def port(self) -> int:
        plaintext = self._plaintext()
        return plaintext.port if plaintext else -1

    def _plaintext(self) -> BrokerEndpoint | None:
        return next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)

    def endpoint(self, listener: str | None = None) -> BrokerEndpoint | None:
        """The endpoint whose host and port kafka-health shows and puts in ``{host}``/``{port}``.

        With ``listener``, that listener's endpoint (None when the broker has no such listener: the caller
        says so rather than guess another address). Without, the inter-broker listener as far as it can be
        known: no znode records ``inter.broker.listener.name`` (not the broker's registration, v1-v5, nor
        ``/controller``), so this is :data:`DEFAULT_INTER_BROKER_LISTENER`, the one Kafka uses when neither
        it nor ``security.inter.broker.protocol`` is set, if the broker has it; else the first endpoint
        (the first of ``advertised.listeners``). The top-level ``host``/``port`` are not used: they are null
        and -1 on a broker without a PLAINTEXT listener.
        """
        if listener is not None:
            return next((e for e in self.endpoints if e.listener == listener), None)
        default = next((e for e in self.endpoints if e.listener == DEFAULT_INTER_BROKER_LISTENER), None)
        return default if default is not None else (self.endpoints[0] if self.endpoints else None)


# --- the cluster snapshot ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as ZooKeeper shows it: its assignment (topic znode) and its state znode (None when
    the state znode does not exist: a new partition no controller has initialised).

    ``state_error`` says why a state znode that exists could not be read (not JSON, not Kafka's format,
    no read permission): the partition's state is then *unknown*, which is not the same as offline (an
    unreadable znode says nothing about the leader; paging for an outage on it would be a false alarm).
    """

    tp: TopicPartition
    assignment: ReplicaAssignment
    state: LeaderAndIsr | None = None
    state_error: str | None = None

    @property
    def state_unknown(self) -> bool:
        return self.state_error is not None

    @property
    def replicas(self) -> tuple[int, ...]:
        return self.assignment.replicas

    @property
    def leader(self) -> int:
        return self.state.leader if self.state is not None else NO_LEADER

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """``/controller`` and ``/controller_epoch``; ``broker_id`` None when no controller is active."""

    broker_id: int | None = None
    epoch: int | None = None
    epoch_zk_version: int | None = None
    kraft_controller_epoch: int | None = None
    """``kraftControllerEpoch`` (Kafka 3.4+): -1 for a ZK-mode controller, None before 3.4; >= 0 when a
    KRaft controller holds ``/controller`` during a ZK→KRaft migration, ``broker_id`` then being its node
    id (not in ``/brokers/ids``)."""

    @property
    def is_kraft(self) -> bool:
        """A KRaft controller (KIP-866 migration) holds ``/controller``."""
        return (
            self.broker_id is not None
            and self.kraft_controller_epoch is not None
            and self.kraft_controller_epoch >= 0
        )


@dataclass(frozen=True, slots=True)
class MigrationState:
    """``/migration``, written by the KRaft controller during a ZK→KRaft migration (KIP-866, Kafka 3.4+).

    ``kraft_metadata_offset``/``kraft_metadata_epoch`` are the offset and epoch of the last KRaft metadata
    record the controller wrote to ZooKeeper: -1 until the metadata has been migrated. ``zk_version`` is the
    znode's data version (how many times the controller updated it).
    """

    kraft_controller_id: int
    kraft_controller_epoch: int
    kraft_metadata_offset: int
    kraft_metadata_epoch: int
    version: int = 0
    zk_version: int = -1

    @property
    def metadata_migrated(self) -> bool:
        return self.kraft_metadata_offset >= 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    marked_for_deletion: bool = False


@dataclass(frozen=True, slots=True)
class PendingOperations:
    """Admin znodes present at the time of the snapshot."""

    preferred_election: tuple[TopicPartition, ...] = ()
    reassignments: Mapping[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    deletions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ZnodeError:
    """A znode that could not be read as Kafka writes it: recorded and skipped."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class LogDirEvent:
    """A child of ``/log_dir_event_notification`` (Kafka's ``LogDirEventNotificationZNode``): broker
    ``broker`` reported a failed log dir, notification number ``sequence`` (``log_dir_event_<sequence>``).
    Transient: the controller deletes it once it has handled it (the broker's offline replicas)."""

    broker: int
    sequence: int


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """An immutable view of a cluster's ZooKeeper state. Each change produces a new ``version``.

    ``taken_at`` is when this version was produced (epoch seconds); ``last_good_at`` when the collector
    last knew itself in sync with ZooKeeper (None before the first full scan), and ``stale`` is true while
    it is not (session lost, resync running), so a reader always knows how old the truth may be.
    """

    version: int
    taken_at: float
    last_good_at: float | None
    stale: bool
    cluster_id: str | None
    brokers: Mapping[int, BrokerRegistration]
    controller: ControllerInfo
    topics: Mapping[str, TopicInfo]
    partitions: Mapping[TopicPartition, PartitionInfo]
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """``/config/brokers/<id>`` and ``<default>``, keyed by entity name."""
    pending: PendingOperations = field(default_factory=PendingOperations)
    errors: tuple[ZnodeError, ...] = ()
    migration: MigrationState | None = None
    """``/migration`` (None when absent: no ZK→KRaft migration was ever started on this cluster)."""
    log_dir_events: tuple[LogDirEvent, ...] = ()
    """The log dir failure notifications not yet handled by the controller, by sequence."""
    log_dir_event_sequence: int | None = None
    """The highest ``log_dir_event_<sequence>`` number listed under ``/log_dir_event_notification`` since
    the collector started (None: none yet). It advances with every new notification, even one the controller
    deleted before its data (the broker) could be read, which then is in no :attr:`log_dir_events`: a
    reader learns that some broker's log dir failed just now, not which (the brokers' offline-log-dir gauges
    say)."""

    def age(self, now: float) -> float | None:
        """Seconds since the snapshot was last known good (None if it never was)."""
        return None if self.last_good_at is None else max(0.0, now - self.last_good_at)
