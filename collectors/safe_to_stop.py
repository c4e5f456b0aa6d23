"""Is it safe to stop broker b now? The question every rolling restart, OS patch and disk swap starts with.

Pure functions, no I/O: a :class:`~collectors.kafka.model.ClusterSnapshot` (and the brokers' static
``min.insync.replicas``, which ZooKeeper does not hold) in, answers out. ``kafka-health safe-to-stop`` and
``GET /api/v1/brokers/{id}/safe-to-stop`` both ask this module, so the command line and the API never
disagree.

The rule. Stopping broker b takes b out of the ISR of every partition whose ISR holds it (a crash after
``replica.lag.time.max.ms``, a controlled shutdown at once). So stopping b is **unsafe** when some partition
has b in its ISR and the ISR without b would be

- empty: the partition goes **offline** (``would_go_offline``): no replica left to elect, so neither
  producers nor consumers get through until b is back (or an unclean election loses data);
- smaller than the partition's effective ``min.insync.replicas`` (``would_go_under_min_isr``): the leader
  refuses ``acks=all`` writes with NotEnoughReplicas, so those producers start failing. The effective
  value is Kafka's: min(the topic's ``min.insync.replicas`` or the broker default, the assigned replicas),
  resolved by :mod:`collectors.health` exactly as the health model does.

Everything else the operator should know goes in ``notes``, not ``reasons``: the partitions b leads
(``leaderships_to_move``: a controlled shutdown moves them first, a crash leaves them leaderless for the
controller's election), that b is the controller, and the partitions that are already unhealthy
(``already_under_replicated``, with the replicas missing from their ISR: usually another broker's doing).

Edge cases, decided:

- a partition with a single replica (replication factor 1) always goes offline when its broker stops: it
  is in ``would_go_offline`` and the reason says how many of them have only one replica;
- a partition already under min ISR whose ISR still holds b counts as ``would_go_under_min_isr`` (the rule
  as stated: b is in its ISR and the ISR without b is below the floor), and as offline when b is its last
  in-sync replica;
- a broker that holds replicas but is not registered in ``/brokers/ids`` is already stopped (or lost its
  ZooKeeper session): stopping it changes nothing, so the answer is safe, ``registered: false``, with a
  note; the partitions it left offline or under-replicated are in ``already_under_replicated``;
- a broker id that is neither registered nor assigned any replica is unknown: :class:`UnknownBrokerError`
  (the API answers 404, the command line exits 2);
- a registered broker in no partition's ISR (stalled or slow follower, still catching up, or holding no
  replica) takes no in-sync replica away: safe as far as ISRs go, with a note;
- partitions of topics being deleted are left out (a deletion stops their replicas anyway), with a note;
- a partition without a state znode (no controller has initialised it) has no ISR to lose: not judged;
- without an active controller nobody elects new leaders, so a broker that leads a partition with another
  replica is unsafe to stop (its partitions would stay leaderless until a controller appears);
- a snapshot that is not in sync with ZooKeeper (session lost, resync pending, or no full scan yet) cannot
  be trusted: ``trusted: false``, ``safe: false`` and a reason that says so (the command line exits 1, the
  API answers 503).

:func:`assess_safe_to_stop` answers for every broker in one pass over the partitions (the cluster-wide
view); :func:`safe_to_stop` for one broker, in the same pass restricted to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collectors.health import (
    DEFAULT_MIN_INSYNC_REPLICAS,
    PartitionHealthMap,
    broker_default_min_insync_replicas,
    effective_min_isr,
    min_insync_replicas,
)
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, TopicPartition

LISTED_IN_REASONS = 5
"""Partitions named in one reason sentence; the rest are counted ("and 12 more")."""

PROBLEMS = ("offline", "under_min_isr", "under_replicated")
"""The problems of ``already_under_replicated`` entries, worst first."""


class UnknownBrokerError(LookupError):
    """The broker id is neither registered nor assigned any replica: nobody knows it."""

    def __init__(self, broker: int, known: Iterable[int]) -> None:
        self.broker = broker
        self.known = tuple(sorted(known))
        listed = ", ".join(str(b) for b in self.known) or "none"
        super().__init__(
            f"broker {broker} is neither registered nor assigned any replica (known brokers: {listed})"
        )


@dataclass(frozen=True, slots=True)
class UnhealthyPartition:
    """A partition that is already unhealthy, whoever is stopped: context for the operator."""

    tp: TopicPartition
    problems: tuple[str, ...]
    """Of :data:`PROBLEMS`, worst first."""
    out_of_isr: tuple[int, ...]
    """Assigned replicas missing from the ISR (replicas a reassignment is still adding are not missing)."""


@dataclass(frozen=True, slots=True)
class SafeToStop:
    """The answer for one broker."""

    broker: int
    safe: bool
    """True when stopping the broker takes no partition offline or under min ISR (and the view is trusted)."""
    trusted: bool
    """False when the snapshot is not in sync with ZooKeeper (``safe`` is then False, whatever the lists)."""
    registered: bool
    controller: bool
    would_go_offline: tuple[TopicPartition, ...]
    would_go_under_min_isr: tuple[TopicPartition, ...]
    leaderships_to_move: tuple[TopicPartition, ...]
    already_under_replicated: tuple[UnhealthyPartition, ...]
    reasons: tuple[str, ...]
    """One sentence per reason the broker is not safe to stop (empty when it is)."""
    notes: tuple[str, ...]
    """What else the operator should know (leaderships, the controller, partitions already unhealthy)."""
    snapshot_version: int


@dataclass(frozen=True, slots=True)
class ClusterSafeToStop:
    """The answer for every known broker (registered or assigned a replica), from one pass."""

    trusted: bool
    brokers: Mapping[int, SafeToStop]
    already_under_replicated: tuple[UnhealthyPartition, ...]
    snapshot_version: int
    untrusted_reason: str | None = None
    """Why the view cannot be trusted (None when it can)."""

    @property
    def safe_brokers(self) -> tuple[int, ...]:
        """The brokers that may be stopped right now (one at a time: each answer assumes the others run)."""
        return tuple(b for b, answer in self.brokers.items() if answer.safe)

    def broker(self, broker: int) -> SafeToStop:
        """The answer for ``broker``; raises :class:`UnknownBrokerError`."""
        answer = self.brokers.get(broker)
        if answer is None:
            raise UnknownBrokerError(broker, self.brokers)
        return answer


# --- the computation -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Walk:
    """What the one pass over the partitions collects, per broker."""

    offline: dict[int, list[TopicPartition]] = field(default_factory=dict)
    single_replica: Counter[int] = field(default_factory=Counter)
    under_min_isr: dict[int, list[TopicPartition]] = field(default_factory=dict)
    led: dict[int, list[TopicPartition]] = field(default_factory=dict)
    movable_leaderships: Counter[int] = field(default_factory=Counter)
    """Led partitions with another replica (what needs a controller to move)."""
    assigned: set[int] = field(default_factory=set)
    in_some_isr: set[int] = field(default_factory=set)
    deleting_partitions: int = 0


def _walk(snapshot: ClusterSnapshot, default_min_isr: int | None, only: int | None) -> _Walk:
    """The hot loop (200k partitions on a big cluster): per partition a few tuple and set operations."""
    walk = _Walk()
    deleting = {name for name, topic in snapshot.topics.items() if topic.marked_for_deletion}
    deleting.update(snapshot.pending.deletions)
    broker_default = broker_default_min_insync_replicas(snapshot, default_min_isr)
    min_isr: dict[str, int] = {}
    for tp, info in snapshot.partitions.items():
        replicas = info.assignment.replicas
        walk.assigned.update(replicas)
        if tp.topic in deleting:
            walk.deleting_partitions += 1
            continue
        state = info.state
        if state is None:
            continue
        isr, leader = state.isr, state.leader
        walk.in_some_isr.update(isr)
        if only is not None and only not in isr and leader != only:
            continue
        if leader != NO_LEADER and (only is None or leader == only):
            walk.led.setdefault(leader, []).append(tp)
            if len(replicas) > 1:
                walk.movable_leaderships[leader] += 1
        if len(isr) == 1:
            walk.offline.setdefault(isr[0], []).append(tp)
            if len(replicas) == 1:
                walk.single_replica[isr[0]] += 1
            continue
        topic_min_isr = min_isr.get(tp.topic)
        if topic_min_isr is None:
            topic_min_isr = min_isr[tp.topic] = min_insync_replicas(snapshot, tp.topic, broker_default)
        if len(isr) - 1 < effective_min_isr(topic_min_isr, len(replicas)):
            for member in isr:
                if only is None or member == only:
                    walk.under_min_isr.setdefault(member, []).append(tp)
    return walk


def unhealthy_partitions(
    snapshot: ClusterSnapshot, default_min_insync_replicas: int | None = DEFAULT_MIN_INSYNC_REPLICAS
) -> tuple[UnhealthyPartition, ...]:
    """Partitions already offline, under min ISR or under-replicated, as the health model defines them
    (:mod:`collectors.health`), sorted; partitions of topics being deleted are left out."""
    broker_default = broker_default_min_insync_replicas(snapshot, default_min_insync_replicas)
    min_isr = {name: min_insync_replicas(snapshot, name, broker_default) for name in snapshot.topics}
    health = PartitionHealthMap(snapshot.partitions, frozenset(snapshot.brokers), min_isr, broker_default)
    found: dict[TopicPartition, list[str]] = {}
    for problem, tps in health.problems().items():
        if problem in PROBLEMS:
            for tp in tps:
                found.setdefault(tp, []).append(problem)
    deleting = {name for name, topic in snapshot.topics.items() if topic.marked_for_deletion}
    deleting.update(snapshot.pending.deletions)
    result = []
    for tp in sorted(found):
        if tp.topic in deleting:
            continue
        info = snapshot.partitions[tp]
        isr, adding = info.isr, info.assignment.adding_replicas
        missing = tuple(r for r in info.assignment.replicas if r not in isr and r not in adding)
        problems = tuple(p for p in PROBLEMS if p in found[tp])
        result.append(UnhealthyPartition(tp, problems, missing))
    return tuple(result)


def trusted(snapshot: ClusterSnapshot) -> bool:
    """Whether the snapshot can be trusted: a full scan finished and the watches keep it in sync."""
    return not snapshot.stale and snapshot.last_good_at is not None


def assess_safe_to_stop(
    snapshot: ClusterSnapshot, *, default_min_insync_replicas: int | None = DEFAULT_MIN_INSYNC_REPLICAS
) -> ClusterSafeToStop:
    """Every known broker's answer, from one pass over the partitions.

    ``default_min_insync_replicas`` is the brokers' static ``min.insync.replicas`` (server.properties),
    used for topics that set none when ``/config/brokers/<default>`` does not either.
    """
    walk = _walk(snapshot, default_min_insync_replicas, None)
    unhealthy = unhealthy_partitions(snapshot, default_min_insync_replicas)
    context = _context(snapshot, walk, unhealthy)
    brokers = {b: _answer(snapshot, b, walk, context) for b in sorted(walk.assigned.union(snapshot.brokers))}
    return ClusterSafeToStop(
        trusted(snapshot), brokers, unhealthy, snapshot.version, untrusted_reason(snapshot)
    )


def safe_to_stop(
    snapshot: ClusterSnapshot,
    broker: int,
    *,
    default_min_insync_replicas: int | None = DEFAULT_MIN_INSYNC_REPLICAS,
) -> SafeToStop:
    """The answer for ``broker``. Raises :class:`UnknownBrokerError` for an id nobody knows, unless the
    snapshot cannot be trusted (then a stale or empty view must not call a real broker unknown: the
    answer is untrusted instead)."""
    walk = _walk(snapshot, default_min_insync_replicas, broker)
    if broker not in snapshot.brokers and broker not in walk.assigned and trusted(snapshot):
        raise UnknownBrokerError(broker, walk.assigned.union(snapshot.brokers))
    unhealthy = unhealthy_partitions(snapshot, default_min_insync_replicas)
    return _answer(snapshot, broker, walk, _context(snapshot, walk, unhealthy))


@dataclass(frozen=True, slots=True)
class _Context:
    """What every broker's answer shares: computed once per snapshot."""

    unhealthy: tuple[UnhealthyPartition, ...]
    notes: tuple[str, ...]
    """The notes about the cluster (already unhealthy, topics being deleted, unreadable znodes)."""
    untrusted: str | None
    controller_active: bool


