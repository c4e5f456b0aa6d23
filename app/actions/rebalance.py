"""Planning a rebalance: the fewest replica moves (after free leader moves) that bring every broker's load
deviation |r_n| under the rated deviation r, and draining a broker. Pure: a snapshot and load samples in,
a plan out; the reassignment executor carries it out.

**Load attribution.** The load model (:mod:`analytics.load_model`) sees brokers, not partitions, so each
broker's measured load is attributed to the replicas it hosts, and a replica carries its share when it
moves:

- ``partitions`` and ``leaders`` are counts: 1 per replica, 1 per leader replica. They are always part
  of the load, recomputed from the snapshot for every registered broker, as the collectors send them (pass
  ``weights`` to leave them out or weigh them differently).
- Any other metric m of broker n is split over its replicas in proportion to ``pw(p) · w_role``, where
  ``pw`` is an optional per-partition weight (relative traffic, 1 by default) and ``w_role`` is 1 for a
  leader and ``a_m ∈ [0, 1]`` for a follower. ``a_m`` is estimated from the data: the least-squares fit of
  ``M_m(n) ≈ α·F_n + β·L_n`` over the brokers (F_n, L_n the follower and leader weights on n), under
  β ≥ α ≥ 0 (a leader does everything a follower does - it appends to its log - and serves clients too),
  gives ``a_m = α/β``. When F and L are nearly proportional across brokers the data cannot tell them apart
  and a prior is used: leader only for ``nwBytesIn``/``nwBytesOut`` (client traffic, see
  :mod:`collectors.metrics`), equal weights otherwise. A broker without replicas keeps its load as a fixed
  base.
- A partition's *leader surplus* (its leader's share minus a follower's) moves with leadership.

With the per-metric totals fixed, Db(n) = Σ_m P_m M_m(n) / (T_m Σ P) is linear in the loads, so every
replica has one scalar weight and every leadership one scalar surplus, and a move changes two brokers' Db
by exactly that amount. The predicted metrics after the plan are fed back to
:func:`analytics.load_model.compute_load` for the predicted Db, r_n and σ.

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
   half-gap move. A replica moves at most once.
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
the largest of the three.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import pandas as pd

from analytics.load_model import BOUND_TOLERANCE, LoadReport, compute_load
from app.actions.reassignment import ReassignmentRequest
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, PartitionInfo, TopicPartition
from collectors.kafka.placement import AdminOperationError, InvalidReplicationFactorError, assign_replicas

DEFAULT_RATED_DEVIATION = 0.10
PARTITIONS = "partitions"
LEADERS = "leaders"
COUNT_METRICS = (PARTITIONS, LEADERS)
LEADER_ONLY_PRIOR = frozenset({"nwBytesIn", "nwBytesOut"})
"""Metrics taken as carried by leaders only when the data cannot separate leaders from followers."""

COLLINEAR_CONDITION = 20.0
"""Above this condition number of the (column-normalised) follower/leader design, the fit is not trusted."""
_SCAN_LIMIT = 48
"""Candidates rejected for one receiver (partition already there, rack) before trying the next receiver."""
_MAX_LISTED = 20

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
LoadInput: TypeAlias = pd.DataFrame | Mapping[int, Mapping[str, float]] | None

# Why a partition is left where it is
SKIP_DELETING = "topic being deleted"
SKIP_REASSIGNING = "being reassigned"
SKIP_NO_STATE = "no state"
SKIP_OFFLINE = "offline"
SKIP_DEAD_REPLICA = "replica on an unregistered broker"


# --- results -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaMove:
    """A partition whose replica set changes. ``new_replicas[0]`` is the leader the plan expects."""

    tp: TopicPartition
    old_replicas: tuple[int, ...]
    new_replicas: tuple[int, ...]
    old_leader: int
    new_leader: int

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(b for b in self.new_replicas if b not in self.old_replicas)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(b for b in self.old_replicas if b not in self.new_replicas)


@dataclass(frozen=True, slots=True)
class LeaderMove:
    """Leadership handed to another in-sync replica: the same replicas, the new leader first, then a
    preferred election. No data moves."""

    tp: TopicPartition
    replicas: tuple[int, ...]
    old_leader: int
    new_leader: int


@dataclass(frozen=True, slots=True)
class LoadSummary:
    """The load model's verdict on a set of brokers (from :func:`compute_load`)."""

    normalized_load: Mapping[int, float]
    deviation_rate: Mapping[int, float]
    stddev: float
    stddev_threshold: float
    imbalanced_brokers: tuple[int, ...]
    metrics: tuple[str, ...]

    @property
    def max_abs_deviation(self) -> float:
        return max((abs(v) for v in self.deviation_rate.values()), default=0.0)

    @staticmethod
    def from_report(report: LoadReport) -> LoadSummary:
        frame = report.brokers
        brokers = [int(b) for b in frame.index]
        return LoadSummary(
            normalized_load=dict(zip(brokers, frame["normalized_load"].astype(float), strict=True)),
            deviation_rate=dict(zip(brokers, frame["deviation_rate"].astype(float), strict=True)),
            stddev=report.stddev,
            stddev_threshold=report.stddev_threshold,
            imbalanced_brokers=report.imbalanced_brokers,
            metrics=report.metrics,
        )


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    kind: Literal["rebalance", "drain"]
    moves: tuple[ReplicaMove, ...]
    leader_moves: tuple[LeaderMove, ...]
    replica_moves: int
    """Replicas added over all moves (each one a copy of a partition to a new broker)."""
    lower_bound_moves: int
    """No plan under the same model and constraints can do with fewer replica moves."""
    kafka_generate_moves: int | None
    """Replicas ``kafka-reassign-partitions --generate`` would move laying the same topics out from scratch
    over the same brokers (None where it would refuse, e.g. a replication factor above the broker count)."""
    before: LoadSummary
    after: LoadSummary
    rated_deviation: float
    leader_factors: Mapping[str, float]
    """Leader / follower load per metric as attributed (inf: leaders only)."""
    unresolved: tuple[int, ...] = ()
    """Brokers still outside the band after the plan (no move could help them)."""
    skipped: tuple[tuple[TopicPartition, str], ...] = ()
    """Partitions the plan may not touch, with the reason (excluded topics are not listed)."""
    warnings: tuple[str, ...] = ()

    def reassignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        """Target replicas for ``/admin/reassign_partitions``: the moves and the leader reorderings."""
        targets = {m.tp: m.new_replicas for m in self.moves}
        targets.update((m.tp, m.replicas) for m in self.leader_moves)
        return dict(sorted(targets.items()))

    def requests(self) -> list[ReassignmentRequest]:
        return [ReassignmentRequest(tp.topic, tp.partition, r) for tp, r in self.reassignment().items()]

    def elections(self) -> tuple[TopicPartition, ...]:
        """Partitions whose leader must change once reassigned: a preferred election puts ``replicas[0]`` in
        (the controller already does it for a partition whose old leader left its replicas)."""
        tps = {m.tp for m in self.leader_moves}
        tps.update(
            m.tp for m in self.moves if m.new_leader != m.old_leader and m.old_leader in m.new_replicas
        )
        return tuple(sorted(tps))


