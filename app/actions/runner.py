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

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NoReturn, Protocol

from analytics.model import LoadWindow
from app.actions.election import (
    ElectionPlan,
    ElectionScope,
    chunk_payloads,
    plan_preferred_election,
    validate_scope,
)
from app.actions.executor import ElectionExecutor, ReassignmentExecutor
from app.actions.reassignment import (
    Problem,
    ReassignmentRequest,
    ThrottleConfig,
    added_replicas,
    plan_batches,
    throttle_config,
    validate_reassignment,
)
from app.actions.rebalance import RebalancePlan, plan_drain, plan_rebalance
from app.actions.state import (
    TERMINAL,
    ActionLog,
    ActionRecord,
    ActionState,
    AuditEntry,
    IllegalTransitionError,
    new_action_id,
)
from collectors.health import HealthReport
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper
from collectors.kafka.model import ClusterSnapshot, TopicPartition

log = logging.getLogger(__name__)

ELECTION = "preferred-replica-election"
REASSIGNMENT = "reassignment"
CANCEL = "cancel"
PLAN_REBALANCE = "plan-rebalance"
PLAN_DRAIN = "plan-drain"

PLANS_KEPT = 100
"""Rebalance and drain plans kept for submission (the oldest go first)."""
DEFAULT_WORKERS = 4
"""Actions executing at once; more wait, PENDING, for a worker."""
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
        return cls("invalid request: " + "; ".join(p.message for p in problems), problems)


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

    def as_request(self) -> dict[str, Any]:
        """The request as recorded with the action."""
        return {
            "partitions": [
                {"topic": i.topic, "partition": i.partition, "replicas": list(i.replicas)} for i in self.items
            ],
            "throttle_bytes_per_sec": self.throttle_bytes_per_sec,
            "max_concurrent_moves": self.max_concurrent_moves,
            "allow_replication_factor_change": self.allow_replication_factor_change,
            "dry_run": self.dry_run,
        }


@dataclass(frozen=True, slots=True)
class ReassignmentOutcome:
    order: ReassignmentOrder
    batches: list[list[ReassignmentRequest]]
    throttles: ThrottleConfig | None
    replicas_added: int
    action: ActionRecord | None = None
    """The execution started (PENDING when returned); None for a dry run."""


@dataclass(frozen=True, slots=True)
class RebalanceOrder:
    exclude_topics: tuple[str, ...] = ()
    rated_deviation: float = 0.10
    brokers: tuple[int, ...] | None = None
    """Brokers replicas and leadership may go to (None: every registered broker)."""
    leader_moves: bool = True


@dataclass(frozen=True, slots=True)
class DrainOrder:
    broker_id: int
    brokers: tuple[int, ...] | None = None
    rated_deviation: float = 0.10


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    id: str
    """What to submit it by (``/plans/{id}/submit``)."""
    plan: RebalancePlan
    load_source: str
    """``load window <start>-<end>`` from the store, or ``replica and leader counts`` when none."""


# --- the pool --------------------------------------------------------------------------------------------


