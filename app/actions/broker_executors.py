"""The executors of the broker-wide runbook actions, crash-safe and resumable like those of
:mod:`app.actions.executor`:

* **Demotion and promotion** (:class:`LeadershipExecutor`): the reorder-only reassignment of the partitions
  the broker is (or was) the preferred leader of, then a preferred replica election of them
  (:mod:`app.actions.leadership`).
* **Decommission** (:class:`DecommissionExecutor`): the drain plan's reassignment, run (and resumed,
  cancelled) as any reassignment, then verified (:mod:`app.actions.decommission`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.actions.config import ActionSettings
from app.actions.decommission import Leftover, leftovers, throttled_topics
from app.actions.election import ELECTED, chunk_payloads, verify_election
from app.actions.executor import ClusterReader, ElectionExecutor, ReassignmentExecutor
from app.actions.handle import ActionHandle, CancelRequestedError, Gate, StoppedError, SupersededError
from app.actions.journal import JournalError, ReassignmentJournal, Step
from app.actions.leadership import DEMOTE_BROKER, LeadershipJournal, led_by, partitions_json
from app.actions.state import ActionRecord, ActionState
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import TopicPartition
from collectors.kafka.zkdata import PREFERRED_REPLICA_ELECTION_PATH, REASSIGN_PARTITIONS_PATH

log = logging.getLogger(__name__)

# --- demotion and promotion ------------------------------------------------------------------------------


class LeadershipExecutor:
    """A demotion or promotion of a broker (:mod:`app.actions.leadership`): the reorder batches through
    ``/admin/reassign_partitions`` (no replica added: the controller completes each at once, nothing is
    copied), then a preferred election of the recorded partitions through
    ``/admin/preferred_replica_election`` in chunks, then verified against the snapshot.

    ``progress.phase`` says which part it is in (``reorder``, ``elect``, ``verify``) and ``progress.step``
    where it stands in it, recorded before each write as the other executors do: a resumed run goes on
    from there (a batch found ``writing`` is resolved by :func:`~app.actions.journal.resolve_writing`, a
    chunk found written is not written again). A cancel is seen before the next write."""

    def __init__(
        self,
        zookeeper: AdminZooKeeper,
        state: ClusterReader,
        gate: Gate,
        settings: ActionSettings | None = None,
    ) -> None:
        self._zk = zookeeper
        self._state = state
        self._gate = gate
        self.settings = settings or ActionSettings()
        self._batches = ReassignmentExecutor(zookeeper, state, gate, self.settings)
        self._chunks = ElectionExecutor(zookeeper, lambda: state()[0], gate, self.settings)

    def run(self, handle: ActionHandle) -> ActionRecord:
        try:
            return self._run(handle)
        except (SupersededError, StoppedError) as exc:
            log.info("%s %s left to another run: %s", handle.record.kind, handle.id, exc)
            return handle.record

    def _run(self, handle: ActionHandle) -> ActionRecord:
        record = handle.record
        try:
            journal = LeadershipJournal.from_plan(record.plan)
        except JournalError as exc:
            return handle.move(ActionState.FAILED, error=f"cannot run: {exc}")
        payloads = chunk_payloads(journal.to_elect, journal.budget_bytes) if journal.to_elect else []
        if record.state is ActionState.PENDING:
            if record.cancel_requested:
                return handle.move(ActionState.CANCELLED, result={"broker": journal.broker, "reordered": 0})
            handle.move(
                ActionState.RUNNING,
                progress={
                    "phase": "reorder",
                    "step": Step(0).json(),
                    "batches": len(journal.batches),
                    "batches_done": 0,
                    "chunks": len(payloads),
                    "chunks_written": 0,
                },
            )
        else:
            adopted = int(record.progress.get("adoptions", 0)) + 1
            handle.update(progress={"adoptions": adopted, "adopted_at": time.time()})
            log.info("%s %s adopted at %s", record.kind, handle.id, record.progress.get("phase"))
        try:
            if handle.record.progress.get("phase", "reorder") == "reorder":
                if not self._reorder(handle, journal):
                    return self._finish(handle, journal, cancelled=True)
                handle.update(progress={"phase": "elect", "step": Step(0).json()})
            if handle.record.progress.get("phase") == "elect":
                if not self._elect(handle, payloads):
                    return self._finish(handle, journal, cancelled=True)
                handle.update(progress={"phase": "verify", "step": None})
        except (SupersededError, StoppedError):
            raise
        except Exception as exc:
            log.exception("%s %s failed", handle.record.kind, handle.id)
            return handle.move(ActionState.FAILED, error=f"{type(exc).__name__}: {exc}")
        return self._finish(handle, journal, cancelled=False)

    def _reorder(self, handle: ActionHandle, journal: LeadershipJournal) -> bool:
        """Each reorder batch, one after the other; False when cancelled before a write."""

        def write(index: int) -> bool:
            targets = {item.tp: tuple(item.replicas) for item in journal.batches[index]}
            return self._batches._write_batch(handle, index, targets) == "done"

        return self._steps(
            handle,
            len(journal.batches),
            REASSIGN_PARTITIONS_PATH,
            "complete reorder batch",
            "batches_done",
            write,
        )

    def _elect(self, handle: ActionHandle, payloads: Sequence[bytes]) -> bool:
        """Each election chunk, one after the other; False when cancelled before a write."""

        def write(index: int) -> bool:
            chunk = set(zkdata.decode_partition_list(PREFERRED_REPLICA_ELECTION_PATH, payloads[index]))
            self._chunks._write_chunk(index, payloads[index], chunk)
            return False

        return self._steps(
            handle,
            len(payloads),
            PREFERRED_REPLICA_ELECTION_PATH,
            "take election chunk",
            "chunks_written",
            write,
        )

    def _steps(
        self,
        handle: ActionHandle,
        count: int,
        path: str,
        what: str,
        done_key: str,
        write: Callable[[int], bool],
    ) -> bool:
        """The journaled steps of one phase (pending, writing, written, done), resumed where the progress
        says: ``write(index)`` writes step ``index`` to ``path`` and says whether it found it done already;
        otherwise the controller's deletion of ``path`` ends the step. False when cancelled before a write;
        RuntimeError naming the step when the controller does not take it in time."""
        step = Step.from_progress(handle.record.progress)
        while step.done < count:
            index = step.done
            if step.state == "pending":
                try:
                    step = Step(index, "writing")
                    handle.update(unless_cancelled=True, progress={"step": step.json()})
                except CancelRequestedError:
                    return False
            if step.state == "writing":
                finished = write(index)
                step = Step(index + 1) if finished else Step(index, "written")
                handle.update(progress={"step": step.json(), done_key: step.done})
                if finished:
                    continue
            self._gate.check()
            if not self._zk.wait_deleted(path, self.settings.chunk_timeout_s):
                raise RuntimeError(
                    f"the controller did not {what} {index + 1} of {count} within "
                    f"{self.settings.chunk_timeout_s:g} s (is there an active controller?); "
                    f"{path} is left for it"
                )
            step = Step(index + 1)
            handle.update(progress={"step": step.json(), done_key: step.done})
        return True

    def _finish(self, handle: ActionHandle, journal: LeadershipJournal, cancelled: bool) -> ActionRecord:
        """Once the snapshot shows every partition elected (or the time is up): what was reordered and
        elected, what the broker still leads and why, and the final state."""
        deadline = time.monotonic() + (0.0 if cancelled else self.settings.verify_timeout_s)
        items = journal.items
        while True:
            snapshot, _ = self._state()
            outcome = verify_election(snapshot, journal.to_elect)
            reordered = sum(
                1
                for item in items
                if (info := snapshot.partitions.get(item.tp)) is not None
                and tuple(info.assignment.replicas) == tuple(item.replicas)
            )
            elected = len(outcome.get(ELECTED, []))
            if (elected == len(journal.to_elect) and reordered == len(items)) or time.monotonic() >= deadline:
                break
            self._gate.sleep(self.settings.poll_s)
        broker = journal.broker
        demote = handle.record.kind == DEMOTE_BROKER
        reasons = {tp: reason for reason, tps in outcome.items() if reason != ELECTED for tp in tps}
        reasons |= dict(journal.left)
        led = led_by(snapshot, broker)
        result: dict[str, Any] = {
            "broker": broker,
            "reorders": len(items),
            "reordered": reordered,
            "to_elect": len(journal.to_elect),
            "elected": elected,
            "not_elected": {
                reason: partitions_json(tps[:100]) for reason, tps in outcome.items() if reason != ELECTED
            },
            "left": [{"topic": tp.topic, "partition": tp.partition, "reason": r} for tp, r in journal.left][
                :100
            ],
            "leads": len(led),
        }
        if demote:
            result["still_led"] = [
                {"topic": tp.topic, "partition": tp.partition, "reason": reasons.get(tp, "led by the broker")}
                for tp in led[:100]
            ]
            done = reordered == len(items) and not led
        else:
            done = reordered == len(items) and elected == len(journal.to_elect) and not journal.left
        error = None
        if cancelled:
            state = ActionState.CANCELLED
        elif done:
            state = ActionState.SUCCEEDED
        elif reordered or elected:
            state = ActionState.PARTIAL
        else:
            state = ActionState.FAILED
            error = (
                f"broker {broker} still leads {len(led)} partition(s)"
                if demote
                else f"broker {broker} leads none of the {len(journal.to_elect)} partition(s) to give back"
            )
        return handle.move(state, result=result, error=error, progress={"phase": "done", "note": state.value})


# --- decommission ----------------------------------------------------------------------------------------


class DecommissionExecutor(ReassignmentExecutor):
    """A decommission: the drain plan's reassignment, run (and resumed, cancelled) as any reassignment,
    then verified (:mod:`app.actions.decommission`): the result says ``removable`` and lists what is left
    of the broker and why. A reassignment that completed but leaves something is PARTIAL."""

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
        plan = handle.record.plan
        broker = int(plan["broker"])
        skipped = {
            TopicPartition(str(e["topic"]), int(e["partition"])): str(e["reason"])
            for e in plan.get("skipped") or []
        }
        left = self._leftovers(broker, journal, skipped, wait=not cancelled)
        result |= {
            "broker": broker,
            "removable": not left,
            "left": [leftover.json() for leftover in left[:100]],
            "left_total": len(left),
        }
        if state is ActionState.SUCCEEDED and left:
            state = ActionState.PARTIAL
            error_text = f"broker {broker} is not removable: {len(left)} thing(s) left of it (result.left)"
        return handle.move(state, result=result, error=error_text, progress=progress)

    def _leftovers(
        self, broker: int, journal: ReassignmentJournal, skipped: Mapping[TopicPartition, str], wait: bool
    ) -> list[Leftover]:
        """What is left of ``broker`` once the snapshot and ZooKeeper's configs show nothing (or the time is
        up): the configs are read from ZooKeeper itself (the throttles were removed a moment ago)."""
        deadline = time.monotonic() + (self.settings.verify_timeout_s if wait else 0.0)
        while True:
            snapshot, _ = self._state()
            topics = sorted(set(journal.throttled_topics) | set(throttled_topics(snapshot)))
            found = leftovers(
                snapshot,
                broker,
                self._zk.get_config("brokers", str(broker)),
                {topic: self._zk.get_config("topics", topic) for topic in topics},
                skipped,
            )
            if not found or time.monotonic() >= deadline:
                return found
            self._gate.sleep(self.settings.poll_s)
