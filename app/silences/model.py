"""What a silence is, what it silences, and the checks a new one passes (pure: no I/O).

A silence mutes the webhook deliveries of the alerts it matches for a while (``starts_at`` to
``ends_at``), as Alertmanager's silences do: the alerts still open, update and resolve and are recorded,
but their events are not sent; an alert still open when its silence ends pages then (one ``opened``).

It matches an alert when **every** matcher matches the alert's labels (:func:`alert_labels`: ``cluster``,
``rule``, ``subject``, ``broker``, ``topic``, ``group``, ``severity``; a label the alert does not have is
the empty string, as in Alertmanager) and, when it has one, its **maintenance window** covers the alert
(:func:`maintenance_covers`: exactly the alerts a planned stop of one broker explains, which label equality
cannot express). Regex matchers are anchored (the whole value must match), like Alertmanager's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "MATCHER_NAMES",
    "MAX_DURATION_S",
    "MAX_MATCHERS",
    "SILENCE_STATES",
    "AlertFacts",
    "Maintenance",
    "Matcher",
    "Silence",
    "SilenceDraft",
    "SilenceProblem",
    "SilenceState",
    "alert_labels",
    "check_draft",
    "maintenance_covers",
    "silencers",
]

SilenceState = Literal["active", "pending", "expired"]
SILENCE_STATES: Final[tuple[SilenceState, ...]] = ("active", "pending", "expired")
MATCHER_NAMES: Final = ("cluster", "rule", "subject", "broker", "topic", "group", "severity")
"""The labels a matcher may name."""
MAX_MATCHERS: Final = 20
MAX_DURATION_S: Final = 366 * 86400.0
"""The longest a silence may last (a year and a day): a silence is for maintenance, not for ever."""
MAX_VALUE: Final = 1000
MAINTENANCE_RULES: Final = frozenset({2, 5, 6, 7})
"""The rules a broker's maintenance window may silence (:func:`maintenance_covers`)."""


@dataclass(frozen=True, slots=True)
class AlertFacts:
    """What a silence is matched against: an alert's identity and one of its states (an event's severity
    and evidence, or the alert's current ones)."""

    cluster: str
    rule: int
    subject: str
    severity: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


def _subject_part(subject: str, kind: str) -> str | None:
    head, _, rest = subject.partition(":")
    if head != kind or not rest:
        return None
    return rest.split(":", 1)[0] if kind == "broker" else rest


def _broker_of(facts: AlertFacts) -> str:
    """The broker an alert names: its subject's (``broker:<id>``, ``broker:<id>:<mount>``), else the one its
    evidence names (``broker``; rule 2's ``suspect``, the broker most of its partitions lack)."""
    found = _subject_part(facts.subject, "broker")
    if found is not None:
        return found
    for key in ("broker", "suspect"):
        value = facts.evidence.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return ""


def alert_labels(facts: AlertFacts) -> dict[str, str]:
    """The labels matchers are tested against (an absent one is ``""``)."""
    topic = _subject_part(facts.subject, "topic")
    if topic is None:
        evidence_topic = facts.evidence.get("topic")
        topic = evidence_topic if isinstance(evidence_topic, str) else ""
    return {
        "cluster": facts.cluster,
        "rule": str(facts.rule),
        "subject": facts.subject,
        "broker": _broker_of(facts),
        "topic": topic,
        "group": _subject_part(facts.subject, "group") or "",
        "severity": facts.severity,
    }


@dataclass(frozen=True, slots=True)
class Matcher:
    """``name`` equals ``value``, or (``regex``) ``value`` matches the whole label."""

    name: str
    value: str
    regex: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        label = labels.get(self.name, "")
        if self.regex:
            return _compiled(self.value).fullmatch(label) is not None
        return label == self.value

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "regex": self.regex}


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        if len(_PATTERNS) > 1000:
            _PATTERNS.clear()
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled


@dataclass(frozen=True, slots=True)
class Maintenance:
    """A planned stop of one broker (``{"maintenance": {"broker": N}}``): what its absence explains."""

    broker: int

    def covers(self, facts: AlertFacts) -> bool:
        return maintenance_covers(self.broker, facts)

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.broker}


def _lagging_brokers(evidence: Mapping[str, Any]) -> set[int] | None:
    """The brokers whose replicas a rule-1/2/3 finding's partitions lack from their ISR (its evidence's
    ``lagging``); None when the evidence does not say."""
    lagging = evidence.get("lagging")
    if not isinstance(lagging, list):
        return None
    brokers: set[int] = set()
    for entry in lagging:
        broker = entry.get("broker") if isinstance(entry, Mapping) else None
        if not isinstance(broker, int) or isinstance(broker, bool):
            return None
        brokers.add(broker)
    return brokers


def maintenance_covers(broker: int, facts: AlertFacts) -> bool:
    """Whether broker ``broker`` being stopped explains the alert, exactly:

    - rule 5 (not registered) and rule 7 (preferred-leader imbalance) for ``broker:<broker>``;
    - rule 6 (suspect broker) for ``broker:<broker>``: the broker missing from the ISRs is this one;
    - rule 2 (under-replicated, per topic) when the only broker its partitions lack from their ISRs is this
      one (every entry of its evidence's ``lagging`` names it);

    and nothing else: not rule 2 when another broker is missing too, not rules 1 and 3 (offline, under min
    ISR: clients are failing, which a planned restart must never cause), not any other broker's alerts.
    """
    if facts.rule not in MAINTENANCE_RULES:
        return False
    if facts.rule in (5, 6, 7):
        return facts.subject == f"broker:{broker}"
    return _lagging_brokers(facts.evidence) == {broker}


