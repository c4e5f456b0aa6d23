"""The alert rules (docs/alert-rules.md): nineteen small, numbered, pure functions of one evaluation's state.

Each rule takes a :class:`RuleContext` (the cluster's latest health state, the load window, earlier states
and ``now``) and returns its findings, one per subject, or ``[]`` when quiet. A rule says nothing about
time beyond its inputs: how long it must fire before an alert opens, and how long it must be quiet before
it resolves, is the lifecycle's business (:mod:`analytics.lifecycle`), driven by :class:`RuleSettings`.

Every rule has one owner, its **lane** (:data:`RULE_LANES`): the *incident* lane (``kafka-health serve``,
on every change of its live ZooKeeper view and on a timer, time-based hysteresis) owns rules 1-7 and
10-19; the *load* lane (the Spark job, per event-time window, windowed hysteresis) owns the load rules 8
and 9, whose statistics only make sense over a window. :func:`evaluate` runs one lane's rules when asked, and
the store refuses an alert written by the lane that does not own its rule.

:func:`evaluate` runs the rules whose inputs are present and says which ones ran, so that an evaluation
without a health state (or with a stale one) neither confirms nor clears an alert:

- ``health`` rules need a health state (rule 11 only);
- ``current`` rules need a health state that is current: not stale and known good within
  ``stale_after_s`` (rules 1-7, 10 and 13). While the ZooKeeper view is stale its snapshot is frozen at the
  last known state, and comparing it with live JMX gauges (rule 10) would invent disagreements; rule 11
  says why the others are paused;
- ``load`` rules need the load window (rules 8 and 9);
- ``resources`` rules need the brokers' resources (:class:`~analytics.model.BrokerResources`, which only
  the incident lane's live view has: its scrape, disk model and successive snapshots) and a current state
  (rules 14-18);
- ``consumers`` rules need a current round of the consumer-lag collector (rule 19, incident lane).

Rules 1-3 and 6 name their causes (:mod:`analytics.rules.causes`): the incident lane links each page of
partitions lagging on a broker to the rule-5/14-18 alerts open on that broker.

Summaries are stable while the condition is: a count or a broker in the summary changes only when the
incident does, because the lifecycle sends an ``updated`` event whenever an open alert's summary changes.
Exact figures (deviation rates, σ, ages) go into the evidence.

The rules live in modules by subject (``partitions``: 1-3, ``brokers``: 4-7, ``load``: 8-9, ``signals``:
10-13, ``resources``: 14-18, ``consumers``: 19), their settings in ``settings``, their inputs in
``context``; this module holds the registry (:data:`RULES`) and :func:`evaluate`, and re-exports them all.
"""

from __future__ import annotations

from analytics.rules.brokers import (
    controller_elections,
    rule_4_controller,
    rule_5_broker_not_registered,
    rule_6_suspect_broker,
    rule_7_preferred_leader_imbalance,
)
from analytics.rules.causes import CAUSE_RULES, EXPLAINED_RULES, held_causes, link_causes, subject_broker
from analytics.rules.consumers import rule_19_consumer_group
from analytics.rules.context import (
    EXAMPLES_IN_SUMMARY,
    Evaluation,
    LoadLaneStatus,
    Needs,
    Rule,
    RuleCheck,
    RuleContext,
    StalledAction,
    is_current,
    known_good_age,
)
from analytics.rules.load import rule_8_broker_load_deviation, rule_9_cluster_load_imbalance
from analytics.rules.partitions import (
    rule_1_offline_partitions,
    rule_2_under_replicated_partitions,
    rule_3_under_min_isr,
)
from analytics.rules.resources import (
    rule_14_log_dir_filling,
    rule_15_log_dir_offline,
    rule_16_broker_saturated,
    rule_17_file_descriptors,
    rule_18_isr_flapping,
)
from analytics.rules.settings import (
    BOUND_TOLERANCE,
    DEFAULT_FOR_S,
    DEFAULT_RESOLVE_AFTER_S,
    INCIDENT_RULES,
    LANES,
    LOAD_RULES,
    RULE_LANES,
    RULE_NUMBERS,
    Lane,
    RuleSettings,
    lane_of,
    lane_rules,
)
from analytics.rules.signals import (
    LOAD_LANE_SUBJECT,
    STATE_UNREADABLE_SUBJECT,
    VIEW_SUBJECT,
    rule_10_urp_gauges_disagree,
    rule_11_collector_stale,
    rule_12_action_stalled,
    rule_13_state_unreadable,
)

__all__ = [
    "BOUND_TOLERANCE",
    "CAUSE_RULES",
    "DEFAULT_FOR_S",
    "DEFAULT_RESOLVE_AFTER_S",
    "EXAMPLES_IN_SUMMARY",
    "EXPLAINED_RULES",
    "INCIDENT_RULES",
    "LANES",
    "LOAD_LANE_SUBJECT",
    "LOAD_RULES",
    "RULES",
    "RULE_LANES",
    "RULE_NUMBERS",
    "STATE_UNREADABLE_SUBJECT",
    "VIEW_SUBJECT",
    "Evaluation",
    "Lane",
    "LoadLaneStatus",
    "Needs",
    "Rule",
    "RuleCheck",
    "RuleContext",
    "RuleSettings",
    "StalledAction",
    "available_inputs",
    "controller_elections",
    "evaluate",
    "held_causes",
    "is_current",
    "known_good_age",
    "lane_of",
    "lane_rules",
    "link_causes",
    "rule_1_offline_partitions",
    "rule_2_under_replicated_partitions",
    "rule_3_under_min_isr",
    "rule_4_controller",
    "rule_5_broker_not_registered",
    "rule_6_suspect_broker",
    "rule_7_preferred_leader_imbalance",
    "rule_8_broker_load_deviation",
    "rule_9_cluster_load_imbalance",
    "rule_10_urp_gauges_disagree",
    "rule_11_collector_stale",
    "rule_12_action_stalled",
    "rule_13_state_unreadable",
    "rule_14_log_dir_filling",
    "rule_15_log_dir_offline",
    "rule_16_broker_saturated",
    "rule_17_file_descriptors",
    "rule_18_isr_flapping",
    "rule_19_consumer_group",
    "subject_broker",
]

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
    Rule(14, rule_14_log_dir_filling, "resources"),
    Rule(15, rule_15_log_dir_offline, "resources"),
    Rule(16, rule_16_broker_saturated, "resources"),
    Rule(17, rule_17_file_descriptors, "resources"),
    Rule(18, rule_18_isr_flapping, "resources"),
    Rule(19, rule_19_consumer_group, "consumers"),
)


def available_inputs(ctx: RuleContext) -> frozenset[Needs]:
    present: set[Needs] = set()
    if ctx.health is not None:
        present.add("health")
        if is_current(ctx.health, ctx.now, ctx.settings):
            present.add("current")
            if ctx.resources is not None:
                present.add("resources")
    if ctx.load is not None:
        present.add("load")
    if ctx.stalled_actions is not None:
        present.add("actions")
    if ctx.consumer_groups is not None:
        present.add("consumers")
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
