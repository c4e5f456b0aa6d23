"""The incident lane: the incident rules (1-7, 10-19) on the live view, within a second of a change.

One thread evaluates, :meth:`IncidentLane.changed` (the ZooKeeper collector's ``on_change``) wakes it; it
waits ``coalesce_s`` for more changes, so that a broker crash that changes thousands of partitions over a
few milliseconds is one evaluation, and it evaluates anyway every ``interval_s`` and when an alert's
``for`` or resolve delay is due (:func:`analytics.lifecycle.next_due`), since those, the view's age and the
load lane's silence depend on time. One evaluation:

1. asks the leadership (shared with the webhook notifier) where this replica stands: a ``follower`` only
   records the controller's epochs (rule 4's history) and forgets the alert states;
2. builds the cluster's :class:`~analytics.model.HealthState` from the live view
   (:class:`~app.incidents.observe.HealthObserver`), the brokers' resources (rules 14-18:
   :class:`~app.incidents.resources.ResourceObserver`, which hears every snapshot to count ISR changes and
   log dir failure notices), the consumer groups' verdicts of the current consumer-lag round (rule 19,
   the ``consumer_groups`` source the service hands in) and the load lane's heartbeat from the store;
3. runs the incident rules (:func:`analytics.rules.evaluate`, lane ``incident``) and the time-based
   lifecycle (:func:`analytics.lifecycle.advance_timed`) against the alert states, read from the store when
   it takes over and kept since; the pages of rules 1-3 and 6 name the rule-5/14-18 alerts open on the
   brokers their partitions lag on (:func:`analytics.rules.link_causes`: the lifecycle is run once to know
   which causes are open after this evaluation, then again on the linked findings);
4. commits, in one transaction (:meth:`analytics.store.Store.commit_incidents`), the alerts that changed
   (:func:`analytics.lifecycle.worth_writing`), their events, and the webhook outbox rows of those events
   (:meth:`app.webhooks.store.WebhookStore.enqueue_in`: the notifier's own policy and rendering), each
   alert compared-and-set against the row as it was read;
5. wakes the notifier when it wrote events.

**One writer, and no duplicates even with two.** Only the elected replica writes. Should two believe they
are (a leader whose session expired without its knowing), the compare-and-set decides: the one whose rows
changed under it writes nothing, reads the states again and evaluates again; an event is never written
twice, because its ``(fingerprint, sequence)`` comes from the row it compared. A ``last-leader`` (this
replica led, and its ZooKeeper session is disconnected, so it cannot know whether another took over)
writes rule 11 only: when ZooKeeper is down for every replica nobody can be elected, and rule 11 is the
alert that says the lane is blind. The first compare-and-set that fails tells it another replica writes:
it stops until it is elected again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from sqlalchemy.engine import Connection

from analytics.config import DEFAULT_WINDOW_S
from analytics.lifecycle import advance_timed, next_due, worth_writing
from analytics.model import AlertEvent, AlertState, Window
from analytics.rules import (
    INCIDENT_RULES,
    LoadLaneStatus,
    RuleContext,
    RuleSettings,
    StalledAction,
    evaluate,
    held_causes,
    link_causes,
)
from analytics.store import Store, StoreConflictError, StoreError
from app.incidents.config import IncidentSettings
from app.incidents.observe import ControllerHistory, HealthObserver, LiveView
from app.incidents.resources import ResourceObserver
from app.leadership import Leadership, Standing
from app.webhooks.model import WebhookRenderer
from app.webhooks.store import DEFAULT_WEBHOOK_HORIZON_S, WebhookStore
from collectors.consumers.collector import GroupReport
from collectors.kafka.model import ClusterSnapshot

__all__ = ["IncidentLane", "IncidentStats", "Outcome"]

log = logging.getLogger(__name__)

MAX_ATTEMPTS: Final = 3
"""Evaluations of one round when another writer was first (each reads the states again)."""
ERROR_LOG_EVERY_S: Final = 60.0
LAST_LEADER_RULES: Final = frozenset({11})
"""What a last leader writes while its ZooKeeper session is disconnected."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one evaluation did."""

    standing: Standing
    evaluated: bool = False
    """False for a follower (and a superseded last leader): nothing was evaluated."""
    written: int = 0
    """Alert rows written."""
    events: tuple[AlertEvent, ...] = ()
    conflicts: int = 0
    """Compare-and-sets that found another writer first (the round was evaluated again)."""


