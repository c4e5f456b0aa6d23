"""Planning a preferred replica leader election: which partitions, which not and why, and the znode payloads.

Pure functions over a :class:`ClusterSnapshot`; the executor that writes
``/admin/preferred_replica_election`` and waits for the controller to delete it lives elsewhere.

The eligibility rules are the ZK-mode controller's (``KafkaController.processReplicaLeaderElection`` and the
preferred strategy of ``PartitionLeaderElectionAlgorithms``, docs/kafka-reference.md §2), checked in its
order: an unknown partition is skipped, then a partition of a topic queued for deletion, then one already led
by its preferred replica (``ELECTION_NOT_NEEDED``); the rest are elected only if ``replicas[0]`` is alive
(registered) and in the ISR. A partition without a state znode has no leadership the controller could
compare, so it is reported as ``no state`` before the leader check.

Kafka's own tool writes one znode with every partition of the request; past ``jute.maxbuffer`` (about
1 MiB, reached somewhere between 20k and 35k partitions) ZooKeeper refuses it, so :func:`chunk_payloads`
splits the request into payloads under a byte budget, one written after the controller deleted the last.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from app.actions.reassignment import Problem
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, PartitionInfo, TopicPartition
from collectors.kafka.zkdata import encode_partition_list

ALREADY_LEADER = "already leader"
PREFERRED_REPLICA_DEAD = "preferred replica dead"
PREFERRED_REPLICA_NOT_IN_ISR = "preferred replica not in ISR"
NO_STATE = "no state"
TOPIC_BEING_DELETED = "topic being deleted"
UNKNOWN_PARTITION = "unknown partition"
NO_REPLICAS = "no replicas"
INELIGIBLE_REASONS = (
    UNKNOWN_PARTITION,
    TOPIC_BEING_DELETED,
    NO_REPLICAS,
    NO_STATE,
    ALREADY_LEADER,
    PREFERRED_REPLICA_DEAD,
    PREFERRED_REPLICA_NOT_IN_ISR,
)
"""Why a partition is not elected, in the order the checks run (the first that applies is reported)."""

ELECTED = "elected"
NOT_ELECTED = "preferred replica eligible but not leader"
""":func:`verify_election`: the election could have succeeded but the leader is still another replica (the
controller has not processed the chunk yet, or the leader changed again since)."""

DEFAULT_BUDGET_BYTES = 512 * 1024
"""Half of ZooKeeper's default ``jute.maxbuffer``: the request packet also carries the path and the ACLs."""
JUTE_MAXBUFFER = 0xFFFFF
"""ZooKeeper's default ``jute.maxbuffer`` (1 MiB - 1): no znode payload can be larger."""

