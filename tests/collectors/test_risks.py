"""The standing risks (collectors.risks): each kind, aggregated per topic, with its fix; the sources of
unclean leader election; log dirs full within the horizon."""

from __future__ import annotations

import pytest

from collectors.disks import LogDirDisk, TopicGrowth
from collectors.kafka.effective import StaticDefaults, TopicSettings
from collectors.kafka.model import ClusterSnapshot
from collectors.risks import (
    LOG_DIR_FULL_SOON,
    MIN_ISR_AT_RF,
    ONE_RACK,
    REPLICATION_FACTOR_ONE,
    RF_ABOVE_BROKERS,
    RISK_KINDS,
    UNCLEAN_ELECTION,
    Risk,
    risk_counts,
    standing_risks,
)
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


def kinds(risks: tuple[Risk, ...]) -> list[tuple[str, str, int]]:
    return [(r.kind, r.subject, r.partitions) for r in risks]


def test_a_healthy_layout_has_no_risk() -> None:
    snapshot = cluster(*(partition("orders", p, [1, 2, 3]) for p in range(4)))
    assert standing_risks(snapshot) == ()
    assert risk_counts(()) == dict.fromkeys(RISK_KINDS, 0)


def test_rf_one_is_one_entry_per_topic_with_its_partitions_counted() -> None:
    snapshot = cluster(
        *(partition("logs", p, [p % 3 + 1]) for p in range(5)),
        partition("orders", 0, [1, 2, 3]),
        partition("mixed", 0, [1]),
        partition("mixed", 1, [1, 2]),
    )
    risks = standing_risks(snapshot)
    assert kinds(risks) == [
        (REPLICATION_FACTOR_ONE, "topic:logs", 5),
        (REPLICATION_FACTOR_ONE, "topic:mixed", 1),
    ]
    assert "5 of 5 partitions of logs" in risks[0].detail
    assert "1 of 2 partitions of mixed" in risks[1].detail
    assert "/api/v1/actions/reassignments" in risks[0].fix


def test_min_insync_replicas_at_or_above_rf_names_its_source_and_the_fix() -> None:
    snapshot = cluster(
        partition("payments", 0, [1, 2, 3]),
        partition("payments", 1, [2, 3, 1]),
        partition("audit", 0, [1, 2]),
        partition("fine", 0, [1, 2, 3]),
        topic_configs={"payments": {"min.insync.replicas": "3"}, "audit": {"min.insync.replicas": "3"}},
    )
    risks = standing_risks(snapshot)
    assert kinds(risks) == [(MIN_ISR_AT_RF, "topic:audit", 1), (MIN_ISR_AT_RF, "topic:payments", 2)]
    audit, payments = risks
    assert "min.insync.replicas 3 (from topic) with replication factor 2" in audit.detail
    assert "always fail" in audit.detail
    assert "any broker stop" in payments.detail
    assert payments.fix.endswith(
        "--alter --entity-type topics --entity-name payments --add-config min.insync.replicas=2"
    )


def test_min_isr_from_the_static_default_counts_and_rf_one_is_left_to_its_own_kind() -> None:
    snapshot = cluster(partition("a", 0, [1, 2]), partition("b", 0, [1]))
    settings = TopicSettings(snapshot, StaticDefaults(min_insync_replicas=2))
    risks = standing_risks(snapshot, settings)
    assert kinds(risks) == [(REPLICATION_FACTOR_ONE, "topic:b", 1), (MIN_ISR_AT_RF, "topic:a", 1)]
    assert "(from static_default)" in risks[1].detail


def test_rf_above_the_registered_brokers() -> None:
    snapshot = cluster(partition("wide", 0, [1, 2, 3, 4]), brokers=[1, 2, 3])
    assert kinds(standing_risks(snapshot)) == [(RF_ABOVE_BROKERS, "topic:wide", 1)]
    assert "only 3 brokers are registered" in standing_risks(snapshot)[0].detail


def test_every_replica_in_one_rack_only_when_brokers_have_racks() -> None:
    partitions = (partition("t", 0, [1, 2]), partition("t", 1, [1, 3]), partition("t", 2, [2, 3]))
    racks = {1: "a", 2: "a", 3: "b"}
    risks = standing_risks(cluster(*partitions, racks=racks))
    assert kinds(risks) == [(ONE_RACK, "topic:t", 1)]
    assert "(a)" in risks[0].detail
    assert standing_risks(cluster(*partitions)) == ()  # no racks
    assert standing_risks(cluster(*partitions, racks={1: "a", 2: "a", 3: "a"})) == ()  # one rack only


def test_unclean_election_per_topic_and_inherited_from_the_cluster_default() -> None:
    base = (partition("a", 0, [1, 2, 3]), partition("a", 1, [1, 2, 3]), partition("b", 0, [1, 2, 3]))
    topic_level = cluster(*base, topic_configs={"a": {"unclean.leader.election.enable": "true"}})
    risks = standing_risks(topic_level)
    assert kinds(risks) == [(UNCLEAN_ELECTION, "topic:a", 2)]
    assert risks[0].fix.endswith("--entity-name a --delete-config unclean.leader.election.enable")

    default = cluster(
        *base,
        broker_default={"unclean.leader.election.enable": "true"},
        topic_configs={"b": {"unclean.leader.election.enable": "false"}},
    )
    risks = standing_risks(default)
    assert kinds(risks) == [(UNCLEAN_ELECTION, "cluster", 2)]
    assert "source: cluster_default" in risks[0].detail
    assert "inherited by 1 topics" in risks[0].detail
    assert "--entity-default --delete-config unclean.leader.election.enable" in risks[0].fix

    static = TopicSettings(cluster(*base), StaticDefaults(unclean_leader_election_enable=True))
    risks = standing_risks(cluster(*base), static)
    assert kinds(risks) == [(UNCLEAN_ELECTION, "cluster", 3)]
    assert "server.properties" in risks[0].fix


def disk(mountpoint: str, full_in_s: float | None) -> LogDirDisk:
    growth = None if full_in_s is None else 1e6
    return LogDirDisk(mountpoint, 100e9, 10e9, 0.9, growth, full_in_s, (TopicGrowth("orders", 1e6),))


def test_log_dirs_full_within_the_horizon() -> None:
    snapshot: ClusterSnapshot = cluster(partition("orders", 0, [1, 2, 3]))
    disks = {
        1: (disk("/data-0", 3 * 3600.0), disk("/data-1", None)),
        2: (disk("/data-0", 8 * 86400.0),),
    }
    risks = standing_risks(snapshot, disks=disks)
    assert kinds(risks) == [(LOG_DIR_FULL_SOON, "broker:1:/data-0", 0)]
    assert "full in 3.0 h" in risks[0].detail
    assert "/api/v1/brokers/1/disks" in risks[0].fix
    longer = standing_risks(snapshot, disks=disks, disk_horizon_s=9 * 86400.0)
    assert [r.subject for r in longer] == ["broker:1:/data-0", "broker:2:/data-0"]


def test_counts_list_every_kind() -> None:
    snapshot = cluster(partition("x", 0, [1]), partition("y", 0, [2]))
    counts = risk_counts(standing_risks(snapshot))
    assert counts[REPLICATION_FACTOR_ONE] == 2
    assert set(counts) == set(RISK_KINDS)
    assert sum(counts.values()) == 2
