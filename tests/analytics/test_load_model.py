"""The broker load model: hand-computed clusters, each documented decision, and properties (shares add up
to 1, σ is 0 exactly when every broker carries the same share, metrics are scale-free, broker order and
ids do not matter)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from analytics.load_model import (
    BROKER_COLUMNS,
    LOAD_ROWS_COLUMNS,
    LOAD_ROWS_SCHEMA,
    NO_WEIGHT,
    ZERO_EVERYWHERE,
    ZERO_WEIGHT,
    LoadModelError,
    LoadReport,
    compute_load,
    load_report_rows,
    share_column,
)

pytestmark = pytest.mark.unit

Cluster = Mapping[int, Mapping[str, float]]

# Four brokers, r = 10%, so σ_max = 0.025. Shares (D) and loads below are worked out by hand.
BALANCED: Cluster = {
    1: {"partitions": 100, "leaders": 50, "cpuUsed": 2.0},  # D: .25 .25 .25  -> B .75
    2: {"partitions": 100, "leaders": 50, "cpuUsed": 2.0},  # D: .25 .25 .25  -> B .75
    3: {"partitions": 100, "leaders": 40, "cpuUsed": 2.2},  # D: .25 .20 .275 -> B .725
    4: {"partitions": 100, "leaders": 60, "cpuUsed": 1.8},  # D: .25 .30 .225 -> B .775
}
SKEWED: Cluster = {
    1: {"partitions": 120, "leaders": 70, "nwBytesIn": 4e6},  # D: .30 .35 .4 -> B 1.05
    2: {"partitions": 100, "leaders": 50, "nwBytesIn": 2e6},  # D: .25 .25 .2 -> B .70
    3: {"partitions": 100, "leaders": 50, "nwBytesIn": 2e6},  # D: .25 .25 .2 -> B .70
    4: {"partitions": 80, "leaders": 30, "nwBytesIn": 2e6},  # D: .20 .15 .2 -> B .55
}


def samples_of(cluster: Cluster) -> pd.DataFrame:
    rows = [(b, m, float(v)) for b, metrics in cluster.items() for m, v in metrics.items()]
    return pd.DataFrame(rows, columns=["broker", "metric", "value"])


def with_metric(cluster: Cluster, metric: str, values: Mapping[int, float]) -> dict[int, dict[str, float]]:
    return {b: {**metrics, **({metric: values[b]} if b in values else {})} for b, metrics in cluster.items()}


def column(report: LoadReport, name: str) -> list[float]:
    return [float(v) for v in report.brokers[name]]


def assert_same_load(actual: LoadReport, expected: LoadReport) -> None:
    """Same brokers, shares, loads and verdicts, up to rounding."""
    assert actual.metrics == expected.metrics
    pd.testing.assert_frame_equal(actual.brokers, expected.brokers, rtol=1e-12, atol=1e-15)
    assert actual.stddev == pytest.approx(expected.stddev, rel=1e-12, abs=1e-15)
    assert actual.imbalanced_brokers == expected.imbalanced_brokers
    assert actual.imbalanced == expected.imbalanced


# --- hand-computed clusters -----------------------------------------------------------------------------


def test_a_balanced_cluster_hand_computed() -> None:
    report = compute_load(samples_of(BALANCED))

    # Σ B = 3, so Db = B / 3; r_n = 4·Db − 1; σ² = (2 · (1/120)²) / 4.
    assert column(report, "weighted_load") == pytest.approx([0.75, 0.75, 0.725, 0.775])
    assert column(report, "normalized_load") == pytest.approx([0.25, 0.25, 29 / 120, 31 / 120])
    assert column(report, "deviation_rate") == pytest.approx([0.0, 0.0, -1 / 30, 1 / 30], abs=1e-12)
    assert report.stddev == pytest.approx(math.sqrt(1 / 28800))
    assert report.stddev_threshold == 0.025
    assert report.imbalanced is False
    assert report.imbalanced_brokers == ()
    assert column(report, "D_leaders") == pytest.approx([0.25, 0.25, 0.2, 0.3])
    assert column(report, "D_cpuUsed") == pytest.approx([0.25, 0.25, 0.275, 0.225])


def test_an_imbalanced_cluster_hand_computed() -> None:
    report = compute_load(samples_of(SKEWED))

    # Σ B = 3: Db = (.35, 7/30, 7/30, 11/60); Db − 1/4 = (.1, −1/60, −1/60, −1/15);
    # σ² = (.01 + 2/3600 + 1/225) / 4 = .00375 > .025².
    assert column(report, "weighted_load") == pytest.approx([1.05, 0.7, 0.7, 0.55])
    assert column(report, "normalized_load") == pytest.approx([0.35, 7 / 30, 7 / 30, 11 / 60])
    assert column(report, "deviation_rate") == pytest.approx([0.4, -1 / 15, -1 / 15, -4 / 15])
    assert report.stddev == pytest.approx(math.sqrt(0.00375))
    assert report.stddev == pytest.approx(0.0612372, abs=1e-7)
    assert report.stddev_threshold == 0.025
    assert report.imbalanced is True
    assert report.imbalanced_brokers == (1, 4)


def test_the_report_frame_is_indexed_by_broker_with_one_share_column_per_metric() -> None:
    cluster = {7: SKEWED[4], 2: SKEWED[2], 5: SKEWED[3], 3: SKEWED[1]}

    report = compute_load(samples_of(cluster))

    assert list(report.brokers.index) == [2, 3, 5, 7]
    assert report.brokers.index.name == "broker"
    assert report.metrics == ("leaders", "nwBytesIn", "partitions")
    assert list(report.brokers.columns) == [*BROKER_COLUMNS, "D_leaders", "D_nwBytesIn", "D_partitions"]
    assert report.imbalanced_brokers == (3, 7)
    assert report.excluded_metrics == {}
    assert report.ignored_weights == ()


@pytest.mark.parametrize(("brokers", "rated", "threshold"), [(4, 0.10, 0.025), (5, 0.2, 0.04), (1, 0.1, 0.1)])
def test_the_stddev_threshold_is_r_over_n(brokers: int, rated: float, threshold: float) -> None:
    cluster = {b: {"partitions": 10.0 + b} for b in range(brokers)}

    report = compute_load(samples_of(cluster), rated_deviation=rated)

    assert report.stddev_threshold == threshold
    assert report.rated_deviation == rated


def test_a_cluster_exactly_on_the_bounds_is_not_imbalanced() -> None:
    # Db = (.275, .225, .275, .225): every |r_n| = 10% and σ = σ_max; in floating point 4 · .275 − 1 lands
    # an ulp above 0.1, which must not count as above the bound.
    report = compute_load(
        samples_of({1: {"partitions": 11}, 2: {"partitions": 9}, 3: {"partitions": 11}, 4: {"partitions": 9}})
    )

    assert [abs(r) for r in column(report, "deviation_rate")] == pytest.approx([0.1] * 4)
    assert report.stddev == pytest.approx(0.025)
    assert report.imbalanced_brokers == ()
    assert report.imbalanced is False


def test_just_above_the_bounds_is_imbalanced() -> None:
    # Db = (.2751, .2249, .2751, .2249): |r_n| = 10.04% for every broker, σ = .02510.
    cluster = {
        1: {"partitions": 2751},
        2: {"partitions": 2249},
        3: {"partitions": 2751},
        4: {"partitions": 2249},
    }

    report = compute_load(samples_of(cluster))

    assert report.stddev == pytest.approx(0.0251)
    assert report.imbalanced_brokers == (1, 2, 3, 4)
    assert report.imbalanced is True


def test_a_larger_rated_deviation_flags_fewer_brokers() -> None:
    report = compute_load(samples_of(SKEWED), rated_deviation=0.3)

    assert report.imbalanced_brokers == (1,)
    assert report.stddev_threshold == pytest.approx(0.075)
    assert report.imbalanced is False


def test_an_idle_broker_carries_no_load() -> None:
    cluster = {
        1: {"partitions": 10, "leaders": 5},
        2: {"partitions": 10, "leaders": 5},
        3: {"partitions": 0, "leaders": 0},
    }

    report = compute_load(samples_of(cluster))

    assert column(report, "normalized_load") == pytest.approx([0.5, 0.5, 0.0])
    assert column(report, "deviation_rate") == pytest.approx([0.5, 0.5, -1.0])
    assert report.imbalanced_brokers == (1, 2, 3)


@pytest.mark.parametrize("brokers", range(2, 13))
def test_identical_brokers_have_a_stddev_of_exactly_zero(brokers: int) -> None:
    # Rounding leaves N equal shares an ulp away from 1/N for some N (7 brokers × 3 metrics, for one);
    # a perfectly balanced cluster must still report σ = 0, not 3e-17.
    metrics = {"partitions": 30.0, "leaders": 10.0, "cpuUsed": 0.7, "fd": 900.0, "memUsed": 3e9}
    for used in range(1, len(metrics) + 1):
        row = dict(list(metrics.items())[:used])
        report = compute_load(samples_of(dict.fromkeys(range(brokers), row)))

        assert report.stddev == 0.0, used
        assert report.imbalanced_brokers == ()


def test_a_single_broker_carries_the_whole_load() -> None:
    report = compute_load(samples_of({9: {"partitions": 40, "leaders": 20, "cpuUsed": 0.5}}))

    assert column(report, "normalized_load") == [1.0]
    assert column(report, "deviation_rate") == [0.0]
    assert report.stddev == 0.0
    assert report.stddev_threshold == 0.1
    assert report.imbalanced_brokers == ()
    assert report.imbalanced is False


# --- weights --------------------------------------------------------------------------------------------


def test_custom_weights_hand_computed() -> None:
    report = compute_load(samples_of(SKEWED), weights={"partitions": 2, "leaders": 1, "nwBytesIn": 1})

    # B = 2·D_partitions + D_leaders + D_nwBytesIn; Σ B = 4.
    assert column(report, "weighted_load") == pytest.approx([1.35, 0.95, 0.95, 0.75])
    assert column(report, "normalized_load") == pytest.approx([0.3375, 0.2375, 0.2375, 0.1875])
    assert column(report, "deviation_rate") == pytest.approx([0.35, -0.05, -0.05, -0.25])
    assert report.stddev == pytest.approx(math.sqrt((0.0875**2 + 2 * 0.0125**2 + 0.0625**2) / 4))
    assert report.imbalanced_brokers == (1, 4)
    assert report.weights == {"leaders": 1.0, "nwBytesIn": 1.0, "partitions": 2.0}
    assert report.normalized_weights == {"leaders": 0.25, "nwBytesIn": 0.25, "partitions": 0.5}


def test_non_normalised_weights_give_the_same_load_as_normalised_ones() -> None:
    raw = compute_load(samples_of(SKEWED), weights={"partitions": 2, "leaders": 1, "nwBytesIn": 1})
    unit = compute_load(samples_of(SKEWED), weights={"partitions": 0.5, "leaders": 0.25, "nwBytesIn": 0.25})

    assert column(raw, "normalized_load") == pytest.approx(column(unit, "normalized_load"))
    assert column(raw, "deviation_rate") == pytest.approx(column(unit, "deviation_rate"))
    assert raw.stddev == pytest.approx(unit.stddev)
    assert raw.imbalanced_brokers == unit.imbalanced_brokers
    assert column(raw, "weighted_load") == pytest.approx([4 * b for b in column(unit, "weighted_load")])
    assert raw.normalized_weights == pytest.approx(unit.normalized_weights)


def test_equal_weights_by_default() -> None:
    report = compute_load(samples_of(SKEWED))
    sevens = compute_load(samples_of(SKEWED), weights={"partitions": 7, "leaders": 7, "nwBytesIn": 7})

    assert report.weights == {"leaders": 1.0, "nwBytesIn": 1.0, "partitions": 1.0}
    assert_same_load(report, compute_load(samples_of(SKEWED), weights=dict.fromkeys(report.metrics, 1.0)))
    assert column(sevens, "normalized_load") == pytest.approx(column(report, "normalized_load"))


def test_a_metric_missing_from_the_weights_gets_weight_zero() -> None:
    report = compute_load(samples_of(SKEWED), weights={"partitions": 1, "leaders": 1})

    assert report.excluded_metrics == {"nwBytesIn": NO_WEIGHT}
    assert report.metrics == ("leaders", "partitions")
    assert "D_nwBytesIn" not in report.brokers.columns
    without = {b: {m: v for m, v in metrics.items() if m != "nwBytesIn"} for b, metrics in SKEWED.items()}
    assert_same_load(report, compute_load(samples_of(without)))


def test_a_zero_weight_excludes_the_metric() -> None:
    report = compute_load(samples_of(SKEWED), weights={"partitions": 1, "leaders": 0, "nwBytesIn": 1})

    assert report.excluded_metrics == {"leaders": ZERO_WEIGHT}
    assert report.weights == {"nwBytesIn": 1.0, "partitions": 1.0}
    # Without leaders: B = (.7, .45, .45, .4), Σ = 2.
    assert column(report, "normalized_load") == pytest.approx([0.35, 0.225, 0.225, 0.2])


def test_weights_for_metrics_without_samples_are_ignored_and_listed() -> None:
    report = compute_load(
        samples_of(SKEWED),
        weights={"partitions": 1, "leaders": 1, "nwBytesIn": 1, "memUsed": 5, "cpuused": 2},
    )

    assert report.ignored_weights == ("cpuused", "memUsed")
    assert_same_load(report, compute_load(samples_of(SKEWED)))


@pytest.mark.parametrize("weights", [{}, {"partitions": 0, "leaders": 0, "nwBytesIn": 0}, {"fd": 1.0}])
def test_no_positive_weight_on_any_metric_is_an_error(weights: dict[str, float]) -> None:
    with pytest.raises(LoadModelError, match="no usable load metric") as caught:
        compute_load(samples_of(SKEWED), weights=weights)

    assert "partitions: " in str(caught.value)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, -math.inf, True, "1", None])
def test_a_negative_or_non_finite_weight_is_an_error(bad: Any) -> None:
    with pytest.raises(LoadModelError, match="weights must be finite numbers >= 0"):
        compute_load(samples_of(SKEWED), weights={"partitions": 1, "leaders": bad})


@pytest.mark.parametrize("bad", [0.0, -0.1, math.nan, math.inf, True, "0.1", None])
def test_the_rated_deviation_must_be_a_finite_positive_number(bad: Any) -> None:
    with pytest.raises(LoadModelError, match="rated_deviation"):
        compute_load(samples_of(SKEWED), rated_deviation=bad)


# --- metrics left out of a window -----------------------------------------------------------------------


def test_a_metric_zero_on_every_broker_is_excluded_not_given_equal_shares() -> None:
    report = compute_load(samples_of(with_metric(SKEWED, "iowait", dict.fromkeys(SKEWED, 0.0))))

    assert report.excluded_metrics == {"iowait": ZERO_EVERYWHERE}
    assert "D_iowait" not in report.brokers.columns
    # Equal shares of 1/4 would have diluted σ to 3/4 of this and hidden broker 4's deviation.
    assert report.stddev == pytest.approx(math.sqrt(0.00375))
    assert report.imbalanced_brokers == (1, 4)


def test_a_metric_a_broker_did_not_report_is_excluded_for_the_window() -> None:
    cpu = {1: 4.0, 3: 1.0, 4: 1.0}  # broker 2 has no cpuUsed sample

    report = compute_load(samples_of(with_metric(SKEWED, "cpuUsed", cpu)))

    assert report.excluded_metrics == {"cpuUsed": "no sample from broker(s) 2 (1 of 4)"}
    assert report.metrics == ("leaders", "nwBytesIn", "partitions")
    assert_same_load(report, compute_load(samples_of(SKEWED)))


def test_the_reason_names_at_most_twenty_brokers() -> None:
    cluster = {b: {"partitions": 10.0, **({"fd": 100.0} if b == 0 else {})} for b in range(30)}

    report = compute_load(samples_of(cluster))

    assert report.excluded_metrics["fd"] == (
        "no sample from broker(s) " + ", ".join(str(b) for b in range(1, 21)) + " and 9 more (29 of 30)"
    )


def test_both_reasons_in_one_window() -> None:
    cluster = with_metric(with_metric(SKEWED, "ioRead", dict.fromkeys(SKEWED, 0.0)), "fd", {1: 10.0, 2: 10.0})

    report = compute_load(samples_of(cluster))

    assert report.excluded_metrics == {
        "fd": "no sample from broker(s) 3, 4 (2 of 4)",
        "ioRead": ZERO_EVERYWHERE,
    }
    assert list(report.excluded_metrics) == ["fd", "ioRead"]


@pytest.mark.parametrize(
    "cluster",
    [
        {1: {"partitions": 0.0}, 2: {"partitions": 0.0}},
        {1: {"partitions": 3.0}, 2: {"leaders": 1.0}},
    ],
)
def test_every_metric_excluded_is_an_error(cluster: Cluster) -> None:
    with pytest.raises(LoadModelError, match=r"no usable load metric in this window: .*partitions: "):
        compute_load(samples_of(cluster))


# --- bad samples ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, -math.inf])
def test_a_negative_or_non_finite_value_is_an_error_naming_broker_and_metric(bad: float) -> None:
    samples = samples_of(with_metric(SKEWED, "cpuUsed", {1: 1.0, 2: 1.0, 3: bad, 4: 1.0}))

    with pytest.raises(LoadModelError, match=r"values must be finite and >= 0: broker 3 cpuUsed=") as caught:
        compute_load(samples)

    assert str(bad) in str(caught.value)


def test_a_missing_value_in_a_nullable_column_is_an_error() -> None:
    samples = samples_of(SKEWED)
    samples["value"] = samples["value"].astype("Float64")
    samples.loc[0, "value"] = pd.NA

    with pytest.raises(LoadModelError, match="broker 1 partitions=nan"):
        compute_load(samples)


def test_duplicate_rows_are_an_error() -> None:
    samples = samples_of(SKEWED)
    samples = pd.concat([samples, samples.iloc[[4]]], ignore_index=True)

    with pytest.raises(LoadModelError, match=r"more than one row per \(broker, metric\): broker 2 leaders$"):
        compute_load(samples)


@pytest.mark.parametrize("drop", ["broker", "metric", "value"])
def test_a_missing_column_is_an_error(drop: str) -> None:
    with pytest.raises(LoadModelError, match=f"lack column.*'{drop}'"):
        compute_load(samples_of(SKEWED).drop(columns=[drop]))


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("broker", [1.0, 2.0]),
        ("broker", ["1", "2"]),
        ("broker", [True, False]),
        ("broker", pd.array([1, None], dtype="Int64")),
        ("metric", [1, 2]),
        ("metric", ["partitions", None]),
        ("value", ["1", "2"]),
        ("value", [True, False]),
    ],
)
def test_wrong_dtypes_are_an_error(name: str, values: Any) -> None:
    samples = pd.DataFrame({"broker": [1, 2], "metric": ["partitions", "partitions"], "value": [1.0, 2.0]})
    samples[name] = values

    with pytest.raises(LoadModelError, match=f"samples.{name} must"):
        compute_load(samples)


@pytest.mark.parametrize(
    "samples",
    [pd.DataFrame({"broker": [], "metric": [], "value": []}), samples_of({})],
)
def test_an_empty_window_is_an_error(samples: pd.DataFrame) -> None:
    with pytest.raises(LoadModelError, match="no samples"):
        compute_load(samples)


def test_samples_must_be_a_data_frame() -> None:
    with pytest.raises(LoadModelError, match="pandas DataFrame, got list"):
        compute_load([(1, "partitions", 1.0)])


def test_other_dtypes_and_extra_columns_are_accepted() -> None:
    samples = samples_of(SKEWED)
    samples["broker"] = samples["broker"].astype("Int32")
    samples["metric"] = samples["metric"].astype(object)
    samples["value"] = samples["value"].astype(np.int64)
    samples["cluster"] = "c1"

    assert_same_load(compute_load(samples), compute_load(samples_of(SKEWED)))


def test_a_large_cluster() -> None:
    rng = np.random.default_rng(4)
    brokers, metrics = 1000, 11
    samples = pd.DataFrame(
        {
            "broker": np.repeat(np.arange(brokers), metrics),
            "metric": np.tile([f"m{i}" for i in range(metrics)], brokers),
            "value": rng.uniform(0.5, 1.5, brokers * metrics),
        }
    )

    report = compute_load(samples)

    assert report.brokers.shape == (brokers, 3 + metrics)
    assert math.fsum(report.brokers["normalized_load"]) == pytest.approx(1.0)
    assert report.stddev_threshold == 0.1 / brokers


# --- the report and its rows ----------------------------------------------------------------------------


def test_the_report_is_frozen_and_its_mappings_read_only() -> None:
    report = compute_load(samples_of(SKEWED), weights={"partitions": 1, "leaders": 1})

    with pytest.raises(dataclasses.FrozenInstanceError):
        report.stddev = 0.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        report.weights["leaders"] = 5.0  # type: ignore[index]
    with pytest.raises(TypeError):
        report.excluded_metrics["nwBytesIn"] = "x"  # type: ignore[index]


def test_load_report_rows() -> None:
    report = compute_load(samples_of(SKEWED))

    rows = load_report_rows(report)

    assert tuple(rows.columns) == LOAD_ROWS_COLUMNS
    assert rows["broker"].tolist() == [1, 2, 3, 4]
    assert rows["broker_imbalanced"].tolist() == [True, False, False, True]
    assert rows["imbalanced"].tolist() == [True] * 4
    assert rows["stddev"].tolist() == [report.stddev] * 4
    assert rows["stddev_threshold"].tolist() == [0.025] * 4
    assert rows["normalized_load"].tolist() == column(report, "normalized_load")
    assert rows["deviation_rate"].tolist() == column(report, "deviation_rate")
    assert rows["weighted_load"].tolist() == column(report, "weighted_load")
    assert rows["shares"].iloc[3] == pytest.approx({"leaders": 0.15, "nwBytesIn": 0.2, "partitions": 0.2})
    assert [set(s) for s in rows["shares"]] == [{"leaders", "nwBytesIn", "partitions"}] * 4
    assert rows.dtypes.astype(str).tolist() == [
        "int64",
        *["float64"] * 3,
        "object",
        *["float64"] * 2,
        "bool",
        "bool",
    ]


def test_the_spark_schema_names_the_row_columns_in_order() -> None:
    names = re.findall(r"(\w+) (?:map<[^>]*>|\w+)(?:, |$)", LOAD_ROWS_SCHEMA)

    assert tuple(names) == LOAD_ROWS_COLUMNS


def test_share_column() -> None:
    assert share_column("nwBytesIn") == "D_nwBytesIn"


# --- properties -----------------------------------------------------------------------------------------

METRIC_NAMES = ("partitions", "leaders", "cpuUsed", "nwBytesIn", "ioutil", "custom.metric")

values = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False).map(
    lambda v: 0.0 if v < 1e-3 else v
)


@st.composite
def clusters(draw: st.DrawFn) -> dict[int, dict[str, float]]:
    """Up to 12 brokers with arbitrary ids and a common set of metrics; some rows are copies of others
    (equal loads), some metrics are zero everywhere."""
    broker_ids = draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True))
    metrics = draw(
        st.lists(st.sampled_from(METRIC_NAMES), min_size=1, max_size=len(METRIC_NAMES), unique=True)
    )
    row = st.fixed_dictionaries(dict.fromkeys(metrics, values))
    if draw(st.booleans()):
        same = draw(row)
        return {b: dict(same) for b in broker_ids}
    return {b: draw(row) for b in broker_ids}


def usable(cluster: Cluster) -> bool:
    return any(v > 0 for metrics in cluster.values() for v in metrics.values())


@settings(max_examples=300, deadline=None)
@given(cluster=clusters())
def test_shares_add_up_to_one_and_sigma_matches_its_definition(cluster: Cluster) -> None:
    assume(usable(cluster))
    report = compute_load(samples_of(cluster))
    db = report.brokers["normalized_load"].to_numpy()
    n = len(cluster)

    assert math.fsum(db) == pytest.approx(1.0, abs=1e-12)
    assert (db >= 0).all()
    for metric in report.metrics:
        assert math.fsum(report.brokers[share_column(metric)]) == pytest.approx(1.0, abs=1e-12)
    assert report.stddev >= 0.0
    assert report.stddev == pytest.approx(math.sqrt(math.fsum((d - 1 / n) ** 2 for d in db) / n), abs=1e-12)
    np.testing.assert_allclose(report.brokers["deviation_rate"], n * db - 1, rtol=0, atol=1e-9)
    zero = {m for m in next(iter(cluster.values())) if all(metrics[m] == 0 for metrics in cluster.values())}
    assert report.excluded_metrics == dict.fromkeys(sorted(zero), ZERO_EVERYWHERE)
    assert report.imbalanced == (report.stddev > report.stddev_threshold * (1 + 1e-9))


@settings(max_examples=300, deadline=None)
@given(cluster=clusters())
def test_sigma_is_zero_exactly_when_every_broker_carries_the_same_share(cluster: Cluster) -> None:
    assume(usable(cluster))
    report = compute_load(samples_of(cluster))
    db = report.brokers["normalized_load"]

    assert (report.stddev == 0.0) == (db.nunique() == 1)
    if len({tuple(sorted(metrics.items())) for metrics in cluster.values()}) == 1:
        assert report.stddev == 0.0
        assert report.imbalanced_brokers == ()
        assert report.imbalanced is False


@settings(max_examples=300, deadline=None)
@given(cluster=clusters(), data=st.data(), factor=st.floats(min_value=1e-3, max_value=1e3))
def test_each_metric_is_scale_free(cluster: Cluster, data: st.DataObject, factor: float) -> None:
    assume(usable(cluster))
    metric = data.draw(st.sampled_from(sorted(next(iter(cluster.values())))))
    scaled = {b: {**metrics, metric: metrics[metric] * factor} for b, metrics in cluster.items()}

    before = compute_load(samples_of(cluster))
    after = compute_load(samples_of(scaled))

    assert after.metrics == before.metrics
    assert after.excluded_metrics == before.excluded_metrics
    pd.testing.assert_frame_equal(after.brokers, before.brokers, rtol=1e-9, atol=1e-12)
    assert after.stddev == pytest.approx(before.stddev, rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(cluster=clusters(), factor=st.floats(min_value=1e-3, max_value=1e3), data=st.data())
def test_scaling_every_weight_changes_only_the_weighted_load(
    cluster: Cluster, factor: float, data: st.DataObject
) -> None:
    assume(usable(cluster))
    metrics = sorted(next(iter(cluster.values())))
    weights = data.draw(st.fixed_dictionaries({m: st.floats(min_value=0.1, max_value=10.0) for m in metrics}))

    plain = compute_load(samples_of(cluster), weights=weights)
    scaled = compute_load(samples_of(cluster), weights={m: w * factor for m, w in weights.items()})

    for name in ("normalized_load", "deviation_rate"):
        np.testing.assert_allclose(scaled.brokers[name], plain.brokers[name], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        scaled.brokers["weighted_load"], plain.brokers["weighted_load"] * factor, rtol=1e-9
    )
    assert scaled.stddev == pytest.approx(plain.stddev, rel=1e-9, abs=1e-12)
    assert scaled.normalized_weights == pytest.approx(plain.normalized_weights)


@settings(max_examples=200, deadline=None)
@given(cluster=clusters(), data=st.data())
def test_row_order_does_not_matter(cluster: Cluster, data: st.DataObject) -> None:
    assume(usable(cluster))
    samples = samples_of(cluster)
    order = data.draw(st.permutations(range(len(samples))))

    shuffled = compute_load(samples.iloc[list(order)].reset_index(drop=True))
    plain = compute_load(samples)

    pd.testing.assert_frame_equal(shuffled.brokers, plain.brokers, check_exact=True)
    assert (shuffled.stddev, shuffled.imbalanced_brokers) == (plain.stddev, plain.imbalanced_brokers)


@settings(max_examples=200, deadline=None)
@given(cluster=clusters(), data=st.data())
def test_relabelling_brokers_moves_their_loads_with_them(cluster: Cluster, data: st.DataObject) -> None:
    assume(usable(cluster))
    ids = sorted(cluster)
    relabel = dict(zip(ids, data.draw(st.permutations(ids)), strict=True))
    relabelled = {relabel[b]: metrics for b, metrics in cluster.items()}

    plain = compute_load(samples_of(cluster))
    moved = compute_load(samples_of(relabelled))

    expected = plain.brokers.rename(index=relabel).sort_index()
    pd.testing.assert_frame_equal(moved.brokers, expected, rtol=1e-12, atol=1e-15)
    assert moved.stddev == pytest.approx(plain.stddev, rel=1e-9, abs=1e-15)
