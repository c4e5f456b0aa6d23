"""Planning a partition reassignment: validation, batches, throttles, the go/no-go before each batch, and
the per-partition status afterwards.

Pure functions; the executor writes ``/admin/reassign_partitions`` and the throttle configs.

Validation refuses everything Kafka's ``ReassignPartitionsCommand`` refuses in ZK mode (an empty request,
duplicate partitions, duplicate or no replicas in a list, unknown partitions, unregistered brokers, a
reassignment already running) and more: negative broker ids, a topic queued for deletion, a partition that
is already being reassigned, and a replication factor change unless asked for. Unlike the tool, which stops
at the first problem, :func:`validate_reassignment` names every problem at once.

Throttles are computed as the tool's ZK path computes them since KIP-455 (Kafka 2.5-2.8,
``calculateProposedMoveMap`` with no running reassignment, ``calculateLeaderThrottles``,
``calculateFollowerThrottles``, ``calculateReassigningBrokers``): for each partition of the request the
*sources* are its current replicas and the *destinations* the requested replicas that are not sources;
``leader.replication.throttled.replicas`` lists ``partition:source`` for every requested partition,
``follower.replication.throttled.replicas`` lists ``partition:destination``, each as a sorted set of strings
(Java's ``TreeSet[String]``) joined by commas, and both broker rates are set on every source and destination.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from collectors.health import HealthReport, problem_partitions
from collectors.kafka.model import ClusterSnapshot, PartitionInfo, TopicPartition
from collectors.kafka.throttles import (
    BROKER_THROTTLE_KEYS,
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
    TOPIC_THROTTLE_KEYS,
)

# Problem codes
EMPTY_REQUEST = "empty_request"
DUPLICATE_PARTITION = "duplicate_partition"
EMPTY_REPLICAS = "empty_replicas"
DUPLICATE_REPLICAS = "duplicate_replicas"
NEGATIVE_BROKER_ID = "negative_broker_id"
UNKNOWN_TOPIC = "unknown_topic"
UNKNOWN_PARTITION = "unknown_partition"
UNKNOWN_BROKER = "unknown_broker"
REPLICATION_FACTOR_CHANGE = "replication_factor_change"
TOPIC_BEING_DELETED = "topic_being_deleted"
PARTITION_BEING_REASSIGNED = "partition_being_reassigned"
REASSIGNMENT_IN_PROGRESS = "reassignment_in_progress"

_MAX_LISTED = 20


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with an action's request; ``topic``/``partition`` say where, when it is somewhere."""

    code: str
    message: str
    topic: str | None = None
    partition: int | None = None
    brokers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReassignmentRequest:
    """One entry of a reassignment: a partition's target replicas, the first being the preferred leader."""

    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


# --- validation --------------------------------------------------------------------------------------


def validate_reassignment(
    snapshot: ClusterSnapshot,
    items: Sequence[ReassignmentRequest],
    allow_replication_factor_change: bool = False,
) -> list[Problem]:
    """Every problem with the request (empty means valid), request-wide problems first, then per entry in
    request order. A partition named twice is reported once; an entry's other problems are still checked."""
    problems: list[Problem] = []
    if not items:
        problems.append(Problem(EMPTY_REQUEST, "the reassignment names no partition"))
    pending = snapshot.pending.reassignments
    if pending:
        problems.append(
            Problem(
                REASSIGNMENT_IN_PROGRESS,
                f"a reassignment of {len(pending)} partition(s) is already running "
                "(/admin/reassign_partitions exists): wait for it to finish",
            )
        )
    counts = Counter(item.tp for item in items)
    for tp, count in counts.items():
        if count > 1:
            problems.append(
                Problem(DUPLICATE_PARTITION, f"partition {tp} is named {count} times", tp.topic, tp.partition)
            )
    deleting = {name for name, topic in snapshot.topics.items() if topic.marked_for_deletion}
    deleting.update(snapshot.pending.deletions)
    topics = {tp.topic for tp in snapshot.partitions}
    for item in items:
        problems.extend(_item_problems(snapshot, item, topics, deleting, allow_replication_factor_change))
    return list(dict.fromkeys(problems))


