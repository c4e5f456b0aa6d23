"""The throttles' removal and cleanup: only the four throttle keys go, every other key stays, an entity
without one is not written, a failure does not stop the others; which unfinished actions hold throttles;
the cleaner's dry run, skips, selection, refusals and audit entries.

The removal checks run twice: against a small fake :class:`AdminZooKeeper` and, as its contract test,
against the real :class:`KazooAdmin` on the shared test ZooKeeper (``/config`` znodes and their
``/config/changes`` notifications as ``kafka-configs`` writes them)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from app.actions.state import ActionRecord, ActionState, MemoryActionLog, request_digest
from app.actions.throttle_removal import (
    CLEAR_THROTTLES,
    ClearOrder,
    EntityRef,
    InvalidThrottleRequestError,
    ThrottleCleaner,
    inventory_of,
    plan_clear,
    remove_throttles,
    throttle_user,
    throttle_users,
)
from collectors.kafka import zkdata
from collectors.kafka.admin import AdminZooKeeper, KazooAdmin, write_entity_config
from collectors.kafka.model import ClusterSnapshot, PendingOperations, TopicPartition
from collectors.kafka.throttles import (
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
    EntityType,
    ThrottleState,
    ThrottleUser,
    throttle_inventory,
)
from tests.support import snapshots

RATES = {LEADER_THROTTLED_RATE: "1000", FOLLOWER_THROTTLED_RATE: "1000"}
LISTS = {LEADER_THROTTLED_REPLICAS: "0:1,0:2", FOLLOWER_THROTTLED_REPLICAS: "0:3"}


@dataclass
class FakeAdmin:
    """Entity configs in memory; ``set_config`` records the notification ``kafka-configs`` would write;
    entities in ``failing`` refuse to be written."""

    configs: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    notified: list[str] = field(default_factory=list)
    failing: set[tuple[str, str]] = field(default_factory=set)

    def exists(self, path: str) -> bool:
        return False

    def read(self, path: str) -> bytes | None:
        return None

    def create(self, path: str, data: bytes) -> None:
        raise AssertionError("the throttle cleanup creates no admin znode")

    def wait_deleted(self, path: str, timeout_s: float) -> bool:
        return True

    def get_config(self, entity_type: str, entity: str) -> dict[str, str]:
        return dict(self.configs.get((entity_type, entity), {}))

    def set_config(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        if (entity_type, entity) in self.failing:
            raise ConnectionLoss(f"{entity_type}/{entity}")
        self.configs[(entity_type, entity)] = dict(config)
        self.notified.append(f"{entity_type}/{entity}")


class Backend(Protocol):
    @property
    def admin(self) -> AdminZooKeeper: ...

    def seed(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        """Write a config as it was before the test, without a notification."""

    def config(self, entity_type: str, entity: str) -> dict[str, str] | None:
        """The entity's config now; None when it has no config znode."""

    def notified(self) -> list[str]:
        """The entity paths of the config change notifications written, in order."""


