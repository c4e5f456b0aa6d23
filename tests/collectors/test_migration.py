"""The ZK→KRaft migration view and the readiness checks, pure, on snapshots as ZooKeeper shows them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analytics.model import HealthState
from collectors.health import assess
from collectors.kafka.model import (
    ClusterSnapshot,
    ControllerInfo,
    MigrationState,
    PendingOperations,
    TopicPartition,
    ZnodeError,
)
from collectors.migration import (
    ReadinessReport,
    migration_readiness,
    migration_view,
    release_of_level,
    write_readiness_text,
)
from collectors.samples import health_document
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit

KRAFT = ControllerInfo(3000, 6, 1, kraft_controller_epoch=2)
MIGRATED = MigrationState(3000, 2, 1234, 2, zk_version=3)


def with_features(snapshot: ClusterSnapshot, levels: dict[int, int]) -> ClusterSnapshot:
    """The brokers advertise ``metadata.version`` up to ``levels[id]`` (what a 3.x broker writes in v5)."""
    brokers = {
        b: replace(r, features={"metadata.version": {"min_version": 1, "max_version": levels[b]}})
        for b, r in snapshot.brokers.items()
    }
    return replace(snapshot, brokers=brokers)


def ready_cluster(controller: ControllerInfo | None = None) -> ClusterSnapshot:
    snapshot = cluster(partition("t", 0, [1, 2, 3]), partition("t", 1, [2, 3, 1]), controller=controller)
    return with_features(snapshot, {1: 14, 2: 14, 3: 14})


def statuses(report: ReadinessReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def reasons(report: ReadinessReport) -> dict[str, str]:
    return {c.name: c.reason for c in report.checks}


# --- the phase -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("controller", "migration", "brokers", "phase"),
    [
        (ControllerInfo(1, 5), None, (1, 2, 3), "none"),
        (ControllerInfo(1, 5, kraft_controller_epoch=-1), None, (1, 2, 3), "none"),
        (ControllerInfo(1, 5), MigrationState(-1, -1, -1, -1), (1, 2, 3), "pre_migration"),
        (KRAFT, MigrationState(3000, 2, -1, -1), (1, 2, 3), "pre_migration"),
        (KRAFT, MIGRATED, (1, 2, 3), "hybrid"),
        (KRAFT, MIGRATED, (), "dual_write"),
        (ControllerInfo(2, 7, kraft_controller_epoch=-1), MIGRATED, (1, 2, 3), "zk_controller"),
    ],
)
def test_the_phase_follows_what_zookeeper_shows(
    controller: ControllerInfo, migration: MigrationState | None, brokers: tuple[int, ...], phase: str
) -> None:
    view = migration_view(replace(cluster(brokers=brokers, controller=controller), migration=migration))
    assert view.phase == phase


def test_the_view_carries_the_kraft_controller_and_the_last_metadata_written() -> None:
    view = migration_view(replace(cluster(controller=KRAFT), migration=MIGRATED))

    assert view.to_json() == {
        "phase": "hybrid",
        "kraft_controller_id": 3000,
        "kraft_controller_epoch": 2,
        "metadata_offset": 1234,
        "metadata_epoch": 2,
        "migration_zk_version": 3,
        "zk_brokers": 3,
    }


def test_a_kraft_controller_is_an_active_controller_not_an_unregistered_broker() -> None:
    report = assess(replace(cluster(controller=KRAFT), migration=MIGRATED))
    assert (report.controller.active, report.controller.kraft, report.controller.broker_id) == (
        True,
        True,
        3000,
    )
    # a ZK-mode controller with an id no broker has is still not active
    assert (
        assess(cluster(controller=ControllerInfo(3000, 6, kraft_controller_epoch=-1))).controller.active
        is False
    )


@pytest.mark.parametrize(
    ("level", "release"), [(1, "3.0-3.2"), (7, "3.3"), (8, "3.4"), (14, "3.6"), (21, "3.9")]
)
def test_release_of_a_metadata_version_level(level: int, release: str) -> None:
    assert release_of_level(level) == release


# --- readiness -------------------------------------------------------------------------------------------


def test_a_healthy_cluster_on_36_is_ready() -> None:
    snapshot = ready_cluster()
    report = migration_readiness(snapshot, assess(snapshot), active_controller_gauges=1.0)

    assert report.ready
    assert set(statuses(report).values()) == {"pass"}
    assert "Kafka 3.6" in reasons(report)["broker_software"]
    assert "c" in reasons(report)["cluster_id"]
    text = write_readiness_text(report)
    assert text.startswith("ZK→KRaft migration readiness: READY\n")
    assert "PASS    no_pending_reassignments" in text


def test_without_metrics_the_controller_gauge_check_is_unknown_and_does_not_block() -> None:
    snapshot = ready_cluster()
    report = migration_readiness(snapshot, assess(snapshot))

    assert report.ready
    assert statuses(report)["single_active_controller"] == "unknown"


def fails(snapshot: ClusterSnapshot, gauges: float | None = 1.0) -> dict[str, str]:
    report = migration_readiness(snapshot, assess(snapshot), active_controller_gauges=gauges)
    assert not report.ready
    return {c.name: c.reason for c in report.checks if c.status == "fail"}


def test_each_precondition_fails_with_its_reason() -> None:
    base = ready_cluster()
    assert fails(with_features(base, {1: 14, 2: 11, 3: 7})) == {
        "broker_software": "brokers 2, 3 run Kafka 3.3, 3.5, below 3.6 (upgrade first)",
        "same_broker_software": "brokers run different releases (metadata.version up to 7: brokers 3, "
        "11: brokers 2, 14: brokers 1): finish the rolling upgrade first",
    }
    old = replace(base, brokers={**base.brokers, 2: replace(base.brokers[2], version=4, features={})})
    assert set(fails(old)) == {"registration_version", "broker_software"}
    assert "brokers 2 register in version <5" in fails(old)["registration_version"]
    assert "brokers 2 advertise no metadata.version" in fails(old)["broker_software"]

    pending = PendingOperations(
        preferred_election=(TopicPartition("t", 0),),
        reassignments={TopicPartition("t", 1): (1, 2, 3)},
        deletions=("old",),
    )
    assert set(fails(replace(base, pending=pending))) == {
        "no_pending_reassignments",
        "no_pending_topic_deletions",
        "no_pending_preferred_election",
    }
    assert fails(replace(base, pending=pending))["no_pending_topic_deletions"].endswith(": old")

    assert fails(base, gauges=2.0) == {
        "single_active_controller": "2 brokers report ActiveControllerCount=1 (expected exactly one)"
    }
    assert set(fails(replace(base, controller=ControllerInfo()))) == {"controller_healthy"}
    assert set(fails(replace(base, cluster_id=None))) == {"cluster_id"}
    unreadable = replace(base, errors=(ZnodeError("/brokers/ids/9", "invalid JSON"),))
    assert set(fails(unreadable)) == {"zookeeper_state_readable"}


def test_unhealthy_partitions_and_a_missing_broker_fail() -> None:
    snapshot = with_features(
        cluster(
            partition("t", 0, [1, 2, 4], isr=[1]),
            partition("t", 1, [4, 2], isr=[4], leader=4),
            partition("t", 2, [1, 2, 3], isr=[]),
            partition("u", 0, [1, 2, 3], adding=[3], removing=[]),
            topic_configs={"t": {"min.insync.replicas": "2"}},
        ),
        {1: 14, 2: 14, 3: 14},
    )
    failed = fails(snapshot)

    assert set(failed) == {
        "brokers_registered",
        "no_offline_partitions",
        "no_under_min_isr_partitions",
        "no_under_replicated_partitions",
        "no_pending_reassignments",
    }
    assert failed["brokers_registered"] == "brokers 4 hold replicas but are not registered"
    assert "u-0" in failed["no_pending_reassignments"]


def test_during_a_migration_the_report_says_it_has_started() -> None:
    snapshot = replace(ready_cluster(controller=KRAFT), migration=MIGRATED)
    report = migration_readiness(snapshot, assess(snapshot), active_controller_gauges=0.0)

    failed = {c.name for c in report.checks if c.status == "fail"}
    assert failed == {"migration_not_started", "single_active_controller"}
    assert reasons(report)["controller_healthy"].startswith("KRaft controller 3000 is the active controller")
    assert report.to_json()["migration"]["phase"] == "hybrid"


def test_the_health_document_carries_the_kraft_controller_to_the_rules() -> None:
    snapshot = replace(cluster(controller=KRAFT), migration=MIGRATED)
    doc = health_document(snapshot, assess(snapshot))
    state = HealthState.from_json(doc, cluster="c", collector_id="x", timestamp=0.0)

    assert (state.controller_id, state.controller_kraft_epoch, state.controller_is_kraft) == (3000, 2, True)
    older = dict(doc, controller={"broker_id": 1, "epoch": 5})  # a document from before the field existed
    assert (
        HealthState.from_json(older, cluster="c", collector_id="x", timestamp=0.0).controller_is_kraft
        is False
    )


def test_brokers_that_advertise_no_metadata_version_fail_the_software_check_not_the_report() -> None:
    """Every broker older than Kafka 3.3 (or registering below v5): no level to take a maximum of."""
    snapshot = cluster(partition("t", 0, [1, 2, 3]))
    report = migration_readiness(snapshot, assess(snapshot), active_controller_gauges=1.0)

    assert not report.ready
    assert statuses(report)["broker_software"] == "fail"
    assert "brokers 1, 2, 3 advertise no metadata.version" in reasons(report)["broker_software"]