def _item_problems(
    snapshot: ClusterSnapshot,
    item: ReassignmentRequest,
    topics: set[str],
    deleting: set[str],
    allow_rf_change: bool,
) -> list[Problem]:
    tp = item.tp
    replicas = tuple(item.replicas)
    found: list[Problem] = []
    if not replicas:
        found.append(_problem(tp, EMPTY_REPLICAS, f"partition {tp}: the replica list is empty"))
    duplicated = [b for b, n in Counter(replicas).items() if n > 1]
    if duplicated:
        found.append(
            _problem(
                tp,
                DUPLICATE_REPLICAS,
                f"partition {tp}: replicas {_ids(duplicated)} appear more than once",
                duplicated,
            )
        )
    negative = [b for b in replicas if b < 0]
    if negative:
        found.append(
            _problem(
                tp, NEGATIVE_BROKER_ID, f"partition {tp}: broker ids {_ids(negative)} are negative", negative
            )
        )
    unknown = [b for b in replicas if b >= 0 and b not in snapshot.brokers]
    if unknown:
        found.append(
            _problem(
                tp, UNKNOWN_BROKER, f"partition {tp}: brokers {_ids(unknown)} are not registered", unknown
            )
        )
    info = snapshot.partitions.get(tp)
    if tp.topic not in topics:
        found.append(_problem(tp, UNKNOWN_TOPIC, f"topic {tp.topic} does not exist"))
    elif info is None:
        found.append(_problem(tp, UNKNOWN_PARTITION, f"partition {tp} does not exist"))
    if tp.topic in deleting:
        found.append(_problem(tp, TOPIC_BEING_DELETED, f"topic {tp.topic} is queued for deletion"))
    if info is not None:
        found.extend(_partition_problems(snapshot, info, replicas, allow_rf_change))
    return found


def _partition_problems(
    snapshot: ClusterSnapshot,
    info: PartitionInfo,
    replicas: tuple[int, ...],
    allow_rf_change: bool,
) -> list[Problem]:
    tp = info.tp
    found = []
    if tp in snapshot.pending.reassignments or info.assignment.is_being_reassigned:
        found.append(_problem(tp, PARTITION_BEING_REASSIGNED, f"partition {tp} is already being reassigned"))
    current_rf = len(info.assignment.target_replicas)
    requested_rf = len(replicas)
    # an empty list or one with duplicates is reported as such: its replication factor means nothing
    if replicas and requested_rf == len(set(replicas)) and requested_rf != current_rf and not allow_rf_change:
        found.append(
            _problem(
                tp,
                REPLICATION_FACTOR_CHANGE,
                f"partition {tp}: {requested_rf} replicas requested for a replication factor of "
                f"{current_rf}; set allow_replication_factor_change to change it",
            )
        )
    return found


def _problem(tp: TopicPartition, code: str, message: str, brokers: Iterable[int] = ()) -> Problem:
    return Problem(code, message, tp.topic, tp.partition, tuple(sorted(set(brokers))))


def _ids(brokers: Iterable[int]) -> str:
    listed = sorted(set(brokers))
    text = ", ".join(str(b) for b in listed[:_MAX_LISTED])
    return text + (f" and {len(listed) - _MAX_LISTED} more" if len(listed) > _MAX_LISTED else "")


# --- batches -----------------------------------------------------------------------------------------


def added_replicas(item: ReassignmentRequest, snapshot: ClusterSnapshot) -> tuple[int, ...]:
    """The replicas the entry adds (each one a copy of the partition's data to a new broker)."""
    info = snapshot.partitions.get(item.tp)
    current = set(info.assignment.replicas) if info is not None else set()
    return tuple(b for b in dict.fromkeys(item.replicas) if b not in current)


def plan_batches(
    items: Sequence[ReassignmentRequest], snapshot: ClusterSnapshot, max_concurrent_moves: int
) -> list[list[ReassignmentRequest]]:
    """Consecutive batches of the request, in its order, each adding at most ``max_concurrent_moves``
    replicas. A partition is never split: one that adds more replicas than the limit is a batch of its own.
    Entries that add nothing (a reordering, a replication factor decrease) ride along in the current batch."""
    if max_concurrent_moves < 1:
        raise ValueError(f"max_concurrent_moves must be at least 1, got {max_concurrent_moves}")
    batches: list[list[ReassignmentRequest]] = []
    current: list[ReassignmentRequest] = []
    moves = 0
    for item in items:
        added = len(added_replicas(item, snapshot))
        if current and moves + added > max_concurrent_moves:
            batches.append(current)
            current, moves = [], 0
        current.append(item)
        moves += added
    if current:
        batches.append(current)
    return batches


