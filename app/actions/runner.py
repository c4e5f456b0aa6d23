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
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol

from analytics.model import LoadWindow
from app.actions.config import ActionSettings
from app.actions.election import (
    ElectionPlan,
    ElectionScope,
    chunk_payloads,
    plan_preferred_election,
    validate_scope,
)
from app.actions.executor import (
    ElectionExecutor,
    LatestScrape,
    LogSizes,
    ReassignmentExecutor,
)
from app.actions.handle import ActionHandle, Gate, claim
from app.actions.journal import ElectionJournal, JournalError, ReassignmentJournal, items_json, rollback_items
from app.actions.reassignment import (
    Problem,
    ReassignmentRequest,
    ThrottleConfig,
    added_replicas,
    plan_batches,
    throttle_config,
    throttle_removal,
    throttle_warnings,
    validate_reassignment,
)
from app.actions.rebalance import RebalancePlan, plan_drain, plan_rebalance
from app.actions.rebalance.goals import DiskInput, GoalOptions
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
    from app.actions.adaptive import AdaptiveThrottle

log = logging.getLogger(__name__)

ELECTION = "preferred-replica-election"
REASSIGNMENT = "reassignment"
CANCEL = "cancel"
ROLLBACK = "rollback"
PLAN_REBALANCE = "plan-rebalance"
PLAN_DRAIN = "plan-drain"

PLANS_KEPT = 100
"""Rebalance and drain plans kept for submission (the oldest go first)."""
DEFAULT_WORKERS = ActionSettings().workers
"""Actions executing at once; more wait, PENDING, for a worker (the settings' default)."""
PROBLEMS_IN_MESSAGE = 5
"""Problems an :class:`InvalidRequestError`'s one-line message names; it counts the others."""
DEFAULT_BUDGET_BYTES = 512 * 1024
"""An election chunk's payload budget (ZooKeeper's default ``jute.maxbuffer`` is 1 MiB)."""


# --- who asks, what goes wrong ---------------------------------------------------------------------------


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Requester(Protocol):
    """Who asks (the service's authenticated principal): a name and a role, both written to the audit."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> _Named: ...


class ActionError(Exception):
    """A request the runner refuses; the message says why (the service's ``detail``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFoundError(ActionError):
    """No such action or plan."""


class ConflictError(ActionError):
    """The request cannot run now: another election or reassignment is pending, or the action is over."""


class InvalidRequestError(ActionError):
    """The request is wrong; ``problems`` names each problem when there are several to name."""

    def __init__(self, message: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)

    @classmethod
    def of(cls, problems: Sequence[Problem]) -> InvalidRequestError:
        """The message names the first :data:`PROBLEMS_IN_MESSAGE` problems and counts the rest (the
        service lists the first 100 in its body, and counts them all)."""
        message = "; ".join(p.message for p in problems[:PROBLEMS_IN_MESSAGE])
        if len(problems) > PROBLEMS_IN_MESSAGE:
            message += f"; and {len(problems) - PROBLEMS_IN_MESSAGE:,} more ({len(problems):,} problems)"
        return cls("invalid request: " + message, problems)


# --- orders and outcomes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElectionOrder:
    """A preferred replica election as asked for (checked by the runner, not here)."""

    scope: Literal["all", "topics", "partitions"] = "all"
    topics: tuple[str, ...] = ()
    partitions: tuple[TopicPartition, ...] = ()
    dry_run: bool = True
    budget_bytes: int = DEFAULT_BUDGET_BYTES

    def election_scope(self) -> ElectionScope:
        """ValueError when the scope and the lists given do not go together."""
        if self.scope == "topics":
            return ElectionScope.of_topics(self.topics)
        if self.scope == "partitions":
            return ElectionScope.of_partitions(self.partitions)
        return ElectionScope.all_partitions()

    def as_request(self) -> dict[str, Any]:
        """The request as recorded with the action."""
        return {
            "scope": self.scope,
            "topics": list(self.topics),
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in self.partitions],
            "dry_run": self.dry_run,
            "budget_bytes": self.budget_bytes,
        }


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    plan: ElectionPlan
    chunks: int
    """Payloads the election is written in (0 when there is nothing to elect)."""
    action: ActionRecord | None = None
    """The execution started (PENDING when returned); None for a dry run."""

    @property
    def predicted_leaders(self) -> dict[str, int]:
        return {str(b): n for b, n in sorted(self.plan.predicted_leaders.items())}


