"""Simulated consumer groups: the coordinator's hash, the group flag, Kafka's range assignment."""

from __future__ import annotations

import pytest

from app.embedded.reference_cluster.config import ConsumerGroupSpec
from app.embedded.reference_cluster.groups import (
    ConsumerGroups,
    GroupError,
    java_string_hash_code,
    offsets_partition,
    range_assignment,
)
from collectors.kafka.model import TopicPartition

pytestmark = pytest.mark.unit


def test_java_string_hash_code_matches_java() -> None:
    assert java_string_hash_code("hello") == 99162322
    assert java_string_hash_code("") == 0
    assert java_string_hash_code("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert java_string_hash_code("Aa") == java_string_hash_code("BB") == 2112
    assert java_string_hash_code("hello world") == 1794106052
    assert java_string_hash_code("abcdefghij") == -634317659  # overflows int32: negative
    assert java_string_hash_code("é") == 233  # one UTF-16 code unit
    assert java_string_hash_code("😀") == 1772899  # a surrogate pair: two code units


def test_the_coordinator_partition_is_abs_hash_mod_50() -> None:
    assert offsets_partition("hello") == 99162322 % 50
    assert offsets_partition("abcdefghij") == 634317659 % 50 == 9  # abs of a negative hash
    assert offsets_partition("polygenelubricants") == 0  # Utils.abs(Integer.MIN_VALUE) == 0


def test_consumer_group_flag_and_range_assignment() -> None:
    spec = ConsumerGroupSpec.parse("billing:orders,payments:3")
    assert (spec.name, spec.topics, spec.members, spec.commit_interval_ms, spec.rate_factor) == (
        "billing",
        ["orders", "payments"],
        3,
        5000,
        1.0,
    )
    for bad in ("billing:orders", "billing::2", "billing:orders:x", "a b:orders:1", "g:orders,orders:1"):
        with pytest.raises(ValueError, match=r"NAME:TOPIC|illegal group name|named twice"):
            ConsumerGroupSpec.parse(bad)
    # Kafka's RangeAssignor: per topic, the first members take one more
    assert range_assignment(3, {"orders": 4, "payments": 2}) == [
        [("orders", (0, 1)), ("payments", (0,))],
        [("orders", (2,)), ("payments", (1,))],
        [("orders", (3,))],
    ]


def test_several_groups_are_checked_before_any_is_added() -> None:
    groups = ConsumerGroups()
    partitions = {"orders": 4}
    groups.add(ConsumerGroupSpec(name="a", topics=["orders"]), partitions, 0.0)
    new = [ConsumerGroupSpec(name="b", topics=["orders"]), ConsumerGroupSpec(name="b", topics=["orders"])]
    with pytest.raises(GroupError) as twice:
        groups.check_new(new, partitions)
    assert (twice.value.status, twice.value.message) == (409, "consumer group 'b' exists already")
    with pytest.raises(GroupError) as unknown:
        groups.check_new([ConsumerGroupSpec(name="c", topics=["nope"])], partitions)
    assert unknown.value.status == 422
    with pytest.raises(GroupError):
        groups.check_new([ConsumerGroupSpec(name="a", topics=["orders"])], partitions)
    groups.check_new([ConsumerGroupSpec(name="b", topics=["orders"])], partitions)
    assert sorted(groups.groups) == ["a"]


def test_a_groups_positions_follow_new_partitions() -> None:
    groups = ConsumerGroups()
    counts = {"orders": 2}
    group = groups.add(ConsumerGroupSpec(name="g", topics=["orders"], commit_interval_ms=10), counts, 0.0)
    ends = {TopicPartition("orders", p): 100 for p in range(3)}
    groups.commit_due(0.0, ends.get, lambda _tp: 0.0, lambda t: counts[t])
    assert sorted(group.committed) == [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    counts["orders"] = 3  # a partition added to the topic
    groups.commit_due(20.0, ends.get, lambda _tp: 0.0, lambda t: counts[t])
    assert group.committed[TopicPartition("orders", 2)] == 100