# --- the model ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Model:
    """Brokers ``0..n_model-1`` are registered brokers (the load model's), the rest unregistered brokers
    that still hold replicas. Replica rows: partition, origin broker, current broker."""

    broker_ids: list[int]
    n_model: int
    rack: list[int]
    tps: list[TopicPartition]
    infos: list[PartitionInfo]
    members: list[list[int]]
    leader: list[int]
    leader_origin: list[int]
    part_weight: FloatArray
    rep_part: list[int]
    rep_origin: list[int]
    rep_broker: list[int]
    rep_of: list[list[int]]
    """Replica rows of each partition, in its replicas order."""
    metrics: tuple[str, ...]
    weights: Mapping[str, float]
    follower_unit: FloatArray
    surplus_unit: FloatArray
    base: FloatArray
    scale: FloatArray
    """c_m: a unit of metric m on a broker adds this much to its Db."""
    sf: list[float] = field(default_factory=list)
    sd: list[float] = field(default_factory=list)
    db: list[float] = field(default_factory=list)
    leader_factors: dict[str, float] = field(default_factory=dict)

    def weight(self, r: int) -> float:
        p = self.rep_part[r]
        return self.sf[r] + (self.sd[p] if self.leader[p] == self.rep_broker[r] else 0.0)


def _check_weights(partition_weights: Mapping[TopicPartition, float] | None) -> None:
    if partition_weights is None:
        return
    bad = {tp: w for tp, w in partition_weights.items() if not math.isfinite(w) or w < 0}
    if bad:
        listed = ", ".join(f"{tp}={w!r}" for tp, w in list(bad.items())[:_MAX_LISTED])
        raise ValueError(f"partition weights must be finite numbers >= 0: {listed}")


def _rack_ids(snapshot: ClusterSnapshot, broker_ids: Sequence[int]) -> list[int]:
    """A small int per rack; a broker without a rack is a rack of its own (so it conflicts with nobody)."""
    names: dict[str, int] = {}
    racks = []
    for i, b in enumerate(broker_ids):
        registration = snapshot.brokers.get(b)
        rack = registration.rack if registration is not None else None
        racks.append(names.setdefault(rack, len(names)) if rack is not None else -1 - i)
    return racks


def _leader_index(info: PartitionInfo, index: Mapping[int, int], n_model: int) -> int:
    leader = info.leader
    if leader == NO_LEADER or leader not in info.assignment.replicas:
        return -1
    i = index.get(leader, -1)
    return i if 0 <= i < n_model else -1


