"""Simulated consumer groups: members, positions and the offsets they commit to their coordinator.

A group consumes every partition of its topics. Its position in a partition moves at ``rate_factor``
times the partition's produce rate (1.0 keeps pace, 0.5 falls behind, 2.0 catches up) and never passes
the high watermark; every ``commit_interval_ms`` it commits its positions, as a consumer with
``enable.auto.commit`` does. A stopped group has no members and commits nothing; a stalled one keeps its
members and commits, but its offsets do not move. The coordinator of a group is the leader of the
``__consumer_offsets`` partition its name hashes to (:func:`offsets_partition`).

Offsets may also be committed from outside a group, over Kafka's protocol (OffsetCommit with generation
-1, as a consumer with partitions assigned by hand or ``kafka-consumer-groups --reset-offsets`` does,
:meth:`ConsumerGroups.commit`): a group nobody simulates then exists with its offsets only, ``Empty`` and
without a protocol type, as Kafka keeps it (:attr:`ConsumerGroups.standalone`).

Pure state: the cluster's loop drives it (:meth:`ConsumerGroups.commit_due`) with the log ends it reads
from the partitions' leaders. Nothing here touches a socket or ZooKeeper.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.embedded.reference_cluster.config import ConsumerGroupSpec
from collectors.kafka.model import TopicPartition

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_PARTITIONS = 50
"""``offsets.topic.num.partitions``'s default."""
OFFSETS_TOPIC_MAX_RF = 3
"""``offsets.topic.replication.factor``'s default (fewer when the cluster has fewer brokers)."""
OFFSETS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": "104857600",
}
"""What ``GroupMetadataManager.offsetsTopicConfigs`` gives the topic Kafka creates."""

GroupMode = Literal["running", "stopped", "stalled"]


class GroupError(ValueError):
    """A group request the cluster refuses; ``status`` is the control port's HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def java_string_hash_code(text: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@functools.lru_cache(maxsize=1 << 16)
def offsets_partition(group: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    """``GroupMetadataManager.partitionFor``: ``Utils.abs(groupId.hashCode) % partitions`` of
    ``__consumer_offsets`` (Kafka's ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0)."""
    h = java_string_hash_code(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, tuple[int, ...]], ...]
    """(topic, partitions) as the range assignor gives them."""


@dataclass(slots=True)
class SimGroup:
    spec: ConsumerGroupSpec
    rate_factor: float
    mode: GroupMode = "running"
    positions: dict[TopicPartition, float] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    last_advance_ms: float = 0.0
    next_commit_ms: float = 0.0
    generation: int = 1
    members: tuple[Member, ...] = ()
    commits: int = 0
    """Offset commits so far (a stalled group keeps committing the same offsets)."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def state(self) -> str:
        """The coordinator's ``GroupState`` name."""
        return "Empty" if self.mode == "stopped" else "Stable"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topics": list(self.spec.topics),
            "members": len(self.members),
            "state": self.state,
            "mode": self.mode,
            "rate_factor": self.rate_factor,
            "commit_interval_ms": self.spec.commit_interval_ms,
            "commits": self.commits,
            "committed": {f"{tp.topic}-{tp.partition}": o for tp, o in sorted(self.committed.items())},
        }


