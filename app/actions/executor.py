"""Executing runbook actions against ZooKeeper (ZK mode): the preferred replica election.

The election writes ``/admin/preferred_replica_election`` one chunk at a time (each payload under the byte
budget, :func:`app.actions.election.chunk_payloads`), waits for the controller to delete the znode before
writing the next, stops between chunks when cancelled, and at the end waits for the snapshot to show the
preferred leaders and records what was elected and why the rest was not: SUCCEEDED when every partition
is led by its preferred replica, PARTIAL when some are, FAILED when none (or the controller never took a
chunk).

ZooKeeper sits behind :class:`collectors.kafka.admin.AdminZooKeeper` (kazoo in the service:
:class:`collectors.kafka.admin.KazooAdmin`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kazoo.exceptions import NodeExistsError

from app.actions.election import ELECTED, chunk_payloads, verify_election
from app.actions.reassignment import (
    ReassignmentRequest,
    ReassignmentStatus,
    ThrottleConfig,
    ThrottleRemoval,
    plan_batches,
    reassignment_status,
    safe_to_start_batch,
    throttle_config,
    throttle_removal,
)
from app.actions.state import ActionLog, ActionRecord, ActionState
from collectors.health import HealthReport
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.kafka.zkdata import PREFERRED_REPLICA_ELECTION_PATH

log = logging.getLogger(__name__)


class ElectionExecutor:
    def __init__(
        self,
        zookeeper: AdminZooKeeper,
        snapshot: Callable[[], ClusterSnapshot],
        actions: ActionLog,
        *,
        budget_bytes: int = 512 * 1024,
        chunk_timeout_s: float = 60.0,
        verify_timeout_s: float = 30.0,
    ) -> None:
        self._zk = zookeeper
        self._snapshot = snapshot
        self._actions = actions
        self.budget_bytes = budget_bytes
        self.chunk_timeout_s = chunk_timeout_s
        self.verify_timeout_s = verify_timeout_s

    def run(self, record: ActionRecord, partitions: Sequence[TopicPartition]) -> ActionRecord:
        """Run the election of ``record`` (PENDING) to a terminal state; never raises for a ZooKeeper or
        controller problem (the record says FAILED and why)."""
        current = self._actions.get(record.id) or record
        if current.cancel_requested:
            return self._save(current.moved_to(ActionState.CANCELLED, result={"chunks_written": 0}))
        record = self._save(current.moved_to(ActionState.RUNNING))
        payloads = chunk_payloads(partitions, self.budget_bytes) if partitions else []
        written = 0
        try:
            for index, payload in enumerate(payloads):
                latest = self._actions.get(record.id)
                if latest is not None and latest.cancel_requested:
                    return self._finish(record, partitions, written, cancelled=True)
                self._write_chunk(payload)
                if not self._zk.wait_deleted(PREFERRED_REPLICA_ELECTION_PATH, self.chunk_timeout_s):
                    return self._save(
                        record.moved_to(
                            ActionState.FAILED,
                            error=f"the controller did not take chunk {index + 1} of {len(payloads)} within "
                            f"{self.chunk_timeout_s:g} s (is there an active controller?); "
                            f"{PREFERRED_REPLICA_ELECTION_PATH} is left for it",
                            progress={"chunks_written": index + 1, "chunks": len(payloads)},
                        )
                    )
                written = index + 1
                record = self._save(
                    replace(record, progress={"chunks_written": written, "chunks": len(payloads)})
                )
        except Exception as exc:
            log.exception("preferred replica election %s failed", record.id)
            return self._save(record.moved_to(ActionState.FAILED, error=f"ZooKeeper: {exc}"))
        return self._finish(record, partitions, written, cancelled=False)

    def _write_chunk(self, payload: bytes) -> None:
        """Write one chunk; if another election is pending (someone else's), wait for it to finish first."""
        deadline = time.monotonic() + self.chunk_timeout_s
        while True:
            try:
                self._zk.create(PREFERRED_REPLICA_ELECTION_PATH, payload)
                return
            except NodeExistsError:
                if time.monotonic() > deadline or not self._zk.wait_deleted(
                    PREFERRED_REPLICA_ELECTION_PATH, max(0.0, deadline - time.monotonic())
                ):
                    raise RuntimeError(
                        f"{PREFERRED_REPLICA_ELECTION_PATH} is held by another election"
                    ) from None

    def _finish(
        self, record: ActionRecord, partitions: Sequence[TopicPartition], written: int, cancelled: bool
    ) -> ActionRecord:
        outcome = self._verify(partitions)
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
        return self._save(record.moved_to(state, result=result, error=error))

    def _verify(self, partitions: Sequence[TopicPartition]) -> dict[str, list[TopicPartition]]:
        """The outcome once the snapshot shows every partition elected, or when the time is up."""
        deadline = time.monotonic() + self.verify_timeout_s
        while True:
            outcome = verify_election(self._snapshot(), partitions)
            if len(outcome.get(ELECTED, [])) == len(partitions) or time.monotonic() > deadline:
                return outcome
            time.sleep(0.1)

    def _save(self, record: ActionRecord) -> ActionRecord:
        self._actions.save(record)
        return record


# --- reassignment ----------------------------------------------------------------------------------------


class ReassignmentExecutor:
    """A reassignment in batches through ``/admin/reassign_partitions``.

    Throttles are set before the first batch and always removed at the end, whatever happened (Kafka's own
    tool leaves that to a later ``--verify``, and forgotten throttles slow replication for months). No batch
    starts while a partition is under min ISR or offline; cancelling stops further batches (the running one
    is left to the controller, which cannot abort it in ZK mode).
    """

    def __init__(
        self,
        zookeeper: AdminZooKeeper,
        state: Callable[[], tuple[ClusterSnapshot, HealthReport]],
        actions: ActionLog,
        *,
        poll_s: float = 0.2,
        batch_timeout_s: float = 3600.0,
        safety_timeout_s: float = 600.0,
        verify_timeout_s: float = 30.0,
    ) -> None:
        self.verify_timeout_s = verify_timeout_s
        self._zk = zookeeper
        self._state = state
        self._actions = actions
        self.poll_s = poll_s
        self.batch_timeout_s = batch_timeout_s
        self.safety_timeout_s = safety_timeout_s

    def run(
        self,
        record: ActionRecord,
        items: Sequence[ReassignmentRequest],
        throttle_bytes_per_sec: int | None,
        max_concurrent_moves: int,
    ) -> ActionRecord:
        current = self._actions.get(record.id) or record
        if current.cancel_requested:
            return self._save(current.moved_to(ActionState.CANCELLED))
        record = self._save(current.moved_to(ActionState.RUNNING))
        snapshot, _ = self._state()
        batches = plan_batches(items, snapshot, max_concurrent_moves)
        removal = throttle_removal(items, snapshot)
        throttled = False
        error: str | None = None
        cancelled = False
        try:
            if throttle_bytes_per_sec is not None:
                self._apply(throttle_config(items, snapshot, throttle_bytes_per_sec))
                throttled = True
            for index, batch in enumerate(batches):
                latest = self._actions.get(record.id)
                if latest is not None and latest.cancel_requested:
                    cancelled = True
                    break
                waited = self._wait_until_safe(record, index, len(batches))
                if waited is not None:
                    error = waited
                    break
                targets = {item.tp: tuple(item.replicas) for item in batch}
                try:
                    self._zk.create(zkdata.REASSIGN_PARTITIONS_PATH, zkdata.encode_reassignment(targets))
                except NodeExistsError:
                    error = "another reassignment was started in the meantime; no further batch written"
                    break
                record = self._progress(record, items, index, len(batches), "running")
                if not self._zk.wait_deleted(zkdata.REASSIGN_PARTITIONS_PATH, self.batch_timeout_s):
                    error = f"batch {index + 1} did not complete within {self.batch_timeout_s:g} s"
                    break
                record = self._progress(record, items, index + 1, len(batches), "batch done")
        except Exception as exc:
            log.exception("reassignment %s failed", record.id)
            error = f"{type(exc).__name__}: {exc}"
        finally:
            removed, removal_error = self._remove(removal) if throttled else (False, None)
        return self._finish(record, items, cancelled, error, throttled, removed, removal_error)

    def _settled(self, items: Sequence[ReassignmentRequest]) -> dict[TopicPartition, ReassignmentStatus]:
        """The partitions' status once the snapshot shows none in progress (the collector sees the
        controller's last writes a moment after the admin znode is gone), or when the time is up."""
        deadline = time.monotonic() + self.verify_timeout_s
        while True:
            snapshot, _ = self._state()
            statuses = reassignment_status(snapshot, items)
            if all(s.state != "in progress" for s in statuses.values()) or time.monotonic() > deadline:
                return statuses
            time.sleep(self.poll_s)

    def _wait_until_safe(self, record: ActionRecord, index: int, batches: int) -> str | None:
        deadline = time.monotonic() + self.safety_timeout_s
        while True:
            _, report = self._state()
            safe, reason = safe_to_start_batch(report)
            if safe:
                return None
            if time.monotonic() > deadline:
                return f"batch {index + 1} of {batches} not started: {reason}"
            self._save(replace(record, progress={**record.progress, "waiting": reason}))
            time.sleep(self.poll_s)

    def _progress(
        self, record: ActionRecord, items: Sequence[ReassignmentRequest], done: int, batches: int, note: str
    ) -> ActionRecord:
        snapshot, _ = self._state()
        statuses = reassignment_status(snapshot, items)
        counts: dict[str, int] = {}
        for status in statuses.values():
            counts[status.state] = counts.get(status.state, 0) + 1
        progress = {"batches_done": done, "batches": batches, "note": note, "partitions": counts}
        return self._save(replace(record, progress=progress))

    def _apply(self, config: ThrottleConfig) -> None:
        for broker, values in config.broker_configs.items():
            self._merge("brokers", str(broker), values, ())
        for topic, values in config.topic_configs.items():
            self._merge("topics", topic, values, ())

    def _remove(self, removal: ThrottleRemoval) -> tuple[bool, str | None]:
        """Remove every throttle key; keep going past a failure and report the first."""
        first: str | None = None
        targets = [("brokers", str(b), removal.broker_keys) for b in removal.brokers]
        targets += [("topics", t, removal.topic_keys) for t in removal.topics]
        for entity_type, entity, keys in targets:
            try:
                self._merge(entity_type, entity, {}, keys)
            except Exception as exc:
                first = first or f"could not remove the throttle of {entity_type}/{entity}: {exc}"
        return first is None, first

    def _merge(self, entity_type: str, entity: str, values: Mapping[str, str], drop: Sequence[str]) -> None:
        config = self._zk.get_config(entity_type, entity)
        updated = {k: v for k, v in config.items() if k not in drop} | dict(values)
        if updated != config:
            self._zk.set_config(entity_type, entity, updated)

    def _finish(
        self,
        record: ActionRecord,
        items: Sequence[ReassignmentRequest],
        cancelled: bool,
        error: str | None,
        throttled: bool,
        removed: bool,
        removal_error: str | None,
    ) -> ActionRecord:
        statuses = self._settled(items)
        completed = [tp for tp, s in statuses.items() if s.state == "completed"]
        result = {
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
        errors = [e for e in (error, removal_error) if e]
        if cancelled:
            state = ActionState.CANCELLED
        elif len(completed) == len(items) and not errors:
            state = ActionState.SUCCEEDED
        elif completed:
            state = ActionState.PARTIAL
        else:
            state = ActionState.FAILED
        return self._save(record.moved_to(state, result=result, error="; ".join(errors) or None))

    def _save(self, record: ActionRecord) -> ActionRecord:
        self._actions.save(record)
        return record
