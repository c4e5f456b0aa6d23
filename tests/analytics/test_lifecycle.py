"""The alert lifecycle over scripted sequences of windows: hysteresis, events and replays.

``Alerts`` plays the store: it keeps the latest state per fingerprint and every event, and feeds one
window at a time to :func:`advance`. Windows are 10 s long; window ``i`` is ``[10 i, 10 (i + 1))``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from analytics.lifecycle import Transition, advance, findings_by_fingerprint
from analytics.model import (
    AlertEvent,
    AlertState,
    Finding,
    HealthState,
    LeaderImbalance,
    PartitionSet,
    Severity,
    Window,
    fingerprint,
)
from analytics.rules import Evaluation, RuleContext, RuleSettings, evaluate
from tests.support.health import healthy_state

pytestmark = pytest.mark.unit

CLUSTER = "prod"
WINDOW_S = 10.0
ALL_RULES = frozenset(range(1, 12))


def window(i: int, length: float = WINDOW_S) -> Window:
    return Window(CLUSTER, i * length, (i + 1) * length)


def finding(
    rule: int = 8, subject: str = "broker:1", severity: Severity = "warning", summary: str = "broker 1 is hot"
) -> Finding:
    return Finding(rule, subject, severity, summary, {"n": 1})


def health(at: float, **changes: Any) -> HealthState:
    """A healthy 4-broker cluster sampled (and known good) at ``at``; ``changes`` say what is wrong."""
    return replace(healthy_state(CLUSTER, at), **changes)


class Alerts:
    """The store's view: current states by fingerprint and the event log."""

    def __init__(self, settings: RuleSettings | None = None, length: float = WINDOW_S) -> None:
        self.settings = settings or RuleSettings()
        self.length = length
        self.states: dict[str, AlertState] = {}
        self.events: list[AlertEvent] = []

    def window(self, i: int, *findings: Finding, evaluated: Iterable[int] = ALL_RULES) -> Transition:
        step = advance(
            CLUSTER,
            window(i, self.length),
            Evaluation(frozenset(evaluated), tuple(findings)),
            self.states,
            self.settings,
        )
        for state in step.states:
            self.states[state.fingerprint] = state
        self.events.extend(step.events)
        return step

    def observe(self, i: int, state: HealthState) -> Transition:
        """Window ``i`` through the rules, as the job does it."""
        w = window(i, self.length)
        evaluation = evaluate(RuleContext(w, w.end, state, (), None, self.settings))
        return self.window(i, *evaluation.findings, evaluated=evaluation.evaluated)

    def run(self, hits: str, make: Finding | None = None, start: int = 0) -> None:
        """A window per character from ``start``: ``x`` fires, ``.`` is clean, ``-`` is not evaluated."""
        f = make or finding()
        for offset, c in enumerate(hits):
            if c == "x":
                self.window(start + offset, f)
            elif c == ".":
                self.window(start + offset)
            else:
                self.window(start + offset, evaluated=ALL_RULES - {f.rule})

    def kinds(self) -> list[tuple[str, int, float]]:
        return [(e.kind, e.sequence, e.at) for e in self.events]

    def state(self, f: Finding | None = None) -> AlertState:
        f = f or finding()
        return self.states[fingerprint(CLUSTER, f.rule, f.subject)]


# --- opening -----------------------------------------------------------------------------------------


def test_opens_after_k_windows() -> None:
    alerts = Alerts()
    alerts.run("xx")
    assert alerts.events == []
    assert alerts.state().state == "pending"
    assert alerts.state().hits == 2
    alerts.run("x", start=2)
    assert alerts.kinds() == [("opened", 1, 30.0)]
    state = alerts.state()
    assert (state.state, state.opened_at, state.first_seen, state.last_seen) == ("open", 30.0, 0.0, 30.0)
    assert state.event_sequence == 1
    assert state.fingerprint == fingerprint(CLUSTER, 8, "broker:1")
    opened = alerts.events[0]
    assert (opened.severity, opened.summary, opened.evidence) == ("warning", "broker 1 is hot", {"n": 1})


def test_offline_partitions_open_in_the_first_window() -> None:
    alerts = Alerts()
    alerts.window(0, finding(rule=1, subject="topic:orders", severity="critical"))
    assert alerts.kinds() == [("opened", 1, 10.0)]


def test_rule_2_waits_for_its_duration_too() -> None:
    alerts = Alerts()  # k = 3, for = 60 s, 10 s windows: the duration decides
    urp = finding(rule=2, subject="topic:orders")
    alerts.run("xxxxx", urp)
    assert alerts.events == []
    alerts.run("x", urp, start=5)
    assert alerts.kinds() == [("opened", 1, 60.0)]


