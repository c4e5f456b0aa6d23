"""The throttle inventory over a snapshot: the replica lists as Kafka's tool writes them (before and since
KIP-455) and as an operator writes them (``*``), the ``<default>`` broker entity, half a throttle (inert),
unknown brokers and partitions, values Kafka refuses, and who uses each throttle."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest

from collectors.kafka.model import ClusterSnapshot, PartitionInfo, PendingOperations, TopicPartition
from collectors.kafka.throttles import (
    EMPTY_LIST,
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    INVALID_VALUE,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
    NO_LIST,
    NO_RATE,
    NOT_A_REPLICA,
    UNKNOWN_BROKER,
    UNKNOWN_PARTITION,
    ZERO_RATE,
    BrokerThrottle,
    EntityType,
    ThrottledReplicas,
    ThrottleEntry,
    ThrottleInventory,
    ThrottleState,
    ThrottleUser,
    TopicThrottle,
    parse_rate,
    parse_throttled_replicas,
    throttle_inventory,
)
from collectors.zookeeper.cluster_model import PartitionMap
from tests.support import snapshots

pytestmark = pytest.mark.unit

RATE = "10000000"


def both_rates(rate: str = RATE) -> dict[str, str]:
    return {LEADER_THROTTLED_RATE: rate, FOLLOWER_THROTTLED_RATE: rate}


def lists(leader: str | None = None, follower: str | None = None) -> dict[str, str]:
    config = {}
    if leader is not None:
        config[LEADER_THROTTLED_REPLICAS] = leader
    if follower is not None:
        config[FOLLOWER_THROTTLED_REPLICAS] = follower
    return config


def snapshot(
    *,
    brokers: Mapping[str, Mapping[str, str]] | None = None,
    topics: Mapping[str, Mapping[str, str]] | None = None,
    registered: tuple[int, ...] = (1, 2, 3, 4),
    pending: PendingOperations | None = None,
    moving: bool = False,
) -> ClusterSnapshot:
    """``orders`` 0-2 on 2,3,4 / 3,4,1 / 4,1,2 (partition 0 adding 1 when ``moving``), ``payments`` 0 on
    1,2; broker and topic configs as given (``min.insync.replicas`` on orders, never a throttle key)."""
    orders0 = (
        snapshots.partition("orders", 0, [1, 2, 3, 4], adding=[1], removing=[4])
        if moving
        else snapshots.partition("orders", 0, [2, 3, 4])
    )
    configs = {"orders": {"min.insync.replicas": "2"}} | dict(topics or {})
    snap = snapshots.cluster(
        orders0,
        snapshots.partition("orders", 1, [3, 4, 1]),
        snapshots.partition("orders", 2, [4, 1, 2]),
        snapshots.partition("payments", 0, [1, 2]),
        brokers=registered,
        topic_configs=configs,
        pending=pending,
    )
    return dataclasses.replace(snap, broker_configs=dict(brokers or {}))


def codes(entry: ThrottleEntry | None) -> set[str]:
    assert entry is not None
    return {p.code for p in entry.problems}


def broker(inventory: ThrottleInventory, entity: str) -> BrokerThrottle:
    entry = inventory.find(EntityType.BROKER, entity)
    assert isinstance(entry, BrokerThrottle), entity
    return entry


def topic(inventory: ThrottleInventory, name: str) -> TopicThrottle:
    entry = inventory.find(EntityType.TOPIC, name)
    assert isinstance(entry, TopicThrottle), name
    return entry


# --- parsing -----------------------------------------------------------------------------------------------


def test_a_replica_list_is_pairs_or_the_wildcard_as_kafkas_validator_reads_it() -> None:
    assert parse_throttled_replicas("*") == ThrottledReplicas("*", True)
    assert parse_throttled_replicas("  * ").all_replicas
    listed = parse_throttled_replicas(" 10:1, 2:1 ,,2:1,0:3 ")
    assert listed.pairs == ((0, 3), (2, 1), (10, 1))
    assert not listed.all_replicas
    assert listed.malformed == ()
    assert parse_throttled_replicas("") == ThrottledReplicas("", False)
    assert parse_throttled_replicas("*,0:1").malformed == ("*",)
    assert parse_throttled_replicas("0:1,x:2,3,4:-1,5:6:7").malformed == ("x:2", "3", "4:-1", "5:6:7")


def test_a_rate_is_a_non_negative_integer() -> None:
    assert parse_rate(" 1048576 ") == 1048576
    assert parse_rate("0") == 0
    for bad in ("", "-1", "1.5", "10MB", "١٢"):
        assert parse_rate(bad) is None, bad


# --- the inventory -----------------------------------------------------------------------------------------


def test_no_throttle_key_anywhere_is_an_empty_inventory() -> None:
    inventory = throttle_inventory(snapshot(brokers={"1": {"log.cleaner.threads": "2"}}))
    assert inventory == ThrottleInventory()
    assert inventory.entries == ()


def test_what_kafkas_tool_leaves_after_a_completed_reassignment_since_kip_455() -> None:
    """orders-0 moved from 1,2,3 to 2,3,4 with ``--throttle``, then nobody ran ``--verify``: the leader list
    names every partition of the request at its sources (sorted as Java's TreeSet[String]: 10 before 2),
    the follower list its destinations; rates on every source and destination."""
    inventory = throttle_inventory(
        snapshot(
            brokers={b: both_rates() for b in ("1", "2", "3", "4")},
            topics={"orders": lists(leader="0:1,0:2,0:3,1:1,1:3,1:4", follower="0:4")},
        )
    )
    orders = topic(inventory, "orders")
    assert orders.state is ThrottleState.LEFTOVER
    assert orders.config == lists(leader="0:1,0:2,0:3,1:1,1:3,1:4", follower="0:4")
    assert orders.leader is not None
    assert orders.leader.pairs == ((0, 1), (0, 2), (0, 3), (1, 1), (1, 3), (1, 4))
    assert orders.limits == ("leader", "follower")
    assert codes(orders) == {NOT_A_REPLICA}  # 0:1 is the source that left
    assert "0:1" in orders.problems[0].message
    assert [b.entity for b in inventory.brokers] == ["1", "2", "3", "4"]
    assert all(b.limits == ("leader", "follower") for b in inventory.brokers if b.entity == "4")
    assert broker(inventory, "2").limits == ("leader",)  # no topic lists a follower replica on 2
    assert codes(broker(inventory, "2")) == {NO_LIST}
    assert inventory.rates[2] == {"leader": 10_000_000, "follower": 10_000_000}
    assert inventory.count(ThrottleState.LEFTOVER) == 5
    assert inventory.count(ThrottleState.LEFTOVER, EntityType.BROKER) == 4
    assert inventory.count(ThrottleState.IN_USE) == 0


def test_the_pre_kip_455_tool_lists_moving_partitions_only_and_unsorted() -> None:
    inventory = throttle_inventory(
        snapshot(
            brokers={"1": both_rates(), "4": both_rates()},
            topics={"orders": lists(leader="2:4,1:4", follower="2:1,1:1")},
        )
    )
    orders = topic(inventory, "orders")
    assert orders.leader is not None
    assert orders.follower is not None
    assert orders.leader.pairs == ((1, 4), (2, 4))
    assert orders.follower.pairs == ((1, 1), (2, 1))
    assert orders.limits == ("leader", "follower")
    assert orders.problems == ()
    assert broker(inventory, "1").limits == ("follower",)
    assert broker(inventory, "4").limits == ("leader",)


def test_the_wildcard_lists_every_replica_of_the_topic() -> None:
    inventory = throttle_inventory(
        snapshot(brokers={"2": both_rates()}, topics={"payments": lists(follower="*")})
    )
    payments = topic(inventory, "payments")
    assert payments.follower is not None
    assert payments.follower.all_replicas
    assert payments.limits == ("follower",)  # broker 2 holds payments-0
    assert payments.problems == ()
    assert broker(inventory, "2").limits == ("follower",)
    assert codes(broker(inventory, "2")) == {NO_LIST}  # nobody lists a leader replica on 2


def test_the_default_broker_entity_applies_to_brokers_without_a_rate_of_their_own() -> None:
    inventory = throttle_inventory(
        snapshot(
            brokers={
                "<default>": {FOLLOWER_THROTTLED_RATE: "1048576"},
                "3": {FOLLOWER_THROTTLED_RATE: "500"},
            },
            topics={"payments": lists(follower="0:1,0:2")},
        )
    )
    default = broker(inventory, "<default>")
    assert default.broker is None
    assert default.registered is False
    assert default.follower_rate == 1048576
    assert default.leader_rate is None
    assert default.limits == ("follower",)
    assert default.problems == ()
    assert [b.entity for b in inventory.brokers] == ["3", "<default>"]
    assert inventory.rates == {
        1: {"follower": 1048576},
        2: {"follower": 1048576},
        3: {"follower": 500},
        4: {"follower": 1048576},
    }
    assert broker(inventory, "3").limits == ()  # its own rate, but nothing listed on 3
    assert codes(broker(inventory, "3")) == {NO_LIST}
    assert topic(inventory, "payments").limits == ("follower",)


def test_a_default_rate_nobody_inherits_for_a_listed_replica_is_inert() -> None:
    inventory = throttle_inventory(
        snapshot(
            brokers={"<default>": {LEADER_THROTTLED_RATE: "100"}, "1": {LEADER_THROTTLED_RATE: "200"}},
            topics={"payments": lists(leader="0:1")},
        )
    )
    assert broker(inventory, "1").limits == ("leader",)
    assert broker(inventory, "<default>").limits == ()
    assert codes(broker(inventory, "<default>")) == {NO_LIST}
    assert "without a rate of its own" in broker(inventory, "<default>").problems[0].message


def test_half_a_throttle_is_inert_either_way() -> None:
    inventory = throttle_inventory(
        snapshot(brokers={"1": both_rates()}, topics={"orders": lists(leader="0:2,0:3", follower="0:4")})
    )
    rate_only = broker(inventory, "1")
    assert rate_only.limits == ()
    assert codes(rate_only) == {NO_LIST}
    assert {p.message.split(":")[0] for p in rate_only.problems} == {
        f"no topic lists a replica on broker 1 in {LEADER_THROTTLED_REPLICAS}",
        f"no topic lists a replica on broker 1 in {FOLLOWER_THROTTLED_REPLICAS}",
    }
    list_only = topic(inventory, "orders")
    assert list_only.limits == ()
    assert codes(list_only) == {NO_RATE}
    assert len(list_only.problems) == 2
    assert "brokers 2, 3" in list_only.problems[0].message
    assert inventory.rates == {1: {"leader": 10_000_000, "follower": 10_000_000}}


def test_unknown_brokers_and_partitions() -> None:
    inventory = throttle_inventory(
        snapshot(
            brokers={"7": both_rates(), "2": both_rates(), "oops": both_rates()},
            topics={"payments": lists(leader="0:2,0:9,5:1,6:2")},
        )
    )
    gone = broker(inventory, "7")
    assert gone.registered is False
    assert gone.limits == ()
    assert codes(gone) == {UNKNOWN_BROKER}
    assert "broker 7 is not registered" in gone.problems[0].message
    assert codes(broker(inventory, "oops")) == {UNKNOWN_BROKER}
    assert [b.entity for b in inventory.brokers] == ["2", "7", "oops"]
    payments = topic(inventory, "payments")
    assert codes(payments) == {UNKNOWN_BROKER, UNKNOWN_PARTITION}
    messages = {p.code: p.message for p in payments.problems}
    assert "0:9" in messages[UNKNOWN_BROKER]
    assert "5:1, 6:2" in messages[UNKNOWN_PARTITION]
    assert "payments does not have (1 partitions)" in messages[UNKNOWN_PARTITION]
    assert payments.limits == ("leader",)  # 0:2 still meets broker 2's rate
    assert 7 not in inventory.rates


def test_values_kafka_refuses_an_empty_list_and_a_zero_rate() -> None:
    inventory = throttle_inventory(
        snapshot(
            brokers={"1": {LEADER_THROTTLED_RATE: "10MB", FOLLOWER_THROTTLED_RATE: "0"}},
            topics={"payments": lists(leader="0:1,bogus", follower="0:1"), "orders": lists(follower=" ")},
        )
    )
    one = broker(inventory, "1")
    assert one.leader_rate is None
    assert one.follower_rate == 0
    assert codes(one) == {INVALID_VALUE, ZERO_RATE}
    assert one.limits == ("follower",)  # a rate of 0 limits: it stops replication
    payments = topic(inventory, "payments")
    assert codes(payments) == {INVALID_VALUE, NO_RATE}  # the leader half has no valid rate
    assert payments.limits == ("follower",)
    orders = topic(inventory, "orders")
    assert codes(orders) == {EMPTY_LIST}
    assert orders.limits == ()


def test_an_unfinished_action_holds_what_it_set() -> None:
    users = [
        ThrottleUser("a1", brokers=frozenset({1, 2}), topics=frozenset({"payments"})),
        ThrottleUser("a2", brokers=frozenset({2})),
    ]
    inventory = throttle_inventory(
        snapshot(
            brokers={"1": both_rates(), "2": both_rates(), "3": both_rates()},
            topics={"payments": lists(leader="0:1", follower="0:2"), "orders": lists(leader="1:3")},
        ),
        users,
    )
    assert broker(inventory, "1").used_by == ("a1",)
    assert broker(inventory, "2").used_by == ("a1", "a2")
    assert broker(inventory, "2").state is ThrottleState.IN_USE
    assert broker(inventory, "3").state is ThrottleState.LEFTOVER
    assert topic(inventory, "payments").state is ThrottleState.IN_USE
    assert topic(inventory, "orders").state is ThrottleState.LEFTOVER
    assert topic(inventory, "orders").used_by == ()
    assert inventory.count(ThrottleState.IN_USE) == 3
    assert inventory.count(ThrottleState.IN_USE, EntityType.TOPIC) == 1


def test_a_user_of_unknown_brokers_holds_every_broker_but_not_the_default() -> None:
    users = [ThrottleUser("old", topics=frozenset({"orders"}), all_brokers=True)]
    inventory = throttle_inventory(
        snapshot(
            brokers={"1": both_rates(), "7": both_rates(), "<default>": both_rates()},
            topics={"orders": lists(leader="1:3")},
        ),
        users,
    )
    assert broker(inventory, "1").used_by == ("old",)
    assert broker(inventory, "7").used_by == ("old",)
    assert broker(inventory, "<default>").state is ThrottleState.LEFTOVER
    assert topic(inventory, "orders").used_by == ("old",)


def test_a_reassignment_running_in_zookeeper_holds_its_topic_and_brokers() -> None:
    """Kafka's tool is moving orders-0 from 2,3,4 to 1,2,3 (adding 1, removing 4): its throttles are in
    use although no action of ours set them; payments' are not."""
    rates = {b: both_rates() for b in ("1", "2", "3", "4")}
    replicas = {"orders": lists(leader="0:2,0:3,0:4", follower="0:1"), "payments": lists(leader="0:1")}
    running = throttle_inventory(snapshot(brokers=rates, topics=replicas, moving=True))
    orders = topic(running, "orders")
    assert orders.state is ThrottleState.IN_USE
    assert orders.reassignment_running is True
    assert orders.used_by == ()
    assert topic(running, "payments").state is ThrottleState.LEFTOVER
    assert {b.entity for b in running.brokers if b.reassignment_running} == {"1", "2", "3", "4"}

    pending = PendingOperations(reassignments={TopicPartition("payments", 0): (2, 3)})
    queued = throttle_inventory(snapshot(brokers=rates, topics=replicas, pending=pending))
    assert topic(queued, "payments").state is ThrottleState.IN_USE
    assert topic(queued, "orders").state is ThrottleState.LEFTOVER
    assert {b.entity for b in queued.brokers if b.state is ThrottleState.IN_USE} == {"1", "2", "3"}


def test_the_collectors_per_topic_partitions_give_the_same_inventory() -> None:
    """The collector's snapshots keep partitions per topic; the inventory reads only the throttled ones."""
    plain = snapshot(
        brokers={"2": both_rates(), "9": both_rates()},
        topics={"orders": lists(leader="*", follower="0:1,7:2")},
        moving=True,
    )
    by_topic: dict[str, dict[int, PartitionInfo]] = {}
    for tp, info in plain.partitions.items():
        by_topic.setdefault(tp.topic, {})[tp.partition] = info
    mapped = dataclasses.replace(plain, partitions=PartitionMap(by_topic, len(plain.partitions)))
    assert throttle_inventory(mapped) == throttle_inventory(plain)
    assert topic(throttle_inventory(mapped), "orders").reassignment_running
