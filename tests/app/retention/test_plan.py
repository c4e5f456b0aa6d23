"""The retention planner: cut-offs per table, what is never due, and the hourly rollups' values."""

from __future__ import annotations

import math
import random

import pytest

from analytics.store import BrokerRollup
from app.actions.state import UNFINISHED, ActionState
from app.retention.config import DAY, RetentionSettings
from app.retention.plan import (
    PRUNABLE_ACTION_STATES,
    PRUNABLE_DELIVERY_STATES,
    BrokerWindowLoad,
    ClusterWindowLoad,
    cutoffs,
    hour_of,
    merge_brokers,
    merge_cluster,
    rollup_brokers,
    rollup_cluster,
    windows_per_transaction,
)

pytestmark = pytest.mark.unit

NOW = 1_700_000_000.0 + 1234.5  # not on an hour


def test_each_table_is_cut_at_now_minus_its_period() -> None:
    due = cutoffs(RetentionSettings.model_validate({"audit_log": "forever", "alerts": "90d"}).periods(), NOW)
    assert due["audit_log"] is None  # kept for ever
    assert due["alerts"] == NOW - 90 * DAY
    assert due["actions"] == NOW - 365 * DAY
    assert due["processed_batches"] == NOW - 3 * DAY
    assert due["webhook_deliveries"] == NOW - 30 * DAY


def test_the_raw_windows_are_cut_on_an_hour_so_that_hours_are_rolled_up_whole() -> None:
    due = cutoffs({"load_windows": 7 * DAY}, NOW)
    cut = due["load_windows"]
    assert cut is not None
    assert cut % 3600 == 0
    assert NOW - 7 * DAY - 3600 < cut <= NOW - 7 * DAY
    assert hour_of(cut + 3599.9) == cut
    assert hour_of(cut) == cut


def test_bad_periods_are_refused() -> None:
    with pytest.raises(ValueError, match="alerts"):
        cutoffs({"alerts": math.nan}, NOW)
    with pytest.raises(ValueError, match="alerts"):
        cutoffs({"alerts": -1.0}, NOW)


def test_unfinished_actions_and_pending_deliveries_are_never_due() -> None:
    assert set(PRUNABLE_ACTION_STATES).isdisjoint(s.value for s in UNFINISHED)
    assert {"PENDING", "RUNNING", "STALLED"} == {s.value for s in UNFINISHED}
    assert set(PRUNABLE_ACTION_STATES) == {"SUCCEEDED", "PARTIAL", "FAILED", "CANCELLED"}
    assert set(PRUNABLE_DELIVERY_STATES) == {"delivered", "dead", "skipped"}
    assert all(ActionState(s) for s in PRUNABLE_ACTION_STATES)


@pytest.mark.parametrize(
    ("rows", "brokers", "windows"), [(5000, 1000, 5), (5000, 3, 1666), (100, 1000, 1), (1, 0, 1)]
)
def test_a_transaction_takes_whole_windows(rows: int, brokers: int, windows: int) -> None:
    assert windows_per_transaction(rows, brokers) == windows


def test_a_rollup_is_the_average_and_the_extremes_per_broker() -> None:
    rows = [
        BrokerWindowLoad(1, 10.0, 0.5, 0.2),
        BrokerWindowLoad(1, 20.0, 0.7, -0.4),
        BrokerWindowLoad(2, 5.0, 0.3, 0.1),
    ]
    result = rollup_brokers(rows)
    one = result[1]
    assert (one.windows, one.weighted_load_avg, one.weighted_load_max) == (2, 15.0, 20.0)
    assert one.normalized_load_avg == pytest.approx(0.6)
    assert one.normalized_load_max == 0.7
    assert (one.deviation_rate_min, one.deviation_rate_max) == (-0.4, 0.2)
    assert one.deviation_rate_avg == pytest.approx(-0.1)
    assert result[2].windows == 1
    assert rollup_brokers([]) == {}


def test_a_cluster_rollup_counts_imbalanced_windows() -> None:
    windows = [
        ClusterWindowLoad(3, 0.1, 0.05, 0.15, True),
        ClusterWindowLoad(4, 0.03, 0.05, 0.15, False),
    ]
    rollup = rollup_cluster(windows)
    assert rollup is not None
    assert (rollup.windows, rollup.brokers_max, rollup.imbalanced_windows) == (2, 4, 1)
    assert rollup.stddev_avg == pytest.approx(0.065)
    assert rollup.stddev_max == 0.1
    assert rollup_cluster([]) is None


def test_an_hour_rolled_up_in_chunks_equals_one_rollup_of_it() -> None:
    rng = random.Random(7)
    rows = [
        BrokerWindowLoad(b, rng.uniform(0, 100), rng.uniform(0, 1), rng.uniform(-1, 1))
        for _ in range(120)
        for b in range(5)
    ]
    whole = rollup_brokers(rows)
    folded: dict[int, BrokerRollup] = {}
    for start in range(0, len(rows), 35):  # chunks that cut windows of several brokers apart
        for broker, part in rollup_brokers(rows[start : start + 35]).items():
            folded[broker] = merge_brokers(folded.get(broker), part)
    for broker, expected in whole.items():
        got = folded[broker]
        assert got.windows == expected.windows
        for name in ("weighted_load_avg", "normalized_load_avg", "deviation_rate_avg"):
            assert getattr(got, name) == pytest.approx(getattr(expected, name), rel=1e-12)
        for name in ("weighted_load_max", "normalized_load_max", "deviation_rate_min", "deviation_rate_max"):
            assert getattr(got, name) == getattr(expected, name)

    windows = [
        ClusterWindowLoad(rng.randint(1, 9), rng.random(), 0.05, 0.15, rng.random() < 0.3) for _ in range(50)
    ]
    once = rollup_cluster(windows)
    a, b = rollup_cluster(windows[:17]), rollup_cluster(windows[17:])
    assert a is not None
    assert b is not None
    assert once is not None
    twice = merge_cluster(merge_cluster(None, a), b)
    assert (twice.windows, twice.brokers_max, twice.imbalanced_windows, twice.stddev_max) == (
        once.windows,
        once.brokers_max,
        once.imbalanced_windows,
        once.stddev_max,
    )
    assert twice.stddev_avg == pytest.approx(once.stddev_avg, rel=1e-12)
