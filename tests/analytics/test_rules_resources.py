"""Rules 14-18 over hand-built broker resources, and the causes rules 1-3 and 6 name (analytics.rules.causes).

``resources()`` builds healthy brokers 1-4; each test states what is wrong with one of them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from analytics.lifecycle import advance_timed
from analytics.model import BrokerResources, Lagging, LogDirUsage, PartitionSet, fingerprint
from analytics.rules import (
    Evaluation,
    RuleContext,
    RuleSettings,
    evaluate,
    held_causes,
    link_causes,
    rule_14_log_dir_filling,
    rule_15_log_dir_offline,
    rule_16_broker_saturated,
    rule_17_file_descriptors,
    rule_18_isr_flapping,
    subject_broker,
)
from analytics.rules.resources import banded_full_in, banded_percent, banded_rate
from tests.analytics.test_rules import CLUSTER, NOW, WINDOW, health

pytestmark = pytest.mark.unit

GB = 1e9
MOUNT = "/var/lib/kafka/data-0"


def disk(
    used: float = 0.3, growth: float | None = 0.0, size: float = 100 * GB, **changes: Any
) -> LogDirUsage:
    avail = size * (1 - used)
    full_in = avail / growth if growth is not None and growth > 0 else None
    base = LogDirUsage(MOUNT, size, avail, used, growth, full_in, (("orders", 3e6), ("payments", 1e6)))
    return replace(base, **changes)


def broker(broker_id: int, **changes: Any) -> BrokerResources:
    base = BrokerResources(
        broker_id,
        log_dirs=(disk(),),
        offline_log_dirs=0,
        request_handler_idle=0.8,
        network_processor_idle=0.9,
        open_fds=1000.0,
        max_fds=100_000.0,
    )
    return replace(base, **changes)


def resources(**brokers: BrokerResources) -> dict[int, BrokerResources]:
    """Healthy brokers 1-4; ``b3=broker(3, ...)`` replaces one."""
    found = {b: broker(b) for b in range(1, 5)}
    for resource in brokers.values():
        found[resource.broker_id] = resource
    return found


def ctx(
    res: dict[int, BrokerResources] | None, settings: RuleSettings | None = None, **changes: Any
) -> RuleContext:
    return RuleContext(
        window=WINDOW,
        now=NOW,
        health=health(**changes),
        history=(),
        load=None,
        settings=settings or RuleSettings(),
        resources=res,
    )


class TestRule14:
    @pytest.mark.parametrize(
        ("used", "growth", "severity"),
        [
            (0.84, 0.0, None),
            (0.85, 0.0, "warning"),
            (0.94, None, "warning"),
            (0.95, 0.0, "critical"),
            (0.5, 50 * GB / (6 * 3600) * 1.01, "warning"),  # full within 6 h
            (0.5, 50 * GB / 3600 * 1.01, "critical"),  # full within 1 h
            (0.5, 50 * GB / (6 * 3600) * 0.99, None),  # full in just over 6 h
            (0.5, -1e6, None),  # shrinking
        ],
    )
    def test_thresholds(self, used: float, growth: float | None, severity: str | None) -> None:
        found = rule_14_log_dir_filling(ctx(resources(b=broker(1, log_dirs=(disk(used, growth),)))))
        assert [f.severity for f in found] == ([] if severity is None else [severity])

    def test_summary_names_broker_mount_used_growth_time_to_full_and_top_topics(self) -> None:
        (finding,) = rule_14_log_dir_filling(ctx(resources(b=broker(1, log_dirs=(disk(0.97, 5e6),)))))
        assert finding.subject == f"broker:1:{MOUNT}"
        assert finding.summary == (
            f"broker 1's log dir {MOUNT} is 97 % full, growing 5 MB/s, full within 1 h; "
            "fastest growing there: orders, payments"
        )
        assert finding.evidence["full_in_s"] == pytest.approx(3 * GB / 5e6)
        assert finding.evidence["cause"] == f"{MOUNT} is 97 % full"
        assert finding.action is not None
        assert finding.action.path == "/api/v1/brokers/1/disks"
        json.dumps(dict(finding.evidence), allow_nan=False)

    def test_summary_is_stable_while_the_figures_move_within_their_bands(self) -> None:
        one = rule_14_log_dir_filling(ctx(resources(b=broker(1, log_dirs=(disk(0.86, 5.1e6),)))))
        two = rule_14_log_dir_filling(ctx(resources(b=broker(1, log_dirs=(disk(0.88, 4.9e6),)))))
        assert one[0].summary == two[0].summary

    def test_thresholds_are_settable(self) -> None:
        settings = RuleSettings(disk_used_warning=0.5, disk_used_critical=0.6, disk_full_warning_s=60.0,
                                disk_full_critical_s=10.0)  # fmt: skip
        found = rule_14_log_dir_filling(ctx(resources(b=broker(2, log_dirs=(disk(0.55),))), settings))
        assert [(f.subject, f.severity) for f in found] == [(f"broker:2:{MOUNT}", "warning")]

    def test_a_critical_threshold_milder_than_its_warning_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="disk_used_warning"):
            RuleSettings(disk_used_warning=0.96)


class TestRule15:
    def test_the_gauge_or_the_notices_page_at_once_naming_the_partitions(self) -> None:
        lost = (("orders", 0), ("orders", 3), ("payments", 1), ("singles", 2))
        res = resources(b=broker(3, offline_log_dirs=1, out_of_isr=lost))
        (finding,) = rule_15_log_dir_offline(ctx(res))
        assert (finding.rule, finding.subject, finding.severity) == (15, "broker:3", "critical")
        assert finding.summary == (
            "broker 3 has 1 log dir offline: its replicas there left the ISR of 4 partitions "
            "(orders-0, orders-3, payments-1 and 1 more)"
        )
        notices = resources(b=broker(3, offline_log_dirs=None, log_dir_failures=2))  # Bitnami: no gauge
        (finding,) = rule_15_log_dir_offline(ctx(notices))
        assert finding.summary == "broker 3 has 2 log dirs offline"
        assert RuleSettings().for_s_of(15) == 0.0

    def test_quiet(self) -> None:
        assert rule_15_log_dir_offline(ctx(resources())) == []


class TestRule16:
    @pytest.mark.parametrize(
        ("handlers", "network", "severity", "text"),
        [
            (0.21, 0.31, None, ""),
            (0.19, 0.9, "warning", "request handlers are 15 % idle"),
            (0.05, 0.9, "critical", "request handlers are 5 % idle"),
            (0.04, 0.9, "critical", "request handlers are 4 % idle"),
            (0.8, 0.29, "warning", "network processors are 25 % idle"),
            (0.09, 0.1, "critical", "request handlers are 9 % idle and network processors are 10 % idle"),
            (None, None, None, ""),
        ],
    )
    def test_thresholds(
        self, handlers: float | None, network: float | None, severity: str | None, text: str
    ) -> None:
        res = resources(b=broker(2, request_handler_idle=handlers, network_processor_idle=network))
        found = rule_16_broker_saturated(ctx(res))
        if severity is None:
            assert found == []
            return
        (finding,) = found
        assert (finding.subject, finding.severity) == ("broker:2", severity)
        assert finding.summary == f"broker 2 is saturated: its {text}"


class TestRule17:
    @pytest.mark.parametrize(
        ("ratio", "severity", "percent"),
        [(0.79, None, 0), (0.8, "warning", 80), (0.9, "warning", 90), (0.96, "critical", 96)],
    )
    def test_thresholds(self, ratio: float, severity: str | None, percent: int) -> None:
        found = rule_17_file_descriptors(ctx(resources(b=broker(4, open_fds=ratio * 1000, max_fds=1000.0))))
        assert [f.severity for f in found] == ([] if severity is None else [severity])
        if found:
            assert (
                found[0].summary
                == f"broker 4 has {percent} % of its file descriptors open (process_max_fds 1000)"
            )

    def test_no_limit_served_says_nothing(self) -> None:
        assert rule_17_file_descriptors(ctx(resources(b=broker(4, open_fds=10.0, max_fds=None)))) == []


class TestRule18:
    def test_a_replica_changing_isr_six_times_in_the_window_flaps(self) -> None:
        changes = ((("orders", 0), 7), (("orders", 1), 6), (("payments", 0), 2))
        (finding,) = rule_18_isr_flapping(ctx(resources(b=broker(2, isr_changes=changes))))
        assert (finding.subject, finding.severity) == ("broker:2", "warning")
        assert finding.summary == (
            "broker 2 is flapping: its replicas of 2 partitions (orders-0, orders-1) left and rejoined their "
            "ISRs at least 6 times within 300 s"
        )
        assert finding.evidence["changes"] == {"orders-0": 7, "orders-1": 6, "payments-0": 2}

    def test_a_restart_is_not_flapping(self) -> None:
        restart = tuple((("orders", p), 2) for p in range(100))
        assert rule_18_isr_flapping(ctx(resources(b=broker(2, isr_changes=restart)))) == []

    def test_the_count_is_settable(self) -> None:
        res = resources(b=broker(2, isr_changes=((("orders", 0), 3),)))
        assert len(rule_18_isr_flapping(ctx(res, RuleSettings(isr_flap_changes=3)))) == 1


class TestEvaluation:
    def test_rules_14_to_18_need_resources_and_a_current_view(self) -> None:
        res = resources(b=broker(1, offline_log_dirs=1))
        assert {14, 15, 16, 17, 18} <= evaluate(ctx(res), "incident").evaluated
        assert not {14, 15, 16, 17, 18} & evaluate(ctx(None), "incident").evaluated
        assert not {14, 15, 16, 17, 18} & evaluate(ctx(res, stale=True), "incident").evaluated
        assert 15 not in evaluate(ctx(res), "load").evaluated

    def test_hysteresis_holds_for_then_resolves_after(self) -> None:
        settings = RuleSettings()
        saturated = ctx(resources(b=broker(2, request_handler_idle=0.05)))
        quiet = ctx(resources())
        first = advance_timed(CLUSTER, NOW, evaluate(saturated, "incident"), {}, settings)
        assert first.events == ()
        states = {s.fingerprint: s for s in first.states}
        later = advance_timed(CLUSTER, NOW + 60, evaluate(saturated, "incident"), states, settings)
        assert [(e.kind, e.severity) for e in later.events] == [("opened", "critical")]
        states |= {s.fingerprint: s for s in later.states}
        less = ctx(resources(b=broker(2, request_handler_idle=0.15)))
        worse = advance_timed(CLUSTER, NOW + 61, evaluate(less, "incident"), states, settings)
        assert [(e.kind, e.severity) for e in worse.events] == [("updated", "warning")]
        states |= {s.fingerprint: s for s in worse.states}
        calm = advance_timed(CLUSTER, NOW + 100, evaluate(quiet, "incident"), states, settings)
        assert calm.events == ()
        states |= {s.fingerprint: s for s in calm.states}
        done = advance_timed(CLUSTER, NOW + 121, evaluate(quiet, "incident"), states, settings)
        assert [e.kind for e in done.events] == ["resolved"]


class TestBands:
    def test_bands(self) -> None:
        assert [banded_percent(r) for r in (0.04, 0.05, 0.19, 0.97)] == [4, 5, 15, 95]
        assert banded_percent(0.97, whole_from=0.95) == 97
        assert [banded_rate(r) for r in (5.2e6, 4.6e6, 340e3, 12.0, 2.4e9)] == [
            "5 MB/s", "5 MB/s", "300 kB/s", "10 B/s", "2 GB/s"
        ]  # fmt: skip
        assert [banded_full_in(s) for s in (None, 3000.0, 7200.0, 8e4, 5e5, 1e7)] == [
            "not growing", "full within 1 h", "full within 6 h", "full within a day", "full within a week",
            "not full within a week",
        ]  # fmt: skip


# --- causes ------------------------------------------------------------------------------------------------


def lagging_health(**changes: Any) -> dict[str, Any]:
    urps = PartitionSet(38, {"orders": 38}, {"orders": (0, 1, 2)})
    return {
        "under_replicated": urps,
        "lagging": Lagging(under_replicated={"orders": {3: 38, 1: 1}}),
        **changes,
    }


def held(evaluation: Evaluation) -> frozenset[str]:
    return frozenset(fingerprint(CLUSTER, f.rule, f.subject) for f in evaluation.findings if f.rule >= 14)


class TestCauses:
    def test_a_urp_page_names_the_disk_and_the_handlers_of_the_broker_it_lags_on(self) -> None:
        res = resources(b=broker(3, log_dirs=(disk(0.97, 0.0),), request_handler_idle=0.04))
        evaluation = evaluate(ctx(res, **lagging_health()), "incident")
        linked = link_causes(evaluation, CLUSTER, held(evaluation))
        (urp,) = [f for f in linked.findings if f.rule == 2]
        assert urp.summary.endswith(
            ". 38 partitions of orders lack broker 3 in their ISR: "
            f"broker 3's {MOUNT} is 97 % full (rule 14); request handlers are 4 % idle (rule 16)"
        )
        assert [(c["rule"], c["subject"]) for c in urp.evidence["causes"]] == [
            (14, f"broker:3:{MOUNT}"),
            (16, "broker:3"),
        ]
        assert urp.evidence["causes"][0]["fingerprint"] == fingerprint(CLUSTER, 14, f"broker:3:{MOUNT}")

    def test_only_held_causes_are_named(self) -> None:
        res = resources(b=broker(3, request_handler_idle=0.04))
        evaluation = evaluate(ctx(res, **lagging_health()), "incident")
        assert link_causes(evaluation, CLUSTER, frozenset()) is evaluation

    def test_a_cause_on_another_broker_is_not_named(self) -> None:
        res = resources(b=broker(2, request_handler_idle=0.04))
        evaluation = evaluate(ctx(res, **lagging_health()), "incident")
        linked = link_causes(evaluation, CLUSTER, held(evaluation))
        assert all("causes" not in f.evidence for f in linked.findings)

    def test_a_suspect_broker_names_its_cause(self) -> None:
        from analytics.model import Suspect

        res = resources(b=broker(3, offline_log_dirs=1))
        state = lagging_health(suspects=(Suspect(3, 38, 1.0),))
        evaluation = evaluate(ctx(res, **state), "incident")
        linked = link_causes(evaluation, CLUSTER, held(evaluation))
        (suspect,) = [f for f in linked.findings if f.rule == 6]
        assert suspect.summary.endswith(". The cause: broker 3's log dir is offline (rule 15)")

    def test_held_causes_are_the_open_cause_alerts(self) -> None:
        settings = RuleSettings()
        res = resources(b=broker(3, offline_log_dirs=1, request_handler_idle=0.04))
        evaluation = evaluate(ctx(res), "incident")
        states = advance_timed(CLUSTER, NOW, evaluation, {}, settings).states
        assert held_causes(CLUSTER, states) == {fingerprint(CLUSTER, 15, "broker:3")}  # 16 is pending

    def test_subject_broker(self) -> None:
        assert [subject_broker(s) for s in ("broker:3", f"broker:12:{MOUNT}", "topic:x", "broker:x")] == [
            3, 12, None, None
        ]  # fmt: skip


def test_every_page_of_rules_14_to_18_has_a_title_and_a_suggested_action() -> None:
    from app.webhooks.formats import RULE_TITLES

    res = resources(
        b1=broker(
            1, log_dirs=(disk(0.97),), offline_log_dirs=1, request_handler_idle=0.05, open_fds=99_000.0
        ),
        b2=broker(2, isr_changes=((("orders", 0), 6),)),
    )
    found = evaluate(ctx(res), "incident").findings
    assert {f.rule for f in found} == {14, 15, 16, 17, 18}
    for finding in found:
        assert finding.action is not None, finding.rule
        assert RULE_TITLES[finding.rule] != f"rule {finding.rule}"