# --- throttles ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThrottleConfig:
    """The config entries to set before a reassignment starts (merged into the existing configs)."""

    broker_configs: Mapping[int, Mapping[str, str]]
    """Broker id -> both replication rates, for every broker a replica moves from or to."""
    topic_configs: Mapping[str, Mapping[str, str]]
    """Topic -> leader and follower throttled replica lists, for every topic of the request."""


@dataclass(frozen=True, slots=True)
class ThrottleRemoval:
    """What to delete once every partition of the reassignment is done, as Kafka's ``--verify`` does."""

    brokers: tuple[int, ...]
    broker_keys: tuple[str, ...]
    topics: tuple[str, ...]
    topic_keys: tuple[str, ...]


def throttle_config(
    items: Sequence[ReassignmentRequest], snapshot: ClusterSnapshot, rate: int
) -> ThrottleConfig:
    """Kafka's throttle entries for the request at ``rate`` bytes/s (see the module docstring).

    ValueError for a rate below 1 (0 would stop replication and the reassignment would never finish) or an
    entry whose partition the snapshot does not have (validate first).
    """
    sources: dict[TopicPartition, Sequence[int]] = {}
    for item in items:
        info = snapshot.partitions.get(item.tp)
        if info is None:
            raise ValueError(f"partition {item.tp} does not exist: cannot throttle its reassignment")
        sources[item.tp] = info.assignment.replicas
    return throttle_config_from(items, sources, rate)


def throttle_config_from(
    items: Sequence[ReassignmentRequest], sources: Mapping[TopicPartition, Sequence[int]], rate: int
) -> ThrottleConfig:
    """:func:`throttle_config` with each partition's current replicas (the *sources*) given: a resumed
    reassignment computes them from the assignment it recorded before it began."""
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        raise ValueError(f"the throttle rate must be an integer of at least 1 byte/s, got {rate!r}")
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    brokers: set[int] = set()
    for item in items:
        current = set(sources.get(item.tp, ()))
        destinations = set(item.replicas) - current
        leaders.setdefault(item.topic, set()).update(f"{item.partition}:{b}" for b in current)
        followers.setdefault(item.topic, set()).update(f"{item.partition}:{b}" for b in destinations)
        brokers.update(current, destinations)
    value = str(rate)
    return ThrottleConfig(
        broker_configs={
            b: {LEADER_THROTTLED_RATE: value, FOLLOWER_THROTTLED_RATE: value} for b in sorted(brokers)
        },
        topic_configs={
            topic: {
                LEADER_THROTTLED_REPLICAS: ",".join(sorted(leaders[topic])),
                FOLLOWER_THROTTLED_REPLICAS: ",".join(sorted(followers[topic])),
            }
            for topic in sorted(leaders)
        },
    )


def throttle_removal(items: Sequence[ReassignmentRequest], snapshot: ClusterSnapshot) -> ThrottleRemoval:
    """Kafka's ``clearAllThrottles``: both rates on every registered broker and every broker the request
    names (a broker that left still has its config), both replica lists on every topic of the request."""
    brokers = set(snapshot.brokers)
    for item in items:
        brokers.update(b for b in item.replicas if b >= 0)
        info = snapshot.partitions.get(item.tp)
        if info is not None:
            brokers.update(info.assignment.replicas)
    return ThrottleRemoval(
        brokers=tuple(sorted(brokers)),
        broker_keys=BROKER_THROTTLE_KEYS,
        topics=tuple(sorted({item.topic for item in items})),
        topic_keys=TOPIC_THROTTLE_KEYS,
    )


# --- execution guard and status -----------------------------------------------------------------------


