"""Pages that name their cause: a rule-1/2/3 page (per topic) whose partitions lack replicas on a broker,
or a rule-6 suspect broker, where rules 5 or 14-18 currently hold an alert on that broker, says so in one
sentence and lists those alerts in its evidence (``causes``), e.g.::

    orders: 38 partitions under-replicated (...). 38 partitions of orders lack broker 3 in their ISR:
    broker 3's /var/lib/kafka/data-1 is 97 % full (rule 14); request handlers are 5 % idle (rule 16)

A cause *holds* when its alert is open after the evaluation (:func:`held_causes`: the incident lane asks the
lifecycle), so a page never names a cause that has not paged itself. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from analytics.model import AlertState, Finding, fingerprint
from analytics.rules.context import Evaluation, _plural

CAUSE_RULES: frozenset[int] = frozenset({5, 14, 15, 16, 17, 18})
"""Rules whose alerts on a broker explain a page of its partitions."""
EXPLAINED_RULES: frozenset[int] = frozenset({1, 2, 3, 6})
"""Rules whose pages name their causes."""


def subject_broker(subject: str) -> int | None:
    """The broker of a ``broker:<id>`` or ``broker:<id>:<mountpoint>`` subject (None for others)."""
    kind, _, rest = subject.partition(":")
    if kind != "broker":
        return None
    head = rest.split(":", 1)[0]
    return int(head) if head.isdecimal() else None


def held_causes(cluster: str, states: Iterable[AlertState]) -> frozenset[str]:
    """The fingerprints of the cause rules' alerts that are open among ``states``."""
    return frozenset(
        fingerprint(cluster, s.rule, s.subject) for s in states if s.rule in CAUSE_RULES and s.state == "open"
    )


def link_causes(evaluation: Evaluation, cluster: str, held: Collection[str]) -> Evaluation:
    """``evaluation`` with each rule-1/2/3/6 finding whose lagging brokers have a held cause (a finding of
    this evaluation whose fingerprint is in ``held``) naming it in its summary and its evidence's
    ``causes`` (rule, subject, fingerprint, summary)."""
    by_broker: dict[int, list[tuple[str, Finding]]] = {}
    for finding in evaluation.findings:
        if finding.rule not in CAUSE_RULES:
            continue
        fp = fingerprint(cluster, finding.rule, finding.subject)
        broker = subject_broker(finding.subject)
        if broker is not None and fp in held:
            by_broker.setdefault(broker, []).append((fp, finding))
    if not by_broker:
        return evaluation
    linked = tuple(_linked(f, by_broker) if f.rule in EXPLAINED_RULES else f for f in evaluation.findings)
    return replace(evaluation, findings=linked)


def _lagging(finding: Finding) -> list[tuple[int, int]]:
    """(broker, partitions) the finding's partitions lack, most first (rule 6: its own broker)."""
    if finding.rule == 6:
        broker = subject_broker(finding.subject)
        count = finding.evidence.get("missing_from", 0)
        return [] if broker is None else [(broker, int(count))]
    return [(int(e["broker"]), int(e["partitions"])) for e in finding.evidence.get("lagging", ())]


def _linked(finding: Finding, by_broker: Mapping[int, list[tuple[str, Finding]]]) -> Finding:
    sentences: list[str] = []
    causes: list[dict[str, Any]] = []
    topic = finding.evidence.get("topic")
    for broker, count in _lagging(finding):
        found = by_broker.get(broker)
        if not found:
            continue
        why = "; ".join(
            f"{cause.evidence.get('cause', cause.summary)} (rule {cause.rule})" for _, cause in found
        )
        partitions, one = _plural(count, "partition"), count == 1
        if finding.rule == 6:
            lead = "The cause:"
        elif finding.rule == 1:
            lead = f"{partitions} of {topic} {'has' if one else 'have'} a replica on broker {broker}:"
        else:
            lack, their = ("lacks", "its") if one else ("lack", "their")
            lead = f"{partitions} of {topic} {lack} broker {broker} in {their} ISR:"
        sentences.append(f"{lead} broker {broker}'s {why}")
        causes.extend(
            {"rule": cause.rule, "subject": cause.subject, "fingerprint": fp, "summary": cause.summary}
            for fp, cause in found
        )
    if not causes:
        return finding
    return replace(
        finding,
        summary=f"{finding.summary}. {'. '.join(sentences)}",
        evidence={**finding.evidence, "causes": causes},
    )
