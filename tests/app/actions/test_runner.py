"""The action runner without HTTP: its refusals (invalid, conflict, not found) and their audit entries, the
records it writes, executions on its bounded pool, and the plan cache. ZooKeeper is a small fake behind
:class:`~app.actions.executor.AdminZooKeeper` whose "controller" elects every partition's preferred replica
as soon as an election is written; the log is the in-memory one."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest
from kazoo.exceptions import NodeExistsError

from analytics.model import BrokerLoad, LoadWindow, Window
from app.actions.orders import (
    ConflictError,
    DecommissionOrder,
    DrainOrder,
    ElectionOrder,
    InvalidRequestError,
    LeadershipOrder,
    NotFoundError,
    ReassignmentOrder,
    RebalanceOrder,
)
from app.actions.reassignment import ReassignmentRequest
from app.actions.runner import ActionPool, ActionRunner
from app.actions.state import ActionRecord, ActionState, AuditEntry, MemoryActionLog, request_digest
from collectors.health import HealthReport, assess
from collectors.kafka import zkdata
from collectors.kafka.model import ClusterSnapshot, PendingOperations, ReplicaAssignment, TopicPartition
from tests.support import snapshots

pytestmark = pytest.mark.unit

ORDERS_0 = TopicPartition("orders", 0)


@dataclass(frozen=True)
class Role:
    name: str


@dataclass(frozen=True)
class Who:
    """The requester, as the service's principal reads: a name and a role with a name."""

    name: str = "oncall"
    role: Role = Role("operator")


@dataclass
class Cluster:
    """The snapshot the runner reads, and a controller stand-in: it elects every partition's preferred
    replica, or completes a reassignment, at once (the leader is then the first replica)."""

    snapshot: ClusterSnapshot

    def read(self) -> tuple[ClusterSnapshot, HealthReport]:
        return self.snapshot, assess(self.snapshot)

    def take(self, path: str, data: bytes) -> None:
        targets: dict[TopicPartition, tuple[int, ...]] = {}
        if path == zkdata.REASSIGN_PARTITIONS_PATH:
            targets = zkdata.decode_reassignment(path, data)
        partitions = [
            snapshots.partition(tp.topic, tp.partition, targets.get(tp, info.assignment.replicas))
            for tp, info in self.snapshot.partitions.items()
        ]
        version = self.snapshot.version + 1
        self.snapshot = snapshots.cluster(*partitions, brokers=self.snapshot.brokers, version=version)


