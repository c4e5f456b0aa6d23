"""Executing runbook actions against ZooKeeper (ZK mode): the preferred replica election and the partition
reassignment, crash-safe and resumable.

Each executor works from the journal the runner persisted with the action (:mod:`app.actions.journal`)
and records, before every write to ZooKeeper, what it is about to write (``progress.step``). Run on a record
left unfinished by a stopped or crashed instance, it reads what ZooKeeper and the snapshot show and goes on
from there (:func:`app.actions.journal.resolve_writing`); a reassignment always ends by removing the
throttles it set. Every update of the record is a compare-and-set through :class:`ActionHandle`, so that a
cancel is never overwritten: it is seen before the next write.

* **Election**: ``/admin/preferred_replica_election`` one chunk at a time (each under the byte budget),
  waiting for the controller to delete the znode before writing the next; at the end the snapshot says what
  was elected and why the rest was not (SUCCEEDED, PARTIAL, FAILED).
* **Reassignment**: throttles set first (static, or adaptive: :mod:`app.actions.adaptive`), then
  ``/admin/reassign_partitions`` one batch at a time, no batch while a partition is under min ISR or
  offline. Progress (partitions and bytes, rate, ETA) is measured as it runs; no progress for
  ``stall_after_s`` makes it STALLED with the reason, and so does a copy falling behind (the batch's bytes
  remaining growing for ``stall_after_s``: the throttle below the produce rate), once an adaptive throttle
  cannot rise any further (:func:`app.actions.adaptive.catch_up`). A cancel writes no further batch,
  removes the throttles and ends CANCELLED at once: the batch in flight is the controller's to finish
  (ZooKeeper mode cannot abort it), unthrottled; a rollback (a new action) undoes it. Once removed, the
  progress says so (``throttles``: ``set``, then ``removed`` or ``not removed``).

An executor that stops leading, or whose service stops, leaves the action as it is (RUNNING, its throttles
set) for the instance that adopts it (:class:`~app.actions.handle.StoppedError`).

ZooKeeper sits behind :class:`collectors.kafka.admin.AdminZooKeeper` (kazoo in the service).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError

from app.actions.adaptive import (
    AdaptiveThrottle,
    ThrottleDecision,
    catch_up,
    next_rate,
    produce_baselines,
    signals_from_scrape,
    urps_outside,
)
from app.actions.config import ActionSettings
from app.actions.election import ELECTED, chunk_payloads, verify_election
from app.actions.handle import ActionHandle, CancelRequestedError, Gate, StoppedError, SupersededError
from app.actions.journal import ElectionJournal, JournalError, ReassignmentJournal, Step, resolve_writing
from app.actions.progress import (
    FallingBehind,
    ProgressEstimate,
    Sample,
    bytes_remaining_of,
    estimate_progress,
    falling_behind,
    moves_of,
    window_of,
)
from app.actions.reassignment import (
    ReassignmentRequest,
    ReassignmentStatus,
    ThrottleConfig,
    reassignment_status,
    safe_to_start_batch,
    throttle_config_from,
)
from app.actions.reassignment_throttle import ThrottleSpec, set_config_keys
from app.actions.state import ActionRecord, ActionState, AuditEntry
from app.actions.throttle_removal import remove_throttles
from collectors.health import HealthReport
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.kafka.zkdata import PREFERRED_REPLICA_ELECTION_PATH, REASSIGN_PARTITIONS_PATH
from collectors.metrics import MetricsScrape

log = logging.getLogger(__name__)

ClusterReader = Callable[[], tuple[ClusterSnapshot, HealthReport]]
LogSizes = Callable[[Sequence[int]], Mapping[int, Mapping[TopicPartition, float]]]
"""Per broker (of those asked for), each partition's log size in bytes, from the brokers' metrics."""
LatestScrape = Callable[[], MetricsScrape | None]
"""The brokers' latest metrics scrape (the service's periodic one): the adaptive throttle's signals."""
Audit = Callable[[AuditEntry], None]

