"""The alert lifecycles over scripted sequences: the windowed one (the load lane) over windows, the
time-based one (the incident lane) over evaluation instants: hysteresis, events, replays, take-overs.

``Alerts`` plays the store: it keeps the latest state per fingerprint and every event, and feeds one
window at a time to :func:`advance`. Windows are 10 s long; window ``i`` is ``[10 i, 10 (i + 1))``.
``Timeline`` does the same for :func:`advance_timed`, one evaluation per call at a given second.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from analytics.lifecycle import (
    HEARTBEAT_S,
    Transition,
    advance,
    advance_timed,
    findings_by_fingerprint,
    next_due,
    worth_writing,
)
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
from analytics.rules import INCIDENT_RULES, Evaluation, RuleContext, RuleSettings, evaluate
from tests.support.health import alert_row, healthy_state

pytestmark = pytest.mark.unit

CLUSTER = "prod"
WINDOW_S = 10.0
ALL_RULES = frozenset(range(1, 14))


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


# --- the time-based lifecycle (the incident lane) ----------------------------------------------------------

SETTINGS = RuleSettings()  # rule 1: at once, resolves after 10 s; rule 5: for 90 s; rule 7: for 300 s


def offline(topic: str = "orders", n: int = 1, summary: str | None = None) -> Finding:
    return Finding(1, f"topic:{topic}", "critical", summary or f"{topic}: {n} offline", {"count": n})


def down(broker: int = 3) -> Finding:
    return Finding(5, f"broker:{broker}", "critical", f"broker {broker} down", {"broker": broker})


class Timeline:
    """The store's view for the time-based lifecycle: one evaluation per :meth:`at`."""

    def __init__(self, settings: RuleSettings = SETTINGS) -> None:
        self.settings = settings
        self.states: dict[str, AlertState] = {}
        self.events: list[AlertEvent] = []

    def at(self, now: float, *findings: Finding, evaluated: Iterable[int] = INCIDENT_RULES) -> Transition:
        step = advance_timed(
            CLUSTER, now, Evaluation(frozenset(evaluated), tuple(findings)), self.states, self.settings
        )
        for state in step.states:
            self.states[state.fingerprint] = state
        self.events.extend(step.events)
        return step

    def observe(self, now: float, state: HealthState) -> Transition:
        """An evaluation of the incident rules on ``state`` at ``now``, as the incident lane does it."""
        evaluation = evaluate(
            RuleContext(Window(CLUSTER, now, now), now, state, (), None, self.settings), "incident"
        )
        return self.at(now, *evaluation.findings, evaluated=evaluation.evaluated)

    def kinds(self) -> list[tuple[str, int, float]]:
        return [(e.kind, e.sequence, e.at) for e in self.events]

    def state(self, f: Finding) -> AlertState:
        return self.states[fingerprint(CLUSTER, f.rule, f.subject)]


def test_rules_1_and_3_open_at_the_first_evaluation_that_sees_them() -> None:
    t = Timeline()
    t.at(100.25, offline())
    assert t.kinds() == [("opened", 1, 100.25)]
    state = t.state(offline())
    assert (state.state, state.first_seen, state.opened_at, state.last_window_end) == (
        "open",
        100.25,
        100.25,
        100.25,
    )


def test_a_finding_may_ask_for_its_own_duration() -> None:
    t = Timeline()
    electing = replace(offline(), for_s=10.0)  # rule 1 while the controller moves the leaderships
    t.at(0.0, electing)
    t.at(9.0, electing)
    assert t.events == []
    t.at(9.5, offline())  # now a partition no live replica can lead: at once
    assert t.kinds() == [("opened", 1, 9.5)]
    t2 = Timeline()
    t2.at(0.0, electing)
    t2.at(10.0, electing)
    assert t2.kinds() == [("opened", 1, 10.0)]


