"""``kafka-health describe``: read a cluster once and print its state and health, text or JSON.

Like ``kafka-topics --describe --under-replicated-partitions``, but all of it: brokers, controller, every
partition with its health flags, the summary an on-call engineer starts from, suspect brokers, pending
admin operations, the znodes that could not be read, and the replication throttles. ``describe`` reads no
action log: a throttle is in use here only while a reassignment running in ZooKeeper needs it (the
service's ``GET /api/v1/throttles`` also knows its own unfinished actions).

Exit codes: 0 read (even with problems), 1 the cluster could not be read, 2 bad input, 3 unhealthy with
``--fail-on-unhealthy``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO, get_args

from app.cli.common import (
    ExitCode,
    add_kafka_arguments,
    add_zk_config_argument,
    first_line,
    positive_duration,
    settings_or_error,
    settings_tree_with_flags,
)
from app.service.schemas.cluster import BrokerAddress
from app.service.schemas.throttles import ThrottlesOut
from collectors.consumers.config import KafkaSettings
from collectors.disks import DiskModel, LogDirDisk
from collectors.health import (
    HealthReport,
    PartitionHealth,
    assess,
    no_kafka_cluster,
    partition_json,
    partition_settings,
)
from collectors.kafka.effective import (
    EffectiveSetting,
    parse_boolean,
    parse_min_insync_replicas,
)
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, TopicPartition
from collectors.kafka.throttles import (
    BrokerThrottle,
    ThrottleEntry,
    ThrottleInventory,
    ThrottleState,
    throttle_inventory,
)
from collectors.kafka.zkclient import security_from_file
from collectors.kafka.zkdata import parse_connect_string
from collectors.metrics import (
    DialectSetting,
    MetricsCollector,
    MetricsScrape,
    missing_listener,
    normalise_listener,
    validate_url_template,
)
from collectors.migration import describe_phase, migration_readiness, migration_view, write_readiness_text
from collectors.risks import Risk, risk_counts, standing_risks
from collectors.zookeeper.collector import scan

HELP = "read a cluster once and print its state and health (text or JSON)"
DESCRIPTION = (
    "Exit codes: 0 read (even with problems), 1 cannot read the cluster, 2 bad input, "
    "3 unhealthy with --fail-on-unhealthy."
)

FILTERS = ("under_replicated", "under_min_isr", "unavailable", "non_preferred")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zookeeper", required=True, metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper"
    )
    parser.add_argument(
        "--metrics-url-template",
        metavar="T",
        help="brokers' metrics, e.g. http://{host}:7071/metrics: adds the URP gauge cross-check",
    )
    add_zk_config_argument(parser)
    parser.add_argument(
        "--metrics-dialect",
        choices=get_args(DialectSetting),
        default="auto",
        help="the jmx_exporter rule file the brokers' metric names come from (default: auto, per broker)",
    )
    parser.add_argument(
        "--metrics-listener",
        metavar="NAME",
        help="the listener whose host and port are shown and fill {host}/{port} (e.g. INTERNAL; "
        "default: PLAINTEXT if a broker has it, else its first endpoint)",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--under-replicated", action="store_true", help="only under-replicated partitions")
    parser.add_argument("--under-min-isr", action="store_true", help="only partitions under min ISR")
    parser.add_argument("--unavailable", action="store_true", help="only offline partitions")
    parser.add_argument("--non-preferred", action="store_true", help="only partitions not led by replicas[0]")
    parser.add_argument("--fail-on-unhealthy", action="store_true", help="exit 3 when anything is unhealthy")
    parser.add_argument(
        "--migration-readiness",
        action="store_true",
        help="only the ZK→KRaft migration readiness report (with --fail-on-unhealthy: exit 3 when not ready)",
    )
    parser.add_argument(
        "--consumer-groups",
        action="store_true",
        help="only the consumer groups: one round of their lag over Kafka's protocol "
        "(with --fail-on-unhealthy: exit 3 when a group's verdict is not ok)",
    )
    add_kafka_arguments(parser)
    parser.add_argument(
        "--timeout",
        type=positive_duration,
        default=30.0,
        help="how long to read the cluster: seconds or 500ms, 2s, 1m (default 30)",
    )
    parser.add_argument(
        "--default-min-isr",
        "--default-min-insync-replicas",
        dest="default_min_insync_replicas",
        type=min_insync_replicas,
        metavar="N",
        help="the brokers' static min.insync.replicas (server.properties, which ZooKeeper never holds), for "
        "topics that set none when no dynamic broker config does (default: Kafka's 1)",
    )
    parser.add_argument(
        "--default-unclean-leader-election",
        dest="default_unclean_leader_election_enable",
        type=boolean,
        metavar="true|false",
        help="the brokers' static unclean.leader.election.enable (server.properties), likewise "
        "(default: Kafka's false)",
    )


def min_insync_replicas(text: str) -> int:
    """A ``min.insync.replicas`` as a broker accepts it: an integer >= 1."""
    value = parse_min_insync_replicas(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a min.insync.replicas (an integer >= 1)")
    return value


def boolean(text: str) -> bool:
    """``true`` or ``false``, as Kafka reads a boolean config."""
    value = parse_boolean(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return value


def selected(health: PartitionHealth, args: argparse.Namespace) -> bool:
    """Filters combine with OR; no filter selects every partition."""
    wanted = {name for name in FILTERS if getattr(args, name, False)}
    if not wanted:
        return True
    return (
        ("under_replicated" in wanted and health.under_replicated)
        or ("under_min_isr" in wanted and health.under_min_isr)
        or ("unavailable" in wanted and health.offline)
        or ("non_preferred" in wanted and _non_preferred(health))
    )


def _non_preferred(health: PartitionHealth) -> bool:
    """Led by another replica than ``replicas[0]``: known only for a partition with a leader and a state."""
    return not health.preferred_leader and not health.offline and not health.state_unknown


def unhealthy(report: HealthReport) -> bool:
    s = report.summary
    return bool(
        s.under_replicated
        or s.under_min_isr
        or s.offline
        or s.unknown
        or s.brokers_down
        or not report.controller.active
    )


# --- JSON ----------------------------------------------------------------------------------------------


def effective_settings_json(snapshot: ClusterSnapshot, report: HealthReport) -> dict[str, Any]:
    """The static defaults the values were resolved with, and the config znodes that could not be read (each
    makes the source of the values below it ``unknown``)."""
    settings = report.settings
    static = None if settings is None else settings.static
    unknown_min_isr, unknown_unclean = (
        (0, 0) if settings is None else settings.unknown_counts(snapshot.partitions.values())
    )
    return {
        "static_defaults": {
            "min_insync_replicas": None if static is None else static.min_insync_replicas,
            "unclean_leader_election_enable": None
            if static is None
            else static.unclean_leader_election_enable,
        },
        "unreadable": []
        if settings is None
        else [{"path": e.path, "reason": e.reason} for e in settings.unreadable],
        "partitions_with_unknown_min_isr": unknown_min_isr,
        "partitions_with_unknown_unclean_leader_election": unknown_unclean,
    }


def describe_json(
    snapshot: ClusterSnapshot,
    report: HealthReport,
    partitions: Iterable[TopicPartition],
    listener: str | None = None,
    disks: Mapping[int, Sequence[LogDirDisk]] | None = None,
) -> dict[str, Any]:
    """Everything ``describe`` read; ``disks``: broker id -> its log dirs from the one scrape (None: no
    metrics were scraped; ``"disks": null``)."""
    summary = report.summary
    cross = report.urp_cross_check
    return {
        "cluster_id": snapshot.cluster_id,
        "snapshot": {
            "version": snapshot.version,
            "taken_at": snapshot.taken_at,
            "last_good_at": snapshot.last_good_at,
            "stale": snapshot.stale,
        },
        "brokers": [
            {
                "id": b.id,
                **BrokerAddress.of(b, listener).model_dump(mode="json"),
                "rack": b.rack,
                "registration_version": b.version,
                "broker_epoch": b.broker_epoch,
                "registered_at_ms": b.timestamp_ms,
            }
            for b in sorted(snapshot.brokers.values(), key=lambda b: b.id)
        ],
        "controller": {
            "broker_id": snapshot.controller.broker_id,
            "epoch": snapshot.controller.epoch,
            "kraft_controller_epoch": snapshot.controller.kraft_controller_epoch,
        },
        "migration": migration_view(snapshot).to_json(),
        "topics": [
            {
                "name": t.name,
                "topic_id": t.topic_id,
                "config": dict(t.config),
                "marked_for_deletion": t.marked_for_deletion,
            }
            for t in sorted(snapshot.topics.values(), key=lambda t: t.name)
        ],
        "partitions": [_partition_out(snapshot, report, tp) for tp in partitions],
        "summary": {
            "brokers": summary.brokers,
            "topics": summary.topics,
            "partitions": summary.partitions,
            "under_replicated": summary.under_replicated,
            "under_min_isr": summary.under_min_isr,
            "at_min_isr": summary.at_min_isr,
            "offline": summary.offline,
            "unknown": summary.unknown,
            "preferred_replica_imbalance": summary.preferred_replica_imbalance,
            "brokers_down": list(summary.brokers_down),
        },
        "controller_health": {"active": report.controller.active, "kraft": report.controller.kraft},
        "imbalance": [
            {
                "broker_id": i.broker_id,
                "preferred_partitions": i.preferred_partitions,
                "led_by_others": i.led_by_others,
                "ratio": i.ratio,
                "above_threshold": i.above_threshold,
            }
            for i in sorted(report.imbalance.values(), key=lambda i: i.broker_id)
        ],
        "suspect_brokers": [
            {"broker_id": s.broker_id, "missing_from": s.missing_from, "share": s.share}
            for s in report.suspects
        ],
        "urp_cross_check": None
        if cross is None
        else {
            "zookeeper": cross.zookeeper,
            "gauges": cross.gauges,
            "reporting": list(cross.reporting),
            "missing": list(cross.missing),
            "agrees": cross.agrees,
            "offline_not_counted": cross.offline_not_counted,
        },
        "pending": {
            "preferred_election": [
                {"topic": tp.topic, "partition": tp.partition} for tp in snapshot.pending.preferred_election
            ],
            "reassignments": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
                for tp, replicas in sorted(snapshot.pending.reassignments.items())
            ],
            "deletions": list(snapshot.pending.deletions),
        },
        "errors": [{"path": e.path, "reason": e.reason} for e in snapshot.errors],
        "effective_settings": effective_settings_json(snapshot, report),
        "throttles": ThrottlesOut.of(throttle_inventory(snapshot), snapshot.version).model_dump(mode="json"),
        "disks": None if disks is None else disks_json(snapshot, disks),
        "risks": risks_json(standing_risks(snapshot, report.settings, disks)),
    }


def disks_json(snapshot: ClusterSnapshot, disks: Mapping[int, Sequence[LogDirDisk]]) -> list[dict[str, Any]]:
    """Per registered broker (and any other with log dirs), its log dirs as ``GET
    /api/v1/brokers/{id}/disks`` lists them: from one scrape, so growth and time to full are null."""
    return [
        {
            "broker": broker,
            "disks": [
                {
                    "mountpoint": d.mountpoint,
                    "size_bytes": d.size_bytes,
                    "avail_bytes": d.avail_bytes,
                    "used_ratio": d.used_ratio,
                    "growth_bytes_per_s": d.growth_bytes_per_s,
                    "full_in_s": d.full_in_s,
                    "top_topics": [{"topic": t.topic, "bytes_per_s": t.bytes_per_s} for t in d.top_topics],
                }
                for d in disks.get(broker, ())
            ],
        }
        for broker in sorted(set(snapshot.brokers) | set(disks))
    ]


def risks_json(risks: Sequence[Risk]) -> dict[str, Any]:
    """The standing risks as ``GET /api/v1/risks`` lists them, and their counts per kind."""
    return {
        "risks": [
            {
                "kind": r.kind,
                "subject": r.subject,
                "detail": r.detail,
                "fix": r.fix,
                "partitions": r.partitions,
            }
            for r in risks
        ],
        "counts": risk_counts(risks),
    }


def _partition_out(snapshot: ClusterSnapshot, report: HealthReport, tp: TopicPartition) -> dict[str, Any]:
    info = snapshot.partitions[tp]
    return partition_json(info, report.partitions[tp], partition_settings(report, snapshot, info))


# --- text ----------------------------------------------------------------------------------------------


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def describe_text(
    snapshot: ClusterSnapshot,
    report: HealthReport,
    partitions: Iterable[TopicPartition],
    out: TextIO,
    disks: Mapping[int, Sequence[LogDirDisk]] | None = None,
) -> None:
    """``kafka-topics --describe`` lines per topic and partition, then the health summary, the throttles,
    the brokers' log dirs (when metrics were scraped: ``disks``) and the standing risks."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp)
    for topic, tps in sorted(by_topic.items()):
        info = snapshot.topics.get(topic)
        all_tps = [tp for tp in snapshot.partitions if tp.topic == topic]
        rf = len(snapshot.partitions[all_tps[0]].assignment.target_replicas) if all_tps else 0
        configs = ",".join(f"{k}={v}" for k, v in sorted((info.config if info else {}).items()))
        marked = "\tMarkedForDeletion: true" if info is not None and info.marked_for_deletion else ""
        topic_id = info.topic_id if info is not None and info.topic_id else "-"
        out.write(
            f"Topic: {topic}\tTopicId: {topic_id}\tPartitionCount: {len(all_tps)}\tReplicationFactor: {rf}"
            f"\tConfigs: {configs}{marked}\n"
        )
        for tp in sorted(tps):
            p = snapshot.partitions[tp]
            leader = "none" if p.leader == NO_LEADER or p.state is None else str(p.leader)
            if p.state_unknown:
                leader = "unknown"
            line = (
                f"\tTopic: {topic}\tPartition: {tp.partition}\tLeader: {leader}\tReplicas: {_ids(p.replicas)}"
            )
            line += f"\tIsr: {_ids(p.isr)}"
            if p.assignment.adding_replicas:
                line += f"\tAdding Replicas: {_ids(p.assignment.adding_replicas)}"
            if p.assignment.removing_replicas:
                line += f"\tRemoving Replicas: {_ids(p.assignment.removing_replicas)}"
            settings = partition_settings(report, snapshot, p)
            line += f"\tMinIsr: {_setting_text(settings.min_insync_replicas)}"
            line += f"\tUncleanLeaderElection: {_setting_text(settings.unclean_leader_election_enable)}"
            flags = _flags(report.partitions[tp])
            out.write(line + (f"\t[{', '.join(flags)}]" if flags else "") + "\n")
    _write_summary(snapshot, report, out)
    _write_throttles(throttle_inventory(snapshot), out)
    if disks is not None:
        _write_disks(snapshot, disks, out)
    _write_risks(standing_risks(snapshot, report.settings, disks), out)


