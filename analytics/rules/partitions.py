"""Rules 1-3: partitions offline, under-replicated, under min ISR (per topic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analytics.model import ActionRef, Finding
from analytics.rules.context import (
    RuleContext,
    _affected_topics,
    _examples,
    _partitions_query,
    _plural,
    _top_suspect,
    _topic_evidence,
)


def rule_1_offline_partitions(ctx: RuleContext) -> list[Finding]:
    """Rule 1, per topic: partitions without a live leader.

    Nobody can produce to or consume from an offline partition: this is an outage for every client of the
    topic, so it is critical and opens at once. Except while the controller is still moving leaderships:
    a crashed broker's partitions are offline from the moment it is gone until the controller has elected
    one of their live in-sync replicas (milliseconds, or seconds for thousands of partitions). When every
    offline partition of the topic has such a replica, the finding asks for ``leader_election_grace_s``
    first; a partition no live in-sync replica can lead (an RF-1 topic, a whole ISR down) pages at once.
    """
    health = ctx.health
    if health is None:
        return []
    findings = []
    for topic, n in _affected_topics(health.offline):
        electable = health.offline_electable.by_topic.get(topic, 0)
        pending = electable >= n
        until = " until the controller elects one of their live in-sync replicas" if pending else ""
        findings.append(
            Finding(
                rule=1,
                subject=f"topic:{topic}",
                severity="critical",
                summary=f"{topic}: {_plural(n, 'partition')} offline ({_examples(health.offline, topic)}), "
                f"no live leader: clients can neither produce nor consume{until}",
                evidence={
                    **_topic_evidence(health.offline, topic, n),
                    "electable": electable,
                    "lagging": _lagging(health.lagging.offline, topic),
                    "cluster_offline": health.offline.count,
                    "brokers_down": list(health.brokers_down),
                },
                action=ActionRef("GET", _partitions_query(offline="true", topic=topic)),
                for_s=ctx.settings.leader_election_grace_s if pending else None,
            )
        )
    return findings


def rule_2_under_replicated_partitions(ctx: RuleContext) -> list[Finding]:
    """Rule 2, per topic: under-replicated partitions (|ISR| < |AR| − |adding|).

    Each has lost redundancy: one more failure may take it below min ISR or offline. Replicas fall out
    of the ISR for a moment during restarts and leader moves, so the lifecycle opens this alert only when
    the run of hits has also lasted ``urp_for_s`` (the rule's ``for``). It stays a warning even when the
    topic is also under min ISR: rule 3 pages for that.
    """
    health = ctx.health
    if health is None:
        return []
    top = _top_suspect(health, ctx.settings)
    blame = f"; most miss broker {top}" if top is not None else ""
    return [
        Finding(
            rule=2,
            subject=f"topic:{topic}",
            severity="warning",
            summary=f"{topic}: {_plural(n, 'partition')} under-replicated "
            f"({_examples(health.under_replicated, topic)}){blame}",
            evidence={
                **_topic_evidence(health.under_replicated, topic, n),
                "cluster_under_replicated": health.under_replicated.count,
                "suspect": top,
                "lagging": _lagging(health.lagging.under_replicated, topic),
            },
            action=ActionRef("GET", _partitions_query(under_replicated="true", topic=topic)),
        )
        for topic, n in _affected_topics(health.under_replicated)
    ]


def rule_3_under_min_isr(ctx: RuleContext) -> list[Finding]:
    """Rule 3, per topic: partitions with |ISR| < min(``min.insync.replicas``, |AR|).

    Producers with ``acks=all`` get NotEnoughReplicas for these partitions right now: writes are failing,
    so it is critical and opens in the first window.
    """
    health = ctx.health
    if health is None:
        return []
    return [
        Finding(
            rule=3,
            subject=f"topic:{topic}",
            severity="critical",
            summary=f"{topic}: {_plural(n, 'partition')} below min.insync.replicas "
            f"({_examples(health.under_min_isr, topic)}): acks=all producers are failing",
            evidence={
                **_topic_evidence(health.under_min_isr, topic, n),
                "cluster_under_min_isr": health.under_min_isr.count,
                "lagging": _lagging(health.lagging.under_min_isr, topic),
                "brokers_down": list(health.brokers_down),
            },
            action=ActionRef("GET", _partitions_query(under_min_isr="true", topic=topic)),
        )
        for topic, n in _affected_topics(health.under_min_isr)
    ]


def _lagging(by_topic: Mapping[str, Mapping[int, int]], topic: str) -> list[dict[str, Any]]:
    """The brokers whose replicas the topic's partitions lack (most first): what links a cause to it."""
    brokers = by_topic.get(topic, {})
    return [{"broker": b, "partitions": n} for b, n in sorted(brokers.items(), key=lambda i: (-i[1], i[0]))]
