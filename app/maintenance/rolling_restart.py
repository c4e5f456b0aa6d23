"""The rolling-restart conductor: every broker restarted once, one at a time, the controller last, never
while stopping it would take a partition offline or under min ISR, with its absence silenced and its
leaderships moved away and back.

For each broker, in order (the active controller moved last, again before each broker, should it move):

1. ``wait_safe``: wait until it is safe to stop, as ``kafka-health safe-to-stop`` judges
   (:func:`collectors.safe_to_stop.safe_to_stop`, through :func:`app.maintenance.watch.wait`), at most
   ``max_unsafe_wait_s``;
2. ``demote``: the service's ``demote-broker`` action, so that it leads nothing when it stops (refused for
   now, 409: another demotion or promotion unfinished, a reassignment in ZooKeeper, it is asked again, at
   most ``max_unsafe_wait_s``; a run that crashed between starting it and journaling its id follows that
   action, found in the service's log, rather than start another);
3. ``silence``: the service's maintenance silence for it (what its absence raises, nothing else), for its
   window: ``wait_rejoined_s`` from now;
4. ``restart``: run the restart command (:class:`Restarter`), or, in external mode, tell that it may be
   stopped and wait; either way, until it registers again with a new session (a new czxid of
   ``/brokers/ids/N``, the broker epoch);
5. ``rejoin``: wait until every partition with a replica on it has it back in the ISR, until the window
   ends; if it has not, the run stops there and lifts nothing, so the alerts page;
6. ``promote``: the service's ``promote-broker`` action (the leaderships back);
7. ``unsilence``: expire its silence, once the alerts it holds have resolved (one still open when its
   silence ends would page: rule 5 resolves some time after the broker registers again), at the latest
   when its window ends.

Before each broker and throughout every wait, a condition that the broker being restarted does not explain
stops the run (:func:`unexplained`): another broker down, a partition offline, a partition under min ISR
with a replica other than the restarted broker missing from its ISR.

Every step is journaled (:mod:`app.maintenance.journal`) when it starts and when it ends; a run resumed
from the journal goes on where it was and never restarts a broker twice. A stop signal (``stop``) pauses
the run at the next wait or between steps.

The I/O is behind small interfaces (:class:`Cluster`, :class:`Restarter`, :class:`MaintenanceService`,
the journal), so the command line and the tests plug in theirs.
"""

from __future__ import annotations

import io
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO, TypeVar

from app.maintenance.journal import (
    DONE,
    PAUSED,
    RUNNING,
    STEPS,
    STOPPED,
    BrokerProgress,
    RunRecord,
)
from app.maintenance.watch import POLL_S, wait
from collectors.health import broker_default_min_insync_replicas, effective_min_isr, min_insync_replicas
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, TopicPartition
from collectors.safe_to_stop import SafeToStop, safe_to_stop, trusted

T = TypeVar("T")

LISTED = 5
"""Partitions named in one sentence; the rest are counted."""
ACTION_POLL_S = 1.0
"""How often the state of a demotion or promotion is read from the service."""
RETRY_S = 2.0
"""How often a demotion or promotion the service refused for now (409) is asked again."""
HELD_POLL_S = 1.0
"""How often the alerts a broker's silence holds are counted while the conductor waits for them to
resolve before it lifts the silence."""
CLOCK_SLACK_S = 60.0
"""How far before a step's journaled start an action the service records may have been requested (the
conductor's clock and the service's may differ): how far back a resumed run looks for the action a crashed
run started but did not journal."""
DEMOTE_BROKER = "demote-broker"
PROMOTE_BROKER = "promote-broker"
SUCCEEDED = "SUCCEEDED"
TERMINAL = frozenset({"SUCCEEDED", "PARTIAL", "FAILED", "CANCELLED"})
"""The action states that end an action (app/actions/state.py)."""


# --- the interfaces ---------------------------------------------------------------------------------------


