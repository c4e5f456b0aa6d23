"""The count goals' max flow: which units above a goal's band can hand their items straight to which units
below it (the flow a count goal's lower bound is published on), and the search's first phase that makes
those hand-offs before the greedy (a unit whose items may go anywhere must not fill the only receiver
another unit's items could use). Also the item index by unit that the searches and the flow share."""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import numpy as np

from app.actions.rebalance.balancer import Balancer
from app.actions.rebalance.goals import (
    DISK_USAGE,
    LEADER_BYTES_IN,
    LEADER_GOALS,
    REPLICA_COUNT,
    TOPIC_GOALS,
    TOPIC_REPLICAS,
    GoalState,
)
from app.actions.rebalance.model import FloatArray, IntArray

if TYPE_CHECKING:
    from app.actions.rebalance.search import Search


class Groups:
    """Items in groups, each in a fixed order: group k is ``items[first[k]:end[k]]``. The items a search
    may still take are among those it started with, so a group's prefix of items gone for good is skipped
    once (``first`` moves past it)."""

    __slots__ = ("end", "first", "items")

    def __init__(self, keys: IntArray, items: IntArray, n_keys: int, then: FloatArray | None = None) -> None:
        """Group ``items`` by ``keys``; within a group by ``then`` (if given), then by item."""
        order = np.lexsort((items, keys) if then is None else (items, then, keys))
        starts = np.searchsorted(keys[order], np.arange(n_keys + 1))
        self.items = array("q")
        self.items.frombytes(np.ascontiguousarray(items[order], dtype=np.int64).tobytes())
        self.first = array("q")
        self.first.frombytes(np.ascontiguousarray(starts[:-1], dtype=np.int64).tobytes())
        self.end = array("q")
        self.end.frombytes(np.ascontiguousarray(starts[1:], dtype=np.int64).tobytes())


def index_items(goal: str, state: GoalState, balancer: Balancer) -> Groups:
    """The items a unit of ``goal`` (a broker, or a topic on a broker) may give, grouped by unit: for the
    leader goals the movable partitions each broker leads, else the replicas not moved yet of the movable
    partitions. Within a unit the largest first for ``leader_bytes_in`` (by the leader's bytes in) and
    ``disk_usage`` (by size), else by item."""
    model = balancer.model
    topic = goal in TOPIC_GOALS
    n_all = len(model.broker_ids)
    n_keys = n_all * (len(state.topic_names) if topic else 1)
    movable = np.frombuffer(balancer.movable, dtype=np.uint8).astype(bool)
    if goal in LEADER_GOALS:
        leader = np.asarray(model.leader, dtype=np.int64)
        parts = np.nonzero(movable & (leader >= 0))[0]
        keys = leader[parts] + (state.part_topic[parts] * n_all if topic else 0)
        return Groups(keys, parts, n_keys, -state.lbi[parts] if goal == LEADER_BYTES_IN else None)
    rep_part = np.asarray(model.rep_part, dtype=np.int64)
    moved = np.frombuffer(balancer.moved, dtype=np.uint8).astype(bool)
    rows = np.nonzero(movable[rep_part] & ~moved)[0]
    keys = np.asarray(model.rep_broker, dtype=np.int64)[rows]
    if topic:
        keys += state.part_topic[rep_part[rows]] * n_all
    return Groups(keys, rows, n_keys, -state.size[rep_part[rows]] if goal == DISK_USAGE else None)


PAIR_SCAN = 256
"""Items of a unit above looked at beyond the ones it must give (then the flow counts as short: cautious)."""