@dataclass(frozen=True, slots=True)
class Silence:
    """A stored silence. ``ends_at`` is when it ends (set to the time it was expired, when expired by
    hand, ``expired_by`` then says who)."""

    id: int
    matchers: tuple[Matcher, ...]
    maintenance: Maintenance | None
    starts_at: float
    ends_at: float
    comment: str
    created_by: str
    created_at: float
    expired_by: str | None = None
    expired_at: float | None = None

    def state(self, now: float) -> SilenceState:
        if now >= self.ends_at:
            return "expired"
        return "pending" if now < self.starts_at else "active"

    def active_at(self, at: float) -> bool:
        return self.starts_at <= at < self.ends_at

    def matches(self, facts: AlertFacts) -> bool:
        """Whether the silence matches the alert (whenever it is active)."""
        if self.maintenance is not None and not self.maintenance.covers(facts):
            return False
        labels = alert_labels(facts)
        return all(m.matches(labels) for m in self.matchers)


def silencers(silences: Iterable[Silence], facts: AlertFacts, at: float) -> list[int]:
    """The ids of the silences active at ``at`` that match the alert, in id order."""
    return sorted(s.id for s in silences if s.active_at(at) and s.matches(facts))


# --- a new silence ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SilenceDraft:
    """A checked request for a silence: what the store writes."""

    matchers: tuple[Matcher, ...]
    maintenance: Maintenance | None
    starts_at: float
    ends_at: float
    comment: str


@dataclass(frozen=True, slots=True)
class SilenceProblem:
    """One reason a request is refused: where (a JSON path such as ``matchers.0.name``) and why."""

    loc: str
    msg: str


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_draft(
    *,
    matchers: Sequence[Mapping[str, Any]],
    maintenance: Mapping[str, Any] | None,
    duration_s: float | None,
    ends_at: float | None,
    starts_at: float | None,
    comment: str,
    now: float,
) -> SilenceDraft | list[SilenceProblem]:
    """The draft of a silence request, or every problem with it (nothing half-applied).

    At least one matcher or a maintenance window; each matcher's name one of :data:`MATCHER_NAMES` and its
    regex valid; exactly one of ``duration_s`` and ``ends_at``; ``ends_at`` in the future and after
    ``starts_at``. A ``starts_at`` in the past starts the silence now (as Alertmanager does): a silence
    never reaches back to events already recorded.
    """
    problems: list[SilenceProblem] = []
    checked: list[Matcher] = []
    if not matchers and maintenance is None:
        problems.append(SilenceProblem("matchers", "give at least one matcher (or a maintenance window)"))
    if len(matchers) > MAX_MATCHERS:
        problems.append(SilenceProblem("matchers", f"at most {MAX_MATCHERS} matchers"))
    for i, raw in enumerate(matchers):
        name, value, regex = raw.get("name"), raw.get("value"), bool(raw.get("regex", False))
        if name not in MATCHER_NAMES:
            problems.append(
                SilenceProblem(
                    f"matchers.{i}.name",
                    f"unknown matcher name {name!r}: use one of {', '.join(MATCHER_NAMES)}",
                )
            )
            continue
        if not isinstance(value, str) or len(value) > MAX_VALUE:
            problems.append(SilenceProblem(f"matchers.{i}.value", f"a string of at most {MAX_VALUE}"))
            continue
        if regex:
            try:
                re.compile(value)
            except re.error as exc:
                problems.append(
                    SilenceProblem(f"matchers.{i}.value", f"invalid regular expression {value!r}: {exc}")
                )
                continue
        checked.append(Matcher(str(name), value, regex))
    window: Maintenance | None = None
    if maintenance is not None:
        broker = maintenance.get("broker")
        unknown = sorted(set(maintenance) - {"broker"})
        if unknown:
            problems.append(SilenceProblem("maintenance", f"unknown fields {unknown}: only broker"))
        elif not isinstance(broker, int) or isinstance(broker, bool) or broker < 0:
            problems.append(
                SilenceProblem("maintenance.broker", f"a broker id (an integer >= 0), got {broker!r}")
            )
        else:
            window = Maintenance(broker)
    start = now if starts_at is None else starts_at
    if starts_at is not None and not _finite(starts_at):
        problems.append(SilenceProblem("starts_at", "a finite time"))
        start = now
    start = max(start, now)
    end: float | None = None
    if (duration_s is None) == (ends_at is None):
        problems.append(SilenceProblem("duration_s", "give exactly one of duration_s and ends_at"))
    elif duration_s is not None:
        if not _finite(duration_s) or not 0 < duration_s <= MAX_DURATION_S:
            problems.append(SilenceProblem("duration_s", f"seconds above 0, at most {MAX_DURATION_S:g}"))
        else:
            end = start + duration_s
    elif ends_at is not None:
        if not _finite(ends_at):
            problems.append(SilenceProblem("ends_at", "a finite time"))
        elif ends_at <= now:
            problems.append(SilenceProblem("ends_at", "ends_at is in the past: a silence must end later"))
        elif ends_at <= start:
            problems.append(SilenceProblem("ends_at", "ends_at must be after starts_at"))
        elif ends_at - start > MAX_DURATION_S:
            problems.append(SilenceProblem("ends_at", f"a silence lasts at most {MAX_DURATION_S:g} s"))
        else:
            end = ends_at
    if problems or end is None:
        return problems
    return SilenceDraft(tuple(checked), window, start, end, comment)
