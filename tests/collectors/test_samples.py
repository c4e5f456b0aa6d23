"""Samples: numbering, what a broker sample holds, JSON lines."""

from __future__ import annotations

import dataclasses
import json

import pytest

from analytics.model import HealthState
from collectors.health import assess
from collectors.kafka.model import ClusterSnapshot, ControllerInfo, LeaderAndIsr
from collectors.samples import (
    EXAMPLES_PER_TOPIC,
    LOAD_METRICS,
    SampleNumbering,
    broker_counts,
    broker_samples,
    cluster_sample,
    health_document,
    new_collector_id,
)
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


def snapshot_of(
    assignments: dict[int, tuple[tuple[int, ...], int]], brokers: tuple[int, ...]
) -> ClusterSnapshot:
    """Cluster c1 (controller 0, epoch 1; no topic znode read): partition ``p`` of topic t on ``replicas``,
    all in sync, led by ``leader``, for each ``p: (replicas, leader)`` of ``assignments``."""
    return cluster(
        *(
            partition("t", p, replicas, leader=leader, leader_epoch=0)
            for p, (replicas, leader) in assignments.items()
        ),
        brokers=brokers,
        topics={},
        controller=ControllerInfo(0, 1),
        cluster_id="c1",
    )


def test_collector_ids_differ_between_starts() -> None:
    assert new_collector_id("c") != new_collector_id("c")
    assert new_collector_id("c").startswith("c-")


def test_sequences_count_up_from_zero() -> None:
    numbering = SampleNumbering("c-1")
    assert [numbering.next() for _ in range(3)] == [0, 1, 2]


def test_broker_counts_come_from_zookeeper() -> None:
    snapshot = snapshot_of({0: ((0, 1), 0), 1: ((1, 2), 1), 2: ((2, 0), 2), 3: ((1, 0), 1)}, (0, 1, 2))
    assert broker_counts(snapshot) == {0: (3, 1), 1: (3, 2), 2: (2, 1)}


def test_broker_samples_keep_load_metrics_only_and_drop_non_finite_values() -> None:
    snapshot = snapshot_of({0: ((0, 1), 0)}, (0, 1))
    signals = {"request_handler_idle": 0.2, "network_processor_idle": 0.3, "produce_p99_ms": 40.0}
    scraped = {0: {"cpuUsed": 1.5, "nwBytesIn": float("nan"), "urp": 3.0, **signals}, 1: {"fd": 300.0}}
    samples = broker_samples(snapshot, scraped, SampleNumbering("c-1"), timestamp=10.0)
    assert [(s.broker, s.sequence) for s in samples] == [(0, 0), (1, 1)]
    assert samples[0].metrics == {"cpuUsed": 1.5, "partitions": 1.0, "leaders": 1.0}
    assert samples[1].metrics == {"fd": 300.0, "partitions": 1.0, "leaders": 0.0}
    assert set(samples[0].metrics) <= set(LOAD_METRICS)


def shrunk(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Every ISR down to its leader."""
    partitions = {
        tp: dataclasses.replace(p, state=LeaderAndIsr(p.leader, 0, (p.leader,), 1))
        for tp, p in snapshot.partitions.items()
    }
    return dataclasses.replace(snapshot, partitions=partitions)


def test_a_sample_is_one_json_line_with_its_identity() -> None:
    snapshot = shrunk(snapshot_of({0: ((0, 1), 0)}, (0,)))
    numbering = SampleNumbering("c-9")
    sample = cluster_sample(snapshot, assess(snapshot), numbering, 5.0)
    line = sample.to_line()
    assert "\n" not in line
    doc = json.loads(line)
    health = doc.pop("health")
    assert doc == {
        "v": 1,
        "collector_id": "c-9",
        "sequence": 0,
        "timestamp": 5.0,
        "kind": "cluster",
        "cluster": "c1",
        "broker": None,
        "metrics": {
            "brokers": 1.0,
            "topics": 1.0,
            "partitions": 1.0,
            "under_replicated": 1.0,
            "under_min_isr": 0.0,
            "at_min_isr": 1.0,
            "offline": 0.0,
            "preferred_replica_imbalance": 0.0,
            "brokers_down": 1.0,
        },
    }
    assert health["brokers_down"] == [1]
    assert health["under_replicated"] == {"count": 1, "by_topic": {"t": 1}, "examples": {"t": [0]}}
    assert health["urp_cross_check"] is None
    assert health["controller"] == {
        "broker_id": 0,
        "epoch": 1,
        "kraft_controller_epoch": None,
        "active_controller_gauges": None,
    }


def test_health_documents_list_a_bounded_number_of_partitions_but_count_them_all() -> None:
    replicas: tuple[int, ...] = (0, 1)
    snapshot = shrunk(snapshot_of(dict.fromkeys(range(EXAMPLES_PER_TOPIC + 5), (replicas, 0)), (0,)))
    doc = health_document(snapshot, assess(snapshot))
    assert doc["under_replicated"]["count"] == EXAMPLES_PER_TOPIC + 5
    assert doc["under_replicated"]["by_topic"] == {"t": EXAMPLES_PER_TOPIC + 5}
    assert doc["under_replicated"]["examples"] == {"t": list(range(EXAMPLES_PER_TOPIC))}


def test_offline_partitions_a_live_in_sync_replica_can_lead_are_told_apart() -> None:
    """A crashed broker's leaderships: offline until the controller moves them (electable); an RF-1
    partition on it stays offline (not electable). Documents written before the field parse as none."""
    snapshot = cluster(
        partition("orders", 0, [3, 1, 2], isr=[3, 1, 2], leader=3),  # its leader just crashed
        partition("orders", 1, [1, 2, 3], isr=[1, 2]),
        partition("singles", 0, [3], isr=[3], leader=3),
        brokers=(1, 2),
    )
    doc = health_document(snapshot, assess(snapshot))
    assert doc["offline"]["by_topic"] == {"orders": 1, "singles": 1}
    assert doc["offline_electable"] == {"count": 1, "by_topic": {"orders": 1}, "examples": {"orders": [0]}}
    state = HealthState.from_json(doc, cluster="c", collector_id="x", timestamp=1.0)
    assert state.offline_electable.by_topic == {"orders": 1}
    del doc["offline_electable"]
    assert (
        HealthState.from_json(doc, cluster="c", collector_id="x", timestamp=1.0).offline_electable.count == 0
    )


def test_partitions_whose_state_cannot_be_read_are_listed_as_unknown_not_offline() -> None:
    """Rule 13 reads them; documents written before the field parse as none."""
    snapshot = cluster(
        partition("orders", 0, [1, 2, 3], state_error="invalid JSON"),
        partition("orders", 1, [1, 2, 3], with_state=False),
    )
    doc = health_document(snapshot, assess(snapshot))
    assert doc["unknown"] == {"count": 1, "by_topic": {"orders": 1}, "examples": {"orders": [0]}}
    assert doc["offline"]["examples"] == {"orders": [1]}
    state = HealthState.from_json(doc, cluster="c", collector_id="x", timestamp=1.0)
    assert (state.unknown.count, state.offline.count) == (1, 1)
    del doc["unknown"]
    assert HealthState.from_json(doc, cluster="c", collector_id="x", timestamp=1.0).unknown.count == 0
