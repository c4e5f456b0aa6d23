"""What the action runner (:mod:`app.actions.runner`) is asked and answers: who asks (:class:`Requester`),
the errors a request is refused with (each maps to an HTTP status in the service), and each action's order
(the request, validated) and outcome (the plan, and the action started unless it was a dry run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from app.actions.election import (
    ElectionPlan,
    ElectionScope,
)
from app.actions.journal import items_json
from app.actions.leadership import (
    LeadershipPlan,
)
from app.actions.reassignment import (
    Problem,
    ReassignmentRequest,
    ThrottleConfig,
)
from app.actions.rebalance import RebalancePlan
from app.actions.rebalance.goals import GoalOptions
from app.actions.state import (
    ActionRecord,
)
from collectors.kafka.model import TopicPartition

if TYPE_CHECKING:
    from app.actions.adaptive import AdaptiveThrottle

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


@dataclass(frozen=True, slots=True)
class LeadershipOrder:
    """A demotion or promotion of a broker as asked for (checked by the runner)."""

    broker: int
    dry_run: bool = True
    budget_bytes: int = DEFAULT_BUDGET_BYTES

    def as_request(self) -> dict[str, Any]:
        return {"broker": self.broker, "dry_run": self.dry_run, "budget_bytes": self.budget_bytes}


@dataclass(frozen=True, slots=True)
class LeadershipOutcome:
    plan: LeadershipPlan
    demotion: str | None = None
    """A promotion: the demotion whose recorded replica lists it restores. A demotion: an earlier demotion
    of the broker still in effect, whose record this one carries on."""
    action: ActionRecord | None = None


@dataclass(frozen=True, slots=True)
class DecommissionOrder:
    """A decommission as asked for: the drain plan of ``broker``, run as a reassignment, then verified."""

    broker: int
    throttle_bytes_per_sec: int | None = None
    max_concurrent_moves: int = 10
    dry_run: bool = True

    def as_request(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "throttle_bytes_per_sec": self.throttle_bytes_per_sec,
            "max_concurrent_moves": self.max_concurrent_moves,
            "dry_run": self.dry_run,
        }


@dataclass(frozen=True, slots=True)
class DecommissionOutcome:
    broker: int
    reassignment: ReassignmentOutcome
    """The drain plan as a reassignment (its batches, throttles, sizes); its ``action`` is None."""
    skipped: tuple[tuple[TopicPartition, str], ...]
    """Partitions of the broker the drain plan leaves, with the reason: the verification will find them."""
    checks: tuple[str, ...]
    """What is verified once the drain is done."""
    internal_partitions: int
    """Moving partitions of internal topics (``__consumer_offsets``, ``__transaction_state``)."""
    action: ActionRecord | None = None