def _context(snapshot: ClusterSnapshot, walk: _Walk, unhealthy: tuple[UnhealthyPartition, ...]) -> _Context:
    notes = []
    if unhealthy:
        notes.append(_unhealthy_note(unhealthy))
    if walk.deleting_partitions:
        notes.append(
            f"{_partitions_n(walk.deleting_partitions)} of topics being deleted are left out "
            "(a deletion stops their replicas anyway)"
        )
    if snapshot.errors:
        count = len(snapshot.errors)
        notes.append(
            f"{count} znode{'s' if count != 1 else ''} could not be read: the partitions they describe are "
            "not judged (see describe's unreadable znodes)"
        )
    controller = snapshot.controller.broker_id
    return _Context(
        unhealthy,
        tuple(notes),
        untrusted_reason(snapshot),
        controller is not None and controller in snapshot.brokers,
    )


def _answer(snapshot: ClusterSnapshot, broker: int, walk: _Walk, context: _Context) -> SafeToStop:
    registered = broker in snapshot.brokers
    is_controller = snapshot.controller.broker_id == broker and registered
    if registered:
        offline = tuple(sorted(walk.offline.get(broker, ())))
        under = tuple(sorted(walk.under_min_isr.get(broker, ())))
        led = tuple(sorted(walk.led.get(broker, ())))
    else:
        offline = under = led = ()
    reasons: list[str] = []
    if context.untrusted is not None:
        reasons.append(context.untrusted)
    if offline:
        reasons.append(_offline_reason(broker, offline, walk.single_replica[broker]))
    if under:
        reasons.append(_under_min_isr_reason(broker, under))
    movable = walk.movable_leaderships[broker] if registered else 0
    if registered and movable and not context.controller_active:
        reasons.append(
            "no broker is the active controller: nobody would elect new leaders for the "
            f"{_partitions_n(movable)} broker {broker} leads"
        )
    notes = _notes(snapshot, broker, walk, led, registered, is_controller) + context.notes
    return SafeToStop(
        broker=broker,
        safe=not reasons,
        trusted=context.untrusted is None,
        registered=registered,
        controller=is_controller,
        would_go_offline=offline,
        would_go_under_min_isr=under,
        leaderships_to_move=led,
        already_under_replicated=context.unhealthy,
        reasons=tuple(reasons),
        notes=notes,
        snapshot_version=snapshot.version,
    )


