"""What is left of a drained broker, over hand-built snapshots and configs: replicas (internal topics too),
moves to it, throttled-replica entries naming it, its own dynamic config."""

from __future__ import annotations

import pytest

from app.actions.decommission import checks, leftovers, throttled_topics
from collectors.kafka.model import PendingOperations, TopicPartition
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


def test_a_drained_broker_without_configs_is_removable() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2]), partition("__consumer_offsets", 0, [2, 1]), brokers=(1, 2, 3)
    )
    assert leftovers(snapshot, 3, {}, {"t": {"retention.ms": "1"}}) == []


def test_every_kind_of_leftover_is_named_with_its_reason() -> None:
    snapshot = cluster(
        partition("__consumer_offsets", 7, [3, 1]),
        partition("t", 0, [1, 2, 3], adding=[3]),
        partition("t", 1, [1, 2]),
        partition("gone", 0, [3, 2]),
        pending=PendingOperations(reassignments={TopicPartition("t", 1): (1, 3)}),
        brokers=(1, 2, 3),
    )
    found = leftovers(
        snapshot,
        3,
        {"follower.replication.throttled.rate": "1000", "log.cleaner.threads": "2"},
        {
            "t": {
                "follower.replication.throttled.replicas": "0:3,1:2",
                "leader.replication.throttled.replicas": "*",
            },
            "u": {"leader.replication.throttled.replicas": "0:1"},
        },
        skipped={TopicPartition("gone", 0): "topic being deleted"},
    )
    rows = [(f.kind, f.topic, f.partition, f.entity, f.reason) for f in found]
    assert rows == [
        ("replica", "__consumer_offsets", 7, None, "still a replica (replicas [3, 1])"),
        ("replica", "gone", 0, None, "still a replica: the drain plan skipped it (topic being deleted)"),
        ("replica", "t", 0, None, "still a replica: the partition is being reassigned"),
        ("reassignment", "t", 1, None, "a pending reassignment moves it here"),
        (
            "throttle",
            "t",
            None,
            "topics/t",
            "follower.replication.throttled.replicas names broker 3 (partitions 0)",
        ),
        (
            "throttle",
            None,
            None,
            "brokers/3",
            "dynamic broker config follower.replication.throttled.rate=1000",
        ),
        ("config", None, None, "brokers/3", "dynamic broker config log.cleaner.threads=2"),
    ]
    assert found[0].json() == {
        "kind": "replica",
        "reason": "still a replica (replicas [3, 1])",
        "topic": "__consumer_offsets",
        "partition": 7,
    }


def test_the_topics_to_read_again_and_the_checks_a_dry_run_lists() -> None:
    snapshot = cluster(
        partition("t", 0, [1]),
        partition("u", 0, [1]),
        topic_configs={"t": {"leader.replication.throttled.replicas": "0:1"}},
    )
    assert throttled_topics(snapshot) == ["t"]
    listed = checks(4)
    assert len(listed) == 4
    assert "__consumer_offsets" in listed[0]
    assert all("broker 4" in c for c in listed)
