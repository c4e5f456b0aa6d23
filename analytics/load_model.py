"""The broker load model (docs/kafka-reference.md §4): how much of a cluster's load each broker carries, and
whether that spread is uneven enough to alert on. Pure pandas/numpy, no I/O: the Spark job calls
:func:`compute_load` inside a grouped pandas UDF, once per cluster and window, on up to 1,000 brokers × 11
metrics, so the work is one pivot and a few vectorised array operations, never a Python loop per broker.

For brokers n = 1..N and metrics m::

    D_m(n) = M_m(n) / Σ_i M_m(i)          broker n's share of metric m (scale-free: units cancel)
    B_n    = Σ_m P_m · D_m(n)             weighted load, weights P_m ≥ 0
    Db(n)  = B_n / Σ_i B_i                broker n's share of the cluster's load (Σ Db = 1)
    r_n    = (Db(n) − 1/N) / (1/N)        deviation rate; the broker is imbalanced when |r_n| > r
    σ      = sqrt((1/N) Σ_n (Db(n) − 1/N)²)   population standard deviation of the shares
    σ_max  = r / N                        σ when every |r_n| = r; the cluster is imbalanced when σ > σ_max

Decisions (also in docs/load-model.md):

- A metric that is zero on every broker says nothing about imbalance (a cluster without disk reads this
  window), so it is excluded ("zero on every broker"). Giving it equal shares of 1/N would pull every
  broker's load towards the mean and hide the deviations the other metrics show.
- A metric that some brokers reported and others did not is excluded cluster-wide for the window (the
  reason names the brokers without a sample): shares over different broker sets do not add up to the same
  whole, so they cannot be compared or summed. ``partitions`` and ``leaders`` come from ZooKeeper for every
  registered broker, so in our pipeline something is always left; if nothing is, :class:`LoadModelError`.
- Weights need not sum to 1: Db, r_n and σ do not change when every weight is multiplied by the same
  factor. :attr:`LoadReport.weights` holds the weights as given (not normalised), restricted to the metrics
  used, so that ``weighted_load`` is B_n of docs/kafka-reference.md §4 (with the default weight 1 per
  metric, B_n = Σ_m D_m(n)); :attr:`LoadReport.normalized_weights` gives them summing to 1. When a weights
  mapping is given, a metric it does not name gets weight 0; a metric with weight 0 contributes nothing and is
  excluded (reason "weight 0" or "not in weights"), so the report shows which configured name did not match.
  Names in the mapping without samples in the window are ignored (the weight table is deployment-wide and a
  window may lack a metric) and listed in :attr:`LoadReport.ignored_weights`. Negative or non-finite weights
  are errors.
- A single broker carries the whole load: Db = 1, r = 0, σ = 0, threshold r / 1; nothing is imbalanced.
- Both comparisons are strict and allow for rounding: a deviation within a relative 1e-9 of its bound counts
  as on the bound, not above it (N brokers each exactly r off the mean is σ = σ_max, which is allowed, even
  though floating point may land an ulp above).
- Bad input is an error, never silently repaired: missing columns, wrong dtypes, duplicate (broker, metric)
  rows, negative or non-finite values (the message names the broker and metric), an empty frame, a
  rated deviation that is not a finite number > 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

SAMPLE_COLUMNS = ("broker", "metric", "value")
"""The columns :func:`compute_load` reads; any others (cluster, window) are ignored."""

SHARE_PREFIX = "D_"
"""Prefix of the per-metric share columns of :attr:`LoadReport.brokers`."""

BROKER_COLUMNS = ("normalized_load", "deviation_rate", "weighted_load")
"""The columns of :attr:`LoadReport.brokers` before the ``D_<metric>`` share columns."""

LOAD_ROWS_COLUMNS = (
    "broker",
    "normalized_load",
    "deviation_rate",
    "weighted_load",
    "shares",
    "stddev",
    "stddev_threshold",
    "imbalanced",
    "broker_imbalanced",
)
"""The columns of :func:`load_report_rows`, in order."""

LOAD_ROWS_SCHEMA = (
    "broker long, normalized_load double, deviation_rate double, weighted_load double, "
    "shares map<string,double>, stddev double, stddev_threshold double, imbalanced boolean, "
    "broker_imbalanced boolean"
)
"""Spark DDL for :func:`load_report_rows`, for ``applyInPandas(..., schema=...)`` (the job prepends its
grouping keys); kept here so that the frame and the schema change together."""

DEFAULT_RATED_DEVIATION = 0.10
"""r: 10% by default, the same figure as Kafka's ``leader.imbalance.per.broker.percentage``."""

