"""The runbook actions behind the REST routes: checks, records, the audit trail, execution and plans.

A route parses its request into an order (:class:`ElectionOrder`, :class:`ReassignmentOrder`, ...), calls
the :class:`ActionRunner` and turns what comes back into its response. The runner

* refuses what must not run: an invalid request (:class:`InvalidRequestError`, every problem named), a
  preferred election or a reassignment someone else started and the controller has not finished (in the
  snapshot, or its admin znode exists: :class:`ConflictError`), an unknown action or plan
  (:class:`NotFoundError`);
* writes one audit entry per request, dry runs and refusals included (``accepted``, ``refused``,
  ``dry-run``), and the :class:`~app.actions.state.ActionRecord` of every execution;
* runs executions on an :class:`ActionPool`: a few worker threads, so that a burst of requests queues
  (its actions stay PENDING until a worker takes them) instead of starting a thread each;
* keeps the last :data:`PLANS_KEPT` rebalance and drain plans, which may be submitted by id.

It knows nothing of HTTP: the service maps its errors to 404, 409 and 422.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

from analytics.model import LoadWindow
from app.actions.broker_executors import DecommissionExecutor, LeadershipExecutor
from app.actions.config import ActionSettings
from app.actions.decommission import checks as decommission_checks
from app.actions.election import (
    chunk_payloads,
    plan_preferred_election,
    validate_scope,
)
from app.actions.executor import ElectionExecutor, LatestScrape, LogSizes, ReassignmentExecutor
from app.actions.handle import ActionHandle, Gate, claim
from app.actions.journal import ElectionJournal, JournalError, ReassignmentJournal, rollback_items
from app.actions.leadership import (
    DEMOTE_BROKER,
    PROMOTE_BROKER,
    LeadershipJournal,
    UnknownBrokerError,
    demotion_plan,
    known_broker,
    restoration_plan,
    restore_record,
)
from app.actions.orders import (
    ConflictError,
    DecommissionOrder,
    DecommissionOutcome,
    DrainOrder,
    ElectionOrder,
    ElectionOutcome,
    InvalidRequestError,
    LeadershipOrder,
    LeadershipOutcome,
    NotFoundError,
    PlanOutcome,
    ReassignmentOrder,
    ReassignmentOutcome,
    RebalanceOrder,
    Requester,
    RollbackOrder,
)
from app.actions.reassignment import (
    Problem,
    ReassignmentRequest,
    added_replicas,
    plan_batches,
    throttle_config,
    throttle_removal,
    throttle_warnings,
    validate_reassignment,
)
from app.actions.rebalance import RebalancePlan, plan_drain, plan_rebalance
from app.actions.rebalance.goals import DiskInput
from app.actions.sizes import copy_bytes, copy_seconds, partition_sizes
from app.actions.state import (
    AUDIT_LISTED,
    TERMINAL,
    ActionLog,
    ActionRecord,
    ActionState,
    AuditEntry,
    IllegalTransitionError,
    StaleRecordError,
    new_action_id,
    request_digest,
)
from app.leadership import StandingSource
from collectors.disks import log_dir_filesystems
from collectors.health import HealthReport
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import ClusterSnapshot, TopicPartition

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

ELECTION = "preferred-replica-election"
REASSIGNMENT = "reassignment"
CANCEL = "cancel"
ROLLBACK = "rollback"
PLAN_REBALANCE = "plan-rebalance"
PLAN_DRAIN = "plan-drain"
DEMOTE = DEMOTE_BROKER
PROMOTE = PROMOTE_BROKER
DECOMMISSION = "decommission-broker"
LEADERSHIP = (DEMOTE, PROMOTE)
MOVES = (REASSIGNMENT, DECOMMISSION)
"""Kinds that write ``/admin/reassign_partitions`` batches of data moves: one at a time."""

PLANS_KEPT = 100
"""Rebalance and drain plans kept for submission (the oldest go first)."""
DEFAULT_WORKERS = ActionSettings().workers
"""Actions executing at once; more wait, PENDING, for a worker (the settings' default)."""


# --- the pool --------------------------------------------------------------------------------------------


class ActionPool:
    """At most ``workers`` actions execute at once, the others wait in order.

    The workers are daemon threads, started as work arrives: stopping the service never waits for an
    action (a reassignment can take hours). A stopped action stays unfinished in the log, its journal saying
    where it stood, and the next instance to lead adopts it (:class:`ActionRunner`).
    """

    def __init__(self, workers: int = DEFAULT_WORKERS, name: str = "action") -> None:
        if workers < 1:
            raise ValueError(f"an action pool needs at least one worker, got {workers}")
        self._workers = workers
        self._name = name
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, work: Callable[[], object]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the action pool is shut down")
            if self._idle <= 0 and len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                self._idle += 1
                thread.start()
            self._idle -= 1
            self._queue.put(work)

    def _work(self) -> None:
        while (work := self._queue.get()) is not None:
            try:
                work()
            except Exception:
                log.exception("an action failed outside its executor")
            with self._lock:
                self._idle += 1

    @property
    def threads(self) -> int:
        """Worker threads started so far (never more than ``workers``)."""
        with self._lock:
            return len(self._threads)

    def shutdown(self) -> None:
        """Take no more work, drop what waits, and let idle workers exit (busy ones finish on their own)."""
        with self._lock:
            self._closed = True
            threads = len(self._threads)
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        for _ in range(threads):
            self._queue.put(None)


# --- the runner ------------------------------------------------------------------------------------------


ClusterReader = Callable[[], tuple[ClusterSnapshot, HealthReport]]
"""The live snapshot and its health report (the service's cluster view)."""
LatestLoad = Callable[[str | None], LoadWindow | None]
"""The latest load window of a cluster (None: of any cluster), from the analytics store."""
ProduceRates = Callable[[], Mapping[TopicPartition, float]]
"""Each partition's measured produce rate (bytes/s), from the brokers' metrics (empty: not measured)."""


@dataclass(slots=True)
class _Plans:
    kept: int
    plans: OrderedDict[str, RebalancePlan] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep(self, plan: RebalancePlan) -> str:
        plan_id = new_action_id()
        with self.lock:
            self.plans[plan_id] = plan
            while len(self.plans) > self.kept:
                self.plans.popitem(last=False)
        return plan_id

    def get(self, plan_id: str) -> RebalancePlan | None:
        with self.lock:
            return self.plans.get(plan_id)


class ActionRunner:
    """What the action routes call (see the module docstring). ``cluster`` reads the live snapshot and its
    health (each call the latest: executions follow the cluster while they run); ``latest_load`` reads the
    analytics store for plans (None without a store: plans then balance replica and leader counts).

    Executions: accepting an action only records it (PENDING, its journal in the plan). The instance that
    leads (``leadership``, shared with the notifier; always this one without it) runs every unfinished
    action of the log: the ones it accepted, ones another replica accepted, and ones an instance that
    stopped or crashed left RUNNING, which it adopts where their journal says they stood. Only one executor
    runs an action: taking it over is a compare-and-set of its ``owner``. :meth:`start` starts looking;
    :meth:`shutdown` stops the executors where they are (the next leader goes on from there).
    """

    def __init__(
        self,
        actions: ActionLog,
        admin: AdminZooKeeper,
        cluster: ClusterReader,
        *,
        latest_load: LatestLoad | None = None,
        pool: ActionPool | None = None,
        plans_kept: int = PLANS_KEPT,
        settings: ActionSettings | None = None,
        leadership: StandingSource | None = None,
        identity: str | None = None,
        log_sizes: LogSizes | None = None,
        scrape: LatestScrape | None = None,
        produce_rates: ProduceRates | None = None,
        log_dir_mountpoints: Sequence[str] = (),
    ) -> None:
        self.settings = settings or ActionSettings()
        self._actions = actions
        self._admin = admin
        self._cluster = cluster
        self._latest_load = latest_load
        self._pool = pool or ActionPool(self.settings.workers)
        self._plans = _Plans(plans_kept)
        self.identity = identity or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.gate = Gate(leadership)
        self._log_sizes = log_sizes
        self._scrape = scrape
        self._produce_rates = produce_rates
        self._log_dir_mountpoints = tuple(log_dir_mountpoints)
        self._running: set[str] = set()
        self._running_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # --- executions ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Run unfinished actions (adopting what a previous instance left) while this instance leads."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._supervise, name="action-supervisor", daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        """Stop looking for work and stop the executors at their next poll (their actions stay unfinished,
        for the next leader); queued work is dropped (it is in the log)."""
        self.gate.stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._pool.shutdown()

    def adopt_now(self) -> int:
        """Look for unfinished actions once, now (the supervisor does it every ``adopt_interval_s``);
        returns how many were started."""
        if self.gate.stop.is_set() or self.gate.standing() != "leader":
            return 0
        started = 0
        for record in self._actions.unfinished():
            with self._running_lock:
                if record.id in self._running:
                    continue
            handle = claim(self._actions, record, self.identity)
            if handle is None:
                continue
            with self._running_lock:
                self._running.add(record.id)
            try:
                self._pool.submit(functools.partial(self._execute, handle))
            except RuntimeError:  # shut down meanwhile
                with self._running_lock:
                    self._running.discard(record.id)
                return started
            started += 1
        return started

    def _supervise(self) -> None:
        while not self.gate.stop.is_set():
            try:
                self.adopt_now()
            except Exception:
                log.exception("looking for unfinished actions failed")
            self._wake.wait(self.settings.adopt_interval_s)
            self._wake.clear()

    def _execute(self, handle: ActionHandle) -> None:
        try:
            if handle.record.kind == ELECTION:
                ElectionExecutor(self._admin, lambda: self._cluster()[0], self.gate, self.settings).run(
                    handle
                )
            elif handle.record.kind == REASSIGNMENT:
                ReassignmentExecutor(
                    self._admin,
                    self._cluster,
                    self.gate,
                    self.settings,
                    log_sizes=self._log_sizes,
                    scrape=self._scrape,
                    audit=self._actions.audit,
                ).run(handle)
            elif handle.record.kind == DECOMMISSION:
                DecommissionExecutor(
                    self._admin,
                    self._cluster,
                    self.gate,
                    self.settings,
                    log_sizes=self._log_sizes,
                    scrape=self._scrape,
                    audit=self._actions.audit,
                ).run(handle)
            elif handle.record.kind in LEADERSHIP:
                LeadershipExecutor(self._admin, self._cluster, self.gate, self.settings).run(handle)
            else:
                handle.move(ActionState.FAILED, error=f"unknown action kind {handle.record.kind!r}")
        finally:
            with self._running_lock:
                self._running.discard(handle.id)

    # --- audit -----------------------------------------------------------------------------------------

    def audit(
        self,
        who: Requester,
        action: str,
        *,
        dry_run: bool,
        outcome: str,
        action_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """One audit entry, now: ``outcome`` is ``accepted``, ``refused`` or ``dry-run``."""
        self._actions.audit(
            AuditEntry(
                time.time(), who.name, who.role.name, action, dry_run, outcome, action_id, detail or {}
            )
        )

    # --- preferred replica election --------------------------------------------------------------------

    def elect_preferred_leaders(self, who: Requester, order: ElectionOrder) -> ElectionOutcome:
        """The dry run, or the election started in the background (PENDING record in the outcome)."""
        snapshot, _ = self._cluster()
        try:
            scope = order.election_scope()
        except ValueError as exc:
            self.audit(who, ELECTION, dry_run=order.dry_run, outcome="refused", detail={"reason": str(exc)})
            raise InvalidRequestError(str(exc)) from None
        problems = validate_scope(snapshot, scope)
        if problems:
            digest = {"scope": order.scope, "request_sha256": request_digest(order.as_request())}
            self._refuse_problems(who, ELECTION, order.dry_run, problems, digest)
        plan = plan_preferred_election(snapshot, scope)
        chunks = len(chunk_payloads(plan.to_elect, order.budget_bytes)) if plan.to_elect else 0
        counts = {"scope": order.scope, "to_elect": len(plan.to_elect), "ineligible": len(plan.ineligible)}
        summary = {**counts, "request_sha256": request_digest(order.as_request())}
        outcome = ElectionOutcome(plan, chunks)
        if order.dry_run:
            self.audit(who, ELECTION, dry_run=True, outcome="dry-run", detail=summary)
            return outcome
        pending = plan.election_in_progress or snapshot.pending.preferred_election
        if pending or self._admin.exists(zkdata.PREFERRED_REPLICA_ELECTION_PATH):
            reason = (
                f"a preferred replica election is already in progress ({len(pending)} partitions in "
                f"{zkdata.PREFERRED_REPLICA_ELECTION_PATH}) that this service did not start; try again when "
                "it is done"
            )
            self.audit(who, ELECTION, dry_run=False, outcome="refused", detail={"reason": reason, **summary})
            raise ConflictError(reason)
        self._refuse_if_unfinished(who, ELECTION, summary)
        journal = ElectionJournal(plan.to_elect, order.budget_bytes)
        record = self._accept(
            who,
            ELECTION,
            order.as_request(),
            plan={
                **counts,
                "chunks": chunks,
                "predicted_leaders": outcome.predicted_leaders,
                **journal.plan_json(),
            },
            summary=summary,
        )
        return replace(outcome, action=record)

    # --- reassignment ----------------------------------------------------------------------------------

    def reassign(self, who: Requester, order: ReassignmentOrder) -> ReassignmentOutcome:
        """The dry run (batches and throttles), or the reassignment started in the background."""
        snapshot, _ = self._cluster()
        items = order.items
        problems = validate_reassignment(snapshot, items, order.allow_replication_factor_change)
        summary = {
            "partitions": len(items),
            "throttle": order.throttle_bytes_per_sec,
            "request_sha256": request_digest(order.as_request()),
        }
        pending = snapshot.pending.reassignments
        if pending or self._admin.exists(zkdata.REASSIGN_PARTITIONS_PATH):
            reason = (
                f"a reassignment is already in progress ({len(pending)} partitions in "
                f"{zkdata.REASSIGN_PARTITIONS_PATH}) that this service did not start; try again when it is "
                "done"
            )
            self.audit(
                who,
                REASSIGNMENT,
                dry_run=order.dry_run,
                outcome="refused",
                detail={"reason": reason, **summary},
            )
            raise ConflictError(reason)
        if problems:
            self._refuse_problems(who, REASSIGNMENT, order.dry_run, problems, summary)
        outcome = self._reassignment_outcome(order, snapshot)
        batches = outcome.batches
        if order.dry_run:
            self.audit(who, REASSIGNMENT, dry_run=True, outcome="dry-run", detail=summary)
            return outcome
        self._refuse_if_unfinished(who, REASSIGNMENT, summary, kinds=MOVES)
        removal = throttle_removal(items, snapshot)
        journal = ReassignmentJournal.of(batches, snapshot, removal.brokers)
        record = self._accept(
            who,
            REASSIGNMENT,
            order.as_request(),
            plan={"batches": len(batches), "replicas_added": outcome.replicas_added, **journal.plan_json()},
            summary=summary,
            parent=order.parent,
        )
        return replace(outcome, action=record)

    def _reassignment_outcome(
        self, order: ReassignmentOrder, snapshot: ClusterSnapshot
    ) -> ReassignmentOutcome:
        """The dry run of a valid reassignment: batches, throttles, bytes to copy, time at the throttle."""
        items = order.items
        batches = plan_batches(items, snapshot, order.max_concurrent_moves) if items else []
        rate = order.initial_rate
        sizes = self._sizes(snapshot, [item.tp for item in items])
        fastest = order.adaptive.max_bytes_per_s if order.adaptive is not None else rate
        copies = [
            copy_bytes(sizes.get(item.tp), len(added))
            for item in items
            if (added := added_replicas(item, snapshot))
        ]
        unknown = sum(c is None for c in copies)
        return ReassignmentOutcome(
            order,
            batches,
            None if rate is None else throttle_config(items, snapshot, rate),
            sum(len(added_replicas(item, snapshot)) for item in items),
            warnings=tuple(self._throttle_warnings(order, snapshot, batches)),
            bytes_to_copy=None if unknown else sum(c or 0 for c in copies),
            moves_with_unknown_size=unknown,
            estimated_s=copy_seconds(batches, snapshot, sizes, fastest),
        )

    def _refuse_pending_moves(
        self, who: Requester, kind: str, dry_run: bool, summary: Mapping[str, Any]
    ) -> None:
        """409 while a reassignment this service did not start is in ZooKeeper."""
        snapshot, _ = self._cluster()
        pending = snapshot.pending.reassignments
        if pending or self._admin.exists(zkdata.REASSIGN_PARTITIONS_PATH):
            reason = (
                f"a reassignment is already in progress ({len(pending)} partitions in "
                f"{zkdata.REASSIGN_PARTITIONS_PATH}); try again when it is done"
            )
            self.audit(who, kind, dry_run=dry_run, outcome="refused", detail={"reason": reason, **summary})
            raise ConflictError(reason)

    def _throttle_warnings(
        self,
        order: ReassignmentOrder,
        snapshot: ClusterSnapshot,
        batches: Sequence[Sequence[ReassignmentRequest]],
    ) -> list[str]:
        """A throttle below what the moving partitions take in: a replica copied slower than its partition
        grows never catches up, and the reassignment never completes."""
        rate = order.throttle_bytes_per_sec if order.adaptive is None else order.adaptive.max_bytes_per_s
        if rate is None or self._produce_rates is None:
            return []
        try:
            produce = self._produce_rates()
        except Exception as exc:
            log.debug("produce rates unavailable for the dry run: %s", exc)
            return []
        if not produce:
            return [
                "the partitions' produce rates are not measured (no metrics scraped): the throttle "
                "could not be checked against them"
            ]
        return throttle_warnings(rate, batches, snapshot, produce)

    # --- demotion and promotion ----------------------------------------------------------------------

    def demote(self, who: Requester, order: LeadershipOrder) -> LeadershipOutcome:
        """The dry run, or the demotion started in the background: every partition the broker is the
        preferred leader of reordered so that it comes last, then elected (:mod:`app.actions.leadership`).
        The replica lists before are recorded with the action, for :meth:`promote`."""
        snapshot, _ = self._cluster()
        summary: dict[str, Any] = {"broker": order.broker}
        self._refuse_unknown_broker(who, DEMOTE, order, snapshot)
        previous = self._demotion_in_effect(order.broker)
        in_effect = restore_record(previous.plan) if previous is not None else ()
        plan = demotion_plan(snapshot, order.broker, in_effect)
        summary |= {"reorders": len(plan.reorders), "to_elect": len(plan.to_elect), "left": len(plan.left)}
        outcome = LeadershipOutcome(plan, None if previous is None else previous.id)
        return self._leadership(who, DEMOTE, order, outcome, summary)

    def promote(self, who: Requester, order: LeadershipOrder) -> LeadershipOutcome:
        """The dry run, or the promotion started in the background: the replica lists the broker's last
        demotion recorded, restored for the partitions whose replica set is still the same, and elected.
        :class:`ConflictError` when no demotion of the broker is in effect."""
        snapshot, _ = self._cluster()
        summary: dict[str, Any] = {"broker": order.broker}
        self._refuse_unknown_broker(who, PROMOTE, order, snapshot)
        self._refuse_unfinished_leadership(who, PROMOTE, order, summary)
        demotion = self._demotion_in_effect(order.broker)
        if demotion is None:
            reason = (
                f"broker {order.broker} has no recorded demotion to restore: demote it first "
                "(POST /api/v1/actions/demote-broker), or it was promoted since"
            )
            self.audit(
                who, PROMOTE, dry_run=order.dry_run, outcome="refused", detail={"reason": reason, **summary}
            )
            raise ConflictError(reason)
        try:
            restore_to = restore_record(demotion.plan)
        except JournalError as exc:
            reason = f"demotion {demotion.id} cannot be restored: {exc}"
            self.audit(
                who, PROMOTE, dry_run=order.dry_run, outcome="refused", detail={"reason": reason, **summary}
            )
            raise ConflictError(reason) from None
        plan = restoration_plan(snapshot, order.broker, restore_to)
        summary |= {
            "demotion": demotion.id,
            "reorders": len(plan.reorders),
            "to_elect": len(plan.to_elect),
            "left": len(plan.left),
        }
        return self._leadership(who, PROMOTE, order, LeadershipOutcome(plan, demotion.id), summary)

    def _leadership(
        self,
        who: Requester,
        kind: str,
        order: LeadershipOrder,
        outcome: LeadershipOutcome,
        summary: Mapping[str, Any],
    ) -> LeadershipOutcome:
        if order.dry_run:
            self.audit(who, kind, dry_run=True, outcome="dry-run", detail=summary)
            return outcome
        self._refuse_unfinished_leadership(who, kind, order, summary)
        self._refuse_pending_moves(who, kind, False, summary)
        snapshot, _ = self._cluster()
        if snapshot.pending.preferred_election or self._admin.exists(zkdata.PREFERRED_REPLICA_ELECTION_PATH):
            reason = (
                f"a preferred replica election is already in progress "
                f"({zkdata.PREFERRED_REPLICA_ELECTION_PATH}); try again when it is done"
            )
            self.audit(who, kind, dry_run=False, outcome="refused", detail={"reason": reason, **summary})
            raise ConflictError(reason)
        journal = LeadershipJournal.of(outcome.plan, order.budget_bytes)
        linked = {"demotion": outcome.demotion} if kind == PROMOTE else {"carries_on": outcome.demotion}
        record = self._accept(
            who,
            kind,
            order.as_request(),
            plan={
                "reorders": len(outcome.plan.reorders),
                "to_elect": len(outcome.plan.to_elect),
                **linked,
                **journal.plan_json(),
            },
            summary=summary,
        )
        return replace(outcome, action=record)

    def _refuse_unknown_broker(
        self, who: Requester, kind: str, order: LeadershipOrder | DecommissionOrder, snapshot: ClusterSnapshot
    ) -> None:
        try:
            known_broker(snapshot, order.broker)
        except UnknownBrokerError as exc:
            problem = Problem("unknown_broker", str(exc), brokers=(order.broker,))
            self._refuse_problems(who, kind, order.dry_run, [problem], {"broker": order.broker})

    def _refuse_unfinished_leadership(
        self, who: Requester, kind: str, order: LeadershipOrder, summary: Mapping[str, Any]
    ) -> None:
        """One demotion or promotion at a time (a promotion of a broker whose demotion still runs would
        restore a record not yet complete)."""
        self._refuse_if_unfinished(who, kind, {**summary, "dry_run": order.dry_run}, kinds=LEADERSHIP)

    def _demotion_in_effect(self, broker: int) -> ActionRecord | None:
        """The broker's latest demotion that ran, unless a promotion of the broker succeeded (or partly)
        since: what a promotion restores. Read from the action log (the store: it survives restarts)."""
        offset, page = 0, 500
        while True:
            records = self._actions.records(kinds=LEADERSHIP, limit=page, offset=offset)
            for record in records:
                if record.request.get("broker") != broker or record.state not in TERMINAL:
                    continue
                if record.kind == PROMOTE and record.state in (ActionState.SUCCEEDED, ActionState.PARTIAL):
                    return None
                if record.kind == DEMOTE and record.started_at is not None:
                    return record
            if len(records) < page:
                return None
            offset += page

    # --- decommission ---------------------------------------------------------------------------------

    def decommission(self, who: Requester, order: DecommissionOrder) -> DecommissionOutcome:
        """The dry run (the drain plan as a reassignment, and what will be verified), or the decommission
        started in the background: the drain carried out by the reassignment executor (throttled,
        resumable, cancellable), then verified (:mod:`app.actions.decommission`)."""
        snapshot, _ = self._cluster()
        summary: dict[str, Any] = {
            "broker": order.broker,
            "throttle": order.throttle_bytes_per_sec,
            "max_concurrent_moves": order.max_concurrent_moves,
        }
        self._refuse_unknown_broker(who, DECOMMISSION, order, snapshot)
        load, _ = self._load_input(snapshot)
        try:
            plan = plan_drain(snapshot, order.broker, load)
        except ValueError as exc:
            detail = {**summary, "reason": str(exc)}
            self.audit(who, DECOMMISSION, dry_run=order.dry_run, outcome="refused", detail=detail)
            raise InvalidRequestError(f"broker {order.broker} cannot be drained: {exc}") from None
        items = tuple(plan.requests())
        if items:
            problems = validate_reassignment(snapshot, items, False)
            if problems:
                self._refuse_problems(who, DECOMMISSION, order.dry_run, problems, summary)
        self._refuse_pending_moves(who, DECOMMISSION, order.dry_run, summary)
        reassignment = ReassignmentOrder(
            items,
            throttle_bytes_per_sec=order.throttle_bytes_per_sec,
            max_concurrent_moves=order.max_concurrent_moves,
            dry_run=order.dry_run,
        )
        moving = self._reassignment_outcome(reassignment, snapshot)
        internal = sum(1 for item in items if item.topic.startswith("__"))
        summary |= {"partitions": len(items), "skipped": len(plan.skipped), "internal_partitions": internal}
        outcome = DecommissionOutcome(
            order.broker, moving, plan.skipped, tuple(decommission_checks(order.broker)), internal
        )
        if order.dry_run:
            self.audit(who, DECOMMISSION, dry_run=True, outcome="dry-run", detail=summary)
            return outcome
        self._refuse_if_unfinished(who, DECOMMISSION, summary, kinds=MOVES)
        journal = ReassignmentJournal.of(moving.batches, snapshot, throttle_removal(items, snapshot).brokers)
        record = self._accept(
            who,
            DECOMMISSION,
            order.as_request(),
            plan={
                "broker": order.broker,
                "batches": len(moving.batches),
                "replicas_added": moving.replicas_added,
                "skipped": [
                    {"topic": tp.topic, "partition": tp.partition, "reason": reason}
                    for tp, reason in plan.skipped
                ],
                **journal.plan_json(),
            },
            summary=summary,
        )
        return replace(outcome, action=record)

    # --- the actions -----------------------------------------------------------------------------------

    def action(self, action_id: str) -> ActionRecord:
        record = self._actions.get(action_id)
        if record is None:
            raise NotFoundError(f"no action {action_id!r}")
        return record

    def cancel(self, who: Requester, action_id: str) -> ActionRecord:
        """Stop the action before its next write to ZooKeeper: a PENDING one ends CANCELLED now; a running
        one's executor writes no further chunk or batch, removes its throttles and ends CANCELLED (what is
        already written is the controller's to finish). A compare-and-set: never lost under an executor's
        progress update."""
        for _ in range(20):
            record = self.action(action_id)
            if record.state in TERMINAL:
                self.audit(
                    who,
                    CANCEL,
                    dry_run=False,
                    outcome="refused",
                    action_id=action_id,
                    detail={"state": record.state.value},
                )
                raise ConflictError(
                    str(IllegalTransitionError(action_id, record.state, ActionState.CANCELLED))
                )
            if record.state is ActionState.PENDING:
                wanted = record.moved_to(ActionState.CANCELLED, cancel_requested=True)
            else:
                wanted = replace(record, cancel_requested=True)
            try:
                record = self._actions.update(wanted)
            except StaleRecordError:
                continue  # the executor wrote meanwhile: read it again
            self.audit(who, CANCEL, dry_run=False, outcome="accepted", action_id=action_id)
            self._wake.set()
            return record
        raise ConflictError(f"action {action_id} changes too fast to cancel; try again")

    def rollback(self, who: Requester, action_id: str, order: RollbackOrder) -> ReassignmentOutcome:
        """A reassignment back to the replicas the partitions had before reassignment ``action_id`` began,
        for the partitions it changed: a new action linked to it (``parent``), dry run by default like
        every action, with the same checks."""
        record = self.action(action_id)
        detail: dict[str, Any] = {"rollback_of": action_id}
        if record.kind not in MOVES:
            self.audit(
                who, ROLLBACK, dry_run=order.dry_run, outcome="refused", action_id=action_id, detail=detail
            )
            raise InvalidRequestError(
                f"action {action_id} is a {record.kind}: only a reassignment or a decommission rolls back"
            )
        if record.state not in TERMINAL:
            reason = f"action {action_id} is {record.state.value}: cancel it first, then roll it back"
            self.audit(
                who, ROLLBACK, dry_run=order.dry_run, outcome="refused", action_id=action_id, detail=detail
            )
            raise ConflictError(reason)
        try:
            journal = ReassignmentJournal.from_plan(record.plan)
        except JournalError as exc:
            self.audit(
                who, ROLLBACK, dry_run=order.dry_run, outcome="refused", action_id=action_id, detail=detail
            )
            raise InvalidRequestError(f"action {action_id} cannot be rolled back: {exc}") from None
        snapshot, _ = self._cluster()
        items = rollback_items(journal, snapshot)
        if not items:
            self.audit(
                who, ROLLBACK, dry_run=order.dry_run, outcome="refused", action_id=action_id, detail=detail
            )
            raise InvalidRequestError(
                f"nothing to roll back: every partition of action {action_id} has its original replicas"
            )
        reassignment = ReassignmentOrder(
            items,
            throttle_bytes_per_sec=order.throttle_bytes_per_sec,
            max_concurrent_moves=order.max_concurrent_moves,
            allow_replication_factor_change=True,
            dry_run=order.dry_run,
            parent=action_id,
        )
        return self.reassign(who, reassignment)

    # --- plans -----------------------------------------------------------------------------------------

    def plan_rebalance(self, who: Requester, order: RebalanceOrder) -> PlanOutcome:
        """A reassignment (plus leader moves) bringing every broker's load within the rated deviation."""
        snapshot, _ = self._cluster()
        load, source = self._load_input(snapshot)
        try:
            plan = plan_rebalance(
                snapshot,
                load,
                order.rated_deviation,
                order.exclude_topics,
                order.brokers,
                leader_moves=order.leader_moves,
                goals=order.goals,
                options=order.options,
                disks=self._disks(snapshot),
            )
        except ValueError as exc:
            self.audit(who, PLAN_REBALANCE, dry_run=True, outcome="refused", detail={"reason": str(exc)})
            raise InvalidRequestError(str(exc)) from None
        plan_id = self._plans.keep(plan)
        detail = {"plan_id": plan_id, "replica_moves": plan.replica_moves}
        self.audit(who, PLAN_REBALANCE, dry_run=True, outcome="dry-run", detail=detail)
        return PlanOutcome(plan_id, plan, source, self._sizes(snapshot, [m.tp for m in plan.moves]))

    def plan_drain(self, who: Requester, order: DrainOrder) -> PlanOutcome:
        """Every replica off ``order.broker_id``, spread to keep the load even."""
        snapshot, _ = self._cluster()
        load, source = self._load_input(snapshot)
        broker = order.broker_id
        try:
            plan = plan_drain(
                snapshot,
                broker,
                load,
                order.rated_deviation,
                order.brokers,
                goals=order.goals,
                options=order.options,
                disks=self._disks(snapshot),
            )
        except ValueError as exc:
            detail = {"broker": broker, "reason": str(exc)}
            self.audit(who, PLAN_DRAIN, dry_run=True, outcome="refused", detail=detail)
            raise InvalidRequestError(str(exc)) from None
        plan_id = self._plans.keep(plan)
        self.audit(
            who, PLAN_DRAIN, dry_run=True, outcome="dry-run", detail={"plan_id": plan_id, "broker": broker}
        )
        return PlanOutcome(plan_id, plan, source, self._sizes(snapshot, [m.tp for m in plan.moves]))

    def submit_plan(
        self, who: Requester, plan_id: str, throttle_bytes_per_sec: int | None, max_concurrent_moves: int
    ) -> ReassignmentOutcome:
        """Run a kept plan as a reassignment (the same checks and execution as :meth:`reassign`)."""
        plan = self._plans.get(plan_id)
        if plan is None:
            raise NotFoundError(f"no plan {plan_id!r} (plans are kept for the service's lifetime, last 100)")
        items = tuple(plan.requests())
        if not items:
            raise InvalidRequestError(f"plan {plan_id} moves nothing")
        order = ReassignmentOrder(
            items,
            throttle_bytes_per_sec=throttle_bytes_per_sec,
            max_concurrent_moves=max_concurrent_moves,
            allow_replication_factor_change=False,
            dry_run=False,
        )
        return self.reassign(who, order)

    # --- helpers ---------------------------------------------------------------------------------------

    def _refuse_problems(
        self,
        who: Requester,
        action: str,
        dry_run: bool,
        problems: Sequence[Problem],
        summary: Mapping[str, Any] | None = None,
    ) -> NoReturn:
        """Audited with the first problems and their count (and the request's ``summary``), not all of
        them: an audit row stays small whatever was sent."""
        detail = {
            **(summary or {}),
            "problems": [p.message for p in problems[:AUDIT_LISTED]],
            "problems_total": len(problems),
        }
        self.audit(who, action, dry_run=dry_run, outcome="refused", detail=detail)
        raise InvalidRequestError.of(problems)

    def _refuse_if_unfinished(
        self, who: Requester, kind: str, summary: Mapping[str, Any], kinds: Sequence[str] = ()
    ) -> None:
        """One election and one reassignment (or decommission) at a time, one demotion or promotion: a
        second would wait behind the first's znodes. ``kinds``: the kinds that conflict (else ``kind``)."""
        for record in self._actions.unfinished():
            if record.kind in (kinds or (kind,)):
                reason = (
                    f"action {record.id} ({record.kind}) is {record.state.value}: wait for it to finish, or "
                    f"cancel it (POST /api/v1/actions/{record.id}/cancel)"
                )
                self.audit(who, kind, dry_run=False, outcome="refused", detail={"reason": reason, **summary})
                raise ConflictError(reason)

    def _accept(
        self,
        who: Requester,
        kind: str,
        request: Mapping[str, Any],
        plan: Mapping[str, Any],
        summary: Mapping[str, Any],
        parent: str | None = None,
    ) -> ActionRecord:
        """Record the action, PENDING, with its journal: the leading instance runs it."""
        record = self._actions.create(
            ActionRecord(
                id=new_action_id(),
                kind=kind,
                state=ActionState.PENDING,
                requested_by=who.name,
                requested_at=time.time(),
                request=request,
                plan=plan,
                parent=parent,
            )
        )
        self.audit(who, kind, dry_run=False, outcome="accepted", action_id=record.id, detail=summary)
        self._wake.set()
        return record

    def _sizes(
        self, snapshot: ClusterSnapshot, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The partitions' sizes from the latest scrape of the brokers' metrics (empty without one)."""
        return partition_sizes(snapshot, None if self._scrape is None else self._scrape(), partitions)

    def _disks(self, snapshot: ClusterSnapshot) -> DiskInput | None:
        """The disk figures for the plans' disk goals, from the latest scrape: each broker is as full as its
        fullest log dir (``metrics.log_dir_mountpoints``, else the usual names; Kafka's metrics do not say
        which dir a partition is in, nor which dir a new replica will take, so the plan counts it there),
        and the partitions' sizes; None without a scrape."""
        scrape = None if self._scrape is None else self._scrape()
        if scrape is None:
            return None
        capacity: dict[int, float] = {}
        used: dict[int, float] = {}
        for broker, result in scrape.scrapes.items():
            dirs = log_dir_filesystems(result.filesystems, self._log_dir_mountpoints) if result.ok else {}
            if dirs:
                fullest = max(dirs.values(), key=lambda fs: fs.used_ratio)
                capacity[broker] = fullest.size_bytes
                used[broker] = fullest.used_bytes
        sizes = partition_sizes(snapshot, scrape, snapshot.partitions)
        return DiskInput(capacity_bytes=capacity, used_bytes=used, sizes=sizes)

    def _load_input(self, snapshot: ClusterSnapshot) -> tuple[dict[int, dict[str, float]] | None, str]:
        """The brokers' load for a plan: the latest load window of this cluster (else of any), if any."""
        if self._latest_load is None:
            return None, "replica and leader counts (no store)"
        latest = self._latest_load(snapshot.cluster_id) or self._latest_load(None)
        if latest is None:
            return None, "replica and leader counts (no load window yet)"
        load = {b.broker: dict(b.metrics) for b in latest.brokers}
        return load, f"load window {latest.window.start:.0f}-{latest.window.end:.0f}"