def test_an_alert_opens_once_its_condition_has_held_for_its_duration() -> None:
    t = Timeline()  # rule 5: for 90 s
    for now in (0.0, 30.0, 89.5):
        assert t.at(now, down()).events == ()
    assert t.state(down()).state == "pending"
    assert t.state(down()).hits == 3
    t.at(90.0, down())
    assert t.kinds() == [("opened", 1, 90.0)]
    assert (t.state(down()).first_seen, t.state(down()).opened_at) == (0.0, 90.0)


def test_a_pending_run_that_clears_starts_over_without_an_event() -> None:
    t = Timeline()
    t.at(0.0, down())
    t.at(80.0)  # a rolling restart's broker is back in time
    assert t.state(down()).state == "resolved"
    assert t.state(down()).event_sequence == 0
    t.at(100.0, down())
    t.at(189.0, down())
    assert t.events == []
    t.at(190.0, down())
    assert t.kinds() == [("opened", 1, 190.0)]


def test_an_open_alert_resolves_once_clear_for_its_delay() -> None:
    t = Timeline()  # rule 1: resolves 10 s after it was last seen
    t.at(0.0, offline())
    t.at(5.0, offline())
    t.at(6.0)
    t.at(14.9)
    assert t.state(offline()).state == "open"
    assert t.state(offline()).clean == 2
    t.at(15.0)
    assert t.kinds() == [("opened", 1, 0.0), ("resolved", 2, 15.0)]
    assert t.state(offline()).resolved_at == 15.0


def test_a_condition_that_comes_back_before_the_delay_keeps_one_alert() -> None:
    t = Timeline()
    for now, hit in [(0.0, True), (5.0, False), (9.0, True), (12.0, False), (18.0, True), (20.0, False)]:
        t.at(now, *([offline()] if hit else []))
    assert t.kinds() == [("opened", 1, 0.0)]
    t.at(28.0)
    assert t.kinds() == [("opened", 1, 0.0), ("resolved", 2, 28.0)]


def test_summary_and_severity_changes_while_open_are_updates() -> None:
    t = Timeline()
    t.at(0.0, offline(n=1))
    t.at(1.0, offline(n=1))
    t.at(2.0, offline(n=4))
    t.at(3.0, replace(offline(n=4), severity="warning"))
    assert t.kinds() == [("opened", 1, 0.0), ("updated", 2, 2.0), ("updated", 3, 3.0)]


def test_a_timed_reopening_continues_the_sequence() -> None:
    t = Timeline()
    t.at(0.0, offline())
    t.at(10.0)
    t.at(20.0, offline())
    assert t.kinds() == [("opened", 1, 0.0), ("resolved", 2, 10.0), ("opened", 3, 20.0)]


def test_a_rule_that_was_not_evaluated_neither_confirms_nor_clears() -> None:
    t = Timeline()
    t.at(0.0, down())
    t.at(50.0, evaluated={11})  # the view is stale: rule 5 paused
    assert t.state(down()).state == "pending"
    t.at(95.0, down())
    assert t.kinds() == [("opened", 1, 95.0)]
    t.at(200.0, evaluated={11})
    assert t.state(down()).state == "open"


def test_every_incident_rule_waits_its_own_duration() -> None:
    settings = RuleSettings(for_s={1: 2.0, 5: 0.0}, resolve_after_s={5: 0.0}, urp_for_s=30.0)
    t = Timeline(settings)
    urp = Finding(2, "topic:orders", "warning", "orders: 3 under-replicated", {})
    t.at(0.0, offline(), down(), urp)
    assert [(e.kind, e.at) for e in t.events] == [("opened", 0.0)]
    assert t.state(down()).state == "open"
    t.at(2.0, offline(), urp)
    assert t.state(offline()).state == "open"
    assert t.state(down()).state == "resolved"  # resolve_after_s 0: the first clean evaluation
    t.at(29.0, offline(), urp)
    assert t.state(urp).state == "pending"
    t.at(30.0, offline(), urp)
    assert t.state(urp).state == "open"


