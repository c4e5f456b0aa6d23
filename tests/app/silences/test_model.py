"""What a silence matches and the checks a new one passes (app.silences.model: pure)."""

from __future__ import annotations

from typing import Any

import pytest

from app.silences.model import (
    AlertFacts,
    Maintenance,
    Matcher,
    Silence,
    SilenceDraft,
    SilenceProblem,
    alert_labels,
    check_draft,
    maintenance_covers,
    silencers,
)

pytestmark = pytest.mark.unit

NOW = 1_000_000.0


def lagging(*brokers: int) -> dict[str, Any]:
    return {"topic": "orders", "lagging": [{"broker": b, "partitions": 3} for b in brokers]}


def facts(rule: int, subject: str, evidence: dict[str, Any] | None = None, **kw: Any) -> AlertFacts:
    return AlertFacts(kw.get("cluster", "c1"), rule, subject, kw.get("severity", "critical"), evidence or {})


# --- labels and matchers ------------------------------------------------------------------------------------


def test_labels_come_from_the_subject_and_the_evidence() -> None:
    assert alert_labels(facts(5, "broker:3", {"broker": 3})) == {
        "cluster": "c1",
        "rule": "5",
        "subject": "broker:3",
        "broker": "3",
        "topic": "",
        "group": "",
        "severity": "critical",
    }
    assert alert_labels(facts(14, "broker:2:/var/lib/kafka"))["broker"] == "2"
    two = alert_labels(facts(2, "topic:orders", {"topic": "orders", "suspect": 4}, severity="warning"))
    assert (two["topic"], two["broker"], two["severity"]) == ("orders", "4", "warning")
    assert alert_labels(facts(2, "topic:orders", {"suspect": None}))["broker"] == ""
    assert alert_labels(facts(19, "group:billing"))["group"] == "billing"


def test_regex_matchers_are_anchored_and_an_absent_label_is_empty() -> None:
    labels = alert_labels(facts(15, "broker:13"))
    assert Matcher("broker", "13").matches(labels)
    assert not Matcher("broker", "1").matches(labels)
    assert not Matcher("broker", "1", regex=True).matches(labels)  # anchored: not a search
    assert Matcher("broker", "1[0-9]", regex=True).matches(labels)
    assert Matcher("rule", "5|15", regex=True).matches(labels)
    assert not Matcher("rule", "5|7", regex=True).matches(labels)
    assert Matcher("topic", "").matches(labels)
    assert Matcher("group", ".*", regex=True).matches(labels)


def silence(
    *matchers: Matcher, maintenance: int | None = None, start: float = NOW, end: float = NOW + 60
) -> Silence:
    return Silence(
        id=1,
        matchers=matchers,
        maintenance=None if maintenance is None else Maintenance(maintenance),
        starts_at=start,
        ends_at=end,
        comment="",
        created_by="root",
        created_at=NOW,
    )


def test_a_silence_matches_when_every_matcher_does_and_only_while_active() -> None:
    s = silence(Matcher("broker", "3"), Matcher("rule", "5|7", regex=True))
    assert s.matches(facts(5, "broker:3"))
    assert not s.matches(facts(5, "broker:4"))
    assert not s.matches(facts(6, "broker:3"))
    assert s.matches(facts(5, "broker:3", cluster="c2"))  # no cluster matcher: any cluster
    assert silencers([s], facts(5, "broker:3"), NOW) == [1]
    assert silencers([s], facts(5, "broker:3"), NOW - 1) == []  # before it starts
    assert silencers([s], facts(5, "broker:3"), NOW + 60) == []  # at its end it is over
    assert (s.state(NOW - 1), s.state(NOW), s.state(NOW + 60)) == ("pending", "active", "expired")


