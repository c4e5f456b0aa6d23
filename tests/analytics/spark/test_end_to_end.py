"""End to end: reference cluster → collectors (ZooKeeper watches + HTTP scrapes) → spool → the Spark job
on ``local[2]`` → store, with faults injected into the cluster and the alerts they must raise.

One cluster and one streaming query go through the phases in turn (Spark and the cluster take seconds to
start): a balanced baseline; load skewed onto one broker (rules 8 and 9 open, and resolve once the skew is
removed); a stalled follower (rule 2, with rule 6 naming it); a stopped broker (rules 1, 2 and 5).
Windows are short (2 s) so that the whole run takes about a minute.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics.config import AnalyticsSettings
from analytics.model import AlertState
from analytics.rules import RuleSettings
from analytics.spark.job import start_query, stop_query
from analytics.store import Store
from app.embedded.reference_cluster.config import TopicSpec
from collectors.metrics import MetricsCollector
from collectors.sampler import Sampler, SamplerSettings
from collectors.samples import SampleNumbering
from collectors.transport import SpoolDirectorySink
from collectors.zookeeper.collector import ZooKeeperCollector
from tests.support.reference_cluster import ClusterFactory, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.integration]

WINDOW_S = 2.0
PHASE_TIMEOUT_S = 60.0


class Pipeline:
    def __init__(self, store: Store) -> None:
        self.store = store

    def alerts(self, rule: int, state: str = "open") -> list[AlertState]:
        return [a for a in self.store.alerts(rule=rule, state=state, limit=1000) if a.event_sequence > 0]

    def wait_open(self, rule: int, subject: str | None = None, message: str = "") -> AlertState:
        def found() -> AlertState | None:
            return next((a for a in self.alerts(rule) if subject is None or a.subject == subject), None)

        return wait_for(found, timeout=PHASE_TIMEOUT_S, message=message or f"rule {rule} open ({subject})")

    def wait_resolved(self, rule: int, subject: str) -> None:
        wait_for(
            lambda: not any(a.subject == subject for a in self.alerts(rule)),
            timeout=PHASE_TIMEOUT_S,
            message=f"rule {rule} ({subject}) resolved",
        )


@pytest.fixture
def pipeline(
    make_cluster: ClusterFactory, zk_connect: str, spark_session: Any, tmp_path: Path
) -> Iterator[tuple[Any, Pipeline]]:
    cluster = make_cluster(
        brokers=4,
        topics=[
            TopicSpec(name="orders", partitions=8, replication_factor=3),
            TopicSpec(name="singles", partitions=4, replication_factor=1),
        ],
    )
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    spool = tmp_path / "spool"
    settings = AnalyticsSettings(
        source=f"spool:{spool}",
        window_s=WINDOW_S,
        watermark_s=0.5,
        trigger_s=0.5,
        checkpoint=str(tmp_path / "checkpoint"),
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        rules=RuleSettings(open_after=2, resolve_after=2, urp_for_s=0.0, open_after_by_rule={}),
    )
    stop = threading.Event()
    with (
        ZooKeeperCollector(zk_connect, connections=2) as collector,
        MetricsCollector(urls=urls, timeout_s=2.0) as metrics,
        Store.open(settings.store_url) as store,
    ):
        sampler = Sampler(
            collector,
            SpoolDirectorySink(spool),
            SampleNumbering("e2e"),
            metrics=metrics,
            settings=SamplerSettings(interval_s=0.5),
        )
        thread = threading.Thread(target=sampler.run, args=(stop,), name="sampler")
        thread.start()
        query = start_query(spark_session, settings, store)
        try:
            yield cluster, Pipeline(store)
        finally:
            stop.set()
            stop_query(query)
            thread.join(timeout=10)
    assert query.exception() is None


def test_faults_raise_the_alerts_that_name_them(pipeline: tuple[Any, Pipeline]) -> None:
    cluster, p = pipeline

    # baseline: windows are evaluated and the balanced cluster raises no load alert
    def load_windows() -> int:
        clusters = p.store.clusters()
        return len(p.store.load_history(clusters[0], since=0.0)) if clusters else 0

    wait_for(lambda: load_windows() >= 3, timeout=PHASE_TIMEOUT_S, message="three load windows")
    assert p.alerts(8) == []
    assert p.alerts(9) == []

    # skew: broker 1 takes four times its share of the produce traffic
    cluster.skew({"brokers": {"1": 4.0}})
    broker_alert = p.wait_open(8, "broker:1")
    assert broker_alert.evidence["deviation_rate"] > 0.1
    cluster_alert = p.wait_open(9, "cluster")
    assert cluster_alert.evidence["stddev"] > cluster_alert.evidence["threshold"]
    assert cluster_alert.evidence["most_loaded"] == 1
    cluster.skew({"reset": True})
    p.wait_resolved(8, "broker:1")
    p.wait_resolved(9, "cluster")

    # a stalled follower: its replicas leave the ISRs, and it is the suspect
    cluster.stall_follower(2)
    p.wait_open(2, "topic:orders")
    p.wait_open(6, "broker:2")
    cluster.resume_follower(2)
    p.wait_resolved(6, "broker:2")
    p.wait_resolved(2, "topic:orders")

    # a stopped broker: its single-replica partition goes offline, the others are under-replicated
    cluster.stop_broker(3)
    p.wait_open(5, "broker:3")
    p.wait_open(1, "topic:singles")
    p.wait_open(2, "topic:orders")