def test_an_alert_the_windowed_lifecycle_opened_is_taken_over_as_it_is() -> None:
    """An older Spark job's rule 1 row: open, event 1 at the window's end, counters in windows."""
    row, _ = alert_row(CLUSTER, 1, "topic:orders", "opened", "critical", 1, 1000.0)
    taken = replace(row, summary="orders: 1 offline", hits=3, last_window_end=1000.0)
    t = Timeline()
    t.states[taken.fingerprint] = taken
    t.at(1002.0, offline())
    assert t.events == []  # still open, same summary: nothing to send
    assert t.state(offline()).state == "open"
    assert t.state(offline()).event_sequence == 1
    t.at(1003.0)
    t.at(1012.0)
    assert t.kinds() == [("resolved", 2, 1012.0)]  # its events continue its sequence


def test_next_due_is_when_a_run_ripens_or_a_clear_alert_resolves() -> None:
    t = Timeline()
    assert next_due(t.states.values(), SETTINGS, after=0.0) is None
    t.at(0.0, down())  # pending: opens at 90 if it keeps firing
    t.at(1.0, down(), offline())  # offline opens and fires: nothing due for it
    assert next_due(t.states.values(), SETTINGS, after=1.0) == 90.0
    t.at(2.0, down())  # offline cleared: resolves at 1 + 10
    assert next_due(t.states.values(), SETTINGS, after=2.0) == 11.0
    assert next_due(t.states.values(), SETTINGS, after=11.0) == 90.0  # what is past is not due
    t.at(11.0, down())
    assert next_due(t.states.values(), SETTINGS, after=11.0) == 90.0


def test_worth_writing_skips_counter_only_changes_between_heartbeats() -> None:
    t = Timeline()
    t.at(0.0, offline())
    written = t.state(offline())
    t.at(1.0, offline())
    assert not worth_writing(written, t.state(offline()))
    t.at(HEARTBEAT_S, offline())
    assert worth_writing(written, t.state(offline()))
    t.at(HEARTBEAT_S + 1.0, offline(n=2))
    assert worth_writing(written, t.state(offline()))  # the summary changed
    assert worth_writing(None, t.state(offline()))
    evidence_only = replace(written, evidence={"count": 9}, hits=5, last_window_end=1.0)
    assert worth_writing(written, evidence_only)


# --- rules and lifecycle together --------------------------------------------------------------------


def test_an_imbalanced_broker_from_health_states_to_events() -> None:
    t = Timeline(RuleSettings(for_s={7: 20.0}, resolve_after_s={7: 15.0}))
    imbalanced = (LeaderImbalance(2, 10, 4, 0.4),)
    for second in range(0, 100, 5):
        t.observe(float(second), health(float(second), imbalance=imbalanced if second < 50 else ()))
    assert t.kinds() == [("opened", 1, 20.0), ("resolved", 2, 60.0)]
    assert t.events[0].severity == "warning"
    assert t.events[0].summary.startswith("broker 2 is the preferred leader of 10 partitions")


def test_a_stale_view_pauses_the_zookeeper_rules() -> None:
    t = Timeline()
    orders = PartitionSet(count=1, by_topic={"orders": 1}, examples={"orders": (0,)})
    t.observe(10.0, health(10.0, offline=orders))
    for second in range(11, 41, 5):  # the view goes stale; its frozen snapshot says nothing of the partition
        t.observe(float(second), health(float(second), last_good_at=10.0, stale=True))
    assert t.state(offline()).state == "open"
    assert [(e.kind, e.at) for e in t.events] == [("opened", 10.0), ("opened", 26.0)]  # rule 11: for 15 s
    assert t.events[1].summary.startswith("kafka-health's view of ZooKeeper is stale")
    for instant in (41.0, 50.0, 51.0):  # back in sync, partition online again
        t.observe(instant, health(instant))
    # rule 1 was last seen at 10: clear at the first evaluation that can see again; rule 11 at 36, so 10 s on
    assert [(e.kind, e.at) for e in t.events[2:]] == [("resolved", 41.0), ("resolved", 50.0)]