class Cluster(Protocol):
    """A live view of the cluster: the ZooKeeper collector's snapshot and an event set at each change."""

    @property
    def snapshot(self) -> ClusterSnapshot: ...

    @property
    def changed(self) -> threading.Event: ...


class RunJournal(Protocol):
    """Where a run's record is kept: :class:`app.maintenance.journal.Journal` (a file, the command line) or
    the service's database (:class:`app.maintenance.store.StoreJournal`)."""

    def save(self, run: RunRecord) -> None: ...


class RestartFailedError(Exception):
    """The restart command failed (could not run, or exited non-zero)."""


class Restarter(Protocol):
    """Restarts one broker and returns when the restart has been done or requested (raises
    :class:`RestartFailedError`)."""

    def restart(self, broker: int, host: str | None) -> None: ...


class ServiceError(Exception):
    """The kafka-health service could not be asked (unreachable, refused the request)."""


class ServiceConflictError(ServiceError):
    """The service refused the request for now (409): another demotion or promotion is unfinished, a
    reassignment or a preferred election is in ZooKeeper. Asking again later may succeed."""


class MaintenanceService(Protocol):
    """The steps the kafka-health service performs: demotion, promotion and silences."""

    def start_demotion(self, broker: int) -> str:
        """Start ``demote-broker``; returns the action's id."""
        ...

    def start_promotion(self, broker: int) -> str:
        """Start ``promote-broker``; returns the action's id."""
        ...

    def action_state(self, action_id: str) -> tuple[str, str | None]:
        """The action's state (``RUNNING``, ``SUCCEEDED``, ...) and its error, if any."""
        ...

    def find_action(self, kind: str, broker: int, since: float) -> str | None:
        """The id of the newest ``kind`` action (``demote-broker``, ``promote-broker``) of ``broker``
        requested at or after ``since`` (epoch seconds), None when there is none: the action a run that
        crashed between starting it and journaling its id started."""
        ...

    def held(self, silence_id: str) -> int:
        """How many open alerts the silence holds now (they page if it ends while they are open)."""
        ...

    def silence(self, broker: int, duration_s: int, comment: str) -> str:
        """Create the maintenance silence of ``broker``; returns its id."""
        ...

    def expire(self, silence_id: str) -> None:
        """Expire the silence (one already expired or gone is fine)."""
        ...


