"""The retention planner: what a pruning pass may delete, as pure functions (no I/O).

- :func:`cutoffs`: each table's cut-off time for a pass at ``now`` (None: the table keeps its rows);
- which rows are never pruned whatever their age: unfinished actions (:data:`PRUNABLE_ACTION_STATES` has
  only finished ones), pending outbox rows (:data:`PRUNABLE_DELIVERY_STATES`), pending and open alerts,
  the latest :data:`KEEP_LAST_BATCHES` batch ids of each streaming query, each cluster's latest window;
- the hourly rollups: :func:`rollup_brokers` and :func:`rollup_cluster` aggregate a chunk of load windows,
  :func:`merge_brokers` and :func:`merge_cluster` fold a chunk into what an hour already holds (so an
  hour rolled up over several transactions, or a window written late, gives the same averages as one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from analytics.store import BrokerRollup
from analytics.store.tables import ROLLUP_S
from app.actions.state import TERMINAL
from app.webhooks.model import DELIVERY_STATES

__all__ = [
    "KEEP_LAST_BATCHES",
    "PRUNABLE_ACTION_STATES",
    "PRUNABLE_DELIVERY_STATES",
    "BrokerWindowLoad",
    "ClusterRollup",
    "ClusterWindowLoad",
    "cutoffs",
    "hour_of",
    "merge_brokers",
    "merge_cluster",
    "rollup_brokers",
    "rollup_cluster",
    "windows_per_transaction",
]

KEEP_LAST_BATCHES: Final = 100
"""Batch ids of each streaming query kept whatever their age. A restarted query re-runs only its last,
unfinished batch (Spark's commit log says which), and Spark keeps the metadata of its last 100 batches
(``spark.sql.streaming.minBatchesToRetain``): no id the job can replay is ever pruned."""

PRUNABLE_ACTION_STATES: Final[tuple[str, ...]] = tuple(sorted(state.value for state in TERMINAL))
"""Finished actions only: PENDING, RUNNING and STALLED ones are an executor's (or will be adopted)."""

PRUNABLE_DELIVERY_STATES: Final[tuple[str, ...]] = tuple(s for s in DELIVERY_STATES if s != "pending")
"""Outbox rows that are done: a pending one is still to be sent."""


def cutoffs(periods: Mapping[str, float], now: float) -> dict[str, float | None]:
    """Each table's cut-off for a pass at ``now``: rows older than it go; None: the table keeps its rows
    (a period of 0). The load windows' cut-off is the start of its hour, so that an hour is rolled up
    whole, never half of it in the rollups and half in the windows."""
    result: dict[str, float | None] = {}
    for table, period in periods.items():
        if not math.isfinite(period) or period < 0:
            raise ValueError(f"retention period of {table} must be finite and not negative, got {period!r}")
        if period == 0:
            result[table] = None
        elif table == "load_windows":
            result[table] = hour_of(now - period)
        else:
            result[table] = now - period
    return result


def hour_of(t: float) -> float:
    """The start of the rollup hour ``t`` is in."""
    return math.floor(t / ROLLUP_S) * ROLLUP_S


def windows_per_transaction(batch_rows: int, brokers: int) -> int:
    """Load windows one delete transaction takes: whole windows, at most ``batch_rows`` rows (one window
    when a window alone has more)."""
    return max(1, batch_rows // max(1, brokers))


@dataclass(frozen=True, slots=True)
class BrokerWindowLoad:
    """One broker's load in one window: what the rollups keep of a ``load_windows`` row."""

    broker: int
    weighted_load: float
    normalized_load: float
    deviation_rate: float


@dataclass(frozen=True, slots=True)
class ClusterWindowLoad:
    """One window's load aggregates: what the rollups keep of a ``cluster_windows`` row."""

    brokers: int
    stddev: float
    stddev_threshold: float
    rated_deviation: float
    imbalanced: bool


@dataclass(frozen=True, slots=True)
class ClusterRollup:
    """One cluster's load aggregates over the windows of one hour (a ``cluster_rollups`` row)."""

    windows: int
    brokers_max: int
    stddev_avg: float
    stddev_max: float
    stddev_threshold_avg: float
    rated_deviation_avg: float
    imbalanced_windows: int


def rollup_brokers(rows: Iterable[BrokerWindowLoad]) -> dict[int, BrokerRollup]:
    """Per broker: windows, the averages and the extremes of its rows."""
    by_broker: dict[int, list[BrokerWindowLoad]] = {}
    for row in rows:
        by_broker.setdefault(row.broker, []).append(row)
    result: dict[int, BrokerRollup] = {}
    for broker, own in sorted(by_broker.items()):
        n = len(own)
        result[broker] = BrokerRollup(
            broker=broker,
            windows=n,
            weighted_load_avg=math.fsum(r.weighted_load for r in own) / n,
            weighted_load_max=max(r.weighted_load for r in own),
            normalized_load_avg=math.fsum(r.normalized_load for r in own) / n,
            normalized_load_max=max(r.normalized_load for r in own),
            deviation_rate_avg=math.fsum(r.deviation_rate for r in own) / n,
            deviation_rate_min=min(r.deviation_rate for r in own),
            deviation_rate_max=max(r.deviation_rate for r in own),
        )
    return result


def rollup_cluster(windows: Iterable[ClusterWindowLoad]) -> ClusterRollup | None:
    """The aggregates of a chunk of windows (None for none)."""
    rows = list(windows)
    if not rows:
        return None
    n = len(rows)
    return ClusterRollup(
        windows=n,
        brokers_max=max(r.brokers for r in rows),
        stddev_avg=math.fsum(r.stddev for r in rows) / n,
        stddev_max=max(r.stddev for r in rows),
        stddev_threshold_avg=math.fsum(r.stddev_threshold for r in rows) / n,
        rated_deviation_avg=math.fsum(r.rated_deviation for r in rows) / n,
        imbalanced_windows=sum(1 for r in rows if r.imbalanced),
    )


def _mean(a: float, n: int, b: float, m: int) -> float:
    return (a * n + b * m) / (n + m)


def merge_brokers(old: BrokerRollup | None, new: BrokerRollup) -> BrokerRollup:
    """``old`` (what the hour holds) with ``new`` folded in: averages weighted by windows."""
    if old is None:
        return new
    n, m = old.windows, new.windows
    return BrokerRollup(
        broker=new.broker,
        windows=n + m,
        weighted_load_avg=_mean(old.weighted_load_avg, n, new.weighted_load_avg, m),
        weighted_load_max=max(old.weighted_load_max, new.weighted_load_max),
        normalized_load_avg=_mean(old.normalized_load_avg, n, new.normalized_load_avg, m),
        normalized_load_max=max(old.normalized_load_max, new.normalized_load_max),
        deviation_rate_avg=_mean(old.deviation_rate_avg, n, new.deviation_rate_avg, m),
        deviation_rate_min=min(old.deviation_rate_min, new.deviation_rate_min),
        deviation_rate_max=max(old.deviation_rate_max, new.deviation_rate_max),
    )


def merge_cluster(old: ClusterRollup | None, new: ClusterRollup) -> ClusterRollup:
    """``old`` with ``new`` folded in, as :func:`merge_brokers`."""
    if old is None:
        return new
    n, m = old.windows, new.windows
    return ClusterRollup(
        windows=n + m,
        brokers_max=max(old.brokers_max, new.brokers_max),
        stddev_avg=_mean(old.stddev_avg, n, new.stddev_avg, m),
        stddev_max=max(old.stddev_max, new.stddev_max),
        stddev_threshold_avg=_mean(old.stddev_threshold_avg, n, new.stddev_threshold_avg, m),
        rated_deviation_avg=_mean(old.rated_deviation_avg, n, new.rated_deviation_avg, m),
        imbalanced_windows=old.imbalanced_windows + new.imbalanced_windows,
    )