class ActionPool:
    """At most ``workers`` actions execute at once, the others wait in order.

    The workers are daemon threads, started as work arrives: stopping the service never waits for an
    action (a reassignment can take hours). What a stopped action wrote to ZooKeeper is the controller's to
    finish, and the next start marks the action FAILED (:func:`interrupted`), as for queued work dropped at
    :meth:`shutdown`.
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
    analytics store for plans (None without a store: plans then balance replica and leader counts)."""

    def __init__(
        self,
        actions: ActionLog,
        admin: AdminZooKeeper,
        cluster: ClusterReader,
        *,
        latest_load: LatestLoad | None = None,
        pool: ActionPool | None = None,
        plans_kept: int = PLANS_KEPT,
    ) -> None:
        self._actions = actions
        self._admin = admin
        self._cluster = cluster
        self._latest_load = latest_load
        self._pool = pool or ActionPool()
        self._plans = _Plans(plans_kept)

    def shutdown(self) -> None:
        self._pool.shutdown()

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
            self._refuse_problems(who, ELECTION, order.dry_run, problems)
        plan = plan_preferred_election(snapshot, scope)
        chunks = len(chunk_payloads(plan.to_elect, order.budget_bytes)) if plan.to_elect else 0
        summary = {"scope": order.scope, "to_elect": len(plan.to_elect), "ineligible": len(plan.ineligible)}
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
        record = self._accept(
            who,
            ELECTION,
            order.as_request(),
            plan={**summary, "chunks": chunks, "predicted_leaders": outcome.predicted_leaders},
            summary=summary,
        )
        executor = ElectionExecutor(
            self._admin, lambda: self._cluster()[0], self._actions, budget_bytes=order.budget_bytes
        )
        self._pool.submit(lambda: executor.run(record, plan.to_elect))
        return replace(outcome, action=record)

    # --- reassignment ----------------------------------------------------------------------------------

    def reassign(self, who: Requester, order: ReassignmentOrder) -> ReassignmentOutcome:
        """The dry run (batches and throttles), or the reassignment started in the background."""
        snapshot, _ = self._cluster()
        items = order.items
        problems = validate_reassignment(snapshot, items, order.allow_replication_factor_change)
        summary = {"partitions": len(items), "throttle": order.throttle_bytes_per_sec}
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
            self._refuse_problems(who, REASSIGNMENT, order.dry_run, problems)
        batches = plan_batches(items, snapshot, order.max_concurrent_moves)
        rate = order.throttle_bytes_per_sec
        outcome = ReassignmentOutcome(
            order,
            batches,
            None if rate is None else throttle_config(items, snapshot, rate),
            sum(len(added_replicas(item, snapshot)) for item in items),
        )
        if order.dry_run:
            self.audit(who, REASSIGNMENT, dry_run=True, outcome="dry-run", detail=summary)
            return outcome
        record = self._accept(
            who,
            REASSIGNMENT,
            order.as_request(),
            plan={"batches": len(batches), "replicas_added": outcome.replicas_added},
            summary=summary,
        )
        executor = ReassignmentExecutor(self._admin, self._cluster, self._actions)
        self._pool.submit(lambda: executor.run(record, items, rate, order.max_concurrent_moves))
        return replace(outcome, action=record)

    # --- the actions -----------------------------------------------------------------------------------

    def action(self, action_id: str) -> ActionRecord:
        record = self._actions.get(action_id)
        if record is None:
            raise NotFoundError(f"no action {action_id!r}")
        return record

    def cancel(self, who: Requester, action_id: str) -> ActionRecord:
        """Stop further chunks or batches; what is already written to ZooKeeper is left to the controller."""
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
            raise ConflictError(str(IllegalTransitionError(action_id, record.state, ActionState.CANCELLED)))
        if record.state is ActionState.PENDING:
            record = record.moved_to(ActionState.CANCELLED, cancel_requested=True)
        else:
            record = replace(record, cancel_requested=True)
        self._actions.save(record)
        self.audit(who, CANCEL, dry_run=False, outcome="accepted", action_id=action_id)
        return record

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
            )
        except ValueError as exc:
            self.audit(who, PLAN_REBALANCE, dry_run=True, outcome="refused", detail={"reason": str(exc)})
            raise InvalidRequestError(str(exc)) from None
        plan_id = self._plans.keep(plan)
        detail = {"plan_id": plan_id, "replica_moves": plan.replica_moves}
        self.audit(who, PLAN_REBALANCE, dry_run=True, outcome="dry-run", detail=detail)
        return PlanOutcome(plan_id, plan, source)

    def plan_drain(self, who: Requester, order: DrainOrder) -> PlanOutcome:
        """Every replica off ``order.broker_id``, spread to keep the load even."""
        snapshot, _ = self._cluster()
        load, source = self._load_input(snapshot)
        broker = order.broker_id
        try:
            plan = plan_drain(snapshot, broker, load, order.rated_deviation, order.brokers)
        except ValueError as exc:
            detail = {"broker": broker, "reason": str(exc)}
            self.audit(who, PLAN_DRAIN, dry_run=True, outcome="refused", detail=detail)
            raise InvalidRequestError(str(exc)) from None
        plan_id = self._plans.keep(plan)
        self.audit(
            who, PLAN_DRAIN, dry_run=True, outcome="dry-run", detail={"plan_id": plan_id, "broker": broker}
        )
        return PlanOutcome(plan_id, plan, source)

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
        self, who: Requester, action: str, dry_run: bool, problems: Sequence[Problem]
    ) -> NoReturn:
        detail = {"problems": [p.message for p in problems]}
        self.audit(who, action, dry_run=dry_run, outcome="refused", detail=detail)
        raise InvalidRequestError.of(problems)

    def _accept(
        self,
        who: Requester,
        kind: str,
        request: Mapping[str, Any],
        plan: Mapping[str, Any],
        summary: Mapping[str, Any],
    ) -> ActionRecord:
        record = ActionRecord(
            id=new_action_id(),
            kind=kind,
            state=ActionState.PENDING,
            requested_by=who.name,
            requested_at=time.time(),
            request=request,
            plan=plan,
        )
        self._actions.save(record)
        self.audit(who, kind, dry_run=False, outcome="accepted", action_id=record.id, detail=summary)
        return record

    def _load_input(self, snapshot: ClusterSnapshot) -> tuple[dict[int, dict[str, float]] | None, str]:
        """The brokers' load for a plan: the latest load window of this cluster (else of any), if any."""
        if self._latest_load is None:
            return None, "replica and leader counts (no store)"
        latest = self._latest_load(snapshot.cluster_id) or self._latest_load(None)
        if latest is None:
            return None, "replica and leader counts (no load window yet)"
        load = {b.broker: dict(b.metrics) for b in latest.brokers}
        return load, f"load window {latest.window.start:.0f}-{latest.window.end:.0f}"


def interrupted(actions: ActionLog) -> None:
    """Actions a previous run of the service left PENDING or RUNNING: no thread runs them any more, so they
    are FAILED with the reason (what they wrote to ZooKeeper is left to the controller, as on a cancel)."""
    for state in (ActionState.PENDING, ActionState.RUNNING):
        for record in actions.records(state=state.value, limit=10_000):
            actions.save(
                record.moved_to(
                    ActionState.FAILED,
                    error="interrupted: the service stopped while the action ran; check its partitions",
                )
            )
