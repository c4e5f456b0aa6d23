"""Rules 14-18: a broker's resources and ISR churn, the causes that come before the outage (per broker or log
dir, the incident lane's: ``RuleContext.resources``, from the live view's scrape, disk model and snapshots).

Their summaries carry the figures an operator needs, banded so that a summary changes when the incident
does and not at every scrape (the lifecycle sends ``updated`` on every change of an open alert's summary):
percentages in 5 % steps (whole percents below 10 % and from 95 % full), a growth rate to one significant
digit, a time to full as the first of 1 h, 6 h, a day and a week it is within. The exact figures are in
the evidence.

Each finding's evidence also has ``cause``: the phrase a rule-1/2/3/6 page quotes when its partitions lag on
this broker (:mod:`analytics.rules.causes`), e.g. ``/var/lib/kafka/data-1 is 97 % full``.
"""

from __future__ import annotations

import math

from analytics.model import ActionRef, BrokerResources, Finding, LogDirUsage, PartitionName, Severity
from analytics.rules.context import EXAMPLES_IN_SUMMARY, RuleContext, _partitions_query, _plural
from analytics.rules.settings import RuleSettings

_HOUR = 3600.0
_FULL_BANDS: tuple[tuple[float, str], ...] = (
    (_HOUR, "within 1 h"),
    (6 * _HOUR, "within 6 h"),
    (24 * _HOUR, "within a day"),
    (7 * 24 * _HOUR, "within a week"),
)


def banded_percent(ratio: float, *, whole_from: float = 1.0) -> int:
    """``ratio`` as a percentage floored to a multiple of 5 (to a whole percent from ``whole_from`` up,
    and below 10 %, where each percent matters)."""
    percent = max(0.0, ratio) * 100.0
    if ratio >= whole_from or percent < 10.0:
        return math.floor(percent + 1e-9)
    return 5 * math.floor(percent / 5.0 + 1e-9)


def banded_rate(bytes_per_s: float) -> str:
    """A growth rate to one significant digit, in decimal units: ``5 MB/s``, ``300 kB/s``."""
    if bytes_per_s <= 0 or not math.isfinite(bytes_per_s):
        return "0 B/s"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0)):
        if bytes_per_s >= scale or unit == "B":
            value = bytes_per_s / scale
            return f"{round(value, -math.floor(math.log10(value))):g} {unit}/s"
    raise AssertionError("unreachable")


def banded_full_in(full_in_s: float | None) -> str:
    """When a log dir will be full: ``full within 6 h``, ``not growing``."""
    if full_in_s is None:
        return "not growing"
    band = next((text for limit, text in _FULL_BANDS if full_in_s <= limit), None)
    return f"full {band}" if band is not None else "not full within a week"


def _partition_names(partitions: tuple[PartitionName, ...]) -> str:
    shown = ", ".join(f"{topic}-{p}" for topic, p in partitions[:EXAMPLES_IN_SUMMARY])
    rest = len(partitions) - EXAMPLES_IN_SUMMARY
    return f"{shown} and {rest} more" if rest > 0 else shown


def _brokers(ctx: RuleContext) -> list[BrokerResources]:
    return [] if ctx.resources is None else [ctx.resources[b] for b in sorted(ctx.resources)]


def _disk_severity(disk: LogDirUsage, settings: RuleSettings) -> Severity | None:
    full_in = disk.full_in_s
    if disk.used_ratio >= settings.disk_used_critical or (
        full_in is not None and full_in <= settings.disk_full_critical_s
    ):
        return "critical"
    if disk.used_ratio >= settings.disk_used_warning or (
        full_in is not None and full_in <= settings.disk_full_warning_s
    ):
        return "warning"
    return None