@dataclass
class FakeAdmin:
    """ZooKeeper's admin znodes and configs; an election or reassignment written is taken (deleted) at once
    by ``cluster``'s controller; ``znodes`` are someone else's, never taken."""

    cluster: Cluster
    znodes: dict[str, bytes] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)

    def exists(self, path: str) -> bool:
        return path in self.znodes

    def read(self, path: str) -> bytes | None:
        return self.znodes.get(path)

    def create(self, path: str, data: bytes) -> None:
        if path in self.znodes:
            raise NodeExistsError()
        self.written.append(path)
        self.cluster.take(path, data)

    def wait_deleted(self, path: str, timeout_s: float) -> bool:
        return path not in self.znodes

    def get_config(self, entity_type: str, entity: str) -> dict[str, str]:
        return {}

    def set_config(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        self.written.append(f"config {entity_type}/{entity}")


@dataclass
class Runner:
    runner: ActionRunner
    log: MemoryActionLog
    admin: FakeAdmin
    cluster: Cluster

    def audit(self) -> list[AuditEntry]:
        return self.log.audit_entries()


def make_runner(
    snapshot: ClusterSnapshot | None = None,
    latest_load: Callable[[str | None], LoadWindow | None] | None = None,
    plans_kept: int = 100,
) -> Runner:
    cluster = Cluster(snapshot or not_preferred())
    log = MemoryActionLog()
    admin = FakeAdmin(cluster)
    runner = ActionRunner(log, admin, cluster.read, latest_load=latest_load, plans_kept=plans_kept)
    runner.start()
    return Runner(runner, log, admin, cluster)


def not_preferred(**options: object) -> ClusterSnapshot:
    """``orders`` 0-1 on brokers 1-3, partition 0 led by broker 2 instead of its preferred replica 1."""
    return snapshots.cluster(
        snapshots.partition("orders", 0, (1, 2, 3), leader=2),
        snapshots.partition("orders", 1, (2, 3, 1)),
        **options,  # type: ignore[arg-type]
    )


def wait_until_done(log: MemoryActionLog, action_id: str) -> ActionRecord:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        record = log.get(action_id)
        if record is not None and record.state not in (ActionState.PENDING, ActionState.RUNNING):
            return record
        time.sleep(0.02)
    raise AssertionError(f"action {action_id} still running: {log.get(action_id)}")


# --- election --------------------------------------------------------------------------------------------


def test_a_dry_run_is_audited_and_writes_nothing() -> None:
    r = make_runner()
    outcome = r.runner.elect_preferred_leaders(Who(), ElectionOrder())
    assert outcome.action is None
    assert outcome.plan.to_elect == (ORDERS_0,)
    assert (outcome.chunks, outcome.predicted_leaders) == (1, {"1": 1, "2": 1, "3": 0})
    (entry,) = r.audit()
    assert (entry.who, entry.role, entry.action, entry.dry_run, entry.outcome, entry.action_id) == (
        "oncall",
        "operator",
        "preferred-replica-election",
        True,
        "dry-run",
        None,
    )
    digest = request_digest(ElectionOrder().as_request())
    assert entry.detail == {"scope": "all", "to_elect": 1, "ineligible": 1, "request_sha256": digest}
    assert r.admin.written == []
    assert r.log.records() == []


def test_an_election_is_recorded_audited_and_run_in_the_background() -> None:
    r = make_runner()
    order = ElectionOrder(scope="topics", topics=("orders",), dry_run=False, budget_bytes=2048)
    outcome = r.runner.elect_preferred_leaders(Who(), order)
    assert outcome.action is not None
    assert outcome.action.state is ActionState.PENDING
    assert outcome.action.request == {
        "scope": "topics",
        "topics": ["orders"],
        "partitions": [],
        "dry_run": False,
        "budget_bytes": 2048,
    }
    assert outcome.action.plan == {
        "scope": "topics",
        "to_elect": 1,
        "ineligible": 1,
        "chunks": 1,
        "predicted_leaders": {"1": 1, "2": 1, "3": 0},
        "to_elect_partitions": [["orders", 0]],
        "budget_bytes": 2048,
    }
    (entry,) = r.audit()
    assert (entry.outcome, entry.dry_run, entry.action_id) == ("accepted", False, outcome.action.id)
    digest = request_digest(order.as_request())
    assert entry.detail == {"scope": "topics", "to_elect": 1, "ineligible": 1, "request_sha256": digest}
    done = wait_until_done(r.log, outcome.action.id)
    assert done.state is ActionState.SUCCEEDED, done
    assert done.result["elected"] == 1
    assert r.admin.written == [zkdata.PREFERRED_REPLICA_ELECTION_PATH]
    r.runner.shutdown()


@pytest.mark.parametrize("where", ["znode", "snapshot"])
def test_someone_elses_election_is_a_conflict(where: str) -> None:
    if where == "znode":
        r = make_runner()
        r.admin.znodes[zkdata.PREFERRED_REPLICA_ELECTION_PATH] = b"{}"
    else:
        r = make_runner(not_preferred(pending=PendingOperations(preferred_election=(ORDERS_0,))))
    with pytest.raises(ConflictError, match="that this service did not start") as refused:
        r.runner.elect_preferred_leaders(Who(), ElectionOrder(dry_run=False))
    (entry,) = r.audit()
    assert (entry.outcome, entry.dry_run) == ("refused", False)
    assert entry.detail["reason"] == refused.value.message
    assert r.log.records() == []
    assert r.admin.written == []


def test_an_invalid_scope_names_every_problem() -> None:
    r = make_runner()
    order = ElectionOrder(scope="topics", topics=("nope", "orders", "nope"), dry_run=False)
    with pytest.raises(InvalidRequestError) as refused:
        r.runner.elect_preferred_leaders(Who(), order)
    problems = refused.value.problems
    assert len(problems) >= 2
    assert refused.value.message == "invalid request: " + "; ".join(p.message for p in problems)
    assert "nope" in refused.value.message
    (entry,) = r.audit()
    assert (entry.outcome, entry.detail) == (
        "refused",
        {
            "scope": "topics",
            "request_sha256": request_digest(order.as_request()),
            "problems": [p.message for p in problems],
            "problems_total": len(problems),
        },
    )


# --- reassignment ----------------------------------------------------------------------------------------


def test_a_reassignment_dry_run_has_batches_and_throttles() -> None:
    r = make_runner(not_preferred(brokers=(1, 2, 3, 4)))
    items = (ReassignmentRequest("orders", 0, (1, 2, 4)), ReassignmentRequest("orders", 1, (2, 4, 1)))
    order = ReassignmentOrder(items, throttle_bytes_per_sec=1000, max_concurrent_moves=1)
    outcome = r.runner.reassign(Who(), order)
    assert outcome.action is None
    assert outcome.replicas_added == 2
    assert [len(batch) for batch in outcome.batches] == [1, 1]
    assert outcome.throttles is not None
    assert set(outcome.throttles.broker_configs) == {1, 2, 3, 4}
    (entry,) = r.audit()
    assert (entry.action, entry.outcome, entry.detail) == (
        "reassignment",
        "dry-run",
        {"partitions": 2, "throttle": 1000, "request_sha256": request_digest(order.as_request())},
    )


def test_a_reassignment_in_progress_is_refused_before_the_request_is_validated() -> None:
    r = make_runner()
    r.admin.znodes[zkdata.REASSIGN_PARTITIONS_PATH] = b"{}"
    invalid = ReassignmentOrder((ReassignmentRequest("nope", 0, (1, 2, 3)),))
    with pytest.raises(ConflictError, match="a reassignment is already in progress"):
        r.runner.reassign(Who(), invalid)
    (entry,) = r.audit()
    assert entry.outcome == "refused"
    assert (entry.detail["partitions"], entry.detail["throttle"]) == (1, None)


def test_an_executed_reassignment_is_recorded_and_runs_in_the_background() -> None:
    r = make_runner(not_preferred(brokers=(1, 2, 3, 4)))
    items = (ReassignmentRequest("orders", 0, (1, 2, 4)),)
    outcome = r.runner.reassign(Who(), ReassignmentOrder(items, dry_run=False))
    assert outcome.action is not None
    assert outcome.action.request == {
        "partitions": [{"topic": "orders", "partition": 0, "replicas": [1, 2, 4]}],
        "throttle_bytes_per_sec": None,
        "max_concurrent_moves": 10,
        "allow_replication_factor_change": False,
        "dry_run": False,
    }
    assert outcome.action.plan == {
        "batches": 1,
        "replicas_added": 1,
        "batch_plan": [[{"topic": "orders", "partition": 0, "replicas": [1, 2, 4]}]],
        "original": [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3]}],
        "throttles": {"brokers": [1, 2, 3, 4], "topics": ["orders"]},
    }
    assert [(e.outcome, e.action_id) for e in r.audit()] == [("accepted", outcome.action.id)]
    done = wait_until_done(r.log, outcome.action.id)
    assert done.state is ActionState.SUCCEEDED, done
    assert r.cluster.snapshot.partitions[ORDERS_0].assignment.replicas == (1, 2, 4)
    r.runner.shutdown()