def _build_model(
    snapshot: ClusterSnapshot,
    load: LoadInput,
    weights: Mapping[str, float] | None,
    rated_deviation: float,
    partition_weights: Mapping[TopicPartition, float] | None,
) -> tuple[_Model, LoadReport, list[str]]:
    _check_weights(partition_weights)
    model_ids = sorted(snapshot.brokers)
    if not model_ids:
        raise ValueError("no broker is registered: there is nothing to balance")
    ghosts = sorted(
        {b for info in snapshot.partitions.values() for b in info.assignment.replicas}.difference(model_ids)
    )
    broker_ids = model_ids + ghosts
    index = {b: i for i, b in enumerate(broker_ids)}
    n_model = len(model_ids)
    infos = [snapshot.partitions[tp] for tp in sorted(snapshot.partitions)]
    pw = partition_weights or {}
    model = _Model(
        broker_ids=broker_ids,
        n_model=n_model,
        rack=_rack_ids(snapshot, broker_ids),
        tps=[info.tp for info in infos],
        infos=infos,
        members=[[index[b] for b in info.assignment.replicas] for info in infos],
        leader=[_leader_index(info, index, n_model) for info in infos],
        leader_origin=[],
        part_weight=np.array([float(pw.get(info.tp, 1.0)) for info in infos], dtype=np.float64),
        rep_part=[],
        rep_origin=[],
        rep_broker=[],
        rep_of=[],
        metrics=(),
        weights={},
        follower_unit=np.zeros((0, 0)),
        surplus_unit=np.zeros((0, 0)),
        base=np.zeros((0, 0)),
        scale=np.zeros(0),
    )
    model.leader_origin = list(model.leader)
    for p, members in enumerate(model.members):
        rows = list(range(len(model.rep_part), len(model.rep_part) + len(members)))
        model.rep_of.append(rows)
        model.rep_part.extend([p] * len(members))
        model.rep_origin.extend(members)
        model.rep_broker.extend(members)
    samples, warnings = _samples(snapshot, load, model)
    report = compute_load(samples, weights, rated_deviation)
    _attribute(model, samples, report)
    return model, report, warnings


def _counts(model: _Model) -> tuple[IntArray, IntArray]:
    n = len(model.broker_ids)
    replicas = np.bincount(np.asarray(model.rep_broker, dtype=np.int64), minlength=n)
    leaders = np.array(model.leader, dtype=np.int64)
    led = np.bincount(leaders[leaders >= 0], minlength=n)
    return replicas.astype(np.int64), led.astype(np.int64)


def _samples(snapshot: ClusterSnapshot, load: LoadInput, model: _Model) -> tuple[pd.DataFrame, list[str]]:
    """The load model's input for the registered brokers: the given samples (other brokers' dropped) plus
    ``partitions`` and ``leaders`` for every registered broker from the snapshot, as the collectors send
    them (``collectors.samples.broker_samples``); given values of those two are replaced. A metric some
    registered broker has no sample of is then excluded by the load model, as in the analytics job."""
    model_ids = model.broker_ids[: model.n_model]
    registered = set(model_ids)
    warnings: list[str] = []
    frames = []
    if load is not None:
        if isinstance(load, pd.DataFrame):
            missing = [c for c in ("broker", "metric", "value") if c not in load.columns]
            if missing:
                raise ValueError(f"load samples lack column(s) {missing}; expected broker, metric, value")
            given = load[["broker", "metric", "value"]]
        else:
            given = pd.DataFrame(
                [(int(b), str(m), v) for b, metrics in load.items() for m, v in metrics.items()],
                columns=["broker", "metric", "value"],
            )
        others = sorted({int(b) for b in given["broker"]}.difference(registered))
        if others:
            warnings.append(f"load samples of unregistered broker(s) {_ids(others)} ignored")
        frames.append(given[given["broker"].isin(registered) & ~given["metric"].isin(COUNT_METRICS)])
    replicas, leaders = _counts(model)
    rows = [(b, PARTITIONS, float(replicas[i])) for i, b in enumerate(model_ids)]
    rows += [(b, LEADERS, float(leaders[i])) for i, b in enumerate(model_ids)]
    frames.append(pd.DataFrame(rows, columns=["broker", "metric", "value"]))
    samples = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    return (
        pd.DataFrame(
            {
                "broker": samples["broker"].to_numpy(dtype=np.int64),
                "metric": samples["metric"].astype(str).to_numpy(dtype=object),
                "value": pd.to_numeric(samples["value"]).to_numpy(dtype=np.float64),
            }
        ),
        warnings,
    )