def _notes(
    snapshot: ClusterSnapshot,
    broker: int,
    walk: _Walk,
    led: tuple[TopicPartition, ...],
    registered: bool,
    is_controller: bool,
) -> tuple[str, ...]:
    notes: list[str] = []
    if not registered:
        notes.append(
            f"broker {broker} is not registered in /brokers/ids: it is already stopped (or lost its "
            "ZooKeeper session), so stopping it changes nothing"
        )
    elif broker not in walk.assigned:
        notes.append(f"broker {broker} holds no replica: stopping it affects no partition")
    elif broker not in walk.in_some_isr:
        held = sum(broker in info.assignment.replicas for info in snapshot.partitions.values())
        notes.append(
            f"broker {broker} holds {held} replica{'s' if held != 1 else ''} but is in no partition's ISR "
            "(stalled, slow or still catching up): stopping it takes no in-sync replica away"
        )
    if led:
        notes.append(
            f"broker {broker} leads {_partitions(led)} ({_names(led)}): a controlled shutdown moves their "
            "leadership to another in-sync replica first; a crash leaves them leaderless until the "
            "controller elects"
        )
    if is_controller:
        notes.append(
            f"broker {broker} is the active controller: stopping it starts a controller election "
            "(in a rolling restart, stop it last)"
        )
    return tuple(notes)


