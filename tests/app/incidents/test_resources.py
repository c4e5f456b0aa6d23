"""Rules 14-18 on the reference cluster: a live view (ZooKeeper watches and the brokers' scrapes every 0.5 s)
and the incident lane on an SQLite store, as ``kafka-health serve`` runs them, with small ``for`` values;
faults through the cluster's controls (fill or fail a log dir, override a broker's gauges, stall a
follower). Each test waits on the alert it expects (no wall-clock bound).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from analytics.model import AlertState
from analytics.rules import RuleSettings
from analytics.store import Store
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.metrics import REQUEST_HANDLER_IDLE
from app.incidents.changes import SnapshotChanges
from app.incidents.config import IncidentSettings
from app.incidents.lane import IncidentLane
from app.leadership import AlwaysLeader
from app.service.state import ClusterView, ViewSettings
from collectors.metrics import MetricsCollector
from collectors.zookeeper.collector import ZooKeeperCollector
from tests.support.reference_cluster import ClusterFactory, wait_for

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0
RULES = RuleSettings(
    urp_for_s=0.5,
    for_s={14: 1.0, 16: 1.0, 17: 1.0},
    resolve_after_s={14: 1.0, 16: 1.0, 17: 1.0, 18: 1.0},
    isr_flap_changes=4,
    isr_flap_window_s=120.0,
)
MOUNT = "/var/lib/kafka/data-0"


@dataclass
class Live:
    cluster: ReferenceCluster
    store: Store
    lane: IncidentLane

    def alerts(self, rule: int, state: str = "open") -> list[AlertState]:
        return [a for a in self.store.alerts(rule=rule, state=state, limit=1000) if a.event_sequence > 0]

    def wait_open(self, rule: int, subject: str) -> AlertState:
        def found() -> AlertState | None:
            return next((a for a in self.alerts(rule) if a.subject == subject), None)

        return wait_for(found, timeout=TIMEOUT_S, message=f"rule {rule} open ({subject})")

    def wait_resolved(self, rule: int, subject: str) -> None:
        wait_for(
            lambda: any(a.subject == subject for a in self.alerts(rule, "resolved")),
            timeout=TIMEOUT_S,
            message=f"rule {rule} ({subject}) resolved",
        )


@pytest.fixture
def live(make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path) -> Iterator[Live]:
    cluster = make_cluster(
        brokers=3,
        log_dirs_per_broker=1,
        topics=[
            TopicSpec(name="orders", partitions=6, replication_factor=3),
            TopicSpec(name="singles", partitions=3, replication_factor=1),
        ],
    )
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    changes = SnapshotChanges()
    with (
        ZooKeeperCollector(zk_connect, connections=2, on_change=changes) as collector,
        MetricsCollector(urls=urls, timeout_s=2.0) as metrics,
        Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store,
    ):
        view = ClusterView(collector, metrics, ViewSettings(metrics_interval_s=0.5))
        view.start()
        lane = IncidentLane(
            view, store, AlwaysLeader(), settings=IncidentSettings(interval_s=0.5), rules=RULES
        )
        unsubscribe = changes.subscribe(lane.changed)
        lane.start()
        try:
            yield Live(cluster, store, lane)
        finally:
            lane.stop()
            unsubscribe()
            view.stop()


def test_a_filling_log_dir_pages_rule_14_then_failing_pages_rule_15_named_by_the_offline_pages(
    live: Live,
) -> None:
    live.cluster.fill_log_dir(1, 0, used_ratio=0.9, bytes_per_s=5e6)
    subject = f"broker:1:{MOUNT}"
    filling = live.wait_open(14, subject)
    assert filling.severity == "warning"
    assert filling.summary.startswith(f"broker 1's log dir {MOUNT} is 90 % full")

    live.cluster.fill_log_dir(1, 0, used_ratio=1.0, bytes_per_s=None)  # full: Kafka fails it
    offline_dir = live.wait_open(15, "broker:1")
    assert offline_dir.severity == "critical"
    assert offline_dir.summary.startswith("broker 1 has 1 log dir offline")

    def named() -> AlertState | None:
        page = next((a for a in live.alerts(1) if a.subject == "topic:singles"), None)
        causes = [] if page is None else page.evidence.get("causes", [])
        return page if any(c["rule"] == 15 and c["subject"] == "broker:1" for c in causes) else None

    page = wait_for(named, timeout=TIMEOUT_S, message="rule 1's page of singles names rule 15")
    assert "a replica on broker 1: broker 1's" in page.summary
    assert "log dir is offline (rule 15)" in page.summary


def test_a_failed_log_dir_pages_rule_15_at_once(live: Live) -> None:
    live.cluster.fail_log_dir(2, 0)
    alert = live.wait_open(15, "broker:2")
    assert alert.evidence["log_dir_failures"] >= 1 or alert.evidence["gauge"] >= 1


def test_saturated_handlers_page_rule_16_and_resolve_after_reset(live: Live) -> None:
    live.cluster.override_metrics(2, {REQUEST_HANDLER_IDLE: 0.05}, reset=False)
    alert = live.wait_open(16, "broker:2")
    assert alert.severity == "critical"
    assert alert.summary == "broker 2 is saturated: its request handlers are 5 % idle"
    live.cluster.override_metrics(2, {}, reset=True)
    live.wait_resolved(16, "broker:2")


def test_file_descriptors_at_90_percent_page_rule_17(live: Live) -> None:
    limit = live.cluster.settings.traffic.max_fds
    live.cluster.override_metrics(1, {"process_open_fds": 0.9 * limit}, reset=False)
    alert = live.wait_open(17, "broker:1")
    assert alert.severity == "warning"
    assert alert.summary.startswith("broker 1 has 90 % of its file descriptors open")


def test_a_follower_stalled_and_resumed_repeatedly_pages_rule_18(live: Live) -> None:
    follower = 2

    def isr_has(member: bool) -> bool:
        snapshot = live.lane.view.state.snapshot
        followed = [
            i.state
            for i in snapshot.partitions.values()
            if follower in i.assignment.replicas and i.state is not None and i.state.leader != follower
        ]
        return bool(followed) and all((follower in s.isr) == member for s in followed if s is not None)

    for _ in range(2):  # two round trips: 4 changes per replica
        live.cluster.stall_follower(follower)
        wait_for(lambda: isr_has(False), timeout=TIMEOUT_S, message="the follower left the ISRs")
        live.cluster.resume_follower(follower)
        wait_for(lambda: isr_has(True), timeout=TIMEOUT_S, message="the follower rejoined the ISRs")
    alert = live.wait_open(18, f"broker:{follower}")
    assert alert.summary.startswith(f"broker {follower} is flapping: its replicas of ")