BOUND_TOLERANCE = 1e-9
"""Relative slack on both bounds, so that a value that is on the bound but for rounding is not above it."""

ZERO_EVERYWHERE = "zero on every broker"
NO_WEIGHT = "not in weights (weight 0)"
ZERO_WEIGHT = "weight 0"

_MAX_LISTED = 20
"""Brokers or rows named in one message; a 1,000-broker cluster with a metric missing everywhere would
otherwise produce a reason longer than the rest of the window's output."""

FloatArray = npt.NDArray[np.float64]


class LoadModelError(ValueError):
    """Samples, weights or a rated deviation the load model cannot use; the message says which and why."""


@dataclass(frozen=True, slots=True, eq=False)
class LoadReport:
    """The load model's result for one cluster and window.

    ``eq=False``: a DataFrame has no single truth value, so a generated ``__eq__`` (and ``__hash__``) would
    raise; compare fields instead. Frozen, but ``brokers`` is a DataFrame: treat it as read-only.
    """

    brokers: pd.DataFrame
    """Indexed by ``broker`` (ascending): ``normalized_load`` (Db), ``deviation_rate`` (r_n),
    ``weighted_load`` (B_n) and one ``D_<metric>`` share column per metric used, in ``metrics`` order."""
    stddev: float
    """σ of the brokers' normalised loads."""
    stddev_threshold: float
    """σ_max = r / N."""
    imbalanced_brokers: tuple[int, ...]
    """Brokers with |r_n| > r, ascending."""
    imbalanced: bool
    """σ > σ_max."""
    rated_deviation: float
    """r."""
    weights: Mapping[str, float]
    """Weight per metric used, as given (not normalised; see :attr:`normalized_weights`)."""
    metrics: tuple[str, ...]
    """Metrics that went into the load, sorted by name."""
    excluded_metrics: Mapping[str, str]
    """Metrics in the samples that did not, with the reason."""
    ignored_weights: tuple[str, ...] = ()
    """Names in the weights mapping that had no samples in this window, sorted."""

    @property
    def normalized_weights(self) -> Mapping[str, float]:
        """The weights scaled to sum to 1: each metric's part of the load."""
        total = math.fsum(self.weights.values())
        return MappingProxyType({m: w / total for m, w in self.weights.items()})


def share_column(metric: str) -> str:
    """The :attr:`LoadReport.brokers` column holding D_metric."""
    return f"{SHARE_PREFIX}{metric}"


def compute_load(
    samples: pd.DataFrame,
    weights: Mapping[str, float] | None = None,
    rated_deviation: float = DEFAULT_RATED_DEVIATION,
) -> LoadReport:
    """Each broker's share of the cluster's load and the cluster's imbalance, from one row per (broker,
    metric) of window averages. ``weights`` defaults to 1 per metric; see the module docstring for what
    is excluded and what is an error."""
    r = _check_rated_deviation(rated_deviation)
    given = None if weights is None else _check_weights(weights)
    table = _pivot(_check_samples(samples))
    excluded = _data_exclusions(table)
    used_weights, weight_exclusions = _weights_for(table.columns, given, excluded)
    excluded.update(weight_exclusions)
    if not used_weights:
        raise LoadModelError(f"no usable load metric in this window: {_describe(excluded)}")
    metrics = tuple(sorted(used_weights))
    shares = _shares(table[list(metrics)].to_numpy(dtype=np.float64))
    weighted = _weighted_load(shares, np.array([used_weights[m] for m in metrics], dtype=np.float64))
    normalized = weighted / weighted.sum()
    deviation = _deviation_rate(normalized)
    stddev = _stddev(normalized)
    brokers_n = len(table.index)
    threshold = r / brokers_n
    broker_ids = table.index.to_numpy(dtype=np.int64)
    return LoadReport(
        brokers=_broker_frame(table.index, metrics, shares, weighted, normalized, deviation),
        stddev=stddev,
        stddev_threshold=threshold,
        imbalanced_brokers=tuple(int(b) for b in broker_ids[_above(np.abs(deviation), r)]),
        imbalanced=bool(_above(np.array([stddev]), threshold)[0]),
        rated_deviation=r,
        weights=MappingProxyType({m: used_weights[m] for m in metrics}),
        metrics=metrics,
        excluded_metrics=MappingProxyType(dict(sorted(excluded.items()))),
        ignored_weights=() if given is None else tuple(sorted(set(given) - set(table.columns))),
    )