def test_rule_2_with_long_windows_waits_for_k() -> None:
    alerts = Alerts(length=60.0)  # one window already lasts `for`: k decides
    urp = finding(rule=2, subject="topic:orders")
    alerts.run("xx", urp)
    assert alerts.events == []
    alerts.run("x", urp, start=2)
    assert alerts.kinds() == [("opened", 1, 180.0)]


def test_an_interrupted_run_starts_over() -> None:
    alerts = Alerts()
    alerts.run("xx.xx")
    assert alerts.events == []
    assert alerts.state().hits == 2
    assert alerts.state().first_seen == 30.0


# --- resolving ---------------------------------------------------------------------------------------


def test_resolves_after_m_clean_windows() -> None:
    alerts = Alerts()
    alerts.run("xxx..")
    assert [k for k, _, _ in alerts.kinds()] == ["opened"]
    assert alerts.state().clean == 2
    alerts.run(".", start=5)
    assert alerts.kinds() == [("opened", 1, 30.0), ("resolved", 2, 60.0)]
    state = alerts.state()
    assert (state.state, state.resolved_at, state.hits) == ("resolved", 60.0, 0)
    assert alerts.events[1].summary == "broker 1 is hot"


def test_a_pending_alert_that_gets_a_clean_window_is_dropped_without_events() -> None:
    alerts = Alerts()
    alerts.run("xx.")
    assert alerts.events == []
    state = alerts.state()
    assert (state.state, state.event_sequence, state.opened_at, state.hits) == ("resolved", 0, None, 0)


def test_a_resolved_alert_is_not_rewritten_by_clean_windows() -> None:
    alerts = Alerts()
    alerts.run("xxx...")
    assert alerts.window(6).states == ()


def test_resolve_after_per_rule() -> None:
    alerts = Alerts(RuleSettings(resolve_after_by_rule={8: 1}))
    alerts.run("xxx.")
    assert [k for k, _, _ in alerts.kinds()] == ["opened", "resolved"]


# --- flapping ----------------------------------------------------------------------------------------


def test_flapping_while_pending_never_opens() -> None:
    alerts = Alerts()
    alerts.run("x.x.xx.x.xx.")
    assert alerts.events == []


def test_flapping_while_open_keeps_one_alert() -> None:
    alerts = Alerts()
    alerts.run("xxx.x..x.x..x")
    assert alerts.kinds() == [("opened", 1, 30.0)]
    assert alerts.state().state == "open"


def test_the_same_finding_twice_in_a_window_is_one_hit() -> None:
    alerts = Alerts()
    f = finding()
    alerts.window(0, f, f)
    assert alerts.state().hits == 1


# --- updates -----------------------------------------------------------------------------------------


def test_a_severity_change_while_open_is_an_update() -> None:
    alerts = Alerts()
    alerts.run("xxx")
    alerts.window(3, finding(severity="critical"))
    assert alerts.kinds()[-1] == ("updated", 2, 40.0)
    assert alerts.events[-1].severity == "critical"
    assert alerts.state().severity == "critical"


def test_a_summary_change_while_open_is_an_update() -> None:
    alerts = Alerts()
    alerts.run("xxx")
    alerts.window(3, finding(summary="broker 1 is very hot"))
    assert alerts.kinds()[-1] == ("updated", 2, 40.0)


def test_new_evidence_alone_updates_the_state_but_sends_nothing() -> None:
    alerts = Alerts()
    alerts.run("xxx")
    step = alerts.window(3, replace(finding(), evidence={"n": 2}))
    assert step.events == ()
    assert alerts.state().evidence == {"n": 2}


def test_changes_while_pending_send_nothing() -> None:
    alerts = Alerts()
    alerts.window(0, finding())
    alerts.window(1, finding(severity="critical"))
    assert alerts.events == []
    alerts.window(2, finding(severity="critical"))
    assert alerts.kinds() == [("opened", 1, 30.0)]
    assert alerts.events[0].severity == "critical"


# --- reopening ---------------------------------------------------------------------------------------


def test_reopening_continues_the_sequence() -> None:
    alerts = Alerts()
    alerts.run("xxx...xx")
    assert alerts.state().state == "pending"
    assert alerts.state().resolved_at == 60.0
    alerts.run("x", start=8)
    assert alerts.kinds() == [("opened", 1, 30.0), ("resolved", 2, 60.0), ("opened", 3, 90.0)]
    state = alerts.state()
    assert (state.opened_at, state.resolved_at, state.first_seen) == (90.0, None, 60.0)


