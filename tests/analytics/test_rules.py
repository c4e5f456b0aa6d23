"""The alert rules over hand-built health states and load windows: one test class per rule, then
:func:`evaluate` and the settings.

``health()`` builds a healthy four-broker cluster as a collector would report it; each test states only
what is wrong with it. ``load()`` builds a load window from the brokers' shares of the cluster load.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from analytics.model import (
    BrokerLoad,
    Finding,
    HealthState,
    LeaderImbalance,
    LoadWindow,
    PartitionSet,
    Suspect,
    Window,
)
from analytics.rules import (
    DEFAULT_FOR_S,
    DEFAULT_RESOLVE_AFTER_S,
    INCIDENT_RULES,
    LOAD_LANE_SUBJECT,
    LOAD_RULES,
    RULE_LANES,
    RULES,
    VIEW_SUBJECT,
    LoadLaneStatus,
    RuleContext,
    RuleSettings,
    StalledAction,
    controller_elections,
    evaluate,
    lane_of,
    lane_rules,
    rule_1_offline_partitions,
    rule_2_under_replicated_partitions,
    rule_3_under_min_isr,
    rule_4_controller,
    rule_5_broker_not_registered,
    rule_6_suspect_broker,
    rule_7_preferred_leader_imbalance,
    rule_8_broker_load_deviation,
    rule_9_cluster_load_imbalance,
    rule_10_urp_gauges_disagree,
    rule_11_collector_stale,
    rule_12_action_stalled,
    rule_13_state_unreadable,
    rule_19_consumer_group,
)
from collectors.consumers.collector import GroupReport
from collectors.consumers.lag import GroupLag, LagSeconds, PartitionLag
from collectors.consumers.verdicts import Verdict
from tests.support.health import healthy_state

pytestmark = pytest.mark.unit

CLUSTER = "prod"
NOW = 1_700_000_000.0
WINDOW = Window(CLUSTER, NOW - 30.0, NOW)

# --- builders ----------------------------------------------------------------------------------------


def partitions(**by_topic: tuple[int, ...]) -> PartitionSet:
    """A PartitionSet listing every partition as an example (the collector caps the list; see ``capped``)."""
    return PartitionSet(
        count=sum(len(p) for p in by_topic.values()),
        by_topic={t: len(p) for t, p in by_topic.items()},
        examples=dict(by_topic),
    )


def health(**changes: Any) -> HealthState:
    """A healthy 4-broker cluster sampled 5 s before the window's end; ``changes`` say what is wrong."""
    base = healthy_state(CLUSTER, NOW - 5.0, snapshot_version=7, taken_at=NOW - 500.0, controller_epoch=5)
    return replace(base, **changes)


def load(*shares: float, rated_deviation: float = 0.10) -> LoadWindow:
    """A load window whose brokers 1..N carry ``shares`` (Db) of the cluster load (docs/kafka-reference.md
    §4)."""
    n = len(shares)
    avg = 1.0 / n
    brokers = tuple(
        BrokerLoad(
            broker=i + 1,
            metrics={"cpuUsed": db * 8.0},
            shares={"cpuUsed": db},
            weighted_load=db,
            normalized_load=db,
            deviation_rate=(db - avg) / avg,
        )
        for i, db in enumerate(shares)
    )
    stddev = math.sqrt(sum((db - avg) ** 2 for db in shares) / n)
    return LoadWindow(WINDOW, brokers, stddev, rated_deviation / n, rated_deviation)


def ctx(
    state: HealthState | None = None,
    *,
    load_window: LoadWindow | None = None,
    history: tuple[HealthState, ...] = (),
    settings: RuleSettings | None = None,
    now: float = NOW,
    load_lane: LoadLaneStatus | None = None,
    stalled_actions: tuple[StalledAction, ...] | None = None,
) -> RuleContext:
    return RuleContext(
        window=WINDOW,
        now=now,
        health=state,
        history=history,
        load=load_window,
        settings=settings or RuleSettings(),
        load_lane=load_lane,
        stalled_actions=stalled_actions,
    )


def subjects(findings: list[Finding]) -> list[str]:
    return [f.subject for f in findings]


# --- rule 1 ------------------------------------------------------------------------------------------