def _write_disks(snapshot: ClusterSnapshot, disks: Mapping[int, Sequence[LogDirDisk]], out: TextIO) -> None:
    """One line per log dir (one scrape: no growth, so no time to full)."""
    out.write("\nLog dirs (one scrape: growth and time to full need the service's history)\n")
    for broker in sorted(set(snapshot.brokers) | set(disks)):
        dirs = disks.get(broker, ())
        if not dirs:
            out.write(
                f"  broker {broker}: no log dir known (its scrape failed, or it serves no "
                "node_filesystem_* for one)\n"
            )
        for d in dirs:
            out.write(
                f"  broker {broker} {d.mountpoint}: {d.used_ratio:.1%} used, "
                f"{_gib(d.avail_bytes)} of {_gib(d.size_bytes)} available\n"
            )


def _gib(value: float) -> str:
    return f"{value / 1024**3:.1f} GiB"


def _write_risks(risks: Sequence[Risk], out: TextIO) -> None:
    if not risks:
        out.write("\nRisks: none\n")
        return
    out.write(f"\nRisks: {len(risks)}\n")
    for risk in risks:
        out.write(f"  {risk.kind} {risk.subject}: {risk.detail}\n    fix: {risk.fix}\n")


def _setting_text(setting: EffectiveSetting[Any]) -> str:
    value = str(setting.value).lower()
    if setting.assumed_from is not None:
        return f"{value} (unknown: assumed from {setting.assumed_from.value})"
    return f"{value} ({setting.source.value})"