def load_report_rows(report: LoadReport) -> pd.DataFrame:
    """One row per broker with the cluster's figures repeated: the output frame of the Spark job's grouped
    pandas UDF (schema :data:`LOAD_ROWS_SCHEMA`). ``shares`` is a dict per row, which Spark maps to a
    ``map<string,double>``, so the row shape does not depend on which metrics a window had."""
    frame = report.brokers
    share_columns = [share_column(m) for m in report.metrics]
    shares = frame[share_columns].set_axis(list(report.metrics), axis=1).to_dict(orient="records")
    imbalanced = frame.index.isin(report.imbalanced_brokers)
    return pd.DataFrame(
        {
            "broker": frame.index.to_numpy(dtype=np.int64),
            "normalized_load": frame["normalized_load"].to_numpy(dtype=np.float64),
            "deviation_rate": frame["deviation_rate"].to_numpy(dtype=np.float64),
            "weighted_load": frame["weighted_load"].to_numpy(dtype=np.float64),
            "shares": pd.Series(shares, dtype=object),
            "stddev": np.float64(report.stddev),
            "stddev_threshold": np.float64(report.stddev_threshold),
            "imbalanced": bool(report.imbalanced),
            "broker_imbalanced": np.asarray(imbalanced, dtype=bool),
        },
        columns=list(LOAD_ROWS_COLUMNS),
    )


# --- checking the input ---------------------------------------------------------------------------------


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _check_rated_deviation(value: Any) -> float:
    if not _is_real(value) or not math.isfinite(value) or value <= 0:
        raise LoadModelError(f"rated_deviation must be a finite number > 0, got {value!r}")
    return float(value)


def _check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Weights as floats; a negative weight would make a busier broker count as less loaded, and NaN or
    inf has no share at all."""
    bad = {m: w for m, w in weights.items() if not _is_real(w) or not math.isfinite(w) or w < 0}
    if bad:
        raise LoadModelError(f"weights must be finite numbers >= 0, got {bad!r}")
    return {m: float(w) for m, w in weights.items()}


def _check_samples(samples: Any) -> pd.DataFrame:
    """The three columns with clean dtypes, or LoadModelError saying what is wrong."""
    if not isinstance(samples, pd.DataFrame):
        raise LoadModelError(f"samples must be a pandas DataFrame, got {type(samples).__name__}")
    missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise LoadModelError(f"samples lack column(s) {missing}; expected {list(SAMPLE_COLUMNS)}")
    if samples.empty:
        raise LoadModelError("no samples: the window has no (broker, metric) rows")
    broker, metric, value = (samples[c] for c in SAMPLE_COLUMNS)
    types = pd.api.types
    if types.is_bool_dtype(broker) or not types.is_integer_dtype(broker) or broker.isna().any():
        raise LoadModelError(f"samples.broker must hold integer broker ids, got dtype {broker.dtype}")
    if not types.is_string_dtype(metric) or metric.isna().any():
        raise LoadModelError(f"samples.metric must hold metric names (strings), got dtype {metric.dtype}")
    if types.is_bool_dtype(value) or not types.is_numeric_dtype(value):
        raise LoadModelError(f"samples.value must be numeric, got dtype {value.dtype}")
    clean = pd.DataFrame(
        {
            "broker": broker.to_numpy(dtype=np.int64),
            "metric": metric.astype(str).to_numpy(dtype=object),
            "value": value.to_numpy(dtype=np.float64, na_value=np.nan),
        }
    )
    _check_values(clean)
    _check_unique(clean)
    return clean


def _check_values(clean: pd.DataFrame) -> None:
    """A negative rate or count is a collector bug (a counter reset it did not catch, say) and NaN or inf
    has no share: either would make every other broker's share wrong, so refuse the window."""
    values = clean["value"].to_numpy()
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        rows = clean[bad]
        listed = ", ".join(
            f"broker {b} {m}={v!r}" for b, m, v in rows.head(_MAX_LISTED).itertuples(index=False, name=None)
        )
        more = f" and {len(rows) - _MAX_LISTED} more" if len(rows) > _MAX_LISTED else ""
        raise LoadModelError(f"values must be finite and >= 0: {listed}{more}")


