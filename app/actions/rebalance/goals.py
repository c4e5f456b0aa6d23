"""Goals a plan works for, in priority order, and the guard every move passes.

**The goals.** Hard: ``rack`` (a partition spans as many racks as it can: ``min(replication factor,
racks of the brokers it may use)``; violations are fixed first), ``disk_capacity`` (no broker's log dirs
planned above ``disk_max_ratio`` of their size, counting the bytes each move brings in and takes out),
``replica_capacity`` (at most ``max_replicas_per_broker`` replicas on a broker). Soft: ``load`` (the load
model's band, |r_n| ≤ r: the balancer of :mod:`~app.actions.rebalance.balancer`), ``disk_usage`` (each
broker's used ratio within ± ``disk_band`` of the mean), ``replica_count`` and ``leader_count`` (within
± max(1, ``count_band`` × the mean)), ``topic_replicas`` and ``topic_leaders`` (each topic's replicas,
leaders, within ±1 of even over the brokers that may hold it), ``leader_bytes_in`` (the bytes in its
leaders take, from the load's ``nwBytesIn``, within ± ``count_band`` of the mean).

**Defaults.** Without named goals a plan works to :data:`DEFAULT_GOALS`, with a difference that keeps
today's plans: the hard goals then only constrain the moves (none breaks them) and their violations are
reported, not fixed; naming the goals (even the same list) fixes them first.

**Priority.** The goals are worked on in the order given. Every move a goal makes must make that goal
better and must not make any other listed goal worse, except that a hard goal's fixing move only answers
to the other hard goals: so a soft goal is never met by breaking a higher one (nor a lower one: a listed
soft goal never ends worse than it started unless a hard goal had to be fixed), and a higher goal picks its
moves first. The ``load`` goal's own moves are the balancer's (each one narrows the band's gaps).

**Measures.** Each goal has one figure, its *violation* (0 when met), which is what "better" and "worse"
mean: ``rack`` partitions short of racks; ``disk_capacity`` bytes above the cap summed over brokers;
``replica_capacity`` replicas above the cap summed; the band goals the distance outside the band summed over
brokers (``topic_*``: over topic × broker), in the goal's units (Db, used ratio, replicas, leaders,
bytes/s).

**Disk figures.** A broker's capacity and used bytes are given (the service takes its fullest log dir's:
Kafka's metrics do not say which dir holds a partition nor which one a new replica takes, so a replica is
counted in the fullest, exact with one log dir per broker, the common case); a partition's size is its
leader's log size (:mod:`app.actions.sizes`). Brokers without figures are left out of the disk goals,
which say so in ``why_not`` (nothing is guessed); partitions without a size count 0 bytes, and how many
there are is said there too.

Pure: the state is the model's and the balancer's; this module reads them and keeps its own counts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import numpy as np

from app.actions.rebalance.model import FloatArray, IntArray, Model
from app.actions.rebalance.plan import listed_brokers
from collectors.kafka.model import TopicPartition

RACK = "rack"
DISK_CAPACITY = "disk_capacity"
REPLICA_CAPACITY = "replica_capacity"
LOAD = "load"
DISK_USAGE = "disk_usage"
REPLICA_COUNT = "replica_count"
LEADER_COUNT = "leader_count"
TOPIC_REPLICAS = "topic_replicas"
TOPIC_LEADERS = "topic_leaders"
LEADER_BYTES_IN = "leader_bytes_in"

HARD_GOALS = (RACK, DISK_CAPACITY, REPLICA_CAPACITY)
SOFT_GOALS = (LOAD, DISK_USAGE, REPLICA_COUNT, LEADER_COUNT, TOPIC_REPLICAS, TOPIC_LEADERS, LEADER_BYTES_IN)
GOALS = HARD_GOALS + SOFT_GOALS
DEFAULT_GOALS = (*HARD_GOALS, LOAD)
"""What a plan works for when no goals are named: today's plans, plus the hard goals' checks."""
DRAIN = "drain"
"""Not a goal: what the moves emptying a broker are made for (only the hard goals constrain them)."""
LEADER_GOALS = frozenset({LEADER_COUNT, TOPIC_LEADERS, LEADER_BYTES_IN})
TOPIC_GOALS = frozenset({TOPIC_REPLICAS, TOPIC_LEADERS})

# what blocked a move, as why_not names it
BLOCK_RACK = "rack spread"
BLOCK_CAPACITY = "capacity"
BLOCK_EXCLUDED = "excluded brokers"
BLOCK_BUDGET = "the move budget"
BLOCK_HIGHER = "another listed goal"

_EPS = 1e-12


def check_goals(goals: Sequence[str] | None) -> tuple[str, ...]:
    """The goals to work for (:data:`DEFAULT_GOALS` for None). ValueError naming unknown or repeated
    ones, or an empty list."""
    if goals is None:
        return DEFAULT_GOALS
    unknown = [g for g in goals if g not in GOALS]
    if unknown:
        raise ValueError(f"unknown goal(s) {', '.join(map(repr, unknown))}: the goals are {', '.join(GOALS)}")
    repeated = sorted({g for g in goals if list(goals).count(g) > 1})
    if repeated:
        raise ValueError(f"goal(s) {', '.join(repeated)} listed more than once")
    if not goals:
        raise ValueError("the goal list is empty")
    return tuple(goals)


@dataclass(frozen=True, slots=True)
class GoalOptions:
    """The goals' thresholds and the plan's limits (see the module note)."""

    disk_max_ratio: float = 0.80
    disk_band: float = 0.10
    max_replicas_per_broker: int | None = None
    count_band: float = 0.10
    only_over_disk_used_ratio: float | None = None
    """Move replicas (and leadership) only off brokers whose disk is used above this ratio."""
    max_moves: int | None = None
    """At most this many replica moves (replicas added); leader moves are free."""
    max_bytes: int | None = None
    """At most this many bytes copied (partitions of unknown size count 0)."""

    def __post_init__(self) -> None:
        if not 0 < self.disk_max_ratio <= 1:
            raise ValueError(f"disk_max_ratio must be in (0, 1], got {self.disk_max_ratio}")
        if not 0 <= self.disk_band <= 1 or not 0 <= self.count_band <= 1:
            raise ValueError("disk_band and count_band must be in [0, 1]")
        if self.max_replicas_per_broker is not None and self.max_replicas_per_broker < 1:
            raise ValueError(f"max_replicas_per_broker must be >= 1, got {self.max_replicas_per_broker}")
        ratio = self.only_over_disk_used_ratio
        if ratio is not None and not 0 <= ratio <= 1:
            raise ValueError(f"only_over disk_used_ratio must be in [0, 1], got {ratio}")
        if self.max_moves is not None and self.max_moves < 0:
            raise ValueError(f"max_moves must be >= 0, got {self.max_moves}")
        if self.max_bytes is not None and self.max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {self.max_bytes}")

    @property
    def limits_moves(self) -> bool:
        return (
            self.max_moves is not None
            or self.max_bytes is not None
            or self.only_over_disk_used_ratio is not None
        )


@dataclass(frozen=True, slots=True)
class DiskInput:
    """The collected disk figures: per broker its log dirs' total size and used bytes, per partition its
    size (bytes). A broker or partition missing here has no figure."""

    capacity_bytes: Mapping[int, float] = field(default_factory=dict)
    used_bytes: Mapping[int, float] = field(default_factory=dict)
    sizes: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GoalReport:
    """How one goal fared: its violation before and after (0: met), the moves it made, what stopped it."""

    goal: str
    hard: bool
    measure: str
    before: float | None
    after: float | None
    satisfied: bool | None
    """None when it could not be judged (no disk figures)."""
    moves: int
    """Replica moves made for this goal."""
    leader_moves: int
    why_not: str | None
    """What blocked it (None when met)."""
    lower_bound: int | None = None
    """No plan meets it with fewer moves (replica moves; leader goals: leader plus replica moves); None
    when no bound is known."""

    @property
    def ratio(self) -> float | None:
        if self.lower_bound is None or self.lower_bound == 0:
            return None
        made = self.moves + (self.leader_moves if self.goal in LEADER_GOALS else 0)
        return made / self.lower_bound


MEASURES = {
    RACK: "partitions spanning fewer racks than they could",
    DISK_CAPACITY: "bytes planned above disk_max_ratio, summed over brokers",
    REPLICA_CAPACITY: "replicas above max_replicas_per_broker, summed over brokers",
    LOAD: "Db outside the load band, summed over brokers",
    DISK_USAGE: "used ratio outside mean ± disk_band, summed over brokers",
    REPLICA_COUNT: "replicas outside mean ± max(1, count_band × mean), summed over brokers",
    LEADER_COUNT: "leaders outside mean ± max(1, count_band × mean), summed over brokers",
    TOPIC_REPLICAS: "replicas outside even ± 1, summed over topic × broker",
    TOPIC_LEADERS: "leaders outside even ± 1, summed over topic × broker",
    LEADER_BYTES_IN: "leaders' bytes in outside mean ± count_band, summed over brokers (bytes/s)",
}


class LoadBand(Protocol):
    """What the load goal reads of the balancer: Db per broker, the band, the active brokers."""

    db: list[float]
    lo: float
    hi: float
    active: list[int]
    active_set: frozenset[int]


def band_distance(q: FloatArray, lo: FloatArray | float, hi: FloatArray | float) -> FloatArray:
    """Each figure's distance outside the band [lo, hi] (0 inside): :func:`band_gap` on every element."""
    result: FloatArray = np.maximum(np.maximum(q - hi, lo - q), 0.0)
    return result


