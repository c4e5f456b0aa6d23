"""Rules 4-7: the controller and the brokers as ZooKeeper shows them."""

from __future__ import annotations

import itertools

from analytics.model import ActionRef, Finding, HealthState, Severity
from analytics.rules.context import RuleContext, _is_strong, _partitions_query, _plural


def controller_elections(states: tuple[HealthState, ...]) -> int:
    """Controller elections between the first and the last state (ordered by time): the sum of the epoch's
    increments, since ``/controller_epoch`` goes up by one per election and several may fall between two
    samples. States without a controller are skipped; an epoch that went down (ZooKeeper data replaced)
    counts as one."""
    epochs = [s.controller_epoch for s in states if s.controller_epoch is not None]
    return sum(b - a if b > a else 1 for a, b in itertools.pairwise(epochs) if b != a)


def rule_4_controller(ctx: RuleContext) -> list[Finding]:
    """Rule 4, subject ``controller``: no controller, two controllers, or a flapping controller.

    Without an active controller no leader is elected and no broker failure is handled (critical). Brokers'
    ActiveControllerCount gauges adding up to more than one means a zombie controller still acting after
    losing its session (critical: conflicting leader decisions). Several elections within
    ``controller_flap_window_s`` (from earlier windows' epochs) usually mean the controller's ZooKeeper
    session keeps expiring (GC pauses, an overloaded ZooKeeper): a warning, since each election stalls
    leader changes for a while. All that apply go into one finding, at the worst severity.
    """
    health, settings = ctx.health, ctx.settings
    if health is None:
        return []
    problems: list[tuple[Severity, str]] = []
    if health.controller_id is None:
        problems.append(("critical", "no active controller (/controller is empty)"))
    elif health.controller_id not in health.brokers and not health.controller_is_kraft:
        problems.append(("critical", f"the controller, broker {health.controller_id}, is not registered"))
    gauges = health.active_controller_gauges
    if gauges is not None and round(gauges) > 1:
        problems.append(("critical", f"{round(gauges)} brokers report ActiveControllerCount=1"))
    since = ctx.now - settings.controller_flap_window_s
    recent = tuple(s for s in (*ctx.history, health) if s.timestamp >= since)
    elections = controller_elections(tuple(sorted(recent, key=lambda s: s.timestamp)))
    if elections >= settings.controller_flap_changes:
        limit, window = settings.controller_flap_changes, f"{settings.controller_flap_window_s:g} s"
        problems.append(("warning", f"controller flapping: ≥{limit} elections in {window}"))
    if not problems:
        return []
    severity: Severity = "critical" if any(s == "critical" for s, _ in problems) else "warning"
    return [
        Finding(
            rule=4,
            subject="controller",
            severity=severity,
            summary="; ".join(text for _, text in problems),
            evidence={
                "controller_id": health.controller_id,
                "controller_epoch": health.controller_epoch,
                "kraft_controller": health.controller_is_kraft,
                "active_controller_gauges": gauges,
                "brokers": list(health.brokers),
                "elections": elections,
                "flap_window_s": settings.controller_flap_window_s,
            },
        )
    ]


def rule_5_broker_not_registered(ctx: RuleContext) -> list[Finding]:
    """Rule 5, per broker: a broker that holds replicas is not registered in ``/brokers/ids``.

    It is down or lost its ZooKeeper session, so its replicas are gone from every ISR and each partition it
    holds is one failure closer to offline; restart it, or drain it if it is not coming back. Critical,
    but it opens after the default k windows: a rolling restart unregisters each broker for a while, and
    rules 1 and 3 page at once if its absence actually stops clients.
    """
    health = ctx.health
    if health is None:
        return []
    return [
        Finding(
            rule=5,
            subject=f"broker:{broker}",
            severity="critical",
            summary=f"broker {broker} holds replicas but is not registered in ZooKeeper "
            "(down or lost its session)",
            evidence={
                "broker": broker,
                "brokers_down": list(health.brokers_down),
                "registered": list(health.brokers),
                "cluster_under_replicated": health.under_replicated.count,
                "cluster_offline": health.offline.count,
                "cause": "registration is gone from ZooKeeper (down or lost its session)",
            },
            action=ActionRef("POST", f"/api/v1/plans/drain-broker/{broker}", {"dry_run": True}),
        )
        for broker in sorted(set(health.brokers_down))
    ]


def rule_6_suspect_broker(ctx: RuleContext) -> list[Finding]:
    """Rule 6, per broker: a registered broker missing from the ISR of most under-replicated partitions.

    When one broker is missing from (nearly) every URP, it is that broker, stuck, slow or cut off from
    its peers, not the network or the cluster: look at it first (docs/kafka-reference.md §3). Brokers that are
    not registered are left to rule 5, which already says the same thing more plainly.
    """
    health = ctx.health
    if health is None:
        return []
    urps = health.under_replicated.count
    down = set(health.brokers_down)
    findings = []
    for suspect in sorted(health.suspects, key=lambda s: s.broker_id):
        if suspect.broker_id in down or not _is_strong(suspect, ctx.settings):
            continue
        broker = suspect.broker_id
        findings.append(
            Finding(
                rule=6,
                subject=f"broker:{broker}",
                severity="warning",
                summary=f"broker {broker} is missing from the ISR of {suspect.missing_from} of "
                f"{_plural(urps, 'under-replicated partition')}: look at it first (stuck, slow or cut off)",
                evidence={
                    "broker": broker,
                    "missing_from": suspect.missing_from,
                    "share": suspect.share,
                    "under_replicated": urps,
                    "suspect_share": ctx.settings.suspect_share,
                },
                action=ActionRef("GET", _partitions_query(under_replicated="true", broker=broker)),
            )
        )
    return findings


def rule_7_preferred_leader_imbalance(ctx: RuleContext) -> list[Finding]:
    """Rule 7, per registered broker: more of its preferred partitions led by others than
    ``leader.imbalance.per.broker.percentage`` allows (strictly above, compared in integers, like Kafka).

    Other brokers carry its leaders' traffic. With ``auto.leader.rebalance.enable`` the controller fixes it
    within ``leader.imbalance.check.interval.seconds``; when disabled (common, docs/kafka-reference.md §2) an
    operator runs a preferred-replica election. Info, warning from twice the percentage. Brokers that are not
    registered are skipped: their leadership cannot come back until they do (rule 5).
    """
    health = ctx.health
    if health is None:
        return []
    percentage = ctx.settings.leader_imbalance_per_broker_percentage
    registered = set(health.brokers)
    findings = []
    for entry in sorted(health.imbalance, key=lambda i: i.broker_id):
        preferred, others = entry.preferred_partitions, entry.led_by_others
        if entry.broker_id not in registered or others * 100 <= percentage * preferred:
            continue
        severity: Severity = "warning" if others * 100 > 2 * percentage * preferred else "info"
        findings.append(
            Finding(
                rule=7,
                subject=f"broker:{entry.broker_id}",
                severity=severity,
                summary=f"broker {entry.broker_id} is the preferred leader of "
                f"{_plural(preferred, 'partition')} but {others} are led by other brokers "
                f"(above leader.imbalance.per.broker.percentage={percentage})",
                evidence={
                    "broker": entry.broker_id,
                    "preferred_partitions": preferred,
                    "led_by_others": others,
                    "ratio": others / preferred,
                    "percentage": percentage,
                },
                action=ActionRef(
                    "POST", "/api/v1/actions/preferred-replica-election", {"scope": "all", "dry_run": True}
                ),
            )
        )
    return findings