class TestRule1OfflinePartitions:
    def test_fires_per_topic_with_examples_and_action(self) -> None:
        state = health(offline=partitions(orders=(0, 4, 7, 9, 11), audit=(2,)), brokers_down=(3,))
        findings = rule_1_offline_partitions(ctx(state))
        assert subjects(findings) == ["topic:audit", "topic:orders"]
        audit, orders = findings
        assert orders.rule == 1
        assert orders.severity == "critical"
        assert orders.summary.startswith(
            "orders: 5 partitions offline (orders-0, orders-4, orders-7 and 2 more)"
        )
        assert audit.summary.startswith("audit: 1 partition offline (audit-2)")
        assert orders.evidence["count"] == 5
        assert orders.evidence["cluster_offline"] == 6
        assert orders.evidence["brokers_down"] == [3]
        assert orders.action is not None
        assert orders.action.method == "GET"
        assert orders.action.path == "/api/v1/partitions?offline=true&topic=orders"

    def test_examples_capped_by_the_collector_still_count_right(self) -> None:
        capped = PartitionSet(count=40, by_topic={"orders": 40}, examples={"orders": (0, 1)})
        (finding,) = rule_1_offline_partitions(ctx(health(offline=capped)))
        assert "40 partitions offline (orders-0, orders-1 and 38 more)" in finding.summary

    def test_topic_name_is_url_encoded_in_the_action(self) -> None:
        (finding,) = rule_1_offline_partitions(ctx(health(offline=partitions(**{"a b&c": (0,)}))))
        assert finding.action is not None
        assert finding.action.path == "/api/v1/partitions?offline=true&topic=a+b%26c"

    def test_a_leader_election_pending_waits_its_grace_and_an_unelectable_partition_does_not(self) -> None:
        """A crashed broker's leaderships are offline until the controller moves them to a live in-sync
        replica: that is the controller's to fix within ``leader_election_grace_s``; a partition no live
        in-sync replica can lead pages at once (``for_s`` None: the rule's own, 0)."""
        moving = health(offline=partitions(orders=(0, 1)), offline_electable=partitions(orders=(0, 1)))
        (finding,) = rule_1_offline_partitions(ctx(moving))
        assert finding.for_s == 10.0
        assert finding.summary.endswith("until the controller elects one of their live in-sync replicas")
        assert finding.evidence["electable"] == 2
        stuck = replace(moving, offline_electable=partitions(orders=(0,)))
        (finding,) = rule_1_offline_partitions(ctx(stuck, settings=RuleSettings(leader_election_grace_s=3.0)))
        assert finding.for_s is None
        assert finding.summary.endswith("clients can neither produce nor consume")
        (finding,) = rule_1_offline_partitions(
            ctx(moving, settings=RuleSettings(leader_election_grace_s=3.0))
        )
        assert finding.for_s == 3.0

    def test_quiet_on_a_healthy_cluster_or_without_a_sample(self) -> None:
        assert rule_1_offline_partitions(ctx(health())) == []
        assert rule_1_offline_partitions(ctx(None)) == []
        zero = PartitionSet(count=0, by_topic={"orders": 0})
        assert rule_1_offline_partitions(ctx(health(offline=zero))) == []


# --- rule 2 ------------------------------------------------------------------------------------------


class TestRule2UnderReplicated:
    def test_fires_per_topic_as_a_warning(self) -> None:
        state = health(under_replicated=partitions(orders=(0, 3)))
        (finding,) = rule_2_under_replicated_partitions(ctx(state))
        assert finding.subject == "topic:orders"
        assert finding.severity == "warning"
        assert finding.summary == "orders: 2 partitions under-replicated (orders-0, orders-3)"
        assert finding.action is not None
        assert finding.action.path == "/api/v1/partitions?under_replicated=true&topic=orders"

    def test_names_a_strong_suspect(self) -> None:
        state = health(
            under_replicated=partitions(orders=(0, 3, 5)),
            suspects=(Suspect(2, missing_from=3, share=1.0), Suspect(4, missing_from=1, share=1 / 3)),
        )
        (finding,) = rule_2_under_replicated_partitions(ctx(state))
        assert finding.summary.endswith("; most miss broker 2")
        assert finding.evidence["suspect"] == 2

    def test_quiet_without_urps(self) -> None:
        assert rule_2_under_replicated_partitions(ctx(health())) == []

    def test_the_for_duration_is_the_lifecycles(self) -> None:
        settings = RuleSettings(urp_for_s=90.0)
        assert settings.min_duration_s(2) == 90.0
        assert settings.min_duration_s(1) == 0.0
        assert settings.min_duration_s(3) == 0.0


# --- rule 3 ------------------------------------------------------------------------------------------


class TestRule3UnderMinIsr:
    def test_fires_critical_per_topic(self) -> None:
        state = health(under_replicated=partitions(orders=(1, 5, 6)), under_min_isr=partitions(orders=(1, 5)))
        (finding,) = rule_3_under_min_isr(ctx(state))
        assert finding.subject == "topic:orders"
        assert finding.severity == "critical"
        assert "2 partitions below min.insync.replicas (orders-1, orders-5)" in finding.summary
        assert "acks=all" in finding.summary
        assert finding.action is not None
        assert finding.action.path == "/api/v1/partitions?under_min_isr=true&topic=orders"

    def test_at_min_isr_is_not_under(self) -> None:
        assert rule_3_under_min_isr(ctx(health(at_min_isr=partitions(orders=(1,))))) == []


# --- rule 4 ------------------------------------------------------------------------------------------


def at(offset_s: float, epoch: int | None, controller: int | None = 1) -> HealthState:
    """A earlier window's state ``offset_s`` seconds before now."""
    return health(timestamp=NOW - offset_s, controller_epoch=epoch, controller_id=controller)