def one_count_delta(q_source: float | None, q_receiver: float, lo: float, hi: float) -> float:
    """:meth:`GoalState._count_delta` of moving one item to an eligible receiver holding ``q_receiver``
    (``q_source``: the source's count, None when it is not eligible): the same operations, so the same
    value."""
    total = 0.0
    if q_source is not None:
        total += band_gap(q_source - 1.0, lo, hi) - band_gap(q_source, lo, hi)
    total += band_gap(q_receiver + 1.0, lo, hi) - band_gap(q_receiver, lo, hi)
    return total


def _always(p: int) -> bool:
    return True


def band_gap(q: float, lo: float, hi: float) -> float:
    """How far ``q`` lies outside the band [lo, hi] (0 inside)."""
    return q - hi if q > hi else (lo - q if q < lo else 0.0)


class GoalState:
    """The goals' view of the plan as it grows: counts, disk bytes, per-topic counts, and
    :meth:`allow_replica` / :meth:`allow_leader`, the guard every move passes once goals constrain it.

    ``eligible`` are the brokers the band goals are judged over and replicas may go to; ``sources`` (None:
    any) those replicas and leadership may leave."""

    def __init__(
        self,
        model: Model,
        band: LoadBand,
        goals: Sequence[str],
        options: GoalOptions,
        disks: DiskInput | None,
        eligible: Collection[int],
        sources: Collection[int] | None,
        load_sources: Mapping[str, FloatArray] | None = None,
    ) -> None:
        self.model = model
        self.band = band
        self.goals = tuple(goals)
        self.listed = frozenset(goals)
        self.options = options
        n_all = len(model.broker_ids)
        self.n_all = n_all
        self.eligible = sorted(eligible)
        self.eligible_mask = np.zeros(n_all, dtype=bool)
        self.eligible_mask[self.eligible] = True
        self._eligible: list[bool] = self.eligible_mask.tolist()
        self.source_ok = np.ones(n_all, dtype=bool)
        if sources is not None:
            self.source_ok[:] = False
            self.source_ok[list(sources)] = True
        self.current = ""
        self.fixes_hard = True
        self.drain = False
        """A drain: no replica moves but the drained broker's, so the soft goals get leader moves only."""
        """False with the default goals: the hard goals constrain the moves but are not fixed."""
        self.replica_moves: Counter[str] = Counter()
        self.leader_moves: Counter[str] = Counter()
        self._blocked_at: dict[tuple[str, str], Counter[int]] = {}
        """Per (goal, reason), how many moves were blocked at each broker (index)."""
        self.moves_used = 0
        self.bytes_used = 0.0
        rep_broker = np.asarray(model.rep_broker, dtype=np.int64)
        self.rep_count: IntArray = np.bincount(rep_broker, minlength=n_all).astype(np.int64)
        leader = np.asarray(model.leader, dtype=np.int64)
        self.lead_count: IntArray = np.bincount(leader[leader >= 0], minlength=n_all).astype(np.int64)
        # disks
        self.cap = np.full(n_all, np.nan)
        self.used = np.full(n_all, np.nan)
        self.size = np.zeros(len(model.tps))
        self.unsized: list[TopicPartition] = []
        if disks is not None:
            for i, b in enumerate(model.broker_ids):
                cap, used = disks.capacity_bytes.get(b), disks.used_bytes.get(b)
                if cap is not None and used is not None and cap > 0:
                    self.cap[i], self.used[i] = float(cap), float(used)
            sizes = disks.sizes
            for p, tp in enumerate(model.tps):
                s = sizes.get(tp)
                if s is None:
                    self.unsized.append(tp)
                else:
                    self.size[p] = float(s)
        self.disk_known = ~np.isnan(self.cap)
        self.disk_limit = self.cap * options.disk_max_ratio
        self.disk_goals = bool(self.listed & {DISK_CAPACITY, DISK_USAGE})
        self.has_disks = bool(self.disk_known.any())
        # topics
        self.topic_names: list[str] = []
        self.part_topic: IntArray = np.zeros(0, dtype=np.int64)
        self.topic_rep: IntArray | None = None
        self.topic_lead: IntArray | None = None
        if self.listed & TOPIC_GOALS:  # per-topic counts only when a topic goal is listed (memory)
            self.topic_names = sorted({tp.topic for tp in model.tps})
            topic_index = {t: i for i, t in enumerate(self.topic_names)}
            self.part_topic = np.array([topic_index[tp.topic] for tp in model.tps], dtype=np.int64)
            shape = (len(self.topic_names), n_all)
            self.topic_rep = np.zeros(shape, dtype=np.int64)
            rep_part = np.asarray(model.rep_part, dtype=np.int64)
            np.add.at(self.topic_rep, (self.part_topic[rep_part], rep_broker), 1)
            self.topic_lead = np.zeros(shape, dtype=np.int64)
            led = leader >= 0
            np.add.at(self.topic_lead, (self.part_topic[led], leader[led]), 1)
        # leaders' bytes in, per partition and broker
        shares = None if load_sources is None else load_sources.get("nwBytesIn")
        self.has_lbi = shares is not None
        self.lbi: FloatArray = np.zeros(len(model.tps)) if shares is None else shares
        self.lbi_broker = np.bincount(leader[leader >= 0], weights=self.lbi[leader >= 0], minlength=n_all)
        self._tracks_lbi = self.has_lbi and LEADER_BYTES_IN in self.listed
        """Whether leader moves update the leaders' bytes in per broker: only its goal reads them (a leader
        move's bookkeeping is paid 150,000 times at Cruise Control's size)."""
        self._lbi_held: tuple[float, float, FloatArray] | None = None
        """(lo, hi, each broker's leaders' bytes in outside that band), kept until a leader moves."""
        # sources over the only_over threshold
        threshold = options.only_over_disk_used_ratio
        self.over_missing: list[int] = []
        if threshold is not None:
            with np.errstate(invalid="ignore"):
                over = self.used / self.cap > threshold
            self.over_missing = [model.broker_ids[i] for i in range(model.n_model) if not self.disk_known[i]]
            self.source_ok &= over
        self.guarded = bool(
            self.listed - {LOAD, RACK, DISK_CAPACITY, REPLICA_CAPACITY}
            or (DISK_CAPACITY in self.listed and self.has_disks)
            or (REPLICA_CAPACITY in self.listed and options.max_replicas_per_broker is not None)
            or sources is not None
            or options.limits_moves
        )
        self.bands: dict[str, tuple[float, float]] = {}
        self._set_bands()
        self._set_deltas()
        # the per-broker figures the guard reads at every move, as lists (faster to index than arrays)
        self._rc: list[int] = self.rep_count.tolist()
        self._lc: list[int] = self.lead_count.tolist()
        self._lbi: list[float] = self.lbi_broker.tolist()
        self._used: list[float] = self.used.tolist()
        self._cap: list[float] = self.cap.tolist()
        self._ratio_judged: list[bool] = (self.disk_known & self.eligible_mask).tolist()
        self._source_ok: list[bool] = self.source_ok.tolist()
        self._disk_capped: list[bool] = (self.disk_known & (DISK_CAPACITY in self.listed)).tolist()
        self._disk_limit: list[float] = self.disk_limit.tolist()
        self._checked_for: str | None = None
        self._checks: list[
            tuple[str, Callable[[int, int, int], float], Callable[[int, int, int], float] | None]
        ] = []

    # -- bands

    def _set_bands(self, incoming: Sequence[int] = ()) -> None:
        """The bands around the eligible brokers' means, counting the replica rows ``incoming`` (a drain's:
        they will land on eligible brokers) as if already there."""
        model = self.model
        parts = np.asarray([model.rep_part[r] for r in incoming], dtype=np.int64)
        leads = np.asarray(
            [model.leader[model.rep_part[r]] == model.rep_broker[r] for r in incoming], dtype=bool
        )
        el = self.eligible_mask
        n = max(int(el.sum()), 1)
        cb = self.options.count_band
        for goal, counts, extra in (
            (REPLICA_COUNT, self.rep_count, len(parts)),
            (LEADER_COUNT, self.lead_count, int(leads.sum())),
        ):
            avg = (float(counts[el].sum()) + extra) / n
            width = max(1.0, cb * avg)
            self.bands[goal] = (avg - width, avg + width)
        avg = (float(self.lbi_broker[el].sum()) + float(self.lbi[parts[leads]].sum())) / n
        self.bands[LEADER_BYTES_IN] = (avg * (1 - cb), avg * (1 + cb))
        known = el & self.disk_known
        if known.any():
            ratio = float((self.used[known].sum() + self.size[parts].sum()) / self.cap[known].sum())
            self.bands[DISK_USAGE] = (ratio - self.options.disk_band, ratio + self.options.disk_band)
        self.topic_avg: dict[str, FloatArray] = {}
        if self.topic_rep is not None and self.topic_lead is not None:
            n_topics = len(self.topic_names)
            topics = self.part_topic[parts]
            rep_extra = np.bincount(topics, minlength=n_topics)
            lead_extra = np.bincount(topics[leads], minlength=n_topics)
            self.topic_avg[TOPIC_REPLICAS] = (self.topic_rep[:, el].sum(axis=1) + rep_extra) / n
            self.topic_avg[TOPIC_LEADERS] = (self.topic_lead[:, el].sum(axis=1) + lead_extra) / n

    def expect_drain(self, rows: Sequence[int]) -> None:
        """A drain will move replica rows ``rows`` onto eligible brokers: the bands become the ones the
        brokers will have once it is done (so the goals judge, and choose, against the end state)."""
        self._set_bands(rows)

    # -- violations

    def racks_short(self) -> tuple[int, list[int]]:
        """Partitions spanning fewer racks than they could: ``min(replicas, racks of the eligible brokers
        plus racks only its own brokers are on)`` (the count and the partitions)."""
        model = self.model
        n_parts = len(model.members)
        if n_parts == 0:
            return 0, []
        rack = np.asarray(model.rack, dtype=np.int64)
        rep_part = np.asarray(model.rep_part, dtype=np.int64)
        rep_broker = np.asarray(model.rep_broker, dtype=np.int64)
        sizes = np.bincount(rep_part, minlength=n_parts)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        position = np.arange(len(rep_part)) - starts[rep_part]
        empty = np.iinfo(np.int64).max
        table = np.full((n_parts, int(sizes.max())), empty, dtype=np.int64)
        table[rep_part, position] = rack[rep_broker]
        ordered = np.sort(table, axis=1)
        distinct = (ordered[:, :1] != empty).sum(axis=1) + (
            (np.diff(ordered, axis=1) != 0) & (ordered[:, 1:] != empty)
        ).sum(axis=1)
        eligible_racks = {model.rack[i] for i in self.eligible}
        possible = np.minimum(sizes, len(eligible_racks))
        outside = np.array([model.rack[i] not in eligible_racks for i in range(self.n_all)], dtype=bool)
        if outside.any():  # racks only the partition's own (ineligible) brokers are on count too
            for p in np.unique(rep_part[outside[rep_broker]]):
                own = {model.rack[b] for b in model.members[p] if outside[b]}
                possible[p] = min(sizes[p], len(eligible_racks) + len(own))
        bad = np.nonzero(distinct < possible)[0]
        return len(bad), [int(p) for p in bad]

    def violation(self, goal: str) -> float | None:
        el = self.eligible_mask
        if goal == RACK:
            return float(self.racks_short()[0])
        if goal == DISK_CAPACITY:
            if not self.has_disks:
                return None
            known = self.disk_known
            return float(np.maximum(self.used[known] - self.disk_limit[known], 0.0).sum())
        if goal == REPLICA_CAPACITY:
            cap = self.options.max_replicas_per_broker
            return (
                0.0 if cap is None else float(np.maximum(self.rep_count[: self.model.n_model] - cap, 0).sum())
            )
        if goal == LOAD:
            db = np.asarray(self.band.db)[self.band.active]
            return float(band_distance(db, self.band.lo, self.band.hi).sum())
        if goal == DISK_USAGE:
            if DISK_USAGE not in self.bands:
                return None
            known = el & self.disk_known
            lo, hi = self.bands[DISK_USAGE]
            return float(band_distance(self.used[known] / self.cap[known], lo, hi).sum())
        if goal in (REPLICA_COUNT, LEADER_COUNT, LEADER_BYTES_IN):
            if goal == LEADER_BYTES_IN and not self.has_lbi:
                return None
            q = {
                REPLICA_COUNT: self.rep_count,
                LEADER_COUNT: self.lead_count,
                LEADER_BYTES_IN: self.lbi_broker,
            }
            lo, hi = self.bands[goal]
            return float(band_distance(q[goal][el].astype(np.float64), lo, hi).sum())
        if goal in TOPIC_GOALS:
            table = self.topic_rep if goal == TOPIC_REPLICAS else self.topic_lead
            assert table is not None
            avg = self.topic_avg[goal][:, None]
            return float(band_distance(table[:, el].astype(np.float64), avg - 1.0, avg + 1.0).sum())
        raise AssertionError(goal)

    # -- deltas of one move, per goal (negative: better)

    def _replica_delta(self, goal: str, r: int, s: int, d: int) -> float:
        return self._replica_deltas[goal](r, s, d)

    def _leader_delta(self, goal: str, p: int, s: int, d: int) -> float:
        leader_delta = self._leader_deltas.get(goal)
        return 0.0 if leader_delta is None else leader_delta(p, s, d)

    def _set_deltas(self) -> None:
        """Each goal's delta of a replica move (r, s, d) and of a leader move (p, s, d): looked up once,
        not by comparing names at every move."""
        self._leader_deltas: dict[str, Callable[[int, int, int], float]] = {
            LOAD: lambda p, s, d: self._load_delta(s, d, self.model.sd[p]),
            LEADER_COUNT: lambda p, s, d: self._count_delta(self._lc, self.bands[LEADER_COUNT], s, d, 1.0),
            LEADER_BYTES_IN: lambda p, s, d: self._count_delta(
                self._lbi, self.bands[LEADER_BYTES_IN], s, d, float(self.lbi[p])
            ),
            TOPIC_LEADERS: lambda p, s, d: self._topic_delta(TOPIC_LEADERS, p, s, d),
        }
        self._replica_deltas: dict[str, Callable[[int, int, int], float]] = {
            RACK: lambda r, s, d: 0.0,  # the balancer's can_host keeps every partition's rack spread
            DISK_CAPACITY: self._disk_capacity_delta,
            REPLICA_CAPACITY: self._replica_capacity_delta,
            LOAD: lambda r, s, d: self._load_delta(s, d, self.model.weight(r)),
            DISK_USAGE: lambda r, s, d: self._ratio_delta(s, d, float(self.size[self.model.rep_part[r]])),
            REPLICA_COUNT: lambda r, s, d: self._count_delta(self._rc, self.bands[REPLICA_COUNT], s, d, 1.0),
            LEADER_COUNT: self._leaders_with_replica(LEADER_COUNT),
            LEADER_BYTES_IN: self._leaders_with_replica(LEADER_BYTES_IN),
            TOPIC_REPLICAS: lambda r, s, d: self._topic_delta(TOPIC_REPLICAS, self.model.rep_part[r], s, d),
            TOPIC_LEADERS: self._leaders_with_replica(TOPIC_LEADERS),
        }

    def _leaders_with_replica(self, goal: str) -> Callable[[int, int, int], float]:
        """A leader goal's delta of a replica move: the leader move's when the replica leads, else 0."""
        model, leader_delta = self.model, self._leader_deltas[goal]

        def delta(r: int, s: int, d: int) -> float:
            p = model.rep_part[r]
            return leader_delta(p, s, d) if model.leader[p] == s else 0.0

        return delta

    def _disk_capacity_delta(self, r: int, s: int, d: int) -> float:
        size = self.size[self.model.rep_part[r]]
        return self._excess_delta(s, -size) + self._excess_delta(d, size)

    def _replica_capacity_delta(self, r: int, s: int, d: int) -> float:
        cap = self.options.max_replicas_per_broker
        if cap is None:
            return 0.0
        return float(
            max(self.rep_count[d] + 1 - cap, 0)
            - max(self.rep_count[d] - cap, 0)
            + max(self.rep_count[s] - 1 - cap, 0)
            - max(self.rep_count[s] - cap, 0)
        )

    def _excess_delta(self, b: int, change: float) -> float:
        if not self.disk_known[b]:
            return 0.0
        used, limit = float(self.used[b]), float(self.disk_limit[b])
        return max(used + change - limit, 0.0) - max(used - limit, 0.0)

    def _load_delta(self, s: int, d: int, w: float) -> float:
        db, lo, hi = self.band.db, self.band.lo, self.band.hi
        active = self.band.active_set
        total = 0.0
        if s in active:
            total += band_gap(db[s] - w, lo, hi) - band_gap(db[s], lo, hi)
        if d in active:
            total += band_gap(db[d] + w, lo, hi) - band_gap(db[d], lo, hi)
        return total

    def _ratio_delta(self, s: int, d: int, size: float) -> float:
        if DISK_USAGE not in self.bands:
            return 0.0
        lo, hi = self.bands[DISK_USAGE]
        total = 0.0
        judged, used, caps = self._ratio_judged, self._used, self._cap
        if judged[s]:
            cap = caps[s]
            total += band_gap((used[s] - size) / cap, lo, hi) - band_gap(used[s] / cap, lo, hi)
        if judged[d]:
            cap = caps[d]
            total += band_gap((used[d] + size) / cap, lo, hi) - band_gap(used[d] / cap, lo, hi)
        return total

    def _count_delta(
        self,
        q: FloatArray | IntArray | list[int] | list[float],
        band: tuple[float, float],
        s: int,
        d: int,
        amount: float,
    ) -> float:
        lo, hi = band
        total = 0.0
        el = self._eligible
        if el[s]:
            v = float(q[s])
            total += band_gap(v - amount, lo, hi) - band_gap(v, lo, hi)
        if el[d]:
            v = float(q[d])
            total += band_gap(v + amount, lo, hi) - band_gap(v, lo, hi)
        return total

    def _topic_delta(self, goal: str, p: int, s: int, d: int) -> float:
        table = self.topic_rep if goal == TOPIC_REPLICAS else self.topic_lead
        assert table is not None
        t = int(self.part_topic[p])
        avg = float(self.topic_avg[goal][t])
        return self._count_delta(table[t], (avg - 1.0, avg + 1.0), s, d, 1.0)

    # -- the guard

    def _block(self, reason: str, broker: int) -> bool:
        key = (self.current, reason)
        at = self._blocked_at.get(key)
        if at is None:
            self._blocked_at[key] = at = Counter()
        at[broker] += 1
        return False

    def has_blocked(self, reason: str) -> bool:
        """Whether a move of the current goal was turned down for ``reason`` yet."""
        return (self.current, reason) in self._blocked_at

    def add_blocks(self, reason: str, at: Mapping[int, int]) -> None:
        """Count blocks for ``reason`` in bulk (per broker), as :meth:`_block` one by one."""
        key = (self.current, reason)
        found = self._blocked_at.get(key)
        if found is None:
            self._blocked_at[key] = found = Counter()
        found.update(at)

    def may_refuse_capacity(self, d: int, size: float) -> bool:
        """Whether the capacity checks could turn down a replica of at most ``size`` bytes to ``d``."""
        cap = self.options.max_replicas_per_broker
        if REPLICA_CAPACITY in self.listed and cap is not None and self._rc[d] + 1 > cap:
            return True
        return self._disk_capped[d] and self._used[d] + size > self._disk_limit[d]

    def count_figures(self, goal: str, t: int) -> IntArray:
        """A count goal's figures per broker (of topic t for the topic goals), as the array kept in step."""
        if goal == REPLICA_COUNT:
            return self.rep_count
        if goal == LEADER_COUNT:
            return self.lead_count
        table = self.topic_rep if goal == TOPIC_REPLICAS else self.topic_lead
        assert table is not None
        row: IntArray = table[t]
        return row

    def count_band(self, goal: str, t: int) -> tuple[list[int], float, float]:
        """A count goal's figures per broker (of topic t for the topic goals) and its band."""
        if goal == REPLICA_COUNT:
            return self._rc, *self.bands[goal]
        if goal == LEADER_COUNT:
            return self._lc, *self.bands[goal]
        table = self.topic_rep if goal == TOPIC_REPLICAS else self.topic_lead
        assert table is not None
        avg = float(self.topic_avg[goal][t])
        return table[t].tolist(), avg - 1.0, avg + 1.0

    def leader_bytes_in_refusals(self, p: int, s: int) -> list[bool]:
        """Per broker, whether the guard turns down moving partition p's leadership from s there for
        ``leader_bytes_in``: :meth:`_count_delta`'s operations, on every broker at once."""
        lo, hi = self.bands[LEADER_BYTES_IN]
        amount = float(self.lbi[p])
        total = 0.0
        if self._eligible[s]:
            v = float(self._lbi[s])
            total += band_gap(v - amount, lo, hi) - band_gap(v, lo, hi)
        q: FloatArray = np.asarray(self.lbi_broker, dtype=np.float64)  # the list's figures (no copy)
        held = self._lbi_held
        if held is None or held[0] != lo or held[1] != hi:
            held = self._lbi_held = (lo, hi, band_distance(q, lo, hi))
        gained = band_distance(q + amount, lo, hi) - held[2]
        limit = self.threshold(LEADER_BYTES_IN)
        refused: list[bool] = np.where(self.eligible_mask, total + gained > limit, total > limit).tolist()
        return refused

    def threshold(self, goal: str) -> float:
        """How much worse the guard lets a move make ``goal``."""
        return _EPS * self._scale(goal)

    @property
    def blocked(self) -> dict[str, Counter[str]]:
        """Per goal, what blocked its moves (as why_not names it) and how often."""
        found: dict[str, Counter[str]] = {}
        for (goal, reason), at in self._blocked_at.items():
            found.setdefault(goal, Counter())[reason] = at.total()
        return found

    @property
    def blocked_brokers(self) -> dict[str, set[int]]:
        """Per ``goal:reason``, the brokers (ids) where it blocked a move."""
        ids = self.model.broker_ids
        return {f"{goal}:{reason}": {ids[b] for b in at} for (goal, reason), at in self._blocked_at.items()}

    def note_rack(self, receiver: int) -> None:
        if self.guarded:
            self._block(BLOCK_RACK, receiver)

    def _hard(self, goal: str) -> bool:
        return goal in HARD_GOALS or goal == DRAIN

    def budget_left(self, moves: int) -> bool:
        """Whether ``moves`` more replica moves fit in max_moves."""
        limit = self.options.max_moves
        return limit is None or self.moves_used + moves <= limit

    def allow_replica(self, r: int, d: int) -> bool:
        """May replica row ``r`` go to broker ``d`` (can_host already checked the partition and racks)?"""
        if not self.guarded:
            return True
        model = self.model
        s = model.rep_broker[r]
        if not self._source_ok[s]:
            return self._block(BLOCK_EXCLUDED, s)
        p = model.rep_part[r]
        options = self.options
        if options.max_moves is not None and self.moves_used + 1 > options.max_moves:
            return self._block(BLOCK_BUDGET, s)
        if options.max_bytes is not None and self.bytes_used + self.size[p] > options.max_bytes:
            return self._block(BLOCK_BUDGET, s)
        if self._disk_capped[d] and self._used[d] + float(self.size[p]) > self._disk_limit[d]:
            return self._block(BLOCK_CAPACITY, d)
        cap = options.max_replicas_per_broker
        if REPLICA_CAPACITY in self.listed and cap is not None and self._rc[d] + 1 > cap:
            return self._block(BLOCK_CAPACITY, d)
        if self._hard(self.current):
            return True  # a hard goal's fixing move only answers to the other hard goals (checked above)
        checks = self._other_goals()
        for i, (goal, replica_delta, _) in enumerate(checks):
            delta = replica_delta(r, s, d)
            # the threshold is positive: only a positive delta needs it
            if delta > 0.0 and delta > _EPS * self._scale(goal):
                if i:  # the goal that blocked is checked first next time (the answer is the same)
                    checks.insert(0, checks.pop(i))
                return self._block(BLOCK_HIGHER, d)
        return True

    def allow_leader(self, p: int, s: int, d: int) -> bool:
        if not self.guarded:
            return True
        if not self._source_ok[s]:
            return self._block(BLOCK_EXCLUDED, s)
        for goal, _, leader_delta in self._other_goals():
            if (
                leader_delta is not None
                and (delta := leader_delta(p, s, d)) > 0.0
                and delta > _EPS * self._scale(goal)  # a positive threshold: only a positive delta needs it
            ):
                return self._block(BLOCK_HIGHER, d)
        return True

    def leader_gate(self, s: int, d: int) -> Callable[[int], bool]:
        """:meth:`allow_leader` for leader moves from ``s`` to ``d`` while no move is made (a pool search):
        the same answers and the same blocks counted. A listed ``leader_count`` (its delta is the same for
        every partition) is judged once for the pair: where it turns the pair down every partition is
        turned down for another listed goal without computing the others' deltas; else it is not checked
        again (any goal that turns a move down counts the same block)."""
        if not self.guarded:
            return _always
        if not self._source_ok[s]:
            return partial(self._block_each, BLOCK_EXCLUDED, s)
        deltas: list[tuple[Callable[[int, int, int], float], float]] = []
        for goal, _, leader_delta in self._other_goals():
            if leader_delta is None:
                continue
            limit = _EPS * self._scale(goal)
            if goal == LEADER_COUNT:
                if leader_delta(-1, s, d) > limit:
                    return partial(self._block_each, BLOCK_HIGHER, d)
                continue
            deltas.append((leader_delta, limit))
        if not deltas:
            return _always
        return partial(self._allow_leader_by, deltas, s, d)

    def _block_each(self, reason: str, broker: int, p: int) -> bool:
        return self._block(reason, broker)

    def _allow_leader_by(
        self, deltas: list[tuple[Callable[[int, int, int], float], float]], s: int, d: int, p: int
    ) -> bool:
        for leader_delta, limit in deltas:
            if leader_delta(p, s, d) > limit:
                return self._block(BLOCK_HIGHER, d)
        return True

    def _other_goals(
        self,
    ) -> list[tuple[str, Callable[[int, int, int], float], Callable[[int, int, int], float] | None]]:
        """The listed soft goals a move for the current goal must not make worse, with their deltas."""
        if self._checked_for != self.current:
            self._checked_for = self.current
            self._checks = [
                (goal, self._replica_deltas[goal], self._leader_deltas.get(goal))
                for goal in self.goals
                if goal != self.current and goal not in HARD_GOALS
            ]
        return self._checks

    def _scale(self, goal: str) -> float:
        if goal == LOAD:
            return max(self.band.hi, 1e-300)
        if goal == LEADER_BYTES_IN:
            return max(self.bands[goal][1], 1.0)
        return 1.0

    # -- bookkeeping (the balancer calls these after each move)

    def on_replica(self, r: int, s: int, d: int, leader_moved: bool) -> None:
        p = self.model.rep_part[r]
        self.rep_count[s] -= 1
        self.rep_count[d] += 1
        self._rc[s] -= 1
        self._rc[d] += 1
        size = self.size[p]
        if not math.isnan(self.used[s]):
            self.used[s] -= size
            self._used[s] -= float(size)
        if not math.isnan(self.used[d]):
            self.used[d] += size
            self._used[d] += float(size)
        self.moves_used += 1
        self.bytes_used += size
        self.replica_moves[self.current] += 1
        if self.topic_rep is not None:
            t = int(self.part_topic[p])
            self.topic_rep[t, s] -= 1
            self.topic_rep[t, d] += 1
        if leader_moved:
            self._leader_counts(p, s, d)

    def on_leader(self, p: int, s: int, d: int) -> None:
        self.leader_moves[self.current] += 1
        self._leader_counts(p, s, d)

    def _leader_counts(self, p: int, s: int, d: int) -> None:
        self.lead_count[s] -= 1
        self.lead_count[d] += 1
        self._lc[s] -= 1
        self._lc[d] += 1
        if self._tracks_lbi:
            lbi = float(self.lbi[p])
            self.lbi_broker[s] -= lbi
            self.lbi_broker[d] += lbi
            self._lbi[s] -= lbi
            self._lbi[d] += lbi
            self._lbi_held = None
        if self.topic_lead is not None:
            t = int(self.part_topic[p])
            self.topic_lead[t, s] -= 1
            self.topic_lead[t, d] += 1

    # -- reports

    def units_outside(self, goal: str) -> list[str]:
        """What is still outside a goal's band (brokers, or topic on brokers), for why_not."""
        ids = self.model.broker_ids
        el = self.eligible_mask
        if goal == RACK:
            return [str(self.model.tps[p]) for p in self.racks_short()[1]]
        if goal == DISK_CAPACITY:
            known = self.disk_known
            return [f"broker {ids[b]}" for b in np.nonzero(known & (self.used > self.disk_limit))[0]]
        if goal == REPLICA_CAPACITY:
            cap = self.options.max_replicas_per_broker
            if cap is None:
                return []
            return [f"broker {ids[b]}" for b in np.nonzero(self.rep_count[: self.model.n_model] > cap)[0]]
        if goal == LOAD:
            return [
                f"broker {ids[b]}"
                for b in self.band.active
                if band_gap(self.band.db[b], self.band.lo, self.band.hi) > 0
            ]
        if goal == DISK_USAGE:
            if DISK_USAGE not in self.bands:
                return []
            lo, hi = self.bands[goal]
            return [
                f"broker {ids[b]}"
                for b in np.nonzero(el & self.disk_known)[0]
                if band_gap(self.used[b] / self.cap[b], lo, hi) > 0
            ]
        if goal in (REPLICA_COUNT, LEADER_COUNT, LEADER_BYTES_IN):
            q = {
                REPLICA_COUNT: self.rep_count,
                LEADER_COUNT: self.lead_count,
                LEADER_BYTES_IN: self.lbi_broker,
            }
            lo, hi = self.bands[goal]
            return [f"broker {ids[b]}" for b in np.nonzero(el)[0] if band_gap(float(q[goal][b]), lo, hi) > 0]
        table = self.topic_rep if goal == TOPIC_REPLICAS else self.topic_lead
        assert table is not None
        avg = self.topic_avg[goal]
        out: list[str] = []
        for t, b in zip(
            *np.nonzero(band_distance(table.astype(np.float64), avg[:, None] - 1, avg[:, None] + 1)),
            strict=True,
        ):
            if el[b]:
                out.append(f"topic {self.topic_names[t]} on broker {ids[b]}")
        return out

    def why_not(self, goal: str, satisfied: bool | None) -> str | None:
        ids = self.model.broker_ids
        notes: list[str] = []
        if goal in (DISK_CAPACITY, DISK_USAGE):
            missing = [ids[i] for i in range(self.model.n_model) if not self.disk_known[i]]
            if missing:
                notes.append(f"no disk figures for broker(s) {listed_brokers(missing)}: left out of {goal}")
            if self.unsized and self.has_disks:
                notes.append(f"{len(self.unsized)} partition(s) of unknown size counted as 0 bytes")
        if goal == LEADER_BYTES_IN and not self.has_lbi:
            notes.append("no nwBytesIn in the load samples: leaders' bytes in are not known")
        if satisfied is not False:
            return "; ".join(notes) or None
        outside = self.units_outside(goal)
        concerned = ", ".join(outside[:10]) + (f" and {len(outside) - 10} more" if len(outside) > 10 else "")
        blocked = self.blocked.get(goal, Counter())
        if goal in HARD_GOALS and not self.fixes_hard:
            notes.insert(
                0,
                "not fixed: with the default goals the hard goals only keep every move from breaking them "
                f"(name the goals to fix it); still outside: {concerned}",
            )
        elif self.drain and goal not in LEADER_GOALS:
            notes.insert(0, f"a drain moves no replica but the drained broker's; still outside: {concerned}")
        elif blocked:
            reasons = []
            for reason, _ in blocked.most_common():
                brokers = sorted(self.blocked_brokers.get(f"{goal}:{reason}", set()))
                text = reason
                if reason == BLOCK_BUDGET:
                    text += self._budget_text()
                elif reason == BLOCK_EXCLUDED:
                    text += self._excluded_text(brokers)
                elif brokers:
                    text += f" (brokers {listed_brokers(brokers)})"
                reasons.append(text)
            notes.insert(0, f"blocked by {'; '.join(reasons)}; still outside: {concerned}")
        else:
            notes.insert(0, f"none found by the search; still outside: {concerned}")
        return "; ".join(notes)

    def _budget_text(self) -> str:
        options = self.options
        parts = []
        if options.max_moves is not None:
            parts.append(f"max_moves {options.max_moves}")
        if options.max_bytes is not None:
            parts.append(f"max_bytes {options.max_bytes}")
        return f" ({', '.join(parts)})" if parts else ""

    def _excluded_text(self, brokers: list[int]) -> str:
        text = f" (replicas may not leave broker(s) {listed_brokers(brokers)}"
        if self.options.only_over_disk_used_ratio is not None:
            text += f": only brokers over disk used ratio {self.options.only_over_disk_used_ratio} give"
        return text + ")"
