"""The model a plan works on, built from the snapshot and the load: replicas, leaders and their loads.

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
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import pandas as pd

from analytics.load_model import LoadReport, compute_load
from app.actions.rebalance.plan import MAX_LISTED, listed_brokers
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, PartitionInfo, TopicPartition

PARTITIONS = "partitions"
LEADERS = "leaders"
COUNT_METRICS = (PARTITIONS, LEADERS)
_REPLICAS = attrgetter("assignment.replicas")
_STATE = attrgetter("state")
_TP = attrgetter("tp")
LEADER_ONLY_PRIOR = frozenset({"nwBytesIn", "nwBytesOut"})
"""Metrics taken as carried by leaders only when the data cannot separate leaders from followers."""

COLLINEAR_CONDITION = 20.0
"""Above this condition number of the (column-normalised) follower/leader design, the fit is not trusted."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
LoadInput: TypeAlias = pd.DataFrame | Mapping[int, Mapping[str, float]] | None


@dataclass(slots=True)
class Model:
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
    rep_part: array[int]
    rep_origin: list[int]
    rep_broker: list[int]
    rep_of: list[range]
    """Replica rows of each partition, in its replicas order (consecutive rows)."""
    metrics: tuple[str, ...]
    weights: Mapping[str, float]
    follower_unit: FloatArray
    surplus_unit: FloatArray
    base: FloatArray
    scale: FloatArray
    """c_m: a unit of metric m on a broker adds this much to its Db."""
    sf: array[float] = field(default_factory=lambda: array("d"))
    sd: list[float] = field(default_factory=list)
    db: list[float] = field(default_factory=list)
    leader_factors: dict[str, float] = field(default_factory=dict)
    leader_ids: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Each partition's leader as the snapshot names it (a broker id; NO_LEADER without a state)."""

    def weight(self, r: int) -> float:
        p = self.rep_part[r]
        return self.sf[r] + (self.sd[p] if self.leader[p] == self.rep_broker[r] else 0.0)


def _check_weights(partition_weights: Mapping[TopicPartition, float] | None) -> None:
    if partition_weights is None:
        return
    bad = {tp: w for tp, w in partition_weights.items() if not math.isfinite(w) or w < 0}
    if bad:
        listed = ", ".join(f"{tp}={w!r}" for tp, w in list(bad.items())[:MAX_LISTED])
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


def _broker_indices(broker_ids: Sequence[int], ids: IntArray) -> IntArray:
    """The index in ``broker_ids`` of each of ``ids`` (every one of which must be there)."""
    table = np.asarray(broker_ids, dtype=np.int64)
    if len(table) and int(table.min()) >= 0 and int(table.max()) < 1 << 20:  # small ids: a lookup table
        lookup = np.zeros(int(table.max()) + 1, dtype=np.int64)
        lookup[table] = np.arange(len(table), dtype=np.int64)
        indices: IntArray = lookup[ids]
        return indices
    order = np.argsort(table, kind="stable")
    found: IntArray = order[np.searchsorted(table[order], ids)] if len(table) else np.zeros(0, np.int64)
    return found


def build_model(
    snapshot: ClusterSnapshot,
    load: LoadInput,
    weights: Mapping[str, float] | None,
    rated_deviation: float,
    partition_weights: Mapping[TopicPartition, float] | None,
) -> tuple[Model, LoadReport, list[str]]:
    _check_weights(partition_weights)
    model_ids = sorted(snapshot.brokers)
    if not model_ids:
        raise ValueError("no broker is registered: there is nothing to balance")
    # Per partition, in partition order: built with numpy and C-level maps (932,000 partitions and 2.8M
    # replicas at Cruise Control's size), not a Python loop per partition or per replica.
    listed = list(snapshot.partitions)
    ordered = sorted(listed)
    # in partition order (the snapshot's own order when it is sorted already: no lookups then)
    infos = (
        list(snapshot.partitions.values())
        if ordered == listed
        else list(map(snapshot.partitions.__getitem__, ordered))
    )
    del listed, ordered
    replicas = list(map(_REPLICAS, infos))
    sizes = np.fromiter(map(len, replicas), dtype=np.int64, count=len(replicas))
    flat_ids = np.fromiter(chain.from_iterable(replicas), dtype=np.int64, count=int(sizes.sum()))
    del replicas
    ghosts = sorted(set(np.unique(flat_ids).tolist()).difference(model_ids))
    broker_ids = model_ids + ghosts
    n_model = len(model_ids)
    flat = _broker_indices(broker_ids, flat_ids)
    rep_part = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    states = list(map(_STATE, infos))
    leader_ids = np.array([NO_LEADER if st is None else st.leader for st in states], dtype=np.int64)
    del states
    # the leader's index where it is one of the replicas and registered, else -1
    in_replicas = np.zeros(len(infos), dtype=bool)
    in_replicas[rep_part[flat_ids == leader_ids[rep_part]]] = True
    in_replicas &= leader_ids != NO_LEADER
    leader = np.full(len(infos), -1, dtype=np.int64)
    leader[in_replicas] = _broker_indices(broker_ids, leader_ids[in_replicas])
    leader[leader >= n_model] = -1
    pw = partition_weights
    model = Model(
        broker_ids=broker_ids,
        n_model=n_model,
        rack=_rack_ids(snapshot, broker_ids),
        tps=list(map(_TP, infos)),
        infos=infos,
        members=_members(flat, sizes),
        leader=leader.tolist(),
        leader_origin=[],
        part_weight=(
            np.ones(len(infos), dtype=np.float64)
            if not pw
            else np.array([float(pw.get(info.tp, 1.0)) for info in infos], dtype=np.float64)
        ),
        rep_part=array("q"),
        rep_origin=flat.tolist(),
        rep_broker=flat.tolist(),
        rep_of=[],
        metrics=(),
        weights={},
        follower_unit=np.zeros((0, 0)),
        surplus_unit=np.zeros((0, 0)),
        base=np.zeros((0, 0)),
        scale=np.zeros(0),
        leader_ids=leader_ids,
    )
    model.leader_origin = list(model.leader)
    # One row per replica, partition by partition.
    ends = np.cumsum(sizes)
    model.rep_of = list(map(range, (ends - sizes).tolist(), ends.tolist()))
    model.rep_part.frombytes(rep_part.astype("q").tobytes())
    samples, warnings = _samples(snapshot, load, model)
    report = compute_load(samples, weights, rated_deviation)
    _attribute(model, samples, report)
    return model, report, warnings


