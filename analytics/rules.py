"""The alert rules (docs/alert-rules.md): thirteen small, numbered, pure functions of one evaluation's state.

Each rule takes a :class:`RuleContext` (the cluster's latest health state, the load window, earlier states
and ``now``) and returns its findings, one per subject, or ``[]`` when quiet. A rule says nothing about
time beyond its inputs: how long it must fire before an alert opens, and how long it must be quiet before
it resolves, is the lifecycle's business (:mod:`analytics.lifecycle`), driven by :class:`RuleSettings`.

Every rule has one owner, its **lane** (:data:`RULE_LANES`): the *incident* lane (``kafka-health serve``,
on every change of its live ZooKeeper view and on a timer, time-based hysteresis) owns rules 1-7 and
10-13; the *load* lane (the Spark job, per event-time window, windowed hysteresis) owns the load rules 8
and 9, whose statistics only make sense over a window. :func:`evaluate` runs one lane's rules when asked, and
the store refuses an alert written by the lane that does not own its rule.

:func:`evaluate` runs the rules whose inputs are present and says which ones ran, so that an evaluation
without a health state (or with a stale one) neither confirms nor clears an alert:

- ``health`` rules need a health state (rule 11 only);
- ``current`` rules need a health state that is current: not stale and known good within
  ``stale_after_s`` (rules 1-7, 10 and 13). While the ZooKeeper view is stale its snapshot is frozen at the
  last known state, and comparing it with live JMX gauges (rule 10) would invent disagreements; rule 11
  says why the others are paused;
- ``load`` rules need the load window (rules 8 and 9).

Summaries are stable while the condition is: a count or a broker in the summary changes only when the
incident does, because the lifecycle sends an ``updated`` event whenever an open alert's summary changes.
Exact figures (deviation rates, σ, ages) go into the evidence.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from analytics.model import (
    ActionRef,
    Finding,
    HealthState,
    LoadWindow,
    PartitionSet,
    Severity,
    Suspect,
    Window,
)

RULE_NUMBERS = range(1, 14)
EXAMPLES_IN_SUMMARY = 3

Lane = Literal["incident", "load"]
"""Who evaluates a rule and writes its alerts: ``incident``, the service's incident lane (live view,
time-based hysteresis); ``load``, the Spark job (event-time windows, windowed hysteresis)."""
LANES: tuple[Lane, ...] = ("incident", "load")
INCIDENT_RULES: frozenset[int] = frozenset({1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13})
"""Rules about the cluster's state (and our own view of it): the incident lane's."""
LOAD_RULES: frozenset[int] = frozenset({8, 9})
"""Rules about the load model's statistics over a window: the Spark job's."""
RULE_LANES: Mapping[int, Lane] = {rule: "load" if rule in LOAD_RULES else "incident" for rule in RULE_NUMBERS}
"""The owner of every rule: exactly one lane each."""


def lane_of(rule: int) -> Lane:
    """The lane that owns ``rule`` (ValueError for a number that is not a rule)."""
    try:
        return RULE_LANES[rule]
    except KeyError:
        raise ValueError(f"no such rule: {rule} (rules are numbered 1-13)") from None


def lane_rules(lane: Lane) -> frozenset[int]:
    """The rules ``lane`` owns."""
    return INCIDENT_RULES if lane == "incident" else LOAD_RULES


DEFAULT_FOR_S: Mapping[int, float] = {
    1: 0.0,
    3: 0.0,
    4: 15.0,
    5: 90.0,
    6: 60.0,
    7: 300.0,
    10: 30.0,
    11: 15.0,
    12: 0.0,
    13: 30.0,
}
"""How long an incident rule's condition must hold before its alert opens (rule 2's is ``urp_for_s``).

