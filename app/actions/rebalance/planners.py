"""The planners: :func:`plan_rebalance` (every broker into the band with as few replica moves as it can) and
:func:`plan_drain` (every replica off one broker). Each builds the model from the snapshot and the load,
decides which partitions may move, runs the balancer and turns the model's changes into a
:class:`~app.actions.rebalance.plan.RebalancePlan`.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Literal, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from analytics.load_model import LoadReport
from app.actions.rebalance import search
from app.actions.rebalance.balancer import Balancer
from app.actions.rebalance.generate import kafka_generate_moves
from app.actions.rebalance.goals import (
    DRAIN,
    HARD_GOALS,
    LEADER_GOALS,
    LOAD,
    MEASURES,
    DiskInput,
    GoalOptions,
    GoalReport,
    GoalState,
    check_goals,
)
from app.actions.rebalance.model import LoadInput, Model, build_model, leader_share, predicted_report
from app.actions.rebalance.plan import (
    MAX_LISTED,
    SKIP_DEAD_REPLICA,
    SKIP_DELETING,
    SKIP_NO_STATE,
    SKIP_OFFLINE,
    SKIP_REASSIGNING,
    LeaderMove,
    LoadSummary,
    RebalancePlan,
    ReplicaMove,
    listed_brokers,
    listed_partitions,
)
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, PartitionInfo, TopicPartition

DEFAULT_RATED_DEVIATION = 0.10
_TOPIC = attrgetter("topic")
_ADDING = attrgetter("assignment.adding_replicas")
_REMOVING = attrgetter("assignment.removing_replicas")


# --- movability --------------------------------------------------------------------------------------


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _gc_paused(planner: Callable[_P, _R]) -> Callable[_P, _R]:
    """Runs ``planner`` with the cyclic garbage collector paused (and restored as it was after). A plan
    makes few cycles, but its millions of short-lived objects set off full collections that walk every
    object the process holds: at Cruise Control's size, the snapshot's tens of millions, seconds of a
    20 s plan. Reference counting still frees what the plan drops; the next collection finds any cycle."""

    @functools.wraps(planner)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not gc.isenabled():
            return planner(*args, **kwargs)
        gc.disable()
        try:
            return planner(*args, **kwargs)
        finally:
            gc.enable()

    return paused


def _deleting(snapshot: ClusterSnapshot) -> set[str]:
    topics = {name for name, topic in snapshot.topics.items() if topic.marked_for_deletion}
    topics.update(snapshot.pending.deletions)
    return topics


def _fixed_reason(snapshot: ClusterSnapshot, info: PartitionInfo, deleting: Collection[str]) -> str | None:
    """Why the planner must leave this partition alone (None: it may move it)."""
    if info.tp.topic in deleting:
        return SKIP_DELETING
    if info.tp in snapshot.pending.reassignments or info.assignment.is_being_reassigned:
        return SKIP_REASSIGNING
    if info.state is None:
        return SKIP_NO_STATE
    if not all(map(snapshot.brokers.__contains__, info.assignment.replicas)):
        return SKIP_DEAD_REPLICA
    if info.leader == NO_LEADER or info.leader not in snapshot.brokers:
        return SKIP_OFFLINE
    return None


def _movable(
    snapshot: ClusterSnapshot, model: Model, deleting: Collection[str], excluded: Collection[str]
) -> tuple[npt.NDArray[np.bool_], list[tuple[int, str]]]:
    """Which partitions the plan may move, and why each other one (outside ``excluded`` topics, which
    are neither) must stay: :func:`_fixed_reason`, whose conditions are checked for every partition at once
    (932,000 at Cruise Control's size), the reason itself looked up for the few they flag."""
    infos, tps = model.infos, model.tps
    n = len(infos)
    left_out = np.zeros(n, dtype=bool)
    flagged = np.zeros(n, dtype=bool)
    if excluded or deleting:
        topics = list(map(_TOPIC, tps))
        if excluded:
            left_out = np.fromiter(map(excluded.__contains__, topics), dtype=bool, count=n)
        if deleting:
            flagged |= np.fromiter(map(deleting.__contains__, topics), dtype=bool, count=n)
    pending = snapshot.pending.reassignments
    if pending:
        flagged |= np.fromiter(map(pending.__contains__, tps), dtype=bool, count=n)
    for field in (_ADDING, _REMOVING):
        values = list(map(field, infos))
        if any(values):
            flagged |= np.fromiter(map(bool, values), dtype=bool, count=n)
    # no state or no leader (NO_LEADER), or a leader that is not registered
    registered = np.asarray(model.broker_ids[: model.n_model], dtype=np.int64)
    flagged |= ~np.isin(model.leader_ids, registered)
    # a replica on an unregistered broker (the model's brokers from n_model on)
    rep_part = np.asarray(model.rep_part, dtype=np.int64)
    flagged[rep_part[np.asarray(model.rep_origin, dtype=np.int64) >= model.n_model]] = True
    movable = ~flagged & ~left_out
    fixed: list[tuple[int, str]] = []
    for p in np.flatnonzero(flagged & ~left_out).tolist():
        reason = _fixed_reason(snapshot, infos[p], deleting)
        if reason is None:
            movable[p] = True
        else:
            fixed.append((p, reason))
    return movable, fixed


# --- plans -------------------------------------------------------------------------------------------


def _target_indices(snapshot: ClusterSnapshot, model: Model, brokers: Iterable[int] | None) -> list[int]:
    if brokers is None:
        return list(range(model.n_model))
    wanted = list(dict.fromkeys(brokers))
    unknown = [b for b in wanted if b not in snapshot.brokers]
    if unknown:
        raise ValueError(f"target broker(s) {listed_brokers(unknown)} are not registered")
    if not wanted:
        raise ValueError("the target broker list is empty")
    index = {b: i for i, b in enumerate(model.broker_ids)}
    return sorted(index[b] for b in wanted)


@_gc_paused
def plan_rebalance(
    snapshot: ClusterSnapshot,
    load: LoadInput = None,
    rated_deviation: float = DEFAULT_RATED_DEVIATION,
    exclude_topics: Iterable[str] = (),
    brokers: Iterable[int] | None = None,
    *,
    weights: Mapping[str, float] | None = None,
    partition_weights: Mapping[TopicPartition, float] | None = None,
    leader_moves: bool = True,
    seed: int = 0,
    goals: Sequence[str] | None = None,
    options: GoalOptions | None = None,
    disks: DiskInput | None = None,
) -> RebalancePlan:
    """A plan that brings every |r_n| under ``rated_deviation`` with as few replica moves as it can.

    ``load``: the window's per-broker averages, as the load model's samples (``broker``, ``metric``,
    ``value``) or ``{broker: {metric: value}}``; None balances replica and leader counts only. ``brokers``
    restricts where replicas and leadership may go (sources are unrestricted); ``exclude_topics`` are left
    alone. ``weights`` are the load model's metric weights; ``partition_weights`` relative per-partition
    traffic, if known. ``leader_moves=False`` plans replica moves only (fewer elections, more data moved).
    ``seed`` fixes the random start of the ``--generate`` comparison.

    ``goals`` (default :data:`~app.actions.rebalance.goals.DEFAULT_GOALS`: the hard goals, then ``load``)
    are worked to in that order, with ``options``' thresholds and limits and ``disks``' figures (see
    :mod:`~app.actions.rebalance.goals`). Hard goals' violations are fixed only when ``goals`` are named;
    with the default list they only keep every move from breaking them, so today's plans stay as they
    were. With ``brokers`` given, replicas and leadership move only between
    those brokers. ValueError on bad input (an unknown goal named).
    """
    goal_list = check_goals(goals)
    options = options or GoalOptions()
    excluded = frozenset(exclude_topics)
    model, report, warnings = build_model(snapshot, load, weights, rated_deviation, partition_weights)
    targets = _target_indices(snapshot, model, brokers)
    unknown_topics = sorted(excluded.difference(map(_TOPIC, model.tps)))
    if unknown_topics:
        warnings.append(f"excluded topic(s) {', '.join(unknown_topics[:MAX_LISTED])} do not exist")
    deleting = _deleting(snapshot)
    movable, fixed = _movable(snapshot, model, deleting, excluded)
    skipped = [(model.tps[p], reason) for p, reason in fixed]
    balancer = Balancer(model, targets, report.rated_deviation)
    balancer.set_movable(np.flatnonzero(movable))
    state = _goal_state(model, balancer, goal_list, options, disks, None if brokers is None else targets)
    state.fixes_hard = goals is not None
    before = {g: state.violation(g) for g in goal_list}
    bounds: dict[str, int | None] = {}
    notes: dict[str, str | None] = {}
    lower_bound = 0
    for goal in goal_list:
        if goal == LOAD:
            state.current = LOAD
            lower_bound = _balance_load(balancer, leader_moves)
            bounds[LOAD] = lower_bound
        else:
            bounds[goal], notes[goal] = search.goal_bound(goal, state, balancer, leader_moves)
            if goal in HARD_GOALS:
                if goals is not None:  # the default goals keep today's plans: the hard goals only constrain
                    search.fix_hard(goal, state, balancer)
            else:
                search.improve(goal, state, balancer, leader_moves)
    balancer.release_pools()  # the plan is made: the rest needs memory more than the pools
    topics = sorted(set(map(_TOPIC, model.tps)).difference(excluded))
    generate = kafka_generate_moves(
        snapshot, topics, [model.broker_ids[i] for i in targets], seed=seed, replicas=_origin_replicas(model)
    )
    reports = _goal_reports(state, before, bounds, notes)
    return _finish(
        "rebalance",
        model,
        report,
        balancer,
        lower_bound,
        generate,
        skipped,
        warnings,
        after_brokers=None,
        goals=reports,
    )


def _origin_replicas(
    model: Model,
) -> tuple[Sequence[TopicPartition], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The snapshot's partitions, their replicas (broker ids, in a row) and replica counts, from the model."""
    ids = np.asarray(model.broker_ids, dtype=np.int64)
    origin = ids[np.asarray(model.rep_origin, dtype=np.int32)]  # 32-bit indices: less memory
    sizes = np.bincount(np.asarray(model.rep_part, dtype=np.int64), minlength=len(model.tps))
    return model.tps, origin, sizes


def _balance_load(balancer: Balancer, leader_moves: bool) -> int:
    """The load goal: leader moves, then replica moves (the balancer); the lower bound on its moves."""
    if leader_moves:
        balancer.build_leader_pools()
    balancer.build_replica_pools()
    lower_bound = balancer.lower_bound(leader_moves) if balancer.out_of_band() else 0
    if balancer.out_of_band():
        balancer.sweeps(balancer.leader_step)
        balancer.build_replica_pools()
        balancer.sweeps(balancer.replica_step)
    return lower_bound


def _goal_state(
    model: Model,
    balancer: Balancer,
    goals: Sequence[str],
    options: GoalOptions,
    disks: DiskInput | None,
    sources: Collection[int] | None,
) -> GoalState:
    shares = leader_share(model, "nwBytesIn")
    state = GoalState(
        model,
        balancer,
        goals,
        options,
        disks,
        eligible=balancer.targets,
        sources=sources,
        load_sources=None if shares is None else {"nwBytesIn": shares},
    )
    balancer.guard = state
    return state


def _goal_reports(
    state: GoalState,
    before: Mapping[str, float | None],
    bounds: Mapping[str, int | None],
    notes: Mapping[str, str | None],
) -> tuple[GoalReport, ...]:
    """One report per goal; ``notes``: what the goal's lower bound (or its absence) needs said."""
    reports = []
    for goal in state.goals:
        after = state.violation(goal)
        satisfied = None if after is None else after <= _tolerance(state, goal)
        why_not = "; ".join(text for text in (state.why_not(goal, satisfied), notes.get(goal)) if text)
        reports.append(
            GoalReport(
                goal=goal,
                hard=goal in HARD_GOALS,
                measure=MEASURES[goal],
                before=before[goal],
                after=after,
                satisfied=satisfied,
                moves=state.replica_moves[goal],
                leader_moves=state.leader_moves[goal],
                why_not=why_not or None,
                lower_bound=bounds.get(goal),
            )
        )
    return tuple(reports)


def _tolerance(state: GoalState, goal: str) -> float:
    if goal == LOAD:
        return 1e-12 * state.band.hi
    return 1e-9


@_gc_paused
def plan_drain(
    snapshot: ClusterSnapshot,
    broker_id: int,
    load: LoadInput = None,
    rated_deviation: float = DEFAULT_RATED_DEVIATION,
    brokers: Iterable[int] | None = None,
    *,
    weights: Mapping[str, float] | None = None,
    partition_weights: Mapping[TopicPartition, float] | None = None,
    leader_moves: bool = True,
    seed: int = 0,
    goals: Sequence[str] | None = None,
    options: GoalOptions | None = None,
    disks: DiskInput | None = None,
) -> RebalancePlan:
    """Move every replica off ``broker_id`` (registered, or dead but still holding replicas), heaviest first,
    each to the eligible broker with the least load (not already a replica, no fewer racks), keeping the
    replication factor; a moved leader stays leader. Then, if a remaining broker is outside the band, leader
    moves as in :func:`plan_rebalance` (a replica the drain adds counts as in sync: it is by the time the
    reassignment completes); no other replica moves. ``brokers`` restricts the receivers. The predicted
    load after is over the remaining brokers.

    ``goals`` (default: the hard goals, then ``load``): the hard goals constrain where each replica may go
    (``disk_capacity``, ``replica_capacity``; racks always); the listed soft goals other than ``load``, in
    order, choose among the receivers (the least loaded among the best) and then get leader moves of their
    own. ``options``' move limits do not apply to a drain. ValueError: unknown broker or goal, a partition
    of it being reassigned, a replication factor the remaining brokers cannot hold, no broker a replica may
    go to."""
    goal_list = check_goals(goals)
    options = GoalOptions(
        disk_max_ratio=(options or GoalOptions()).disk_max_ratio,
        disk_band=(options or GoalOptions()).disk_band,
        max_replicas_per_broker=(options or GoalOptions()).max_replicas_per_broker,
        count_band=(options or GoalOptions()).count_band,
    )
    model, report, warnings = build_model(snapshot, load, weights, rated_deviation, partition_weights)
    index = {b: i for i, b in enumerate(model.broker_ids)}
    if broker_id not in index:
        raise ValueError(f"broker {broker_id} is not registered and holds no replica")
    drained = index[broker_id]
    if brokers is not None and broker_id in set(brokers):
        raise ValueError(f"broker {broker_id} cannot be both drained and a target")
    targets = [i for i in _target_indices(snapshot, model, brokers) if i != drained]
    remaining = [i for i in range(model.n_model) if i != drained]
    if not remaining:
        raise ValueError(f"broker {broker_id} is the only registered broker: no broker would remain")
    deleting = _deleting(snapshot)
    rows, skipped = _drain_rows(snapshot, model, drained, deleting, len(targets))
    balancer = Balancer(model, targets, report.rated_deviation, active=remaining)
    state = _goal_state(model, balancer, goal_list, options, disks, None)
    state.drain = True
    before = {g: state.violation(g) for g in goal_list}
    rows.sort(key=lambda r: (-model.weight(r), r))
    choosers = [g for g in goal_list if g not in HARD_GOALS and g != LOAD]
    state.expect_drain(rows)
    forced = _drain_moves(model, balancer, state, rows, targets, choosers, broker_id)
    balancer.set_band()
    drained_parts = {model.rep_part[r] for r in rows}
    movable, fixed = _movable(snapshot, model, deleting, ())
    balancer.set_movable(np.flatnonzero(movable))
    balancer.set_movable(
        p
        for p, reason in fixed
        if reason == SKIP_DEAD_REPLICA and p in drained_parts and max(model.members[p]) < model.n_model
    )
    bounds: dict[str, int | None] = {}
    notes: dict[str, str | None] = {}
    for goal in choosers:
        bounds[goal], notes[goal] = _drain_bound(goal, state, balancer, leader_moves)
        if forced.get(goal):
            notes[goal] = "; ".join(filter(None, (_forced_note(goal, forced[goal]), notes[goal])))
        search.improve(goal, state, balancer, leader_moves, replicas=False)
    state.current = LOAD
    if leader_moves and balancer.out_of_band():
        balancer.build_leader_pools()
        balancer.sweeps(balancer.leader_step)
    topics = sorted({model.tps[model.rep_part[r]].topic for r in rows})
    generate = kafka_generate_moves(snapshot, topics, [model.broker_ids[i] for i in targets], seed=seed)
    after_brokers = [model.broker_ids[i] for i in remaining]
    bounds[LOAD] = None
    reports = _goal_reports(state, before, bounds, notes)
    return _finish(
        "drain",
        model,
        report,
        balancer,
        len(rows),
        generate,
        skipped,
        warnings,
        after_brokers=after_brokers,
        goals=reports,
    )


def _drain_moves(
    model: Model,
    balancer: Balancer,
    state: GoalState,
    rows: Sequence[int],
    targets: Sequence[int],
    choosers: Sequence[str],
    broker_id: int,
) -> dict[str, list[TopicPartition]]:
    """The drain's forced moves: each replica row, in order, to the receiver the hard goals allow that
    keeps the most listed soft goals no worse, the higher ones first (the least worsened, for a goal no
    receiver keeps), then betters them in priority order, then is the least loaded. Returns, per goal,
    the partitions whose replica no allowed receiver could place without making that goal worse (with
    the higher goals kept as far as they could be)."""
    forced: dict[str, list[TopicPartition]] = {}
    state.current = DRAIN
    for r in rows:
        receivers = [c for c in targets if balancer.can_host(r, c)]
        if not receivers:
            tp = model.tps[model.rep_part[r]]
            raise ValueError(
                f"no broker can take partition {tp}'s replica from broker {broker_id}: every remaining "
                f"target already holds it, would put it on a rack it already uses{_drain_blockers(state)}"
            )
        source = model.rep_broker[r]
        deltas = {c: [state._replica_delta(g, r, source, c) for g in choosers] for c in receivers}
        best = min(
            receivers,
            key=lambda c: (*(max(d, 0.0) for d in deltas[c]), *deltas[c], balancer.db[c], c),
        )
        for g, delta in zip(choosers, deltas[best], strict=True):
            if delta > 1e-12 * max(1.0, abs(state.bands.get(g, (0.0, 1.0))[1])):
                forced.setdefault(g, []).append(model.tps[model.rep_part[r]])
        balancer.move_replica(r, best)
    return forced


def _drain_bound(
    goal: str, state: GoalState, balancer: Balancer, leader_moves: bool
) -> tuple[int | None, str | None]:
    """A drain's soft goals get leader moves only: the leader goals' bounds count those (none without
    leader moves); the other goals have none."""
    if goal not in LEADER_GOALS or not leader_moves:
        return None, None
    bound, note = search.goal_bound(goal, state, balancer, leader_moves, replicas=False)
    return bound, note


def _forced_note(goal: str, partitions: Sequence[TopicPartition]) -> str:
    return (
        f"the drain made {goal} worse where it had to: no broker that may take the replica of partition(s) "
        f"{listed_partitions(partitions)} keeps it (the higher listed goals kept first)"
    )


def _drain_blockers(state: GoalState) -> str:
    blocked = state.blocked.get(DRAIN)
    if not blocked:
        return ""
    options = state.options
    brokers = sorted(state.blocked_brokers.get(f"{DRAIN}:capacity", set()))
    return (
        f" or would go above a capacity (disk_max_ratio {options.disk_max_ratio}, max_replicas_per_broker "
        f"{options.max_replicas_per_broker}) on broker(s) {listed_brokers(brokers)}"
    )


def _drain_rows(
    snapshot: ClusterSnapshot, model: Model, drained: int, deleting: set[str], n_targets: int
) -> tuple[list[int], list[tuple[TopicPartition, str]]]:
    rows: list[int] = []
    skipped: list[tuple[TopicPartition, str]] = []
    reassigning: list[TopicPartition] = []
    too_wide: list[TopicPartition] = []
    for p, members in enumerate(model.members):
        if drained not in members:
            continue
        info = model.infos[p]
        if info.tp.topic in deleting:
            skipped.append((info.tp, SKIP_DELETING))
            continue
        if info.tp in snapshot.pending.reassignments or info.assignment.is_being_reassigned:
            reassigning.append(info.tp)
        if len(members) > n_targets:
            too_wide.append(info.tp)
        rows.append(model.rep_of[p][members.index(drained)])
    if reassigning:
        raise ValueError(
            f"partition(s) {listed_partitions(reassigning)} of the broker are being reassigned: wait for them"
        )
    if too_wide:
        raise ValueError(
            f"partition(s) {listed_partitions(too_wide)} have more replicas than the {n_targets} "
            "broker(s) that would remain"
        )
    return rows, skipped


def _finish(
    kind: Literal["rebalance", "drain"],
    model: Model,
    report: LoadReport,
    balancer: Balancer,
    lower_bound: int,
    generate: int | None,
    skipped: list[tuple[TopicPartition, str]],
    warnings: list[str],
    after_brokers: list[int] | None,
    goals: tuple[GoalReport, ...] = (),
) -> RebalancePlan:
    moves, leader_moves = _changes(model, balancer.touched)
    after = predicted_report(model, report, after_brokers)
    after_summary = LoadSummary.from_report(after)
    return RebalancePlan(
        kind=kind,
        moves=tuple(moves),
        leader_moves=tuple(leader_moves),
        replica_moves=sum(len(m.added) for m in moves),
        lower_bound_moves=lower_bound,
        kafka_generate_moves=generate,
        before=LoadSummary.from_report(report),
        after=after_summary,
        rated_deviation=report.rated_deviation,
        leader_factors=dict(model.leader_factors),
        unresolved=after_summary.imbalanced_brokers,
        skipped=tuple(skipped),
        warnings=tuple(warnings),
        goals=goals,
    )


def _changes(model: Model, touched: Collection[int]) -> tuple[list[ReplicaMove], list[LeaderMove]]:
    """The moves, in partition order, of the partitions a move touched (no other one changed)."""
    moves: list[ReplicaMove] = []
    leader_moves: list[LeaderMove] = []
    ids = model.broker_ids
    for p in sorted(touched):
        info = model.infos[p]
        members, leader, old_leader = model.members[p], model.leader[p], model.leader_origin[p]
        new_set = [ids[b] for b in members]
        old = info.assignment.replicas
        if list(old) == new_set and leader == old_leader:
            continue
        front = ids[leader] if leader >= 0 else new_set[0]
        new = (front, *(b for b in new_set if b != front))
        old_id = ids[old_leader] if old_leader >= 0 else info.leader
        if set(new) == set(old):
            leader_moves.append(LeaderMove(info.tp, new, old_id, front))
        else:
            moves.append(ReplicaMove(info.tp, old, new, old_id, front))
    return moves, leader_moves