# --- a broker's maintenance window --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alert", "covered"),
    [
        (facts(5, "broker:3"), True),
        (facts(7, "broker:3", severity="info"), True),
        (facts(6, "broker:3", {"broker": 3, "missing_from": 10}), True),
        (facts(2, "topic:orders", lagging(3)), True),
        # another broker's alerts
        (facts(5, "broker:4"), False),
        (facts(6, "broker:4", {"broker": 4}), False),
        (facts(7, "broker:33"), False),
        # a topic that lacks another broker too, or only another broker, or says nothing of it
        (facts(2, "topic:orders", lagging(3, 4)), False),
        (facts(2, "topic:orders", lagging(4)), False),
        (facts(2, "topic:orders", lagging()), False),
        (facts(2, "topic:orders", {"suspect": 3}), False),
        (facts(2, "topic:orders", {"lagging": [{"broker": "3"}]}), False),
        # clients failing is never explained by a planned restart
        (facts(1, "topic:orders", lagging(3)), False),
        (facts(3, "topic:orders", lagging(3)), False),
        # the broker's other troubles
        (facts(15, "broker:3"), False),
        (facts(14, "broker:3:/data"), False),
        (facts(18, "broker:3"), False),
        (facts(4, "controller"), False),
    ],
)
def test_a_maintenance_window_silences_exactly_what_the_brokers_absence_explains(
    alert: AlertFacts, covered: bool
) -> None:
    assert maintenance_covers(3, alert) is covered
    assert silence(maintenance=3).matches(alert) is covered


def test_a_maintenance_window_with_matchers_needs_both() -> None:
    s = silence(Matcher("cluster", "c1"), maintenance=3)
    assert s.matches(facts(5, "broker:3"))
    assert not s.matches(facts(5, "broker:3", cluster="c2"))


# --- checking a request -------------------------------------------------------------------------------------


def draft(**kw: Any) -> SilenceDraft | list[SilenceProblem]:
    base: dict[str, Any] = {
        "matchers": [{"name": "broker", "value": "3"}],
        "maintenance": None,
        "duration_s": 600,
        "ends_at": None,
        "starts_at": None,
        "comment": "restart",
        "now": NOW,
    }
    return check_draft(**(base | kw))


def problems(**kw: Any) -> dict[str, str]:
    found = draft(**kw)
    assert isinstance(found, list), found
    return {p.loc: p.msg for p in found}


def test_a_valid_request_becomes_a_draft() -> None:
    assert draft() == SilenceDraft((Matcher("broker", "3"),), None, NOW, NOW + 600, "restart")
    assert draft(duration_s=None, ends_at=NOW + 5) == SilenceDraft(
        (Matcher("broker", "3"),), None, NOW, NOW + 5, "restart"
    )
    later = draft(starts_at=NOW + 100)
    assert isinstance(later, SilenceDraft)
    assert (later.starts_at, later.ends_at) == (NOW + 100, NOW + 700)
    earlier = draft(starts_at=NOW - 100)  # never reaches back: starts now
    assert isinstance(earlier, SilenceDraft)
    assert earlier.starts_at == NOW
    window = draft(matchers=[], maintenance={"broker": 3})
    assert isinstance(window, SilenceDraft)
    assert window.maintenance == Maintenance(3)


def test_every_problem_of_a_request_is_named() -> None:
    assert "matchers" in problems(matchers=[])
    unknown = problems(
        matchers=[{"name": "brokr", "value": "3"}, {"name": "rule", "value": "(", "regex": True}]
    )
    assert "brokr" in unknown["matchers.0.name"]
    assert "invalid regular expression" in unknown["matchers.1.value"]
    assert "exactly one" in problems(ends_at=NOW + 5)["duration_s"]
    assert "exactly one" in problems(duration_s=None)["duration_s"]
    assert "past" in problems(duration_s=None, ends_at=NOW - 1)["ends_at"]
    assert "after starts_at" in problems(duration_s=None, ends_at=NOW + 5, starts_at=NOW + 10)["ends_at"]
    assert "duration_s" in problems(duration_s=0)
    assert "duration_s" in problems(duration_s=float("inf"))
    assert "maintenance.broker" in problems(maintenance={"broker": -1})
    assert "maintenance" in problems(maintenance={"broker": 1, "topic": "x"})