def _attribute(model: _Model, samples: pd.DataFrame, report: LoadReport) -> None:
    """Per-broker unit loads per metric, the scalar weights of replicas and surpluses, and Db."""
    metrics = report.metrics
    model_ids = model.broker_ids[: model.n_model]
    table = samples.pivot(index="broker", columns="metric", values="value").reindex(
        index=model_ids, columns=list(metrics)
    )
    values = table.to_numpy(dtype=np.float64)  # no NaN: compute_load excluded metrics some broker lacks
    n_model, n_all, k = model.n_model, len(model.broker_ids), len(metrics)
    follower_w, leader_w = _role_weights(model)
    follower_unit = np.zeros((n_all, k))
    surplus_unit = np.zeros((n_all, k))
    base = np.zeros((n_model, k))
    for j, metric in enumerate(metrics):
        if metric == PARTITIONS:
            follower_unit[:, j] = 1.0
            continue
        if metric == LEADERS:
            surplus_unit[:, j] = 1.0
            continue
        alpha = _follower_factor(values[:, j], follower_w[:n_model], leader_w[:n_model], metric)
        model.leader_factors[metric] = math.inf if alpha == 0 else 1.0 / alpha
        denominator = alpha * follower_w[:n_model] + leader_w[:n_model]
        hosted = denominator > 0
        unit = np.divide(values[:, j], denominator, out=np.zeros(n_model), where=hosted)
        base[~hosted, j] = values[~hosted, j]
        follower_unit[:n_model, j] = alpha * unit
        surplus_unit[:n_model, j] = (1.0 - alpha) * unit
        if n_all > n_model:  # replicas on unregistered brokers: the average registered broker's unit
            follower_unit[n_model:, j] = follower_unit[:n_model][hosted, j].mean() if hosted.any() else 0.0
            surplus_unit[n_model:, j] = surplus_unit[:n_model][hosted, j].mean() if hosted.any() else 0.0
    totals = values.sum(axis=0)
    weight_vector = np.array([report.weights[m] for m in metrics], dtype=np.float64)
    scale = weight_vector / totals / weight_vector.sum()
    model.metrics, model.weights = metrics, dict(report.weights)
    model.follower_unit, model.surplus_unit, model.base, model.scale = (
        follower_unit,
        surplus_unit,
        base,
        scale,
    )
    _scalars(model)


def _is_count(metrics: Sequence[str]) -> npt.NDArray[np.bool_]:
    return np.array([m in COUNT_METRICS for m in metrics], dtype=bool)


def _scalars(model: _Model) -> None:
    counted = _is_count(model.metrics)
    f_count = model.follower_unit[:, counted] @ model.scale[counted]
    f_traffic = model.follower_unit[:, ~counted] @ model.scale[~counted]
    d_count = model.surplus_unit[:, counted] @ model.scale[counted]
    d_traffic = model.surplus_unit[:, ~counted] @ model.scale[~counted]
    origin = np.asarray(model.rep_origin, dtype=np.int64)
    rep_pw = model.part_weight[np.asarray(model.rep_part, dtype=np.int64)] if model.rep_part else np.zeros(0)
    model.sf = (f_count[origin] + rep_pw * f_traffic[origin]).tolist()
    leader_origin = np.asarray(model.leader_origin, dtype=np.int64)
    safe = np.where(leader_origin >= 0, leader_origin, 0)
    sd = np.where(leader_origin >= 0, d_count[safe] + model.part_weight * d_traffic[safe], 0.0)
    model.sd = sd.tolist()
    db = np.zeros(len(model.broker_ids))
    db[: model.n_model] = model.base @ model.scale
    np.add.at(db, origin, np.asarray(model.sf))
    led = leader_origin >= 0
    np.add.at(db, leader_origin[led], sd[led])
    model.db = db.tolist()


def _role_weights(model: _Model) -> tuple[FloatArray, FloatArray]:
    """Per broker: the partition weights of its follower replicas and of its leader replicas."""
    n = len(model.broker_ids)
    rep_pw = model.part_weight[np.asarray(model.rep_part, dtype=np.int64)] if model.rep_part else np.zeros(0)
    total = np.bincount(np.asarray(model.rep_broker, dtype=np.int64), weights=rep_pw, minlength=n)
    leaders = np.asarray(model.leader, dtype=np.int64)
    led = leaders >= 0
    leader_w = np.bincount(leaders[led], weights=model.part_weight[led], minlength=n).astype(np.float64)
    return total.astype(np.float64) - leader_w, leader_w


def _follower_factor(values: FloatArray, followers: FloatArray, leaders: FloatArray, metric: str) -> float:
    """α/β of the fit ``M ≈ α·F + β·L`` under β ≥ α ≥ 0 (see the module docstring); 1 means a follower
    carries as much as a leader, 0 that leaders carry everything."""
    prior = 0.0 if metric in LEADER_ONLY_PRIOR else 1.0
    if not leaders.any() or not values.any():
        return prior
    design = np.column_stack([followers, leaders])
    norms = np.linalg.norm(design, axis=0)
    if not norms.all() or np.linalg.cond(design / norms) > COLLINEAR_CONDITION:
        return prior
    candidates: list[tuple[float, float]] = []  # (residual, alpha/beta)
    (alpha, beta), *_ = np.linalg.lstsq(design, values, rcond=None)
    if 0 <= alpha <= beta and beta > 0:
        candidates.append((float(np.sum((design @ [alpha, beta] - values) ** 2)), float(alpha / beta)))
    both = followers + leaders
    equal = float(values @ both / (both @ both))
    candidates.append((float(np.sum((equal * both - values) ** 2)), 1.0))
    only = float(values @ leaders / (leaders @ leaders))
    candidates.append((float(np.sum((only * leaders - values) ** 2)), 0.0))
    return min(candidates)[1]


