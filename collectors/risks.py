"""Standing risks: what makes the next broker restart (or the next disk to fill) an outage, in one place.
Pure (no I/O): :func:`standing_risks` reads a snapshot, its effective topic settings
(:mod:`collectors.kafka.effective`) and the brokers' log dirs (:mod:`collectors.disks`).

The kinds (:data:`RISK_KINDS`), one entry per topic (with the count of its partitions at risk), not per
partition:

- ``replication_factor_one``: partitions with a single replica: any stop of its broker takes them offline;
- ``min_insync_replicas_at_replication_factor``: partitions (of RF > 1) whose effective
  ``min.insync.replicas`` is at least their replication factor: one replica out of the ISR (any broker
  stop, a restart) and ``acks=all`` produces fail (above RF: they always fail);
- ``replication_factor_above_brokers``: partitions with more replicas than there are registered brokers
  (some replica can never be in sync);
- ``replicas_in_one_rack``: when brokers have racks (more than one), partitions whose every replica is on
  brokers of one rack (a rack outage takes them offline);
- ``unclean_leader_election_enabled``: an offline partition may come back by electing an out-of-sync
  replica, losing what it lacked. One entry per topic whose own config enables it, and one for the level
  below the topics (subject ``broker:<controller>``, ``cluster`` for the dynamic or static default) with
  the number of topics that inherit it;
- ``log_dir_full_soon``: a broker's log dir that will be full within ``disk_horizon_s`` (7 days) at its
  current growth (subject ``broker:<id>:<mountpoint>``).

Each entry says what fixes it (``fix``): a ``kafka-configs`` / ``kafka-reassign-partitions`` command or a
kafka-health route.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from collectors.disks import LogDirDisk
from collectors.kafka.effective import ConfigSource, TopicSettings
from collectors.kafka.model import ClusterSnapshot

REPLICATION_FACTOR_ONE = "replication_factor_one"
MIN_ISR_AT_RF = "min_insync_replicas_at_replication_factor"
RF_ABOVE_BROKERS = "replication_factor_above_brokers"
ONE_RACK = "replicas_in_one_rack"
UNCLEAN_ELECTION = "unclean_leader_election_enabled"
LOG_DIR_FULL_SOON = "log_dir_full_soon"
RISK_KINDS = (
    REPLICATION_FACTOR_ONE,
    MIN_ISR_AT_RF,
    RF_ABOVE_BROKERS,
    ONE_RACK,
    UNCLEAN_ELECTION,
    LOG_DIR_FULL_SOON,
)
"""Every kind, in the order entries are listed."""
DEFAULT_DISK_HORIZON_S = 7 * 86400.0
_BOOTSTRAP = "--bootstrap-server <broker:9092>"


@dataclass(frozen=True, slots=True)
class Risk:
    kind: str
    """One of :data:`RISK_KINDS`."""
    subject: str
    """``topic:<name>``, ``broker:<id>``, ``broker:<id>:<mountpoint>`` or ``cluster``."""
    detail: str
    fix: str
    """The command or route that removes the risk."""
    partitions: int = 0
    """Partitions at risk (0 for a risk that is not about partitions: a log dir; for the unclean
    election default, the partitions of the topics that inherit it)."""


def standing_risks(
    snapshot: ClusterSnapshot,
    settings: TopicSettings | None = None,
    disks: Mapping[int, Sequence[LogDirDisk]] | None = None,
    *,
    disk_horizon_s: float = DEFAULT_DISK_HORIZON_S,
) -> tuple[Risk, ...]:
    """The snapshot's standing risks, by kind (:data:`RISK_KINDS` order), then subject. ``settings``: the
    health report's (None: resolved here with no static defaults); ``disks``: broker id -> its log dirs
    (None or empty: no disk risk is known). :func:`layout_risks` then :func:`disk_risks`."""
    return layout_risks(snapshot, settings) + disk_risks(disks or {}, disk_horizon_s)


def layout_risks(snapshot: ClusterSnapshot, settings: TopicSettings | None = None) -> tuple[Risk, ...]:
    """The risks of the snapshot alone (every kind but ``log_dir_full_soon``): one pass over the
    partitions (0.3 s of CPU at 200k), so a caller keeps it per snapshot version."""
    settings = settings if settings is not None else TopicSettings(snapshot)
    registered = len(snapshot.brokers)
    racks = {b: r.rack for b, r in snapshot.brokers.items()}
    racked = len({r for r in racks.values() if r is not None}) > 1
    # topic -> (partitions, their replication factors, min ISR values seen, sources) per kind
    rf_one: dict[str, int] = {}
    min_isr: dict[str, list[tuple[int, int, ConfigSource]]] = {}
    above: dict[str, list[int]] = {}
    one_rack: dict[str, list[str]] = {}
    partitions_of: dict[str, int] = {}
    for tp, info in snapshot.partitions.items():
        topic = tp.topic
        partitions_of[topic] = partitions_of.get(topic, 0) + 1
        replicas = info.assignment.target_replicas
        rf = len(replicas)
        if rf == 1:
            rf_one[topic] = rf_one.get(topic, 0) + 1
        elif rf > 1:
            setting = settings.min_insync_replicas(topic, info.leader if info.state is not None else None)
            if setting.value >= rf:
                source = setting.source if setting.assumed_from is None else setting.assumed_from
                min_isr.setdefault(topic, []).append((rf, setting.value, source))
        if rf > registered:
            above.setdefault(topic, []).append(rf)
        if racked and rf > 1:
            rack_set = {racks.get(b) for b in replicas}
            if len(rack_set) == 1 and None not in rack_set:
                one_rack.setdefault(topic, []).append(str(next(iter(rack_set))))
    risks: list[Risk] = []
    for topic, count in sorted(rf_one.items()):
        risks.append(
            Risk(
                REPLICATION_FACTOR_ONE,
                f"topic:{topic}",
                f"{count} of {partitions_of[topic]} partitions of {topic} have a single replica: stopping "
                "its broker takes them offline, and losing its disk loses their data",
                "raise the replication factor with a reassignment that adds replicas: POST "
                "/api/v1/actions/reassignments with allow_replication_factor_change: true (or "
                "kafka-reassign-partitions --execute)",
                count,
            )
        )
    for topic, rows in sorted(min_isr.items()):
        rf = min(r for r, _, _ in rows)
        value = max(v for _, v, _ in rows)
        sources = sorted({s.value for _, _, s in rows})
        always = any(v > r for r, v, _ in rows)
        consequence = (
            "acks=all produces always fail (min.insync.replicas above the replication factor)"
            if always
            else "one replica out of the ISR (any broker stop or restart) and acks=all produces fail"
        )
        risks.append(
            Risk(
                MIN_ISR_AT_RF,
                f"topic:{topic}",
                f"{len(rows)} partitions of {topic} have min.insync.replicas {value} (from "
                f"{', '.join(sources)}) with replication factor {rf}: {consequence}",
                f"kafka-configs {_BOOTSTRAP} --alter --entity-type topics --entity-name {topic} "
                f"--add-config min.insync.replicas={max(1, rf - 1)}",
                len(rows),
            )
        )
    for topic, rfs in sorted(above.items()):
        risks.append(
            Risk(
                RF_ABOVE_BROKERS,
                f"topic:{topic}",
                f"{len(rfs)} partitions of {topic} have {max(rfs)} replicas but only {registered} brokers "
                "are registered: some replica can never be in sync",
                "start the missing brokers, or lower the replication factor with a reassignment: POST "
                "/api/v1/actions/reassignments with allow_replication_factor_change: true",
                len(rfs),
            )
        )
    for topic, rack_names in sorted(one_rack.items()):
        names = sorted(set(rack_names))
        risks.append(
            Risk(
                ONE_RACK,
                f"topic:{topic}",
                f"{len(rack_names)} partitions of {topic} have every replica in one rack "
                f"({', '.join(names)}): that rack's outage takes them offline",
                "reassign them across racks: POST /api/v1/actions/reassignments (kafka-reassign-partitions "
                "--generate places replicas rack-aware)",
                len(rack_names),
            )
        )
    risks.extend(_unclean(snapshot, settings, partitions_of))
    return tuple(risks)


def disk_risks(
    disks: Mapping[int, Sequence[LogDirDisk]], disk_horizon_s: float = DEFAULT_DISK_HORIZON_S
) -> tuple[Risk, ...]:
    """``log_dir_full_soon``: the log dirs full within ``disk_horizon_s`` at their growth."""
    risks: list[Risk] = []
    for broker, dirs in sorted((disks or {}).items()):
        for disk in dirs:
            if disk.full_in_s is not None and disk.full_in_s <= disk_horizon_s:
                growth = disk.growth_bytes_per_s or 0.0
                risks.append(
                    Risk(
                        LOG_DIR_FULL_SOON,
                        f"broker:{broker}:{disk.mountpoint}",
                        f"broker {broker}'s {disk.mountpoint} is {disk.used_ratio:.0%} used, growing "
                        f"{growth / 1e6:.2f} MB/s: full in {_duration(disk.full_in_s)}",
                        f"GET /api/v1/brokers/{broker}/disks for its fastest-growing topics; lower their "
                        "retention.ms (kafka-configs --alter --entity-type topics --add-config "
                        f"retention.ms=...), add capacity, or move replicas off: POST "
                        f"/api/v1/plans/drain-broker/{broker}",
                    )
                )
    return tuple(risks)


def _unclean(
    snapshot: ClusterSnapshot, settings: TopicSettings, partitions_of: Mapping[str, int]
) -> list[Risk]:
    """One entry per topic whose own config enables it; one for the level below that the others inherit."""
    risks: list[Risk] = []
    inherited: list[str] = []
    below: ConfigSource | None = None
    for topic in sorted(partitions_of):
        setting = settings.unclean_leader_election_enable(topic)
        if not setting.value:
            continue
        source = setting.source if setting.assumed_from is None else setting.assumed_from
        if source is ConfigSource.TOPIC:
            risks.append(
                Risk(
                    UNCLEAN_ELECTION,
                    f"topic:{topic}",
                    f"{topic} sets unclean.leader.election.enable=true (source: topic): an offline "
                    "partition may come back on an out-of-sync replica, losing messages",
                    f"kafka-configs {_BOOTSTRAP} --alter --entity-type topics --entity-name {topic} "
                    "--delete-config unclean.leader.election.enable",
                    partitions_of[topic],
                )
            )
        else:
            inherited.append(topic)
            below = source
    if inherited and below is not None:
        controller = snapshot.controller.broker_id
        if below is ConfigSource.BROKER:
            subject = f"broker:{controller}"
            fix = (
                f"kafka-configs {_BOOTSTRAP} --alter --entity-type brokers --entity-name {controller} "
                "--delete-config unclean.leader.election.enable"
            )
        elif below is ConfigSource.CLUSTER_DEFAULT:
            subject = "cluster"
            fix = (
                f"kafka-configs {_BOOTSTRAP} --alter --entity-type brokers --entity-default "
                "--delete-config unclean.leader.election.enable"
            )
        else:
            subject = "cluster"
            fix = (
                "set unclean.leader.election.enable=false in the brokers' server.properties and restart "
                "them one at a time (GET /api/v1/brokers/safe-to-stop before each)"
            )
        where = {
            ConfigSource.BROKER: f"the active controller's (broker {controller}) dynamic config",
            ConfigSource.CLUSTER_DEFAULT: "the dynamic cluster-wide default",
        }.get(below, "the brokers' static config (server.properties)")
        risks.append(
            Risk(
                UNCLEAN_ELECTION,
                subject,
                f"unclean.leader.election.enable=true in {where} (source: {below.value}), inherited by "
                f"{len(inherited)} topics: an offline partition may come back on an out-of-sync replica, "
                "losing messages",
                fix,
                sum(partitions_of[t] for t in inherited),
            )
        )
    return risks


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def risk_counts(risks: Sequence[Risk]) -> dict[str, int]:
    """Kind -> entries, every kind (0 included): ``/metrics``' ``kafka_health_risks{kind}``."""
    counts = dict.fromkeys(RISK_KINDS, 0)
    for risk in risks:
        counts[risk.kind] += 1
    return counts