@dataclass(frozen=True, slots=True)
class IncidentStats:
    """Counters of one lane since it started (``/metrics``)."""

    standing: Standing = "follower"
    evaluations: int = 0
    commits: int = 0
    events: int = 0
    conflicts: int = 0
    errors: int = 0
    last_evaluated_at: float | None = None
    last_evaluation_s: float | None = None
    """Wall time of the last evaluation (observation, rules, lifecycle, commit)."""
    superseded: bool = False
    """A last leader that found another writer and stopped until it is elected again."""


class IncidentLane:
    """Evaluates and writes the incident alerts of the cluster ``view`` shows; :meth:`start`, :meth:`stop`.

    ``leadership`` is shared with the notifier, which starts and stops it (with several clusters, the
    cluster's own, which the service starts). ``webhooks`` and ``render`` write the outbox rows of each
    event in the transaction that writes it (none without them); ``wake`` tells the notifier that events
    were committed. ``cluster`` is the cluster's name in the store: a named cluster's name, else (None) its
    cluster id (:func:`~app.incidents.observe.cluster_name`). ``rules`` are the rules' settings
    (thresholds, ``for`` and resolve durations), ``load_window_s`` the load lane's window (rule 11's
    silence check).
    """

    def __init__(
        self,
        view: LiveView,
        store: Store,
        leadership: Leadership,
        *,
        webhooks: WebhookStore | None = None,
        render: WebhookRenderer | None = None,
        wake: Callable[[], None] | None = None,
        settings: IncidentSettings | None = None,
        rules: RuleSettings | None = None,
        load_window_s: float = DEFAULT_WINDOW_S,
        webhook_horizon_s: float = DEFAULT_WEBHOOK_HORIZON_S,
        identity: str | None = None,
        clock: Callable[[], float] = time.time,
        stalled_actions: Callable[[], Sequence[StalledAction]] | None = None,
        cluster: str | None = None,
        consumer_groups: Callable[[], Mapping[str, GroupReport] | None] | None = None,
    ) -> None:
        self.view = view
        self._consumer_groups = consumer_groups
        """The consumer groups' verdicts of the current consumer-lag round (rule 19); None: not known."""
        self._stalled_actions = stalled_actions
        self.store = store
        self.leadership = leadership
        self.settings = settings or IncidentSettings()
        self.rules = rules or RuleSettings()
        self._webhooks = webhooks
        self._render = render
        self._wake = wake
        self._silent_after_s = self.settings.load_silence_windows * load_window_s
        self._webhook_horizon_s = webhook_horizon_s
        self._clock = clock
        self._observer = HealthObserver(identity or f"serve-{uuid.uuid4().hex[:8]}", cluster)
        self._history = ControllerHistory(self.rules.controller_flap_window_s)
        self._resources = ResourceObserver(self.rules.isr_flap_window_s)
        self._cluster: str | None = None
        self._states: dict[str, AlertState] | None = None
        """The alert states as this lane advanced them (None: read them from the store first)."""
        self._written: dict[str, AlertState] = {}
        """The rows as they are in the store (what the compare-and-set compares)."""
        self._superseded = False
        self._load_end: tuple[float, float | None] | None = None
        """(when read, the load lane's latest window end)."""
        self._heard: tuple[float | None, float] | None = None
        """(the load lane's latest window end, when this lane first saw it)."""
        self._evaluating = threading.Lock()
        self._changed = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()
        self._stats = IncidentStats()
        self._last_error = ("", 0.0)

    # -- running

    def start(self) -> None:
        """Evaluate at once, then on every change and timer, on a thread of its own (returns at once)."""
        if self._thread is not None:
            raise RuntimeError("the incident lane is already running")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="incident-lane", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the evaluation under way (its commit is whole or not at all)."""
        self._stopping.set()
        self._changed.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def changed(self, snapshot: ClusterSnapshot | None = None) -> None:
        """A new snapshot was published (the collector's ``on_change``; quick, never raises): record its
        controller epoch and evaluate soon."""
        if snapshot is not None:
            at = self._clock()
            self._history.record(at, snapshot.controller.epoch)
            self._resources.record(at, snapshot)
        self._changed.set()

    def stats(self) -> IncidentStats:
        with self._mutex:
            return self._stats

    def _run(self) -> None:
        next_tick = 0.0
        while not self._stopping.is_set():
            timeout = max(0.0, next_tick - self._clock())
            if self._changed.wait(timeout):
                if self._stopping.is_set():
                    break
                if self.settings.coalesce_s > 0:
                    self._stopping.wait(self.settings.coalesce_s)
                self._changed.clear()
            self._safely_evaluate()
            now = self._clock()
            next_tick = now + self.settings.interval_s
            due = self._next_due(now)
            if due is not None:
                next_tick = min(next_tick, due)

    def _safely_evaluate(self) -> None:
        try:
            self.evaluate_now()
        except Exception as exc:  # the store unreachable, a bug: keep evaluating, log each new error once
            self._count(errors=1)
            error, now = f"{type(exc).__name__}: {exc}", time.monotonic()
            last, logged_at = self._last_error
            if error != last or now - logged_at >= ERROR_LOG_EVERY_S:
                log.exception("incident lane: the evaluation failed; retrying")
                self._last_error = (error, now)

    def _next_due(self, now: float) -> float | None:
        with self._evaluating:
            states = self._states
            if not states:
                return None
            return next_due(states.values(), self.rules, after=now)

    # -- one evaluation

    def evaluate_now(self) -> Outcome:
        """One evaluation at the clock's now (the lane's thread calls it; tests may too)."""
        with self._evaluating:
            started = time.monotonic()
            outcome = self._evaluate()
            if outcome.evaluated:
                self._set(last_evaluation_s=time.monotonic() - started)
            return outcome

    def _stalled(self) -> tuple[StalledAction, ...] | None:
        """The STALLED runbook actions (rule 12); None when they cannot be read (rule 12 then waits)."""
        if self._stalled_actions is None:
            return None
        try:
            return tuple(self._stalled_actions())
        except Exception as exc:
            log.warning("incident lane: the runbook actions could not be read (rule 12 waits): %s", exc)
            return None

    def _evaluate(self) -> Outcome:
        now = self._clock()
        standing = self.leadership.standing()
        if standing == "leader":
            self._superseded = False
        self._set(standing=standing, superseded=self._superseded)
        if standing == "follower" or self._superseded:
            self._states = None  # another replica writes: read the store again when this one leads
            return Outcome(standing)
        live = self.view.state
        health = self._observer.observe(live, now)
        resources = self._resources.observe(live.snapshot, live.scrape, self.view.all_disks(), now)
        cluster = health.cluster
        if cluster != self._cluster:
            self._cluster, self._states, self._load_end, self._heard = cluster, None, None, None
        groups = None if self._consumer_groups is None else self._consumer_groups()
        conflicts = 0
        for _ in range(MAX_ATTEMPTS):
            states = self._states if self._states is not None else self._load(cluster)
            context = RuleContext(
                window=Window(cluster, now, now),
                now=now,
                health=health,
                history=self._history.states(health),
                load=None,
                settings=self.rules,
                load_lane=self._load_lane(cluster, now),
                stalled_actions=self._stalled(),
                resources=resources,
                consumer_groups=groups,
            )
            evaluation = evaluate(context, "incident")
            first = advance_timed(cluster, now, evaluation, states, self.rules)
            after = {**states, **{s.fingerprint: s for s in first.states}}
            linked = link_causes(evaluation, cluster, held_causes(cluster, after.values()))
            transition = (
                first if linked is evaluation else advance_timed(cluster, now, linked, states, self.rules)
            )
            changed = list(transition.states)
            events = list(transition.events)
            if standing == "last-leader":
                changed = [s for s in changed if s.rule in LAST_LEADER_RULES]
                events = [e for e in events if e.fingerprint in {s.fingerprint for s in changed}]
            with_events = {e.fingerprint for e in events}
            writes = [
                s
                for s in changed
                if s.fingerprint in with_events or worth_writing(self._written.get(s.fingerprint), s)
            ]
            try:
                self._commit(cluster, writes, events, now)
            except StoreConflictError as exc:
                conflicts += 1
                self._count(conflicts=1)
                self._states = None
                log.info("incident lane: another writer was first (%s); reading the alerts again", exc)
                if standing == "last-leader":
                    self._superseded = True  # another replica writes: wait to be elected again
                    self._set(superseded=True)
                    break
                continue
            for state in changed:
                states[state.fingerprint] = state
            for state in writes:
                self._written[state.fingerprint] = state
            self._count(evaluations=1, commits=1 if writes else 0, events=len(events))
            self._set(last_evaluated_at=now)
            for event in events:
                alert = states[event.fingerprint]
                log.info(
                    "incident lane: rule %d %s %s (%s): %s",
                    alert.rule,
                    alert.subject,
                    event.kind,
                    event.severity,
                    event.summary,
                )
            if events and self._wake is not None:
                self._wake()
            return Outcome(standing, True, len(writes), tuple(events), conflicts)
        return Outcome(standing, True, 0, (), conflicts)

    def _load(self, cluster: str) -> dict[str, AlertState]:
        """The cluster's incident alerts as stored: where this lane takes over (an older Spark job's rows
        included, as they are)."""
        loaded = self.store.alert_states(cluster, rules=INCIDENT_RULES)
        self._states, self._written = dict(loaded), dict(loaded)
        return self._states

    def _load_lane(self, cluster: str, now: float) -> LoadLaneStatus | None:
        mode = self.settings.load_silence
        if mode == "off":
            return None
        cached = self._load_end
        if cached is None or not cached[0] <= now < cached[0] + min(self.settings.interval_s, 5.0):
            cached = self._load_end = (now, self.store.latest_load_end(cluster))
            if self._heard is None or self._heard[0] != cached[1]:
                self._heard = (cached[1], now)  # a new window (or the first look): heard of it now
        heard_at = now if self._heard is None else self._heard[1]
        return LoadLaneStatus(cached[1], heard_at, self._silent_after_s, required=mode == "require")

    def _commit(self, cluster: str, writes: list[AlertState], events: list[AlertEvent], now: float) -> None:
        if not writes:
            return
        expected = {s.fingerprint: _version(self._written.get(s.fingerprint)) for s in writes}
        webhooks, render = self._webhooks, self._render
        also: Callable[[Connection], None] | None = None
        if events and webhooks is not None and render is not None:
            fingerprints = sorted({e.fingerprint for e in events})
            horizon = self._webhook_horizon_s

            def also(conn: Connection) -> None:
                webhooks.enqueue_in(conn, fingerprints, now, render, horizon_s=horizon)

        try:
            self.store.commit_incidents(cluster, writes, events, expected=expected, also=also)
        except StoreConflictError:
            raise
        except StoreError:
            self._states = None  # unknown whether it committed: read the store again next time
            raise

    # -- stats

    def _count(self, **increments: int) -> None:
        with self._mutex:
            self._stats = replace(
                self._stats, **{name: getattr(self._stats, name) + n for name, n in increments.items()}
            )

    def _set(self, **values: object) -> None:
        with self._mutex:
            self._stats = replace(self._stats, **values)  # type: ignore[arg-type]


def _version(state: AlertState | None) -> tuple[int, float] | None:
    return None if state is None else (state.event_sequence, state.last_window_end)