ScopeKind = Literal["all", "topics", "partitions"]
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ElectionScope:
    """Which partitions an election is asked for: every partition, those of some topics, or a list."""

    kind: ScopeKind = "all"
    topics: tuple[str, ...] = ()
    partitions: tuple[TopicPartition, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("all", "topics", "partitions"):
            raise ValueError(f"election scope must be all, topics or partitions, got {self.kind!r}")
        if self.topics and self.kind != "topics":
            raise ValueError(f"an election scope of kind {self.kind!r} takes no topics")
        if self.partitions and self.kind != "partitions":
            raise ValueError(f"an election scope of kind {self.kind!r} takes no partitions")

    @classmethod
    def all_partitions(cls) -> ElectionScope:
        return cls("all")

    @classmethod
    def of_topics(cls, topics: Iterable[str]) -> ElectionScope:
        return cls("topics", topics=tuple(topics))

    @classmethod
    def of_partitions(cls, partitions: Iterable[TopicPartition]) -> ElectionScope:
        return cls("partitions", partitions=tuple(TopicPartition(*tp) for tp in partitions))


@dataclass(frozen=True, slots=True)
class ElectionPlan:
    """The dry run of a preferred replica election."""

    scope: ElectionScope
    to_elect: tuple[TopicPartition, ...]
    """Partitions whose preferred replica will take over leadership, sorted."""
    ineligible: tuple[tuple[TopicPartition, str], ...]
    """Partitions in scope that will not change leader, with the reason (one of ``INELIGIBLE_REASONS``)."""
    current_leaders: Mapping[int, int]
    """Partitions led per broker now (every registered broker listed, 0 included)."""
    predicted_leaders: Mapping[int, int]
    """Partitions led per broker once ``to_elect`` is done."""
    problems: tuple[Problem, ...] = ()
    """What is wrong with the scope itself (unknown topics or partitions, duplicates, nothing named)."""
    election_in_progress: tuple[TopicPartition, ...] = field(default=())
    """The content of ``/admin/preferred_replica_election`` if one is pending: nothing may be written then."""

    def ineligible_by_reason(self) -> dict[str, list[TopicPartition]]:
        grouped: dict[str, list[TopicPartition]] = {}
        for tp, reason in self.ineligible:
            grouped.setdefault(reason, []).append(tp)
        return grouped


# --- scope -------------------------------------------------------------------------------------------


def validate_scope(snapshot: ClusterSnapshot, scope: ElectionScope) -> list[Problem]:
    """Every problem with the scope at once: nothing named, duplicates (Kafka's tool refuses those too),
    unknown topics, unknown partitions."""
    problems: list[Problem] = []
    if scope.kind == "topics":
        if not scope.topics:
            problems.append(Problem("empty_scope", "the election scope names no topic"))
        for topic in _duplicates(scope.topics):
            problems.append(Problem("duplicate_topic", f"topic {topic} is named more than once", topic))
        known = _topics_with_partitions(snapshot)
        for topic in dict.fromkeys(scope.topics):
            if topic not in known:
                problems.append(Problem("unknown_topic", f"topic {topic} does not exist", topic))
    elif scope.kind == "partitions":
        if not scope.partitions:
            problems.append(Problem("empty_scope", "the election scope names no partition"))
        for tp in _duplicates(scope.partitions):
            problems.append(
                Problem(
                    "duplicate_partition", f"partition {tp} is named more than once", tp.topic, tp.partition
                )
            )
        for tp in dict.fromkeys(scope.partitions):
            if tp not in snapshot.partitions:
                problems.append(
                    Problem("unknown_partition", f"partition {tp} does not exist", tp.topic, tp.partition)
                )
    return problems


def _duplicates(items: Sequence[_T]) -> list[_T]:
    return [item for item, count in Counter(items).items() if count > 1]


def _topics_with_partitions(snapshot: ClusterSnapshot) -> set[str]:
    return {tp.topic for tp in snapshot.partitions}


def scope_partitions(snapshot: ClusterSnapshot, scope: ElectionScope) -> list[TopicPartition]:
    """The partitions a scope names, each once: sorted for ``all`` and ``topics``, as given otherwise."""
    if scope.kind == "partitions":
        return list(dict.fromkeys(scope.partitions))
    if scope.kind == "all":
        return sorted(snapshot.partitions)
    wanted = set(scope.topics)
    return sorted(tp for tp in snapshot.partitions if tp.topic in wanted)


# --- eligibility -------------------------------------------------------------------------------------


def _deleting_topics(snapshot: ClusterSnapshot) -> frozenset[str]:
    marked = {name for name, topic in snapshot.topics.items() if topic.marked_for_deletion}
    return frozenset(marked.union(snapshot.pending.deletions))


def ineligibility(
    info: PartitionInfo | None, deleting: frozenset[str], live: Mapping[int, object]
) -> str | None:
    """Why the controller would not move this partition's leadership to ``replicas[0]`` (None: it would)."""
    if info is None:
        return UNKNOWN_PARTITION
    if info.tp.topic in deleting:
        return TOPIC_BEING_DELETED
    replicas = info.assignment.replicas
    if not replicas:
        return NO_REPLICAS
    state = info.state
    if state is None:
        return NO_STATE
    preferred = replicas[0]
    if state.leader == preferred:
        return ALREADY_LEADER
    if preferred not in live:
        return PREFERRED_REPLICA_DEAD
    if preferred not in state.isr:
        return PREFERRED_REPLICA_NOT_IN_ISR
    return None


def leader_counts(snapshot: ClusterSnapshot) -> dict[int, int]:
    """Partitions led per broker: every registered broker (0 included) and any other broker a state names."""
    counts = dict.fromkeys(sorted(snapshot.brokers), 0)
    for info in snapshot.partitions.values():
        leader = info.leader
        if leader != NO_LEADER:
            counts[leader] = counts.get(leader, 0) + 1
    return counts


def plan_preferred_election(snapshot: ClusterSnapshot, scope: ElectionScope) -> ElectionPlan:
    """The dry run: partitions to elect, the ineligible ones with the reason, leaders per broker after."""
    deleting = _deleting_topics(snapshot)
    to_elect: list[TopicPartition] = []
    ineligible: list[tuple[TopicPartition, str]] = []
    for tp in scope_partitions(snapshot, scope):
        reason = ineligibility(snapshot.partitions.get(tp), deleting, snapshot.brokers)
        if reason is None:
            to_elect.append(tp)
        else:
            ineligible.append((tp, reason))
    current = leader_counts(snapshot)
    predicted = dict(current)
    for tp in to_elect:
        info = snapshot.partitions[tp]
        if info.leader != NO_LEADER:
            predicted[info.leader] -= 1
        preferred = info.assignment.replicas[0]
        predicted[preferred] = predicted.get(preferred, 0) + 1
    return ElectionPlan(
        scope=scope,
        to_elect=tuple(sorted(to_elect)),
        ineligible=tuple(ineligible),
        current_leaders=current,
        predicted_leaders=dict(sorted(predicted.items())),
        problems=tuple(validate_scope(snapshot, scope)),
        election_in_progress=tuple(snapshot.pending.preferred_election),
    )


# --- payloads ----------------------------------------------------------------------------------------

_EMPTY_PAYLOAD_BYTES = len(encode_partition_list([]))
MIN_PAYLOAD_BYTES = len(encode_partition_list([TopicPartition("t", 0)]))
"""The smallest payload that names a partition (a one-character topic, partition 0)."""


def _entry_bytes(tp: TopicPartition) -> int:
    """Bytes of one ``{"topic":..,"partition":..}`` entry, exactly as :func:`encode_partition_list` writes
    it."""
    return len(json.dumps({"topic": tp.topic, "partition": tp.partition}, separators=(",", ":")))


def chunk_payloads(
    partitions: Iterable[TopicPartition],
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    *,
    max_znode_bytes: int = JUTE_MAXBUFFER,
) -> list[bytes]:
    """``/admin/preferred_replica_election`` payloads in Kafka's format (``{"version":1,"partitions":[..]}``),
    each at most ``budget_bytes``, together naming every partition once, in order.

    Greedy in order: a payload is closed when the next entry would pass the budget. ValueError when the
    budget is below the smallest payload that names a partition, above ``max_znode_bytes`` (ZooKeeper's
    ``jute.maxbuffer``, which the budget must stay under), or too small for some partition's entry.
    """
    if budget_bytes < MIN_PAYLOAD_BYTES:
        raise ValueError(
            f"budget of {budget_bytes} bytes is below the smallest election payload "
            f"({MIN_PAYLOAD_BYTES} bytes)"
        )
    if budget_bytes > max_znode_bytes:
        raise ValueError(
            f"budget of {budget_bytes} bytes is above the znode limit of {max_znode_bytes} bytes "
            "(jute.maxbuffer)"
        )
    chunks: list[list[TopicPartition]] = []
    current: list[TopicPartition] = []
    size = _EMPTY_PAYLOAD_BYTES
    for tp in dict.fromkeys(TopicPartition(*p) for p in partitions):
        entry = _entry_bytes(tp)
        if _EMPTY_PAYLOAD_BYTES + entry > budget_bytes:
            raise ValueError(
                f"partition {tp} alone needs {_EMPTY_PAYLOAD_BYTES + entry} bytes, above the budget of "
                f"{budget_bytes} bytes"
            )
        added = entry + (1 if current else 0)  # the comma before every entry but the first
        if size + added > budget_bytes:
            chunks.append(current)
            current, size, added = [], _EMPTY_PAYLOAD_BYTES, entry
        current.append(tp)
        size += added
    if current:
        chunks.append(current)
    payloads = [encode_partition_list(chunk) for chunk in chunks]
    oversized = [len(p) for p in payloads if len(p) > budget_bytes]
    if oversized:  # the size arithmetic above and the encoder disagree: a bug, never a silent oversize write
        raise RuntimeError(f"election payloads of {oversized} bytes exceed the budget of {budget_bytes}")
    return payloads


# --- verification ------------------------------------------------------------------------------------


def verify_election(
    snapshot: ClusterSnapshot, partitions: Iterable[TopicPartition]
) -> dict[str, list[TopicPartition]]:
    """After the election: ``elected`` (led by ``replicas[0]``) and, for the others, why not: one of the
    ineligibility reasons as they stand now, or ``NOT_ELECTED`` when the preferred replica could lead but
    does not. Keys appear only when they have partitions."""
    deleting = _deleting_topics(snapshot)
    outcome: dict[str, list[TopicPartition]] = {}
    for tp in dict.fromkeys(TopicPartition(*p) for p in partitions):
        info = snapshot.partitions.get(tp)
        if info is not None and info.assignment.replicas and info.leader == info.assignment.replicas[0]:
            key = ELECTED  # whatever else holds now (a deletion queued since), the preferred replica leads
        else:
            reason = ineligibility(info, deleting, snapshot.brokers)
            key = NOT_ELECTED if reason is None else reason
        outcome.setdefault(key, []).append(tp)
    return outcome