# --- movability --------------------------------------------------------------------------------------


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
    if any(b not in snapshot.brokers for b in info.assignment.replicas):
        return SKIP_DEAD_REPLICA
    if info.leader == NO_LEADER or info.leader not in snapshot.brokers:
        return SKIP_OFFLINE
    return None


# --- pools -------------------------------------------------------------------------------------------


class _Pool:
    """Items sorted by weight; :meth:`best` finds the heaviest live item at most a cap. Taken items are
    unlinked with a union-find "nearest live index to the left", so scans never walk over them twice."""

    __slots__ = ("items", "keys", "parent")

    def __init__(self, entries: list[tuple[float, int]]) -> None:
        entries.sort()
        self.keys = [k for k, _ in entries]
        self.items = [i for _, i in entries]
        self.parent = list(range(len(entries)))

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
        i = bisect_right(self.keys, cap) - 1
        rejected = 0
        while True:
            i = self._find(i)
            if i < 0:
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


# --- the greedy --------------------------------------------------------------------------------------


class _Balancer:
    """The greedy's state: Db per broker, the band, the pools. ``active`` are the brokers whose load counts
    (all registered brokers; for a drain, the ones that remain)."""

    def __init__(
        self,
        model: _Model,
        targets: Collection[int],
        rated_deviation: float,
        active: Collection[int] | None = None,
    ) -> None:
        self.model = model
        self.db = model.db
        self.n = model.n_model
        self.active = sorted(range(self.n) if active is None else active)
        self.rated_deviation = rated_deviation
        self.set_band()
        self.targets = sorted(targets)
        self.target_set = frozenset(targets)
        self.movable = bytearray(len(model.tps))
        self.leader_used = bytearray(len(model.tps))
        self.moved = bytearray(len(model.rep_part))
        self.leader_pools: dict[tuple[int, int], _Pool] = {}
        self.replica_pools: list[_Pool] = []

    def set_band(self) -> None:
        """The band around the active brokers' mean Db (1/N, unless a drain brought in replicas of a broker
        outside the model). Moves keep the total, so the band holds until replicas come from outside again."""
        self.avg = sum(self.db[i] for i in self.active) / len(self.active)
        # the band as the load model draws it, with its tolerance for rounding (far above the rounding of
        # the planner's own sums): what needs fixing, what a move may go up to, what a plan must reach
        r = self.rated_deviation * (1.0 + BOUND_TOLERANCE)
        self.lo, self.hi = self.avg * (1.0 - r), self.avg * (1.0 + r)

    # -- setup

    def set_movable(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self.movable[p] = 1

    def build_leader_pools(self) -> None:
        model = self.model
        entries: dict[tuple[int, int], list[tuple[float, int]]] = {}
        ids = model.broker_ids
        for p, h in enumerate(model.leader):
            if h < 0 or not self.movable[p] or model.sd[p] <= 0:
                continue
            info = model.infos[p]
            # in sync now, or added by this plan (in sync by the time the reassignment completes)
            for i in model.members[p]:
                b = ids[i]
                if i != h and i in self.target_set and (b in info.isr or b not in info.assignment.replicas):
                    entries.setdefault((h, i), []).append((model.sd[p], p))
        self.leader_pools = {pair: _Pool(e) for pair, e in entries.items()}

    def build_replica_pools(self) -> None:
        model = self.model
        entries: list[list[tuple[float, int]]] = [[] for _ in range(self.n)]
        for r, p in enumerate(model.rep_part):
            b = model.rep_broker[r]
            if self.movable[p] and b < self.n and not self.moved[r]:
                w = model.weight(r)
                if w > 0:
                    entries[b].append((w, r))
        self.replica_pools = [_Pool(e) for e in entries]

    # -- state

    def out_of_band(self) -> list[int]:
        return [i for i in self.active if self.db[i] > self.hi or self.db[i] < self.lo]

    def _worst(self, stuck: set[int]) -> int:
        worst, deviation = -1, 0.0
        db, hi, lo, avg = self.db, self.hi, self.lo, self.avg
        for i in self.active:
            d = db[i]
            if (d > hi or d < lo) and i not in stuck and abs(d - avg) > deviation:
                worst, deviation = i, abs(d - avg)
        return worst

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

    def _pairs(self, x: int) -> list[tuple[int, int]]:
        """(donor, receiver) pairs for broker x, the most promising partner first."""
        db = self.db
        if db[x] > self.avg:
            receivers = sorted((c for c in self.targets if c != x and db[c] < db[x]), key=db.__getitem__)
            return [(x, c) for c in receivers]
        if x not in self.target_set:
            return []
        donors = sorted(
            (d for d in self.active if d != x and db[d] > db[x]), key=db.__getitem__, reverse=True
        )
        return [(d, x) for d in donors]

    def sweeps(self, step: Callable[[int], bool]) -> int:
        """Repeat: fix the worst broker not yet found stuck, until all are stuck; again while that moved."""
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
        pairs = self._pairs(x)
        for in_band in (True, False):
            for donor, receiver in pairs:
                pool = self.leader_pools.get((donor, receiver))
                cap = self._cap(donor, receiver, in_band)
                if pool is None or cap <= 0:
                    continue
                i = pool.best(cap, self._leader_dead)
                if i >= 0:
                    pool.kill(i)
                    self._move_leader(pool.items[i], donor, receiver)
                    return True
        return False

    def _move_leader(self, p: int, donor: int, receiver: int) -> None:
        surplus = self.model.sd[p]
        self.model.leader[p] = receiver
        self.leader_used[p] = 1
        self.db[donor] -= surplus
        self.db[receiver] += surplus

    # -- replica moves

    def _replica_dead(self, r: int) -> bool:
        return bool(self.moved[r])

    def can_host(self, r: int, receiver: int) -> bool:
        """Not already a replica of the partition, and the partition spans no fewer racks afterwards."""
        model = self.model
        members = model.members[model.rep_part[r]]
        if receiver in members:
            return False
        source = model.rep_broker[r]
        rack = model.rack
        others = [rack[b] for b in members if b != source]
        return rack[receiver] not in others or rack[source] in others

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
        if model.leader[p] == source:
            model.leader[p] = receiver
        self.moved[r] = 1
        self.db[source] -= w
        self.db[receiver] += w

    # -- lower bound

    def lower_bound(self, leader_moves: bool = True) -> int:
        """See the module docstring; computed before any move. Without leader moves, leadership leaves a
        broker only with its replica, so every replica counts with its whole weight."""
        db, model, n = self.db, self.model, self.n
        over = [db[i] > self.hi for i in range(n)]
        shed = [0.0] * n  # leader surplus that could leave each broker, by leader move or with its replica
        shares: list[list[float]] = [[] for _ in range(n)]  # movable replicas' weights without the surplus
        weights: list[float] = []  # movable replicas' weights with it
        for r, p in enumerate(model.rep_part):
            b = model.rep_broker[r]
            if b < n and self.movable[p]:
                shares[b].append(model.sf[r] if leader_moves else model.weight(r))
                weights.append(model.weight(r))
        for p, h in enumerate(model.leader):
            if 0 <= h < n and self.movable[p] and leader_moves:
                shed[h] += model.sd[p]
        gain = [0.0] * n  # leader surplus each broker could take over by leader moves
        escapes: set[int] = (
            set()
        )  # partitions led by an overloaded broker with an eligible follower elsewhere
        for (h, b), pool in self.leader_pools.items():
            gain[b] += sum(model.sd[p] for p in pool.items)
            if over[h] and not over[b]:
                escapes.update(pool.items)
        heaviest_first = _descending_cumsum(weights)
        out = in_ = 0
        for i in range(n):
            if over[i]:
                out += _moves_needed(_descending_cumsum(shares[i]), db[i] - self.hi - shed[i])
            elif db[i] < self.lo and i in self.target_set:
                in_ += _moves_needed(heaviest_first, self.lo - db[i] - gain[i])
        return max(out, in_, self._pooled_bound(over, escapes))

    def _pooled_bound(self, over: Sequence[bool], escapes: set[int]) -> int:
        """All overloaded brokers together: their total excess must leave the group, as the surplus of
        partitions whose leadership can go to a broker outside it, or with replicas moved out (carrying their
        surplus when no follower outside could have taken it)."""
        db, model = self.db, self.model
        excess = sum(db[i] - self.hi for i in range(self.n) if over[i])
        if excess <= 0:
            return 0
        free = sum(model.sd[p] for p in escapes)
        weights: list[float] = []
        for p, rows in enumerate(model.rep_of):
            if not self.movable[p]:
                continue
            shares = sorted((model.sf[r] for r in rows if over[model.rep_broker[r]]), reverse=True)
            if shares and p not in escapes and 0 <= model.leader[p] < self.n and over[model.leader[p]]:
                shares[0] += model.sd[p]  # whichever replica leaves with the leadership, at most this
            weights.extend(shares)
        return _moves_needed(_descending_cumsum(weights), excess - free)


def _descending_cumsum(values: Sequence[float]) -> FloatArray:
    result: FloatArray = np.cumsum(np.sort(np.asarray(values, dtype=np.float64))[::-1])
    return result


def _moves_needed(cumulative: FloatArray, amount: float) -> int:
    """The fewest items whose weights (heaviest first, as cumulated) reach ``amount``; 0 if nothing is
    needed and every item if even all of them fall short (the bound then says nothing more)."""
    if amount <= 1e-15 or not len(cumulative):
        return 0
    return min(int(np.searchsorted(cumulative, amount * (1 - 1e-9))) + 1, len(cumulative))


# --- plans -------------------------------------------------------------------------------------------


def _target_indices(snapshot: ClusterSnapshot, model: _Model, brokers: Iterable[int] | None) -> list[int]:
    if brokers is None:
        return list(range(model.n_model))
    wanted = list(dict.fromkeys(brokers))
    unknown = [b for b in wanted if b not in snapshot.brokers]
    if unknown:
        raise ValueError(f"target broker(s) {_ids(unknown)} are not registered")
    if not wanted:
        raise ValueError("the target broker list is empty")
    index = {b: i for i, b in enumerate(model.broker_ids)}
    return sorted(index[b] for b in wanted)


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
) -> RebalancePlan:
    """A plan that brings every |r_n| under ``rated_deviation`` with as few replica moves as it can.

    ``load``: the window's per-broker averages, as the load model's samples (``broker``, ``metric``,
    ``value``) or ``{broker: {metric: value}}``; None balances replica and leader counts only. ``brokers``
    restricts where replicas and leadership may go (sources are unrestricted); ``exclude_topics`` are left
    alone. ``weights`` are the load model's metric weights; ``partition_weights`` relative per-partition
    traffic, if known. ``leader_moves=False`` plans replica moves only (fewer elections, more data moved).
    ``seed`` fixes the random start of the ``--generate`` comparison. ValueError on bad input.
    """
    excluded = frozenset(exclude_topics)
    model, report, warnings = _build_model(snapshot, load, weights, rated_deviation, partition_weights)
    targets = _target_indices(snapshot, model, brokers)
    unknown_topics = sorted(excluded.difference(tp.topic for tp in model.tps))
    if unknown_topics:
        warnings.append(f"excluded topic(s) {', '.join(unknown_topics[:_MAX_LISTED])} do not exist")
    deleting = _deleting(snapshot)
    skipped: list[tuple[TopicPartition, str]] = []
    movable: list[int] = []
    for p, info in enumerate(model.infos):
        if info.tp.topic in excluded:
            continue
        reason = _fixed_reason(snapshot, info, deleting)
        if reason is None:
            movable.append(p)
        else:
            skipped.append((info.tp, reason))
    balancer = _Balancer(model, targets, report.rated_deviation)
    balancer.set_movable(movable)
    if leader_moves:
        balancer.build_leader_pools()
    balancer.build_replica_pools()
    lower_bound = balancer.lower_bound(leader_moves) if balancer.out_of_band() else 0
    if balancer.out_of_band():
        balancer.sweeps(balancer.leader_step)
        balancer.build_replica_pools()
        balancer.sweeps(balancer.replica_step)
    topics = sorted({tp.topic for tp in model.tps if tp.topic not in excluded})
    generate = kafka_generate_moves(snapshot, topics, [model.broker_ids[i] for i in targets], seed=seed)
    return _finish(
        "rebalance", model, report, balancer, lower_bound, generate, skipped, warnings, after_brokers=None
    )


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
) -> RebalancePlan:
    """Move every replica off ``broker_id`` (registered, or dead but still holding replicas), heaviest first,
    each to the eligible broker with the least load (not already a replica, no fewer racks), keeping the
    replication factor; a moved leader stays leader. Then, if a remaining broker is outside the band, leader
    moves as in :func:`plan_rebalance` (a replica the drain adds counts as in sync: it is by the time the
    reassignment completes); no other replica moves. ``brokers`` restricts the receivers. The predicted
    load after is over the remaining brokers. ValueError: unknown broker, a partition of it being
    reassigned, a replication factor the remaining brokers cannot hold, no broker a replica may go to."""
    model, report, warnings = _build_model(snapshot, load, weights, rated_deviation, partition_weights)
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
    balancer = _Balancer(model, targets, report.rated_deviation, active=remaining)
    rows.sort(key=lambda r: (-model.weight(r), r))
    for r in rows:
        receivers = [c for c in targets if balancer.can_host(r, c)]
        if not receivers:
            tp = model.tps[model.rep_part[r]]
            raise ValueError(
                f"no broker can take partition {tp}'s replica from broker {broker_id}: every remaining "
                "target already holds it or would put it on a rack it already uses"
            )
        balancer.move_replica(r, min(receivers, key=lambda c: (balancer.db[c], c)))
    balancer.set_band()
    if leader_moves and balancer.out_of_band():
        drained_parts = {model.rep_part[r] for r in rows}
        balancer.set_movable(
            p
            for p, info in enumerate(model.infos)
            if (reason := _fixed_reason(snapshot, info, deleting)) is None
            or (reason == SKIP_DEAD_REPLICA and p in drained_parts and max(model.members[p]) < model.n_model)
        )
        balancer.build_leader_pools()
        balancer.sweeps(balancer.leader_step)
    topics = sorted({model.tps[model.rep_part[r]].topic for r in rows})
    generate = kafka_generate_moves(snapshot, topics, [model.broker_ids[i] for i in targets], seed=seed)
    after_brokers = [model.broker_ids[i] for i in remaining]
    return _finish(
        "drain", model, report, balancer, len(rows), generate, skipped, warnings, after_brokers=after_brokers
    )