SYSTEM = "kafka-health"
"""The audit's ``who`` for what an executor decides on its own (an adaptive throttle change)."""


# --- election --------------------------------------------------------------------------------------------


class ElectionExecutor:
    def __init__(
        self,
        zookeeper: AdminZooKeeper,
        snapshot: Callable[[], ClusterSnapshot],
        gate: Gate,
        settings: ActionSettings | None = None,
    ) -> None:
        self._zk = zookeeper
        self._snapshot = snapshot
        self._gate = gate
        self.settings = settings or ActionSettings()

    def run(self, handle: ActionHandle) -> ActionRecord:
        """Run (or resume) the election to a terminal state; returns the record as left. Never raises for
        a ZooKeeper or controller problem (the record says FAILED and why); returns early, the record
        unfinished, when another instance takes over or the service stops."""
        try:
            return self._run(handle)
        except (SupersededError, StoppedError) as exc:
            log.info("election %s left to another run: %s", handle.id, exc)
            return handle.record

    def _run(self, handle: ActionHandle) -> ActionRecord:
        record = handle.record
        try:
            journal = ElectionJournal.from_plan(record.plan)
        except JournalError as exc:
            return handle.move(ActionState.FAILED, error=f"cannot run: {exc}")
        if record.state is ActionState.PENDING:
            if record.cancel_requested:
                return handle.move(ActionState.CANCELLED, result={"chunks_written": 0})
            handle.move(ActionState.RUNNING, progress={"step": Step(0).json()})
        payloads = chunk_payloads(journal.partitions, journal.budget_bytes) if journal.partitions else []
        chunks = [zkdata.decode_partition_list(PREFERRED_REPLICA_ELECTION_PATH, p) for p in payloads]
        try:
            step = Step.from_progress(handle.record.progress)
            while step.done < len(payloads):
                index = step.done
                if step.state == "pending":
                    try:
                        step = Step(index, "writing")
                        handle.update(unless_cancelled=True, progress={"step": step.json()})
                    except CancelRequestedError:
                        return self._finish(handle, journal.partitions, index, cancelled=True)
                if step.state == "writing":
                    self._write_chunk(index, payloads[index], set(chunks[index]))
                    step = Step(index, "written")
                    handle.update(progress={"step": step.json()})
                self._gate.check()
                if not self._zk.wait_deleted(PREFERRED_REPLICA_ELECTION_PATH, self.settings.chunk_timeout_s):
                    return handle.move(
                        ActionState.FAILED,
                        error=f"the controller did not take chunk {index + 1} of {len(payloads)} within "
                        f"{self.settings.chunk_timeout_s:g} s (is there an active controller?); "
                        f"{PREFERRED_REPLICA_ELECTION_PATH} is left for it",
                    )
                step = Step(index + 1)
                handle.update(
                    progress={"step": step.json(), "chunks_written": index + 1, "chunks": len(payloads)}
                )
        except (SupersededError, StoppedError):
            raise
        except Exception as exc:
            log.exception("preferred replica election %s failed", handle.id)
            return handle.move(ActionState.FAILED, error=f"ZooKeeper: {exc}")
        return self._finish(handle, journal.partitions, len(payloads), cancelled=False)

    def _write_chunk(self, index: int, payload: bytes, partitions: set[TopicPartition]) -> None:
        """Write chunk ``index`` unless it is there already (a resumed run); if another election is pending
        (someone else's), wait for it to finish first."""
        deadline = time.monotonic() + self.settings.chunk_timeout_s
        while True:
            self._gate.check()
            data = self._zk.read(PREFERRED_REPLICA_ELECTION_PATH)
            if data is not None:
                pending = set(zkdata.decode_partition_list(PREFERRED_REPLICA_ELECTION_PATH, data))
                if pending <= partitions:
                    return  # ours, written before a restart (the controller may have taken some)
            else:
                try:
                    self._zk.create(PREFERRED_REPLICA_ELECTION_PATH, payload)
                    return
                except NodeExistsError:
                    pass
            left = deadline - time.monotonic()
            if left <= 0 or not self._zk.wait_deleted(PREFERRED_REPLICA_ELECTION_PATH, left):
                raise RuntimeError(f"{PREFERRED_REPLICA_ELECTION_PATH} is held by another election")

    def _finish(
        self, handle: ActionHandle, partitions: Sequence[TopicPartition], written: int, cancelled: bool
    ) -> ActionRecord:
        outcome = self._verify(partitions, wait=not cancelled)
        elected = len(outcome.get(ELECTED, []))
        result = {
            "partitions": len(partitions),
            "elected": elected,
            "chunks_written": written,
            "not_elected": {
                reason: [{"topic": tp.topic, "partition": tp.partition} for tp in tps[:100]]
                for reason, tps in outcome.items()
                if reason != ELECTED
            },
        }
        if cancelled:
            state = ActionState.CANCELLED
        elif elected == len(partitions):
            state = ActionState.SUCCEEDED
        elif elected > 0:
            state = ActionState.PARTIAL
        else:
            state = ActionState.FAILED
        error = None
        if state is ActionState.FAILED:
            error = "no partition is led by its preferred replica after the election"
        return handle.move(state, result=result, error=error)

    def _verify(self, partitions: Sequence[TopicPartition], wait: bool) -> dict[str, list[TopicPartition]]:
        """The outcome once the snapshot shows every partition elected, or when the time is up."""
        deadline = time.monotonic() + (self.settings.verify_timeout_s if wait else 0.0)
        while True:
            outcome = verify_election(self._snapshot(), partitions)
            if len(outcome.get(ELECTED, [])) == len(partitions) or time.monotonic() >= deadline:
                return outcome
            self._gate.sleep(0.1)