@pytest.mark.parametrize(("in_zookeeper", "state"), [((1, 2, 4), "SUCCEEDED"), ((1, 2, 3), "FAILED")])
def test_a_move_the_snapshot_never_showed_is_judged_by_zookeeper_itself(
    in_zookeeper: tuple[int, ...], state: str
) -> None:
    """A controller that completes a batch within milliseconds deletes the admin znode before the collector's
    snapshot shows the move at all: the verdict on what that stale snapshot calls failed is the topic
    znode's, as Kafka's --verify reads it."""
    r = make_runner(not_preferred(brokers=(1, 2, 3, 4)))
    r.cluster.take = lambda path, data: None  # type: ignore[method-assign]  # the snapshot never moves
    topic = {0: ReplicaAssignment(in_zookeeper), 1: ReplicaAssignment((2, 3, 1))}
    r.admin.znodes[zkdata.topic_path("orders")] = zkdata.encode_topic(topic)
    items = (ReassignmentRequest("orders", 0, (1, 2, 4)),)
    outcome = r.runner.reassign(Who(), ReassignmentOrder(items, dry_run=False))
    assert outcome.action is not None
    done = wait_until_done(r.log, outcome.action.id)
    assert done.state is ActionState[state], done
    assert done.result is not None
    assert done.result["completed"] == (1 if state == "SUCCEEDED" else 0)
    r.runner.shutdown()


