"""The ZooKeeper collector against the reference cluster: after every fault the cluster can inject, the
live snapshot (kept current by watches, never rescanned) agrees with ZooKeeper's ground truth read afresh,
both by a one-shot ``scan`` and by the test harness's own kazoo reader (``zk_partitions``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.zookeeper.collector import ZooKeeperCollector, scan
from tests.support.reference_cluster import ClusterFactory, wait_for, zk_partitions

pytestmark = pytest.mark.integration

Condition = Callable[[ClusterSnapshot], bool]
FAULT_TIMEOUT = 60.0  # generous: the machine may be loaded; the wait is for the event, not a bound


def content(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """Everything a snapshot says about the cluster (not when or which version)."""
    return {
        "cluster_id": snapshot.cluster_id,
        "brokers": dict(snapshot.brokers),
        "controller": snapshot.controller,
        "topics": dict(snapshot.topics),
        "partitions": dict(snapshot.partitions),
        "broker_configs": {k: dict(v) for k, v in snapshot.broker_configs.items()},
        "preferred_election": snapshot.pending.preferred_election,
        "reassignments": dict(snapshot.pending.reassignments),
        "deletions": snapshot.pending.deletions,
        "errors": snapshot.errors,
    }


def independent_view(zk: KazooClient) -> dict[tuple[str, int], tuple[Any, ...]]:
    return {k: (p.replicas, p.adding_replicas, p.leader, p.isr) for k, p in zk_partitions(zk).items()}


def collector_view(snapshot: ClusterSnapshot) -> dict[tuple[str, int], tuple[Any, ...]]:
    return {
        (tp.topic, tp.partition): (
            p.replicas,
            p.assignment.adding_replicas,
            None if p.state is None else p.leader,
            p.isr,
        )
        for tp, p in snapshot.partitions.items()
    }


class Agreement:
    """Waits until ZooKeeper shows a fault (``condition`` on a fresh scan) and the collector agrees."""

    def __init__(self, collector: ZooKeeperCollector, connect: str, zk: KazooClient) -> None:
        self.collector = collector
        self.connect = connect
        self.zk = zk

    def __call__(self, what: str, condition: Condition, timeout: float = FAULT_TIMEOUT) -> ClusterSnapshot:
        differences: list[str] = []

        def agreed() -> ClusterSnapshot | None:
            truth = scan(self.connect, timeout=10, connections=1)
            mine = self.collector.snapshot
            if not condition(truth):
                differences[:] = ["ZooKeeper does not show it yet"]
                return None
            ours, theirs = content(mine), content(truth)
            differences[:] = [key for key in ours if ours[key] != theirs[key]]
            if not differences and collector_view(mine) != independent_view(self.zk):
                differences.append("partitions differ from the harness's reading")
            return None if differences else mine

        try:
            snapshot = wait_for(agreed, timeout, what)
        except AssertionError:
            raise AssertionError(f"{what}: the collector disagrees with ZooKeeper on {differences}") from None
        assert not snapshot.stale
        assert self.collector.full_scans == 1, "kept current by watches, never rescanned"
        return snapshot


@pytest.fixture
def agree(zk_connect: str, zk_client: KazooClient) -> Iterator[Callable[[ReferenceCluster], Agreement]]:
    collectors: list[ZooKeeperCollector] = []

    def start(cluster: ReferenceCluster) -> Agreement:
        collector = ZooKeeperCollector(zk_connect, connections=2)
        collectors.append(collector)
        collector.start(timeout=15)
        agreement = Agreement(collector, zk_connect, zk_client)
        agreement("the started cluster", lambda s: len(s.brokers) == len(cluster.brokers))
        return agreement

    yield start
    for collector in collectors:
        collector.stop()


def led_by(snapshot: ClusterSnapshot, broker: int) -> list[TopicPartition]:
    return [tp for tp, p in snapshot.partitions.items() if p.leader == broker]


def followed_by(snapshot: ClusterSnapshot, broker: int) -> list[TopicPartition]:
    return [tp for tp, p in snapshot.partitions.items() if broker in p.replicas and p.leader != broker]


def test_broker_and_controller_faults(
    make_cluster: ClusterFactory, agree: Callable[[ReferenceCluster], Agreement]
) -> None:
    cluster = make_cluster(brokers=4, topics=[TopicSpec(name="orders", partitions=8, replication_factor=3)])
    check = agree(cluster)
    start = check.collector.snapshot
    assert start.controller.broker_id is not None
    victim = next(b for b in cluster.brokers if b != start.controller.broker_id and led_by(start, b))

    cluster.stop_broker(victim)
    stopped = check(
        f"broker {victim} stopped",
        lambda s: victim not in s.brokers and all(p.leader != victim for p in s.partitions.values()),
    )
    assert not led_by(stopped, victim)

    cluster.start_broker(victim)
    check(f"broker {victim} back", lambda s: victim in s.brokers)

    old = check.collector.snapshot.controller
    cluster.stop_controller()
    moved = check(
        "the controller stopped",
        lambda s: (
            s.controller.broker_id not in (None, old.broker_id)
            and (s.controller.epoch or 0) > (old.epoch or 0)
        ),
    )
    assert moved.controller.epoch_zk_version is not None

    lost = cluster.fail_log_dir(victim, 0)
    assert lost, "the victim has replicas on log dir 0"
    check(
        f"log dir 0 of broker {victim} failed",
        lambda s: all(victim not in s.partitions[tp].isr for tp in lost),
    )


@pytest.mark.parametrize("fault", ["stall", "slow"])
def test_follower_faults(
    make_cluster: ClusterFactory, agree: Callable[[ReferenceCluster], Agreement], fault: str
) -> None:
    cluster = make_cluster()
    check = agree(cluster)
    followed = followed_by(check.collector.snapshot, 0)
    assert followed

    (cluster.stall_follower if fault == "stall" else cluster.slow_follower)(0)
    shrunk = check(
        f"broker 0 {fault}ed",
        lambda s: all(0 not in s.partitions[tp].isr for tp in followed),
    )
    assert all(len(shrunk.partitions[tp].isr) < len(shrunk.partitions[tp].replicas) for tp in followed)

    cluster.resume_follower(0)
    check("broker 0 resumed", lambda s: all(0 in s.partitions[tp].isr for tp in followed))


def test_admin_operations(
    make_cluster: ClusterFactory, agree: Callable[[ReferenceCluster], Agreement]
) -> None:
    cluster = make_cluster(brokers=4, topics=[TopicSpec(name="orders", partitions=4, replication_factor=2)])
    assert cluster.admin is not None
    check = agree(cluster)
    tps = [TopicPartition("orders", p) for p in range(4)]
    preferred = check.collector.snapshot.partitions[tps[0]].assignment.preferred_leader

    cluster.stop_broker(preferred)
    check("the preferred leader stopped", lambda s: s.partitions[tps[0]].leader not in (preferred, -1))
    cluster.start_broker(preferred)
    check(
        "the preferred leader back in the ISR, not leading",
        lambda s: preferred in s.partitions[tps[0]].isr and s.partitions[tps[0]].leader != preferred,
    )
    cluster.admin.elect_preferred(tps)
    check(
        "a preferred replica election",
        lambda s: s.partitions[tps[0]].leader == preferred and not s.pending.preferred_election,
    )

    origin = check.collector.snapshot.partitions[tps[1]].replicas
    target = tuple(b for b in cluster.brokers if b not in origin)[:2]
    cluster.admin.reassign({tps[1]: target})
    done = check(
        "a reassignment",
        lambda s: s.partitions[tps[1]].replicas == target and not s.pending.reassignments,
        timeout=20,
    )
    assert not done.partitions[tps[1]].assignment.is_being_reassigned

    cluster.admin.set_config("topics", "orders", {"min.insync.replicas": "2"})
    cluster.admin.set_config("brokers", "<default>", {"unclean.leader.election.enable": "false"})
    check(
        "config changes",
        lambda s: (
            s.topics["orders"].config.get("min.insync.replicas") == "2" and "<default>" in s.broker_configs
        ),
    )


def test_topic_lifecycle(
    make_cluster: ClusterFactory, agree: Callable[[ReferenceCluster], Agreement]
) -> None:
    cluster = make_cluster()
    assert cluster.admin is not None
    check = agree(cluster)

    cluster.create_topic(TopicSpec(name="fresh", partitions=3, replication_factor=2))
    created = check(
        "a topic created",
        lambda s: (
            sum(tp.topic == "fresh" for tp in s.partitions) == 3
            and all(p.state is not None for p in s.partitions.values())
        ),
    )
    assert created.topics["fresh"].topic_id is not None

    cluster.admin.add_partitions("fresh", 5)
    check(
        "partitions added",
        lambda s: (
            sum(tp.topic == "fresh" for tp in s.partitions) == 5
            and all(p.state is not None for p in s.partitions.values())
        ),
    )

    cluster.admin.delete_topic("fresh")
    deleted = check(
        "a topic deleted",
        lambda s: "fresh" not in s.topics and not s.pending.deletions,
    )
    assert all(tp.topic == "orders" for tp in deleted.partitions)