# --- reassignment ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Watch:
    """What the executor tracks between polls of one batch: progress, stall, throttle changes."""

    marker: tuple[Any, ...] | None = None
    progress_at: float = field(default_factory=time.monotonic)
    down_since: float | None = None
    measured_at: float = float("-inf")
    estimate: ProgressEstimate | None = None
    throttle_changed_at: float | None = None
    behind: list[Sample] = field(default_factory=list)
    """The batch's bytes remaining as measured (monotonic time): the falling-behind verdict's window."""


class ReassignmentExecutor:
    """A reassignment in batches through ``/admin/reassign_partitions`` (see the module docstring)."""

    def __init__(
        self,
        zookeeper: AdminZooKeeper,
        state: ClusterReader,
        gate: Gate,
        settings: ActionSettings | None = None,
        *,
        log_sizes: LogSizes | None = None,
        scrape: LatestScrape | None = None,
        audit: Audit | None = None,
    ) -> None:
        self._zk = zookeeper
        self._state = state
        self._gate = gate
        self.settings = settings or ActionSettings()
        self._log_sizes = log_sizes
        self._scrape = scrape
        self._audit = audit

    def run(self, handle: ActionHandle) -> ActionRecord:
        """Run (or resume) the reassignment to a terminal state; returns the record as left (unfinished
        when another instance took over or the service stops)."""
        try:
            return self._run(handle)
        except (SupersededError, StoppedError) as exc:
            log.info("reassignment %s left to another run: %s", handle.id, exc)
            return handle.record

    def _run(self, handle: ActionHandle) -> ActionRecord:
        record = handle.record
        try:
            journal = ReassignmentJournal.from_plan(record.plan)
            throttle = ThrottleSpec.from_request(record.request)
        except (JournalError, ValueError) as exc:
            return handle.move(ActionState.FAILED, error=f"cannot run: {exc}")
        batches = len(journal.batches)
        if record.state is ActionState.PENDING:
            if record.cancel_requested:
                return handle.move(ActionState.CANCELLED, result={"partitions": len(journal.items)})
            progress: dict[str, Any] = {
                "step": Step(0).json(),
                "batches": batches,
                "batches_done": 0,
                "throttle_bytes_per_s": throttle.initial_rate,
            }
            if throttle.mode == "adaptive" and self._scrape is not None:
                # each broker's produce p99 before the copy begins: the adaptive throttle's baseline
                baselines = produce_baselines(self._scrape())
                progress["produce_p99_baseline_ms"] = {str(b): v for b, v in baselines.items()}
            handle.move(ActionState.RUNNING, progress=progress)
        else:
            adopted = int(record.progress.get("adoptions", 0)) + 1
            handle.update(progress={"adoptions": adopted, "adopted_at": time.time()})
            log.info("reassignment %s adopted at %s", handle.id, record.progress.get("step"))
        rate = _int_or_none(handle.record.progress.get("throttle_bytes_per_s")) or throttle.initial_rate
        error: str | None = None
        cancelled = False
        try:
            step = Step.from_progress(handle.record.progress)
            if rate is not None and step.done < batches:
                self._gate.check()
                self._set_throttle(journal, rate)
                handle.update(progress={"throttles": "set", "throttle_bytes_per_s": rate})
            watch = _Watch()
            while step.done < batches:
                index = step.done
                targets = {item.tp: tuple(item.replicas) for item in journal.batches[index]}
                if step.state == "pending":
                    if not self._wait_until_safe(handle, index, batches, watch):
                        cancelled = True
                        break
                    try:
                        step = Step(index, "writing")
                        handle.update(unless_cancelled=True, progress={"step": step.json()})
                    except CancelRequestedError:
                        cancelled = True
                        break
                if step.state == "writing":
                    resolution = self._write_batch(handle, index, targets)
                    step = Step(index + 1) if resolution == "done" else Step(index, "written")
                    handle.update(progress={"step": step.json(), "batches_done": step.done})
                    if resolution == "done":
                        continue
                watch = _Watch()
                if not self._wait_batch(handle, journal, index, watch, throttle):
                    cancelled = True
                    break
                step = Step(index + 1)
                handle.update(progress={"step": step.json(), "batches_done": step.done})
        except (SupersededError, StoppedError):
            raise
        except Exception as exc:
            log.exception("reassignment %s failed", handle.id)
            error = f"{type(exc).__name__}: {exc}"
        removed, removal_error = self._remove_throttles(journal) if throttle.mode != "none" else (False, None)
        return self._finish(
            handle, journal, cancelled, error, throttle.mode != "none", removed, removal_error
        )

    # --- writing ------------------------------------------------------------------------------------

    def _write_batch(
        self, handle: ActionHandle, index: int, targets: Mapping[TopicPartition, tuple[int, ...]]
    ) -> str:
        """Create the batch's znode, unless a previous run did: ``written`` or ``done``."""
        while True:
            self._gate.check()
            data = self._zk.read(REASSIGN_PARTITIONS_PATH)
            znode = None if data is None else zkdata.decode_reassignment(REASSIGN_PARTITIONS_PATH, data)
            snapshot, _ = self._state()
            completed = _completed(snapshot, targets)
            resolution = resolve_writing(znode, targets, completed)
            if resolution in ("written", "done"):
                return resolution
            if resolution == "foreign":
                note = f"batch {index + 1} waits for a reassignment someone else started"
                handle.update(progress={"note": note})
                self._zk.wait_deleted(REASSIGN_PARTITIONS_PATH, self.settings.progress_interval_s)
                continue
            try:
                self._zk.create(REASSIGN_PARTITIONS_PATH, zkdata.encode_reassignment(targets))
                return "written"
            except NodeExistsError:
                continue  # someone was quicker: look at what they wrote

    def _wait_until_safe(self, handle: ActionHandle, index: int, batches: int, watch: _Watch) -> bool:
        """Wait until no partition is under min ISR or offline; False when cancelled meanwhile. A wait of
        ``stall_after_s`` makes the action STALLED (it goes on waiting)."""
        started = time.monotonic()
        while True:
            self._gate.check()
            if handle.cancel_requested:
                return False
            _, report = self._state()
            safe, reason = safe_to_start_batch(report)
            if safe:
                if handle.record.state is ActionState.STALLED:
                    handle.move(ActionState.RUNNING, progress={"stalled": None})
                return True
            waited = time.monotonic() - started
            note = f"batch {index + 1} of {batches} waits: {reason}"
            if handle.record.progress.get("note") != note:
                handle.update(progress={"note": note})
            if waited >= self.settings.stall_after_s and handle.record.state is not ActionState.STALLED:
                self._stall(handle, f"{note} (for {waited:.0f} s)")
            self._gate.sleep(self.settings.poll_s)

    def _wait_batch(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        index: int,
        watch: _Watch,
        throttle: ThrottleSpec,
    ) -> bool:
        """Wait for the controller to finish batch ``index`` (it deletes the znode); measure progress, report
        a stall, adapt the throttle meanwhile. False when cancelled (the batch is left to the controller)."""
        batch = journal.batches[index]
        while True:
            self._gate.check()
            if handle.cancel_requested:
                return False
            if not self._zk.exists(REASSIGN_PARTITIONS_PATH):
                self._measure(handle, journal, index, watch, force=True)
                if handle.record.state is ActionState.STALLED:
                    handle.move(ActionState.RUNNING, progress={"stalled": None})
                return True
            now = time.monotonic()
            if now - watch.measured_at >= self.settings.progress_interval_s:
                self._measure(handle, journal, index, watch)
                behind = self._falling_behind(handle, journal, watch, throttle, now)
                self._check_stall(handle, batch, watch, now, behind)
                if throttle.mode == "adaptive":
                    self._adapt(handle, journal, watch, throttle, now)
            self._zk.wait_deleted(REASSIGN_PARTITIONS_PATH, self.settings.poll_s)

    # --- progress, stalls, throttles ----------------------------------------------------------------

    def _measure(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        index: int,
        watch: _Watch,
        force: bool = False,
    ) -> None:
        """Partitions and bytes done and remaining, the copy rate and the ETA (:mod:`app.actions.progress`),
        written to the action; the stall check's marker of progress."""
        now = time.monotonic()
        if not force and now - watch.measured_at < self.settings.progress_interval_s:
            return
        watch.measured_at = now
        snapshot, _ = self._state()
        moves = moves_of(
            {item.tp: item.replicas for item in journal.items},
            {item.tp: item.replicas for item in journal.original},
        )
        sizes = self._sizes(snapshot, moves)
        estimate = estimate_progress(moves, snapshot, sizes, watch.estimate, time.time())
        watch.estimate = estimate
        remaining = bytes_remaining_of(estimate, [item.tp for item in journal.batches[index]])
        if remaining is not None:
            watch.behind.append((now, remaining))
            watch.behind = window_of(watch.behind, self.settings.stall_after_s)
        progress: dict[str, Any] = {
            "partitions_done": estimate.partitions_done,
            "partitions_remaining": estimate.partitions_remaining,
            "replicas_done": estimate.replicas_done,
            "replicas_total": estimate.replicas_total,
            "bytes_done": estimate.bytes_done,
            "bytes_remaining": estimate.bytes_remaining,
            "bytes_source": "log sizes" if estimate.basis == "bytes" else "partition counts (no log sizes)",
            "rate_bytes_per_s": estimate.rate_bytes_per_s,
            "rate_partitions_per_s": estimate.rate_partitions_per_s,
            "eta_s": estimate.eta_s,
            "measured_at": estimate.at,
        }
        marker: tuple[Any, ...] = (
            estimate.partitions_done,
            estimate.replicas_done,
            None if estimate.bytes_done is None else round(estimate.bytes_done),
        )
        if marker != watch.marker:
            if watch.marker is not None:
                watch.progress_at = now
            watch.marker = marker
            progress["last_progress_at"] = time.time()
        handle.update(progress=progress)

    def _sizes(
        self, snapshot: ClusterSnapshot, moves: Sequence[Any]
    ) -> Mapping[int, Mapping[TopicPartition, float]] | None:
        """The log sizes of the brokers that hold or receive the moving partitions (None: not read)."""
        if self._log_sizes is None:
            return None
        brokers: set[int] = set()
        for move in moves:
            info = snapshot.partitions.get(move.tp)
            brokers.update(move.target)
            if info is not None:
                brokers.update(info.assignment.replicas)
        try:
            return self._log_sizes(sorted(brokers))
        except Exception as exc:
            log.debug("log sizes unavailable: %s", exc)
            return None

    def _falling_behind(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        watch: _Watch,
        spec: ThrottleSpec,
        now: float,
    ) -> str | None:
        """The stall reason when the batch's copy falls behind (:func:`app.actions.progress.falling_behind`
        over ``stall_after_s``), None when it does not. An adaptive throttle that can rise is raised instead
        (:func:`app.actions.adaptive.catch_up`), and the verdict starts over at the new rate."""
        verdict = falling_behind(watch.behind, self.settings.stall_after_s)
        if verdict is None:
            return None
        rate = _int_or_none(handle.record.progress.get("throttle_bytes_per_s"))
        if spec.mode != "adaptive" or spec.adaptive is None:
            return verdict.reason(rate if spec.mode != "none" else None)
        current = rate or spec.adaptive.initial_rate
        answer = self._catch_up(handle, journal, verdict, current, spec.adaptive, now)
        if isinstance(answer, str):
            return verdict.reason(current, held=answer)
        self._change_throttle(handle, journal, watch, current, answer, now)
        watch.behind = watch.behind[-1:]
        return None

    def _catch_up(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        verdict: FallingBehind,
        current: int,
        adaptive: AdaptiveThrottle,
        now: float,
    ) -> ThrottleDecision | str:
        progress = handle.record.progress
        baselines = {int(b): float(v) for b, v in (progress.get("produce_p99_baseline_ms") or {}).items()}
        snapshot, _ = self._state()
        return catch_up(
            current,
            verdict.growth_bytes_per_s,
            verdict.describe(current),
            signals_from_scrape(self._scrape() if self._scrape is not None else None, baselines),
            journal.throttled_brokers,
            urps_outside(snapshot, [item.tp for item in journal.items]),
            now,
            adaptive,
        )

    def _check_stall(
        self,
        handle: ActionHandle,
        batch: Sequence[ReassignmentRequest],
        watch: _Watch,
        now: float,
        behind: str | None = None,
    ) -> None:
        snapshot, _ = self._state()
        destinations = sorted({b for item in batch for b in item.replicas})
        down = [b for b in destinations if b not in snapshot.brokers]
        if down and watch.down_since is None:
            watch.down_since = now
        elif not down:
            watch.down_since = None
        stalled_for = now - watch.progress_at
        down_for = 0.0 if watch.down_since is None else now - watch.down_since
        limit = self.settings.stall_after_s
        if stalled_for >= limit or down_for >= limit or behind is not None:
            reasons = []
            if down:
                reasons.append(
                    f"replica broker(s) {', '.join(map(str, down))} of the batch are not registered (down) "
                    f"for {down_for:.0f} s"
                )
            if stalled_for >= limit:
                reasons.append(f"no progress for {stalled_for:.0f} s")
            if behind is not None:
                reasons.append(behind)
            self._stall(handle, "; ".join(reasons))
        elif handle.record.state is ActionState.STALLED:
            handle.move(ActionState.RUNNING, progress={"stalled": None})
            log.info("reassignment %s progresses again", handle.id)

    def _stall(self, handle: ActionHandle, reason: str) -> None:
        stalled = handle.record.progress.get("stalled") or {}
        if handle.record.state is ActionState.STALLED and stalled.get("reason") == reason:
            return
        since = stalled.get("since") or time.time()
        handle.move(ActionState.STALLED, progress={"stalled": {"since": since, "reason": reason}})
        log.warning("reassignment %s is stalled: %s", handle.id, reason)

    def _adapt(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        watch: _Watch,
        spec: ThrottleSpec,
        now: float,
    ) -> None:
        """Move the replication throttle with the brokers' health (:mod:`app.actions.adaptive`)."""
        adaptive = spec.adaptive
        if adaptive is None or self._scrape is None:
            return
        progress = handle.record.progress
        current = _int_or_none(progress.get("throttle_bytes_per_s")) or adaptive.initial_rate
        baselines = {int(b): float(v) for b, v in (progress.get("produce_p99_baseline_ms") or {}).items()}
        snapshot, _ = self._state()
        decision = next_rate(
            current,
            signals_from_scrape(self._scrape(), baselines),
            journal.throttled_brokers,
            urps_outside(snapshot, [item.tp for item in journal.items]),
            now,
            watch.throttle_changed_at,
            adaptive,
        )
        if decision is None:
            return
        self._change_throttle(handle, journal, watch, current, decision, now)

    def _change_throttle(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        watch: _Watch,
        current: int,
        decision: ThrottleDecision,
        now: float,
    ) -> None:
        """Write the adaptive throttle's new rate, keep it in the progress' history, audit it."""
        progress = handle.record.progress
        self._gate.check()
        self._set_throttle(journal, decision.rate)
        watch.throttle_changed_at = now
        history = list(progress.get("throttle_history", []))[-49:]
        history.append({"at": time.time(), "from": current, "to": decision.rate, "reason": decision.reason})
        handle.update(progress={"throttle_bytes_per_s": decision.rate, "throttle_history": history})
        if self._audit is not None:
            self._audit(
                AuditEntry(
                    time.time(),
                    SYSTEM,
                    "system",
                    "adaptive-throttle",
                    False,
                    decision.direction,
                    handle.id,
                    {"from": current, "to": decision.rate, "reason": decision.reason},
                )
            )
        log.info("reassignment %s: %s", handle.id, decision.reason)

    def _set_throttle(self, journal: ReassignmentJournal, rate: int) -> None:
        config = _journal_throttles(journal, rate)
        for broker, values in config.broker_configs.items():
            set_config_keys(self._zk, "brokers", str(broker), values)
        for topic, values in config.topic_configs.items():
            set_config_keys(self._zk, "topics", topic, values)

    def _remove_throttles(self, journal: ReassignmentJournal) -> tuple[bool, str | None]:
        """Kafka's ``clearAllThrottles``: the rates of every broker the action named or that is registered
        now, the replica lists of its topics (:func:`app.actions.throttle_removal.remove_throttles`)."""
        snapshot, _ = self._state()
        brokers = sorted(set(journal.throttled_brokers) | set(snapshot.brokers))
        report = remove_throttles(self._zk, brokers=brokers, topics=journal.throttled_topics)
        return report.ok, report.first_error

    # --- the end ------------------------------------------------------------------------------------

    def _settled(
        self, items: Sequence[ReassignmentRequest], wait: bool
    ) -> dict[TopicPartition, ReassignmentStatus]:
        """The partitions' status once the snapshot shows none in progress (the collector sees the
        controller's last writes a moment after the admin znode is gone), or when the time is up."""
        deadline = time.monotonic() + (self.settings.verify_timeout_s if wait else 0.0)
        while True:
            snapshot, _ = self._state()
            statuses = reassignment_status(snapshot, items)
            if all(s.state != "in progress" for s in statuses.values()) or time.monotonic() >= deadline:
                return self._confirm_failed(statuses)
            time.sleep(self.settings.poll_s)

    def _confirm_failed(
        self, statuses: dict[TopicPartition, ReassignmentStatus]
    ) -> dict[TopicPartition, ReassignmentStatus]:
        """``statuses`` with each "failed" verdict checked against ZooKeeper itself, as Kafka's ``--verify``
        does: a controller that finishes a batch within milliseconds can delete the admin znode before the
        collector's snapshot shows the batch at all, and that snapshot (the replicas as they were) would
        call the move failed. A partition whose topic znode holds exactly the target, with nothing being
        added or removed, is completed."""
        failed = sorted({tp.topic for tp, s in statuses.items() if s.state == "failed"})
        if not failed:
            return statuses
        confirmed = dict(statuses)
        for topic in failed:
            path = zkdata.topic_path(topic)
            try:
                assignment, _ = zkdata.decode_topic(path, self._zk.read(path))
            except Exception:  # unreadable now: the snapshot's verdict stands
                log.debug("cannot read %s to confirm a failed move", path, exc_info=True)
                continue
            for tp, status in statuses.items():
                now = assignment.get(tp.partition)
                if (
                    tp.topic == topic
                    and status.state == "failed"
                    and now is not None
                    and not now.is_being_reassigned
                    and now.replicas == status.target
                ):
                    confirmed[tp] = ReassignmentStatus(
                        "completed", status.target, now.replicas, status.in_sync
                    )
        return confirmed

    def _finish(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        cancelled: bool,
        error: str | None,
        throttled: bool,
        removed: bool,
        removal_error: str | None,
    ) -> ActionRecord:
        state, result, error_text, progress = self._outcome(
            handle, journal, cancelled, error, throttled, removed, removal_error
        )
        return handle.move(state, result=result, error=error_text, progress=progress)

    def _outcome(
        self,
        handle: ActionHandle,
        journal: ReassignmentJournal,
        cancelled: bool,
        error: str | None,
        throttled: bool,
        removed: bool,
        removal_error: str | None,
    ) -> tuple[ActionState, dict[str, Any], str | None, dict[str, Any]]:
        """The final state, result, error and progress, from the partitions' status once settled."""
        items = journal.items
        statuses = self._settled(items, wait=not cancelled)
        completed = [tp for tp, s in statuses.items() if s.state == "completed"]
        result: dict[str, Any] = {
            "partitions": len(items),
            "completed": len(completed),
            "not_completed": [
                {"topic": tp.topic, "partition": tp.partition, "state": s.state, "replicas": list(s.replicas)}
                for tp, s in statuses.items()
                if s.state != "completed"
            ][:100],
            "throttles_set": throttled,
            "throttles_removed": removed if throttled else None,
        }
        if cancelled:
            in_flight = [tp for tp, s in statuses.items() if s.state == "in progress"]
            result["left_to_the_controller"] = [
                {"topic": tp.topic, "partition": tp.partition} for tp in in_flight[:100]
            ]
        errors = [e for e in (error, removal_error) if e]
        if cancelled:
            state = ActionState.CANCELLED
        elif len(completed) == len(items) and not errors:
            state = ActionState.SUCCEEDED
        elif completed:
            state = ActionState.PARTIAL
        else:
            state = ActionState.FAILED
        progress: dict[str, Any] = {
            "note": "cancelled" if cancelled else "finished",
            "stalled": None,
            "eta_s": None,
            "partitions_done": len(completed),
            "partitions_remaining": len(items) - len(completed),
        }
        if throttled:
            progress["throttles"] = "removed" if removed else "not removed"
        if len(completed) == len(items) and handle.record.progress.get("bytes_remaining") is not None:
            done_bytes = handle.record.progress.get("bytes_done") or 0
            progress |= {
                "bytes_done": done_bytes + handle.record.progress["bytes_remaining"],
                "bytes_remaining": 0,
            }
        return state, result, "; ".join(errors) or None, progress


# --- helpers ---------------------------------------------------------------------------------------------


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _completed(
    snapshot: ClusterSnapshot, targets: Mapping[TopicPartition, tuple[int, ...]]
) -> set[TopicPartition]:
    items = [ReassignmentRequest(tp.topic, tp.partition, r) for tp, r in targets.items()]
    return {tp for tp, s in reassignment_status(snapshot, items).items() if s.state == "completed"}


def _journal_throttles(journal: ReassignmentJournal, rate: int) -> ThrottleConfig:
    """The throttle entries for the whole action, from its original assignment (so that a resumed run
    sets the same ones as the first, whatever moved since)."""
    return throttle_config_from(journal.items, {item.tp: item.replicas for item in journal.original}, rate)