def _drain_rows(
    snapshot: ClusterSnapshot, model: _Model, drained: int, deleting: set[str], n_targets: int
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
            f"partition(s) {_tps(reassigning)} of the broker are being reassigned: wait for them"
        )
    if too_wide:
        raise ValueError(
            f"partition(s) {_tps(too_wide)} have more replicas than the {n_targets} broker(s) that would "
            "remain"
        )
    return rows, skipped


def _finish(
    kind: Literal["rebalance", "drain"],
    model: _Model,
    report: LoadReport,
    balancer: _Balancer,
    lower_bound: int,
    generate: int | None,
    skipped: list[tuple[TopicPartition, str]],
    warnings: list[str],
    after_brokers: list[int] | None,
) -> RebalancePlan:
    moves, leader_moves = _changes(model)
    after = _predicted_report(model, report, after_brokers)
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
    )


def _changes(model: _Model) -> tuple[list[ReplicaMove], list[LeaderMove]]:
    moves: list[ReplicaMove] = []
    leader_moves: list[LeaderMove] = []
    ids = model.broker_ids
    for p, info in enumerate(model.infos):
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


def _predicted_report(model: _Model, report: LoadReport, after_brokers: list[int] | None) -> LoadReport:
    """compute_load over the predicted metrics: every replica's follower load where it now is, every
    partition's leader surplus on its leader now."""
    n_all, n_model = len(model.broker_ids), model.n_model
    counted = _is_count(model.metrics)
    rep_broker = np.asarray(model.rep_broker, dtype=np.int64)
    rep_origin = np.asarray(model.rep_origin, dtype=np.int64)
    rep_pw = model.part_weight[np.asarray(model.rep_part, dtype=np.int64)] if model.rep_part else np.zeros(0)
    leader = np.asarray(model.leader, dtype=np.int64)
    origin = np.asarray(model.leader_origin, dtype=np.int64)
    led = (leader >= 0) & (origin >= 0)
    values = model.base.copy()
    for j in range(len(model.metrics)):
        scale_r = 1.0 if counted[j] else rep_pw
        scale_p = 1.0 if counted[j] else model.part_weight[led]
        per_replica = np.bincount(
            rep_broker, weights=model.follower_unit[rep_origin, j] * scale_r, minlength=n_all
        )
        per_leader = np.bincount(
            leader[led], weights=model.surplus_unit[origin[led], j] * scale_p, minlength=n_all
        )
        values[:, j] += (per_replica + per_leader)[:n_model]
    brokers = model.broker_ids[:n_model]
    wanted = set(brokers if after_brokers is None else after_brokers)
    keep = [i for i, b in enumerate(brokers) if b in wanted]
    samples = pd.DataFrame(
        {
            "broker": np.repeat(np.asarray([brokers[i] for i in keep], dtype=np.int64), len(model.metrics)),
            "metric": np.tile(np.asarray(model.metrics, dtype=object), len(keep)),
            "value": np.clip(values[keep].reshape(-1), 0.0, None),
        }
    )
    return compute_load(samples, model.weights, report.rated_deviation)