def rule_14_log_dir_filling(ctx: RuleContext) -> list[Finding]:
    """Rule 14, per broker and log dir (subject ``broker:<id>:<mountpoint>``): a log dir at least
    ``disk_used_warning`` full or full within ``disk_full_warning_s`` at its growth (a warning), at least
    ``disk_used_critical`` full or full within ``disk_full_critical_s`` (critical).

    A full log dir is the most common way a Kafka broker dies: Kafka fails the log dir (rule 15), its
    replicas go offline on that broker and every partition it led needs a new leader. The growth is the
    disk model's robust fit (``collectors.disks``), so a retention trim does not hide it; the summary names
    the topics growing fastest on the broker, whose retention to lower or partitions to move.
    """
    settings = ctx.settings
    findings = []
    for broker in _brokers(ctx):
        for disk in broker.log_dirs:
            severity = _disk_severity(disk, settings)
            if severity is None:
                continue
            used = banded_percent(disk.used_ratio, whole_from=0.95)
            growth = disk.growth_bytes_per_s
            grows = f"growing {banded_rate(growth)}" if growth is not None and growth > 0 else "not growing"
            when = banded_full_in(disk.full_in_s)
            topics = [topic for topic, _ in disk.top_topics]
            fastest = f"; fastest growing there: {', '.join(topics)}" if topics else ""
            full = f", {when}" if disk.full_in_s is not None else ""
            findings.append(
                Finding(
                    rule=14,
                    subject=f"broker:{broker.broker_id}:{disk.mountpoint}",
                    severity=severity,
                    summary=f"broker {broker.broker_id}'s log dir {disk.mountpoint} is {used} % full, "
                    f"{grows}{full}{fastest}",
                    evidence={
                        "broker": broker.broker_id,
                        "mountpoint": disk.mountpoint,
                        "used_ratio": disk.used_ratio,
                        "size_bytes": disk.size_bytes,
                        "avail_bytes": disk.avail_bytes,
                        "growth_bytes_per_s": growth,
                        "full_in_s": disk.full_in_s,
                        "top_topics": [{"topic": t, "bytes_per_s": r} for t, r in disk.top_topics],
                        "thresholds": {
                            "used_warning": settings.disk_used_warning,
                            "used_critical": settings.disk_used_critical,
                            "full_warning_s": settings.disk_full_warning_s,
                            "full_critical_s": settings.disk_full_critical_s,
                        },
                        "cause": f"{disk.mountpoint} is {used} % full",
                    },
                    action=ActionRef("GET", f"/api/v1/brokers/{broker.broker_id}/disks"),
                )
            )
    return findings


def rule_15_log_dir_offline(ctx: RuleContext) -> list[Finding]:
    """Rule 15, per broker: a log dir failed (Kafka's ``OfflineLogDirectoryCount`` above 0, or a failure
    the broker announced in ``/log_dir_event_notification`` since it registered; Bitnami's exporter serves
    no gauge, there the notices alone say it).

    Kafka takes a failed log dir (an I/O error, a full disk, a JBOD disk gone) offline and keeps it offline
    until the broker restarts: every replica in it is gone from the ISRs now, and partitions it alone held
    are offline. Critical, at once. It is the cause the rule-1/2/3 pages of those partitions name.
    """
    findings = []
    for broker in _brokers(ctx):
        offline = broker.failed_log_dirs
        if offline <= 0:
            continue
        lost = broker.out_of_isr
        left = (
            f": its replicas there left the ISR of {_plural(len(lost), 'partition')} "
            f"({_partition_names(lost)})"
            if lost
            else ""
        )
        dirs = _plural(offline, "log dir")
        findings.append(
            Finding(
                rule=15,
                subject=f"broker:{broker.broker_id}",
                severity="critical",
                summary=f"broker {broker.broker_id} has {dirs} offline{left}",
                evidence={
                    "broker": broker.broker_id,
                    "offline_log_dirs": offline,
                    "gauge": broker.offline_log_dirs,
                    "log_dir_failures": broker.log_dir_failures,
                    "out_of_isr": [f"{topic}-{p}" for topic, p in lost],
                    "cause": "log dir is offline" if offline == 1 else f"{offline} log dirs are offline",
                },
                action=ActionRef("GET", _partitions_query(under_replicated="true", broker=broker.broker_id)),
            )
        )
    return findings


def rule_16_broker_saturated(ctx: RuleContext) -> list[Finding]:
    """Rule 16, per broker: its request handlers idle less than ``request_handler_idle_warning`` (20 %;
    critical below ``request_handler_idle_critical``, 10 %) or its network processors idle less than
    ``network_processor_idle_warning`` (30 %).

    A broker whose handler threads are always busy queues every request: produce and fetch latencies
    climb, its followers fall behind and leave the ISRs (rule 2 follows). A dry-run rebalance moves load
    off it; more ``num.io.threads``/``num.network.threads`` help when the host has spare CPU.
    """
    settings = ctx.settings
    findings = []
    for broker in _brokers(ctx):
        handlers, network = broker.request_handler_idle, broker.network_processor_idle
        problems: list[tuple[Severity, str]] = []
        if handlers is not None and handlers < settings.request_handler_idle_warning:
            severity: Severity = (
                "critical" if handlers < settings.request_handler_idle_critical else "warning"
            )
            problems.append((severity, f"request handlers are {banded_percent(handlers)} % idle"))
        if network is not None and network < settings.network_processor_idle_warning:
            problems.append(("warning", f"network processors are {banded_percent(network)} % idle"))
        if not problems:
            continue
        worst: Severity = "critical" if any(s == "critical" for s, _ in problems) else "warning"
        text = " and ".join(t for _, t in problems)
        findings.append(
            Finding(
                rule=16,
                subject=f"broker:{broker.broker_id}",
                severity=worst,
                summary=f"broker {broker.broker_id} is saturated: its {text}",
                evidence={
                    "broker": broker.broker_id,
                    "request_handler_idle": handlers,
                    "network_processor_idle": network,
                    "request_handler_idle_warning": settings.request_handler_idle_warning,
                    "request_handler_idle_critical": settings.request_handler_idle_critical,
                    "network_processor_idle_warning": settings.network_processor_idle_warning,
                    "cause": text,
                },
                action=ActionRef(
                    "POST", "/api/v1/plans/rebalance", {"rated_deviation": settings.rated_deviation}
                ),
            )
        )
    return findings


