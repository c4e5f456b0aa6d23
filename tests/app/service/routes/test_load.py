"""``/api/v1/load`` over real HTTP once the service's own retention pruner has run: the history of a range
older than the raw windows' retention comes from the hourly rollups (``resolution: hour``), the recent
part from the windows, and ``/metrics`` shows what the pruner did."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from analytics.model import BrokerLoad, LoadWindow, Window
from app.retention.config import DAY, RetentionSettings
from app.retention.plan import hour_of
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.service import Service, fill_store, serving
from tests.support.store import open_store

pytestmark = pytest.mark.integration


def old_window(cluster: str, start: float, k: int) -> LoadWindow:
    return LoadWindow(
        Window(cluster, start, start + 600.0),
        tuple(
            BrokerLoad(b, {"cpu": 0.1}, {"cpu": 1 / 3}, 1.0 + k + b, 0.3 + 0.01 * k, 0.1 * k - 0.2)
            for b in range(3)
        ),
        stddev=0.01 * k,
        stddev_threshold=0.04,
        rated_deviation=0.12,
    )


def retention_samples(service: Service) -> dict[tuple[str, str], float]:
    text = httpx.get(service.url + "/metrics").text
    return {
        (s.name, s.labels.get("table", "")): s.value
        for f in text_string_to_metric_families(text)
        if f.name.startswith("kafka_health_retention")
        for s in f.samples
    }


def test_an_old_range_is_answered_from_hourly_rollups(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    retention = RetentionSettings.model_validate({"load_windows": "1d", "interval_s": 0.5, "pause_s": 0})
    with serving(
        make_cluster(), zk_connect, f"sqlite:///{tmp_path / 'store.db'}", retention=retention
    ) as service:
        cluster_id = fill_store(service)  # a window of now, through the analytics pipeline
        hour = hour_of(time.time() - 3 * DAY)
        windows = [old_window(cluster_id, hour + 600.0 * k, k) for k in range(6)]
        with open_store(service.store_url) as store:
            assert store.commit_batch("backfill", 0, load_windows=windows)
        wait_for(
            lambda: (
                retention_samples(service).get(("kafka_health_retention_rolled_up_windows_total", ""), 0) >= 6
            ),
            timeout=15,
            message="the service's pruner rolled the old windows up",
        )
        load = service.get("/api/v1/load", since=hour - 10 * 3600).json()
        rollup, recent = load["history"]
        assert (rollup["resolution"], rollup["windows"]) == ("hour", 6)
        assert (rollup["window_start"], rollup["window_end"]) == (hour, hour + 3600)
        assert rollup["stddev"] == pytest.approx(0.025)
        assert rollup["max_stddev"] == pytest.approx(0.05)
        assert rollup["imbalanced"] is True  # the windows with σ 0.05 were over 0.04
        assert [b["broker"] for b in rollup["brokers"]] == [0, 1, 2]
        broker = rollup["brokers"][1]
        assert broker["normalized_load"] == pytest.approx(0.325)
        assert broker["max_normalized_load"] == pytest.approx(0.35)
        assert (broker["min_deviation_rate"], broker["max_deviation_rate"]) == pytest.approx((-0.2, 0.3))
        assert broker["weighted_load"] == pytest.approx(4.5)
        assert (broker["metrics"], broker["shares"]) == ({}, {})
        assert (recent["resolution"], recent["windows"]) == ("window", 1)
        assert recent["brokers"][0]["max_normalized_load"] is None
        assert load["latest"]["window_start"] == recent["window_start"]

        samples = retention_samples(service)
        assert samples[("kafka_health_retention_pruned_rows_total", "load_windows")] == 18
        assert samples[("kafka_health_retention_pruned_rows_total", "audit_log")] == 0
        assert samples[("kafka_health_retention_last_pass_timestamp_seconds", "")] > hour
        assert samples[("kafka_health_retention_last_pass_duration_seconds", "")] >= 0
        assert samples[("kafka_health_retention_passes_total", "")] >= 1