class TestRule4Controller:
    def test_no_controller_is_critical(self) -> None:
        (finding,) = rule_4_controller(ctx(health(controller_id=None, controller_epoch=5)))
        assert finding.subject == "controller"
        assert finding.severity == "critical"
        assert "no active controller" in finding.summary

    def test_a_controller_that_is_not_registered_is_none(self) -> None:
        (finding,) = rule_4_controller(ctx(health(controller_id=9)))
        assert finding.severity == "critical"
        assert "broker 9, is not registered" in finding.summary

    def test_a_kraft_controller_during_a_migration_is_a_controller(self) -> None:
        """During a ZK→KRaft migration the KRaft controller's node id is in /controller, not /brokers/ids,
        and no ZK broker's ActiveControllerCount is 1."""
        kraft = health(controller_id=3000, controller_kraft_epoch=2, active_controller_gauges=0.0)
        assert kraft.controller_is_kraft
        assert rule_4_controller(ctx(kraft)) == []
        # a ZK-mode controller (kraftControllerEpoch -1) that is not registered still is one
        (finding,) = rule_4_controller(ctx(replace(kraft, controller_kraft_epoch=-1)))
        assert "broker 3000, is not registered" in finding.summary
        assert finding.evidence["kraft_controller"] is False

    def test_two_controllers_by_the_gauges(self) -> None:
        (finding,) = rule_4_controller(ctx(health(active_controller_gauges=2.0)))
        assert finding.severity == "critical"
        assert "2 brokers report ActiveControllerCount=1" in finding.summary
        assert finding.evidence["active_controller_gauges"] == 2.0

    @pytest.mark.parametrize("gauges", [None, 0.0, 1.0, 1.4])
    def test_one_or_unknown_gauges_are_quiet(self, gauges: float | None) -> None:
        assert rule_4_controller(ctx(health(active_controller_gauges=gauges))) == []

    def test_flapping_from_history_is_a_warning(self) -> None:
        history = (at(250, 5), at(200, 6), at(100, 7))
        (finding,) = rule_4_controller(ctx(health(controller_epoch=8), history=history))
        assert finding.severity == "warning"
        assert finding.summary == "controller flapping: ≥3 elections in 300 s"
        assert finding.evidence["elections"] == 3

    def test_elections_before_the_flap_window_do_not_count(self) -> None:
        history = (at(900, 5), at(600, 6), at(400, 7), at(100, 8))
        assert rule_4_controller(ctx(health(controller_epoch=9), history=history)) == []

    def test_one_failover_is_not_flapping(self) -> None:
        history = (at(200, 5), at(100, 5))
        assert rule_4_controller(ctx(health(controller_epoch=6), history=history)) == []

    def test_epoch_jumps_count_every_election_between_samples(self) -> None:
        (finding,) = rule_4_controller(ctx(health(controller_epoch=8), history=(at(60, 5),)))
        assert finding.evidence["elections"] == 3

    def test_no_controller_while_flapping_is_one_critical_finding(self) -> None:
        history = (at(200, 5), at(100, 8))
        (finding,) = rule_4_controller(
            ctx(health(controller_id=None, controller_epoch=None), history=history)
        )
        assert finding.severity == "critical"
        assert "no active controller" in finding.summary
        assert "flapping" in finding.summary

    def test_elections_skip_states_without_a_controller(self) -> None:
        states = (at(30, 5), at(20, None, None), at(10, 6), at(5, 6))
        assert controller_elections(states) == 1

    def test_quiet_on_a_healthy_cluster(self) -> None:
        assert rule_4_controller(ctx(health(), history=(at(200, 5), at(100, 5)))) == []


# --- rule 5 ------------------------------------------------------------------------------------------


class TestRule5BrokerNotRegistered:
    def test_fires_per_down_broker_with_the_drain_plan(self) -> None:
        state = health(brokers=(1, 2), brokers_down=(3, 4), under_replicated=partitions(t=(0, 1)))
        findings = rule_5_broker_not_registered(ctx(state))
        assert subjects(findings) == ["broker:3", "broker:4"]
        assert {f.severity for f in findings} == {"critical"}
        assert findings[0].action is not None
        assert findings[0].action.method == "POST"
        assert findings[0].action.path == "/api/v1/plans/drain-broker/3"
        assert findings[0].evidence["cluster_under_replicated"] == 2
        assert "broker 3 holds replicas but is not registered" in findings[0].summary

    def test_quiet_when_every_broker_is_registered(self) -> None:
        assert rule_5_broker_not_registered(ctx(health())) == []


# --- rule 6 ------------------------------------------------------------------------------------------