def _flags(health: PartitionHealth) -> list[str]:
    if health.state_unknown:  # nothing else is known
        return ["STATE-UNKNOWN"]
    flags = []
    if health.offline:
        flags.append("OFFLINE")
    if health.under_min_isr:
        flags.append("UNDER-MIN-ISR")
    elif health.at_min_isr:
        flags.append("AT-MIN-ISR")
    if health.under_replicated:
        flags.append("UNDER-REPLICATED")
    if _non_preferred(health):
        flags.append("NON-PREFERRED-LEADER")
    if health.recovering:
        flags.append("RECOVERING")
    return flags


def _write_summary(snapshot: ClusterSnapshot, report: HealthReport, out: TextIO) -> None:
    s = report.summary
    controller = snapshot.controller
    down = f" (down: {_ids(s.brokers_down)})" if s.brokers_down else ""
    out.write("\nHealth\n")
    out.write(f"  brokers {s.brokers}{down}, topics {s.topics}, partitions {s.partitions}\n")
    out.write(
        f"  under-replicated {s.under_replicated}, under-min-ISR {s.under_min_isr},"
        f" at-min-ISR {s.at_min_isr}, offline {s.offline},"
        f" preferred-replica imbalance {s.preferred_replica_imbalance}\n"
    )
    if s.unknown:
        out.write(
            f"  state unknown {s.unknown}: their state znodes cannot be read (listed below);"
            " counted in none of the above\n"
        )
    if controller.broker_id is None:
        out.write("  controller: NONE (no broker holds /controller)\n")
    else:
        active = "" if report.controller.active else " (NOT a registered broker)"
        who = "KRaft controller" if controller.is_kraft else "broker"
        out.write(f"  controller: {who} {controller.broker_id}, epoch {controller.epoch}{active}\n")
    view = migration_view(snapshot)
    if view.phase != "none":
        out.write(f"  ZK→KRaft migration: {describe_phase(view)}\n")
    above = [i for i in report.imbalance.values() if i.above_threshold]
    for i in sorted(above, key=lambda i: i.broker_id):
        out.write(
            f"  leader imbalance: broker {i.broker_id} leads {i.preferred_partitions - i.led_by_others}"
            f" of its {i.preferred_partitions} preferred partitions ({i.ratio:.0%} led by others)\n"
        )
    for suspect in report.suspects:
        out.write(
            f"  suspect broker {suspect.broker_id}: missing from the ISR of {suspect.missing_from} "
            f"under-replicated partitions ({suspect.share:.0%})\n"
        )
    cross = report.urp_cross_check
    if cross is not None:
        verdict = "agree" if cross.agrees else "DISAGREE"
        missing = f", no gauge from brokers {_ids(cross.missing)}" if cross.missing else ""
        out.write(
            f"  URP gauges {verdict}: brokers report {cross.gauges}, ZooKeeper says {cross.zookeeper}"
            f" (+{cross.offline_not_counted} offline, counted by no broker){missing}\n"
        )
    pending = snapshot.pending
    if pending.preferred_election or pending.reassignments or pending.deletions:
        out.write(
            f"  pending: preferred election of {len(pending.preferred_election)} partitions, "
            f"{len(pending.reassignments)} reassignments, deletions: {', '.join(pending.deletions) or '-'}\n"
        )
    for error in snapshot.errors:
        out.write(f"  unreadable znode {error.path}: {error.reason}\n")
    _write_effective_settings(snapshot, report, out)
    if snapshot.stale:
        out.write("  WARNING: the snapshot is stale (ZooKeeper session lost)\n")


