"""The Spark job on ``local[2]``: samples written to a spool directory as the collectors write them, the
streaming query run until it has processed everything, and what it stored compared with the load model
computed directly (pandas) on the same input."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analytics.config import AnalyticsSettings
from analytics.load_model import compute_load
from analytics.pipeline import BatchOutcome
from analytics.rules import RuleSettings
from analytics.spark.job import (
    STOP_REQUESTED,
    BatchHandler,
    StopRequested,
    read_samples,
    sample_rows,
    start_query,
    stop_query,
    window_aggregates,
)
from analytics.store import Store
from collectors.samples import LOAD_METRICS
from collectors.transport import MissingSpoolError
from tests.support.spark import Spool

pytestmark = pytest.mark.spark

T0 = 1_800_000_000.0
WINDOW_S = 10.0


def settings_for(spool: Spool, tmp_path: Path, **overrides: Any) -> AnalyticsSettings:
    base: dict[str, Any] = {
        "source": f"spool:{spool.directory}",
        "window_s": WINDOW_S,
        "watermark_s": 0.0,
        "trigger_s": 0.5,
        "checkpoint": str(tmp_path / "checkpoint"),
        "store_url": f"sqlite:///{tmp_path / 'store.db'}",
        "rules": RuleSettings(open_after=1, resolve_after=1, urp_for_s=0.0),
    }
    return AnalyticsSettings.model_validate(base | overrides)


def healthy_doc(brokers: tuple[int, ...] = (0, 1, 2, 3), **changes: Any) -> dict[str, Any]:
    empty = {"count": 0, "by_topic": {}, "examples": {}}
    doc: dict[str, Any] = {
        "snapshot": {"version": 1, "taken_at": T0, "last_good_at": T0, "stale": False, "errors": 0},
        "controller": {"broker_id": 0, "epoch": 1, "active_controller_gauges": 1.0},
        "brokers": list(brokers),
        "brokers_down": [],
        "topics": 1,
        "partitions": 8,
        "preferred_replica_imbalance": 0,
        "under_replicated": empty,
        "under_min_isr": empty,
        "at_min_isr": empty,
        "offline": empty,
        "suspects": [],
        "imbalance": [],
        "urp_cross_check": None,
        "scrape_errors": {},
    }
    return doc | changes


class Job:
    """A streaming query over the spool, with what each batch did."""

    def __init__(self, spark: Any, settings: AnalyticsSettings) -> None:
        self.settings = settings
        self.store = Store.open(settings.store_url)
        self.outcomes: list[tuple[int, BatchOutcome]] = []
        self.query = start_query(spark, settings, self.store, lambda b, o: self.outcomes.append((b, o)))

    def drain(self) -> None:
        self.query.processAllAvailable()
        failure = self.query.exception()
        assert failure is None, str(failure)

    def stop(self) -> None:
        stop_query(self.query)
        self.store.close()


@pytest.fixture
def job_factory(spark_session: Any) -> Iterator[Any]:
    jobs: list[Job] = []

    def make(settings: AnalyticsSettings) -> Job:
        job = Job(spark_session, settings)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop()


def random_metrics(rng: random.Random) -> dict[str, float]:
    return {m: rng.uniform(1.0, 1000.0) for m in LOAD_METRICS}


def test_per_window_results_equal_the_load_model_on_the_same_input(
    spool: Spool, tmp_path: Path, job_factory: Any
) -> None:
    rng = random.Random(4)
    rows: list[tuple[int, int, str, float]] = []
    for w in range(3):
        for offset in (1.0, 4.0, 7.5):
            t = T0 + w * WINDOW_S + offset
            batch = []
            for broker in range(4):
                metrics = random_metrics(rng)
                batch.append(spool.broker("c1", broker, t, metrics))
                rows.extend((w, broker, m, v) for m, v in metrics.items())
            batch.append(spool.cluster("c1", t, healthy_doc()))
            spool.write(batch)
    # one more window pushes the watermark past the first three
    spool.write([spool.cluster("c1", T0 + 3 * WINDOW_S + 5, healthy_doc())])
    job = job_factory(settings_for(spool, tmp_path))
    job.drain()

    expected = pd.DataFrame(rows, columns=["window", "broker", "metric", "value"])
    stored = {w.window.start: w for w in job.store.load_history("c1", since=0.0)}
    assert sorted(stored) == [T0 + w * WINDOW_S for w in range(3)]
    for w in range(3):
        frame = (
            expected[expected["window"] == w].groupby(["broker", "metric"], as_index=False)["value"].mean()
        )
        report = compute_load(frame)
        window = stored[T0 + w * WINDOW_S]
        assert math.isclose(window.stddev, report.stddev, rel_tol=1e-9)
        assert window.stddev_threshold == pytest.approx(report.stddev_threshold, rel=1e-12)
        for broker_load in window.brokers:
            row = report.brokers.loc[broker_load.broker]
            assert broker_load.normalized_load == pytest.approx(row["normalized_load"], rel=1e-9)
            assert broker_load.deviation_rate == pytest.approx(row["deviation_rate"], rel=1e-9, abs=1e-12)
            assert broker_load.weighted_load == pytest.approx(row["weighted_load"], rel=1e-9)
            for metric in LOAD_METRICS:
                assert broker_load.shares[metric] == pytest.approx(row[f"D_{metric}"], rel=1e-9)
                mean = frame[(frame["broker"] == broker_load.broker) & (frame["metric"] == metric)]["value"]
                assert broker_load.metrics[metric] == pytest.approx(float(mean.iloc[0]), rel=1e-12)


def test_a_sample_delivered_twice_counts_once(spool: Spool, tmp_path: Path, job_factory: Any) -> None:
    first = spool.broker("c1", 0, T0 + 1, {"partitions": 10.0})
    spool.write([first, spool.broker("c1", 1, T0 + 1, {"partitions": 10.0})])
    # the same (collector_id, sequence) again, with a value that would move the average if it counted
    spool.write([dataclasses.replace(first, metrics={"partitions": 1000.0})])
    spool.write([spool.cluster("c1", T0 + WINDOW_S + 1, healthy_doc())])
    job = job_factory(settings_for(spool, tmp_path))
    job.drain()
    (window,) = job.store.load_history("c1", since=0.0)
    assert [b.metrics["partitions"] for b in window.brokers] == [10.0, 10.0]


def test_malformed_samples_are_reported_and_skipped(spool: Spool, tmp_path: Path, job_factory: Any) -> None:
    good = [spool.broker("c1", b, T0 + 1, {"partitions": 4.0 + b}) for b in range(3)]
    spool.write(good)
    negative = spool.broker("c1", 0, T0 + 2, {"partitions": -5.0, "leaders": 2.0})
    spool.write_lines(
        [
            "this is not json",
            json.dumps({"v": 1, "kind": "broker"}),  # no identity, no cluster
            negative.to_line(),
        ],
        "0000000000001-bad",
    )
    spool.write([spool.cluster("c1", T0 + WINDOW_S + 1, healthy_doc())])
    job = job_factory(settings_for(spool, tmp_path))
    job.drain()
    assert job.query.isActive
    (window,) = job.store.load_history("c1", since=0.0)
    assert {b.broker: b.metrics["partitions"] for b in window.brokers} == {0: 4.0, 1: 5.0, 2: 6.0}
    problems = [p for _, o in job.outcomes for p in o.problems]
    assert any("malformed samples" in p for p in problems), problems


def test_the_job_is_the_load_lane_only(spool: Spool, tmp_path: Path, job_factory: Any) -> None:
    """Load skewed onto broker 1 in windows 1 and 2 opens and resolves rules 8 and 9; offline partitions in
    the same windows' health documents open nothing: rule 1 is the incident lane's (serve). The health
    documents are kept with their windows all the same."""
    offline = {"count": 2, "by_topic": {"orders": 2}, "examples": {"orders": [0, 3]}}
    for w in range(5):  # window 4 only moves the watermark past window 3
        at = T0 + w * WINDOW_S + 2
        hot = w in (1, 2)
        spool.write(
            [
                *(
                    spool.broker("c1", b, at, {"nwBytesIn": 400.0 if hot and b == 1 else 100.0})
                    for b in range(4)
                ),
                spool.cluster("c1", at, healthy_doc(offline=offline) if hot else healthy_doc()),
            ]
        )
    job = job_factory(settings_for(spool, tmp_path))
    job.drain()
    events = [(job.store.alert(e.fingerprint), e) for e in job.store.alert_events()]
    assert {(a.rule, e.kind, e.at) for a, e in events if a is not None and a.subject == "cluster"} == {
        (9, "opened", T0 + 2 * WINDOW_S),
        (9, "resolved", T0 + 4 * WINDOW_S),
    }
    assert (8, "opened") in {(a.rule, e.kind) for a, e in events if a is not None}
    assert {a.rule for a, _ in events if a is not None} == {8, 9}
    assert job.store.alerts(rule=1) == []
    kept = [w.health for w in job.store.cluster_windows("c1")]
    assert any(h is not None and h["doc"]["offline"]["count"] == 2 for h in kept)


def test_the_batch_handler_skips_a_batch_committed_before(spool: Spool, tmp_path: Path) -> None:
    settings = settings_for(spool, tmp_path)
    with Store.open(settings.store_url) as store:
        assert store.commit_batch(
            settings.query_name, 7, load_windows=[], cluster_windows=[], alert_states=[], events=[]
        )
        calls: list[int] = []
        handler = BatchHandler(settings, store, lambda b, o: calls.append(b))

        class Untouchable:
            def __getattr__(self, name: str) -> Any:
                raise AssertionError(f"a committed batch was read again ({name})")

        handler(Untouchable(), 7)
        assert calls == []


def test_after_a_stop_request_the_handler_refuses_the_next_batch_untouched(
    spool: Spool, tmp_path: Path
) -> None:
    settings = settings_for(spool, tmp_path)
    with Store.open(settings.store_url) as store:
        handler = BatchHandler(settings, store)
        assert handler.idle
        handler.request_stop()

        class Untouchable:
            def __getattr__(self, name: str) -> Any:
                raise AssertionError(f"a batch after the stop request was read ({name})")

        with pytest.raises(StopRequested, match=f"{STOP_REQUESTED} before batch 3"):
            handler(Untouchable(), 3)
        assert handler.idle
        assert not store.batch_committed(settings.query_name, 3)  # it runs again at the next start


def test_the_query_plan_is_streaming_with_a_watermark(
    spark_session: Any, spool: Spool, tmp_path: Path
) -> None:
    settings = settings_for(spool, tmp_path)
    aggregates = window_aggregates(sample_rows(read_samples(spark_session, settings), settings), settings)
    assert aggregates.isStreaming
    plan = aggregates._jdf.queryExecution().logical().toString()
    assert "EventTimeWatermark" in plan
    assert "DeduplicateWithinWatermark" in plan


def test_a_spool_directory_that_is_not_there_is_refused_unless_to_be_created(
    spark_session: Any, tmp_path: Path
) -> None:
    spool = tmp_path / "no" / "spool"
    with pytest.raises(MissingSpoolError, match=f"spool directory {spool} does not exist"):
        read_samples(spark_session, AnalyticsSettings(source=f"spool:{spool}"))
    assert not spool.exists()
    read_samples(spark_session, AnalyticsSettings(source=f"spool:{spool}", create_spool=True))
    assert spool.is_dir()
