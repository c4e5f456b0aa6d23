"""The rules' numbers, lanes, default ``for``/resolve durations and settings (:class:`RuleSettings`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

RULE_NUMBERS = range(1, 20)

Lane = Literal["incident", "load"]
"""Who evaluates a rule and writes its alerts: ``incident``, the service's incident lane (live view,
time-based hysteresis); ``load``, the Spark job (event-time windows, windowed hysteresis)."""
LANES: tuple[Lane, ...] = ("incident", "load")
INCIDENT_RULES: frozenset[int] = frozenset({1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19})
"""Rules about the cluster's state, its brokers' resources (14-18: the live view's disks, gauges and ISR
changes), its consumer groups (19: the consumer-lag collector's verdicts) and our own view of it: the
incident lane's."""
LOAD_RULES: frozenset[int] = frozenset({8, 9})
"""Rules about the load model's statistics over a window: the Spark job's."""
RULE_LANES: Mapping[int, Lane] = {rule: "load" if rule in LOAD_RULES else "incident" for rule in RULE_NUMBERS}
"""The owner of every rule: exactly one lane each."""


def lane_of(rule: int) -> Lane:
    """The lane that owns ``rule`` (ValueError for a number that is not a rule)."""
    try:
        return RULE_LANES[rule]
    except KeyError:
        raise ValueError(f"no such rule: {rule} (rules are numbered 1-19)") from None


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
    14: 60.0,
    15: 0.0,
    16: 60.0,
    17: 60.0,
    18: 0.0,
    19: 0.0,
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
being changed) is read again within that time. Rule 14 waits 60 s, six scrapes: a log dir's fill and
growth must hold past a compaction's or a segment roll's blip. Rule 15 pages at once: a failed log dir stays
offline until its broker restarts, and its replicas are gone from the ISRs now. Rules 16 and 17 wait 60 s:
a one-minute rate dipping for one scrape is a burst (a leader election's metadata requests, a consumer
group's rebalance), a minute of it is a saturated broker. Rule 18 pages at once: its condition is already
counted over ``isr_flap_window_s``. Rule 19 pages at once: a group's verdict already waited its own time
(``stopped_after_s``, ``lagging_rounds``)."""

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
    14: 120.0,
    15: 30.0,
    16: 60.0,
    17: 60.0,
    18: 60.0,
    19: 30.0,
}
"""How long an open incident alert's condition must have been clear before it resolves: short for the
outage rules (1, 3) and for rule 11, so that "it is over" reaches on-call soon; longer where conditions
come and go (a flapping broker, an ISR that shrinks and expands) to keep one alert instead of a stream of
opened/resolved pairs. Rule 14 waits 120 s: a retention run drops a log dir below the line and the next
minutes' writes take it back over it. Rules 16-18 wait 60 s, a minute of calm after a minute of trouble.
Rule 19 waits 30 s: a group back to ``ok`` for a few rounds (three at the default interval)."""

BOUND_TOLERANCE = 1e-9
"""Relative slack on rules 8 and 9's bounds, as in :mod:`analytics.load_model`: a deviation on the bound but
for rounding (N brokers each exactly r off the mean) is not above it."""

PositiveInt = Annotated[int, Field(ge=1)]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Ratio = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


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
    disk_used_warning: Ratio = 0.85
    """Rule 14: a log dir at least this full (``1 - avail / size``) is a warning..."""
    disk_used_critical: Ratio = 0.95
    """...and at least this full critical."""
    disk_full_warning_s: PositiveSeconds = 6 * 3600.0
    """Rule 14: a log dir full within this long at its growth is a warning..."""
    disk_full_critical_s: PositiveSeconds = 3600.0
    """...and within this long critical."""
    request_handler_idle_warning: Ratio = 0.20
    """Rule 16: request handlers idle less than this (a fraction) is a warning..."""
    request_handler_idle_critical: Ratio = 0.10
    """...and less than this critical."""
    network_processor_idle_warning: Ratio = 0.30
    """Rule 16: network processors idle less than this is a warning."""
    fds_warning: Ratio = 0.80
    """Rule 17: open file descriptors at least this share of ``process_max_fds`` is a warning..."""
    fds_critical: Ratio = 0.95
    """...and at least this share critical."""
    isr_flap_changes: Annotated[int, Field(ge=2)] = 6
    """Rule 18: one replica leaving or rejoining its ISR this many times within ``isr_flap_window_s`` is
    flapping (a leave and a rejoin are two changes; a restart makes two, so at least 2)."""
    isr_flap_window_s: PositiveSeconds = 300.0

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

    @model_validator(mode="after")
    def _ordered(self) -> RuleSettings:
        """A critical threshold is never milder than its warning's."""
        pairs = (
            ("disk_used_warning", "disk_used_critical"),
            ("disk_full_critical_s", "disk_full_warning_s"),
            ("request_handler_idle_critical", "request_handler_idle_warning"),
            ("fds_warning", "fds_critical"),
        )
        for low, high in pairs:
            if getattr(self, low) > getattr(self, high):
                raise ValueError(
                    f"{low} ({getattr(self, low):g}) must be at most {high} ({getattr(self, high):g})"
                )
        return self

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
        raise ValueError(f"no such rule: {unknown} (rules are numbered 1-19)")
    others = sorted(rule for rule in value if RULE_LANES[rule] != lane)
    if others:
        raise ValueError(
            f"rules {others} belong to the {RULE_LANES[others[0]]} lane: {instead} (docs/alert-rules.md)"
        )