class Pairing:
    """Which units above a count goal's band could hand an item straight to which units below it. The
    items a unit may give are indexed by unit once (a topic's rows on a broker are its few rows), or taken
    from the goal's search (``groups``: the same index; the items gone since are skipped)."""

    def __init__(
        self,
        goal: str,
        state: GoalState,
        balancer: Balancer,
        leader_moves: bool,
        replicas: bool,
        groups: Groups | None = None,
    ) -> None:
        self.goal, self.state, self.balancer = goal, state, balancer
        self.replicas = replicas
        self.model = model = balancer.model
        self.leaders = goal in LEADER_GOALS
        self.leader_moves = leader_moves
        self.topic = goal in TOPIC_GOALS
        self.n_all = n_all = len(model.broker_ids)
        self.groups = groups if groups is not None else index_items(goal, state, balancer)
        if self.topic:
            table = state.topic_rep if goal == TOPIC_REPLICAS else state.topic_lead
            assert table is not None
            self.table: IntArray = table
        else:
            q = state.rep_count if goal == REPLICA_COUNT else state.lead_count
            self.table = q[None, :]
        self.eligible = np.asarray(state.eligible, dtype=np.int64)
        self.non_targets = frozenset(b for b in range(n_all) if b not in balancer.target_set)
        self._rules: dict[int, tuple[frozenset[int], bool, tuple[int, ...], frozenset[int]]] = {}
        """Per item, what :meth:`can_give` checks (kept for one flow: :meth:`forget`)."""

    def n_units(self) -> int:
        """How many unit groups (topics for the topic goals; else one)."""
        return len(self.state.topic_names) if self.topic else 1

    def outside(self, t: int) -> tuple[dict[int, int], dict[int, int]]:
        """Items above the band per unit, and items missing below it (eligible brokers)."""
        if self.topic:
            avg = float(self.state.topic_avg[self.goal][t])
            lo, hi = avg - 1.0, avg + 1.0
        else:
            lo, hi = self.state.bands[self.goal]
        brokers = self.eligible
        q = self.table[t, brokers].astype(np.float64)
        up, down = q - hi > 1e-9, lo - q > 1e-9
        above = dict(
            zip(brokers[up].tolist(), np.ceil(q[up] - hi - 1e-9).astype(np.int64).tolist(), strict=True)
        )
        below = dict(
            zip(brokers[down].tolist(), np.ceil(lo - q[down] - 1e-9).astype(np.int64).tolist(), strict=True)
        )
        return above, below

    def items(self, t: int, s: int, limit: int) -> list[int]:
        """Up to ``limit`` replica rows of unit (t, s) that may still move (the leaders' rows for the leader
        goals)."""
        model, balancer = self.model, self.balancer
        if not self.state.source_ok[s]:
            return []
        groups = self.groups
        key = t * self.n_all + s if self.topic else s
        found: list[int] = []
        for item in groups.items[groups.first[key] : groups.end[key]]:
            if self.leaders:
                if model.leader[item] != s:
                    continue
                r = model.rep_of[item][model.members[item].index(s)]
            elif balancer.moved[item] or model.rep_broker[item] != s:
                continue
            else:
                r = item
            found.append(r)
            if len(found) >= limit:
                break
        return found

    def can_give(self, r: int, d: int, replicas: bool = True) -> bool:
        """Replica row r (or, for the leader goals, its leadership) could go to broker d now
        (``replicas=False``: by a leader move)."""
        rules = self._rules.get(r)
        if rules is None:
            rules = self._rules[r] = self._rules_of(r)
        leads, replica, blocked, racks = rules
        if d in leads:
            return True
        if not (replicas and replica) or d in blocked or d in self.non_targets:
            return False
        return self.model.rack[d] not in racks

    def forget(self) -> None:
        """Drop the items' rules (one flow's items are not the next one's)."""
        self._rules.clear()

    def _rules_of(self, r: int) -> tuple[frozenset[int], bool, tuple[int, ...], frozenset[int]]:
        """(brokers its leadership may go to, whether its replica may move, brokers it may not go to besides
        the brokers outside the plan, racks it may not go to)."""
        model, balancer = self.model, self.balancer
        p = model.rep_part[r]
        members = model.members[p]
        leads: frozenset[int] = frozenset()
        if self.leaders and self.leader_moves and not balancer.leader_used[p]:
            info = model.infos[p]
            leads = frozenset(
                d
                for d in members
                if d in balancer.target_set
                and (model.broker_ids[d] in info.isr or model.broker_ids[d] not in info.assignment.replicas)
            )
        if not self.replicas or balancer.moved[r]:
            return leads, False, (), frozenset()
        blocked = (*members, *(model.rep_origin[q] for q in model.rep_of[p]))
        rack, source = model.rack, model.rep_broker[r]
        others = frozenset(rack[b] for b in members if b != source)
        return leads, True, blocked, others if rack[source] not in others else frozenset()

    def flow(self, t: int, above: dict[int, int], below: dict[int, int]) -> int:
        """The most items the units above could give straight to the units below (:class:`_Flow`)."""
        if not above or not below:
            return 0
        target = min(sum(above.values()), sum(below.values()))
        return _Flow(self, t, above, below).run(target)


