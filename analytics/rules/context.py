"""What a rule reads (:class:`RuleContext`), what an evaluation returns, and the helpers the rules share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple
from urllib.parse import urlencode

from analytics.model import (
    BrokerResources,
    Finding,
    HealthState,
    LoadWindow,
    PartitionSet,
    Suspect,
    Window,
)
from analytics.rules.settings import RuleSettings
from collectors.consumers.collector import GroupReport

EXAMPLES_IN_SUMMARY = 3


@dataclass(frozen=True, slots=True)
class LoadLaneStatus:
    """What rule 11 needs to tell a silent load lane (a stopped collector or Spark job) from a quiet one:
    when its latest window was written, as the incident lane saw it arrive in the store."""

    latest_window_end: float | None
    """End of the cluster's latest load window in the store; None when the store never held one."""
    heard_at: float
    """When the incident lane first saw that window in the store (about when it was written), or began
    watching when there was none: a job that writes its windows late but regularly is not silent."""
    silent_after_s: float
    """No new load window for longer than this is silence (a multiple of the window)."""
    required: bool = False
    """Silence counts before the first window too (a deployment that must run the Spark job)."""


@dataclass(frozen=True, slots=True)
class RuleContext:
    window: Window
    """The load lane's event-time window; the incident lane's evaluation instant (``[now, now]``)."""
    now: float
    """The window's end (event time, so replays evaluate the same), or the incident lane's clock."""
    health: HealthState | None
    """The latest health state; None when the window had no cluster sample."""
    history: tuple[HealthState, ...]
    """Earlier states, oldest first (rule 4's flapping)."""
    load: LoadWindow | None
    """None when the window had no broker samples (and always in the incident lane)."""
    settings: RuleSettings
    load_lane: LoadLaneStatus | None = None
    """The load lane's heartbeat for rule 11 (incident lane); None: not checked."""
    stalled_actions: tuple[StalledAction, ...] | None = None
    """The runbook actions that are STALLED now (rule 12, incident lane); None: not checked (rule 12 is
    then not evaluated, so its alerts neither open nor resolve)."""
    resources: Mapping[int, BrokerResources] | None = None
    """Broker id -> its resources and ISR churn (rules 14-18, incident lane: the live view's scrape, disk
    model and snapshots); None: not known (rules 14-18 are then not evaluated)."""
    consumer_groups: Mapping[str, GroupReport] | None = None
    """Group -> its lag and verdict in the latest current round of the consumer-lag collector (rule 19,
    incident lane); None: no current round (rule 19 is then not evaluated)."""


@dataclass(frozen=True, slots=True)
class StalledAction:
    """A runbook action the service's executors report STALLED (rule 12)."""

    id: str
    kind: str
    reason: str
    since: float | None = None


Needs = Literal["health", "current", "load", "actions", "resources", "consumers"]
RuleCheck = Callable[[RuleContext], list[Finding]]


class Rule(NamedTuple):
    number: int
    check: RuleCheck
    needs: Needs


@dataclass(frozen=True, slots=True)
class Evaluation:
    evaluated: frozenset[int]
    """Rules whose inputs were present: for these, no finding means a clean window."""
    findings: tuple[Finding, ...]


# --- helpers -----------------------------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _examples(partitions: PartitionSet, topic: str) -> str:
    """``orders-0, orders-4 and 3 more`` from the collector's capped example list."""
    shown = partitions.examples.get(topic, ())[:EXAMPLES_IN_SUMMARY]
    names = ", ".join(f"{topic}-{p}" for p in shown)
    rest = partitions.by_topic.get(topic, 0) - len(shown)
    if not names:
        return ""
    return f"{names} and {rest} more" if rest > 0 else names


def _affected_topics(partitions: PartitionSet) -> list[tuple[str, int]]:
    return sorted((topic, n) for topic, n in partitions.by_topic.items() if n > 0)


def _partitions_query(**params: str | int) -> str:
    return f"/api/v1/partitions?{urlencode(params)}"


def _topic_evidence(partitions: PartitionSet, topic: str, count: int) -> dict[str, Any]:
    return {"topic": topic, "count": count, "examples": list(partitions.examples.get(topic, ()))}


def known_good_age(health: HealthState, now: float) -> float:
    """Seconds since the collector last knew its ZooKeeper view to be in sync (never negative)."""
    return max(0.0, now - health.last_good_at)


def is_current(health: HealthState, now: float, settings: RuleSettings) -> bool:
    """Whether the state can be trusted for the ZooKeeper-derived rules: exactly when rule 11 is quiet."""
    return not health.stale and known_good_age(health, now) <= settings.stale_after_s


def _is_strong(suspect: Suspect, settings: RuleSettings) -> bool:
    return suspect.share > settings.suspect_share and suspect.missing_from >= settings.suspect_min_urps


def _top_suspect(health: HealthState, settings: RuleSettings) -> int | None:
    """The broker most URPs wait for, if the case is strong (rule 6's test; a down broker counts here)."""
    ranked = sorted(health.suspects, key=lambda s: (-s.missing_from, s.broker_id))
    return next((s.broker_id for s in ranked if _is_strong(s, settings)), None)
