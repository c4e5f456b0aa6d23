"""The reader's batched requests against the reference cluster: the committed offsets of many groups in
one OffsetFetch v8 per coordinator (Kafka 3.0+), one group per request from a broker without v8 (before
Kafka 3.0), the same answers either way; the groups' coordinators named by ListGroups."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ConsumerGroupSpec, TopicSpec
from collectors.consumers.client import GroupOffsetsReader, KafkaPythonReader, open_reader
from collectors.consumers.collector import ConsumerLagCollector
from collectors.consumers.config import KafkaSettings
from collectors.kafka.model import TopicPartition
from tests.support.reference_cluster import ClusterFactory, small_settings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

GROUPS = 24
TOPICS = [
    TopicSpec(name="orders", partitions=4, replication_factor=3),
    TopicSpec(name="payments", partitions=3, replication_factor=2),
]


def group_specs() -> list[ConsumerGroupSpec]:
    """Groups on every coordinator (24 names hash to several ``__consumer_offsets`` partitions), an hour
    between commits: their committed offsets stay those of their first commit while the test reads."""
    return [
        ConsumerGroupSpec(
            name=f"g{i:02d}",
            topics=["orders", "payments"] if i % 3 == 0 else ["orders"],
            members=1 + i % 3,
            commit_interval_ms=3_600_000,
        )
        for i in range(GROUPS)
    ]


def committed_by_cluster(cluster: ReferenceCluster) -> dict[str, dict[TopicPartition, int]]:
    return cluster.loop.call(
        lambda: {name: dict(g.committed) for name, g in cluster.consumer_groups.groups.items()}
    )


def reader_of(cluster: ReferenceCluster) -> KafkaPythonReader:
    return open_reader(KafkaSettings(bootstrap_servers=cluster.kafka_bootstrap(), timeout_s=20), {})


@pytest.fixture(params=["3.9", "2.8"], ids=["kafka-3.9", "kafka-2.8"])
def cluster(request: pytest.FixtureRequest, make_cluster: ClusterFactory) -> ReferenceCluster:
    """A cluster whose groups were all started at once (``consumer_groups`` in its settings)."""
    return make_cluster(
        small_settings(
            topics=TOPICS,
            consumer_groups=group_specs(),
            listener_port_base=0,
            inter_broker_protocol_version=request.param,
        )
    )


@pytest.fixture
def reader(cluster: ReferenceCluster) -> Iterator[KafkaPythonReader]:
    r = reader_of(cluster)
    yield r
    r.close()


def test_the_offsets_of_every_group_in_one_call(cluster: ReferenceCluster, reader: KafkaPythonReader) -> None:
    groups = reader.list_groups()
    assert groups == sorted(s.name for s in group_specs())
    # batched where the brokers speak OffsetFetch v8 (Kafka 3.0+), one group per request before
    assert reader.batched_offset_fetch is (cluster.settings.ibp >= (3, 0, 0))
    offsets, errors = reader.committed_offsets_of(groups)
    assert errors == {}
    expected = committed_by_cluster(cluster)
    assert {g: {tp: c.offset for tp, c in o.items()} for g, o in offsets.items()} == expected
    assert all(len(expected[g]) == (7 if int(g[1:]) % 3 == 0 else 4) for g in groups)
    # the single-group call agrees
    assert {tp: c.offset for tp, c in reader.committed_offsets("g05").items()} == expected["g05"]


def test_a_group_nobody_coordinates_has_no_offsets(reader: KafkaPythonReader) -> None:
    offsets, errors = reader.committed_offsets_of(["g00", "nobody"])
    assert errors == {}
    assert offsets["nobody"] == {}
    assert offsets["g00"]


def test_descriptions_come_from_each_groups_coordinator(reader: KafkaPythonReader) -> None:
    described = reader.describe_groups(reader.list_groups())
    assert sorted(described) == sorted(s.name for s in group_specs())
    for spec in group_specs():
        d = described[spec.name]
        assert d.state == "Stable"
        assert len(d.members) == spec.members
        partitions = 4 + (3 if "payments" in spec.topics else 0)
        assert sum(len(m.assignment) for m in d.members) == partitions


def test_a_collector_round_reads_every_group(cluster: ReferenceCluster, reader: GroupOffsetsReader) -> None:
    result = ConsumerLagCollector(reader).round()
    assert result.errors == {}
    assert sorted(result.groups) == sorted(s.name for s in group_specs())
    ends = cluster.loop.call(
        lambda: {tp: cluster.high_watermark(tp) for tp in committed_by_cluster(cluster)["g00"]}
    )
    report = result.groups["g00"]
    assert len(report.lag.partitions) == 7
    for p in report.lag.partitions:
        assert p.log_end is not None
        assert p.log_end <= (ends[p.tp] or 0) + 10_000  # read a moment earlier; the log only grows
        assert p.log_start is not None
        assert p.log_start <= p.log_end


def test_a_moved_leader_is_found_again_within_the_call(make_cluster: ClusterFactory) -> None:
    """The reader keeps the partitions' leaders between rounds; a leader that moved answers
    NOT_LEADER_OR_FOLLOWER, and the call asks Metadata again and then the new leader."""
    cluster = make_cluster(small_settings(topics=TOPICS, listener_port_base=0))
    reader = reader_of(cluster)
    try:
        tps = [TopicPartition("orders", p) for p in range(4)]
        assert set(reader.log_offsets(tps)) == set(tps)
        moved = tps[0]
        leader = cluster.loop.call(lambda: cluster.partition_state(moved)).leader  # type: ignore[union-attr]
        cluster.stop_broker(leader)
        wait_leader_moved(cluster, moved, leader)
        assert set(reader.log_offsets(tps)) == set(tps)
    finally:
        reader.close()


def wait_leader_moved(cluster: ReferenceCluster, tp: TopicPartition, old: int) -> None:
    from tests.support.reference_cluster import wait_for

    def moved() -> Any:
        state = cluster.loop.call(lambda: cluster.partition_state(tp))
        return state is not None and state.leader not in (old, -1)

    wait_for(moved, 60, f"a new leader of {tp}")