@dataclass
class FakeBackend:
    admin: FakeAdmin = field(default_factory=FakeAdmin)

    def seed(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        self.admin.configs[(entity_type, entity)] = dict(config)

    def config(self, entity_type: str, entity: str) -> dict[str, str] | None:
        return self.admin.configs.get((entity_type, entity))

    def notified(self) -> list[str]:
        return list(self.admin.notified)


@dataclass
class ZooKeeperBackend:
    admin: KazooAdmin
    zk: KazooClient

    def seed(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        write_entity_config(self.zk, entity_type, entity, config, notify=False)

    def config(self, entity_type: str, entity: str) -> dict[str, str] | None:
        path = zkdata.entity_config_path(entity_type, entity)
        if self.zk.exists(path) is None:
            return None
        return zkdata.decode_config(path, self.zk.get(path)[0])

    def notified(self) -> list[str]:
        if self.zk.exists(zkdata.CONFIG_CHANGES_PATH) is None:
            return []
        names = sorted(self.zk.get_children(zkdata.CONFIG_CHANGES_PATH))
        return [json.loads(self.zk.get(f"{zkdata.CONFIG_CHANGES_PATH}/{n}")[0])["entity_path"] for n in names]


@pytest.fixture(
    params=[
        pytest.param("fake", marks=pytest.mark.unit),
        pytest.param("zookeeper", marks=pytest.mark.integration),
    ]
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fake":
        yield FakeBackend()
        return
    zk: KazooClient = request.getfixturevalue("zk_client")
    admin = KazooAdmin(request.getfixturevalue("zk_connect"))
    try:
        yield ZooKeeperBackend(admin, zk)
    finally:
        admin.close()


# --- the removal (fake and real ZooKeeper) -----------------------------------------------------------------


def test_only_the_throttle_keys_go_and_every_other_key_stays(backend: Backend) -> None:
    backend.seed("brokers", "1", RATES | {"log.cleaner.threads": "2"})
    backend.seed(
        "brokers", "<default>", {FOLLOWER_THROTTLED_RATE: "5", "unclean.leader.election.enable": "false"}
    )
    backend.seed("topics", "orders", LISTS | {"min.insync.replicas": "2", "retention.ms": "1000"})

    report = remove_throttles(backend.admin, brokers=[1, "<default>"], topics=["orders"])

    assert report.ok
    assert report.first_error is None
    assert [(str(r.ref), dict(r.keys)) for r in report.removed] == [
        ("broker 1", RATES),
        ("broker <default>", {FOLLOWER_THROTTLED_RATE: "5"}),
        ("topic orders", LISTS),
    ]
    assert backend.config("brokers", "1") == {"log.cleaner.threads": "2"}
    assert backend.config("brokers", "<default>") == {"unclean.leader.election.enable": "false"}
    assert backend.config("topics", "orders") == {"min.insync.replicas": "2", "retention.ms": "1000"}
    assert backend.notified() == ["brokers/1", "brokers/<default>", "topics/orders"]


def test_an_entity_without_a_throttle_key_is_not_written(backend: Backend) -> None:
    backend.seed("topics", "payments", {"retention.ms": "1000"})
    backend.seed("brokers", "2", {LEADER_THROTTLED_RATE: "1"})

    report = remove_throttles(backend.admin, brokers=["2", "3", "2"], topics=["payments", "absent"])

    assert [str(r) for r in report.unchanged] == ["broker 3", "topic payments", "topic absent"]
    assert [str(r.ref) for r in report.removed] == ["broker 2"]
    assert backend.config("topics", "payments") == {"retention.ms": "1000"}
    assert backend.config("topics", "absent") is None
    assert backend.config("brokers", "3") is None
    assert backend.config("brokers", "2") == {}
    assert backend.notified() == ["brokers/2"]


def test_the_topic_keys_stay_on_a_broker_and_the_rates_on_a_topic(backend: Backend) -> None:
    """Each entity type loses its own two keys only (Kafka refuses the others there anyway)."""
    backend.seed("brokers", "1", {LEADER_THROTTLED_REPLICAS: "*", LEADER_THROTTLED_RATE: "9"})
    backend.seed("topics", "t", {LEADER_THROTTLED_RATE: "9", FOLLOWER_THROTTLED_REPLICAS: "*"})
    remove_throttles(backend.admin, brokers=[1], topics=["t"])
    assert backend.config("brokers", "1") == {LEADER_THROTTLED_REPLICAS: "*"}
    assert backend.config("topics", "t") == {LEADER_THROTTLED_RATE: "9"}


@pytest.mark.unit
def test_a_failure_is_reported_and_the_other_entities_are_still_cleared() -> None:
    backend = FakeBackend()
    for b in ("1", "2", "3"):
        backend.seed("brokers", b, dict(RATES))
    backend.admin.failing.add(("brokers", "2"))

    report = remove_throttles(backend.admin, brokers=[1, 2, 3])

    assert not report.ok
    assert [str(r.ref) for r in report.removed] == ["broker 1", "broker 3"]
    assert [(str(f.ref), f.error) for f in report.failed] == [("broker 2", "ConnectionLoss: brokers/2")]
    assert report.first_error == "could not remove the throttle of broker 2: ConnectionLoss: brokers/2"
    assert backend.config("brokers", "2") == RATES
    assert backend.config("brokers", "3") == {}


# --- who holds throttles ---------------------------------------------------------------------------------


def record(
    action_id: str,
    state: ActionState,
    *,
    kind: str = "reassignment",
    throttle: int | None = 1000,
    plan: Mapping[str, object] | None = None,
) -> ActionRecord:
    request = {
        "partitions": [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3]}],
        "throttle_bytes_per_sec": throttle,
    }
    return ActionRecord(action_id, kind, state, "oncall", 0.0, request, plan=plan or {})


@pytest.mark.unit
def test_the_throttles_an_action_records_are_what_it_holds() -> None:
    user = throttle_user(
        record("a", ActionState.RUNNING, plan={"throttles": {"brokers": [1, "2", -1, True], "topics": ["t"]}})
    )
    assert user == ThrottleUser("a", brokers=frozenset({1, 2}), topics=frozenset({"t"}))


@pytest.mark.unit
def test_a_throttled_reassignment_without_that_record_holds_its_topics_and_every_broker() -> None:
    assert throttle_user(record("b", ActionState.PENDING)) == ThrottleUser(
        "b", topics=frozenset({"orders"}), all_brokers=True
    )
    assert throttle_user(record("c", ActionState.RUNNING, throttle=None)) is None
    assert throttle_user(record("d", ActionState.RUNNING, kind="preferred-replica-election")) is None


@pytest.mark.unit
def test_only_unfinished_actions_hold_throttles() -> None:
    log = MemoryActionLog()
    plan = {"throttles": {"brokers": [1], "topics": []}}
    log.create(record("pending", ActionState.PENDING, plan=plan))
    log.create(record("running", ActionState.RUNNING, plan=plan))
    for state in (ActionState.SUCCEEDED, ActionState.PARTIAL, ActionState.FAILED, ActionState.CANCELLED):
        log.create(record(state.value.lower(), state, plan=plan))
    assert sorted(u.id for u in throttle_users(log)) == ["pending", "running"]


# --- the cleaner -----------------------------------------------------------------------------------------


def cluster() -> ClusterSnapshot:
    """Brokers 1-3 throttled, ``<default>`` too; orders and payments with replica lists."""
    snap = snapshots.cluster(
        snapshots.partition("orders", 0, [1, 2, 3]),
        snapshots.partition("payments", 0, [2, 3, 1]),
        topic_configs={"orders": LISTS | {"retention.ms": "1"}, "payments": LISTS},
    )
    configs = {b: dict(RATES) for b in ("1", "2", "3")} | {"<default>": {FOLLOWER_THROTTLED_RATE: "7"}}
    return dataclasses.replace(snap, broker_configs=configs)


@dataclass
class Cleaner:
    cleaner: ThrottleCleaner
    admin: FakeAdmin
    log: MemoryActionLog
    snapshot: ClusterSnapshot


def make_cleaner(snapshot: ClusterSnapshot | None = None) -> Cleaner:
    snap = snapshot or cluster()
    admin = FakeAdmin()
    for entity, config in snap.broker_configs.items():
        admin.configs[("brokers", entity)] = dict(config)
    for name, info in snap.topics.items():
        admin.configs[("topics", name)] = dict(info.config)
    log = MemoryActionLog()
    holder = Cleaner(ThrottleCleaner(log, admin, lambda: holder.snapshot), admin, log, snap)
    return holder


@pytest.mark.unit
def test_a_dry_run_lists_what_would_go_writes_nothing_and_is_audited() -> None:
    c = make_cleaner()
    outcome = c.cleaner.clear("oncall", "operator", ClearOrder())
    assert outcome.dry_run
    assert outcome.state == "dry-run"
    assert [str(r.ref) for r in outcome.removed] == [
        "broker 1",
        "broker 2",
        "broker 3",
        "broker <default>",
        "topic orders",
        "topic payments",
    ]
    assert dict(outcome.removed[-1].keys) == LISTS
    assert c.admin.notified == []
    (entry,) = c.log.audit_entries()
    assert (entry.who, entry.role, entry.action, entry.dry_run, entry.outcome) == (
        "oncall",
        "operator",
        CLEAR_THROTTLES,
        True,
        "dry-run",
    )
    assert entry.detail["request"]["dry_run"] is True
    assert len(entry.detail["removed"]) == 6


@pytest.mark.unit
def test_a_clear_removes_the_leftovers_and_skips_what_an_unfinished_action_holds() -> None:
    c = make_cleaner()
    c.log.create(
        record("a1", ActionState.RUNNING, plan={"throttles": {"brokers": [2], "topics": ["payments"]}})
    )

    outcome = c.cleaner.clear("oncall", "operator", ClearOrder(dry_run=False))

    assert outcome.state == "SUCCEEDED"
    assert [str(r.ref) for r in outcome.removed] == [
        "broker 1",
        "broker 3",
        "broker <default>",
        "topic orders",
    ]
    assert [(str(s.ref), s.action_ids) for s in outcome.skipped] == [
        ("broker 2", ("a1",)),
        ("topic payments", ("a1",)),
    ]
    assert "in use by action a1" in outcome.skipped[0].reason
    assert c.admin.configs[("topics", "orders")] == {"retention.ms": "1"}
    assert c.admin.configs[("brokers", "2")] == RATES
    assert c.admin.configs[("topics", "payments")] == LISTS
    assert c.log.audit_entries()[0].outcome == "SUCCEEDED"
    assert c.log.audit_entries()[0].detail["skipped"][0] == {"entity": "broker 2", "actions": ["a1"]}

    forced = c.cleaner.clear("oncall", "operator", ClearOrder(dry_run=False, include_in_use=True))
    assert [str(r.ref) for r in forced.removed] == ["broker 2", "topic payments"]
    assert [str(r) for r in forced.not_throttled] == [
        "broker 1",
        "broker 3",
        "broker <default>",
        "topic orders",
    ]


@pytest.mark.unit
def test_a_running_reassignment_holds_its_throttles_too() -> None:
    snap = dataclasses.replace(
        cluster(), pending=PendingOperations(reassignments={TopicPartition("orders", 0): (3, 2, 1)})
    )
    c = make_cleaner(snap)
    outcome = c.cleaner.clear("oncall", "operator", ClearOrder(topics=("orders", "payments")))
    assert [str(r.ref) for r in outcome.removed] == ["topic payments"]
    (skipped,) = outcome.skipped
    assert str(skipped.ref) == "topic orders"
    assert skipped.action_ids == ()
    assert "a reassignment running in ZooKeeper moves partitions of the topic" in skipped.reason


@pytest.mark.unit
def test_naming_entities_clears_only_those() -> None:
    c = make_cleaner()
    order = ClearOrder(dry_run=False, brokers=(3, "<default>", 9), topics=("orders", "nope"))
    outcome = c.cleaner.clear("oncall", "operator", order)
    assert [str(r.ref) for r in outcome.removed] == ["broker 3", "broker <default>", "topic orders"]
    assert [str(r) for r in outcome.not_throttled] == ["broker 9", "topic nope"]
    assert c.admin.notified == ["brokers/3", "brokers/<default>", "topics/orders"]
    only_brokers = c.cleaner.clear("oncall", "operator", ClearOrder(brokers=(1,)))
    assert [str(r.ref) for r in only_brokers.removed] == ["broker 1"]


@pytest.mark.unit
def test_a_failure_makes_the_clear_partial() -> None:
    c = make_cleaner()
    c.admin.failing.add(("topics", "orders"))
    outcome = c.cleaner.clear("oncall", "operator", ClearOrder(dry_run=False, topics=("orders", "payments")))
    assert outcome.state == "PARTIAL"
    assert [str(f.ref) for f in outcome.failed] == ["topic orders"]
    assert c.log.audit_entries()[0].detail["failed"] == [
        {"entity": "topic orders", "error": "ConnectionLoss: topics/orders"}
    ]
    c.admin.failing.add(("brokers", "1"))
    assert c.cleaner.clear("oncall", "operator", ClearOrder(dry_run=False, brokers=(1,))).state == "FAILED"


@pytest.mark.unit
def test_bad_input_is_refused_naming_every_problem_and_audited() -> None:
    c = make_cleaner()
    order = ClearOrder(dry_run=False, brokers=(-1, "x", True, "<default>"), topics=("", "a/b"))
    with pytest.raises(InvalidThrottleRequestError) as refused:
        c.cleaner.clear("oncall", "operator", order)
    message = str(refused.value)
    for bad in ("-1", "'x'", "True", "''", "'a/b'"):
        assert bad in message, bad
    assert "'<default>'" in message  # named in the hint, not as a problem
    assert message.count("is not") == 5
    (entry,) = c.log.audit_entries()
    assert entry.outcome == "refused"
    assert entry.detail["reason"] == message
    assert c.admin.notified == []


@pytest.mark.unit
def test_a_refusal_of_many_bad_entries_names_five_and_its_audit_is_bounded() -> None:
    c = make_cleaner()
    order = ClearOrder(brokers=tuple(f"bad-{n}" for n in range(10_000)))
    with pytest.raises(InvalidThrottleRequestError) as refused:
        c.cleaner.clear("oncall", "operator", order)
    message = str(refused.value)
    assert message.count("is not a broker id") == 5
    assert message.endswith("; and 9,995 more (10,000 bad entries)")
    (entry,) = c.log.audit_entries()
    assert entry.detail["request"]["brokers"] == [f"bad-{n}" for n in range(100)]
    assert entry.detail["request"]["brokers_total"] == 10_000
    assert entry.detail["request_sha256"] == request_digest(order.as_request())
    assert len(json.dumps(entry.detail)) < 8_000


@pytest.mark.unit
def test_plan_clear_is_pure_over_the_inventory() -> None:
    users = [ThrottleUser("x", topics=frozenset({"orders"}))]
    inventory = throttle_inventory(cluster(), users)
    plan = plan_clear(inventory, brokers=set(), topics={"orders", "payments"})
    assert [e.entity for e in plan.targets] == ["payments"]
    assert [s.ref for s in plan.skipped] == [EntityRef(EntityType.TOPIC, "orders")]
    assert inventory.find(EntityType.TOPIC, "orders") is not None
    assert inventory.count(ThrottleState.IN_USE) == 1


@pytest.mark.unit
def test_the_log_is_read_only_when_the_snapshot_has_a_throttle() -> None:
    class CountingLog(MemoryActionLog):
        reads = 0

        def unfinished(self) -> list[ActionRecord]:
            CountingLog.reads += 1
            return super().unfinished()

    log = CountingLog()
    log.create(record("r", ActionState.RUNNING, plan={"throttles": {"brokers": [1], "topics": []}}))
    assert inventory_of(snapshots.cluster(snapshots.partition("t", 0, [1])), log).entries == ()
    assert CountingLog.reads == 0
    assert inventory_of(cluster(), log).count(ThrottleState.IN_USE) == 1
    assert CountingLog.reads == 1
