"""Rule 19: a consumer group's verdict (:mod:`collectors.consumers.verdicts`), one alert per group (subject
``group:<name>``), never one per partition (the incident lane's: ``RuleContext.consumer_groups``, the
latest round of the service's consumer-lag collector).

The verdicts carry their own time (a group is ``stopped`` only after ``stopped_after_s`` without a commit,
``lagging`` only after ``lagging_rounds`` rounds), so the rule fires on the round's verdict as it is. Its
summary names the group and its status only, so that it changes when the verdict does and not at every
round; the figures (lag, seconds behind, the verdict's reason) are in the evidence.
"""

from __future__ import annotations

from typing import Any

from analytics.model import Finding, Severity
from analytics.rules.context import RuleContext
from collectors.consumers.collector import GroupReport

SUBJECT_PREFIX = "group:"

_SUMMARIES: dict[str, str] = {
    "lagging": "is lagging: more than its lag_warn_s behind and not catching up",
    "stopped": "has stopped: no commit while it has lag",
    "stalled": "is stalled: it commits, but a partition's committed offset does not move while it has lag",
    "rewound": "was rewound: a committed offset went backwards",
    "no_consumer": "has lag and no consumer",
    "falling_off_log": "is falling off the log: records were deleted before it read them",
}

EXAMPLES = 5
"""Partitions listed in the evidence (the most lag first)."""


def _evidence(report: GroupReport) -> dict[str, Any]:
    lag, verdict = report.lag, report.verdict
    behind = sorted(
        (p for p in lag.partitions if p.lag is not None and p.lag > 0), key=lambda p: (-(p.lag or 0), p.tp)
    )
    return {
        "group": lag.group,
        "status": verdict.status,
        "reason": verdict.reason,
        "state": lag.state,
        "members": lag.members,
        "lag": lag.lag,
        "max_lag_seconds": lag.max_lag_seconds,
        "max_lag_seconds_at_least": lag.max_lag_seconds_at_least,
        "partitions": len(lag.partitions),
        "partitions_behind": len(behind),
        "examples": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "log_start": p.log_start,
                "log_end": p.log_end,
                "lag": p.lag,
            }
            for p in behind[:EXAMPLES]
        ],
    }


def rule_19_consumer_group(ctx: RuleContext) -> list[Finding]:
    """A consumer group whose verdict is not ``ok``: ``stopped``, ``stalled`` and ``falling_off_log``
    critical, ``lagging``, ``rewound`` and ``no_consumer`` warnings."""
    groups = ctx.consumer_groups
    if groups is None:
        return []
    findings = []
    for name in sorted(groups):
        report = groups[name]
        verdict = report.verdict
        if verdict.status == "ok":
            continue
        severity: Severity = "critical" if verdict.severity == "critical" else "warning"
        findings.append(
            Finding(
                rule=19,
                subject=f"{SUBJECT_PREFIX}{name}",
                severity=severity,
                summary=f"consumer group {name} {_SUMMARIES[verdict.status]}",
                evidence=_evidence(report),
            )
        )
    return findings