class TestRule6SuspectBroker:
    def urps(self, *suspects: Suspect, count: int = 10, **changes: Any) -> list[Finding]:
        state = health(
            under_replicated=PartitionSet(count=count, by_topic={"t": count}),
            suspects=suspects,
            **changes,
        )
        return rule_6_suspect_broker(ctx(state))

    def test_fires_above_the_share(self) -> None:
        (finding,) = self.urps(Suspect(2, 9, 0.9), Suspect(3, 1, 0.1))
        assert finding.subject == "broker:2"
        assert finding.severity == "warning"
        assert "missing from the ISR of 9 of 10 under-replicated partitions" in finding.summary
        assert finding.action is not None
        assert finding.action.path == "/api/v1/partitions?under_replicated=true&broker=2"

    def test_exactly_the_share_is_not_more(self) -> None:
        assert self.urps(Suspect(2, 5, 0.5)) == []
        assert subjects(self.urps(Suspect(2, 6, 0.6))) == ["broker:2"]

    def test_needs_at_least_the_minimum_urps(self) -> None:
        assert self.urps(Suspect(2, 1, 1.0), count=1) == []
        assert subjects(self.urps(Suspect(2, 2, 1.0), count=2)) == ["broker:2"]

    def test_settings_move_the_threshold(self) -> None:
        state = health(
            under_replicated=PartitionSet(count=10, by_topic={"t": 10}), suspects=(Suspect(2, 4, 0.4),)
        )
        assert rule_6_suspect_broker(ctx(state)) == []
        assert len(rule_6_suspect_broker(ctx(state, settings=RuleSettings(suspect_share=0.3)))) == 1

    def test_a_down_broker_is_left_to_rule_5(self) -> None:
        assert self.urps(Suspect(3, 10, 1.0), brokers=(1, 2, 4), brokers_down=(3,)) == []


# --- rule 7 ------------------------------------------------------------------------------------------


class TestRule7PreferredLeaderImbalance:
    def imbalance(self, led_by_others: int, preferred: int = 10, **settings: Any) -> list[Finding]:
        entry = LeaderImbalance(2, preferred, led_by_others, led_by_others / preferred)
        return rule_7_preferred_leader_imbalance(
            ctx(health(imbalance=(entry,)), settings=RuleSettings(**settings))
        )

    def test_at_the_percentage_is_quiet_like_kafka(self) -> None:
        assert self.imbalance(1) == []  # 10% is not above 10%

    def test_above_is_info_and_twice_above_is_a_warning(self) -> None:
        (info,) = self.imbalance(2)
        assert info.subject == "broker:2"
        assert info.severity == "info"
        assert info.evidence["ratio"] == pytest.approx(0.2)
        assert "preferred leader of 10 partitions but 2 are led by other brokers" in info.summary
        assert info.action is not None
        assert info.action.path == "/api/v1/actions/preferred-replica-election"
        assert info.action.body == {"scope": "all", "dry_run": True}
        (warning,) = self.imbalance(3)
        assert warning.severity == "warning"

    def test_uses_the_configured_percentage(self) -> None:
        assert self.imbalance(2, leader_imbalance_per_broker_percentage=20) == []
        assert len(self.imbalance(1, leader_imbalance_per_broker_percentage=5)) == 1
        assert len(self.imbalance(1, preferred=1000, leader_imbalance_per_broker_percentage=0)) == 1

    def test_brokers_without_preferred_partitions_or_not_registered_are_skipped(self) -> None:
        entries = (LeaderImbalance(4, 0, 0, 0.0), LeaderImbalance(7, 10, 10, 1.0))
        assert rule_7_preferred_leader_imbalance(ctx(health(imbalance=entries))) == []


# --- rules 8 and 9 -----------------------------------------------------------------------------------


class TestRule8BrokerLoadDeviation:
    def test_fires_for_brokers_beyond_r(self) -> None:
        findings = rule_8_broker_load_deviation(ctx(load_window=load(0.30, 0.25, 0.25, 0.20)))
        assert subjects(findings) == ["broker:1", "broker:4"]
        over, under = findings
        assert over.severity == "warning"
        assert "more than 10% above the cluster average" in over.summary
        assert "below" in under.summary
        assert over.evidence["deviation_rate"] == pytest.approx(0.2)
        assert under.evidence["deviation_rate"] == pytest.approx(-0.2)
        assert over.action is not None
        assert over.action.path == "/api/v1/plans/rebalance"
        assert over.action.body == {"rated_deviation": 0.1}

    def test_within_r_is_quiet(self) -> None:
        assert rule_8_broker_load_deviation(ctx(load_window=load(0.26, 0.25, 0.25, 0.24))) == []

    def test_on_the_bound_is_not_above_it(self) -> None:
        window = load(0.275, 0.225, 0.25, 0.25)  # r_n = ±0.1 but for rounding
        assert rule_8_broker_load_deviation(ctx(load_window=window)) == []

    def test_summary_does_not_change_with_the_exact_deviation(self) -> None:
        a = rule_8_broker_load_deviation(ctx(load_window=load(0.30, 0.25, 0.25, 0.20)))
        b = rule_8_broker_load_deviation(ctx(load_window=load(0.31, 0.25, 0.25, 0.19)))
        assert [f.summary for f in a] == [f.summary for f in b]

    def test_needs_a_load_window(self) -> None:
        assert rule_8_broker_load_deviation(ctx(health())) == []


