"""A broker goal's shed judged as arrays (``disk_usage``'s and ``replica_count``'s): for a source
broker's first replicas and one receiver, what
:meth:`Search._try <app.actions.rebalance.search.Search._try>` would answer for each, with the same
operations on every replica at once:

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
    band_distance,
    band_gap,
)
from app.actions.rebalance.model import FloatArray, IntArray

BoolArray = np.ndarray[tuple[int], np.dtype[np.bool_]]

_REASONS = (BLOCK_RACK, BLOCK_CAPACITY, BLOCK_HIGHER)
WALKED = frozenset({DISK_USAGE, REPLICA_COUNT})
"""The goals whose sheds are judged here: ``disk_usage`` (each item's own delta) and ``replica_count``
(the same delta for every item: a receiver where it does not help ends the shed, as
``Search._shed_to`` stops there)."""
_TERMED = frozenset({DISK_USAGE, LOAD, LEADER_BYTES_IN, TOPIC_REPLICAS, TOPIC_LEADERS})
"""The goals whose delta depends on the item (a term per broker); the count goals' is the same for all."""


class _Items:
    """A source's items (replica rows) and what the checks read of them that no receiver changes: the
    brokers each one's partition is or was on, the racks of its other replicas, and each goal's term for
    the source (the guard sums the source's term first, then the receiver's)."""

    __slots__ = (
        "bands",
        "clash",
        "lbi",
        "leads",
        "loses_rack",
        "parts",
        "rows",
        "sizes",
        "source",
        "taken",
        "topic",
        "weights",
    )

    def __init__(self, walk: Walk, rows: IntArray, s: int) -> None:
        state, balancer = walk.state, walk.balancer
        n = len(rows)
        self.rows = rows
        self.parts = parts = walk.rep_part[rows]
        self.sizes: FloatArray = state.size[parts]
        self.leads: BoolArray = balancer._leader_v[parts] == s
        # the partition's rows (padded with the item's own: its broker is s, its origin is among them)
        offsets = np.arange(walk.widest, dtype=np.int64)
        matrix = walk.starts[parts][:, None] + offsets
        if not walk.uniform:
            matrix = np.where(offsets < walk.lengths[parts][:, None], matrix, rows[:, None])
        brokers = balancer._rep_broker_v[matrix]
        item = np.broadcast_to(np.arange(n)[:, None], matrix.shape)
        self.taken = np.zeros((walk.n_all, n), dtype=bool)
        """Per broker, the items whose partition is or was on it (can_host refuses, nothing counted)."""
        self.taken[brokers, item] = True
        self.taken[walk.origin[matrix], item] = True
        racks = np.where(brokers != s, walk.rack_index[brokers], walk.n_racks)
        self.clash = np.zeros((walk.n_racks + 1, n), dtype=bool)
        """Per rack, the items with another replica on it."""
        self.clash[racks, item] = True
        self.loses_rack: BoolArray = ~self.clash[walk.rack_index[s]]
        """The items whose partition has no other replica on s's rack (it loses s's rack if it moves)."""
        self.weights: FloatArray | None = None
        if LOAD in walk.checked:  # model.weight: the follower's share, plus the leader's surplus if it leads
            self.weights = walk.sf[rows] + np.where(self.leads, walk.sd[parts], 0.0)
        self.lbi: FloatArray | None = state.lbi[parts] if LEADER_BYTES_IN in walk.checked else None
        self.topic: IntArray | None = None
        self.bands: dict[str, tuple[FloatArray, FloatArray]] = {}
        """Per topic goal, each item's topic's band (``GoalState._topic_delta``'s)."""
        if walk.topics:
            self.topic = state.part_topic[parts]
            for goal in (TOPIC_REPLICAS, TOPIC_LEADERS):
                if goal in walk.checked:
                    avg = state.topic_avg[goal][self.topic]
                    self.bands[goal] = (avg - 1.0, avg + 1.0)
        self.source: dict[str, FloatArray] = {}
        for goal in (walk.goal, *walk.checked):
            if goal not in _TERMED:
                continue
            term = walk.term(goal, self, s, source=True)
            if term is not None:
                self.source[goal] = term


class Walk:
    """The judged shed of one search (its goal is the guard's current goal, a soft broker goal)."""

    def __init__(
        self, goal: str, state: GoalState, balancer: Balancer, groups: Groups, tolerance: float
    ) -> None:
        assert goal in WALKED  # the goal's own delta is judged here (Search._try's and _helps' test)
        self.goal, self.state, self.balancer, self.groups = goal, state, balancer, groups
        self.tolerance = tolerance
        """A move must change the goal by less than this (``Search.tolerance``)."""
        model = balancer.model
        self.n_all = len(model.broker_ids)
        self.rep_part: IntArray = balancer._rep_part_v
        self.sf: FloatArray = balancer._sf_v
        self.sd: FloatArray = balancer._sd_v
        self.origin: IntArray = np.asarray(model.rep_origin, dtype=np.int32)
        # a partition's rows are consecutive, partition after partition (model.rep_of)
        self.lengths: IntArray = np.bincount(self.rep_part, minlength=len(model.rep_of))
        self.starts: IntArray = np.cumsum(self.lengths) - self.lengths
        self.widest = int(self.lengths.max()) if len(self.lengths) else 0
        self.uniform = not len(self.lengths) or int(self.lengths.min()) == self.widest
        racks, self.rack_index = np.unique(np.asarray(model.rack, dtype=np.int64), return_inverse=True)
        self.n_racks = len(racks)
        self.checked: tuple[str, ...] = tuple(g for g in state.goals if g != goal and g not in HARD_GOALS)
        """The goals the guard checks a move of this search against."""
        self.topics = bool({TOPIC_REPLICAS, TOPIC_LEADERS} & set(self.checked))
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
            free_mask = moved[window] == 0
            if not first_seen:
                if free_mask.any():
                    groups.first[s] = i + int(np.argmax(free_mask))
                    first_seen = True
                else:
                    groups.first[s] = i + len(window)
            free = window[free_mask][: limit - count]
            found.append(free)
            count += len(free)
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
        n = len(rows)
        for d in partners:
            if self.goal == REPLICA_COUNT and not self._count_helps(int(rows[0]), s, d):
                return 0  # nor will it at the receivers after d (Search._shed_to's None)
            if d not in self.balancer.target_set:
                continue  # every item refused, nothing counted
            passing, refused = self._judge(items, s, d)
            start = 0
            while True:
                found = np.flatnonzero(passing[start:])
                end = start + int(found[0]) if len(found) else n
                self._count(refused, start, end, d)
                if end == n:
                    break
                if attempt(int(rows[end]), s, d):
                    return 1
                start = end + 1  # not expected: the normal path refused (and counted) it; the walk goes on
        return 0

    def _count_helps(self, r: int, s: int, d: int) -> bool:
        """Whether a replica leaving s for d makes ``replica_count`` better (``Search._helps``)."""
        return bool(self.state._replica_deltas[REPLICA_COUNT](r, s, d) < self.tolerance)

    def _count(self, refused: tuple[BoolArray, BoolArray, BoolArray], start: int, end: int, d: int) -> None:
        """Count the refusals of items ``start:end`` at receiver d, per reason (rack spread, capacity,
        another listed goal), the reasons in the order their first refusal comes."""
        found = []
        for reason, mask in zip(_REASONS, refused, strict=True):
            part = mask[start:end]
            count = int(np.count_nonzero(part))
            if count:
                found.append((int(np.argmax(part)), reason, count))
        for _, reason, count in sorted(found):
            self.state.add_blocks(reason, Counter({d: count}))

    def _judge(
        self, items: _Items, s: int, d: int
    ) -> tuple[BoolArray, tuple[BoolArray, BoolArray, BoolArray]]:
        """Per item, whether its try from s to d is taken, and whether it is refused for rack spread, a
        capacity, another listed goal (the first that refuses it; an item refused without a block counted
        is in none)."""
        state = self.state
        # Search._try: the goal's delta; can_host: the partition is or was there, then rack spread
        if self.goal == REPLICA_COUNT:  # the same for every item, and it helps (checked by shed)
            open_ = ~items.taken[d]
        else:
            open_ = (self._total(self.goal, items, s, d) < self.tolerance) & ~items.taken[d]
        rack_index = self.rack_index
        if rack_index[d] != rack_index[s]:
            racked = open_ & items.clash[rack_index[d]] & items.loses_rack
            open_ &= ~racked
        else:
            racked = np.zeros(len(open_), dtype=bool)
        # the guard: the receiver's capacities, then every other listed goal
        cap = state.options.max_replicas_per_broker
        if REPLICA_CAPACITY in state.listed and cap is not None and state._rc[d] + 1 > cap:
            capped = open_.copy()
        elif state._disk_capped[d]:
            capped = open_ & (state._used[d] + items.sizes > state._disk_limit[d])
        else:
            capped = np.zeros(len(open_), dtype=bool)
        open_ &= ~capped
        higher = open_ & self._higher(items, s, d)
        return open_ & ~higher, (racked, capped, higher)

    def _higher(self, items: _Items, s: int, d: int) -> BoolArray:
        """The items another listed goal turns down (a positive delta above its threshold)."""
        state = self.state
        n = len(items.rows)
        higher = np.zeros(n, dtype=bool)
        for goal in self.checked:
            limit = state.threshold(goal)
            if goal in (REPLICA_COUNT, LEADER_COUNT):  # the same delta for every item (that leads)
                if goal == REPLICA_COUNT:
                    each = float(state._replica_deltas[REPLICA_COUNT](int(items.rows[0]), s, d))
                else:
                    each = float(state._leader_deltas[LEADER_COUNT](-1, s, d))
                if each > 0.0 and each > limit:
                    if goal == REPLICA_COUNT:
                        return np.ones(n, dtype=bool)
                    higher |= items.leads
                continue
            delta = self._total(goal, items, s, d)
            refused = (delta > 0.0) & (delta > limit)
            if goal in (LEADER_BYTES_IN, TOPIC_LEADERS):  # a leader goal's delta is 0 for a follower
                refused &= items.leads
            higher |= refused
        return higher

    def _total(self, goal: str, items: _Items, s: int, d: int) -> FloatArray:
        """A goal's delta of moving each item from s to d: the source's term, plus the receiver's."""
        source = items.source.get(goal)
        receiver = self.term(goal, items, d, source=False)
        if source is None:
            return receiver if receiver is not None else np.zeros(len(items.rows))
        return source if receiver is None else source + receiver

    def term(self, goal: str, items: _Items, b: int, source: bool) -> FloatArray | None:
        """A goal's term for broker b as the source (an item leaves it) or the receiver (it comes): the
        guard's operations (``GoalState._ratio_delta``, ``_load_delta``, ``_count_delta``,
        ``_topic_delta``), for every item; None where the guard adds nothing for b."""
        state = self.state
        if goal == DISK_USAGE:
            if DISK_USAGE not in state.bands or not state._ratio_judged[b]:
                return None
            lo, hi = state.bands[DISK_USAGE]
            used, cap = state._used[b], state._cap[b]
            moved = used - items.sizes if source else used + items.sizes
            return band_distance(moved / cap, lo, hi) - band_gap(used / cap, lo, hi)
        if goal == LOAD:
            band = state.band
            if b not in band.active_set:
                return None
            assert items.weights is not None
            v, w = band.db[b], items.weights
            return band_distance(v - w if source else v + w, band.lo, band.hi) - band_gap(v, band.lo, band.hi)
        if goal == LEADER_BYTES_IN:
            if not state._eligible[b]:
                return None
            assert items.lbi is not None
            lo, hi = state.bands[LEADER_BYTES_IN]
            v = float(state._lbi[b])
            return band_distance(v - items.lbi if source else v + items.lbi, lo, hi) - band_gap(v, lo, hi)
        if goal in (TOPIC_REPLICAS, TOPIC_LEADERS):
            if not state._eligible[b]:
                return None
            table = state.topic_rep if goal == TOPIC_REPLICAS else state.topic_lead
            assert table is not None
            assert items.topic is not None
            below, above = items.bands[goal]
            count: FloatArray = table[items.topic, b].astype(np.float64)
            moved_count = count - 1.0 if source else count + 1.0
            return band_distance(moved_count, below, above) - band_distance(count, below, above)
        raise AssertionError(goal)
