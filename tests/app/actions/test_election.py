"""The preferred replica election planner: one test per ineligibility reason (the ZK-mode controller's rules,
docs/kafka-reference.md §2), the scope checks, the znode payload chunker (50k partitions under the budget, in
Kafka's format) and the verification afterwards."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.actions.election import (
    ALREADY_LEADER,
    DEFAULT_BUDGET_BYTES,
    ELECTED,
    JUTE_MAXBUFFER,
    MIN_PAYLOAD_BYTES,
    NO_REPLICAS,
    NO_STATE,
    NOT_ELECTED,
    PREFERRED_REPLICA_DEAD,
    PREFERRED_REPLICA_NOT_IN_ISR,
    TOPIC_BEING_DELETED,
    UNKNOWN_PARTITION,
    ElectionScope,
    chunk_payloads,
    plan_preferred_election,
    validate_scope,
    verify_election,
)
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, PendingOperations, TopicPartition
from collectors.kafka.zkdata import (
    PREFERRED_REPLICA_ELECTION_PATH,
    decode_partition_list,
    encode_partition_list,
)
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit

# --- builders ----------------------------------------------------------------------------------------


def tp(topic: str, index: int) -> TopicPartition:
    return TopicPartition(topic, index)


def reasons(snapshot: ClusterSnapshot, scope: ElectionScope | None = None) -> dict[TopicPartition, str]:
    plan = plan_preferred_election(snapshot, scope or ElectionScope.all_partitions())
    return dict(plan.ineligible)


# --- eligibility -------------------------------------------------------------------------------------


def test_partition_led_by_another_in_sync_replica_is_elected() -> None:
    plan = plan_preferred_election(
        cluster(partition("t", 0, [1, 2, 3], leader=2)), ElectionScope.all_partitions()
    )

    assert plan.to_elect == (tp("t", 0),)
    assert plan.ineligible == ()
    assert plan.problems == ()


def test_offline_partition_whose_preferred_replica_is_alive_and_in_isr_is_elected() -> None:
    """The controller elects an offline partition's preferred replica if it can (OfflinePartition ->
    OnlinePartition with the preferred strategy)."""
    plan = plan_preferred_election(
        cluster(partition("t", 0, [1, 2], isr=[1], leader=NO_LEADER)), ElectionScope.all_partitions()
    )

    assert plan.to_elect == (tp("t", 0),)


def test_already_leader() -> None:
    assert reasons(cluster(partition("t", 0, [1, 2, 3]))) == {tp("t", 0): ALREADY_LEADER}


def test_preferred_replica_dead_when_not_registered() -> None:
    snapshot = cluster(partition("t", 0, [4, 2, 3], isr=[4, 2, 3], leader=2))

    assert reasons(snapshot) == {tp("t", 0): PREFERRED_REPLICA_DEAD}


def test_preferred_replica_not_in_isr() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3], isr=[2, 3], leader=2))

    assert reasons(snapshot) == {tp("t", 0): PREFERRED_REPLICA_NOT_IN_ISR}


def test_partition_without_state_znode() -> None:
    assert reasons(cluster(partition("t", 0, [1, 2], with_state=False))) == {tp("t", 0): NO_STATE}


def test_partition_without_replicas() -> None:
    assert reasons(cluster(partition("t", 0, [], isr=[], leader=NO_LEADER))) == {tp("t", 0): NO_REPLICAS}


@pytest.mark.parametrize("how", ["marked", "pending"])
def test_topic_being_deleted_is_skipped_before_the_leader_check(how: str) -> None:
    """Kafka checks deletion before "election not needed", so a deleting topic's partition reports the
    deletion even when its preferred replica leads."""
    p = partition("t", 0, [1, 2, 3])
    snapshot = (
        cluster(p, deleting=["t"])
        if how == "marked"
        else cluster(p, pending=PendingOperations(deletions=("t",)))
    )

    assert reasons(snapshot) == {tp("t", 0): TOPIC_BEING_DELETED}


def test_unknown_partition_in_scope() -> None:
    snapshot = cluster(partition("t", 0, [1, 2, 3], leader=2))
    scope = ElectionScope.of_partitions([tp("t", 0), tp("t", 7), tp("nope", 0)])
    plan = plan_preferred_election(snapshot, scope)

    assert plan.to_elect == (tp("t", 0),)
    assert dict(plan.ineligible) == {tp("t", 7): UNKNOWN_PARTITION, tp("nope", 0): UNKNOWN_PARTITION}
    assert [(p.code, p.topic, p.partition) for p in plan.problems] == [
        ("unknown_partition", "t", 7),
        ("unknown_partition", "nope", 0),
    ]


def test_every_reason_at_once_and_grouped() -> None:
    snapshot = cluster(
        partition("a", 0, [1, 2], leader=2),  # to elect
        partition("a", 1, [1, 2]),  # already leader
        partition("a", 2, [9, 2], isr=[9, 2], leader=2),  # dead
        partition("a", 3, [3, 1], isr=[1], leader=1),  # not in ISR
        partition("a", 4, [1, 2], with_state=False),  # no state
        partition("d", 0, [1, 2], leader=2),  # deleting
        deleting=["d"],
    )
    plan = plan_preferred_election(snapshot, ElectionScope.all_partitions())

    assert plan.to_elect == (tp("a", 0),)
    assert plan.ineligible_by_reason() == {
        ALREADY_LEADER: [tp("a", 1)],
        PREFERRED_REPLICA_DEAD: [tp("a", 2)],
        PREFERRED_REPLICA_NOT_IN_ISR: [tp("a", 3)],
        NO_STATE: [tp("a", 4)],
        TOPIC_BEING_DELETED: [tp("d", 0)],
    }


# --- leader counts -----------------------------------------------------------------------------------


def test_current_and_predicted_leader_counts() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2, 3], leader=2),
        partition("t", 1, [1, 2, 3], leader=2),
        partition("t", 2, [2, 3, 1], leader=3),
        partition("t", 3, [3, 1, 2], isr=[1, 2], leader=1),  # preferred 3 not in ISR: stays with 1
        partition("t", 4, [1, 2], isr=[1], leader=NO_LEADER),  # offline: 1 takes it
        brokers=[1, 2, 3, 4],
    )
    plan = plan_preferred_election(snapshot, ElectionScope.all_partitions())

    assert plan.current_leaders == {1: 1, 2: 2, 3: 1, 4: 0}
    assert plan.predicted_leaders == {1: 4, 2: 1, 3: 0, 4: 0}
    assert sum(plan.predicted_leaders.values()) == sum(plan.current_leaders.values()) + 1


# --- scope -------------------------------------------------------------------------------------------


def test_topic_scope_takes_only_those_topics() -> None:
    snapshot = cluster(partition("a", 0, [1, 2], leader=2), partition("b", 0, [1, 2], leader=2))
    plan = plan_preferred_election(snapshot, ElectionScope.of_topics(["b"]))

    assert plan.to_elect == (tp("b", 0),)
    assert plan.ineligible == ()


def test_scope_problems_are_all_named() -> None:
    snapshot = cluster(partition("a", 0, [1, 2]))

    topic_problems = validate_scope(snapshot, ElectionScope.of_topics(["a", "a", "x", "y"]))
    assert [(p.code, p.topic) for p in topic_problems] == [
        ("duplicate_topic", "a"),
        ("unknown_topic", "x"),
        ("unknown_topic", "y"),
    ]
    partition_problems = validate_scope(
        snapshot, ElectionScope.of_partitions([tp("a", 0), tp("a", 0), tp("a", 1)])
    )
    assert [(p.code, p.topic, p.partition) for p in partition_problems] == [
        ("duplicate_partition", "a", 0),
        ("unknown_partition", "a", 1),
    ]
    assert [p.code for p in validate_scope(snapshot, ElectionScope.of_topics([]))] == ["empty_scope"]
    assert [p.code for p in validate_scope(snapshot, ElectionScope.of_partitions([]))] == ["empty_scope"]
    assert validate_scope(snapshot, ElectionScope.all_partitions()) == []


def test_scope_kind_and_content_must_match() -> None:
    with pytest.raises(ValueError, match="must be all, topics or partitions"):
        ElectionScope("some")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="takes no topics"):
        ElectionScope("all", topics=("a",))
    with pytest.raises(ValueError, match="takes no partitions"):
        ElectionScope("topics", partitions=(tp("a", 0),))


def test_pending_election_is_reported() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2], leader=2), pending=PendingOperations(preferred_election=(tp("t", 0),))
    )

    assert plan_preferred_election(snapshot, ElectionScope.all_partitions()).election_in_progress == (
        tp("t", 0),
    )


# --- payloads ----------------------------------------------------------------------------------------


def many_partitions(n: int) -> list[TopicPartition]:
    """``n`` partitions over topics with realistic names, 100 partitions each."""
    return [tp(f"payments.card-authorisations.v{i // 100:05d}", i % 100) for i in range(n)]


def entries(payload: bytes) -> list[TopicPartition]:
    return decode_partition_list(PREFERRED_REPLICA_ELECTION_PATH, payload)


def test_fifty_thousand_partitions_go_in_chunks_under_the_budget() -> None:
    """The issue's "done": every payload under the budget, all of them together naming every partition
    once in order, each valid JSON in Kafka's format."""
    partitions = many_partitions(50_000)
    single = encode_partition_list(partitions)
    assert len(single) > JUTE_MAXBUFFER  # what Kafka's tool would write: refused by ZooKeeper

    payloads = chunk_payloads(partitions)

    assert len(payloads) == -(-len(single) // DEFAULT_BUDGET_BYTES)  # as few chunks as the bytes need
    assert all(len(p) <= DEFAULT_BUDGET_BYTES for p in payloads)
    assert [e for p in payloads for e in entries(p)] == partitions
    for payload in payloads:
        obj = json.loads(payload)
        assert set(obj) == {"version", "partitions"}
        assert obj["version"] == 1
        assert all(set(e) == {"topic", "partition"} for e in obj["partitions"])
        assert payload == encode_partition_list(entries(payload))


def test_budget_is_a_hard_limit_to_the_byte() -> None:
    two = [tp("t", 0), tp("t", 1)]
    exact = len(encode_partition_list(two))

    assert chunk_payloads(two, exact) == [encode_partition_list(two)]
    assert chunk_payloads(two, exact - 1) == [encode_partition_list([p]) for p in two]


def test_duplicates_are_written_once_and_nothing_gives_no_payload() -> None:
    assert chunk_payloads([tp("t", 0), tp("t", 0), tp("t", 1)]) == [
        encode_partition_list([tp("t", 0), tp("t", 1)])
    ]
    assert chunk_payloads([]) == []


def test_budget_below_the_smallest_payload_is_refused() -> None:
    assert len(b'{"version":1,"partitions":[{"topic":"t","partition":0}]}') == MIN_PAYLOAD_BYTES
    with pytest.raises(ValueError, match="below the smallest election payload"):
        chunk_payloads([tp("t", 0)], MIN_PAYLOAD_BYTES - 1)
    with pytest.raises(ValueError, match="above the znode limit"):
        chunk_payloads([tp("t", 0)], JUTE_MAXBUFFER + 1)


def test_partition_too_large_for_the_budget_is_named() -> None:
    long_topic = tp("x" * 200, 0)
    with pytest.raises(ValueError, match=r"partition x+-0 alone needs"):
        chunk_payloads([tp("t", 0), long_topic], 120)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "bb", "topic-ünïcode", "t" * 40]), st.integers(0, 10**6)),
        max_size=300,
    ),
    st.integers(min_value=110, max_value=4000),
)
def test_chunks_always_cover_every_partition_once_under_the_budget(
    raw: list[tuple[str, int]], budget: int
) -> None:
    partitions = [tp(t, p) for t, p in raw]

    payloads = chunk_payloads(partitions, budget)

    assert all(len(p) <= budget for p in payloads)
    assert [e for p in payloads for e in entries(p)] == list(dict.fromkeys(partitions))
    # greedy: no payload could have taken the next one's first partition
    for current, following in itertools.pairwise(payloads):
        assert len(encode_partition_list([*entries(current), entries(following)[0]])) > budget


# --- verification ------------------------------------------------------------------------------------


def test_verify_groups_partitions_by_outcome() -> None:
    snapshot = cluster(
        partition("t", 0, [1, 2]),  # elected
        partition("t", 1, [1, 2], leader=2),  # could be, is not
        partition("t", 2, [1, 2], isr=[2], leader=2),  # preferred fell out of the ISR
        partition("t", 3, [5, 2], isr=[2], leader=2),  # preferred died
    )

    outcome = verify_election(snapshot, [tp("t", 0), tp("t", 1), tp("t", 2), tp("t", 3), tp("t", 9)])

    assert outcome == {
        ELECTED: [tp("t", 0)],
        NOT_ELECTED: [tp("t", 1)],
        PREFERRED_REPLICA_NOT_IN_ISR: [tp("t", 2)],
        PREFERRED_REPLICA_DEAD: [tp("t", 3)],
        UNKNOWN_PARTITION: [tp("t", 9)],
    }


def test_verify_counts_a_partition_led_by_its_preferred_replica_as_elected_even_if_deleting() -> None:
    snapshot = cluster(partition("t", 0, [1, 2]), deleting=["t"])

    assert verify_election(snapshot, [tp("t", 0)]) == {ELECTED: [tp("t", 0)]}