@dataclass(frozen=True, slots=True)
class ReassignmentOrder:
    """A reassignment as asked for (checked by the runner, not here)."""

    items: tuple[ReassignmentRequest, ...]
    throttle_bytes_per_sec: int | None = None
    """Replication throttle while it runs (set before, always removed after); None: no throttle."""
    max_concurrent_moves: int = 10
    """Replicas added per batch: a batch is written only when the previous one completed."""
    allow_replication_factor_change: bool = False
    dry_run: bool = True
    adaptive: AdaptiveThrottle | None = None
    """An adaptive throttle instead of the static one (starts at its minimum)."""
    parent: str | None = None
    """The action this one rolls back."""

    def as_request(self) -> dict[str, Any]:
        """The request as recorded with the action."""
        request: dict[str, Any] = {
            "partitions": items_json(self.items),
            "throttle_bytes_per_sec": self.throttle_bytes_per_sec,
            "max_concurrent_moves": self.max_concurrent_moves,
            "allow_replication_factor_change": self.allow_replication_factor_change,
            "dry_run": self.dry_run,
        }
        if self.adaptive is not None:
            request["throttle"] = {"mode": "adaptive", **self.adaptive.model_dump()}
        if self.parent is not None:
            request["rollback_of"] = self.parent
        return request

    @property
    def initial_rate(self) -> int | None:
        return self.adaptive.min_bytes_per_s if self.adaptive is not None else self.throttle_bytes_per_sec


@dataclass(frozen=True, slots=True)
class ReassignmentOutcome:
    order: ReassignmentOrder
    batches: list[list[ReassignmentRequest]]
    throttles: ThrottleConfig | None
    replicas_added: int
    action: ActionRecord | None = None
    """The execution started (PENDING when returned); None for a dry run."""
    warnings: tuple[str, ...] = ()
    """What the dry run found risky but not wrong (a throttle below the moving partitions' produce rate)."""
    bytes_to_copy: int | None = None
    """Bytes the added replicas copy, from the brokers' log sizes (:mod:`app.actions.sizes`); None when
    some moving partition's size is not known."""
    moves_with_unknown_size: int = 0
    estimated_s: float | None = None
    """How long the copies take at the throttle (the adaptive one's maximum), from ``sizes``
    (:func:`~app.actions.sizes.copy_seconds`); None without a throttle or a size."""


@dataclass(frozen=True, slots=True)
class RollbackOrder:
    """A rollback as asked for: the reassignment back, with its own throttle and batch size."""

    throttle_bytes_per_sec: int | None = None
    max_concurrent_moves: int = 10
    dry_run: bool = True


@dataclass(frozen=True, slots=True)
class RebalanceOrder:
    exclude_topics: tuple[str, ...] = ()
    rated_deviation: float = 0.10
    brokers: tuple[int, ...] | None = None
    """Brokers replicas and leadership may move between (None: every registered broker)."""
    leader_moves: bool = True
    goals: tuple[str, ...] | None = None
    """The goals in priority order (None: the default goals, :mod:`app.actions.rebalance.goals`)."""
    options: GoalOptions = field(default_factory=GoalOptions)


@dataclass(frozen=True, slots=True)
class DrainOrder:
    broker_id: int
    brokers: tuple[int, ...] | None = None
    rated_deviation: float = 0.10
    goals: tuple[str, ...] | None = None
    options: GoalOptions = field(default_factory=GoalOptions)


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    id: str
    """What to submit it by (``/plans/{id}/submit``)."""
    plan: RebalancePlan
    load_source: str
    """``load window <start>-<end>`` from the store, or ``replica and leader counts`` when none."""
    sizes: Mapping[TopicPartition, int] = field(default_factory=dict)
    """The moving partitions' sizes in bytes, from the brokers' log sizes (:mod:`app.actions.sizes`);
    a partition whose size is not known is absent."""


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
        batches = plan_batches(items, snapshot, order.max_concurrent_moves)
        rate = order.initial_rate
        sizes = self._sizes(snapshot, [item.tp for item in items])
        fastest = order.adaptive.max_bytes_per_s if order.adaptive is not None else rate
        copies = [
            copy_bytes(sizes.get(item.tp), len(added))
            for item in items
            if (added := added_replicas(item, snapshot))
        ]
        unknown = sum(c is None for c in copies)
        outcome = ReassignmentOutcome(
            order,
            batches,
            None if rate is None else throttle_config(items, snapshot, rate),
            sum(len(added_replicas(item, snapshot)) for item in items),
            warnings=tuple(self._throttle_warnings(order, snapshot, batches)),
            bytes_to_copy=None if unknown else sum(c or 0 for c in copies),
            moves_with_unknown_size=unknown,
            estimated_s=copy_seconds(batches, snapshot, sizes, fastest),
        )
        if order.dry_run:
            self.audit(who, REASSIGNMENT, dry_run=True, outcome="dry-run", detail=summary)
            return outcome
        self._refuse_if_unfinished(who, REASSIGNMENT, summary)
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
        if record.kind != REASSIGNMENT:
            self.audit(
                who, ROLLBACK, dry_run=order.dry_run, outcome="refused", action_id=action_id, detail=detail
            )
            raise InvalidRequestError(
                f"action {action_id} is a {record.kind}: only a reassignment rolls back"
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

    def _refuse_if_unfinished(self, who: Requester, kind: str, summary: Mapping[str, Any]) -> None:
        """One election and one reassignment at a time: a second would wait behind the first's znodes."""
        for record in self._actions.unfinished():
            if record.kind == kind:
                reason = (
                    f"action {record.id} ({kind}) is {record.state.value}: wait for it to finish, or cancel "
                    f"it (POST /api/v1/actions/{record.id}/cancel)"
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