# --- sentences ----------------------------------------------------------------------------------------------


def _partitions_n(count: int) -> str:
    return f"{count} partition{'s' if count != 1 else ''}"


def _partitions(tps: Sequence[object]) -> str:
    return _partitions_n(len(tps))


def _names(tps: Sequence[object]) -> str:
    listed = ", ".join(str(tp) for tp in tps[:LISTED_IN_REASONS])
    rest = len(tps) - LISTED_IN_REASONS
    return f"{listed} and {rest} more" if rest > 0 else listed


def _offline_reason(broker: int, offline: tuple[TopicPartition, ...], single: int) -> str:
    one = len(offline) == 1
    sentence = (
        f"{_partitions(offline)} would go offline: {_names(offline)} "
        f"({'its' if one else 'their'} only in-sync replica is broker {broker}"
    )
    if single == len(offline):
        sentence += f"; {'it has' if one else 'they have'} a single replica: replication factor 1"
    elif single:
        sentence += (
            f"; {single} of them {'has' if single == 1 else 'have'} a single replica: replication factor 1"
        )
    return sentence + ")"


def _under_min_isr_reason(broker: int, under: tuple[TopicPartition, ...]) -> str:
    whose = "its" if len(under) == 1 else "their"
    return (
        f"{_partitions(under)} would go under min ISR: {_names(under)} ({whose} ISR without broker {broker} "
        "would be smaller than min.insync.replicas: acks=all producers would fail)"
    )


