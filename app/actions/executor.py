"""Executing runbook actions against ZooKeeper (ZK mode): the preferred replica election.

The election writes ``/admin/preferred_replica_election`` one chunk at a time (each payload under the byte
budget, :func:`app.actions.election.chunk_payloads`), waits for the controller to delete the znode before
writing the next, stops between chunks when cancelled, and at the end waits for the snapshot to show the
preferred leaders and records what was elected and why the rest was not: SUCCEEDED when every partition
is led by its preferred replica, PARTIAL when some are, FAILED when none (or the controller never took a
chunk).

ZooKeeper sits behind :class:`AdminZooKeeper` (kazoo in the service: :class:`KazooAdmin`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from app.actions.election import ELECTED, chunk_payloads, verify_election
from app.actions.state import ActionLog, ActionRecord, ActionState
from collectors.model import ClusterSnapshot, TopicPartition
from collectors.zkdata import PREFERRED_REPLICA_ELECTION_PATH

log = logging.getLogger(__name__)


class AdminZooKeeper(Protocol):
    def exists(self, path: str) -> bool: ...

    def create(self, path: str, data: bytes) -> None:
        """Raises NodeExistsError when the znode is there already."""

    def wait_deleted(self, path: str, timeout_s: float) -> bool: ...


class KazooAdmin:
    """:class:`AdminZooKeeper` on a kazoo session, connected on first use."""

    def __init__(self, connect: str, timeout_s: float = 15.0) -> None:
        self._connect = connect
        self._timeout_s = timeout_s
        self._client: KazooClient | None = None
        self._lock = threading.Lock()

    def _zk(self) -> KazooClient:
        with self._lock:
            if self._client is None:
                client = KazooClient(hosts=self._connect, timeout=self._timeout_s)
                client.start(timeout=self._timeout_s)
                self._client = client
            return self._client

    def exists(self, path: str) -> bool:
        return self._zk().exists(path) is not None

    def create(self, path: str, data: bytes) -> None:
        self._zk().create(path, data, makepath=True)

    def wait_deleted(self, path: str, timeout_s: float) -> bool:
        gone = threading.Event()

        def watch(_: Any) -> None:
            gone.set()

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._zk().exists(path, watch=watch) is None:
                return True
            gone.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            gone.clear()
        return self._zk().exists(path) is None

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None


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
