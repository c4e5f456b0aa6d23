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
  ``stall_after_s`` makes it STALLED with the reason. A cancel writes no further batch, removes the
  throttles and ends CANCELLED at once: the batch in flight is the controller's to finish (ZooKeeper mode
  cannot abort it), unthrottled; a rollback (a new action) undoes it.

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

from app.actions.config import ActionSettings
from app.actions.election import ELECTED, chunk_payloads, verify_election
from app.actions.handle import ActionHandle, CancelRequestedError, Gate, StoppedError, SupersededError
from app.actions.journal import ElectionJournal, JournalError, ReassignmentJournal, Step, resolve_writing
from app.actions.reassignment import (
    ReassignmentRequest,
    ReassignmentStatus,
    ThrottleConfig,
    added_replicas,
    reassignment_status,
    safe_to_start_batch,
    throttle_config_from,
)
from app.actions.state import ActionRecord, ActionState, AuditEntry
from app.actions.throttling import ThrottleSpec, remove_throttles, set_config_keys
from collectors.health import HealthReport
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.kafka.zkdata import PREFERRED_REPLICA_ELECTION_PATH, REASSIGN_PARTITIONS_PATH

log = logging.getLogger(__name__)

ClusterReader = Callable[[], tuple[ClusterSnapshot, HealthReport]]
LogSizes = Callable[[Sequence[int]], Mapping[int, Mapping[TopicPartition, float]]]
"""Per broker (of those asked for), each partition's log size in bytes, from the brokers' metrics."""
BrokerSignals = Callable[[], Mapping[int, Mapping[str, float]]]
"""Per broker, the health gauges of the latest scrape (request handler idle, ...)."""
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
    last_bytes_done: float | None = None
    last_bytes_at: float | None = None
    rate: float | None = None
    throttle_changed_at: float = float("-inf")


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
        signals: BrokerSignals | None = None,
        audit: Audit | None = None,
    ) -> None:
        self._zk = zookeeper
        self._state = state
        self._gate = gate
        self.settings = settings or ActionSettings()
        self._log_sizes = log_sizes
        self._signals = signals
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
            handle.move(
                ActionState.RUNNING,
                progress={
                    "step": Step(0).json(),
                    "batches": batches,
                    "batches_done": 0,
                    "throttle_bytes_per_s": throttle.initial_rate,
                },
            )
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
                snapshot, _ = self._state()
                self._set_throttle(journal, snapshot, rate)
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
                self._check_stall(handle, batch, watch, now)
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
        """Partitions and bytes done and remaining, the copy rate and the ETA, written to the action."""
        now = time.monotonic()
        if not force and now - watch.measured_at < self.settings.progress_interval_s:
            return
        watch.measured_at = now
        snapshot, _ = self._state()
        statuses = reassignment_status(snapshot, journal.items)
        done = sum(1 for s in statuses.values() if s.state == "completed")
        moving = _moving_replicas(journal, snapshot)
        bytes_done, bytes_total = self._bytes(journal, snapshot, statuses, moving)
        progress: dict[str, Any] = {
            "partitions_done": done,
            "partitions_remaining": len(statuses) - done,
            "partitions": _count_states(statuses),
            "measured_at": time.time(),
        }
        marker: tuple[Any, ...] = (done, tuple(sorted(_joined(snapshot, moving))))
        if bytes_total is not None and bytes_done is not None:
            remaining = max(0.0, bytes_total - bytes_done)
            progress |= {"bytes_done": bytes_done, "bytes_remaining": remaining, "bytes_source": "log sizes"}
            if watch.last_bytes_done is not None and watch.last_bytes_at is not None:
                elapsed = now - watch.last_bytes_at
                if elapsed > 0:
                    sample = max(0.0, bytes_done - watch.last_bytes_done) / elapsed
                    watch.rate = sample if watch.rate is None else 0.5 * watch.rate + 0.5 * sample
            watch.last_bytes_done, watch.last_bytes_at = bytes_done, now
            marker += (round(bytes_done),)
            progress["rate_bytes_per_s"] = watch.rate
            progress["eta_s"] = remaining / watch.rate if watch.rate else None
        else:
            progress |= {"bytes_source": "partition counts (no log sizes scraped)"}
            progress["eta_s"] = None
        if marker != watch.marker:
            if watch.marker is not None:
                watch.progress_at = now
            watch.marker = marker
            progress["last_progress_at"] = time.time()
        handle.update(progress=progress)

    def _bytes(
        self,
        journal: ReassignmentJournal,
        snapshot: ClusterSnapshot,
        statuses: Mapping[TopicPartition, ReassignmentStatus],
        moving: Mapping[TopicPartition, tuple[int, ...]],
    ) -> tuple[float | None, float | None]:
        """Bytes copied so far and to copy in all, from the brokers' log sizes: each added replica is the
        leader's log to copy; a completed partition counts whole. None when the sizes cannot be read."""
        if self._log_sizes is None:
            return None, None
        leaders = {tp: info.leader for tp in moving if (info := snapshot.partitions.get(tp)) is not None}
        brokers = sorted({b for b in leaders.values() if b >= 0} | {b for bs in moving.values() for b in bs})
        try:
            sizes = self._log_sizes(brokers)
        except Exception as exc:
            log.debug("log sizes unavailable: %s", exc)
            return None, None
        total = done = 0.0
        for tp, added in moving.items():
            leader_size = sizes.get(leaders.get(tp, -1), {}).get(tp)
            if leader_size is None:
                return None, None
            for broker in added:
                total += leader_size
                if statuses.get(tp) is not None and statuses[tp].state == "completed":
                    done += leader_size
                else:
                    done += min(leader_size, sizes.get(broker, {}).get(tp, 0.0))
        return done, total

    def _check_stall(
        self, handle: ActionHandle, batch: Sequence[ReassignmentRequest], watch: _Watch, now: float
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
        if stalled_for >= limit or down_for >= limit:
            reasons = []
            if down:
                reasons.append(
                    f"replica broker(s) {', '.join(map(str, down))} of the batch are not registered (down) "
                    f"for {down_for:.0f} s"
                )
            if stalled_for >= limit:
                reasons.append(f"no progress for {stalled_for:.0f} s")
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
        if adaptive is None or self._signals is None:
            return
        from app.actions.adaptive import next_rate, urps_outside

        current = _int_or_none(handle.record.progress.get("throttle_bytes_per_s")) or adaptive.min_bytes_per_s
        snapshot, _ = self._state()
        decision = next_rate(
            current,
            self._signals(),
            journal.throttled_brokers,
            urps_outside(snapshot, {item.tp for item in journal.items}),
            now,
            watch.throttle_changed_at,
            adaptive,
        )
        if decision is None or decision.rate == current:
            return
        self._gate.check()
        self._set_throttle(journal, snapshot, decision.rate)
        watch.throttle_changed_at = now
        history = list(handle.record.progress.get("throttle_history", []))[-49:]
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
                    "applied",
                    handle.id,
                    {"from": current, "to": decision.rate, "reason": decision.reason},
                )
            )
        log.info(
            "reassignment %s throttle %d -> %d B/s: %s", handle.id, current, decision.rate, decision.reason
        )

    def _set_throttle(self, journal: ReassignmentJournal, snapshot: ClusterSnapshot, rate: int) -> None:
        del snapshot
        config = _journal_throttles(journal, rate)
        for broker, values in config.broker_configs.items():
            set_config_keys(self._zk, "brokers", str(broker), values)
        for topic, values in config.topic_configs.items():
            set_config_keys(self._zk, "topics", topic, values)

    def _remove_throttles(self, journal: ReassignmentJournal) -> tuple[bool, str | None]:
        snapshot, _ = self._state()
        brokers = set(journal.throttled_brokers) | set(snapshot.brokers)
        failures = remove_throttles(self._zk, sorted(brokers), journal.throttled_topics)
        return not failures, "; ".join(failures) or None

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
                return statuses
            time.sleep(self.settings.poll_s)

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
        progress = {"note": "cancelled" if cancelled else "finished", "stalled": None, "eta_s": None}
        return handle.move(state, result=result, error="; ".join(errors) or None, progress=progress)


