"""A broker goal's shed judged as arrays (``disk_usage``'s): for a source broker's first replicas and one
receiver, what :meth:`Search._try <app.actions.rebalance.search.Search._try>` would answer for each, with
the same operations on every replica at once:

- the goal's own delta (a move must make the goal better), then the receiver being a target;
- :meth:`Balancer.can_host <app.actions.rebalance.balancer.Balancer.can_host>`: the partition is or was on
  the receiver (refused, nothing counted), the partition would span fewer racks (``rack spread``);
- the guard (:meth:`GoalState.allow_replica <app.actions.rebalance.goals.GoalState.allow_replica>`): the
  receiver's disk cap or replica cap (``capacity``), then every other listed soft goal's delta (``another
  listed goal``).

So only the first move that will be accepted is tried, through the normal path (which makes it), and the
refusals before it are counted in bulk as can_host and the guard would have counted them one by one: per
reason, at the receiver, the reasons first counted in the same order. Used only where the guard refuses at
the receiver alone (a source that may give, no move or byte budget) and the search is not a hard goal's.
The arithmetic is the guard's own (numpy's float64 operations are Python's), so the answers are the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from app.actions.rebalance.balancer import Balancer
from app.actions.rebalance.flow import Groups
from app.actions.rebalance.goals import (
    BLOCK_CAPACITY,
    BLOCK_HIGHER,
    BLOCK_RACK,
    DISK_USAGE,
    HARD_GOALS,
    LEADER_BYTES_IN,
    LEADER_COUNT,
    LOAD,
    REPLICA_CAPACITY,
    REPLICA_COUNT,
    TOPIC_LEADERS,
    TOPIC_REPLICAS,
    GoalState,
)
from app.actions.rebalance.model import FloatArray, IntArray

BoolArray = np.ndarray[tuple[int], np.dtype[np.bool_]]

_PASS, _SKIP, _RACK, _CAPACITY, _HIGHER = 0, 1, 2, 3, 4
"""What a try of an item comes to: taken; refused without a block counted (no help to the goal, the
partition is or was on the receiver); refused for rack spread, a capacity, another listed goal."""
_REASONS = {_RACK: BLOCK_RACK, _CAPACITY: BLOCK_CAPACITY, _HIGHER: BLOCK_HIGHER}


def _gaps(q: FloatArray, lo: FloatArray | float, hi: FloatArray | float) -> FloatArray:
    """:func:`~app.actions.rebalance.goals._gap` on every element (the same operations)."""
    result: FloatArray = np.where(q > hi, q - hi, np.where(q < lo, lo - q, 0.0))
    return result


def _gap(q: float, lo: float, hi: float) -> float:
    return q - hi if q > hi else (lo - q if q < lo else 0.0)


class _Items:
    """A source's items (replica rows) and what the checks read of them that no receiver changes."""

    __slots__ = ("brokers", "kept", "leads", "origins", "other_racks", "parts", "rows", "sizes", "weights")

    def __init__(self, walk: Walk, rows: IntArray, s: int) -> None:
        balancer = walk.balancer
        self.rows = rows
        self.parts = parts = walk.rep_part[rows]
        self.sizes: FloatArray = walk.state.size[parts]
        self.leads: BoolArray = balancer._leader_v[parts] == s
        self.weights: FloatArray | None = None
        if LOAD in walk.checked:  # model.weight: the follower's share, plus the leader's surplus if it leads
            self.weights = walk.sf[rows] + np.where(self.leads, walk.sd[parts], 0.0)
        # the partition's rows (padded with the item's own: its broker is s, its origin is among them)
        lengths = walk.lengths[parts]
        offsets = np.arange(walk.widest, dtype=np.int64)
        matrix = walk.starts[parts][:, None] + offsets
        matrix = np.where(offsets < lengths[:, None], matrix, rows[:, None])
        self.brokers: IntArray = balancer._rep_broker_v[matrix]
        self.origins: IntArray = walk.origin[matrix]
        others = self.brokers != s
        racks = walk.rack[self.brokers]
        self.other_racks: IntArray = np.where(others, racks, walk.no_rack)
        self.kept: BoolArray = (self.other_racks == walk.rack[s]).any(axis=1)


