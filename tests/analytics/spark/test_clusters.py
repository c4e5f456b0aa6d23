"""The Spark job with two clusters' samples in one source: windows, load and alerts per cluster, a cluster
whose samples stop does not hold back the other's windows, and a cluster that is not configured is dropped
and said once."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from analytics.config import AnalyticsSettings
from analytics.rules import RuleSettings
from analytics.spark.job import start_query, stop_query
from analytics.store import Store
from tests.support.spark import Spool

pytestmark = pytest.mark.spark

T0 = 1_800_000_000.0
WINDOW_S = 10.0
EMPTY = {"count": 0, "by_topic": {}, "examples": {}}


def health(brokers: list[int], down: list[int]) -> dict[str, Any]:
    return {
        "snapshot": {"version": 1, "taken_at": T0, "last_good_at": T0, "stale": False, "errors": 0},
        "controller": {"broker_id": brokers[0], "epoch": 1, "active_controller_gauges": 1.0},
        "brokers": brokers,
        "brokers_down": down,
        "topics": 1,
        "partitions": 8,
        "preferred_replica_imbalance": 0,
        "under_replicated": EMPTY,
        "under_min_isr": EMPTY,
        "at_min_isr": EMPTY,
        "offline": EMPTY,
        "suspects": [],
        "imbalance": [],
        "urp_cross_check": None,
        "scrape_errors": {},
    }


def write_window(spool: Spool, clusters: tuple[str, ...], w: int) -> None:
    """One round of each of ``clusters`` in window ``w``, in one file: cluster ``a`` has broker 1 carrying
    four times the others' bytes in, and broker 3 down; ``b`` three even brokers; ``zz`` is not
    configured."""
    at = T0 + w * WINDOW_S + 2
    batch = []
    for cluster in clusters:
        if cluster == "a":
            loads = {0: 100.0, 1: 400.0, 2: 100.0}
            doc = health([0, 1, 2], [3])
        else:
            loads = {0: 100.0, 1: 100.0, 2: 100.0}
            doc = health([0, 1, 2], [])
        batch += [spool.broker(cluster, b, at, {"nwBytesIn": v}, collector=cluster) for b, v in loads.items()]
        batch.append(spool.cluster(cluster, at, doc, collector=cluster))
    spool.write(batch)


def test_two_clusters_are_evaluated_apart_and_a_silent_one_does_not_hold_the_other_back(
    spark_session: Any, spool: Spool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = AnalyticsSettings(
        source=f"spool:{spool.directory}",
        window_s=WINDOW_S,
        watermark_s=0.0,
        trigger_s=0.5,
        checkpoint=str(tmp_path / "checkpoint"),
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        rules=RuleSettings(open_after=1, resolve_after=1, urp_for_s=0.0),
    )
    caplog.set_level(logging.WARNING, logger="analytics.spark.job")
    store = Store.open(settings.store_url)
    query = start_query(spark_session, settings, store, clusters=("a", "b"))
    try:
        for w in (0, 1):  # both clusters, and one that is not configured
            write_window(spool, ("a", "b", "zz"), w)
        query.processAllAvailable()
        for w in (2, 3, 4):  # b's samples stop; a's go on (window 4 moves the watermark past 3)
            write_window(spool, ("a", "zz"), w)
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        stop_query(query)
    try:
        assert store.clusters() == ["a", "b"]
        a_windows = [w.window.start for w in store.load_history("a", since=0.0)]
        b_windows = store.load_history("b", since=0.0)
        assert a_windows == [T0 + w * WINDOW_S for w in range(4)]  # closed although b went silent
        assert [w.window.start for w in b_windows] == [T0, T0 + WINDOW_S]
        for window in b_windows:  # b's load is its own: three even brokers, a's hot broker not in it
            assert [b.broker for b in window.brokers] == [0, 1, 2]
            assert {round(b.normalized_load, 6) for b in window.brokers} == {round(1 / 3, 6)}
        down = {
            name: {tuple(w.health["doc"]["brokers_down"]) for w in store.cluster_windows(name) if w.health}
            for name in ("a", "b")
        }
        assert down == {"a": {(3,)}, "b": {()}}

        a_alerts = store.alerts(cluster="a")
        assert (8, "broker:1") in {(alert.rule, alert.subject) for alert in a_alerts}
        assert store.alerts(cluster="b") == []
        assert {alert.cluster for alert in store.alerts()} == {"a"}
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if "not one of the configured clusters" in r.getMessage()]
    assert len(said) == 1, said
    assert "'zz'" in said[0]