class TestRule9ClusterLoadImbalance:
    def test_fires_above_r_over_n(self) -> None:
        (finding,) = rule_9_cluster_load_imbalance(ctx(load_window=load(0.30, 0.25, 0.25, 0.20)))
        assert finding.subject == "cluster"
        assert finding.severity == "warning"
        assert finding.evidence["threshold"] == pytest.approx(0.025)
        assert finding.evidence["stddev"] == pytest.approx(math.sqrt(0.00125))
        assert finding.evidence["most_loaded"] == 1
        assert finding.evidence["least_loaded"] == 4
        assert "r/N = 0.025" in finding.summary

    def test_every_broker_exactly_r_off_is_on_the_bound(self) -> None:
        assert rule_9_cluster_load_imbalance(ctx(load_window=load(0.275, 0.225, 0.275, 0.225))) == []

    def test_below_r_over_n_is_quiet(self) -> None:
        window = load(0.27, 0.23, 0.27, 0.23)  # σ = 0.02 < 0.025
        assert rule_9_cluster_load_imbalance(ctx(load_window=window)) == []

    def test_uses_the_rules_rated_deviation(self) -> None:
        window = load(0.27, 0.23, 0.27, 0.23)
        settings = RuleSettings(rated_deviation=0.05)
        (finding,) = rule_9_cluster_load_imbalance(ctx(load_window=window, settings=settings))
        assert finding.evidence["threshold"] == pytest.approx(0.0125)

    def test_a_single_broker_is_balanced(self) -> None:
        assert rule_9_cluster_load_imbalance(ctx(load_window=load(1.0))) == []


# --- rule 10 -----------------------------------------------------------------------------------------


class TestRule10UrpGaugesDisagree:
    def test_fires_when_the_gauges_disagree(self) -> None:
        (finding,) = rule_10_urp_gauges_disagree(ctx(health(urp_gauges=7.0, urp_zookeeper=5)))
        assert finding.subject == "cluster"
        assert finding.severity == "warning"
        assert "add up to 7 but ZooKeeper shows 5 under-replicated partitions" in finding.summary
        assert finding.evidence == {"gauges": 7, "zookeeper": 5, "tolerance": 0, "brokers_down": []}

    def test_agreement_is_quiet(self) -> None:
        assert rule_10_urp_gauges_disagree(ctx(health(urp_gauges=5.0, urp_zookeeper=5))) == []

    @pytest.mark.parametrize(
        "changes",
        [
            {"urp_gauges": None, "urp_zookeeper": None},
            {"urp_gauges": None, "urp_zookeeper": 5},
            {"urp_gauges": 3.0, "urp_zookeeper": 5, "urp_gauges_missing": (2,)},
            {"urp_gauges": math.nan, "urp_zookeeper": 5},
        ],
    )
    def test_ignored_when_the_gauges_are_unknown_or_incomplete(self, changes: dict[str, Any]) -> None:
        assert rule_10_urp_gauges_disagree(ctx(health(**changes))) == []

    def test_tolerance(self) -> None:
        state = health(urp_gauges=6.0, urp_zookeeper=5)
        assert rule_10_urp_gauges_disagree(ctx(state, settings=RuleSettings(urp_mismatch_tolerance=1))) == []
        assert len(rule_10_urp_gauges_disagree(ctx(state))) == 1


# --- rule 11 -----------------------------------------------------------------------------------------