class Walk:
    """The judged shed of one search (its goal is the guard's current goal, a soft broker goal)."""

    def __init__(
        self, goal: str, state: GoalState, balancer: Balancer, groups: Groups, tolerance: float
    ) -> None:
        self.goal, self.state, self.balancer, self.groups = goal, state, balancer, groups
        self.tolerance = tolerance
        """A move must change the goal by less than this (``Search.tolerance``)."""
        model = balancer.model
        self.rep_part: IntArray = balancer._rep_part_v
        self.sf: FloatArray = balancer._sf_v
        self.sd: FloatArray = balancer._sd_v
        self.origin: IntArray = np.asarray(model.rep_origin, dtype=np.int32)
        # a partition's rows are consecutive, partition after partition (model.rep_of)
        self.lengths: IntArray = np.bincount(self.rep_part, minlength=len(model.rep_of))
        self.starts: IntArray = np.cumsum(self.lengths) - self.lengths
        self.widest = int(self.lengths.max()) if len(self.lengths) else 0
        self.rack: IntArray = np.asarray(model.rack, dtype=np.int64)
        self.no_rack = int(self.rack.min()) - 1 if len(self.rack) else -1
        """A rack no broker is on (where a row is the item's own)."""
        self.checked: tuple[str, ...] = tuple(g for g in state.goals if g != goal and g not in HARD_GOALS)
        """The goals the guard checks a move of this search against."""
        self.items = np.frombuffer(groups.items, dtype=np.int64)

    def fits(self, s: int) -> bool:
        """Whether the guard would turn a move from s down only for what is judged here."""
        state, options = self.state, self.state.options
        return (
            state.guarded
            and state.current == self.goal
            and bool(state.source_ok[s])
            and options.max_moves is None
            and options.max_bytes is None
        )

    def rows(self, s: int, limit: int) -> IntArray:
        """The first ``limit`` rows of broker s not moved yet, in the group's order (``Search._items``)."""
        groups, items = self.groups, self.items
        moved = np.frombuffer(self.balancer.moved, dtype=np.uint8)
        i, end = groups.first[s], groups.end[s]
        found: list[IntArray] = []
        count, first_seen = 0, False
        while i < end and count < limit:
            window = items[i : min(end, i + 2 * limit)]
            free = window[moved[window] == 0]
            if not first_seen:
                if len(free):
                    groups.first[s] = i + int(np.argmax(moved[window] == 0))
                    first_seen = True
                else:
                    groups.first[s] = i + len(window)
            found.append(free[: limit - count])
            count += len(found[-1])
            i += len(window)
        if not found:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(found)

    def shed(
        self, s: int, partners: Sequence[int], limit: int, attempt: Callable[[int, int, int], bool]
    ) -> int:
        """Move one of broker s's first ``limit`` items to the first of ``partners`` that takes one
        (``attempt(r, s, d)``: the search's try of a replica, which makes the move): 1 if moved, else 0."""
        rows = self.rows(s, limit)
        if not len(rows):
            return 0
        items = _Items(self, rows, s)
        row_list: list[int] = rows.tolist()
        for d in partners:
            start = 0
            while start < len(rows):
                codes = self._judge(items, s, d)
                accepted = np.flatnonzero(codes[start:] == _PASS)
                end = start + int(accepted[0]) if len(accepted) else len(rows)
                self._count(codes[start:end], d)
                if end == len(rows):
                    break
                if attempt(row_list[end], s, d):
                    return 1
                start = end + 1  # not expected: the normal path refused (and counted) it; the walk goes on
        return 0

    def _count(self, codes: IntArray, d: int) -> None:
        """Count the refusals ``codes`` at receiver d, the reasons in the order they first come."""
        refused = codes[codes >= _RACK]
        if not len(refused):
            return
        kinds, first, counts = np.unique(refused, return_index=True, return_counts=True)
        for i in np.argsort(first):
            self.state.add_blocks(_REASONS[int(kinds[i])], Counter({d: int(counts[i])}))

    def _judge(self, items: _Items, s: int, d: int) -> IntArray:
        """Per item, what its try from s to d comes to (:data:`_PASS` ...)."""
        state, balancer = self.state, self.balancer
        n = len(items.rows)
        codes = np.full(n, _PASS, dtype=np.int64)
        if d not in balancer.target_set:
            codes[:] = _SKIP
            return codes
        refused = self._no_help(items, s, d)
        refused |= ((items.brokers == d) | (items.origins == d)).any(axis=1)
        codes[refused] = _SKIP
        open_ = ~refused
        rack = self.rack
        if rack[d] != rack[s]:
            racked = open_ & (items.other_racks == rack[d]).any(axis=1) & ~items.kept
            codes[racked] = _RACK
            open_ &= ~racked
        capped = self._capped(items, d) & open_
        codes[capped] = _CAPACITY
        open_ &= ~capped
        if open_.any():
            higher = self._higher(items, s, d)
            codes[open_ & higher] = _HIGHER
        return codes

    def _no_help(self, items: _Items, s: int, d: int) -> BoolArray:
        """The items whose move would not make the goal better (``Search._try``'s test)."""
        assert self.goal == DISK_USAGE
        result: BoolArray = ~(self._ratio_delta(items, s, d) < self.tolerance)
        return result

    def _capped(self, items: _Items, d: int) -> BoolArray:
        state = self.state
        n = len(items.rows)
        capped = np.zeros(n, dtype=bool)
        if state._disk_capped[d]:
            capped |= state._used[d] + items.sizes > state._disk_limit[d]
        cap = state.options.max_replicas_per_broker
        if REPLICA_CAPACITY in state.listed and cap is not None and state._rc[d] + 1 > cap:
            capped[:] = True
        return capped

    def _higher(self, items: _Items, s: int, d: int) -> BoolArray:
        """The items another listed goal turns down (a positive delta above its threshold)."""
        state = self.state
        n = len(items.rows)
        higher = np.zeros(n, dtype=bool)
        for goal in self.checked:
            delta = self._delta(goal, items, s, d)
            limit = state.threshold(goal)
            if isinstance(delta, float):
                if delta > 0.0 and delta > limit:
                    return np.ones(n, dtype=bool)
                continue
            higher |= (delta > 0.0) & (delta > limit)
        return higher

    def _delta(self, goal: str, items: _Items, s: int, d: int) -> FloatArray | float:
        """A goal's delta of moving each item from s to d (the guard's ``_replica_deltas``); a float where
        it is the same for every item."""
        state = self.state
        if goal == LOAD:
            assert items.weights is not None
            band = state.band
            return self._band_delta(band.db, band.lo, band.hi, band.active_set, s, d, items.weights)
        if goal == DISK_USAGE:
            return self._ratio_delta(items, s, d)
        if goal == REPLICA_COUNT:
            return float(state._replica_deltas[REPLICA_COUNT](int(items.rows[0]), s, d))
        if goal == LEADER_COUNT:
            each = float(state._leader_deltas[LEADER_COUNT](-1, s, d))
            result: FloatArray = np.where(items.leads, each, 0.0)
            return result
        if goal == LEADER_BYTES_IN:
            lo, hi = state.bands[LEADER_BYTES_IN]
            eligible = state._eligible
            amounts: FloatArray = state.lbi[items.parts]
            total = self._count_delta(state._lbi, lo, hi, eligible[s], eligible[d], s, d, amounts)
            result = np.where(items.leads, total, 0.0)
            return result
        if goal in (TOPIC_REPLICAS, TOPIC_LEADERS):
            return self._topic_delta(goal, items, s, d)
        raise AssertionError(goal)

    def _band_delta(
        self, q: Sequence[float], lo: float, hi: float, active: frozenset[int], s: int, d: int, w: FloatArray
    ) -> FloatArray:
        """``GoalState._load_delta`` for every weight ``w``."""
        total: FloatArray = np.zeros(len(w))
        if s in active:
            v = q[s]
            total += _gaps(v - w, lo, hi) - _gap(v, lo, hi)
        if d in active:
            v = q[d]
            total += _gaps(v + w, lo, hi) - _gap(v, lo, hi)
        return total

    def _ratio_delta(self, items: _Items, s: int, d: int) -> FloatArray:
        """``GoalState._ratio_delta`` for every item's size."""
        state = self.state
        sizes = items.sizes
        total: FloatArray = np.zeros(len(sizes))
        if DISK_USAGE not in state.bands:
            return total
        lo, hi = state.bands[DISK_USAGE]
        judged, used, caps = state._ratio_judged, state._used, state._cap
        if judged[s]:
            cap = caps[s]
            total += _gaps((used[s] - sizes) / cap, lo, hi) - _gap(used[s] / cap, lo, hi)
        if judged[d]:
            cap = caps[d]
            total += _gaps((used[d] + sizes) / cap, lo, hi) - _gap(used[d] / cap, lo, hi)
        return total

    @staticmethod
    def _count_delta(
        q: Sequence[float] | Sequence[int],
        lo: float,
        hi: float,
        source_judged: bool,
        receiver_judged: bool,
        s: int,
        d: int,
        amounts: FloatArray,
    ) -> FloatArray:
        """``GoalState._count_delta`` for every amount."""
        total: FloatArray = np.zeros(len(amounts))
        if source_judged:
            v = float(q[s])
            total += _gaps(v - amounts, lo, hi) - _gap(v, lo, hi)
        if receiver_judged:
            v = float(q[d])
            total += _gaps(v + amounts, lo, hi) - _gap(v, lo, hi)
        return total

    def _topic_delta(self, goal: str, items: _Items, s: int, d: int) -> FloatArray:
        """``GoalState._topic_delta`` for every item (its topic's counts and band); a leader goal's only for
        the items that lead."""
        state = self.state
        table = state.topic_rep if goal == TOPIC_REPLICAS else state.topic_lead
        assert table is not None
        topics = state.part_topic[items.parts]
        avg = state.topic_avg[goal][topics]
        lo, hi = avg - 1.0, avg + 1.0
        total: FloatArray = np.zeros(len(topics))
        eligible = state._eligible
        if eligible[s]:
            v = table[topics, s].astype(np.float64)
            total += _gaps(v - 1.0, lo, hi) - _gaps(v, lo, hi)
        if eligible[d]:
            v = table[topics, d].astype(np.float64)
            total += _gaps(v + 1.0, lo, hi) - _gaps(v, lo, hi)
        if goal == TOPIC_LEADERS:
            total = np.where(items.leads, total, 0.0)
        return total
