"""Rules 10-13: our own signals (gauges against ZooKeeper, a stale view or load lane, a stalled action,
unreadable state)."""

from __future__ import annotations

import math

from analytics.model import ActionRef, Finding
from analytics.rules.context import (
    EXAMPLES_IN_SUMMARY,
    RuleContext,
    _affected_topics,
    _partitions_query,
    _plural,
    is_current,
    known_good_age,
)


def rule_10_urp_gauges_disagree(ctx: RuleContext) -> list[Finding]:
    """Rule 10, subject ``cluster``: the brokers' UnderReplicatedPartitions gauges do not add up to the URPs
    ZooKeeper shows with a live leader (only a leader counts its partition).

    Then dashboards built on the gauges and the ZooKeeper view tell different stories: a broker that lost
    its session but still acts as leader, a stuck gauge, or a collector bug. Ignored when no broker was
    scraped or some registered broker's gauge is missing (its share of the sum is unknown). Opens only
    after several windows, because gauges and ZooKeeper are read at different instants.
    """
    health, settings = ctx.health, ctx.settings
    if health is None or health.urp_gauges is None or health.urp_zookeeper is None:
        return []
    if health.urp_gauges_missing or not math.isfinite(health.urp_gauges):
        return []
    gauges, zookeeper = round(health.urp_gauges), health.urp_zookeeper
    if abs(gauges - zookeeper) <= settings.urp_mismatch_tolerance:
        return []
    return [
        Finding(
            rule=10,
            subject="cluster",
            severity="warning",
            summary=f"brokers' UnderReplicatedPartitions gauges add up to {gauges} but ZooKeeper shows "
            f"{_plural(zookeeper, 'under-replicated partition')} with a live leader",
            evidence={
                "gauges": gauges,
                "zookeeper": zookeeper,
                "tolerance": settings.urp_mismatch_tolerance,
                "brokers_down": list(health.brokers_down),
            },
            action=ActionRef("GET", _partitions_query(under_replicated="true")),
        )
    ]


VIEW_SUBJECT = "view:zookeeper"
"""Rule 11's subject for the incident lane's own view of ZooKeeper (whichever replica leads)."""
LOAD_LANE_SUBJECT = "lane:load"
"""Rule 11's subject for a silent load lane."""


def rule_11_collector_stale(ctx: RuleContext) -> list[Finding]:
    """Rule 11: a blind spot. Subject ``view:zookeeper``: the incident lane's view of ZooKeeper is stale
    (session lost or suspended, resync running) or was last known good more than ``stale_after_s`` ago;
    every other incident rule is blind meanwhile (not evaluated, so their alerts neither open nor resolve)
    and an outage could be going on unseen: critical. Subject ``lane:load``: no new load window for the
    cluster has been written for more than ``silent_after_s``, so the collector or the Spark job has stopped
    and the load rules (8, 9) are blind: a warning, since the cluster itself is not shown to be in trouble.
    The subjects name no process, so the fingerprints survive restarts and failovers.
    """
    health, settings = ctx.health, ctx.settings
    if health is None:
        return []
    findings: list[Finding] = []
    if not is_current(health, ctx.now, settings):
        age = known_good_age(health, ctx.now)
        why = (
            "is stale (ZooKeeper session lost or resync running)"
            if health.stale
            else f"was last in sync more than {settings.stale_after_s:g} s ago"
        )
        findings.append(
            Finding(
                rule=11,
                subject=VIEW_SUBJECT,
                severity="critical",
                summary=f"kafka-health's view of ZooKeeper {why}: incident alerts are paused",
                evidence={
                    "collector_id": health.collector_id,
                    "stale": health.stale,
                    "last_good_at": health.last_good_at,
                    "age_s": age,
                    "stale_after_s": settings.stale_after_s,
                    "snapshot_version": health.snapshot_version,
                    "sample_at": health.timestamp,
                },
            )
        )
    lane = ctx.load_lane
    if lane is not None and (lane.latest_window_end is not None or lane.required):
        latest = lane.latest_window_end
        silent_s = max(0.0, ctx.now - lane.heard_at)
        if silent_s > lane.silent_after_s:
            since = "no load window was ever written" if latest is None else "no load window was written"
            findings.append(
                Finding(
                    rule=11,
                    subject=LOAD_LANE_SUBJECT,
                    severity="warning",
                    summary=f"the load lane is silent: {since} for {health.cluster} within "
                    f"{lane.silent_after_s:g} s (is the collector or the Spark job stopped?): load alerts "
                    "(rules 8, 9) are paused",
                    evidence={
                        "latest_window_end": latest,
                        "silent_s": silent_s,
                        "silent_after_s": lane.silent_after_s,
                        "required": lane.required,
                    },
                )
            )
    return findings


def rule_12_action_stalled(ctx: RuleContext) -> list[Finding]:
    """Rule 12: a runbook action (a reassignment, an election) is STALLED: no progress for the executors'
    ``stall_after_s`` (a destination broker down, a throttle below the partitions' produce rate, a cluster
    unhealthy before its next batch). It holds its throttles and blocks other reassignments: a warning, with
    the reason, per action (subject ``action:<id>``)."""
    return [
        Finding(
            rule=12,
            subject=f"action:{action.id}",
            severity="warning",
            summary=f"{action.kind} {action.id} is stalled: {action.reason}",
            evidence={
                "action": action.id,
                "kind": action.kind,
                "reason": action.reason,
                "since": action.since,
            },
            action=ActionRef("GET", f"/api/v1/actions/{action.id}"),
        )
        for action in ctx.stalled_actions or ()
    ]


STATE_UNREADABLE_SUBJECT = "cluster:state"
"""Rule 13's one subject per cluster: the alert is about kafka-health's knowledge of the cluster."""


def rule_13_state_unreadable(ctx: RuleContext) -> list[Finding]:
    """Rule 13: cluster state partly unreadable. Partitions whose state znode exists but cannot be read or
    parsed (not JSON, not Kafka's format, no read permission) have an unknown leader and ISR: they are
    counted by none of rules 1-3, because an unreadable znode is no evidence of an outage and must not
    page anyone at night; but they are a blind spot (an outage there would be missed) and usually a bug or
    a hand edit in ZooKeeper: a warning, one per cluster, with the topics and examples in the evidence.
    """
    health = ctx.health
    if health is None or health.unknown.count == 0:
        return []
    unknown = health.unknown
    topics = _affected_topics(unknown)
    named = ", ".join(f"{topic} ({n})" for topic, n in topics[:EXAMPLES_IN_SUMMARY])
    rest = len(topics) - EXAMPLES_IN_SUMMARY
    more = f" and {_plural(rest, 'more topic')}" if rest > 0 else ""
    return [
        Finding(
            rule=13,
            subject=STATE_UNREADABLE_SUBJECT,
            severity="warning",
            summary=f"cluster state partly unreadable: the state of {_plural(unknown.count, 'partition')} "
            f"cannot be read from ZooKeeper ({named}{more}); they are not counted as offline or "
            "under-replicated, and an outage there would go unseen",
            evidence={
                "count": unknown.count,
                "by_topic": dict(unknown.by_topic),
                "examples": {topic: list(p) for topic, p in unknown.examples.items()},
            },
            action=ActionRef("GET", _partitions_query(state_unknown="true")),
        )
    ]