def safe_to_start_batch(report: HealthReport) -> tuple[bool, str]:
    """No new batch while any partition is under min ISR (``acks=all`` producers already fail: moving data
    adds load to the very brokers that are behind) or offline (its reassignment cannot finish)."""
    summary = report.summary
    if not summary.under_min_isr and not summary.offline:
        return True, "no partition is under min ISR or offline"
    found = problem_partitions(report)
    reasons = []
    for key, label in (("under_min_isr", "under min ISR"), ("offline", "offline")):
        tps = found[key]
        if tps:
            listed = ", ".join(str(tp) for tp in tps[:_MAX_LISTED])
            more = f" and {len(tps) - _MAX_LISTED} more" if len(tps) > _MAX_LISTED else ""
            reasons.append(f"{len(tps)} partition(s) {label}: {listed}{more}")
    return False, "; ".join(reasons)


ReassignmentState = Literal["completed", "in progress", "failed"]


@dataclass(frozen=True, slots=True)
class ReassignmentStatus:
    state: ReassignmentState
    target: tuple[int, ...]
    replicas: tuple[int, ...]
    """The partition's assigned replicas now (during the move: target plus the replicas still to remove)."""
    in_sync: tuple[int, ...]
    """Target replicas in the ISR: the move completes when this is all of ``target``."""


def reassignment_status(
    snapshot: ClusterSnapshot, items: Iterable[ReassignmentRequest]
) -> dict[TopicPartition, ReassignmentStatus]:
    """Per partition, Kafka's ``--verify`` verdict: in progress while the partition is in
    ``/admin/reassign_partitions`` or still adding/removing replicas, then completed if its replicas are
    exactly the target (order included), else failed (someone changed it, or it was never started)."""
    statuses = {}
    for item in items:
        info = snapshot.partitions.get(item.tp)
        target = tuple(item.replicas)
        replicas = info.assignment.replicas if info is not None else ()
        isr = set(info.isr) if info is not None else set()
        running = item.tp in snapshot.pending.reassignments or (
            info is not None and info.assignment.is_being_reassigned
        )
        state: ReassignmentState = (
            "in progress" if running else "completed" if replicas == target else "failed"
        )
        statuses[item.tp] = ReassignmentStatus(state, target, replicas, tuple(b for b in target if b in isr))
    return statuses


# --- the dry run's throttle check ---------------------------------------------------------------------


def throttle_warnings(
    rate: int,
    batches: Sequence[Sequence[ReassignmentRequest]],
    snapshot: ClusterSnapshot,
    produce: Mapping[TopicPartition, float],
) -> list[str]:
    """What makes a throttle too low to finish: a moving partition that takes in more than ``rate`` bytes/s
    (its new replica copies slower than the log grows: it never catches up), and a destination broker whose
    moving partitions of one batch take in more than ``rate`` together (the follower rate is the broker's,
    shared by its throttled replicas). Rates measured from the brokers' metrics (``produce``)."""
    warnings: list[str] = []
    too_fast: list[tuple[TopicPartition, float]] = []
    for number, batch in enumerate(batches, start=1):
        incoming: dict[int, float] = {}
        for item in batch:
            added = added_replicas(item, snapshot)
            if not added:
                continue
            measured = produce.get(item.tp, 0.0)
            if measured > rate:
                too_fast.append((item.tp, measured))
            for broker in added:
                incoming[broker] = incoming.get(broker, 0.0) + measured
        for broker, total in sorted(incoming.items()):
            if total > rate:
                warnings.append(
                    f"batch {number}: the partitions moving to broker {broker} take in {total:,.0f} B/s "
                    f"together, above the throttle of {rate:,} B/s: they cannot all catch up (raise the "
                    "throttle or lower max_concurrent_moves)"
                )
    if too_fast:
        listed = ", ".join(f"{tp} ({r:,.0f} B/s)" for tp, r in too_fast[:_MAX_LISTED])
        more = f" and {len(too_fast) - _MAX_LISTED} more" if len(too_fast) > _MAX_LISTED else ""
        warnings.insert(
            0,
            f"{len(too_fast)} moving partition(s) take in more than the throttle of {rate:,} B/s, so their "
            f"new replicas would never catch up: {listed}{more}",
        )
    return warnings