# --- replays and missing input -----------------------------------------------------------------------


def test_replaying_an_old_window_changes_nothing() -> None:
    alerts = Alerts()
    alerts.run("xxx...")
    before = dict(alerts.states)
    for i in range(6):
        assert alerts.window(i, finding()) == Transition((), ())
        assert alerts.window(i) == Transition((), ())
    assert alerts.states == before


def test_replaying_the_same_window_twice_is_a_no_op() -> None:
    alerts = Alerts()
    alerts.run("xx")
    first = alerts.window(2, finding())
    assert first.events
    assert alerts.window(2, finding()) == Transition((), ())
    assert len(alerts.events) == 1


def test_a_window_without_the_rules_input_neither_hits_nor_cleans() -> None:
    alerts = Alerts()
    alerts.run("xx--")
    assert alerts.state().hits == 2
    assert alerts.state().state == "pending"
    alerts.run("x", start=4)
    assert alerts.kinds() == [("opened", 1, 50.0)]
    alerts.run("..--", start=5)
    assert alerts.state().state == "open"
    assert alerts.state().clean == 2
    alerts.run(".", start=9)
    assert alerts.kinds()[-1] == ("resolved", 2, 100.0)


def test_unevaluated_windows_write_nothing() -> None:
    alerts = Alerts()
    alerts.run("xxx")
    assert alerts.window(3, evaluated=()) == Transition((), ())


def test_other_clusters_alerts_are_left_alone() -> None:
    alerts = Alerts()
    alerts.run("xxx")
    fp, state = next(iter(alerts.states.items()))
    alerts.states[fp] = replace(state, cluster="other")
    assert alerts.window(3) == Transition((), ())


# --- several alerts ----------------------------------------------------------------------------------


def test_subjects_are_separate_alerts_in_a_stable_order() -> None:
    alerts = Alerts(RuleSettings(open_after=1))
    a, b = finding(subject="broker:1"), finding(subject="broker:2")
    step = alerts.window(0, b, a)
    fps = [s.fingerprint for s in step.states]
    assert fps == sorted(fps)
    assert [e.fingerprint for e in step.events] == fps
    assert {s.subject for s in step.states} == {"broker:1", "broker:2"}
    step = alerts.window(1, a)
    assert step.events == ()
    assert (alerts.state(a).hits, alerts.state(a).clean) == (2, 0)
    assert (alerts.state(b).hits, alerts.state(b).clean, alerts.state(b).state) == (0, 1, "open")


def test_the_most_severe_duplicate_wins_whatever_the_order() -> None:
    low, high = finding(severity="info"), finding(severity="critical")
    assert list(findings_by_fingerprint(CLUSTER, [low, high]).values()) == [high]
    assert list(findings_by_fingerprint(CLUSTER, [high, low]).values()) == [high]
    x, y = finding(summary="x"), finding(summary="y")
    assert findings_by_fingerprint(CLUSTER, [y, x]) == findings_by_fingerprint(CLUSTER, [x, y])


# --- rules and lifecycle together --------------------------------------------------------------------


def test_an_imbalanced_broker_from_health_states_to_events() -> None:
    alerts = Alerts()
    imbalanced = (LeaderImbalance(2, 10, 4, 0.4),)
    for i in range(7):
        alerts.observe(i, health(i * WINDOW_S + 9.0, imbalance=imbalanced if i < 3 else ()))
    assert alerts.kinds() == [("opened", 1, 30.0), ("resolved", 2, 60.0)]
    assert alerts.events[0].severity == "warning"
    assert alerts.events[0].summary.startswith("broker 2 is the preferred leader of 10 partitions")


def test_a_stale_collector_pauses_the_zookeeper_rules() -> None:
    alerts = Alerts()
    offline = PartitionSet(count=1, by_topic={"orders": 1}, examples={"orders": (0,)})
    alerts.observe(0, health(9.0, offline=offline))
    for i in range(1, 6):  # the view goes stale; the frozen snapshot says nothing about the partition
        alerts.observe(i, health(i * WINDOW_S + 9.0, last_good_at=9.0, stale=True))
    assert alerts.state(finding(rule=1, subject="topic:orders")).state == "open"
    assert [(e.kind, e.at) for e in alerts.events] == [("opened", 10.0), ("opened", 40.0)]
    assert alerts.events[1].summary.startswith("collector collector-1's view of ZooKeeper is stale")
    for i in range(6, 9):  # back in sync, partition online again
        alerts.observe(i, health(i * WINDOW_S + 9.0))
    assert [(e.kind, e.at) for e in alerts.events[2:]] == [("resolved", 90.0), ("resolved", 90.0)]