def _check_unique(clean: pd.DataFrame) -> None:
    """Two averages for one broker and metric means the window was assembled wrongly; picking one would
    hide that."""
    duplicated = clean.duplicated(["broker", "metric"], keep=False)
    if duplicated.any():
        pairs = clean.loc[duplicated, ["broker", "metric"]].drop_duplicates()
        listed = ", ".join(
            f"broker {b} {m}" for b, m in pairs.head(_MAX_LISTED).itertuples(index=False, name=None)
        )
        raise LoadModelError(f"more than one row per (broker, metric): {listed}")


# --- the model ------------------------------------------------------------------------------------------


def _pivot(clean: pd.DataFrame) -> pd.DataFrame:
    """Brokers × metrics, brokers ascending, metrics sorted by name; NaN where a broker has no sample."""
    table = clean.pivot(index="broker", columns="metric", values="value").sort_index().sort_index(axis=1)
    table.index.name = "broker"
    table.columns.name = None
    return table


def _data_exclusions(table: pd.DataFrame) -> dict[str, str]:
    """Metrics whose shares would be meaningless this window (see the module docstring)."""
    missing = table.isna()
    excluded: dict[str, str] = {}
    for metric in table.columns[missing.any().to_numpy()]:
        excluded[metric] = _missing_reason(table.index[missing[metric].to_numpy()].tolist(), len(table.index))
    totals = table.fillna(0.0).sum()
    for metric in table.columns[(totals == 0).to_numpy()]:
        excluded.setdefault(metric, ZERO_EVERYWHERE)
    return excluded


def _missing_reason(brokers: list[int], brokers_n: int) -> str:
    listed = ", ".join(str(b) for b in brokers[:_MAX_LISTED])
    more = f" and {len(brokers) - _MAX_LISTED} more" if len(brokers) > _MAX_LISTED else ""
    return f"no sample from broker(s) {listed}{more} ({len(brokers)} of {brokers_n})"


def _weights_for(
    metrics: pd.Index, given: Mapping[str, float] | None, excluded: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, str]]:
    """The weight of each usable metric, and the metrics that a weight of 0 takes out."""
    used: dict[str, float] = {}
    zero: dict[str, str] = {}
    for metric in metrics:
        if metric in excluded:
            continue
        weight = 1.0 if given is None else given.get(metric, 0.0)
        if weight > 0:
            used[metric] = weight
        else:
            zero[metric] = ZERO_WEIGHT if given is not None and metric in given else NO_WEIGHT
    return used, zero


def _shares(values: FloatArray) -> FloatArray:
    """D_m(n) per column. Each column is first divided by its maximum so that its sum cannot overflow
    (the shares are scale-free, so this changes nothing but rounding)."""
    scaled = values / values.max(axis=0)
    result: FloatArray = scaled / scaled.sum(axis=0)
    return result


def _weighted_load(shares: FloatArray, weights: FloatArray) -> FloatArray:
    """B_n. An element-wise product and a row sum rather than ``shares @ weights``: BLAS may round rows
    differently, and brokers with identical samples must get identical loads (σ = 0 exactly)."""
    result: FloatArray = (shares * weights).sum(axis=1)
    return result


def _deviation_rate(normalized: FloatArray) -> FloatArray:
    average = 1.0 / len(normalized)
    result: FloatArray = (normalized - average) / average
    return result


def _stddev(normalized: FloatArray) -> float:
    """σ: the population standard deviation of Db, whose mean is 1/N. Computed about the first broker's
    share (the variance does not depend on the origin) so that equal shares, which rounding leaves an ulp
    away from 1/N, give exactly 0."""
    offsets = normalized - normalized[0]
    return float(np.sqrt(np.mean((offsets - offsets.mean()) ** 2)))


def _above(values: FloatArray, bound: float) -> npt.NDArray[np.bool_]:
    result: npt.NDArray[np.bool_] = values > bound * (1.0 + BOUND_TOLERANCE)
    return result


def _broker_frame(
    index: pd.Index,
    metrics: tuple[str, ...],
    shares: FloatArray,
    weighted: FloatArray,
    normalized: FloatArray,
    deviation: FloatArray,
) -> pd.DataFrame:
    columns: dict[str, FloatArray] = {
        "normalized_load": normalized,
        "deviation_rate": deviation,
        "weighted_load": weighted,
    }
    columns.update({share_column(m): shares[:, i] for i, m in enumerate(metrics)})
    return pd.DataFrame(columns, index=pd.Index(index.to_numpy(dtype=np.int64), name="broker"))


def _describe(excluded: Mapping[str, str]) -> str:
    return "; ".join(f"{m}: {reason}" for m, reason in sorted(excluded.items())) or "no metrics"