# --- helpers ---------------------------------------------------------------------------------------------


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _completed(
    snapshot: ClusterSnapshot, targets: Mapping[TopicPartition, tuple[int, ...]]
) -> set[TopicPartition]:
    items = [ReassignmentRequest(tp.topic, tp.partition, r) for tp, r in targets.items()]
    return {tp for tp, s in reassignment_status(snapshot, items).items() if s.state == "completed"}


def _moving_replicas(
    journal: ReassignmentJournal, snapshot: ClusterSnapshot
) -> dict[TopicPartition, tuple[int, ...]]:
    """Per partition of the action, the replicas it adds (target replicas not in the original assignment)."""
    original = {item.tp: set(item.replicas) for item in journal.original}
    moving = {}
    for item in journal.items:
        before = original.get(item.tp)
        added = (
            tuple(b for b in item.replicas if b not in before)
            if before is not None
            else added_replicas(item, snapshot)
        )
        if added:
            moving[item.tp] = added
    return moving


def _joined(
    snapshot: ClusterSnapshot, moving: Mapping[TopicPartition, tuple[int, ...]]
) -> set[tuple[str, int, int]]:
    """Added replicas that are in their partition's ISR now (each one a copy finished)."""
    joined: set[tuple[str, int, int]] = set()
    for tp, added in moving.items():
        info = snapshot.partitions.get(tp)
        if info is not None:
            joined.update((tp.topic, tp.partition, b) for b in added if b in info.isr)
    return joined


def _count_states(statuses: Mapping[TopicPartition, ReassignmentStatus]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status.state] = counts.get(status.state, 0) + 1
    return counts


def _journal_throttles(journal: ReassignmentJournal, rate: int) -> ThrottleConfig:
    """The throttle entries for the whole action, from its original assignment (so that a resumed run
    sets the same ones as the first, whatever moved since)."""
    return throttle_config_from(journal.items, {item.tp: item.replicas for item in journal.original}, rate)