def _write_effective_settings(snapshot: ClusterSnapshot, report: HealthReport, out: TextIO) -> None:
    """Only when a config znode could not be read: which values are unknown, and what was assumed."""
    summary = effective_settings_json(snapshot, report)
    if not summary["unreadable"]:
        return
    paths = ", ".join(e["path"] for e in summary["unreadable"])
    out.write(
        f"  settings unknown: {paths} unreadable, so min.insync.replicas of "
        f"{summary['partitions_with_unknown_min_isr']} partitions and unclean.leader.election.enable of "
        f"{summary['partitions_with_unknown_unclean_leader_election']} are assumed from the next level "
        "(give the brokers' static values with --default-min-isr / --default-unclean-leader-election, or "
        "read access to these znodes)\n"
    )


def _write_throttles(inventory: ThrottleInventory, out: TextIO) -> None:
    """One line when there are none; else one line per broker entity and topic, its problems under it."""
    entries = inventory.entries
    if not entries:
        out.write("\nReplication throttles: none\n")
        return
    leftover = inventory.count(ThrottleState.LEFTOVER)
    in_use = inventory.count(ThrottleState.IN_USE)
    out.write(f"\nReplication throttles: {leftover} leftover, {in_use} in use\n")
    for entry in entries:
        out.write(f"  {_throttle_line(entry)}\n")
        for problem in entry.problems:
            out.write(f"    {problem.code}: {problem.message}\n")


