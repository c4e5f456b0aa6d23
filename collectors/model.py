"""Types shared by every layer of kafka-health (collectors ← analytics ← app).

Names follow Kafka's own vocabulary: a partition has ``replicas`` (the assigned replicas, AR, whose first
entry is the preferred leader), an ``isr``, a ``leader`` (-1 when there is none) and a ``leader_epoch``.
"""

from __future__ import annotations

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