# --- Kafka's --generate ------------------------------------------------------------------------------


def kafka_generate_moves(
    snapshot: ClusterSnapshot, topics: Iterable[str], brokers: Sequence[int], *, seed: int = 0
) -> int | None:
    """Replicas added if ``kafka-reassign-partitions --generate`` laid ``topics`` out from scratch over
    ``brokers`` (``calculateAssignment``: per topic, ``assignReplicasToBrokers`` with the partition count
    and the replication factor of one of its partitions), rack-aware when every broker has a rack (as
    with ``--disable-rack-aware`` otherwise). None when Kafka would refuse (more replicas than brokers)."""
    by_topic: dict[str, dict[int, tuple[int, ...]]] = {}
    wanted = set(topics)
    for tp, info in snapshot.partitions.items():
        if tp.topic in wanted:
            by_topic.setdefault(tp.topic, {})[tp.partition] = info.assignment.replicas
    racks = {b: snapshot.brokers[b].rack if b in snapshot.brokers else None for b in brokers}
    layout: Sequence[int] | Mapping[int, str | None] = (
        racks if racks and all(r is not None for r in racks.values()) else sorted(brokers)
    )
    rng = random.Random(seed)
    moves = 0
    for topic in sorted(by_topic):
        current = by_topic[topic]
        rf = len(current[min(current)])
        try:
            proposed = assign_replicas(len(current), rf, layout, rng=rng)
        except (InvalidReplicationFactorError, AdminOperationError):
            return None
        for partition, replicas in proposed.items():
            moves += len(set(replicas).difference(current.get(partition, ())))
    return moves


def _ids(brokers: Iterable[int]) -> str:
    listed = sorted(set(brokers))
    text = ", ".join(str(b) for b in listed[:_MAX_LISTED])
    return text + (f" and {len(listed) - _MAX_LISTED} more" if len(listed) > _MAX_LISTED else "")


def _tps(tps: Sequence[TopicPartition]) -> str:
    text = ", ".join(str(tp) for tp in tps[:_MAX_LISTED])
    return text + (f" and {len(tps) - _MAX_LISTED} more" if len(tps) > _MAX_LISTED else "")