class _Flow:
    """A max flow from the units above a count goal's band (each at most its items above), through the
    items they may give (each item once; a partition at most once onto a broker), to the units below (each
    at most its items missing): augmenting paths found breadth first over edges checked as they are first
    needed, an item straight to a unit below with room first (the common case costs a check or two). A
    unit looks at its first items it must give plus :data:`PAIR_SCAN` more; a unit above that finds no
    augmenting path is not tried again in a pass (it would find none later: the paths only shrink). For
    the leader goals a first pass uses leader moves only, so that leaderships move without their replica
    wherever the flow allows; the second adds the replica moves."""

    def __init__(self, pairing: Pairing, t: int, above: dict[int, int], below: dict[int, int]) -> None:
        self.pairing = pairing
        pairing.forget()
        self.left = dict(above)
        self.room = dict(below)
        self.order = sorted(below, key=lambda d: (-below[d], d))
        self.opened = list(self.order)
        """The units below with room, in :attr:`order` (rooms only shrink)."""
        self.units = sorted(above, key=lambda s: (-above[s], s))
        self.items = {s: pairing.items(t, s, above[s] + PAIR_SCAN) for s in above}
        self.cursor = dict.fromkeys(above, 0)
        self.unit_of = {r: s for s, rows in self.items.items() for r in rows}
        self.where: dict[int, int] = {}
        """Item -> the unit below it goes to."""
        self.at: dict[int, list[int]] = {d: [] for d in below}
        self.parts_at: dict[tuple[int, int], int] = {}
        """(partition, unit below) -> the item of that partition going there."""
        self.rep_part = pairing.model.rep_part
        self.replicas = True
        """Whether this pass's edges include replica moves."""

    def run(self, target: int) -> int:
        """Augment until ``target`` items flow or no unit above finds a path; the items flowing."""
        total = 0
        passes = (False, True) if self.pairing.leaders and self.pairing.leader_moves else (True,)
        for replicas in passes:
            self.replicas = replicas
            self.cursor = dict.fromkeys(self.cursor, 0)
            for s in self.units:
                while total < target and self.left[s] > 0 and self._augment(s):
                    total += 1
                if total >= target:
                    return total
        return total

    def hand_offs(self) -> list[tuple[int, int, int]]:
        """(unit above, item, unit below) of every item flowing."""
        return [(self.unit_of[r], r, d) for r, d in self.where.items()]

    def _can(self, r: int, d: int) -> bool:
        holder = self.parts_at.get((self.rep_part[r], d))
        return (holder is None or holder == r) and self.pairing.can_give(r, d, self.replicas)

    def _assign(self, r: int, d: int) -> None:
        self.where[r] = d
        self.at[d].append(r)
        self.parts_at[self.rep_part[r], d] = r

    def _unassign(self, r: int) -> int:
        d = self.where.pop(r)
        self.at[d].remove(r)
        del self.parts_at[self.rep_part[r], d]
        return d

    def _fill(self, d: int) -> None:
        """One more item goes to unit below d."""
        self.room[d] -= 1
        if not self.room[d]:
            self.opened = [x for x in self.opened if x != d]

    def _direct(self, s: int) -> bool:
        """Give one item of s straight to a unit below with room. An item none of them takes now never
        will (rooms only shrink), so the cursor passes it."""
        opened = self.opened
        items, i = self.items[s], self.cursor[s]
        while i < len(items):
            r = items[i]
            i += 1
            if r in self.where:
                continue
            for d in opened:
                if self._can(r, d):
                    self.cursor[s] = i
                    self._assign(r, d)
                    self._fill(d)
                    self.left[s] -= 1
                    return True
        self.cursor[s] = i
        return False

    def _augment(self, s0: int) -> bool:
        if self._direct(s0):
            return True
        # breadth first over the residual graph: a unit above gives an item it does not give yet; a full
        # unit below passes one of its items on to another unit below, or back to that item's unit, which
        # gives another instead
        parent_d: dict[int, tuple[bool, int, int]] = {}
        """Unit below -> (reached from a unit above?, that unit or the unit below before, the item)."""
        parent_u: dict[int, tuple[int, int] | None] = {s0: None}
        """Unit above -> (the unit below it takes its item back from, the item), None for s0."""
        seen: set[int] = set()
        queue: list[tuple[bool, int]] = [(True, s0)]
        for is_unit, x in queue:
            candidates = [r for r in self.items[x] if r not in self.where] if is_unit else list(self.at[x])
            for r in candidates:
                if r in seen:
                    continue
                seen.add(r)
                for d in self.order:
                    if d in parent_d or not self._can(r, d):
                        continue
                    parent_d[d] = (is_unit, x, r)
                    if self.room[d] > 0:
                        self._apply(d, parent_d, parent_u)
                        return True
                    queue.append((False, d))
                if not is_unit:
                    s = self.unit_of[r]
                    if s not in parent_u:
                        parent_u[s] = (x, r)
                        queue.append((True, s))
        return False

    def _apply(
        self,
        end: int,
        parent_d: dict[int, tuple[bool, int, int]],
        parent_u: dict[int, tuple[int, int] | None],
    ) -> None:
        self._fill(end)
        d = end
        while True:
            is_unit, x, r = parent_d[d]
            if not is_unit:  # r passes from unit below x to d; x's slot is filled one step back
                self._unassign(r)
                self._assign(r, d)
                d = x
                continue
            self._assign(r, d)
            back = parent_u[x]
            if back is None:
                self.left[x] -= 1
                return
            d, r = back  # unit x takes r back from d (and gave its other item instead)
            self._unassign(r)