def _throttle_line(entry: ThrottleEntry) -> str:
    if isinstance(entry, BrokerThrottle):
        halves = [f"{k.split('.')[0]} {v} B/s" for k, v in sorted(entry.config.items(), reverse=True)]
    else:
        halves = []
        for direction in ("leader", "follower"):
            replicas = entry.replicas(direction)
            if replicas is not None:
                halves.append(f"{direction} {replicas.value.strip() or '(empty)'}")
    limits = f"limits {' and '.join(entry.limits)}" if entry.limits else "inert"
    state = "leftover"
    if entry.state is ThrottleState.IN_USE:
        state = "in use (a reassignment is running)"
    return f"{entry.entity_type.value} {entry.entity}: {', '.join(halves)}; {limits}; {state}"


# --- the command -----------------------------------------------------------------------------------------


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    listener = getattr(args, "metrics_listener", None)
    try:
        parse_connect_string(args.zookeeper)
        if args.metrics_url_template:
            validate_url_template(args.metrics_url_template)
        if listener is not None:
            listener = normalise_listener(listener)
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.BAD_INPUT
    try:
        security = security_from_file(args.zk_config) if args.zk_config is not None else None
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.BAD_INPUT
    kafka: KafkaSettings | None = None
    if getattr(args, "consumer_groups", False):  # bad client properties are bad input, before any read
        from app.cli.describe_consumers import kafka_settings

        kafka = settings_or_error(lambda: kafka_settings(args), err)
        if kafka is None:
            return ExitCode.BAD_INPUT
    gauges: Mapping[int, float] | None = None
    active_controllers: float | None = None
    disks: dict[int, tuple[LogDirDisk, ...]] | None = None
    try:
        snapshot = scan(args.zookeeper, timeout=args.timeout, security=security)
    except Exception as exc:
        err.write(f"error: cannot read the cluster at {args.zookeeper}: {exc}\n")
        return ExitCode.FAILED
    missing = no_kafka_cluster(snapshot)
    if missing is not None:
        err.write(f"error: {args.zookeeper}: {missing}\n")
        return ExitCode.FAILED
    if kafka is not None:
        return _consumer_groups(args, kafka, snapshot, out, err)
    absent = missing_listener(snapshot.brokers, listener)
    if absent is not None:  # a broker that lacks it only gets a listener_note
        err.write(f"error: --metrics-listener {listener}: {absent}\n")
        return ExitCode.BAD_INPUT
    if args.metrics_url_template:
        mountpoints = settings_or_error(lambda: log_dir_mountpoints(args), err)
        if mountpoints is None:
            return ExitCode.BAD_INPUT
        try:
            scraped = scrape_brokers(
                snapshot, args.metrics_url_template, args.timeout, args.metrics_dialect, listener
            )
        except ValueError as exc:
            err.write(f"error: {exc}\n")
            return ExitCode.BAD_INPUT
        gauges, active_controllers = gauges_of(scraped)
        disks = disks_of(scraped, mountpoints)
    report = assess(
        snapshot,
        urp_gauges=gauges,
        default_min_insync_replicas=args.default_min_insync_replicas,
        default_unclean_leader_election_enable=args.default_unclean_leader_election_enable,
    )
    if args.migration_readiness:
        readiness = migration_readiness(snapshot, report, active_controller_gauges=active_controllers)
        if args.format == "json":
            json.dump(readiness.to_json(), out, indent=2)
            out.write("\n")
        else:
            out.write(write_readiness_text(readiness))
        return ExitCode.UNHEALTHY if args.fail_on_unhealthy and not readiness.ready else ExitCode.OK
    partitions = [tp for tp in sorted(snapshot.partitions) if selected(report.partitions[tp], args)]
    if args.format == "json":
        json.dump(describe_json(snapshot, report, partitions, listener, disks), out, indent=2)
        out.write("\n")
    else:
        describe_text(snapshot, report, partitions, out, disks)
    return ExitCode.UNHEALTHY if args.fail_on_unhealthy and unhealthy(report) else ExitCode.OK