Rules 1 and 3 page at once: clients are failing now. Rule 4 waits 15 s: a normal failover leaves
``/controller`` empty for milliseconds, and two brokers' ActiveControllerCount gauges at 1 in one scrape
clear at the next one (scraped every 10 s by default), so 15 s of either is not a failover. Rule 5 waits
90 s, about what a broker of a rolling restart needs to come back (and rules 1 and 3 page at once if its
absence stops clients). Rule 6 waits 60 s, as long as the URPs it explains usually take to be worth a look.
Rule 7 waits 300 s, Kafka's ``leader.imbalance.check.interval.seconds``: with auto-rebalance on, the
controller fixes it within that time. Rule 10 waits 30 s, three scrapes at the default interval, because
the gauges and ZooKeeper are read at different instants. Rule 11 waits 15 s: a ZooKeeper ensemble's
leader election or a resync after a lost session leaves the view stale for a few seconds. Rule 12 pages at
once: an action is STALLED only after the executors' own ``stall_after_s`` without progress. Rule 13 waits
30 s: a state znode the collector failed to read because of a transient error (a lost connection, an ACL
being changed) is read again within that time."""

DEFAULT_RESOLVE_AFTER_S: Mapping[int, float] = {
    1: 10.0,
    2: 30.0,
    3: 10.0,
    4: 30.0,
    5: 30.0,
    6: 30.0,
    7: 60.0,
    10: 30.0,
    11: 10.0,
    12: 10.0,
    13: 30.0,
}
"""How long an open incident alert's condition must have been clear before it resolves: short for the
outage rules (1, 3) and for rule 11, so that "it is over" reaches on-call soon; longer where conditions
come and go (a flapping broker, an ISR that shrinks and expands) to keep one alert instead of a stream of
opened/resolved pairs."""

BOUND_TOLERANCE = 1e-9
"""Relative slack on rules 8 and 9's bounds, as in :mod:`analytics.load_model`: a deviation on the bound but
for rounding (N brokers each exactly r off the mean) is not above it."""

PositiveInt = Annotated[int, Field(ge=1)]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class RuleSettings(BaseModel):
    """Thresholds of the rules and both lifecycles' hysteresis (docs/alert-rules.md lists every default).

    The load rules (8, 9) open after ``open_after`` windows and resolve after ``resolve_after`` windows
    (per rule: ``*_by_rule``); the incident rules open once their condition has held ``for_s`` seconds and
    resolve once it has been clear ``resolve_after_s`` seconds (rule 2's ``for`` is ``urp_for_s``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rated_deviation: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.10
    """r: rule 8 fires when a broker's |r_n| > r, rule 9 when σ > r/N (docs/kafka-reference.md §4)."""
    open_after: PositiveInt = 3
    """k: consecutive evaluated windows a load rule must fire before its alert opens."""
    resolve_after: PositiveInt = 3
    """m: consecutive evaluated quiet windows before an open load alert resolves."""
    open_after_by_rule: dict[int, PositiveInt] = Field(default_factory=dict)
    """Per-load-rule k (rules 8 and 9)."""
    resolve_after_by_rule: dict[int, PositiveInt] = Field(default_factory=dict)
    """Per-load-rule m."""
    for_s: dict[int, Seconds] = Field(default_factory=dict)
    """Per-incident-rule ``for`` in seconds, over :data:`DEFAULT_FOR_S` (only the rules given change);
    rule 2's is ``urp_for_s``."""
    resolve_after_s: dict[int, Seconds] = Field(default_factory=dict)
    """Per-incident-rule resolve delay in seconds, over :data:`DEFAULT_RESOLVE_AFTER_S`."""
    urp_for_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 60.0
    """Rule 2's ``for``: URPs must have been seen for this long before the alert opens."""
    leader_election_grace_s: Seconds = 10.0
    """Rule 1: offline partitions that a live in-sync replica can lead are the controller's to fix; they
    page once offline this long (the others at once)."""
    leader_imbalance_per_broker_percentage: Annotated[int, Field(ge=0, le=100)] = 10
    """Kafka's ``leader.imbalance.per.broker.percentage`` (rule 7); set it to what the brokers use."""
    suspect_share: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.5
    """Rule 6: a broker missing from more than this share of the URPs' ISRs..."""
    suspect_min_urps: PositiveInt = 2
    """...and from at least this many of them."""
    controller_flap_changes: Annotated[int, Field(ge=2)] = 3
    """Rule 4: this many controller elections (epoch increments) within ``controller_flap_window_s`` is
    flapping; one is an ordinary failover, so at least 2."""
    controller_flap_window_s: PositiveSeconds = 300.0
    stale_after_s: PositiveSeconds = 60.0
    """Rule 11: the collector's ZooKeeper view is stale when last known good longer ago than this."""
    urp_mismatch_tolerance: Annotated[int, Field(ge=0)] = 0
    """Rule 10: |Σ gauges − ZooKeeper's count| above this is a disagreement."""

    @field_validator("open_after_by_rule", "resolve_after_by_rule")
    @classmethod
    def _load_rules(cls, value: dict[int, int]) -> dict[int, int]:
        _check_lane(value, "load", "it opens and resolves after for_s / resolve_after_s seconds")
        return value

    @field_validator("for_s", "resolve_after_s")
    @classmethod
    def _incident_rules(cls, value: dict[int, float], info: ValidationInfo) -> dict[int, float]:
        _check_lane(value, "incident", "it opens and resolves after open_after / resolve_after windows")
        if info.field_name == "for_s" and 2 in value:
            raise ValueError("rule 2's for is urp_for_s")
        return value

    def open_after_for(self, rule: int) -> int:
        return self.open_after_by_rule.get(rule, self.open_after)

    def resolve_after_for(self, rule: int) -> int:
        return self.resolve_after_by_rule.get(rule, self.resolve_after)

    def min_duration_s(self, rule: int) -> float:
        """How long a run of windows must last before a windowed alert opens (none for the load rules)."""
        return self.urp_for_s if rule == 2 else 0.0

    def for_s_of(self, rule: int) -> float:
        """How long an incident rule's condition must hold before its alert opens."""
        if rule == 2:
            return self.urp_for_s
        return self.for_s.get(rule, DEFAULT_FOR_S.get(rule, 0.0))

    def resolve_after_s_of(self, rule: int) -> float:
        """How long an open incident alert's condition must be clear before it resolves."""
        return self.resolve_after_s.get(rule, DEFAULT_RESOLVE_AFTER_S.get(rule, 0.0))


def _check_lane(value: Mapping[int, Any], lane: Lane, instead: str) -> None:
    unknown = sorted(set(value).difference(RULE_NUMBERS))
    if unknown:
        raise ValueError(f"no such rule: {unknown} (rules are numbered 1-13)")
    others = sorted(rule for rule in value if RULE_LANES[rule] != lane)
    if others:
        raise ValueError(
            f"rules {others} belong to the {RULE_LANES[others[0]]} lane: {instead} (docs/alert-rules.md)"
        )


@dataclass(frozen=True, slots=True)
class LoadLaneStatus:
    """What rule 11 needs to tell a silent load lane (a stopped collector or Spark job) from a quiet one:
    when its latest window was written, as the incident lane saw it arrive in the store."""

    latest_window_end: float | None
    """End of the cluster's latest load window in the store; None when the store never held one."""
    heard_at: float
    """When the incident lane first saw that window in the store (about when it was written), or began
    watching when there was none: a job that writes its windows late but regularly is not silent."""
    silent_after_s: float
    """No new load window for longer than this is silence (a multiple of the window)."""
    required: bool = False
    """Silence counts before the first window too (a deployment that must run the Spark job)."""


@dataclass(frozen=True, slots=True)
class RuleContext:
    window: Window
    """The load lane's event-time window; the incident lane's evaluation instant (``[now, now]``)."""
    now: float
    """The window's end (event time, so replays evaluate the same), or the incident lane's clock."""
    health: HealthState | None
    """The latest health state; None when the window had no cluster sample."""
    history: tuple[HealthState, ...]
    """Earlier states, oldest first (rule 4's flapping)."""
    load: LoadWindow | None
    """None when the window had no broker samples (and always in the incident lane)."""
    settings: RuleSettings
    load_lane: LoadLaneStatus | None = None
    """The load lane's heartbeat for rule 11 (incident lane); None: not checked."""
    stalled_actions: tuple[StalledAction, ...] | None = None
    """The runbook actions that are STALLED now (rule 12, incident lane); None: not checked (rule 12 is
    then not evaluated, so its alerts neither open nor resolve)."""


@dataclass(frozen=True, slots=True)
class StalledAction:
    """A runbook action the service's executors report STALLED (rule 12)."""

    id: str
    kind: str
    reason: str
    since: float | None = None


Needs = Literal["health", "current", "load", "actions"]
RuleCheck = Callable[[RuleContext], list[Finding]]


class Rule(NamedTuple):
    number: int
    check: RuleCheck
    needs: Needs


@dataclass(frozen=True, slots=True)
class Evaluation:
    evaluated: frozenset[int]
    """Rules whose inputs were present: for these, no finding means a clean window."""
    findings: tuple[Finding, ...]


# --- helpers -----------------------------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _examples(partitions: PartitionSet, topic: str) -> str:
    """``orders-0, orders-4 and 3 more`` from the collector's capped example list."""
    shown = partitions.examples.get(topic, ())[:EXAMPLES_IN_SUMMARY]
    names = ", ".join(f"{topic}-{p}" for p in shown)
    rest = partitions.by_topic.get(topic, 0) - len(shown)
    if not names:
        return ""
    return f"{names} and {rest} more" if rest > 0 else names


def _affected_topics(partitions: PartitionSet) -> list[tuple[str, int]]:
    return sorted((topic, n) for topic, n in partitions.by_topic.items() if n > 0)


def _partitions_query(**params: str | int) -> str:
    return f"/api/v1/partitions?{urlencode(params)}"


def _topic_evidence(partitions: PartitionSet, topic: str, count: int) -> dict[str, Any]:
    return {"topic": topic, "count": count, "examples": list(partitions.examples.get(topic, ()))}


def known_good_age(health: HealthState, now: float) -> float:
    """Seconds since the collector last knew its ZooKeeper view to be in sync (never negative)."""
    return max(0.0, now - health.last_good_at)


def is_current(health: HealthState, now: float, settings: RuleSettings) -> bool:
    """Whether the state can be trusted for the ZooKeeper-derived rules: exactly when rule 11 is quiet."""
    return not health.stale and known_good_age(health, now) <= settings.stale_after_s


# --- rules 1-3: partitions ---------------------------------------------------------------------------


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
                "brokers_down": list(health.brokers_down),
            },
            action=ActionRef("GET", _partitions_query(under_min_isr="true", topic=topic)),
        )
        for topic, n in _affected_topics(health.under_min_isr)
    ]