class TestRule11CollectorStale:
    def test_stale_flag_fires(self) -> None:
        (finding,) = rule_11_collector_stale(ctx(health(stale=True, last_good_at=NOW - 10.0)))
        assert finding.subject == VIEW_SUBJECT == "view:zookeeper"  # names no process: survives failovers
        assert finding.severity == "critical"
        assert "stale (ZooKeeper session lost or resync running)" in finding.summary
        assert finding.evidence["age_s"] == 10.0
        assert finding.evidence["collector_id"] == "collector-1"  # who saw it: evidence, not identity

    def test_old_last_good_at_fires(self) -> None:
        (finding,) = rule_11_collector_stale(ctx(health(last_good_at=NOW - 61.0)))
        assert "last in sync more than 60 s ago" in finding.summary
        assert finding.evidence["stale"] is False

    def test_within_stale_after_is_quiet(self) -> None:
        assert rule_11_collector_stale(ctx(health(last_good_at=NOW - 60.0))) == []
        assert rule_11_collector_stale(ctx(health())) == []

    def test_never_in_sync_fires(self) -> None:
        assert len(rule_11_collector_stale(ctx(health(last_good_at=0.0)))) == 1

    def test_summary_does_not_change_as_the_age_grows(self) -> None:
        a = rule_11_collector_stale(ctx(health(stale=True, last_good_at=NOW - 100.0)))
        b = rule_11_collector_stale(ctx(health(stale=True, last_good_at=NOW - 200.0)))
        assert [f.summary for f in a] == [f.summary for f in b]

    def test_a_silent_load_lane_is_a_warning(self) -> None:
        """Silence is time since the latest window was written (seen in the store), not its age: a job
        that writes late but regularly is alive."""
        lane = LoadLaneStatus(latest_window_end=NOW - 500.0, heard_at=NOW - 121.0, silent_after_s=120.0)
        (finding,) = rule_11_collector_stale(ctx(health(), load_lane=lane))
        assert finding.subject == LOAD_LANE_SUBJECT == "lane:load"
        assert finding.severity == "warning"
        assert "load lane is silent" in finding.summary
        assert "rules 8, 9" in finding.summary
        assert finding.evidence == {
            "latest_window_end": NOW - 500.0,
            "silent_s": 121.0,
            "silent_after_s": 120.0,
            "required": False,
        }

    def test_a_recently_written_window_is_quiet_however_old_its_end(self) -> None:
        lane = LoadLaneStatus(latest_window_end=NOW - 500.0, heard_at=NOW - 120.0, silent_after_s=120.0)
        assert rule_11_collector_stale(ctx(health(), load_lane=lane)) == []

    def test_without_any_load_window_the_check_is_not_armed_unless_required(self) -> None:
        never = LoadLaneStatus(latest_window_end=None, heard_at=NOW - 200.0, silent_after_s=120.0)
        assert rule_11_collector_stale(ctx(health(), load_lane=never)) == []
        (finding,) = rule_11_collector_stale(ctx(health(), load_lane=replace(never, required=True)))
        assert "no load window was ever written" in finding.summary
        assert finding.evidence["silent_s"] == 200.0
        assert (
            rule_11_collector_stale(ctx(health(), load_lane=replace(never, required=True, heard_at=NOW)))
            == []
        )

    def test_a_stale_view_and_a_silent_lane_are_two_findings(self) -> None:
        lane = LoadLaneStatus(latest_window_end=NOW - 500.0, heard_at=NOW - 500.0, silent_after_s=120.0)
        findings = rule_11_collector_stale(ctx(health(stale=True), load_lane=lane))
        assert subjects(findings) == [VIEW_SUBJECT, LOAD_LANE_SUBJECT]

    def test_the_silent_summary_does_not_change_as_the_silence_grows(self) -> None:
        def summary(age: float) -> str:
            lane = LoadLaneStatus(latest_window_end=NOW - age, heard_at=NOW - age, silent_after_s=120.0)
            return rule_11_collector_stale(ctx(health(), load_lane=lane))[0].summary

        assert summary(200.0) == summary(2000.0)


# --- evaluate ----------------------------------------------------------------------------------------


def everything_wrong() -> HealthState:
    return health(
        controller_id=None,
        brokers=(1, 2, 4),
        brokers_down=(3,),
        offline=partitions(orders=(0,)),
        under_replicated=partitions(orders=(0, 1, 2)),
        under_min_isr=partitions(orders=(1,)),
        suspects=(Suspect(2, 3, 1.0),),
        imbalance=(LeaderImbalance(1, 10, 5, 0.5),),
        urp_gauges=1.0,
        urp_zookeeper=2,
        unknown=partitions(payments=(3,)),
    )


class TestRule12:
    def test_each_stalled_action_is_a_warning_with_its_reason(self) -> None:
        stalled = (
            StalledAction(
                "a1", "reassignment", "replica broker(s) 3 of the batch are not registered (down)", 1.0
            ),
            StalledAction("b2", "preferred-replica-election", "no progress for 300 s"),
        )
        findings = rule_12_action_stalled(ctx(health(), stalled_actions=stalled))
        assert subjects(findings) == ["action:a1", "action:b2"]
        assert {f.severity for f in findings} == {"warning"}
        assert "broker(s) 3" in findings[0].summary
        assert findings[0].action is not None
        assert findings[0].action.path == "/api/v1/actions/a1"
        assert findings[0].evidence["since"] == 1.0

    def test_none_stalled_is_clean_and_unknown_is_not_evaluated(self) -> None:
        assert rule_12_action_stalled(ctx(health(), stalled_actions=())) == []
        assert 12 in evaluate(ctx(health(), stalled_actions=()), "incident").evaluated
        assert 12 not in evaluate(ctx(health()), "incident").evaluated