def _consumer_groups(
    args: argparse.Namespace, settings: KafkaSettings, snapshot: ClusterSnapshot, out: TextIO, err: TextIO
) -> int:
    from app.cli.describe_consumers import read_round, round_json, write_round_text

    try:
        round_ = read_round(settings, snapshot.brokers)
    except ValueError as exc:
        err.write(f"error: {first_line(exc)}\n")
        return ExitCode.BAD_INPUT
    except Exception as exc:
        err.write(
            f"error: cannot read the consumer groups over Kafka's protocol: {type(exc).__name__}: "
            f"{first_line(exc)}\n"
        )
        return ExitCode.FAILED
    if args.format == "json":
        json.dump(round_json(round_), out, indent=2)
        out.write("\n")
    else:
        write_round_text(round_, out)
    bad = any(r.verdict.status != "ok" for r in round_.groups.values()) or bool(round_.errors)
    return ExitCode.UNHEALTHY if args.fail_on_unhealthy and bad else ExitCode.OK


def scrape_brokers(
    snapshot: ClusterSnapshot,
    template: str,
    timeout: float,
    dialect: DialectSetting = "auto",
    listener: str | None = None,
) -> MetricsScrape:
    """One scrape of every registered broker."""
    collector = MetricsCollector(
        url_template=template, listener=listener, timeout_s=min(timeout, 10.0), dialect=dialect
    )
    try:
        return collector.scrape(snapshot.brokers)
    finally:
        collector.close()