# --- rules 4-7: controller and brokers ---------------------------------------------------------------


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
            },
            action=ActionRef("POST", f"/api/v1/plans/drain-broker/{broker}", {"dry_run": True}),
        )
        for broker in sorted(set(health.brokers_down))
    ]


def _is_strong(suspect: Suspect, settings: RuleSettings) -> bool:
    return suspect.share > settings.suspect_share and suspect.missing_from >= settings.suspect_min_urps


def _top_suspect(health: HealthState, settings: RuleSettings) -> int | None:
    """The broker most URPs wait for, if the case is strong (rule 6's test; a down broker counts here)."""
    ranked = sorted(health.suspects, key=lambda s: (-s.missing_from, s.broker_id))
    return next((s.broker_id for s in ranked if _is_strong(s, settings)), None)


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


# --- rules 8-9: load ---------------------------------------------------------------------------------


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


# --- rules 10-11: our own signals --------------------------------------------------------------------


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


# --- evaluation --------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule(1, rule_1_offline_partitions, "current"),
    Rule(2, rule_2_under_replicated_partitions, "current"),
    Rule(3, rule_3_under_min_isr, "current"),
    Rule(4, rule_4_controller, "current"),
    Rule(5, rule_5_broker_not_registered, "current"),
    Rule(6, rule_6_suspect_broker, "current"),
    Rule(7, rule_7_preferred_leader_imbalance, "current"),
    Rule(8, rule_8_broker_load_deviation, "load"),
    Rule(9, rule_9_cluster_load_imbalance, "load"),
    Rule(10, rule_10_urp_gauges_disagree, "current"),
    Rule(11, rule_11_collector_stale, "health"),
    Rule(12, rule_12_action_stalled, "actions"),
    Rule(13, rule_13_state_unreadable, "current"),
)


def available_inputs(ctx: RuleContext) -> frozenset[Needs]:
    present: set[Needs] = set()
    if ctx.health is not None:
        present.add("health")
        if is_current(ctx.health, ctx.now, ctx.settings):
            present.add("current")
    if ctx.load is not None:
        present.add("load")
    if ctx.stalled_actions is not None:
        present.add("actions")
    return frozenset(present)


def evaluate(ctx: RuleContext, lane: Lane | None = None) -> Evaluation:
    """Every rule whose inputs the context has (only ``lane``'s rules when given), in rule order."""
    present = available_inputs(ctx)
    owned = RULE_NUMBERS if lane is None else lane_rules(lane)
    ran = [rule for rule in RULES if rule.needs in present and rule.number in owned]
    return Evaluation(
        evaluated=frozenset(rule.number for rule in ran),
        findings=tuple(finding for rule in ran for finding in rule.check(ctx)),
    )