def follow_flow(search: Search, leader_moves: bool, replicas: bool) -> None:
    """A count goal's first phase: per unit group (topic), the hand-offs of a max flow from the units above
    the band to the units below (:class:`_Flow`), made before the greedy, so a unit whose items may go
    anywhere does not fill the only receiver another unit's items could use. Only the units outside the band
    take part (small graphs). A hand-off the guard or the partition's rules refuse now (two items of one
    partition) is left to the greedy."""
    goal, state, balancer, model = search.goal, search.state, search.balancer, search.model
    for _ in range(3):  # a refused hand-off can leave a path the next flow finds
        pairing = Pairing(goal, state, balancer, leader_moves, replicas, search.groups)
        made = refused = 0
        for t in range(pairing.n_units()):
            above, below = pairing.outside(t)
            if not above or not below:
                continue
            flow = _Flow(pairing, t, above, below)
            flow.run(min(sum(above.values()), sum(below.values())))
            for s, r, d in flow.hand_offs():
                p = model.rep_part[r]
                if model.rep_broker[r] != s or (pairing.leaders and model.leader[p] != s):
                    refused += 1
                    continue
                leads = pairing.leaders and leader_moves and d in model.members[p]
                if search._move("leader", p, s, d) if leads else search._move("replica", r, s, d):
                    made += 1
                else:
                    refused += 1
        if not made or not refused:
            return