def gauges_of(scraped: MetricsScrape) -> tuple[dict[int, float], float | None]:
    """The UnderReplicatedPartitions gauges, and the sum of the ActiveControllerCount gauges (None when no
    broker answered with one)."""
    urp = {b: s.values["urp"] for b, s in scraped.scrapes.items() if s.error is None and "urp" in s.values}
    return urp, scraped.total("active_controller")


def log_dir_mountpoints(args: argparse.Namespace) -> tuple[str, ...]:
    """The log dirs' mount points as the service reads them: ``metrics.log_dir_mountpoints`` of the settings
    tree (``KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS``, the config file) with the metrics flags merged in;
    empty: the mount points containing ``kafka`` or ``data``. Raises ValueError / ValidationError."""
    from app.settings import Settings  # the whole tree: only with metrics to scrape

    flags = argparse.Namespace(
        metrics_url_template=args.metrics_url_template,
        metrics_listener=getattr(args, "metrics_listener", None),
    )
    metrics = Settings.model_validate(settings_tree_with_flags(flags)).metrics
    return () if metrics is None else metrics.log_dir_mountpoints


def disks_of(scraped: MetricsScrape, mountpoints: Sequence[str] = ()) -> dict[int, tuple[LogDirDisk, ...]]:
    """Each broker's log dirs from the one scrape (``mountpoints``, in log-dir order, else the mount points
    containing ``kafka`` or ``data``): size, available and used; growth needs several scrapes, so it and
    the time to full are None."""
    model = DiskModel(mountpoints=mountpoints)
    model.observe_scrape(scraped)
    return model.all_disks()
