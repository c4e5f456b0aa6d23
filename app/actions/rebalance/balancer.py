"""The greedy that balances a :class:`~app.actions.rebalance.model.Model`, and the lower bound on its moves.

**Algorithm** (greedy; each step targets the broker farthest outside the band [(1-r)/N, (1+r)/N]):

1. Leader moves first (a reordering plus a preferred election: no data moves): give the leadership of one
   of the overloaded broker's partitions to an in-sync follower on an underloaded broker (or take one for an
   underloaded broker), choosing the largest surplus that keeps both brokers inside the band; if none fits,
   and only between a broker above and one below the average, the largest surplus no larger than half
   their gap (that never makes the worse of the two worse, and never overloads a broker that was not). At
   most one leader move per partition.
2. Then replica moves the same way, a replica carrying its weight: the heaviest replica that fits, on the
   receiver with the most room first, never onto a broker that already has the partition, never reducing
   the number of racks the partition spans, keeping the replication factor. When no single replica fits,
   a swap (a replica out and a lighter one back, both brokers ending inside the band), and only then the
   half-gap move. A replica moves at most once, never onto a broker that held its partition when the plan
   started, so every move adds one replica and leadership changes only with the leader's replica or by a
   leader move.
3. Stop when every broker is inside the band or no move helps any broker outside it (those are
   ``unresolved``). A balanced cluster gets an empty plan.

Per-broker pools sorted by weight with union-find deletion make each step O(N log N + log R); 100k
partitions on 50 brokers plan in a few seconds (``bench/rebalance_plan.py``).

**Lower bound.** An overloaded broker h must shed ``excess = Db(h) - hi``. Whatever leaves it is leader
surplus (at most that of every movable partition it leads, by leader moves or with the leader replica) plus
the follower share of each replica moved, so it needs at least as many replica moves as it takes of its
heaviest follower shares to cover ``excess - Σ surplus led``. An underloaded broker gains at most the
surplus of the partitions it could take leadership of plus, per replica received, one of the heaviest
replica weights in the cluster. Every replica move has one source and one receiver, so the larger of the
two sums bounds every plan that reaches the band from below. A third bound pools the overloaded brokers:
their total excess must leave the group, and the surplus of a partition can only leave it for free when an
in-sync follower outside the group could lead; otherwise it leaves with a replica. ``lower_bound_moves`` is
the largest of the three. The plans it bounds are those the greedy may make: a replica moves at most once
and never onto a broker its partition was on, so each move adds exactly one replica to the reassignment,
and leadership changes only by a leader move or with the leader's replica (to the broker it goes to).
Without that rule, two chained moves (the leader's replica from b to c, then another replica onto b) would
count as one replica added plus an election of c while b keeps its replica: a leader move in disguise,
which beats the bound when leader moves are off.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial
from itertools import repeat
from operator import attrgetter, eq
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from analytics.load_model import BOUND_TOLERANCE
from app.actions.rebalance.model import FloatArray, IntArray, Model

Int32Array = npt.NDArray[np.int32]

if TYPE_CHECKING:
    from app.actions.rebalance.goals import GoalState

_ISR = attrgetter("state.isr")
_REPLICAS = attrgetter("assignment.replicas")

_SCAN_LIMIT = 48
"""Candidates rejected for one receiver (partition already there, rack) before trying the next receiver."""


class _Pool:
    """Items sorted by weight; :meth:`best` finds the heaviest live item at most a cap. Taken items are
    unlinked with a union-find "nearest live index to the left", so scans never walk over them twice."""

    __slots__ = ("floor", "items", "keys", "parent")

    def __init__(self, entries: list[tuple[float, int]]) -> None:
        entries.sort()
        # compact arrays, not lists: millions of entries at Cruise Control's size
        self.keys = array("d", [k for k, _ in entries])
        self.items = array("q", [i for _, i in entries])
        self.parent = array("q", range(len(entries)))
        self.floor = -math.inf
        """No live item weighs this much or less (items only die): a search up to it can stop at once."""

    @classmethod
    def presorted(cls, keys: FloatArray, items: IntArray) -> _Pool:
        """A pool of items already sorted by (key, item)."""
        pool = cls.__new__(cls)
        pool.keys, pool.items = array("d"), array("q")
        pool.keys.frombytes(np.ascontiguousarray(keys, dtype=np.float64).tobytes())
        pool.items.frombytes(np.ascontiguousarray(items, dtype=np.int64).tobytes())
        pool.parent = array("q", range(len(pool.keys)))
        pool.floor = -math.inf
        return pool

    @classmethod
    def from_bytes(cls, keys: memoryview, items: memoryview) -> _Pool:
        """A pool of items already sorted by (key, item), from buffers of float64 keys and int64 items."""
        pool = cls.__new__(cls)
        pool.keys, pool.items = array("d"), array("q")
        pool.keys.frombytes(keys)
        pool.items.frombytes(items)
        pool.parent = array("q", range(len(pool.keys)))
        pool.floor = -math.inf
        return pool

    def __len__(self) -> int:
        return len(self.keys)

    def _find(self, i: int) -> int:
        parent = self.parent
        root = i
        while root >= 0 and parent[root] != root:
            root = parent[root]
        while i >= 0 and parent[i] != i:
            parent[i], i = root, parent[i]
        return root

    def kill(self, i: int) -> None:
        self.parent[i] = i - 1

    def max_key(self) -> float:
        i = self._find(len(self.keys) - 1)
        return self.keys[i] if i >= 0 else 0.0

    def candidates(
        self, dead: Callable[[int], bool], accept: Callable[[int], bool], count: int = 8
    ) -> list[int]:
        """Indices of up to ``count`` of the heaviest live items ``accept`` takes (same rejection limit)."""
        found: list[int] = []
        i = len(self.keys) - 1
        rejected = 0
        while len(found) < count:
            i = self._find(i)
            if i < 0:
                break
            item = self.items[i]
            if dead(item):
                self.kill(i)
            elif accept(item):
                found.append(i)
            else:
                rejected += 1
                if rejected >= _SCAN_LIMIT:
                    break
            i -= 1
        return found

    def best(
        self, cap: float, dead: Callable[[int], bool], accept: Callable[[int], bool] | None = None
    ) -> int:
        """Index of the heaviest live item with weight <= cap that ``accept`` takes, or -1. Items found
        ``dead`` are unlinked; at most ``_SCAN_LIMIT`` live items are rejected before giving up."""
        if cap <= self.floor:
            return -1
        i = bisect_right(self.keys, cap) - 1
        rejected = 0
        while True:
            i = self._find(i)
            if i < 0:
                if not rejected:  # every item up to cap is dead, and stays so
                    self.floor = cap
                return -1
            item = self.items[i]
            if dead(item):
                self.kill(i)
            elif accept is None or accept(item):
                return i
            else:
                rejected += 1
                if rejected >= _SCAN_LIMIT:
                    return -1
            i -= 1


class Balancer:
    """The greedy's state: Db per broker, the band, the pools. ``active`` are the brokers whose load counts
    (all registered brokers; for a drain, the ones that remain)."""

    def __init__(
        self,
        model: Model,
        targets: Collection[int],
        rated_deviation: float,
        active: Collection[int] | None = None,
    ) -> None:
        self.model = model
        self.db = model.db
        self.n = model.n_model
        self.active = sorted(range(self.n) if active is None else active)
        self.active_set = frozenset(self.active)
        self._position = {i: k for k, i in enumerate(self.active)}
        self.rated_deviation = rated_deviation
        self.set_band()
        self.targets = sorted(targets)
        self.target_set = frozenset(targets)
        self.movable = bytearray(len(model.tps))
        self.leader_used = bytearray(len(model.tps))
        self.moved = bytearray(len(model.rep_part))
        self.leader_pools: dict[tuple[int, int], _Pool] = {}
        self._pools_from: list[dict[int, _Pool]] = []
        """The leader pools by donor, then receiver (the same pools as ``leader_pools``)."""
        self._pools_to: list[dict[int, _Pool]] = []
        """The leader pools by receiver, then donor."""
        self.replica_pools: list[_Pool] = []
        self._dbv: FloatArray = np.array(self.db, dtype=np.float64)
        """``db`` as an array (kept equal by the moves): the sweeps pick brokers and partners with numpy."""
        self._active_arr = np.asarray(self.active, dtype=np.int64)
        self._all_active = self.active == list(range(self.n))
        # the model's per-replica and per-partition figures as arrays, for the numpy passes (pools, bound):
        # converted once, not at every pass; the moves keep the two that change equal to the model's lists
        self._rep_part_v: IntArray = np.asarray(model.rep_part, dtype=np.int64)
        self._sf_v: FloatArray = np.asarray(model.sf, dtype=np.float64)
        self._sd_v: FloatArray = np.asarray(model.sd, dtype=np.float64)
        self._rep_broker_v: Int32Array = np.array(model.rep_broker, dtype=np.int32)  # 32 bits: memory
        self._leader_v: Int32Array = np.array(model.leader, dtype=np.int32)
        self._targets_arr = np.asarray(self.targets, dtype=np.int64)
        self.touched: set[int] = set()
        """Partitions a move changed (the plan's moves are among them)."""
        self.guard: GoalState | None = None
        """The goals' guard every move passes (None: no goal constrains the plan beyond today's rules)."""

    def set_band(self) -> None:
        """The band around the active brokers' mean Db (1/N, unless a drain brought in replicas of a broker
        outside the model). Moves keep the total, so the band holds until replicas come from outside again."""
        self.avg = sum(self.db[i] for i in self.active) / len(self.active)
        # the band as the load model draws it, with its tolerance for rounding (far above the rounding of
        # the planner's own sums): what needs fixing, what a move may go up to, what a plan must reach
        r = self.rated_deviation * (1.0 + BOUND_TOLERANCE)
        self.lo, self.hi = self.avg * (1.0 - r), self.avg * (1.0 + r)

    # -- setup

    def set_movable(self, partitions: Iterable[int] | IntArray) -> None:
        chosen = (
            np.fromiter(partitions, dtype=np.int64) if not isinstance(partitions, np.ndarray) else partitions
        )
        np.frombuffer(self.movable, dtype=np.uint8)[chosen] = 1

    def build_leader_pools(self) -> None:
        """Per (leader, follower) pair, the movable partitions whose leadership could go to that follower (in
        sync now, or added by this plan: in sync by the time the reassignment completes), by (surplus,
        partition); the pairs in the order the partitions first name them."""
        model = self.model
        ids = model.broker_ids
        rep_part, rep_broker, sd = self._rep_part_v, self._rep_broker_v, self._sd_v
        leader = self._leader_v[rep_part]
        movable = np.frombuffer(self.movable, dtype=np.uint8).astype(bool)
        target = np.zeros(len(ids), dtype=bool)
        target[self.targets] = True
        candidates = (leader >= 0) & movable[rep_part] & (sd[rep_part] > 0) & (rep_broker != leader)
        candidates &= target[rep_broker]
        chosen = self._in_sync(np.flatnonzero(candidates), rep_part)
        del candidates
        if not len(chosen):
            self.leader_pools = {}
            self._index_leader_pools()
            return
        parts = rep_part[chosen]
        pair = leader[chosen].astype(np.int64) * len(ids) + rep_broker[chosen]
        del leader, chosen
        _, first, group = np.unique(pair, return_index=True, return_inverse=True)
        order = np.lexsort((parts, sd[parts], first[group]))
        parts, pair = parts[order], pair[order]
        cuts = np.flatnonzero(np.diff(pair)) + 1
        starts, ends = [0, *cuts.tolist()], [*cuts.tolist(), len(pair)]
        # byte views of the keys and items (not copies): each pool copies its slice
        keys = np.ascontiguousarray(sd[parts]).data.cast("B")
        items = np.ascontiguousarray(parts, dtype=np.int64).data.cast("B")
        pairs = pair.tolist()
        self.leader_pools = {
            divmod(pairs[a], len(ids)): _Pool.from_bytes(keys[8 * a : 8 * z], items[8 * a : 8 * z])
            for a, z in zip(starts, ends, strict=True)
        }
        self._index_leader_pools()

    def _in_sync(self, rows: IntArray, rep_part: IntArray) -> IntArray:
        """The replica rows among ``rows`` whose broker is in the partition's ISR or was added by this
        plan (in sync by the time the reassignment completes). A row still on its first broker, of a
        partition whose ISR is its replicas, is in sync; the others (few) are looked up one by one."""
        model = self.model
        ids, infos = model.broker_ids, model.infos
        parts = rep_part[rows]  # rows ascending, so partitions too
        parts = parts[np.r_[True, parts[1:] != parts[:-1]]] if len(parts) else parts
        chosen = [infos[p] for p in parts.tolist()]  # rows of partitions with a leader: each has a state
        full = np.zeros(len(infos), dtype=bool)
        full[parts] = np.fromiter(
            map(eq, map(_ISR, chosen), map(_REPLICAS, chosen)), dtype=bool, count=len(chosen)
        )
        unmoved = np.frombuffer(self.moved, dtype=np.uint8)[rows] == 0  # so on its first broker
        sure = full[rep_part[rows]] & unmoved
        others = [
            r
            for r in rows[~sure].tolist()
            if (b := ids[model.rep_broker[r]]) in (info := infos[model.rep_part[r]]).isr
            or b not in info.assignment.replicas
        ]
        kept = sure
        kept[~sure] = np.isin(rows[~sure], np.asarray(others, dtype=np.int64))
        in_sync: IntArray = rows[kept]
        return in_sync

    def release_pools(self) -> None:
        """Drop the pools (millions of entries at Cruise Control's size) once no step will use them."""
        self.leader_pools = {}
        self._pools_from, self._pools_to = [], []
        self.replica_pools = []

    def _index_leader_pools(self) -> None:
        n_all = len(self.model.broker_ids)
        self._pools_from = [{} for _ in range(n_all)]  # dicts: as many entries as pools, not brokers²
        self._pools_to = [{} for _ in range(n_all)]
        for (donor, receiver), pool in self.leader_pools.items():
            self._pools_from[donor][receiver] = pool
            self._pools_to[receiver][donor] = pool

    def build_replica_pools(self) -> None:
        """Per broker, its movable replicas not moved yet with a positive weight, by (weight, row): built
        with numpy (the rows are millions at Cruise Control's size)."""
        n = self.n
        rep_part, rep_broker, weights = self._replica_weights()
        movable = np.frombuffer(self.movable, dtype=np.uint8).astype(bool)
        moved = np.frombuffer(self.moved, dtype=np.uint8).astype(bool)
        rows = np.nonzero(movable[rep_part] & (rep_broker < n) & ~moved & (weights > 0))[0]
        # by (broker, weight, row): the rows (ascending) by broker in a stable sort (a radix sort on 16 bits
        # when the brokers fit), then each broker's by weight in a stable sort: a fraction of lexsort's time
        brokers = rep_broker[rows]
        rows = rows[np.argsort(brokers.astype(np.int16) if n < 32768 else brokers, kind="stable")]
        starts = np.searchsorted(rep_broker[rows], np.arange(n + 1)).tolist()
        pools = []
        for i in range(n):
            mine = rows[starts[i] : starts[i + 1]]
            keys = weights[mine]
            order = np.argsort(keys, kind="stable")
            pools.append(_Pool.presorted(keys[order], mine[order]))
        self.replica_pools = pools

    def _replica_weights(self) -> tuple[IntArray, Int32Array, FloatArray]:
        """Every replica row's partition, broker and weight (:meth:`Model.weight`, the same sums)."""
        rep_part, rep_broker, sd = self._rep_part_v, self._rep_broker_v, self._sd_v
        leads = self._leader_v[rep_part] == rep_broker
        weights: FloatArray = self._sf_v + np.where(leads, sd[rep_part], 0.0)
        return rep_part, rep_broker, weights

    # -- state

    def out_of_band(self) -> list[int]:
        return [i for i in self.active if self.db[i] > self.hi or self.db[i] < self.lo]

    def _worst(self, stuck: set[int]) -> int:
        """The active broker farthest from the average among those outside the band and not stuck (the
        first such on a tie); -1 when none."""
        values = self._dbv[: self.n] if self._all_active else self._dbv[self._active_arr]
        deviation = np.abs(values - self.avg) * ((values > self.hi) | (values < self.lo))
        if stuck:
            position = self._position
            deviation[[position[i] for i in stuck if i in position]] = 0.0
        k = int(deviation.argmax())
        return self.active[k] if deviation[k] > 0.0 else -1

    def _cap(self, donor: int, receiver: int, in_band: bool) -> float:
        """The largest weight worth moving: one that keeps both inside the band, else (only between a
        broker above and one below the average) half their gap, which never makes the worse of the two worse
        and never overloads a broker that is not (a broker pushed over the band would need moves of its
        own)."""
        db = self.db
        if in_band:
            return min(self.hi - db[receiver], db[donor] - self.lo)
        if db[receiver] >= self.avg or db[donor] <= self.avg:
            return 0.0
        return (db[donor] - db[receiver]) / 2.0

    def _partners(self, x: int) -> list[int]:
        """Broker x's partners, the most promising first: above the average, the targets lighter than x,
        the lightest first; below it (and a target), the active brokers heavier than x, the heaviest first
        (the stable sorts of the brokers by Db, cut where the partner stops being lighter or heavier)."""
        dbv, dx = self._dbv, self.db[x]
        if dx > self.avg:
            brokers = self._targets_arr
            values = dbv[brokers]
        elif x in self.target_set:
            brokers = self._active_arr
            values = -dbv[brokers]
            dx = -dx
        else:
            return []
        order = values.argsort(kind="stable")
        cut = int(values[order].searchsorted(dx, side="left"))
        partners: list[int] = brokers[order[:cut]].tolist()
        return partners

    def _pairs(self, x: int) -> list[tuple[int, int]]:
        """(donor, receiver) pairs for broker x, the most promising partner first."""
        partners = self._partners(x)
        if self.db[x] > self.avg:
            return list(zip(repeat(x), partners, strict=False))
        return list(zip(partners, repeat(x), strict=False))

    def sweeps(self, step: Callable[[int], bool]) -> int:
        """Repeat: fix the worst broker not yet found stuck, until all are stuck; again while that moved."""
        self._dbv[:] = self.db
        total = 0
        while True:
            stuck: set[int] = set()
            made = 0
            while (x := self._worst(stuck)) >= 0:
                if step(x):
                    made += 1
                else:
                    stuck.add(x)
            total += made
            if not made:
                return total

    # -- leader moves

    def _leader_dead(self, p: int) -> bool:
        return bool(self.leader_used[p])

    def leader_step(self, x: int) -> bool:
        """One leader move for broker x: the first (donor, receiver) pair of :meth:`_pairs` whose pool has
        a partition under the pair's cap (:meth:`_cap`: inside the band first, then the half gap)."""
        db, avg = self.db, self.avg
        over = db[x] > avg
        if not self.leader_pools:
            return False
        partners = self._partners(x)
        if not partners:
            return False
        pools = self._pools_from[x] if over else self._pools_to[x]
        guard = self.guard
        guarded = guard is not None and guard.guarded
        dead = self._leader_dead
        hi, lo = self.hi, self.lo
        for in_band in (True, False):
            for y in partners:
                pool = pools.get(y)
                if pool is None:
                    continue
                donor, receiver = (x, y) if over else (y, x)
                # _cap, inline (this runs millions of times at Cruise Control's size)
                if in_band:
                    room, spare = hi - db[receiver], db[donor] - lo
                    cap = room if room < spare else spare
                elif db[receiver] >= avg or db[donor] <= avg:
                    continue
                else:
                    cap = (db[donor] - db[receiver]) / 2.0
                if cap <= 0.0 or cap <= pool.floor:
                    continue
                accept = guard.leader_gate(donor, receiver) if guard is not None and guarded else None
                i = pool.best(cap, dead, accept)
                if i >= 0:
                    pool.kill(i)
                    self.move_leader(pool.items[i], donor, receiver)
                    return True
        return False

    def move_leader(self, p: int, donor: int, receiver: int) -> None:
        surplus = self.model.sd[p]
        self.model.leader[p] = receiver
        self._leader_v[p] = receiver
        self.leader_used[p] = 1
        self.touched.add(p)
        db, dbv = self.db, self._dbv
        db[donor] -= surplus
        db[receiver] += surplus
        dbv[donor], dbv[receiver] = db[donor], db[receiver]
        if self.guard is not None:
            self.guard.on_leader(p, donor, receiver)

    # -- replica moves

    def _replica_dead(self, r: int) -> bool:
        return bool(self.moved[r])

    def can_host(self, r: int, receiver: int) -> bool:
        """Not a replica of the partition now nor when the plan started, and the partition spans no fewer
        racks afterwards. A replica never goes back to a broker the partition left: chained moves (the
        leader's replica from b to c, then another replica onto b) would net to fewer replicas added plus a
        leadership handed to a broker the old leader still shares the partition with, an election the
        plan's leader moves (and, without them, the lower bound) do not allow for."""
        model = self.model
        p = model.rep_part[r]
        members = model.members[p]
        if receiver in members:
            return False
        origin = model.rep_origin  # the brokers the partition was on when the plan started
        for q in model.rep_of[p]:
            if origin[q] == receiver:
                return False
        source = model.rep_broker[r]
        rack = model.rack
        to_rack, from_rack = rack[receiver], rack[source]
        guard = self.guard
        if to_rack != from_rack:  # on the source's rack the partition keeps its racks
            # fewer racks when another replica is on the receiver's rack and none on the source's
            clash = kept = False
            for b in members:
                if b != source:
                    x = rack[b]
                    clash = clash or x == to_rack
                    kept = kept or x == from_rack
            if clash and not kept:
                if guard is not None:
                    guard.note_rack(receiver)
                return False
        return guard is None or guard.allow_replica(r, receiver)

    def _can_host_flipped(self, receiver: int, r: int) -> bool:
        return self.can_host(r, receiver)

    def replica_step(self, x: int) -> bool:
        """One replica into the band; else a heavy replica one way and a lighter one back; else a single
        move that narrows the gap."""
        pairs = self._pairs(x)
        return self._single(pairs, in_band=True) or self._swap(pairs) or self._single(pairs, in_band=False)

    def _single(self, pairs: list[tuple[int, int]], in_band: bool) -> bool:
        for donor, receiver in pairs:
            cap = self._cap(donor, receiver, in_band)
            if cap <= 0:
                continue
            pool = self.replica_pools[donor]
            i = pool.best(cap, self._replica_dead, partial(self._can_host_flipped, receiver))
            if i >= 0:
                pool.kill(i)
                self.move_replica(pool.items[i], receiver)
                return True
        return False

    def _can_take_back(self, sent: int, receiver: int, r: int) -> bool:
        return self.model.rep_part[r] != sent and self.can_host(r, receiver)

    def _swap(self, pairs: list[tuple[int, int]]) -> bool:
        """For a broker no single replica fits: send a replica r1 and take back a lighter r2 so that both
        brokers end inside the band (two moves). The heaviest few candidates for r1 are tried."""
        db, model = self.db, self.model
        if self.guard is not None and not self.guard.budget_left(2):
            return False
        for donor, receiver in pairs:
            if donor not in self.target_set:
                continue
            out_pool, back_pool = self.replica_pools[donor], self.replica_pools[receiver]
            for i in out_pool.candidates(self._replica_dead, partial(self._can_host_flipped, receiver)):
                r1 = out_pool.items[i]
                w1 = out_pool.keys[i]
                low = max(self.lo - db[donor] + w1, db[receiver] + w1 - self.hi, 0.0)
                high = min(self.hi - db[donor] + w1, db[receiver] + w1 - self.lo)
                if high <= low:
                    continue
                p1 = model.rep_part[r1]
                j = back_pool.best(high, self._replica_dead, partial(self._can_take_back, p1, donor))
                if j >= 0 and back_pool.keys[j] > low:
                    out_pool.kill(i)
                    back_pool.kill(j)
                    self.move_replica(r1, receiver)
                    self.move_replica(back_pool.items[j], donor)
                    return True
        return False

    def move_replica(self, r: int, receiver: int) -> None:
        model = self.model
        p, source = model.rep_part[r], model.rep_broker[r]
        w = model.weight(r)
        members = model.members[p]
        members[members.index(source)] = receiver
        model.rep_broker[r] = receiver
        self._rep_broker_v[r] = receiver
        leader_moved = model.leader[p] == source
        if leader_moved:
            model.leader[p] = receiver
            self._leader_v[p] = receiver
        self.moved[r] = 1
        self.touched.add(p)
        db, dbv = self.db, self._dbv
        db[source] -= w
        db[receiver] += w
        dbv[source], dbv[receiver] = db[source], db[receiver]
        if self.guard is not None:
            self.guard.on_replica(r, source, receiver, leader_moved)

    # -- lower bound

    def lower_bound(self, leader_moves: bool = True) -> int:
        """See the module docstring; computed before any move. Without leader moves, leadership leaves a
        broker only with its replica, so every replica counts with its whole weight."""
        db, model, n = self.db, self.model, self.n
        over = [db[i] > self.hi for i in range(n)]
        # movable replicas' weights with the leader surplus, and per broker without it (with leader moves)
        rep_part, rep_broker, all_weights = self._replica_weights()
        movable = np.frombuffer(self.movable, dtype=np.uint8).astype(bool)
        rows = np.nonzero((rep_broker < n) & movable[rep_part])[0]
        weights = all_weights[rows]
        del all_weights
        share_of = self._sf_v[rows] if leader_moves else weights
        rows_broker = rep_broker[rows]
        del rows
        # leader surplus that could leave each broker, by leader move or with its replica (summed in
        # partition order, as a loop over the partitions would)
        shed = [0.0] * n
        if leader_moves:
            leader = self._leader_v
            led = (leader >= 0) & (leader < n) & movable
            sums = np.bincount(leader[led], weights=self._sd_v[led], minlength=n)
            shed = sums[:n].tolist()
        # leader surplus each broker could take over by leader moves (only the underloaded brokers' is read)
        gain = [0.0] * n
        under = [db[i] < self.lo for i in range(n)]
        # partitions led by an overloaded broker with an eligible follower elsewhere
        escapes: set[int] = set()
        sd = model.sd
        for (h, b), pool in self.leader_pools.items():
            if b < n and under[b]:
                gain[b] += sum(map(sd.__getitem__, pool.items))
            if over[h] and not over[b]:
                escapes.update(pool.items)
        heaviest_first = _descending_cumsum(weights)
        out = in_ = 0
        by_broker = np.argsort(rows_broker.astype(np.int16) if n < 32768 else rows_broker, kind="stable")
        starts = np.searchsorted(rows_broker[by_broker], np.arange(n + 1)).tolist()
        for i in range(n):
            if over[i]:
                shares = share_of[by_broker[starts[i] : starts[i + 1]]]
                out += _moves_needed(_descending_cumsum(shares), db[i] - self.hi - shed[i])
            elif db[i] < self.lo and i in self.target_set:
                in_ += _moves_needed(heaviest_first, self.lo - db[i] - gain[i])
        return max(out, in_, self._pooled_bound(over, escapes))

    def _pooled_bound(self, over: Sequence[bool], escapes: set[int]) -> int:
        """All overloaded brokers together: their total excess must leave the group, as the surplus of
        partitions whose leadership can go to a broker outside it, or with replicas moved out (carrying their
        surplus when no follower outside could have taken it)."""
        db, model, n = self.db, self.model, self.n
        excess = sum(db[i] - self.hi for i in range(n) if over[i])
        if excess <= 0:
            return 0
        free = sum(map(model.sd.__getitem__, escapes))
        # every movable partition's replicas on overloaded brokers, each with its follower share; the
        # heaviest of a partition's also carries its surplus when its leader is overloaded and no follower
        # outside the group could take the leadership (the same weights as a loop over the partitions)
        n_all = len(model.broker_ids)
        over_all = np.zeros(n_all, dtype=bool)
        over_all[:n] = over
        rep_part, rep_broker = self._rep_part_v, self._rep_broker_v
        movable = np.frombuffer(self.movable, dtype=np.uint8).astype(bool)
        rows = np.flatnonzero(movable[rep_part] & over_all[rep_broker])
        shares = self._sf_v[rows]
        parts = rep_part[rows]
        leader = self._leader_v
        carries = (leader >= 0) & (leader < n)
        carries[carries] = over_all[leader[carries]]
        if escapes:
            carries[np.fromiter(escapes, dtype=np.int64, count=len(escapes))] = False
        order = np.lexsort((-shares, parts))  # per partition, the heaviest share first
        first = order[np.r_[True, parts[order][1:] != parts[order][:-1]]] if len(order) else order
        first = first[carries[parts[first]]]
        shares[first] += self._sd_v[parts[first]]
        return _moves_needed(_descending_cumsum(shares), excess - free)


def _descending_cumsum(values: Sequence[float] | FloatArray) -> FloatArray:
    result: FloatArray = np.cumsum(np.sort(np.asarray(values, dtype=np.float64))[::-1])
    return result


def _moves_needed(cumulative: FloatArray, amount: float) -> int:
    """The fewest items whose weights (heaviest first, as cumulated) reach ``amount``; 0 if nothing is
    needed and every item if even all of them fall short (the bound then says nothing more)."""
    if amount <= 1e-15 or not len(cumulative):
        return 0
    return min(int(np.searchsorted(cumulative, amount * (1 - 1e-9))) + 1, len(cumulative))