def _members(flat: IntArray, sizes: IntArray) -> list[list[int]]:
    """Each partition's replicas (broker indices) as a list of its own, from the replicas of all in a row."""
    if len(sizes) and int(sizes.min()) == int(sizes.max()) > 0:  # one replication factor: in C
        members: list[list[int]] = flat.reshape(len(sizes), int(sizes[0])).tolist()
        return members
    values = flat.tolist()
    ends = np.cumsum(sizes).tolist()
    return [values[e - k : e] for e, k in zip(ends, sizes.tolist(), strict=True)]


def _counts(model: Model) -> tuple[IntArray, IntArray]:
    n = len(model.broker_ids)
    replicas = np.bincount(np.asarray(model.rep_broker, dtype=np.int64), minlength=n)
    leaders = np.array(model.leader, dtype=np.int64)
    led = np.bincount(leaders[leaders >= 0], minlength=n)
    return replicas.astype(np.int64), led.astype(np.int64)


def _samples(snapshot: ClusterSnapshot, load: LoadInput, model: Model) -> tuple[pd.DataFrame, list[str]]:
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
            warnings.append(f"load samples of unregistered broker(s) {listed_brokers(others)} ignored")
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


def _attribute(model: Model, samples: pd.DataFrame, report: LoadReport) -> None:
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


def is_count(metrics: Sequence[str]) -> npt.NDArray[np.bool_]:
    return np.array([m in COUNT_METRICS for m in metrics], dtype=bool)


def _scalars(model: Model) -> None:
    counted = is_count(model.metrics)
    f_count = model.follower_unit[:, counted] @ model.scale[counted]
    f_traffic = model.follower_unit[:, ~counted] @ model.scale[~counted]
    d_count = model.surplus_unit[:, counted] @ model.scale[counted]
    d_traffic = model.surplus_unit[:, ~counted] @ model.scale[~counted]
    origin = np.asarray(model.rep_origin, dtype=np.int64)
    rep_pw = model.part_weight[np.asarray(model.rep_part, dtype=np.int64)] if model.rep_part else np.zeros(0)
    model.sf = array("d")  # compact: millions of replicas at Cruise Control's size
    model.sf.frombytes(np.ascontiguousarray(f_count[origin] + rep_pw * f_traffic[origin]).tobytes())
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


def _role_weights(model: Model) -> tuple[FloatArray, FloatArray]:
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


def predicted_report(model: Model, report: LoadReport, after_brokers: list[int] | None) -> LoadReport:
    """compute_load over the predicted metrics: every replica's follower load where it now is, every
    partition's leader surplus on its leader now."""
    n_all, n_model = len(model.broker_ids), model.n_model
    counted = is_count(model.metrics)
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


def leader_share(model: Model, metric: str) -> FloatArray | None:
    """Per partition, the share of ``metric`` its leader carries for it (the follower's part plus the leader
    surplus, as attributed from the leader it had when the plan started); None without that metric."""
    if metric not in model.metrics:
        return None
    j = model.metrics.index(metric)
    origin = np.asarray(model.leader_origin, dtype=np.int64)
    safe = np.where(origin >= 0, origin, 0)
    unit = model.follower_unit[safe, j] + model.surplus_unit[safe, j]
    share: FloatArray = np.where(origin >= 0, unit * model.part_weight, 0.0)
    return share