def range_assignment(members: int, partitions: Mapping[str, int]) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Kafka's ``RangeAssignor``: per topic, the partitions in order, split into ``members`` runs, the first
    ``n % members`` members taking one more."""
    result: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in range(members)]
    for topic in sorted(partitions):
        count = partitions[topic]
        per, extra = divmod(count, members)
        start = 0
        for m in range(members):
            n = per + (1 if m < extra else 0)
            if n:
                result[m].append((topic, tuple(range(start, start + n))))
            start += n
    return result


class ConsumerGroups:
    """The cluster's simulated groups, by name."""

    def __init__(self) -> None:
        self.groups: dict[str, SimGroup] = {}
        self.standalone: dict[str, dict[TopicPartition, tuple[int, str]]] = {}
        """Groups of committed offsets only (no simulated consumer): group -> partition -> (offset,
        metadata), as committed over Kafka's protocol."""

    def check_new(self, specs: Iterable[ConsumerGroupSpec], partitions: Mapping[str, int]) -> None:
        """Raises the GroupError :meth:`add` would raise for the first spec it refuses (a name taken, also
        by an earlier spec, or an unknown topic), so that several groups are added all or none."""
        names: set[str] = set()
        for spec in specs:
            if spec.name in self.groups or spec.name in names:
                raise GroupError(409, f"consumer group {spec.name!r} exists already")
            if spec.name in self.standalone:
                raise GroupError(
                    409,
                    f"consumer group {spec.name!r} exists already (offsets committed over Kafka's protocol)",
                )
            names.add(spec.name)
            unknown = sorted(t for t in spec.topics if t not in partitions)
            if unknown:
                raise GroupError(
                    422, f"unknown topic(s) {', '.join(unknown)} for consumer group {spec.name!r}"
                )

    def add(self, spec: ConsumerGroupSpec, partitions: Mapping[str, int], now_ms: float) -> SimGroup:
        self.check_new([spec], partitions)
        group = SimGroup(spec, spec.rate_factor, last_advance_ms=now_ms, next_commit_ms=now_ms)
        self.groups[spec.name] = group
        self._join(group, partitions)
        return group

    def get(self, name: str) -> SimGroup:
        group = self.groups.get(name)
        if group is None:
            raise GroupError(404, f"unknown consumer group {name!r}")
        return group

    @staticmethod
    def _join(group: SimGroup, partitions: Mapping[str, int]) -> None:
        counts = {t: partitions.get(t, 0) for t in group.spec.topics}
        assigned = range_assignment(group.spec.members, counts)
        group.members = tuple(
            Member(
                member_id=f"consumer-{group.name}-{i + 1}-{group.generation:08x}-{i:04x}",
                client_id=f"consumer-{group.name}-{i + 1}",
                client_host=f"/127.0.0.{(i % 250) + 1}",
                assignment=tuple(assigned[i]),
            )
            for i in range(group.spec.members)
        )

    def stop(self, name: str) -> None:
        group = self.get(name)
        if group.mode == "stopped":
            raise GroupError(409, f"consumer group {name!r} is stopped already")
        group.mode = "stopped"
        group.members = ()
        group.generation += 1

    def start(
        self, name: str, partitions: Mapping[str, int], now_ms: float, rate_factor: float | None
    ) -> None:
        group = self.get(name)
        if group.mode == "running" and rate_factor is None:
            raise GroupError(409, f"consumer group {name!r} is running already")
        if group.mode == "stopped":
            group.generation += 1
            self._join(group, partitions)
        group.mode = "running"
        group.last_advance_ms = now_ms
        if rate_factor is not None:
            group.rate_factor = rate_factor

    def stall(self, name: str, now_ms: float, log_end: Callable[[TopicPartition], int | None]) -> None:
        group = self.get(name)
        if group.mode != "running":
            raise GroupError(409, f"consumer group {name!r} is {group.mode}: only a running group stalls")
        self._advance(group, now_ms, log_end, lambda _tp: 0.0)
        group.mode = "stalled"
        self._commit(group)  # where it got stuck: every later commit repeats these offsets

    def slow(self, name: str, rate_factor: float) -> None:
        group = self.get(name)
        group.rate_factor = rate_factor

    def rewind(self, name: str, records: int) -> None:
        group = self.get(name)
        for tp, position in group.positions.items():
            if not math.isnan(position):
                group.positions[tp] = max(0.0, position - records)
                group.committed[tp] = int(group.positions[tp])

    def commit(self, name: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Offsets committed from outside the group (OffsetCommit with generation -1), as Kafka's group
        coordinator takes them: a group nobody simulates becomes (or stays) a group of offsets only; a
        simulated group takes them only while it has no member (stopped: ``Empty``), and resumes from
        them when started. GroupError(409) for a group with members (Kafka: ``UNKNOWN_MEMBER_ID``)."""
        group = self.groups.get(name)
        if group is None:
            self.standalone.setdefault(name, {}).update(offsets)
            return
        if group.mode != "stopped":
            raise GroupError(409, f"consumer group {name!r} has members: a commit from outside it is refused")
        for tp, (offset, _metadata) in offsets.items():
            group.committed[tp] = offset
            group.positions[tp] = float(offset)
        group.commits += 1

    def commit_due(
        self,
        now_ms: float,
        log_end: Callable[[TopicPartition], int | None],
        produce_rate: Callable[[TopicPartition], float],
        partitions: Callable[[str], int],
    ) -> None:
        """Advance and commit every group whose commit is due. ``log_end`` is a partition's high watermark
        at its leader (None while it has none), ``produce_rate`` its messages per second."""
        for group in self.groups.values():
            if group.mode == "stopped" or now_ms < group.next_commit_ms:
                continue
            group.next_commit_ms = now_ms + group.spec.commit_interval_ms
            self._add_new_partitions(group, partitions)
            self._advance(group, now_ms, log_end, produce_rate)
            self._commit(group)

    @staticmethod
    def _commit(group: SimGroup) -> None:
        for tp, position in group.positions.items():
            if not math.isnan(position):
                group.committed[tp] = int(position)
        group.commits += 1

    @staticmethod
    def _add_new_partitions(group: SimGroup, partitions: Callable[[str], int]) -> None:
        counts = {topic: partitions(topic) for topic in group.spec.topics}
        if sum(counts.values()) == len(group.positions):
            return  # no partition added since (a group's positions are its topics' partitions)
        for topic, count in counts.items():
            for p in range(count):
                group.positions.setdefault(TopicPartition(topic, p), math.nan)

    @staticmethod
    def _advance(
        group: SimGroup,
        now_ms: float,
        log_end: Callable[[TopicPartition], int | None],
        produce_rate: Callable[[TopicPartition], float],
    ) -> None:
        dt_s = max(0.0, now_ms - group.last_advance_ms) / 1000.0
        group.last_advance_ms = now_ms
        moving = group.mode == "running"
        for tp, position in group.positions.items():
            end = log_end(tp)
            if end is None:
                continue
            if math.isnan(position):
                group.positions[tp] = float(end)  # auto.offset.reset=latest: a new group starts at the end
                continue
            if moving:
                group.positions[tp] = min(float(end), position + group.rate_factor * produce_rate(tp) * dt_s)

    def coordinated_by(
        self, coordinator_of: Callable[[str], int | None], broker_id: int
    ) -> Iterable[SimGroup]:
        return (g for g in self.groups.values() if coordinator_of(g.name) == broker_id)