class TestRule13:
    def test_unreadable_partition_states_are_one_warning_for_the_cluster(self) -> None:
        state = health(unknown=partitions(orders=(0, 4), payments=(1,), audit=(2,), logs=(7,)))
        (finding,) = rule_13_state_unreadable(ctx(state))
        assert (finding.rule, finding.subject, finding.severity) == (13, "cluster:state", "warning")
        assert finding.summary.startswith("cluster state partly unreadable: the state of 5 partitions")
        assert "(audit (1), logs (1), orders (2) and 1 more topic)" in finding.summary
        assert finding.evidence["count"] == 5
        assert finding.evidence["by_topic"] == {"orders": 2, "payments": 1, "audit": 1, "logs": 1}
        assert finding.action is not None
        assert finding.action.path == "/api/v1/partitions?state_unknown=true"

    def test_unknown_partitions_are_not_rule_1(self) -> None:
        state = health(unknown=partitions(orders=(0,)))
        result = evaluate(ctx(state), "incident")
        assert 13 in result.evaluated
        assert [f.rule for f in result.findings] == [13]

    def test_every_state_readable_is_clean(self) -> None:
        assert rule_13_state_unreadable(ctx(health())) == []


class TestEvaluate:
    def test_rules_are_numbered_1_to_19_and_named_after_their_number(self) -> None:
        assert [rule.number for rule in RULES] == list(range(1, 20))
        for rule in RULES:
            assert rule.check.__name__.startswith(f"rule_{rule.number}_")
            assert rule.check.__doc__

    def test_everything_present(self) -> None:
        stalled = (StalledAction("a1", "reassignment", "no progress for 300 s", NOW - 10),)
        result = evaluate(
            ctx(everything_wrong(), load_window=load(0.4, 0.2, 0.2, 0.2), stalled_actions=stalled)
        )
        assert result.evaluated == frozenset(range(1, 14)), "nor rules 14-18 without the resources"
        assert sorted({f.rule for f in result.findings}) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13]
        for finding in result.findings:
            json.dumps(dict(finding.evidence), allow_nan=False)
            if finding.action is not None:
                json.dumps(finding.action.to_json(), allow_nan=False)

    def test_no_health_sample_evaluates_only_the_load_rules(self) -> None:
        result = evaluate(ctx(None, load_window=load(0.4, 0.2, 0.2, 0.2)))
        assert result.evaluated == frozenset({8, 9})
        assert {f.rule for f in result.findings} == {8, 9}

    def test_no_load_window_evaluates_only_the_health_rules(self) -> None:
        result = evaluate(ctx(health()))
        assert result.evaluated == frozenset(range(1, 14)) - {8, 9, 12}, "nor rules 12, 14-18 without theirs"
        assert result.findings == ()

    def test_nothing_present_evaluates_nothing(self) -> None:
        assert evaluate(ctx(None)).evaluated == frozenset()

    def test_a_stale_view_pauses_the_zookeeper_rules(self) -> None:
        state = replace(everything_wrong(), stale=True)
        result = evaluate(ctx(state))
        assert result.evaluated == frozenset({11})
        assert [f.rule for f in result.findings] == [11]

    def test_an_old_view_pauses_them_too(self) -> None:
        result = evaluate(ctx(replace(everything_wrong(), last_good_at=NOW - 120.0)))
        assert result.evaluated == frozenset({11})

    def test_one_lane_evaluates_only_its_own_rules(self) -> None:
        everything = ctx(everything_wrong(), load_window=load(0.4, 0.2, 0.2, 0.2))
        incident = evaluate(everything, "incident")
        assert incident.evaluated == INCIDENT_RULES - {12, 14, 15, 16, 17, 18, 19}
        assert incident.evaluated == frozenset({1, 2, 3, 4, 5, 6, 7, 10, 11, 13})
        assert {f.rule for f in incident.findings} == {1, 2, 3, 4, 5, 6, 7, 10, 13}
        loadlane = evaluate(everything, "load")
        assert loadlane.evaluated == LOAD_RULES == frozenset({8, 9})
        assert {f.rule for f in loadlane.findings} == {8, 9}
        assert evaluate(everything).findings == tuple(
            sorted(incident.findings + loadlane.findings, key=lambda f: f.rule)
        )


class TestLanes:
    def test_every_rule_has_exactly_one_lane(self) -> None:
        assert INCIDENT_RULES.isdisjoint(LOAD_RULES)
        assert frozenset(range(1, 20)) == INCIDENT_RULES | LOAD_RULES
        assert {rule: lane_of(rule) for rule in range(1, 20)} == dict(RULE_LANES)
        assert lane_rules("incident") == INCIDENT_RULES
        assert lane_rules("load") == LOAD_RULES

    def test_an_unknown_rule_has_no_lane(self) -> None:
        with pytest.raises(ValueError, match="no such rule: 20"):
            lane_of(20)


# --- settings ----------------------------------------------------------------------------------------


