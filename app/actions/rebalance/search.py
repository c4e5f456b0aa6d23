"""The searches for the goals other than ``load`` (whose search is the balancer's): fixing the hard goals'
violations, then a greedy per soft goal. Every move goes through the balancer (so a replica moves at most
once, never back to a broker its partition was on, never to fewer racks) and the goals' guard
(:class:`~app.actions.rebalance.goals.GoalState`).

- ``rack``: each partition short of racks moves a replica from a rack it uses twice (a follower first) to
  the least loaded eligible broker on a rack it does not use.
- ``disk_capacity``: each broker over the cap sheds its largest partitions first (the fewest moves, as the
  lower bound counts them), each to the eligible broker with known disk figures and the most room.
- ``replica_capacity``: each broker over the cap sheds replicas, the lightest first, to the brokers with
  the fewest replicas.
- soft goals: sweeps over what is outside the goal's band, the farthest first: a broker (or topic on a
  broker) above the band gives an item (a leadership to an in-sync follower, for the leader goals; else a
  replica; the heaviest first where items weigh) to the unit with the most room; one below takes from the
  fullest; a move is made only when it brings the goal closer. Until a sweep moves nothing (for the
  broker goals, a broker that found no move sits out the sweeps until they stop moving, then all are tried
  again). The items a unit may give are indexed by unit when the search starts (a topic's replicas on a
  broker are its few rows, not a scan of the broker's).
- the count goals (``replica_count``, ``leader_count``, ``topic_replicas``, ``topic_leaders``) first make,
  per topic, the hand-offs of a max flow from the units above the band through their items to the units
  below (:func:`follow_flow`, the flow their lower bound is published on), so that a unit whose items
  may go anywhere does not fill the only receiver another unit's items could use; the greedy finishes.
- ``disk_usage``'s and ``replica_count``'s sheds are judged as arrays
  (:mod:`~app.actions.rebalance.walk`): at a receiver, which of the broker's first items the goal,
  ``can_host`` and the guard let through, all at once; only that move is tried, and the refusals before
  it are counted as one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import islice

import numpy as np
import numpy.typing as npt

from app.actions.rebalance.balancer import Balancer
from app.actions.rebalance.flow import Pairing, follow_flow, index_items
from app.actions.rebalance.goals import (
    BLOCK_HIGHER,
    BLOCK_RACK,
    DISK_CAPACITY,
    DISK_USAGE,
    HARD_GOALS,
    LEADER_BYTES_IN,
    LEADER_COUNT,
    LEADER_GOALS,
    RACK,
    REPLICA_CAPACITY,
    REPLICA_COUNT,
    TOPIC_GOALS,
    TOPIC_LEADERS,
    TOPIC_REPLICAS,
    GoalState,
    one_count_delta,
)
from app.actions.rebalance.model import FloatArray, IntArray
from app.actions.rebalance.walk import WALKED, Walk

_SCAN = 64
"""Items tried per donor, receiver pair before the next pair."""

_Given = tuple[bool, set[int], set[int], list[bool] | None, int]
"""Per item a topic goal's unit gives: (leader move?, the receivers it may go to / the brokers it may not,
the racks it may not go to, per broker whether a count goal turns it down there (None: none may), its
partition if leader_bytes_in may turn it down else -1)."""

_Shut = tuple[list[bool] | None, int]
"""Per item of a unit, what :meth:`Search._shut_tests` finds: per broker whether a listed count goal turns
a move there down (None: none may), and its partition if ``leader_bytes_in`` may turn it down (else -1)."""


def _turned_down(q_source: float | None, lo: float, hi: float, limit: float, q: float) -> bool:
    return one_count_delta(q_source, q, lo, hi) > limit


def _no_help(q_source: float | None, lo: float, hi: float, tolerance: float, q: float) -> bool:
    return not one_count_delta(q_source, q, lo, hi) < tolerance


def _first_int(holds: Callable[[float], bool], lo: float, hi: float) -> float:
    """The least whole number at which ``holds`` (false, then true from there on) holds, searched from
    just below ``lo`` to just above ``hi`` (where it no longer changes); -inf or inf beyond."""
    a, b = math.floor(lo) - 3, math.ceil(hi) + 3
    if not holds(b):
        return math.inf
    if holds(a):
        return -math.inf
    while b - a > 1:
        m = (a + b) // 2
        if holds(m):
            b = m
        else:
            a = m
    return float(b)


def _rows_by_broker(balancer: Balancer) -> list[list[int]]:
    """Replica rows that may still move, per broker."""
    model = balancer.model
    rows: list[list[int]] = [[] for _ in model.broker_ids]
    movable, moved = balancer.movable, balancer.moved
    for r, p in enumerate(model.rep_part):
        if movable[p] and not moved[r]:
            rows[model.rep_broker[r]].append(r)
    return rows


def fix_hard(goal: str, state: GoalState, balancer: Balancer) -> None:
    state.current = goal
    if goal == RACK:
        _fix_racks(state, balancer)
    elif goal == DISK_CAPACITY:
        _fix_disks(state, balancer)
    elif goal == REPLICA_CAPACITY:
        _fix_replica_capacity(state, balancer)


def _fix_racks(state: GoalState, balancer: Balancer) -> None:
    model, db = balancer.model, balancer.db
    for p in state.racks_short()[1]:
        if not balancer.movable[p]:
            continue
        members = model.members[p]
        racks = [model.rack[b] for b in members]
        used = set(racks)
        receivers = sorted(
            (c for c in balancer.targets if model.rack[c] not in used), key=lambda c: (db[c], c)
        )
        doubled = [i for i, b in enumerate(members) if racks.count(model.rack[b]) > 1]
        doubled.sort(key=lambda i: (members[i] == model.leader[p], i))
        for i in doubled:
            r = model.rep_of[p][i]
            if balancer.moved[r]:
                continue
            receiver = next((c for c in receivers if balancer.can_host(r, c)), -1)
            if receiver >= 0:
                balancer.move_replica(r, receiver)
                break


def _fix_disks(state: GoalState, balancer: Balancer) -> None:
    if not state.has_disks:
        return
    model = balancer.model
    over = [b for b in range(state.n_all) if state.disk_known[b] and state.used[b] > state.disk_limit[b]]
    over.sort(key=lambda b: -(state.used[b] - state.disk_limit[b]))
    rows = _rows_by_broker(balancer)
    for s in over:
        for r in sorted(rows[s], key=lambda r: -state.size[model.rep_part[r]]):
            if state.used[s] <= state.disk_limit[s]:
                break
            if state.size[model.rep_part[r]] <= 0:
                continue
            receivers = sorted(
                (c for c in balancer.targets if c != s and state.disk_known[c]),
                key=lambda c: (state.used[c] / state.cap[c], c),
            )
            receiver = next((c for c in receivers if balancer.can_host(r, c)), -1)
            if receiver >= 0:
                balancer.move_replica(r, receiver)


def _fix_replica_capacity(state: GoalState, balancer: Balancer) -> None:
    cap = state.options.max_replicas_per_broker
    if cap is None:
        return
    model = balancer.model
    rows = _rows_by_broker(balancer)
    for s in [b for b in range(model.n_model) if state.rep_count[b] > cap]:
        for r in sorted(rows[s], key=model.weight):
            if state.rep_count[s] <= cap:
                break
            receivers = sorted(balancer.targets, key=lambda c: (state.rep_count[c], c))
            receiver = next((c for c in receivers if c != s and balancer.can_host(r, c)), -1)
            if receiver >= 0:
                balancer.move_replica(r, receiver)


# --- soft goals -----------------------------------------------------------------------------------------


class _Lazy:
    """An iterator's items, drawn as a pass first needs them and kept for the next passes (a receiver
    that takes one of the first items spares drawing the rest)."""

    __slots__ = ("done", "kept", "source")

    def __init__(self, source: Iterator[tuple[str, int]]) -> None:
        self.kept: list[tuple[str, int]] = []
        self.source = source
        self.done = False

    def __iter__(self) -> Iterator[tuple[str, int]]:
        if self.done:
            return iter(self.kept)
        return self._draw()

    def _draw(self) -> Iterator[tuple[str, int]]:
        kept, i = self.kept, 0
        while True:
            if i == len(kept):
                item = next(self.source, None)
                if item is None:
                    self.done = True
                    return
                kept.append(item)
            yield kept[i]
            i += 1


class Search:
    """One soft goal's greedy (module note). The items a unit (a broker, or a topic on a broker) may give
    are indexed by unit when the search starts: replicas not moved yet (a replica moves at most once) and
    the partitions each broker leads, plus those whose leadership a move of this search brings."""

    def __init__(
        self, goal: str, state: GoalState, balancer: Balancer, leader_moves: bool, replicas: bool
    ) -> None:
        self.goal, self.state, self.balancer = goal, state, balancer
        self.replicas = replicas
        self.model = model = balancer.model
        self.leader_moves = leader_moves and goal in LEADER_GOALS
        self.topic = goal in TOPIC_GOALS
        self.n_all = len(model.broker_ids)
        self.groups = index_items(goal, state, balancer)
        self.led_extra: dict[int, list[int]] = {}
        """Partitions whose leadership a replica move of this search brought, per unit (the leader goals)."""
        brokers = np.nonzero(state.eligible_mask)[0]
        if goal == DISK_USAGE:
            brokers = brokers[state.disk_known[brokers]]
        self.brokers: IntArray = brokers
        """The brokers the goal is judged over (and partners are chosen among)."""
        self.same_delta = goal in (REPLICA_COUNT, LEADER_COUNT, TOPIC_REPLICAS, TOPIC_LEADERS)
        """Every item a unit gives changes the goal by the same amount (a count of one)."""
        self.tolerance = -1e-12 * max(abs(self.band(0)[1]), 1e-300)
        """A move must change the goal by less than this (it must make it better)."""
        self.walk = (
            Walk(goal, state, balancer, self.groups, self.tolerance) if goal in WALKED and replicas else None
        )
        """``disk_usage``'s and ``replica_count``'s sheds judged as arrays (only the move that will be
        accepted is tried)."""
        self._count_goals: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None = None
        """The count goals :meth:`_shut_tests` judges a leadership, a follower's and a leader's replica by."""
        self._by_lbi = False
        self._least: dict[tuple[str, int, float | None], float] = {}
        """The least figures found by :func:`_first_int` per (goal, topic, source's figure): the bands do
        not change during the search."""

    # the goal's quantity on a broker (for topic goals: of topic t) and its band

    def q(self, t: int, b: int) -> float:
        state, goal = self.state, self.goal
        if goal == REPLICA_COUNT:
            return float(state.rep_count[b])
        if goal == LEADER_COUNT:
            return float(state.lead_count[b])
        if goal == LEADER_BYTES_IN:
            return float(state.lbi_broker[b])
        if goal == DISK_USAGE:
            return float(state.used[b] / state.cap[b])
        return float(self._table()[t, b])

    def _table(self) -> IntArray:
        table = self.state.topic_rep if self.goal == TOPIC_REPLICAS else self.state.topic_lead
        assert table is not None
        return table

    def _values(self, t: int) -> FloatArray:
        """The goal's quantity on every broker (of topic t)."""
        state, goal = self.state, self.goal
        if goal == LEADER_BYTES_IN:
            values: FloatArray = np.asarray(state.lbi_broker, dtype=np.float64)
        elif goal == DISK_USAGE:
            values = np.asarray(state.used / state.cap, dtype=np.float64)
        else:
            values = state.count_figures(goal, t).astype(np.float64)
        return values

    def band(self, t: int) -> tuple[float, float]:
        if self.topic:
            avg = float(self.state.topic_avg[self.goal][t])
            return avg - 1.0, avg + 1.0
        return self.state.bands[self.goal]

    def units(self) -> tuple[list[int], list[int]]:
        """(topics, brokers) of everything outside the band, the farthest first."""
        brokers = self.brokers
        if self.topic:
            avg = self.state.topic_avg[self.goal][:, None]
            q = self._table()[:, brokers].astype(np.float64)
            gap = np.maximum(np.maximum(q - avg - 1.0, avg - 1.0 - q), 0.0)
            ts, bs = np.nonzero(gap > 1e-9)
            gaps, bs = gap[ts, bs], brokers[bs]
        else:
            lo, hi = self.band(0)
            v = self._values(0)[brokers]
            gap = np.where(v > hi, v - hi, np.where(v < lo, lo - v, 0.0))
            keep = gap > 1e-12 * max(abs(hi), 1.0)
            gaps, bs = gap[keep], brokers[keep]
            ts = np.zeros(len(bs), dtype=np.int64)
        order = np.lexsort((bs, ts, -gaps))
        return ts[order].tolist(), bs[order].tolist()

    def run(self) -> None:
        """Sweeps over the units outside the band until one moves nothing. A broker goal's sweeps make a
        move per broker each, so a broker that found no move sits out the next sweeps (it is tried again
        when they stop moving: the round ends, and a new one starts if the round moved anything)."""
        while True:
            stuck: set[int] = set()
            made_in_round = 0
            while True:
                made = 0
                for t, b in zip(*self.units(), strict=True):
                    if b in stuck:
                        continue
                    lo, hi = self.band(t)
                    v = self.q(t, b)
                    found = self._shed(t, b) if v > hi else (self._take(t, b) if v < lo else 0)
                    made += found
                    if not found and not self.topic:
                        stuck.add(b)
                made_in_round += made
                if not made:
                    break
            if not made_in_round or not stuck:
                return

    # items

    def _items(self, t: int, s: int) -> Iterator[tuple[str, int]]:
        """("leader", p) and ("replica", r) items broker s could give, in the order to try them."""
        key = t * self.n_all + s if self.topic else s
        if self.goal in LEADER_GOALS:
            parts = self._led(key, s)
            if self.leader_moves:
                leader_used = self.balancer.leader_used
                yield from (("leader", p) for p in parts if not leader_used[p])
            if not self.replicas:
                return
            model, moved = self.model, self.balancer.moved
            for p in parts:
                r = model.rep_of[p][model.members[p].index(s)]
                if not moved[r]:
                    yield ("replica", r)
            return
        if not self.replicas:
            return
        groups, moved = self.groups, self.balancer.moved
        items, i, end = groups.items, groups.first[key], groups.end[key]
        while i < end and moved[items[i]]:
            i += 1
        groups.first[key] = i
        for j in range(i, end):
            r = items[j]
            if not moved[r]:
                yield ("replica", r)

    def _led(self, key: int, s: int) -> list[int]:
        """The partitions broker s leads of the unit, in the order to try them."""
        groups, leader = self.groups, self.model.leader
        items, i, end = groups.items, groups.first[key], groups.end[key]
        while i < end and leader[items[i]] != s:  # leadership that left s never comes back
            i += 1
        groups.first[key] = i
        parts = [p for p in items[i:end] if leader[p] == s]
        extra = self.led_extra.get(key)
        if extra:
            parts += [p for p in extra if leader[p] == s]
            if self.goal == LEADER_BYTES_IN:
                lbi = self.state.lbi
                parts.sort(key=lambda p: -lbi[p])
        return parts

    def _delta(self, kind: str, item: int, s: int, d: int) -> float:
        if kind == "leader":
            return self.state._leader_delta(self.goal, item, s, d)
        return self.state._replica_delta(self.goal, item, s, d)

    def _try(self, kind: str, item: int, s: int, d: int) -> bool:
        if self._delta(kind, item, s, d) >= self.tolerance:
            return False
        return self._move(kind, item, s, d)

    def _move(self, kind: str, item: int, s: int, d: int) -> bool:
        """Make the move if the partition, racks and the guard allow it (the goal's delta was checked)."""
        balancer, model = self.balancer, self.model
        if kind == "leader":
            p = item
            info = model.infos[p]
            b = model.broker_ids[d]
            if (
                d not in model.members[p]
                or d not in balancer.target_set
                or (b not in info.isr and b in info.assignment.replicas)
                or not self.state.allow_leader(p, s, d)
            ):
                return False
            balancer.move_leader(p, s, d)
            return True
        if d not in balancer.target_set or not balancer.can_host(item, d):
            return False
        balancer.move_replica(item, d)
        p = model.rep_part[item]
        if model.leader[p] == d and self.goal in LEADER_GOALS:
            key = int(self.state.part_topic[p]) * self.n_all + d if self.topic else d
            self.led_extra.setdefault(key, []).append(p)
        return True

    def _partners(self, t: int, b: int, above: bool) -> list[int]:
        lo, hi = self.band(t)
        if self.same_delta:
            return self._count_partners(t, b, above, lo, hi)
        candidates = self.brokers
        values = self._values(t)[candidates]
        # a count moves by one: partners it would push out of the band come last
        step = 0.0 if self.goal in (DISK_USAGE, LEADER_BYTES_IN) else 1.0
        if above:
            keep = (candidates != b) & (values < hi)
            c, v = candidates[keep], values[keep]
            order = np.lexsort((c, v, v + step > hi + 1e-9))
        else:
            keep = (candidates != b) & (values > lo)
            c, v = candidates[keep], values[keep]
            order = np.lexsort((c, -v, v - step < lo - 1e-9))
        result: list[int] = c[order].tolist()
        return result

    def _count_partners(self, t: int, b: int, above: bool, lo: float, hi: float) -> list[int]:
        """:meth:`_partners` for a count goal: the same order, sorted on one whole-number key (the partners
        it would push out of the band, their count, the broker) as a count is whole."""
        candidates = self.brokers
        values = self.state.count_figures(self.goal, t)[candidates]
        if above:
            keep = (candidates != b) & (values < hi)
            c, v = candidates[keep], values[keep]
            late = v + 1.0 > hi + 1e-9
        else:
            keep = (candidates != b) & (values > lo)
            c, v = candidates[keep], values[keep]
            late = v - 1.0 < lo - 1e-9
            v = -v
        if not len(c):
            return []
        v = v - v.min()
        key = (late * (int(v.max()) + 1) + v) * self.n_all + c
        result: list[int] = c[np.argsort(key)].tolist()
        return result

    def _shed(self, t: int, s: int) -> int:
        """The receiver with the most room first (below the band, a move fixes both ends), any of the
        first items it can take."""
        items = _Lazy(islice(self._items(t, s), 4 * _SCAN))
        partners = self._partners(t, s, above=True)
        if self.walk is not None and self.walk.fits(s):
            return self.walk.shed(s, partners, 4 * _SCAN, partial(self._try, "replica"))
        if self.topic:
            return self._shed_topic(t, list(items), s, partners)
        for d in partners:
            found = self._shed_to(items, s, d)
            if found is not False:
                return int(found is True)
        return 0

    def _shed_to(self, items: Iterable[tuple[str, int]], s: int, d: int) -> bool | None:
        """Move one of ``items`` from s to d: True if moved; None if no item would help, nor at the
        receivers after d (a count's delta only grows along the receivers' order); else False."""
        members = self.model.members
        if self.same_delta:
            checked = False
            for kind, item in items:
                if kind == "leader" and d not in members[item]:
                    continue
                if not checked:
                    if not self._helps((kind, item), s, d):
                        return None
                    checked = True
                if self._move(kind, item, s, d):
                    return True
            return False
        for kind, item in items:
            if kind == "leader" and d not in members[item]:
                continue
            if self._try(kind, item, s, d):
                return True
        return False

    def _shed_topic(self, t: int, items: list[tuple[str, int]], s: int, partners: list[int]) -> int:
        """:meth:`_shed` for a topic goal (a unit gives its 1-3 items; over 200 receivers). Where every
        item is turned down at a receiver, by another listed count goal (replica_count, leader_count, a
        topic's count: the same delta for every item), by ``leader_bytes_in`` (judged for all receivers at
        once, the same operations), by its partition's brokers or by rack spread, the receiver is not tried
        item by item through the guard: its blocks are counted as the guard would have (rack spread where
        can_host refuses, else another listed goal), in bulk, once why_not has named both reasons for this
        goal (so it names them in the same order)."""
        state = self.state
        shuts = self._shut_tests(t, items, s)
        if not shuts or not state.has_blocked(BLOCK_HIGHER):
            for d in partners:
                outcome = self._shed_to(items, s, d)
                if outcome is not False:
                    return int(outcome is True)
            return 0
        values, lo, hi = state.count_band(self.goal, t)
        q_source = float(values[s]) if state.eligible_mask[s] else None
        key = (self.goal, t, q_source)
        stop = self._least.get(key)
        if stop is None:
            stop = self._least[key] = _first_int(partial(_no_help, q_source, lo, hi, self.tolerance), lo, hi)
        given, size = self._given(items, s, shuts)
        lbi_shut: dict[int, list[bool]] = {}
        higher: dict[int, int] = {}  # each receiver once
        racked: dict[int, int] = {}
        found: bool | None = False
        may_refuse = state.may_refuse_capacity
        for d in partners:
            if values[d] >= stop:
                break  # no item helps here, nor further on
            counts = self._turned_down_all(given, s, d, lbi_shut)
            if counts is not None and not may_refuse(d, size):
                n_higher, n_rack = counts
                if not n_rack or state.has_blocked(BLOCK_RACK):
                    if n_higher:
                        higher[d] = n_higher
                    if n_rack:
                        racked[d] = n_rack
                    continue
            found = self._shed_to(items, s, d)
            if found is not False:
                break
        if higher:
            state.add_blocks(BLOCK_HIGHER, higher)
        if racked:
            state.add_blocks(BLOCK_RACK, racked)
        return int(found is True)

    def _given(self, items: list[tuple[str, int]], s: int, shuts: list[_Shut]) -> tuple[list[_Given], float]:
        """Per item of a unit on broker s, what :meth:`_turned_down_all` checks; and the largest partition's
        size."""
        model, state = self.model, self.state
        target_set, rack = self.balancer.target_set, model.rack
        given: list[_Given] = []
        size = 0.0
        for (kind, item), (refused, lbi_part) in zip(items, shuts, strict=True):
            if kind == "leader":
                info, ids = model.infos[item], model.broker_ids
                able = {
                    b
                    for b in model.members[item]
                    if b in target_set and (ids[b] in info.isr or ids[b] not in info.assignment.replicas)
                }
                given.append((True, able, set(), refused, lbi_part))
                continue
            p = model.rep_part[item]
            members = model.members[p]
            taken = {*members, *(model.rep_origin[q] for q in model.rep_of[p])}
            others = {rack[b] for b in members if b != s}
            given.append((False, taken, set() if rack[s] in others else others, refused, lbi_part))
            size = max(size, float(state.size[p]))
        return given, size

    def _turned_down_all(
        self, given: list[_Given], s: int, d: int, lbi_shut: dict[int, list[bool]]
    ) -> tuple[int, int] | None:
        """Whether every item of ``given`` is turned down at receiver d (the capacities aside): then the
        blocks the guard and can_host would count there, (another listed goal, rack spread); else None."""
        target_set, rack = self.balancer.target_set, self.model.rack
        n_higher = n_rack = 0
        for leads, brokers, clash, refused, lbi_part in given:
            if leads:
                if d not in brokers:
                    continue
            elif d not in target_set or d in brokers:
                continue
            elif rack[d] in clash:
                n_rack += 1
                continue
            if refused is not None and refused[d]:
                n_higher += 1
                continue
            if lbi_part >= 0:
                shut = lbi_shut.get(lbi_part)
                if shut is None:
                    shut = lbi_shut[lbi_part] = self.state.leader_bytes_in_refusals(lbi_part, s)
                if shut[d]:
                    n_higher += 1
                    continue
            return None
        return n_higher, n_rack

    def _shut_tests(self, t: int, items: list[tuple[str, int]], s: int) -> list[_Shut]:
        """Per item of unit (t, s): whether the listed count goals (other than this one) whose delta is the
        same for every such item turn a move to each broker down (each at the least figure from which the
        guard does: the delta grows with the receiver's figure), and its partition when a listed
        ``leader_bytes_in`` (not this goal) may turn it down (else -1). Empty when the guard may turn a move
        down before the goals (the source, the budgets) or nothing is known."""
        state, model = self.state, self.model
        if (
            not items
            or not state.guarded
            or not state.source_ok[s]
            or state.options.max_moves is not None
            or state.options.max_bytes is not None
        ):
            return []
        if self._count_goals is None:
            goals = {goal for goal in state.goals if goal not in HARD_GOALS and goal != self.goal}
            self._by_lbi = LEADER_BYTES_IN in goals and state.has_lbi
            self._count_goals = (
                tuple(sorted(goals & {LEADER_COUNT, TOPIC_LEADERS})),  # a leadership
                tuple(sorted(goals & {REPLICA_COUNT, TOPIC_REPLICAS})),  # a follower's replica
                tuple(sorted(goals & {REPLICA_COUNT, TOPIC_REPLICAS, LEADER_COUNT, TOPIC_LEADERS})),
            )
        by_lbi, lbi = self._by_lbi, state.lbi
        found: dict[tuple[str, ...], list[bool] | None] = {}
        shuts: list[_Shut] = []
        useful = False
        for kind, item in items:
            if kind == "leader":
                chosen, p, leads = self._count_goals[0], item, True
            else:
                p = model.rep_part[item]
                leads = model.leader[p] == s
                chosen = self._count_goals[2 if leads else 1]  # the leader's: a leader goal's delta each
            if chosen in found:
                refused = found[chosen]
            else:
                refused = found[chosen] = self._refused_by(chosen, t, s)
            lbi_part = p if by_lbi and leads and lbi[p] != 0.0 else -1
            useful = useful or refused is not None or lbi_part >= 0
            shuts.append((refused, lbi_part))
        return shuts if useful else []

    def _refused_by(self, goals: tuple[str, ...], t: int, s: int) -> list[bool] | None:
        """Per broker, whether one of the count ``goals`` turns a move from s there down (None: none may
        anywhere)."""
        refused: npt.NDArray[np.bool_] | None = None
        for goal in goals:
            values, least = self._count_test(goal, t, s)
            if least < math.inf:
                shut = values >= least
                refused = shut if refused is None else refused | shut
        return None if refused is None else refused.tolist()

    def _count_test(self, goal: str, t: int, s: int) -> tuple[IntArray, float]:
        """A count goal's figures per broker and the least figure at which the guard turns a move from s
        to a broker down for it."""
        state = self.state
        values = state.count_figures(goal, t)
        q_source = float(values[s]) if state.eligible_mask[s] else None
        key = (goal, t if goal in TOPIC_GOALS else -1, q_source)
        least = self._least.get(key)
        if least is None:
            _, lo, hi = state.count_band(goal, t)
            holds = partial(_turned_down, q_source, lo, hi, state.threshold(goal))
            least = self._least[key] = _first_int(holds, lo, hi)
        return values, least

    def _helps(self, first: tuple[str, int], s: int, d: int) -> bool:
        """Whether a move from s to d makes the goal better (for goals where every item's delta is the
        same: counts, of one topic for the topic goals)."""
        return self._delta(*first, s, d) < self.tolerance

    def _take(self, t: int, d: int) -> int:
        for s in self._partners(t, d, above=False):
            tried = 0
            checked = not self.same_delta
            for kind, item in self._items(t, s):
                if kind == "leader" and d not in self.model.members[item]:
                    continue
                if not checked:
                    if not self._helps((kind, item), s, d):
                        return 0  # no item of s would help, nor of the givers after it (they have less)
                    checked = True
                if (self._move if self.same_delta else self._try)(kind, item, s, d):
                    return 1
                tried += 1
                if tried >= _SCAN:
                    break
        return 0


def improve(
    goal: str, state: GoalState, balancer: Balancer, leader_moves: bool, replicas: bool = True
) -> None:
    """Work on a soft goal other than ``load`` (module note); ``replicas=False``: leader moves only."""
    state.current = goal
    if state.violation(goal) in (None, 0.0):
        return
    search = Search(goal, state, balancer, leader_moves, replicas)
    if search.same_delta:
        follow_flow(search, leader_moves, replicas)
    search.run()


def lower_bound(goal: str, state: GoalState, balancer: Balancer, leader_moves: bool = True) -> int | None:
    """The fewest moves that could meet ``goal`` from where the plan stands (None: no bound known).

    ``rack``: the partitions short of racks (a move adds one rack to one partition). ``replica_capacity``:
    the replicas above the cap. ``disk_capacity``: per broker over the cap, the fewest of its largest
    partitions covering its excess. ``disk_usage``, ``leader_bytes_in``: none.

    The count goals (``replica_count``, ``leader_count``, ``topic_replicas``, ``topic_leaders``): a move
    takes one item off one unit (broker; topic on a broker) and gives it to another, so at least the larger
    of the items above the band and the items missing below it (per topic for the topic goals). That bound
    is met only if each move can fix an item above and one below together, which racks forbid where a
    replica is its rack's only copy in the partition (it may move within its rack only), as do the
    partitions already on a broker and, for leaderships, the in-sync replicas. So the bound is published
    only when the units above can hand their items straight to the units below: a flow from each unit
    above (its items above the band) through the items it could give (each once, however many units below
    could take it) to each unit below (its items missing) covers the smaller side; the search makes that
    flow's hand-offs first (:func:`follow_flow`), so the bound is one it reaches. Otherwise a plan may
    need more moves than the count (a unit above must give to a unit in the band, which gives on: two
    moves for one pair), and no bound at once valid and tight is known (the plan's moves can change what
    may go where: a replica moved off a rack lets its partition's other copy move), so it is None and
    :func:`bound_note` says why.
    """
    return goal_bound(goal, state, balancer, leader_moves)[0]


def bound_note(goal: str) -> str:
    return (
        f"no lower bound on {goal}'s moves: some unit above the band has no item that may go straight to a "
        "unit below it (rack spread, the partitions already there or the in-sync replicas), so a plan may "
        "need more moves than the items outside the band"
    )


def goal_bound(
    goal: str, state: GoalState, balancer: Balancer, leader_moves: bool = True, replicas: bool = True
) -> tuple[int | None, str | None]:
    """:func:`lower_bound` and, when it is None for a count goal, why (:func:`bound_note`).
    ``replicas=False``: the plan may make leader moves only (a drain's soft goals)."""
    if goal == RACK:
        return state.racks_short()[0], None
    if goal == REPLICA_CAPACITY:
        violation = state.violation(goal)
        return (None if violation is None else int(violation)), None
    if goal == DISK_CAPACITY:
        return _disk_bound(state, balancer), None
    if goal not in (REPLICA_COUNT, LEADER_COUNT, *TOPIC_GOALS):
        return None, None
    pairing = Pairing(goal, state, balancer, leader_moves, replicas)
    total = 0
    for t in range(len(state.topic_names) if goal in TOPIC_GOALS else 1):
        above, below = pairing.outside(t)
        need_above, need_below = sum(above.values()), sum(below.values())
        if pairing.flow(t, above, below) < min(need_above, need_below):
            return None, bound_note(goal)
        total += max(need_above, need_below)  # a move changes one topic's counts only
    return total, None


def _disk_bound(state: GoalState, balancer: Balancer) -> int | None:
    if not state.has_disks:
        return None
    rows = _rows_by_broker(balancer)
    total = 0
    for b in range(state.n_all):
        if state.disk_known[b] and state.used[b] > state.disk_limit[b]:
            sizes = np.sort(state.size[[balancer.model.rep_part[r] for r in rows[b]]])[::-1]
            cumulative = np.cumsum(sizes)
            excess = state.used[b] - state.disk_limit[b]
            total += min(int(np.searchsorted(cumulative, excess * (1 - 1e-9))) + 1, len(cumulative))
    return total
