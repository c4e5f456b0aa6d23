"""The incident lane's health state from the live view (:class:`app.incidents.observe.HealthObserver`) and
the controller's history (:class:`app.incidents.observe.ControllerHistory`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from app.incidents.observe import ControllerHistory, HealthObserver, cluster_name
from collectors.health import HealthReport, assess
from collectors.kafka.model import ClusterSnapshot
from collectors.metrics import MetricsScrape
from tests.support.health import healthy_state
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class State:
    snapshot: ClusterSnapshot
    report: HealthReport
    scrape: MetricsScrape | None
    last_good_at: float | None


def state(snapshot: ClusterSnapshot, last_good_at: float | None = 100.0) -> State:
    return State(snapshot, assess(snapshot), None, last_good_at)


def test_the_health_state_is_the_collectors_document_built_once_per_version() -> None:
    observer = HealthObserver("serve-1")
    down = cluster(partition("t", 0, [1, 2]), partition("solo", 0, [3], isr=[3]), brokers=(1, 2), version=4)
    first = observer.observe(state(down), now=200.0)
    assert (first.cluster, first.collector_id, first.timestamp, first.last_good_at) == (
        "c",
        "serve-1",
        200.0,
        100.0,
    )
    assert first.brokers_down == (3,)
    assert first.offline.by_topic == {"solo": 1}
    assert first.offline_electable.count == 0
    again = observer.observe(state(down, last_good_at=None), now=201.0)
    assert again.offline is first.offline  # the same document: built once for version 4 and this scrape
    assert (again.timestamp, again.last_good_at) == (201.0, 0.0)  # never in sync: long ago
    stale = observer.observe(state(replace(down, stale=True)), now=202.0)
    assert stale.stale
    healthy = observer.observe(state(cluster(partition("t", 0, [1, 2]), version=5)), now=203.0)
    assert healthy.offline.count == 0
    assert cluster_name(replace(down, cluster_id=None)) == "unknown"


def test_controller_history_keeps_the_epoch_changes_within_the_horizon() -> None:
    history = ControllerHistory(horizon_s=100.0)
    for at, epoch in [(0.0, 1), (10.0, 1), (20.0, 2), (150.0, 3), (160.0, None), (170.0, 4)]:
        history.record(at, epoch)
    now = healthy_state("c", 180.0, controller_epoch=4)
    assert [(s.timestamp, s.controller_epoch) for s in history.states(now)] == [(150.0, 3), (170.0, 4)]
    assert all(s.brokers == now.brokers for s in history.states(now))