PROBLEM_NAMES = {
    "offline": "offline",
    "under_min_isr": "under min ISR",
    "under_replicated": "under-replicated",
}


def _unhealthy_note(unhealthy: tuple[UnhealthyPartition, ...]) -> str:
    counts = Counter(p for u in unhealthy for p in u.problems)
    problems = ", ".join(f"{counts[p]} {PROBLEM_NAMES[p]}" for p in PROBLEMS if counts[p])
    missing = Counter(b for u in unhealthy for b in u.out_of_isr)
    note = f"{_partitions(unhealthy)} already unhealthy ({problems})"
    if missing:
        ranked = sorted(missing.items(), key=lambda item: (-item[1], item[0]))
        note += "; out of their ISR: " + ", ".join(f"broker {b} ({n})" for b, n in ranked[:LISTED_IN_REASONS])
    return note


def untrusted_reason(snapshot: ClusterSnapshot) -> str | None:
    """Why an answer on ``snapshot`` cannot be trusted, or None when it can."""
    if trusted(snapshot):
        return None
    if snapshot.last_good_at is None:
        return "no full scan of ZooKeeper has completed yet: this answer cannot be trusted"
    return (
        "the view of the cluster is stale (the ZooKeeper session was lost and the resync has not finished): "
        "this answer cannot be trusted"
    )


# --- JSON ---------------------------------------------------------------------------------------------------


def _tp_json(tp: TopicPartition) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition}


def unhealthy_json(unhealthy: Iterable[UnhealthyPartition]) -> list[dict[str, Any]]:
    return [
        {**_tp_json(u.tp), "problems": list(u.problems), "out_of_isr": list(u.out_of_isr)} for u in unhealthy
    ]


def answer_json(answer: SafeToStop) -> dict[str, Any]:
    """The answer as JSON: what ``safe-to-stop --format json`` prints and the API's response body."""
    return {
        "broker": answer.broker,
        "safe": answer.safe,
        "trusted": answer.trusted,
        "registered": answer.registered,
        "controller": answer.controller,
        "would_go_offline": [_tp_json(tp) for tp in answer.would_go_offline],
        "would_go_under_min_isr": [_tp_json(tp) for tp in answer.would_go_under_min_isr],
        "leaderships_to_move": [_tp_json(tp) for tp in answer.leaderships_to_move],
        "already_under_replicated": unhealthy_json(answer.already_under_replicated),
        "reasons": list(answer.reasons),
        "notes": list(answer.notes),
        "snapshot_version": answer.snapshot_version,
    }


def cluster_json(view: ClusterSafeToStop) -> dict[str, Any]:
    """The cluster-wide view as JSON: per broker the verdict, the lists that make it unsafe and the count
    of leaderships (the full lists are one ``/brokers/{id}/safe-to-stop`` away), and the partitions already
    unhealthy once."""
    return {
        "trusted": view.trusted,
        "safe_to_stop": list(view.safe_brokers),
        "brokers": [
            {
                "broker": a.broker,
                "safe": a.safe,
                "registered": a.registered,
                "controller": a.controller,
                "would_go_offline": [_tp_json(tp) for tp in a.would_go_offline],
                "would_go_under_min_isr": [_tp_json(tp) for tp in a.would_go_under_min_isr],
                "leaderships": len(a.leaderships_to_move),
                "reasons": list(a.reasons),
                "notes": list(a.notes),
            }
            for a in view.brokers.values()
        ],
        "already_under_replicated": unhealthy_json(view.already_under_replicated),
        "snapshot_version": view.snapshot_version,
    }