class TestRuleSettings:
    def test_defaults(self) -> None:
        s = RuleSettings()
        assert (s.rated_deviation, s.open_after, s.resolve_after, s.urp_for_s) == (0.10, 3, 3, 60.0)
        assert [s.open_after_for(rule) for rule in (8, 9)] == [3, 3]
        assert [s.resolve_after_for(rule) for rule in (8, 9)] == [3, 3]
        fors = {rule: s.for_s_of(rule) for rule in sorted(INCIDENT_RULES)}
        assert fors == {
            1: 0.0,
            2: 60.0,
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
        resolves = {rule: s.resolve_after_s_of(rule) for rule in sorted(INCIDENT_RULES)}
        assert resolves == dict(DEFAULT_RESOLVE_AFTER_S)
        assert set(DEFAULT_FOR_S) | {2} == set(DEFAULT_RESOLVE_AFTER_S) == INCIDENT_RULES

    def test_overrides(self) -> None:
        s = RuleSettings(open_after=4, open_after_by_rule={9: 10}, resolve_after_by_rule={8: 1})
        assert s.open_after_for(8) == 4
        assert s.open_after_for(9) == 10
        assert s.resolve_after_for(8) == 1
        assert s.resolve_after_for(9) == 3

    def test_time_overrides_change_only_the_rules_given(self) -> None:
        s = RuleSettings(for_s={5: 120.0, 1: 2.0}, resolve_after_s={11: 0.0}, urp_for_s=5.0)
        assert (s.for_s_of(5), s.for_s_of(1), s.for_s_of(3), s.for_s_of(2)) == (120.0, 2.0, 0.0, 5.0)
        assert (s.resolve_after_s_of(11), s.resolve_after_s_of(1)) == (0.0, 10.0)

    @pytest.mark.parametrize(
        ("values", "message"),
        [
            ({"for_s": {8: 1.0}}, "rules [8] belong to the load lane"),
            ({"resolve_after_s": {9: 1.0}}, "rules [9] belong to the load lane"),
            ({"open_after_by_rule": {1: 1}}, "rules [1] belong to the incident lane"),
            ({"resolve_after_by_rule": {4: 2, 11: 1}}, "rules [4, 11] belong to the incident lane"),
            ({"for_s": {2: 10.0}}, "rule 2's for is urp_for_s"),
            ({"for_s": {20: 10.0}}, "no such rule: [20]"),
        ],
    )
    def test_each_lane_has_its_own_hysteresis(self, values: dict[str, Any], message: str) -> None:
        with pytest.raises(ValidationError, match=re.escape(message)):
            RuleSettings(**values)

    @pytest.mark.parametrize(
        "bad",
        [
            {"rated_deviation": 0.0},
            {"rated_deviation": math.inf},
            {"open_after": 0},
            {"resolve_after": -1},
            {"open_after_by_rule": {12: 1}},
            {"resolve_after_by_rule": {8: 0}},
            {"for_s": {1: -1.0}},
            {"resolve_after_s": {3: math.inf}},
            {"urp_for_s": -1.0},
            {"leader_imbalance_per_broker_percentage": 101},
            {"suspect_share": 1.0},
            {"suspect_min_urps": 0},
            {"controller_flap_changes": 1},
            {"controller_flap_window_s": 0.0},
            {"stale_after_s": math.nan},
            {"urp_mismatch_tolerance": -1},
            {"no_such_setting": 1},
        ],
    )
    def test_rejects(self, bad: dict[str, Any]) -> None:
        with pytest.raises(ValidationError):
            RuleSettings(**bad)

    def test_frozen(self) -> None:
        with pytest.raises(ValidationError):
            RuleSettings().open_after = 5


# --- rule 19: consumer groups ----------------------------------------------------------------------------


def group_report(name: str, status: str, lag: int = 5) -> GroupReport:
    partitions = (
        PartitionLag("orders", 0, 10, 0, 10 + lag, lag, LagSeconds(3.0)),
        PartitionLag("orders", 1, 10, 0, 10, 0, LagSeconds(0.0)),
    )
    verdict = Verdict(name, status, f"why {status}")  # type: ignore[arg-type]
    return GroupReport(GroupLag(name, "Stable", 2, partitions, lag, 3.0), verdict)


class TestRule19:
    def test_one_finding_per_group_not_ok_with_its_severity(self) -> None:
        groups = {
            g.lag.group: g
            for g in (
                group_report("a", "ok"),
                group_report("b", "stopped"),
                group_report("c", "lagging"),
                group_report("d", "falling_off_log"),
            )
        }
        found = rule_19_consumer_group(replace(ctx(health()), consumer_groups=groups))
        assert [(f.subject, f.severity) for f in found] == [
            ("group:b", "critical"),
            ("group:c", "warning"),
            ("group:d", "critical"),
        ]
        assert found[0].summary == "consumer group b has stopped: no commit while it has lag"
        assert found[0].evidence["reason"] == "why stopped"
        assert found[0].evidence["examples"] == [
            {"topic": "orders", "partition": 0, "committed": 10, "log_start": 0, "log_end": 15, "lag": 5}
        ]

    def test_not_evaluated_without_a_current_round(self) -> None:
        assert 19 not in evaluate(ctx(health()), "incident").evaluated
        with_groups = replace(ctx(health()), consumer_groups={"a": group_report("a", "rewound")})
        result = evaluate(with_groups, "incident")
        assert 19 in result.evaluated
        assert [(f.rule, f.subject, f.severity) for f in result.findings if f.rule == 19] == [
            (19, "group:a", "warning")
        ]