@dataclass(frozen=True, slots=True)
class Event:
    """One thing the conductor did or saw: narrated by the command line, one JSON line each."""

    at: float
    kind: str
    """``started``, ``done`` (a step), ``waiting``, ``may_stop`` (external mode), ``note``, ``stopped``,
    ``paused``, ``finished``."""
    message: str
    broker: int | None = None
    step: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "event": self.kind, "broker": self.broker, "step": self.step,
                "message": self.message}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended: ``done`` (exit 0), ``stopped`` or ``paused`` (exit 3), ``failed`` (exit 1)."""

    result: str
    exit_code: int
    message: str


# --- pure judgements ---------------------------------------------------------------------------------------


def plan_order(brokers: Sequence[int], controller: int | None) -> list[int]:
    """``brokers`` in the order given, the controller moved last (restarting it starts a controller
    election: once, at the end, rather than before every other broker's restart moves it again)."""
    order = [b for b in brokers if b != controller]
    if controller is not None and controller in brokers:
        order.append(controller)
    return order


def known_brokers(snapshot: ClusterSnapshot) -> list[int]:
    """The brokers of the cluster: registered or holding a replica."""
    known = set(snapshot.brokers)
    for info in snapshot.partitions.values():
        known.update(info.assignment.replicas)
    return sorted(known)


def _deleting(snapshot: ClusterSnapshot) -> set[str]:
    deleting = {name for name, topic in snapshot.topics.items() if topic.marked_for_deletion}
    deleting.update(snapshot.pending.deletions)
    return deleting


def _names(tps: Sequence[TopicPartition]) -> str:
    listed = ", ".join(str(tp) for tp in tps[:LISTED])
    rest = len(tps) - LISTED
    return f"{listed} and {rest} more" if rest > 0 else listed


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def unexplained(
    snapshot: ClusterSnapshot,
    brokers: Iterable[int],
    restarting: int | None,
    default_min_insync_replicas: int | None = None,
) -> tuple[str, ...]:
    """What is wrong with the cluster that restarting broker ``restarting`` (None: no broker is being
    restarted) does not explain, one sentence each; empty when nothing is (or when the snapshot cannot be
    trusted: the waits go on until it can, or until they run out).

    - a broker of ``brokers`` (the cluster's when the run began) other than ``restarting`` not registered;
    - a partition offline (no leader, or a leader that is not registered), whoever is missing;
    - a partition under min ISR with a replica other than ``restarting`` missing from its ISR.
    """
    if not trusted(snapshot):
        return ()
    reasons = []
    down = sorted(b for b in brokers if b != restarting and b not in snapshot.brokers)
    if down:
        listed = ", ".join(str(b) for b in down)
        reasons.append(
            f"broker{'s' if len(down) > 1 else ''} {listed} {'are' if len(down) > 1 else 'is'} down "
            "(not registered in /brokers/ids)"
        )
    deleting = _deleting(snapshot)
    broker_default = broker_default_min_insync_replicas(snapshot, default_min_insync_replicas)
    min_isr: dict[str, int] = {}
    offline: list[TopicPartition] = []
    under: list[TopicPartition] = []
    for tp, info in snapshot.partitions.items():
        state = info.state
        if state is None or tp.topic in deleting:
            continue
        if state.leader == NO_LEADER or state.leader not in snapshot.brokers:
            offline.append(tp)
            continue
        replicas = info.assignment.replicas
        floor = min_isr.get(tp.topic)
        if floor is None:
            floor = min_isr[tp.topic] = min_insync_replicas(snapshot, tp.topic, broker_default)
        if len(state.isr) < effective_min_isr(floor, len(replicas)):
            adding = info.assignment.adding_replicas
            missing = {r for r in replicas if r not in state.isr and r not in adding}
            if missing - {restarting}:
                under.append(tp)
    if offline:
        offline.sort()
        reasons.append(f"{_n(len(offline), 'partition')} offline: {_names(offline)}")
    if under:
        under.sort()
        why = "" if restarting is None else f" with a replica other than broker {restarting} out of the ISR"
        reasons.append(f"{_n(len(under), 'partition')} under min ISR{why}: {_names(under)}")
    return tuple(reasons)


def not_rejoined(snapshot: ClusterSnapshot, broker: int) -> tuple[TopicPartition, ...]:
    """The partitions with a replica on ``broker`` whose ISR does not hold it (sorted); partitions of topics
    being deleted and partitions without a state are left out."""
    deleting = _deleting(snapshot)
    missing = [
        tp
        for tp, info in snapshot.partitions.items()
        if broker in info.assignment.replicas
        and info.state is not None
        and broker not in info.state.isr
        and tp.topic not in deleting
    ]
    return tuple(sorted(missing))


def registration_epoch(snapshot: ClusterSnapshot, broker: int) -> int | None:
    """The broker's epoch (the czxid of ``/brokers/ids/N``: a new one at every new session), None when it
    is not registered."""
    registration = snapshot.brokers.get(broker)
    return None if registration is None else registration.broker_epoch


# --- the run -----------------------------------------------------------------------------------------------


class _StoppedError(Exception):
    def __init__(self, broker: int | None, step: str | None, reason: str) -> None:
        super().__init__(reason)
        self.broker = broker
        self.step = step
        self.reason = reason


class _PausedError(Exception):
    def __init__(self, broker: int | None, step: str | None) -> None:
        super().__init__(f"paused at broker {broker}")
        self.broker = broker
        self.step = step


class Conductor:
    """One run (new or resumed) of the rolling restart recorded in ``record``."""

    def __init__(
        self,
        cluster: Cluster,
        journal: RunJournal,
        record: RunRecord,
        *,
        restarter: Restarter | None,
        service: MaintenanceService | None,
        stop: threading.Event,
        on_event: Callable[[Event], None],
        progress: TextIO | None = None,
        default_min_insync_replicas: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        options = record.options
        if (options.demote or options.silence) and service is None:
            raise ValueError("demoting and silencing need the kafka-health service")
        if options.restart_command is not None and restarter is None:
            raise ValueError("a restart command needs a restarter")
        self.cluster = cluster
        self.journal = journal
        self.record = record
        self.restarter = restarter
        self.service = service
        self.stop = stop
        self.on_event = on_event
        self.progress = progress or io.StringIO()
        self.default_min_isr = default_min_insync_replicas
        self.clock = clock

    # --- the whole run ---

    def run(self) -> Outcome:
        record = self.record
        resumed = record.state != RUNNING or any(p.steps for p in record.brokers.values())
        record.state = RUNNING
        record.stopped = None
        record.ended_at = None
        self._save()
        if resumed:
            self._emit("note", f"resuming: {len(record.remaining)} of {len(record.order)} brokers left")
        else:
            order = ", ".join(str(b) for b in record.order)
            self._emit("note", f"rolling restart of brokers {order} (the controller last)")
        try:
            while record.remaining:
                self._broker(self._next())
        except _StoppedError as stopped:
            return self._end(STOPPED, stopped.broker, stopped.step, stopped.reason, 3)
        except _PausedError as paused:
            where = f"paused at broker {paused.broker}" if paused.broker is not None else "paused"
            return self._end(PAUSED, paused.broker, paused.step, f"{where}; run again with --resume", 3)
        except ServiceError as exc:
            broker, step = self._current()
            return self._end(STOPPED, broker, step, f"the kafka-health service failed: {exc}", 1)
        record.state = DONE
        record.ended_at = self.clock()
        self._save()
        took = record.ended_at - record.started_at
        message = f"rolling restart done: {_n(len(record.order), 'broker')} restarted in {took:.1f} s"
        self._emit("finished", message)
        return Outcome(DONE, 0, message)

    def _end(self, state: str, broker: int | None, step: str | None, reason: str, code: int) -> Outcome:
        record = self.record
        record.state = state
        record.ended_at = self.clock()
        record.stopped = {"broker": broker, "step": step, "reason": reason}
        self._save()
        if state == PAUSED:
            message = reason
        else:
            where = f" at broker {broker}" if broker is not None else ""
            if step is not None:
                where += f" ({step})"
            message = f"stopped{where}: {reason}"
        self._emit("paused" if state == PAUSED else "stopped", message, broker, step)
        return Outcome(state, code, message)

    def _current(self) -> tuple[int | None, str | None]:
        """The broker in progress and its step in progress (for a message about where the run stopped)."""
        for broker in self.record.remaining:
            progress = self.record.progress(broker)
            for name in STEPS:
                step = progress.steps.get(name)
                if step is not None and step.started and not step.done:
                    return broker, name
        remaining = self.record.remaining
        return (remaining[0] if remaining else None), None

    def _next(self) -> int:
        """The next broker: the one in progress, else the first left with the active controller moved last
        (it may have moved since the run began)."""
        remaining = self.record.remaining
        first = self.record.progress(remaining[0])
        if any(step.started for step in first.steps.values()):
            return remaining[0]
        controller = self.cluster.snapshot.controller.broker_id
        ordered = plan_order(remaining, controller)
        if ordered != remaining:
            done = [b for b in self.record.order if b not in remaining]
            self.record.order = done + ordered
            self._save()
            self._emit("note", f"broker {controller} is the controller now: it goes last", controller)
        return ordered[0]

    # --- one broker ---

    def _broker(self, broker: int) -> None:
        progress = self.record.progress(broker)
        options = self.record.options
        began = self.clock()
        if not progress.step("restart").started:
            # judged again on a resumed run: the cluster may have changed while nobody watched
            self._wait_safe(broker, progress)
        if options.demote and not progress.step("demote").done:
            self._action(broker, progress, "demote")
        if options.silence and not progress.step("silence").done:
            self._silence(broker, progress)
        if not progress.step("restart").done:
            self._restart(broker, progress)
        if not progress.step("rejoin").done:
            self._rejoin(broker, progress)
        if options.demote and not progress.step("promote").done:
            self._action(broker, progress, "promote")
        if options.silence and not progress.step("unsilence").done:
            self._unsilence(broker, progress)
        progress.done = True
        self._save()
        self._emit("note", f"restarted and back in every ISR ({self.clock() - began:.1f} s)", broker)

    def _wait_safe(self, broker: int, progress: BrokerProgress) -> None:
        self._check_stop(broker, "wait_safe")
        self._start(progress, "wait_safe", "waiting until it is safe to stop")
        known = self.record.known_brokers

        def judge(snapshot: ClusterSnapshot) -> SafeToStop:
            reasons = unexplained(snapshot, known, None, self.default_min_isr)
            if reasons:
                raise _StoppedError(broker, "wait_safe", "; ".join(reasons))
            return safe_to_stop(snapshot, broker, default_min_insync_replicas=self.default_min_isr)

        seconds = self.record.options.max_unsafe_wait_s
        answer, waited = wait(
            self.cluster, judge, self.cluster.changed, self.stop, seconds, self.progress, self.clock
        )
        if not answer.safe:
            self._check_stop(broker, "wait_safe")
            raise _StoppedError(
                broker,
                "wait_safe",
                f"broker {broker} still not safe to stop after {waited:.0f} s (--max-unsafe-wait): "
                + "; ".join(answer.reasons),
            )
        self._finish(progress, "wait_safe", f"safe to stop (waited {waited:.1f} s)")

    def _action(self, broker: int, progress: BrokerProgress, step: str) -> None:
        assert self.service is not None
        restarting = broker if step == "promote" else None
        self._check(broker, step, restarting)
        record = progress.step(step)
        kind = DEMOTE_BROKER if step == "demote" else PROMOTE_BROKER
        action_id = record.detail.get("action_id")
        if action_id is None and record.started_at is not None:
            # a run that crashed between starting the action and journaling its id: follow that action
            # rather than start a second one
            action_id = self.service.find_action(kind, broker, record.started_at - CLOCK_SLACK_S)
            if action_id is not None:
                record.detail["action_id"] = action_id
                self._save()
                self._emit("note", f"following {kind} action {action_id}, started before the crash", broker)
        if action_id is None:
            self._start(progress, step, kind)
            action_id = self._start_action(broker, progress, step, kind, restarting)
            record.detail["action_id"] = action_id
            self._save()
        while True:
            state, error = self.service.action_state(str(action_id))
            if state == SUCCEEDED:
                break
            if state in TERMINAL:
                raise _StoppedError(
                    broker,
                    step,
                    f"{kind} action {action_id} ended {state}: {error or 'no error given'}",
                )
            self._check(broker, step, restarting)
            self.stop.wait(ACTION_POLL_S)
        self._finish(progress, step, f"{kind} action {action_id} succeeded")

    def _start_action(
        self, broker: int, progress: BrokerProgress, step: str, kind: str, restarting: int | None
    ) -> str:
        """Start the demotion or promotion; while the service refuses it for now (409: another one
        unfinished, a reassignment in ZooKeeper), ask again every :data:`RETRY_S`, at most
        ``max_unsafe_wait_s`` from the step's start, then stop naming the refusal."""
        assert self.service is not None
        start = self.service.start_demotion if step == "demote" else self.service.start_promotion
        began = progress.step(step).started_at or self.clock()
        deadline = began + self.record.options.max_unsafe_wait_s
        shown: str | None = None
        while True:
            try:
                return start(broker)
            except ServiceConflictError as exc:
                reason = str(exc)
                if self.clock() >= deadline:
                    raise _StoppedError(
                        broker,
                        step,
                        f"the service still refuses {kind} after {self.clock() - began:.0f} s "
                        f"(--max-unsafe-wait): {reason}",
                    ) from exc
                if reason != shown:
                    shown = reason
                    self._emit("waiting", f"{kind} refused for now, asking again: {reason}", broker, step)
            self._check(broker, step, restarting)
            self.stop.wait(min(RETRY_S, max(0.0, deadline - self.clock())))
            self._check_stop(broker, step)

    def _silence(self, broker: int, progress: BrokerProgress) -> None:
        assert self.service is not None
        self._check(broker, "silence", None)
        now = self.clock()
        if progress.window_ends_at is None:
            progress.window_ends_at = now + self.record.options.wait_rejoined_s
        duration = max(1, math.ceil(progress.window_ends_at - now))
        self._start(progress, "silence", f"silencing what its absence raises for {duration} s")
        silence_id = self.service.silence(
            broker, duration, f"kafka-health rolling-restart: broker {broker} restarting"
        )
        progress.step("silence").detail["silence_id"] = silence_id
        self._finish(progress, "silence", f"silence {silence_id} until its window ends")

    def _restart(self, broker: int, progress: BrokerProgress) -> None:
        step = progress.step("restart")
        snapshot = self.cluster.snapshot
        epoch = registration_epoch(snapshot, broker)
        if step.started:
            before = step.detail.get("epoch_before")
            if epoch is not None and epoch != before:
                self._finish(
                    progress, "restart", f"registered with a new session already (epoch {before} -> {epoch})"
                )
                return
            if epoch is None:
                self._emit(
                    "waiting",
                    "not registered: the restart a previous run started is under way; waiting for it to "
                    "register again (the command is not run twice)",
                    broker,
                    "restart",
                )
                self._await_registration(broker, progress, before)
                return
            self._emit(
                "note", "still in the session it had before (it did not restart): restarting it", broker
            )
        if epoch is None:
            raise _StoppedError(broker, "restart", f"broker {broker} is not registered: it is down already")
        self._check(broker, "restart", None)
        if progress.window_ends_at is None:
            progress.window_ends_at = self.clock() + self.record.options.wait_rejoined_s
        host = snapshot.brokers[broker].host
        step.detail.update({"epoch_before": epoch, "host": host})
        if self.restarter is None:
            self._start(progress, "restart", "may be stopped now: waiting for it to restart (external mode)")
            self._emit("may_stop", f"broker {broker} may be stopped now", broker, "restart")
        else:
            self._start(progress, "restart", f"running the restart command (host {host})")
            try:
                self.restarter.restart(broker, host)
            except RestartFailedError as exc:
                raise _StoppedError(broker, "restart", f"the restart command failed: {exc}") from exc
        self._await_registration(broker, progress, epoch)

    def _await_registration(self, broker: int, progress: BrokerProgress, before: int | None) -> None:
        def registered_again(snapshot: ClusterSnapshot) -> int | None:
            epoch = registration_epoch(snapshot, broker)
            return epoch if epoch is not None and epoch != before else None

        epoch = self._watch(broker, "restart", broker, self._window_end(progress), registered_again)
        if epoch is None:
            raise _StoppedError(broker, "restart", self._window_over(broker, "has not registered again"))
        self._finish(progress, "restart", f"registered again with a new session (epoch {before} -> {epoch})")

    def _rejoin(self, broker: int, progress: BrokerProgress) -> None:
        self._start(progress, "rejoin", "waiting until it is back in the ISR of every partition it holds")
        missing = not_rejoined(self.cluster.snapshot, broker)
        if missing:
            self._emit("waiting", f"out of the ISR of {_n(len(missing), 'partition')}", broker, "rejoin")

        def rejoined(snapshot: ClusterSnapshot) -> bool:
            return trusted(snapshot) and not not_rejoined(snapshot, broker)

        if not self._watch(broker, "rejoin", broker, self._window_end(progress), rejoined):
            missing = not_rejoined(self.cluster.snapshot, broker)
            raise _StoppedError(
                broker,
                "rejoin",
                self._window_over(
                    broker,
                    f"is still out of the ISR of {_n(len(missing), 'partition')} ({_names(missing)})",
                ),
            )
        self._finish(progress, "rejoin", "back in every ISR")

    def _unsilence(self, broker: int, progress: BrokerProgress) -> None:
        """Lift the broker's silence once the alerts it holds have resolved (an alert still open when its
        silence ends pages: rule 5 resolves some 30 s after the broker registers again, rule 2 after its
        partitions are back in sync), at the latest when its window ends (then it has ended anyway)."""
        assert self.service is not None
        silence_id = progress.step("silence").detail.get("silence_id")
        self._start(progress, "unsilence", f"expiring silence {silence_id}")
        if silence_id is not None:
            deadline = self._window_end(progress)
            held = self.service.held(str(silence_id))
            if held:
                self._emit(
                    "waiting",
                    f"silence {silence_id} still holds {_n(held, 'open alert')}: waiting for "
                    f"{'it' if held == 1 else 'them'} to resolve before lifting it",
                    broker,
                    "unsilence",
                )
            while held and self.clock() < deadline:
                self._check(broker, "unsilence", None)
                self.stop.wait(min(HELD_POLL_S, max(0.0, deadline - self.clock())))
                held = self.service.held(str(silence_id))
            if held:
                self._emit(
                    "note",
                    f"its window ended with {_n(held, 'alert')} silence {silence_id} held still open: "
                    f"{'it pages' if held == 1 else 'they page'}",
                    broker,
                    "unsilence",
                )
            self.service.expire(str(silence_id))
        self._finish(progress, "unsilence", f"silence {silence_id} expired")

    # --- waiting and checking ---

    def _window_end(self, progress: BrokerProgress) -> float:
        if progress.window_ends_at is None:
            progress.window_ends_at = self.clock() + self.record.options.wait_rejoined_s
            self._save()
        return progress.window_ends_at

    def _window_over(self, broker: int, what: str) -> str:
        options = self.record.options
        kept = [
            *(["its silence is left to end"] if options.silence else []),
            *(["it stays demoted"] if options.demote else []),
        ]
        lifted = " and ".join(kept) if kept else "nothing is lifted"
        return (
            f"broker {broker} {what} at the end of its window ({options.wait_rejoined_s:.0f} s, "
            f"--wait-rejoined): {lifted}, so its alerts page"
        )

    def _check_stop(self, broker: int, step: str) -> None:
        if self.stop.is_set():
            raise _PausedError(broker, step)

    def _check(self, broker: int, step: str, restarting: int | None) -> None:
        """Pause on a stop signal; stop on a condition ``restarting`` does not explain."""
        self._check_stop(broker, step)
        reasons = unexplained(
            self.cluster.snapshot, self.record.known_brokers, restarting, self.default_min_isr
        )
        if reasons:
            raise _StoppedError(broker, step, "; ".join(reasons))

    def _watch(
        self,
        broker: int,
        step: str,
        restarting: int | None,
        deadline: float,
        until: Callable[[ClusterSnapshot], T | None],
    ) -> T | None:
        """``until``'s first truthy answer on the live snapshot, re-asked at every change; None once the
        deadline passes. Pauses on a stop signal, stops on a condition ``restarting`` does not explain."""
        changed = self.cluster.changed
        while True:
            changed.clear()  # before reading: a change that lands after the read sets it again
            snapshot = self.cluster.snapshot
            self._check_stop(broker, step)
            reasons = unexplained(snapshot, self.record.known_brokers, restarting, self.default_min_isr)
            if reasons:
                raise _StoppedError(broker, step, "; ".join(reasons))
            found = until(snapshot)
            if found:
                return found
            while not changed.is_set():
                remaining = deadline - self.clock()
                if remaining <= 0:
                    return None
                self._check_stop(broker, step)
                changed.wait(min(remaining, POLL_S))

    # --- journal and events ---

    def _start(self, progress: BrokerProgress, step: str, message: str) -> None:
        record = progress.step(step)
        if record.started_at is None:
            record.started_at = self.clock()
        record.ended_at = None
        self._save()
        self._emit("started", message, progress.broker, step)

    def _finish(self, progress: BrokerProgress, step: str, message: str) -> None:
        record = progress.step(step)
        if record.started_at is None:
            record.started_at = self.clock()
        record.ended_at = self.clock()
        self._save()
        self._emit("done", message, progress.broker, step)

    def _save(self) -> None:
        self.journal.save(self.record)

    def _emit(self, kind: str, message: str, broker: int | None = None, step: str | None = None) -> None:
        self.on_event(Event(self.clock(), kind, message, broker, step))


# --- the report --------------------------------------------------------------------------------------------


def report(record: RunRecord, outcome: Outcome) -> dict[str, Any]:
    """The final report: the outcome, where it stopped, and per broker its steps with their durations."""
    brokers = []
    for broker in record.order:
        progress = record.brokers.get(broker)
        steps = {}
        for name in STEPS:
            step = None if progress is None else progress.steps.get(name)
            if step is None or step.started_at is None:
                continue
            steps[name] = {
                "started_at": round(step.started_at, 3),
                "ended_at": None if step.ended_at is None else round(step.ended_at, 3),
                "duration_s": None if step.ended_at is None else round(step.ended_at - step.started_at, 3),
                **step.detail,
            }
        brokers.append({"broker": broker, "done": bool(progress and progress.done), "steps": steps})
    return {
        "result": outcome.result,
        "exit_code": outcome.exit_code,
        "message": outcome.message,
        "started_at": round(record.started_at, 3),
        "ended_at": None if record.ended_at is None else round(record.ended_at, 3),
        "order": list(record.order),
        "stopped": record.stopped,
        "brokers": brokers,
    }


# --- what the automation does next (the service's external mode) ------------------------------------------

_STEP_REASONS = {
    "wait_safe": "waiting until it is safe to stop (as safe-to-stop judges): do not stop it yet",
    "demote": "moving its leaderships away (demote-broker): do not stop it yet",
    "silence": "silencing what its absence raises: do not stop it yet",
    "rejoin": "restarted: waiting until it is back in the ISR of every partition it holds",
    "promote": "restarted and back in every ISR: moving its leaderships back (promote-broker)",
    "unsilence": "restarted: lifting its silence once the alerts it held have resolved",
}


def next_step(record: RunRecord) -> dict[str, Any] | None:
    """``{"broker", "may_stop", "reason"}`` for the automation that stops the brokers (external mode): the
    broker the run is at, whether it may be stopped (and started again) now, and why (not); None once every
    broker is done. Only a broker whose ``restart`` step has started and not ended may stop: the conductor
    then waits for its registration to end and come back with a new session."""
    remaining = record.remaining
    if not remaining:
        return None
    broker = remaining[0]
    progress = record.brokers.get(broker)
    steps = {} if progress is None else progress.steps
    if record.state != RUNNING:
        reason = (record.stopped or {}).get("reason") or f"the run is {record.state}"
        return {"broker": broker, "may_stop": False, "reason": f"the run is {record.state}: {reason}"}
    restart = steps.get("restart")
    if restart is not None and restart.started and not restart.done:
        return {
            "broker": broker,
            "may_stop": True,
            "reason": "may be stopped now: stop it and start it again; the run waits for it to register "
            "with a new session",
        }
    current = next((name for name in reversed(STEPS) if name in steps and steps[name].started), None)
    if current is None:
        return {"broker": broker, "may_stop": False, "reason": "next: do not stop it yet"}
    return {"broker": broker, "may_stop": False, "reason": _STEP_REASONS.get(current, current)}