# --- the actions -----------------------------------------------------------------------------------------


def test_cancel() -> None:
    r = make_runner()
    with pytest.raises(NotFoundError, match="no action 'nope'"):
        r.runner.cancel(Who(), "nope")
    r.runner.shutdown()  # nothing executes: the cancel of a PENDING action is the runner's alone
    r.log.create(ActionRecord("a1", "reassignment", ActionState.PENDING, "oncall", 1.0, {}))
    cancelled = r.runner.cancel(Who(), "a1")
    assert (cancelled.state, cancelled.cancel_requested) == (ActionState.CANCELLED, True)
    assert r.log.get("a1") == cancelled
    with pytest.raises(ConflictError, match="cannot become CANCELLED"):
        r.runner.cancel(Who(), "a1")
    refused, accepted = r.audit()
    assert (accepted.action, accepted.outcome, accepted.action_id, accepted.detail) == (
        "cancel",
        "accepted",
        "a1",
        {},
    )
    assert (refused.outcome, refused.action_id, refused.detail) == ("refused", "a1", {"state": "CANCELLED"})


# --- plans -----------------------------------------------------------------------------------------------


def test_plans_are_kept_for_submission_the_oldest_dropped_first() -> None:
    r = make_runner(plans_kept=2)
    order = RebalanceOrder(rated_deviation=0.5, leader_moves=False)
    first, second, third = (r.runner.plan_rebalance(Who(), order) for _ in range(3))
    assert first.load_source == "replica and leader counts (no store)"
    with pytest.raises(NotFoundError, match=f"no plan '{first.id}'"):
        r.runner.submit_plan(Who(), first.id, None, 10)
    assert third.plan.replica_moves == 0
    with pytest.raises(InvalidRequestError, match=f"plan {third.id} moves nothing"):
        r.runner.submit_plan(Who(), third.id, None, 10)
    entries = r.audit()
    assert [(e.action, e.outcome) for e in entries] == [("plan-rebalance", "dry-run")] * 3
    assert entries[0].detail == {"plan_id": third.id, "replica_moves": 0}
    assert second.id not in (first.id, third.id)


def test_a_plan_that_cannot_be_made_is_refused() -> None:
    r = make_runner()
    with pytest.raises(InvalidRequestError, match="not registered"):
        r.runner.plan_drain(Who(), DrainOrder(42))
    (entry,) = r.audit()
    assert (entry.action, entry.outcome, entry.dry_run, entry.detail["broker"]) == (
        "plan-drain",
        "refused",
        True,
        42,
    )


def test_plans_use_the_latest_load_of_this_cluster_else_of_any() -> None:
    asked: list[str | None] = []
    window = Window("other", 100.0, 160.0)
    load = LoadWindow(
        window,
        tuple(
            BrokerLoad(b, {"partitions": 1.0}, {"partitions": 1 / 3}, 1 / 3, 1 / 3, 0.0) for b in (1, 2, 3)
        ),
        0.0,
        0.1 / 3,
        0.1,
    )

    def latest_load(cluster: str | None) -> LoadWindow | None:
        asked.append(cluster)
        return None if cluster is not None else load

    r = make_runner(latest_load=latest_load)
    outcome = r.runner.plan_rebalance(Who(), RebalanceOrder(rated_deviation=0.5))
    assert outcome.load_source == "load window 100-160"
    assert asked == [snapshots.DEFAULT_CLUSTER_ID, None]
    empty = make_runner(latest_load=lambda _: None).runner.plan_rebalance(Who(), RebalanceOrder())
    assert empty.load_source == "replica and leader counts (no load window yet)"


# --- the pool --------------------------------------------------------------------------------------------


