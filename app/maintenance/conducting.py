"""The service's rolling restarts: the conductor (:mod:`app.maintenance.rolling_restart`) run inside
``kafka-health serve`` in external mode (the automation that stops the brokers follows the run's ``next``),
its journal in the service's database (:mod:`app.maintenance.store`), its demotions, promotions and
silences done in-process (the caller's :class:`~app.maintenance.rolling_restart.MaintenanceService`).

Only the instance that leads (``leadership``, the one the runbook actions follow) conducts. Its supervisor
looks every ``adopt_interval_s`` (and when woken) for runs that are running or paused and not cancelled,
takes each over (:meth:`~app.maintenance.store.RestartStore.claim`) and conducts it on a thread of its own;
a run whose leader stopped, crashed or lost its leadership is resumed by the next leader from its journal
(a broker restarted once is never restarted again: the conductor judges a restart by the broker's epoch).
Losing the leadership, shutting down or a cancel request pause the run at its next wait; a cancelled one
ends ``cancelled``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from app.leadership import StandingSource
from app.maintenance.journal import CANCELLED, PAUSED, STOPPED
from app.maintenance.rolling_restart import Cluster, Conductor, Event, MaintenanceService
from app.maintenance.store import RestartRow, RestartStore, StoreJournal
from collectors.kafka.model import ClusterSnapshot

__all__ = ["EVENTS_KEPT", "LiveCluster", "RollingRestarts"]

log = logging.getLogger(__name__)

EVENTS_KEPT = 200
"""The latest events of each run kept in memory (the journal holds its progress)."""


class LiveCluster:
    """The service's live snapshot and an event set at each new one (subscribe :meth:`on_change` to the
    collector's changes)."""

    def __init__(self, snapshot: Callable[[], ClusterSnapshot]) -> None:
        self._snapshot = snapshot
        self.changed = threading.Event()

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot()

    def on_change(self, _snapshot: ClusterSnapshot) -> None:
        self.changed.set()


class RollingRestarts:
    """One cluster's rolling restarts in the service (see the module docstring). ``service(requested_by)``:
    the in-process demotions, promotions and silences, acting as the run's requester."""

    def __init__(
        self,
        store: RestartStore,
        cluster: Cluster,
        service: Callable[[str], MaintenanceService],
        *,
        leadership: StandingSource | None,
        identity: str,
        default_min_insync_replicas: int | None = None,
        adopt_interval_s: float = 1.0,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.service = service
        self.leadership = leadership
        self.identity = identity
        self.default_min_isr = default_min_insync_replicas
        self.adopt_interval_s = adopt_interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, tuple[threading.Event, threading.Thread]] = {}
        self._events: dict[str, deque[Event]] = {}
        self._thread: threading.Thread | None = None

    # --- the supervisor ---

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._supervise, name="rolling-restarts", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        """Pause every run conducted here (the next leader resumes it) and stop looking for runs."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with self._lock:
            running = list(self._running.values())
        for stop, _ in running:
            stop.set()
        for _, thread in running:
            thread.join(timeout=10)

    def leads(self) -> bool:
        return self.leadership is None or self.leadership.standing() == "leader"

    def _supervise(self) -> None:
        while not self._stop.is_set():
            try:
                self.adopt_now()
            except Exception:
                log.exception("looking for rolling restarts to conduct failed")
            self._wake.wait(self.adopt_interval_s)
            self._wake.clear()

    def adopt_now(self) -> int:
        """Once: pause what must pause (leadership lost, cancel requested), take over what is unfinished;
        returns how many runs were started here."""
        leads = self.leads() and not self._stop.is_set()
        with self._lock:
            running = dict(self._running)
        for run_id, (stop, _) in running.items():
            if not leads or self.store.cancel_requested(run_id):
                stop.set()
        if not leads:
            return 0
        started = 0
        for row in self.store.unfinished():
            if row.id in running or not self.store.claim(row.id, self.identity):
                continue
            claimed = self.store.get(row.id)
            if claimed is None:
                continue
            stop = threading.Event()
            thread = threading.Thread(
                target=self._conduct, args=(claimed, stop), name=f"rolling-restart-{row.id}", daemon=True
            )
            with self._lock:
                self._running[row.id] = (stop, thread)
            thread.start()
            started += 1
        return started

    # --- one run ---

    def events(self, run_id: str) -> list[Event]:
        """The run's latest events seen by this instance (empty when another one conducts it)."""
        with self._lock:
            return list(self._events.get(run_id, ()))

    def conducted_here(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._running

    def _record_event(self, run_id: str, event: Event) -> None:
        with self._lock:
            self._events.setdefault(run_id, deque(maxlen=EVENTS_KEPT)).append(event)
        log.info("rolling restart %s: %s%s", run_id, f"broker {event.broker}: " if event.broker is not None
                 else "", event.message)  # fmt: skip

    def _conduct(self, row: RestartRow, stop: threading.Event) -> None:
        record = row.record
        journal = StoreJournal(self.store, row.id)
        try:
            conductor = Conductor(
                self.cluster,
                journal,
                record,
                restarter=None,
                service=self.service(row.requested_by),
                stop=stop,
                on_event=lambda event: self._record_event(row.id, event),
                default_min_insync_replicas=self.default_min_isr,
            )
            outcome = conductor.run()
            if outcome.result == PAUSED and self.store.cancel_requested(row.id):
                record.state = CANCELLED
                record.ended_at = time.time()
                journal.save(record)
                self._record_event(row.id, Event(time.time(), "stopped", "cancelled"))
        except Exception as exc:
            log.exception("rolling restart %s failed", row.id)
            record.state = STOPPED
            record.ended_at = time.time()
            record.stopped = {"broker": None, "step": None, "reason": f"the service failed: {exc}"}
            try:
                journal.save(record)
            except Exception:
                log.exception("rolling restart %s: its journal could not be saved", row.id)
        finally:
            with self._lock:
                self._running.pop(row.id, None)
