"""The alert lifecycle: hysteresis over the rules' findings, as pure functions, one per lane.

- :func:`advance` (the load lane, the Spark job): windowed hysteresis, counted in event-time windows;
- :func:`advance_timed` (the incident lane, ``kafka-health serve``): time-based hysteresis, an alert opens
  once its condition has held ``for`` a duration and resolves once it has been clear for a duration
  (see its docstring and the end of this docstring).

Both share the states, the events and the identity below. The windowed lifecycle:

An alert is identified by its fingerprint (cluster, rule, subject) and is in one of three states:

- ``pending``: the rule fired, but not yet for ``open_after`` consecutive evaluated windows (or, for
  rule 2, not yet for ``urp_for_s``). Nothing is sent. A clean window drops it back to ``resolved``
  without an event: a condition that comes and goes faster than ``open_after`` pages nobody;
- ``open``: ``opened`` was sent. A change of severity or summary sends ``updated``; ``resolve_after``
  consecutive clean windows send ``resolved``. A hit in between restarts the count, so a flapping condition
  keeps one open alert instead of a stream of opened/resolved pairs;
- ``resolved``: firing again starts a new pending run under the same fingerprint, and its events continue
  the fingerprint's sequence.

A window counts for an alert only if its rule was evaluated in it (its inputs were present): a window
without a cluster sample neither confirms nor clears anything. A window that does not end after the
alert's ``last_window_end`` is ignored for it, so re-processing an old window (a replayed micro-batch)
changes nothing; events carry the window's end as ``at``, so a replay would produce identical rows anyway.

A pending alert that never opened is kept as a ``resolved`` row with ``event_sequence`` 0 and
``opened_at`` None rather than deleted: the row's ``last_window_end`` is what makes a replay of the window
that created it a no-op. Readers that list alerts show rows with ``event_sequence > 0``.
``opened_at`` / ``resolved_at`` describe the latest run that opened; a pending run leaves them alone.

The time-based lifecycle (:func:`advance_timed`) has the same states and events, timed by the evaluation
instant ``now`` instead of a window: ``pending`` until the condition has held ``for_s_of(rule)`` seconds
since ``first_seen`` (0: it opens at once), ``open`` until it has not fired for
``resolve_after_s_of(rule)`` seconds (since ``last_seen``, the last evaluation that saw it). Rows written
by the windowed lifecycle (an older Spark job's rules 1-7, 10, 11) are taken over as they are: an open
alert stays open and its events continue its sequence. :func:`next_due` says when the next change is due
without a new finding, and :func:`worth_writing` which changed rows the incident lane must write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from analytics.model import (
    SEVERITY_ORDER,
    AlertEvent,
    AlertState,
    EventKind,
    Finding,
    Window,
    fingerprint,
)
from analytics.rules import Evaluation, RuleSettings

HEARTBEAT_S = 5.0
"""The incident lane rewrites an alert whose only change is its counters and ``last_seen`` at most this
often (:func:`worth_writing`), so that a new leader resumes with a ``last_seen`` this fresh."""


@dataclass(frozen=True, slots=True)
class Transition:
    """What one window changed for one cluster."""

    states: tuple[AlertState, ...]
    """Every alert state that changed (upsert by fingerprint), ordered by fingerprint."""
    events: tuple[AlertEvent, ...]
    """New events (insert; ``(fingerprint, sequence)`` is unique), ordered by fingerprint."""


def advance(
    cluster: str,
    window: Window,
    evaluation: Evaluation,
    alerts: Mapping[str, AlertState],
    settings: RuleSettings,
) -> Transition:
    """Apply one window's evaluation to the cluster's alerts (current states by fingerprint)."""
    return _apply(
        cluster,
        evaluation,
        alerts,
        stale=lambda previous: window.end <= previous.last_window_end,
        hit=lambda fp, finding, previous: _hit(fp, cluster, window, finding, previous, settings),
        clean=lambda previous: _clean(window, previous, settings),
    )


Step = tuple[AlertState, AlertEvent | None]


def _apply(
    cluster: str,
    evaluation: Evaluation,
    alerts: Mapping[str, AlertState],
    *,
    stale: Callable[[AlertState], bool],
    hit: Callable[[str, Finding, AlertState | None], Step],
    clean: Callable[[AlertState], Step],
) -> Transition:
    """Both lifecycles' walk: every fingerprint found now or known before, in order. Another cluster's
    alerts and ``stale`` ones are left alone; a finding is a ``hit``; an evaluated rule without a finding
    is a ``clean`` of its unresolved alert; a rule that was not evaluated changes nothing."""
    findings = findings_by_fingerprint(cluster, evaluation.findings)
    states: list[AlertState] = []
    events: list[AlertEvent] = []
    for fp in sorted(findings.keys() | alerts.keys()):
        previous = alerts.get(fp)
        if previous is not None and (previous.cluster != cluster or stale(previous)):
            continue
        finding = findings.get(fp)
        if finding is not None:
            state, event = hit(fp, finding, previous)
        elif previous is not None and previous.rule in evaluation.evaluated and previous.state != "resolved":
            state, event = clean(previous)
        else:
            continue
        states.append(state)
        if event is not None:
            events.append(event)
    return Transition(states=tuple(states), events=tuple(events))


def findings_by_fingerprint(cluster: str, findings: Iterable[Finding]) -> dict[str, Finding]:
    """One finding per fingerprint; should a rule report a subject twice, the most severe wins (then the
    first summary in sort order, so the result does not depend on the order of the findings)."""
    chosen: dict[str, Finding] = {}
    for finding in findings:
        fp = fingerprint(cluster, finding.rule, finding.subject)
        other = chosen.get(fp)
        if other is None or _outranks(finding, other):
            chosen[fp] = finding
    return chosen


def _outranks(a: Finding, b: Finding) -> bool:
    rank_a, rank_b = SEVERITY_ORDER[a.severity], SEVERITY_ORDER[b.severity]
    return rank_a > rank_b or (rank_a == rank_b and a.summary < b.summary)


def _hit(
    fp: str,
    cluster: str,
    window: Window,
    finding: Finding,
    previous: AlertState | None,
    settings: RuleSettings,
) -> tuple[AlertState, AlertEvent | None]:
    running = previous is not None and previous.state != "resolved" and previous.hits > 0
    hits = previous.hits + 1 if previous is not None and running else 1
    first_seen = previous.first_seen if previous is not None and running else window.start
    state = AlertState(
        fingerprint=fp,
        cluster=cluster,
        rule=finding.rule,
        subject=finding.subject,
        severity=finding.severity,
        state="pending" if previous is None or previous.state == "resolved" else previous.state,
        summary=finding.summary,
        evidence=finding.evidence,
        action=finding.action,
        hits=hits,
        clean=0,
        first_seen=first_seen,
        last_seen=window.end,
        opened_at=None if previous is None else previous.opened_at,
        resolved_at=None if previous is None else previous.resolved_at,
        last_window_end=window.end,
        event_sequence=0 if previous is None else previous.event_sequence,
    )
    if previous is None or previous.state != "open":
        ripe = hits >= settings.open_after_for(finding.rule)
        if ripe and window.end - first_seen >= settings.min_duration_s(finding.rule):
            state = replace(state, state="open", opened_at=window.end, resolved_at=None)
            return _emit(state, "opened", window)
        return state, None
    if (state.severity, state.summary) != (previous.severity, previous.summary):
        return _emit(state, "updated", window)
    return state, None


def _clean(
    window: Window, previous: AlertState, settings: RuleSettings
) -> tuple[AlertState, AlertEvent | None]:
    state = replace(previous, hits=0, clean=previous.clean + 1, last_window_end=window.end)
    if previous.state == "pending":
        return replace(state, state="resolved"), None
    if state.clean >= settings.resolve_after_for(previous.rule):
        return _emit(replace(state, state="resolved", resolved_at=window.end), "resolved", window)
    return state, None


def _emit(state: AlertState, kind: EventKind, window: Window) -> tuple[AlertState, AlertEvent]:
    sequence = state.event_sequence + 1
    event = AlertEvent(
        fingerprint=state.fingerprint,
        sequence=sequence,
        kind=kind,
        at=window.end,
        severity=state.severity,
        summary=state.summary,
        evidence=state.evidence,
    )
    return replace(state, event_sequence=sequence), event


# --- the time-based lifecycle (the incident lane) ---------------------------------------------------------


def advance_timed(
    cluster: str,
    now: float,
    evaluation: Evaluation,
    alerts: Mapping[str, AlertState],
    settings: RuleSettings,
) -> Transition:
    """Apply one evaluation at ``now`` to the cluster's alerts (current states by fingerprint).

    A finding is a hit: a new run starts ``pending`` (``first_seen = now``) and opens, with ``opened``,
    once ``now - first_seen >= for_s_of(rule)`` (the finding's own ``for_s`` when it has one); an open
    alert records the hit and sends ``updated`` when its severity or summary changed. An evaluated rule
    without a finding clears a pending run (no event) and resolves an open alert, with ``resolved``, once
    ``now - last_seen >= resolve_after_s_of(rule)``. A rule that was not evaluated (its inputs missing)
    changes nothing. Events are timed ``now``.
    """
    return _apply(
        cluster,
        evaluation,
        alerts,
        stale=lambda previous: False,
        hit=lambda fp, finding, previous: _timed_hit(fp, cluster, now, finding, previous, settings),
        clean=lambda previous: _timed_clean(now, previous, settings),
    )


def _timed_hit(
    fp: str,
    cluster: str,
    now: float,
    finding: Finding,
    previous: AlertState | None,
    settings: RuleSettings,
) -> tuple[AlertState, AlertEvent | None]:
    running = previous is not None and previous.state != "resolved" and previous.hits > 0
    state = AlertState(
        fingerprint=fp,
        cluster=cluster,
        rule=finding.rule,
        subject=finding.subject,
        severity=finding.severity,
        state="pending" if previous is None or previous.state == "resolved" else previous.state,
        summary=finding.summary,
        evidence=finding.evidence,
        action=finding.action,
        hits=previous.hits + 1 if previous is not None and running else 1,
        clean=0,
        first_seen=previous.first_seen if previous is not None and running else now,
        last_seen=now,
        opened_at=None if previous is None else previous.opened_at,
        resolved_at=None if previous is None else previous.resolved_at,
        last_window_end=now,
        event_sequence=0 if previous is None else previous.event_sequence,
    )
    if previous is None or previous.state != "open":
        hold = settings.for_s_of(finding.rule) if finding.for_s is None else finding.for_s
        if now - state.first_seen >= hold:
            state = replace(state, state="open", opened_at=now, resolved_at=None)
            return _emit_at(state, "opened", now)
        return state, None
    if (state.severity, state.summary) != (previous.severity, previous.summary):
        return _emit_at(state, "updated", now)
    return state, None


def _timed_clean(
    now: float, previous: AlertState, settings: RuleSettings
) -> tuple[AlertState, AlertEvent | None]:
    state = replace(previous, hits=0, clean=previous.clean + 1, last_window_end=now)
    if previous.state == "pending":
        return replace(state, state="resolved"), None
    if now - previous.last_seen >= settings.resolve_after_s_of(previous.rule):
        return _emit_at(replace(state, state="resolved", resolved_at=now), "resolved", now)
    return state, None


def next_due(alerts: Iterable[AlertState], settings: RuleSettings, *, after: float) -> float | None:
    """The earliest instant later than ``after`` at which an alert changes without a new finding: a pending
    run ripens (if it keeps firing) or an open alert that stopped firing resolves (if it stays clear); None
    when none can. (An instant already past is not due: its rule was not evaluated since.)"""
    due: list[float] = []
    for alert in alerts:
        if alert.state == "pending" and alert.hits > 0:
            due.append(alert.first_seen + settings.for_s_of(alert.rule))
        elif alert.state == "open" and alert.clean > 0:
            due.append(alert.last_seen + settings.resolve_after_s_of(alert.rule))
    return min((d for d in due if d > after), default=None)


def worth_writing(written: AlertState | None, state: AlertState, heartbeat_s: float = HEARTBEAT_S) -> bool:
    """Whether the incident lane writes ``state`` over ``written`` (the row as it was last written): when
    anything but its counters and times changed, and otherwise at most every ``heartbeat_s``."""
    if written is None:
        return True
    if _identity(written) != _identity(state):
        return True
    return state.last_window_end - written.last_window_end >= heartbeat_s


def _identity(state: AlertState) -> tuple[object, ...]:
    return (
        state.state,
        state.severity,
        state.summary,
        dict(state.evidence),
        state.action,
        state.first_seen,
        state.opened_at,
        state.resolved_at,
        state.event_sequence,
    )


def _emit_at(state: AlertState, kind: EventKind, now: float) -> tuple[AlertState, AlertEvent]:
    return _emit(state, kind, Window(state.cluster, now, now))