def rule_17_file_descriptors(ctx: RuleContext) -> list[Finding]:
    """Rule 17, per broker: open file descriptors at least ``fds_warning`` (80 %) of ``process_max_fds``
    (critical from ``fds_critical``, 95 %).

    Kafka holds a descriptor per segment file and per connection; at the limit it can neither roll a
    segment nor accept a connection, and a log dir it cannot write is failed (rule 15). Raise the limit
    (``LimitNOFILE``), or move partitions off the broker.
    """
    settings = ctx.settings
    findings = []
    for broker in _brokers(ctx):
        used, limit = broker.open_fds, broker.max_fds
        if used is None or limit is None or limit <= 0:
            continue
        ratio = used / limit
        if ratio < settings.fds_warning:
            continue
        severity: Severity = "critical" if ratio >= settings.fds_critical else "warning"
        percent = banded_percent(ratio, whole_from=settings.fds_critical)
        findings.append(
            Finding(
                rule=17,
                subject=f"broker:{broker.broker_id}",
                severity=severity,
                summary=f"broker {broker.broker_id} has {percent} % of its file descriptors open "
                f"(process_max_fds {limit:.0f})",
                evidence={
                    "broker": broker.broker_id,
                    "open_fds": used,
                    "max_fds": limit,
                    "ratio": ratio,
                    "fds_warning": settings.fds_warning,
                    "fds_critical": settings.fds_critical,
                    "cause": f"file descriptors are {percent} % used",
                },
                action=ActionRef("GET", f"/api/v1/brokers/{broker.broker_id}"),
            )
        )
    return findings


def rule_18_isr_flapping(ctx: RuleContext) -> list[Finding]:
    """Rule 18, per follower broker: one of its replicas left or rejoined its ISR at least
    ``isr_flap_changes`` (6) times within ``isr_flap_window_s`` (300 s), as the snapshots show (exact: the
    lane compares every snapshot with the one before).

    A follower that keeps falling out and catching up (GC pauses, a slow disk, a saturated network) is about
    to fall out for good; each time it leaves, its partitions are one failure from under min ISR. A restart
    makes two changes per replica, so it does not count. The leaders' ``IsrShrinksPerSec``/
    ``IsrExpandsPerSec`` (which cannot say which follower) are in the evidence. A warning.
    """
    settings = ctx.settings
    findings = []
    for broker in _brokers(ctx):
        if broker.flap_changes < settings.isr_flap_changes:
            continue
        flapping = tuple(tp for tp, n in broker.isr_changes if n >= settings.isr_flap_changes)
        window = f"{settings.isr_flap_window_s:g} s"
        findings.append(
            Finding(
                rule=18,
                subject=f"broker:{broker.broker_id}",
                severity="warning",
                summary=f"broker {broker.broker_id} is flapping: its replicas of "
                f"{_plural(len(flapping), 'partition')} ({_partition_names(flapping)}) left and rejoined "
                f"their ISRs at least {settings.isr_flap_changes} times within {window}",
                evidence={
                    "broker": broker.broker_id,
                    "changes": {f"{topic}-{p}": n for (topic, p), n in broker.isr_changes},
                    "isr_flap_changes": settings.isr_flap_changes,
                    "isr_flap_window_s": settings.isr_flap_window_s,
                    "cluster_isr_shrinks_per_s": _total(ctx, "isr_shrinks_per_s"),
                    "cluster_isr_expands_per_s": _total(ctx, "isr_expands_per_s"),
                    "cause": "replicas flap in and out of their ISRs",
                },
                action=ActionRef("GET", f"/api/v1/brokers/{broker.broker_id}"),
            )
        )
    return findings


def _total(ctx: RuleContext, name: str) -> float | None:
    values = [getattr(b, name) for b in _brokers(ctx) if getattr(b, name) is not None]
    return sum(values) if values else None
