"""The outbox policy (app.webhooks.policy), pure: which event goes to which webhook, and in what state it
enters the outbox. tests/app/webhooks/test_store.py checks the same through the store, on real databases."""

from __future__ import annotations

import pytest

from analytics.model import AlertEvent, EventKind, Severity
from app.webhooks.model import AlertNotice, Webhook
from app.webhooks.policy import MAX_ERROR, clip, outbox_entry, run_of, skip_reason

pytestmark = pytest.mark.unit


def webhook(rules: tuple[int, ...] | None = None, severities: tuple[Severity, ...] | None = None) -> Webhook:
    return Webhook(1, "h", "http://127.0.0.1:9/x", "generic", rules, severities, None, True, 0.0, "root", 0.0)


def notice(
    sequence: int, kind: EventKind = "opened", severity: Severity = "critical", rule: int = 1
) -> AlertNotice:
    event = AlertEvent("fp", sequence, kind, 60.0 * sequence, severity, "summary", {})
    return AlertNotice(event, "c1", rule, "topic:orders", None, None)


def test_an_event_belongs_to_the_run_its_latest_opening_started() -> None:
    openings = [(1, 60.0), (4, 240.0)]
    assert run_of(openings, 1) == (1, 60.0)
    assert run_of(openings, 3) == (1, 60.0)
    assert run_of(openings, 4) == (4, 240.0)
    assert run_of(openings, 9) == (4, 240.0)
    assert run_of([], 2) == (0, None)  # its opening is beyond the horizon


def test_the_filter_skips_but_a_follow_up_of_a_sent_event_goes_out() -> None:
    critical_only = webhook(severities=("critical",))
    assert skip_reason(critical_only, notice(1), 1, set()) is None
    warning = "severity warning is not in the webhook's severities ['critical']"
    assert skip_reason(critical_only, notice(2, "updated", "warning"), 1, set()) == warning
    assert skip_reason(critical_only, notice(2, "updated", "warning"), 1, {1}) is None  # a follow-up
    assert skip_reason(critical_only, notice(5, "resolved", "warning"), 4, {1, 2}) == warning  # another run
    assert skip_reason(critical_only, notice(4, "opened", "warning"), 4, {1}) == warning  # an opening never
    rule_2 = webhook(rules=(2,))
    assert skip_reason(rule_2, notice(1), 1, set()) == "rule 1 is not in the webhook's rules [2]"


def test_the_outbox_entry_is_pending_skipped_or_dead() -> None:
    hook = webhook()
    sent = outbox_entry(hook, notice(1), None, lambda w, n: "body")
    assert (sent.state, sent.payload, sent.error) == ("pending", "body", None)
    skipped = outbox_entry(hook, notice(1), "filtered", lambda w, n: "body")
    assert (skipped.state, skipped.payload, skipped.error) == ("skipped", None, "not sent: filtered")

    def broken(w: Webhook, n: AlertNotice) -> str:
        raise KeyError("oops")

    dead = outbox_entry(hook, notice(1), None, broken)
    assert (dead.state, dead.payload, dead.error) == (
        "dead",
        None,
        "cannot render the payload: KeyError: 'oops'",
    )
    long = outbox_entry(hook, notice(1), "x" * 1000, broken)
    assert long.error is not None
    assert len(long.error) == MAX_ERROR
    assert long.error.endswith("...")
    assert clip("short") == "short"
