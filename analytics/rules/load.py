"""Rules 8-9: the load model's statistics over a window (the load lane's)."""

from __future__ import annotations

import math

from analytics.model import ActionRef, Finding
from analytics.rules.context import RuleContext
from analytics.rules.settings import BOUND_TOLERANCE, RuleSettings


def _above(value: float, bound: float) -> bool:
    return value > bound * (1.0 + BOUND_TOLERANCE)


def _rebalance(settings: RuleSettings) -> ActionRef:
    return ActionRef("POST", "/api/v1/plans/rebalance", {"rated_deviation": settings.rated_deviation})


def rule_8_broker_load_deviation(ctx: RuleContext) -> list[Finding]:
    """Rule 8, per broker: |r_n| > r, the broker's share of the cluster load deviates from 1/N by more
    than the rated deviation (docs/kafka-reference.md §4).

    An overloaded broker is the first to run out of CPU, network or disk and slow every partition it
    leads; an underloaded one is wasted capacity (often a replaced broker that got no partitions). A
    reassignment plan moves the fewest replicas to fix it.
    """
    load, settings = ctx.load, ctx.settings
    if load is None:
        return []
    r = settings.rated_deviation
    findings = []
    for b in sorted(load.brokers, key=lambda b: b.broker):
        if not math.isfinite(b.deviation_rate) or not _above(abs(b.deviation_rate), r):
            continue
        side = "above" if b.deviation_rate > 0 else "below"
        findings.append(
            Finding(
                rule=8,
                subject=f"broker:{b.broker}",
                severity="warning",
                summary=f"broker {b.broker} carries a load share more than {r * 100:g}% {side} "
                "the cluster average",
                evidence={
                    "broker": b.broker,
                    "deviation_rate": b.deviation_rate,
                    "normalized_load": b.normalized_load,
                    "weighted_load": b.weighted_load,
                    "shares": {m: v for m, v in b.shares.items() if math.isfinite(v)},
                    "rated_deviation": r,
                    "brokers": len(load.brokers),
                },
                action=_rebalance(settings),
            )
        )
    return findings


def rule_9_cluster_load_imbalance(ctx: RuleContext) -> list[Finding]:
    """Rule 9, subject ``cluster``: the population standard deviation σ of the brokers' load shares exceeds
    r/N, the σ at which every broker deviates by exactly r (0.025 for N = 4, r = 10%).

    Unlike rule 8 this sees a cluster where many brokers are a little off; an uneven cluster runs out of
    headroom on its busiest broker long before its total capacity is used.
    """
    load, settings = ctx.load, ctx.settings
    if load is None or not load.brokers or not math.isfinite(load.stddev):
        return []
    n = len(load.brokers)
    threshold = settings.rated_deviation / n
    if not _above(load.stddev, threshold):
        return []
    ranked = sorted(load.brokers, key=lambda b: (b.normalized_load, b.broker))
    return [
        Finding(
            rule=9,
            subject="cluster",
            severity="warning",
            summary=f"cluster load is imbalanced: σ of the {n} brokers' load shares is above "
            f"r/N = {threshold:.4g}",
            evidence={
                "stddev": load.stddev,
                "threshold": threshold,
                "brokers": n,
                "rated_deviation": settings.rated_deviation,
                "most_loaded": ranked[-1].broker,
                "least_loaded": ranked[0].broker,
            },
            action=_rebalance(settings),
        )
    ]
