"""ZK→KRaft migration (KIP-866): where a cluster stands, and whether it is ready to start one. Pure.

What ZooKeeper shows of a migration (Kafka 3.4-3.9, ``kafka.zk.ZkData`` and ``KafkaZkClient``): the KRaft
controller creates ``/migration`` (:class:`~collectors.kafka.model.MigrationState`), then takes over
``/controller`` as a *persistent* znode with its node id in ``brokerid`` and its KRaft epoch in
``kraftControllerEpoch`` (a ZK-mode controller writes -1 there, or nothing before 3.4), bumping
``/controller_epoch``. Once it has copied the metadata it records the offset and epoch of the last KRaft
record it wrote to ZooKeeper in ``/migration``. ZK-mode brokers stay in ``/brokers/ids``; brokers restarted
as KRaft brokers leave it. The phases follow Kafka's ``ZkMigrationState`` gauge where ZooKeeper can tell.

The readiness report lists what Kafka's "ZooKeeper to KRaft Migration" documentation requires before a
migration that can be judged from ZooKeeper and the brokers' metrics, each check with pass/fail and why;
"unknown" when the input does not say (no metrics scraped). A report is ready when nothing fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from collectors.health import HealthReport
from collectors.kafka.model import ClusterSnapshot

MigrationPhase = Literal["none", "pre_migration", "hybrid", "dual_write", "zk_controller"]
"""``none``: no ``/migration`` and a ZK-mode controller (Kafka's ``ZK`` state). ``pre_migration``:
``/migration`` exists but no metadata has been migrated yet (the KRaft controller waits for every ZK broker
to register in migration mode). ``hybrid``: a KRaft controller holds ``/controller``, the metadata is
migrated and ZK-mode brokers are still registered (Kafka's ``MIGRATION``). ``dual_write``: the same with no
ZK-mode broker left: every broker runs in KRaft mode and the controller still writes ZooKeeper.
``zk_controller``: ``/migration`` records migrated metadata but a ZK-mode broker holds ``/controller`` (a
rollback, or the KRaft controllers are not running)."""
MIGRATION_PHASES: tuple[MigrationPhase, ...] = (
    "none",
    "pre_migration",
    "hybrid",
    "dual_write",
    "zk_controller",
)

METADATA_VERSION_FEATURE = "metadata.version"
MIGRATION_GA_LEVEL = 12
"""``metadata.version`` feature level of Kafka 3.6 (``IBP_3_6_IV0``), the first release whose migration is
generally available (3.4 early access, 3.5 preview)."""
_RELEASE_OF_LEVEL = ((21, "3.9"), (20, "3.8"), (15, "3.7"), (12, "3.6"), (9, "3.5"), (8, "3.4"), (4, "3.3"))
"""First ``metadata.version`` level of each release (``MetadataVersion``): the highest level a broker
supports tells its software release."""


def release_of_level(level: int) -> str:
    """The Kafka release whose highest ``metadata.version`` is ``level`` (e.g. 14 -> '3.6')."""
    for first, release in _RELEASE_OF_LEVEL:
        if level >= first:
            return release
    return "3.0-3.2"


@dataclass(frozen=True, slots=True)
class MigrationView:
    phase: MigrationPhase
    kraft_controller_id: int | None
    """The KRaft controller holding ``/controller`` (None while a ZK-mode broker or nobody holds it)."""
    kraft_controller_epoch: int | None
    metadata_offset: int | None
    """``/migration``'s ``kraft_metadata_offset``: the last KRaft metadata offset written to ZooKeeper."""
    metadata_epoch: int | None
    migration_zk_version: int | None
    zk_brokers: int
    """ZK-mode brokers still registered in ``/brokers/ids``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "kraft_controller_id": self.kraft_controller_id,
            "kraft_controller_epoch": self.kraft_controller_epoch,
            "metadata_offset": self.metadata_offset,
            "metadata_epoch": self.metadata_epoch,
            "migration_zk_version": self.migration_zk_version,
            "zk_brokers": self.zk_brokers,
        }


def migration_view(snapshot: ClusterSnapshot) -> MigrationView:
    """The migration phase and the KRaft controller's id, epoch and last written metadata offset/epoch."""
    controller, migration = snapshot.controller, snapshot.migration
    kraft = controller.is_kraft
    phase: MigrationPhase
    if migration is None and not kraft:
        phase = "none"
    elif migration is None or not migration.metadata_migrated:
        phase = "pre_migration"
    elif not kraft:
        phase = "zk_controller"
    else:
        phase = "hybrid" if snapshot.brokers else "dual_write"
    return MigrationView(
        phase=phase,
        kraft_controller_id=controller.broker_id if kraft else None,
        kraft_controller_epoch=controller.kraft_controller_epoch if kraft else None,
        metadata_offset=None if migration is None else migration.kraft_metadata_offset,
        metadata_epoch=None if migration is None else migration.kraft_metadata_epoch,
        migration_zk_version=None if migration is None else migration.zk_version,
        zk_brokers=len(snapshot.brokers),
    )


def describe_phase(view: MigrationView) -> str:
    """One line for text output."""
    if view.phase == "none":
        return "none (ZK-mode controller, no /migration)"
    offset = (
        f"last metadata offset {view.metadata_offset} epoch {view.metadata_epoch}"
        if view.metadata_offset is not None and view.metadata_offset >= 0
        else "metadata not migrated yet"
    )
    controller = (
        f"KRaft controller {view.kraft_controller_id} epoch {view.kraft_controller_epoch}"
        if view.kraft_controller_id is not None
        else "ZK-mode controller"
    )
    return f"{view.phase} ({controller}, {offset}, {view.zk_brokers} ZK-mode brokers registered)"


# --- readiness ---------------------------------------------------------------------------------------

CheckStatus = Literal["pass", "fail", "unknown"]


@dataclass(frozen=True, slots=True)
class ReadinessCheck:
    name: str
    status: CheckStatus
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ReadinessReport:
    ready: bool
    """No check failed (an unknown one is listed, not counted)."""
    migration: MigrationView
    checks: tuple[ReadinessCheck, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "migration": self.migration.to_json(),
            "checks": [c.to_json() for c in self.checks],
        }


def _check(name: str, ok: bool, good: str, bad: str) -> ReadinessCheck:
    return ReadinessCheck(name, "pass" if ok else "fail", good if ok else bad)


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


def _examples(items: list[str], limit: int = 5) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


@dataclass(frozen=True, slots=True)
class ReadinessInput:
    """What the readiness checks read: the snapshot, its health report and migration view, the brokers'
    ActiveControllerCount gauges summed (None: not scraped), the lowest ``metadata.version`` accepted and
    each broker's highest."""

    snapshot: ClusterSnapshot
    report: HealthReport
    view: MigrationView
    active_controller_gauges: float | None
    min_metadata_level: int
    levels: Mapping[int, int | None]
    """Broker id -> the highest ``metadata.version`` it supports (None: it advertises none)."""


def _metadata_levels(snapshot: ClusterSnapshot) -> dict[int, int | None]:
    levels: dict[int, int | None] = {}
    for b in snapshot.brokers.values():
        feature = b.features.get(METADATA_VERSION_FEATURE, {})
        level = feature.get("max_version") if isinstance(feature, Mapping) else None
        levels[b.id] = level if isinstance(level, int) else None
    return levels


ReadinessRule = Callable[[ReadinessInput], ReadinessCheck | None]
"""One readiness check: its record, or None where it does not apply (no broker to compare)."""


def _migration_not_started(given: ReadinessInput) -> ReadinessCheck:
    phase = given.view.phase
    return _check(
        "migration_not_started",
        phase == "none",
        "no /migration and a ZK-mode controller: no migration has started",
        f"a migration is already under way (phase {phase}): this report is for before one",
    )


def _zookeeper_state_readable(given: ReadinessInput) -> ReadinessCheck:
    snapshot = given.snapshot
    return _check(
        "zookeeper_state_readable",
        not snapshot.stale and not snapshot.errors,
        "the whole ZooKeeper tree was read",
        f"{len(snapshot.errors)} znodes could not be read"
        + (" and the view is stale" if snapshot.stale else "")
        + ": the checks below may miss something",
    )


def _cluster_id(given: ReadinessInput) -> ReadinessCheck:
    cluster_id = given.snapshot.cluster_id
    return _check(
        "cluster_id",
        cluster_id is not None,
        f"/cluster/id is {cluster_id}: format the KRaft controllers with this id",
        "no /cluster/id: the KRaft controllers must be formatted with the cluster's id",
    )


def _controller_healthy(given: ReadinessInput) -> ReadinessCheck:
    controller = given.snapshot.controller
    return _check(
        "controller_healthy",
        given.report.controller.active,
        f"{'KRaft controller' if controller.is_kraft else 'broker'} {controller.broker_id} is the active"
        f" controller (epoch {controller.epoch})",
        "no active controller (/controller is empty)"
        if controller.broker_id is None
        else f"the controller, broker {controller.broker_id}, is not registered",
    )


def _single_active_controller(given: ReadinessInput) -> ReadinessCheck:
    if given.active_controller_gauges is None:
        return ReadinessCheck(
            "single_active_controller", "unknown", "no broker metrics scraped (ActiveControllerCount)"
        )
    gauges = round(given.active_controller_gauges)
    return _check(
        "single_active_controller",
        gauges == 1,
        "exactly one broker reports ActiveControllerCount=1",
        f"{gauges} brokers report ActiveControllerCount=1 (expected exactly one)",
    )


def _brokers_registered(given: ReadinessInput) -> ReadinessCheck:
    brokers, down = given.snapshot.brokers, given.report.brokers_down
    return _check(
        "brokers_registered",
        bool(brokers) and not down,
        f"all {len(brokers)} brokers holding replicas are registered",
        "no broker is registered"
        if not brokers
        else f"brokers {_ids(down)} hold replicas but are not registered",
    )


def _registration_version(given: ReadinessInput) -> ReadinessCheck:
    brokers = given.snapshot.brokers
    old = sorted(b.id for b in brokers.values() if b.version < 5)
    return _check(
        "registration_version",
        bool(brokers) and not old,
        "every broker registers in version 5: inter.broker.protocol.version is at least 2.7",
        f"brokers {_ids(old)} register in version <5: their inter.broker.protocol.version is below 2.7"
        if old
        else "no broker registration to read",
    )


def _broker_software(given: ReadinessInput) -> ReadinessCheck:
    if not given.snapshot.brokers:
        return ReadinessCheck("broker_software", "unknown", "no broker registration to read")
    levels = given.levels
    unknown = sorted(b for b, level in levels.items() if level is None)
    too_old = sorted(
        b for b, level in levels.items() if level is not None and level < given.min_metadata_level
    )
    releases = sorted({release_of_level(level) for level in levels.values() if level is not None})
    need = release_of_level(given.min_metadata_level)
    known = [level for level in levels.values() if level is not None]
    return _check(
        "broker_software",
        not unknown and not too_old,
        # the pass message is built whatever the verdict: with no level known there is no highest one
        f"every broker runs Kafka {_examples(releases)} (metadata.version up to"
        f" {max(known, default=0)}), at least {need}",
        "; ".join(
            part
            for part in (
                f"brokers {_ids(unknown)} advertise no metadata.version feature (Kafka before 3.3,"
                " or a registration older than v5)"
                if unknown
                else "",
                f"brokers {_ids(too_old)} run Kafka "
                f"{_examples(sorted({release_of_level(levels[b] or 0) for b in too_old}))}, "
                f"below {need} (upgrade first)"
                if too_old
                else "",
            )
            if part
        ),
    )


def _same_broker_software(given: ReadinessInput) -> ReadinessCheck | None:
    if not given.snapshot.brokers:
        return None
    levels = given.levels
    distinct = {level for level in levels.values() if level is not None}
    return _check(
        "same_broker_software",
        len(distinct) <= 1,
        "all brokers run the same release",
        "brokers run different releases (metadata.version up to "
        + ", ".join(
            f"{level}: brokers {_ids(b for b, v in levels.items() if v == level)}"
            for level in sorted(distinct)
        )
        + "): finish the rolling upgrade first",
    )


def _no_pending_reassignments(given: ReadinessInput) -> ReadinessCheck:
    snapshot = given.snapshot
    reassigning = sorted(str(p.tp) for p in snapshot.partitions.values() if p.assignment.is_being_reassigned)
    pending = sorted(str(tp) for tp in snapshot.pending.reassignments)
    return _check(
        "no_pending_reassignments",
        not reassigning and not pending,
        "no partition reassignment is running or pending",
        "reassignments running or pending (/admin/reassign_partitions): "
        + _examples(sorted({*reassigning, *pending})),
    )


def _no_pending_topic_deletions(given: ReadinessInput) -> ReadinessCheck:
    deletions = list(given.snapshot.pending.deletions)
    return _check(
        "no_pending_topic_deletions",
        not deletions,
        "no topic deletion is pending",
        f"topics pending deletion (/admin/delete_topics): {_examples(deletions)}",
    )


def _no_pending_preferred_election(given: ReadinessInput) -> ReadinessCheck:
    election = [str(tp) for tp in given.snapshot.pending.preferred_election]
    return _check(
        "no_pending_preferred_election",
        not election,
        "no preferred leader election is pending",
        "a preferred leader election is pending (/admin/preferred_replica_election): " + _examples(election),
    )


def _no_offline_partitions(given: ReadinessInput) -> ReadinessCheck:
    offline = given.report.summary.offline
    return _check(
        "no_offline_partitions",
        offline == 0,
        "every partition has a leader",
        f"{offline} partitions are offline",
    )


def _no_under_min_isr_partitions(given: ReadinessInput) -> ReadinessCheck:
    under_min_isr = given.report.summary.under_min_isr
    return _check(
        "no_under_min_isr_partitions",
        under_min_isr == 0,
        "every partition has at least min.insync.replicas in sync",
        f"{under_min_isr} partitions are under min ISR",
    )


def _no_under_replicated_partitions(given: ReadinessInput) -> ReadinessCheck:
    under_replicated = given.report.summary.under_replicated
    return _check(
        "no_under_replicated_partitions",
        under_replicated == 0,
        "every replica is in sync (brokers will be restarted twice during the migration)",
        f"{under_replicated} partitions are under-replicated: a broker restart would take"
        " more of them under min ISR",
    )


READINESS_CHECKS: tuple[ReadinessRule, ...] = (
    _migration_not_started,
    _zookeeper_state_readable,
    _cluster_id,
    _controller_healthy,
    _single_active_controller,
    _brokers_registered,
    _registration_version,
    _broker_software,
    _same_broker_software,
    _no_pending_reassignments,
    _no_pending_topic_deletions,
    _no_pending_preferred_election,
    _no_offline_partitions,
    _no_under_min_isr_partitions,
    _no_under_replicated_partitions,
)
"""The checks in the order the report lists them."""


def migration_readiness(
    snapshot: ClusterSnapshot,
    report: HealthReport,
    *,
    active_controller_gauges: float | None = None,
    min_metadata_level: int = MIGRATION_GA_LEVEL,
) -> ReadinessReport:
    """Each precondition of a ZK→KRaft migration that ZooKeeper (and, when scraped, the brokers'
    ActiveControllerCount gauges) can show, with pass/fail and why: :data:`READINESS_CHECKS` in turn.

    What it cannot see is said in docs/runbooks/kraft-migration.md: ``inter.broker.protocol.version``
    itself (only its floor: registration v5 means at least 2.7), the controllers' configuration, features
    KRaft does not support (JBOD before 3.8, delegation tokens), the log directories.
    """
    view = migration_view(snapshot)
    given = ReadinessInput(
        snapshot, report, view, active_controller_gauges, min_metadata_level, _metadata_levels(snapshot)
    )
    checks = tuple(check for rule in READINESS_CHECKS if (check := rule(given)) is not None)
    return ReadinessReport(ready=not any(c.status == "fail" for c in checks), migration=view, checks=checks)


def write_readiness_text(readiness: ReadinessReport) -> str:
    """The report as text, one line per check."""
    lines = [
        f"ZK→KRaft migration readiness: {'READY' if readiness.ready else 'NOT READY'}",
        f"  migration: {describe_phase(readiness.migration)}",
    ]
    width = max(len(c.name) for c in readiness.checks)
    for check in readiness.checks:
        lines.append(f"  {check.status.upper():7} {check.name:{width}}  {check.reason}")
    return "\n".join(lines) + "\n"