def test_the_pool_runs_at_most_its_workers_at_once() -> None:
    pool = ActionPool(workers=2)
    release = threading.Event()
    lock = threading.Lock()
    running, most, done = [0], [0], []

    def work(n: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(60)
        with lock:
            running[0] -= 1
            done.append(n)

    for n in range(5):
        pool.submit(functools.partial(work, n))
    deadline = time.monotonic() + 60
    while running[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # a third would have started by now: none does
    assert (running[0], pool.threads) == (2, 2)
    release.set()
    while len(done) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(done) == [0, 1, 2, 3, 4]
    assert most[0] == 2
    pool.shutdown()


def test_shutdown_drops_what_waits_and_takes_nothing_more() -> None:
    pool = ActionPool(workers=1)
    release = threading.Event()
    ran: list[str] = []

    started = threading.Event()

    def first() -> None:
        started.set()
        release.wait(60)
        ran.append("first")

    pool.submit(first)
    pool.submit(lambda: ran.append("queued"))
    assert started.wait(60)
    pool.shutdown()
    release.set()
    deadline = time.monotonic() + 60
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the queued one would have run by now: it does not
    assert ran == ["first"]
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)


def test_a_refusal_of_many_problems_names_five_and_counts_them() -> None:
    """5,000 partitions of unknown topics: the message names 5 and counts the rest; the audit keeps the
    first 100 messages, the count, and the request's digest."""
    r = make_runner()
    items = tuple(ReassignmentRequest(f"nope-{n}", 0, (1, 2, 3)) for n in range(5000))
    order = ReassignmentOrder(items)
    with pytest.raises(InvalidRequestError) as refused:
        r.runner.reassign(Who(), order)
    assert len(refused.value.problems) == 5000
    assert refused.value.message.count("does not exist") == 5
    assert refused.value.message.endswith("; and 4,995 more (5,000 problems)")
    (entry,) = r.audit()
    assert entry.detail["problems_total"] == 5000
    assert len(entry.detail["problems"]) == 100
    assert entry.detail["partitions"] == 5000
    assert entry.detail["request_sha256"] == request_digest(order.as_request())


# --- demotion, promotion, decommission -------------------------------------------------------------------


def demotable() -> ClusterSnapshot:
    """Broker 1 is the preferred leader of ``orders`` 0 and 2, and the only replica of ``solo`` 0."""
    return snapshots.cluster(
        snapshots.partition("orders", 0, (1, 2, 3)),
        snapshots.partition("orders", 1, (2, 3, 1)),
        snapshots.partition("orders", 2, (1, 3)),
        snapshots.partition("solo", 0, (1,)),
    )


def leaders(r: Runner) -> dict[tuple[str, int], tuple[tuple[int, ...], int]]:
    return {
        (tp.topic, tp.partition): (info.assignment.replicas, info.leader)
        for tp, info in r.cluster.snapshot.partitions.items()
    }


def test_a_demotion_reorders_elects_and_is_undone_by_exactly_one_promotion() -> None:
    r = make_runner(demotable())
    dry = r.runner.demote(Who(), LeadershipOrder(1))
    assert dry.action is None
    assert [(x.tp.partition, x.after) for x in dry.plan.reorders] == [(0, (2, 3, 1)), (2, (3, 1))]
    assert r.admin.written == [], "a dry run writes nothing"

    demoted = r.runner.demote(Who(), LeadershipOrder(1, dry_run=False))
    assert demoted.action is not None
    done = wait_until_done(r.log, demoted.action.id)
    assert done.state is ActionState.PARTIAL, done  # it still leads solo-0, its only replica
    assert done.result["still_led"] == [{"topic": "solo", "partition": 0, "reason": "only replica"}]
    assert (done.result["reordered"], done.result["elected"]) == (2, 2)
    assert r.admin.written == [zkdata.REASSIGN_PARTITIONS_PATH, zkdata.PREFERRED_REPLICA_ELECTION_PATH]
    now = leaders(r)
    assert now[("orders", 0)] == ((2, 3, 1), 2)
    assert now[("orders", 2)] == ((3, 1), 3)
    assert now[("orders", 1)] == ((2, 3, 1), 2), "untouched"

    again = r.runner.demote(Who(), LeadershipOrder(1))
    assert again.plan.reorders == ()
    assert again.demotion == demoted.action.id

    promoted = r.runner.promote(Who(), LeadershipOrder(1, dry_run=False))
    assert promoted.demotion == demoted.action.id
    assert promoted.action is not None
    done = wait_until_done(r.log, promoted.action.id)
    assert done.state is ActionState.SUCCEEDED, done
    assert leaders(r)[("orders", 0)] == ((1, 2, 3), 1)
    assert leaders(r)[("orders", 2)] == ((1, 3), 1)
    with pytest.raises(ConflictError, match="broker 1 has no recorded demotion to restore"):
        r.runner.promote(Who(), LeadershipOrder(1))
    kinds = [(e.action, e.outcome) for e in r.audit()]
    assert kinds[:2] == [("promote-broker", "refused"), ("promote-broker", "accepted")]
    r.runner.shutdown()


def test_unknown_brokers_and_a_promotion_without_demotion_are_refused_and_audited() -> None:
    r = make_runner(demotable())
    with pytest.raises(
        InvalidRequestError, match="broker 7 is not registered and holds no replica"
    ) as caught:
        r.runner.demote(Who(), LeadershipOrder(7))
    assert [p.code for p in caught.value.problems] == ["unknown_broker"]
    with pytest.raises(InvalidRequestError, match="broker 7"):
        r.runner.decommission(Who(), DecommissionOrder(7))
    with pytest.raises(ConflictError, match="no recorded demotion"):
        r.runner.promote(Who(), LeadershipOrder(2, dry_run=False))
    assert [e.outcome for e in r.audit()] == ["refused"] * 3
    assert r.admin.written == []
    r.runner.shutdown()


def test_a_demotion_left_between_reorder_and_election_is_resumed_by_the_next_runner() -> None:
    """A previous instance recorded the election chunk as being written, then died: the next runner adopts
    the action, does not write the reorder again, writes the chunk and verifies."""
    r = make_runner(demotable())
    r.runner.shutdown()  # the first instance accepts, and dies before executing
    accepted = r.runner.demote(Who(), LeadershipOrder(1, dry_run=False))
    assert accepted.action is not None
    r.cluster.take(
        zkdata.REASSIGN_PARTITIONS_PATH,
        zkdata.encode_reassignment(
            {TopicPartition("orders", 0): (2, 3, 1), TopicPartition("orders", 2): (3, 1)}
        ),
    )
    record = r.log.get(accepted.action.id)
    assert record is not None
    r.log.update(
        record.moved_to(
            ActionState.RUNNING,
            owner="dead-instance",
            progress={"phase": "elect", "step": {"done": 0, "state": "writing"}, "batches_done": 1},
        )
    )
    second = ActionRunner(r.log, r.admin, r.cluster.read)
    second.start()
    done = wait_until_done(r.log, accepted.action.id)
    second.shutdown()
    assert done.state is ActionState.PARTIAL, done  # solo-0 stays with its only replica
    assert done.progress["adoptions"] == 1
    assert r.admin.written == [zkdata.PREFERRED_REPLICA_ELECTION_PATH], "the reorder is not written again"
    assert done.result["reordered"] == 2
    assert all(leader != 1 for (topic, _), (_, leader) in leaders(r).items() if topic == "orders")


def test_a_decommission_drains_the_broker_and_verifies_it_is_removable() -> None:
    snapshot = snapshots.cluster(
        snapshots.partition("orders", 0, (1, 2)),
        snapshots.partition("__consumer_offsets", 0, (4, 1)),
        snapshots.partition("__consumer_offsets", 1, (2, 3)),
        brokers=(1, 2, 3, 4),
    )
    r = make_runner(snapshot)
    dry = r.runner.decommission(Who(), DecommissionOrder(4, throttle_bytes_per_sec=1000))
    assert dry.action is None
    assert [i.tp for i in dry.reassignment.order.items] == [TopicPartition("__consumer_offsets", 0)]
    assert dry.internal_partitions == 1
    assert dry.reassignment.throttles is not None
    run = r.runner.decommission(Who(), DecommissionOrder(4, throttle_bytes_per_sec=1000, dry_run=False))
    assert run.action is not None
    assert run.action.kind == "decommission-broker"
    done = wait_until_done(r.log, run.action.id)
    assert done.state is ActionState.SUCCEEDED, done
    assert (done.result["removable"], done.result["left"], done.result["broker"]) == (True, [], 4)
    assert all(4 not in info.assignment.replicas for info in r.cluster.snapshot.partitions.values())
    r.runner.shutdown()
