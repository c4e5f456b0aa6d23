"""The seeds' worked stories, replayed on the reference cluster against a real ZooKeeper.

Every assertion reads ZooKeeper as a collector would (a separate kazoo session), never the simulation's
memory: the point is that what the cluster writes is what ZK-mode Kafka writes.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TopicSpec
from collectors.kafka.model import TopicPartition
from tests.support.reference_cluster import LAG_MS, ClusterFactory, controller_epoch, controller_id, wait_for
from tests.support.zookeeper import expire_session

pytestmark = pytest.mark.integration


def state(zk: KazooClient, topic: str, partition: int) -> dict[str, Any]:
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    result: dict[str, Any] = json.loads(data)
    result["zk_version"] = stat.version
    return result


Json = dict[str, Any]


def state_when(
    zk: KazooClient, topic: str, partition: int, condition: Callable[[Json], bool]
) -> Callable[[], Json | None]:
    """A ``wait_for`` predicate: the partition's state once ``condition`` holds for it."""

    def check() -> Json | None:
        current = state(zk, topic, partition)
        return current if condition(current) else None

    return check


def topic_when(zk: KazooClient, topic: str, condition: Callable[[Json], bool]) -> Callable[[], Json | None]:
    def check() -> Json | None:
        current = topic_znode(zk, topic)
        return current if condition(current) else None

    return check


def topic_znode(zk: KazooClient, topic: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(zk.get(f"/brokers/topics/{topic}")[0])
    return result


def replicas(zk: KazooClient, topic: str, partition: int) -> list[int]:
    result: list[int] = topic_znode(zk, topic)["partitions"][str(partition)]
    return result


def test_seed_003_failover_restart_and_preferred_election(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    """test-multi-1, 3 brokers, 2 partitions, RF 3: stop AR[0], start it, elect the preferred leader."""
    cluster = make_cluster(topics=[TopicSpec(name="test-multi-1", partitions=2, replication_factor=3)])
    ar = replicas(zk_client, "test-multi-1", 0)
    before = state(zk_client, "test-multi-1", 0)
    assert before["leader"] == ar[0]
    assert sorted(before["isr"]) == sorted(ar)

    cluster.stop_broker(ar[0])
    after_stop = wait_for(
        state_when(zk_client, "test-multi-1", 0, lambda s: s["leader"] == ar[1]),
        message="the next replica in AR to lead",
    )
    assert ar[0] not in after_stop["isr"]
    assert sorted(after_stop["isr"]) == sorted(ar[1:])
    assert after_stop["leader_epoch"] > before["leader_epoch"]
    assert not zk_client.exists(f"/brokers/ids/{ar[0]}")

    cluster.start_broker(ar[0])
    back = wait_for(
        state_when(zk_client, "test-multi-1", 0, lambda s: ar[0] in s["isr"]),
        message=f"broker {ar[0]} back in the ISR",
    )
    assert back["leader"] == ar[1], "a restarted broker never takes leadership back by itself"
    assert zk_client.exists(f"/brokers/ids/{ar[0]}")

    zk_client.create(
        "/admin/preferred_replica_election",
        json.dumps({"version": 1, "partitions": [{"topic": "test-multi-1", "partition": 0}]}).encode(),
        makepath=True,
    )
    elected = wait_for(
        state_when(zk_client, "test-multi-1", 0, lambda s: s["leader"] == ar[0]),
        message="the preferred replica to lead again",
    )
    assert elected["leader_epoch"] == back["leader_epoch"] + 1
    assert sorted(elected["isr"]) == sorted(ar)
    wait_for(lambda: not zk_client.exists("/admin/preferred_replica_election"), message="the znode deleted")


def test_seed_004_restart_leaves_non_preferred_leaders_until_one_election(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    """topic-1, 3 brokers, 9 partitions, RF 3: restarting broker 2 leaves its partitions led by others."""
    cluster = make_cluster(topics=[TopicSpec(name="topic-1", partitions=9, replication_factor=3)])
    preferred_on_2 = [p for p in range(9) if replicas(zk_client, "topic-1", p)[0] == 2]
    assert len(preferred_on_2) == 3

    cluster.stop_broker(2)
    wait_for(lambda: all(state(zk_client, "topic-1", p)["leader"] != 2 for p in range(9)), message="failover")
    cluster.start_broker(2)
    wait_for(
        lambda: all(2 in state(zk_client, "topic-1", p)["isr"] for p in range(9)),
        message="broker 2 in every ISR",
    )
    non_preferred = [
        p
        for p in range(9)
        if state(zk_client, "topic-1", p)["leader"] != replicas(zk_client, "topic-1", p)[0]
    ]
    assert non_preferred == preferred_on_2

    assert cluster.admin is not None
    cluster.admin.elect_preferred(TopicPartition("topic-1", p) for p in range(9))
    wait_for(
        lambda: all(
            state(zk_client, "topic-1", p)["leader"] == replicas(zk_client, "topic-1", p)[0] for p in range(9)
        ),
        message="every partition led by its preferred replica",
    )


def test_controller_failover_bumps_controller_epoch(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="t", partitions=3, replication_factor=3)])
    old_controller, old_epoch = controller_id(zk_client), controller_epoch(zk_client)
    assert old_controller is not None
    assert cluster.stop_controller() == old_controller
    new_controller = wait_for(
        lambda: (c := controller_id(zk_client)) is not None and c != old_controller and c,
        message="a new controller",
    )
    assert controller_epoch(zk_client) == old_epoch + 1
    controller_znode = json.loads(zk_client.get("/controller")[0])
    assert controller_znode["brokerid"] == new_controller
    # The new controller's writes carry its epoch: the old controller's partitions moved.
    led_by_old = [p for p in range(3) if replicas(zk_client, "t", p)[0] == old_controller]
    for partition in led_by_old:

        def moved(p: int = partition) -> dict[str, Any] | None:
            current = state(zk_client, "t", p)
            return current if current["leader"] != old_controller else None

        assert wait_for(moved)["controller_epoch"] == old_epoch + 1


def test_stalled_follower_leaves_isr_after_lag_time_and_rejoins(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="t", partitions=3, replication_factor=3)])
    followed = [p for p in range(3) if state(zk_client, "t", p)["leader"] != 1]
    epochs = {p: state(zk_client, "t", p)["leader_epoch"] for p in followed}
    stalled_at = time.time()
    cluster.stall_follower(1)
    wait_for(lambda: all(1 not in state(zk_client, "t", p)["isr"] for p in followed), timeout=60)
    tick_s = cluster.settings.tick_ms / 1000
    for p in followed:
        # when the ISR was written (the znode's mtime: ZooKeeper's clock, this host's), not when seen here
        shrunk_at = zk_client.get(f"/brokers/topics/t/partitions/{p}/state")[1].mtime / 1000
        assert shrunk_at - stalled_at >= LAG_MS / 1000 - 2 * tick_s, "left the ISR before the lag time"
        assert state(zk_client, "t", p)["leader_epoch"] == epochs[p], "a leader's ISR change keeps the epoch"

    cluster.resume_follower(1)
    wait_for(
        lambda: all(1 in state(zk_client, "t", p)["isr"] for p in followed), message="rejoin after resume"
    )


def test_slow_follower_leaves_isr(make_cluster: ClusterFactory, zk_client: KazooClient) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="t", partitions=2, replication_factor=3)])
    followed = [p for p in range(2) if state(zk_client, "t", p)["leader"] != 0]
    cluster.slow_follower(0)
    wait_for(lambda: all(0 not in state(zk_client, "t", p)["isr"] for p in followed), timeout=60)
    cluster.resume_follower(0)
    wait_for(lambda: all(0 in state(zk_client, "t", p)["isr"] for p in followed))


def test_throttled_reassignment_runs_as_kafka_runs_it(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    """AR = target ++ origin with adding/removing while it runs, throttled copy, then the target only."""
    log_bytes, rate = 2 * 1024 * 1024, 1024 * 1024
    cluster = make_cluster(brokers=4)
    assert cluster.admin is not None
    cluster.admin.create_topic("moving", 1, 2, assignment={0: [0, 1]})
    wait_for(lambda: zk_client.exists("/brokers/topics/moving/partitions/0/state"), message="the partition")
    wait_for(
        lambda: cluster.loop.call(
            lambda: cluster.brokers[0].logs.get(TopicPartition("moving", 0)) is not None
        )
    )
    # Give the log some data to copy: write at 2 MiB/s for a second.
    cluster.skew({"topics": {"moving": log_bytes / cluster.settings.traffic.produce_bytes_per_sec}})
    time.sleep(1.0)
    cluster.skew({"reset": True})
    for broker in (2, 3):
        cluster.admin.set_config("brokers", str(broker), {"follower.replication.throttled.rate": str(rate)})
    cluster.admin.set_config("topics", "moving", {"follower.replication.throttled.replicas": "0:2,0:3"})
    started = time.monotonic()
    cluster.admin.reassign({TopicPartition("moving", 0): (2, 3)})

    running = wait_for(topic_when(zk_client, "moving", lambda z: bool(z["adding_replicas"])))
    assert running["partitions"]["0"] == [2, 3, 0, 1]
    assert running["adding_replicas"]["0"] == [2, 3]
    assert running["removing_replicas"]["0"] == [0, 1]
    assert running["topic_id"], "the controller keeps the topic id"

    done = wait_for(topic_when(zk_client, "moving", lambda z: not z["adding_replicas"]), timeout=30)
    elapsed = time.monotonic() - started
    assert done["partitions"]["0"] == [2, 3]
    assert done["removing_replicas"] == {}
    final = state(zk_client, "moving", 0)
    assert final["leader"] in (2, 3)
    assert set(final["isr"]) <= {2, 3}
    wait_for(
        lambda: not zk_client.exists("/admin/reassign_partitions"), message="the reassignment znode deleted"
    )
    assert elapsed >= 0.6 * log_bytes / rate, f"the throttle was not honoured: {elapsed:.1f} s"


def test_all_replicas_down_leaves_leader_minus_one_and_the_last_isr_member(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster()
    assert cluster.admin is not None
    cluster.admin.create_topic("fragile", 1, 2, assignment={0: [1, 2]})
    wait_for(lambda: zk_client.exists("/brokers/topics/fragile/partitions/0/state"))
    cluster.stop_broker(2)
    wait_for(lambda: state(zk_client, "fragile", 0)["isr"] == [1])
    epoch = state(zk_client, "fragile", 0)["leader_epoch"]
    cluster.stop_broker(1)
    offline = wait_for(state_when(zk_client, "fragile", 0, lambda s: s["leader"] == -1))
    assert offline["isr"] == [1], "Kafka leaves the last ISR member in an ISR of one"
    assert offline["leader_epoch"] == epoch + 1
    assert "leader_recovery_state" not in offline

    cluster.start_broker(2)  # not in the ISR: no clean election possible
    time.sleep(0.5)
    assert state(zk_client, "fragile", 0)["leader"] == -1
    cluster.start_broker(1)  # the last ISR member: elected cleanly
    wait_for(lambda: state(zk_client, "fragile", 0)["leader"] == 1)


def test_unclean_election_when_the_topic_allows_it(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster()
    assert cluster.admin is not None
    cluster.admin.create_topic(
        "lossy", 1, 2, config={"unclean.leader.election.enable": "true"}, assignment={0: [1, 2]}
    )
    wait_for(lambda: zk_client.exists("/brokers/topics/lossy/partitions/0/state"))
    cluster.stall_follower(2)
    wait_for(lambda: state(zk_client, "lossy", 0)["isr"] == [1], timeout=60)
    cluster.stop_broker(1)
    unclean = wait_for(state_when(zk_client, "lossy", 0, lambda s: s["leader"] == 2))
    assert unclean["isr"] == [2]
    assert unclean["leader_recovery_state"] == 1


def test_broker_session_expiry_re_registers_with_a_new_epoch(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="t", partitions=2, replication_factor=3)])
    old_czxid = zk_client.exists("/brokers/ids/1").czxid
    client = cluster.brokers[1].client
    assert client is not None
    expire_session(client)
    wait_for(
        lambda: (stat := zk_client.exists("/brokers/ids/1")) is not None and stat.czxid != old_czxid,
        message="broker 1 registered again",
    )


def test_before_ibp_2_7_leaders_write_isr_changes_and_notify_the_controller(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(
        inter_broker_protocol_version="2.6",
        topics=[TopicSpec(name="old", partitions=2, replication_factor=3)],
    )
    znode = topic_znode(zk_client, "old")
    assert znode["version"] == 2
    assert "topic_id" not in znode
    followed = [p for p in range(2) if state(zk_client, "old", p)["leader"] != 2]
    # The controller deletes a notification as soon as it sees it, often before a watch could list it, so the
    # parent's child version (bumped by each create and each delete) records that one came and went.
    children_version = zk_client.exists("/isr_change_notification").cversion
    cluster.stall_follower(2)
    wait_for(lambda: all(2 not in state(zk_client, "old", p)["isr"] for p in followed), timeout=60)
    for p in followed:
        # Written by the leader itself: stamped with the controller epoch of its last LeaderAndIsr.
        assert state(zk_client, "old", p)["controller_epoch"] == controller_epoch(zk_client)
    # The leader notifies once its changes have been quiet for 5 s; the controller deletes the notification.
    wait_for(
        lambda: (
            zk_client.exists("/isr_change_notification").cversion >= children_version + 2
            and not zk_client.get_children("/isr_change_notification")
        ),
        message="an ISR change notification written and then processed by the controller",
    )
    assert cluster.controller is not None
    controller_view = cluster.loop.call(lambda: dict(cluster.controller.states) if cluster.controller else {})
    for p in followed:
        assert 2 not in controller_view[TopicPartition("old", p)].isr


def test_added_partitions_get_created_and_deleted_topics_go(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="grow", partitions=2, replication_factor=2)])
    assert cluster.admin is not None
    topic_id = topic_znode(zk_client, "grow")["topic_id"]
    added = cluster.admin.add_partitions("grow", 4)
    assert sorted(added) == [2, 3]
    for partition in (2, 3):
        path = f"/brokers/topics/grow/partitions/{partition}/state"
        wait_for(functools.partial(zk_client.exists, path), message=f"{path} created")
        created = state(zk_client, "grow", partition)
        assert created["leader"] == replicas(zk_client, "grow", partition)[0]
        assert created["leader_epoch"] == 0
    assert topic_znode(zk_client, "grow")["topic_id"] == topic_id

    cluster.admin.delete_topic("grow")
    wait_for(lambda: not zk_client.exists("/brokers/topics/grow"), message="the topic deleted")
    assert not zk_client.exists("/config/topics/grow")
    assert not zk_client.exists("/admin/delete_topics/grow")


def test_topic_deletion_waits_while_a_replica_is_offline(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="doomed", partitions=1, replication_factor=3)])
    assert cluster.admin is not None
    cluster.stop_broker(2)
    wait_for(lambda: 2 not in state(zk_client, "doomed", 0)["isr"])
    cluster.admin.delete_topic("doomed")
    time.sleep(0.5)
    assert zk_client.exists("/admin/delete_topics/doomed"), "deletion is pending while a replica is offline"
    assert zk_client.exists("/brokers/topics/doomed")
    cluster.start_broker(2)
    wait_for(lambda: not zk_client.exists("/brokers/topics/doomed"), message="deletion resumed")
    wait_for(lambda: not zk_client.exists("/admin/delete_topics/doomed"))


def test_controller_session_expiry_moves_the_controller(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="t", partitions=3, replication_factor=3)])
    old_controller, old_epoch = controller_id(zk_client), controller_epoch(zk_client)
    assert old_controller is not None
    client = cluster.brokers[old_controller].client
    assert client is not None
    expire_session(client)
    wait_for(lambda: controller_epoch(zk_client) > old_epoch, message="a controller election")
    wait_for(lambda: controller_id(zk_client) is not None, message="an active controller")
    wait_for(
        lambda: set(zk_client.get_children("/brokers/ids")) == {"0", "1", "2"},
        message="the expired broker registered again",
    )
    # The cluster still works: a broker failure is handled by the new controller.
    victim = next(b for b in (0, 1, 2) if b != controller_id(zk_client))
    cluster.stop_broker(victim)
    wait_for(lambda: all(victim not in state(zk_client, "t", p)["isr"] for p in range(3)))


def test_auto_leader_rebalance_hands_leadership_back(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    """With auto.leader.rebalance.enable the controller checks 5 s after failover and then every interval;
    broker 2 owns a third of the preferred leaderships, far above the 10 % threshold."""
    cluster = make_cluster(
        topics=[TopicSpec(name="topic-1", partitions=9, replication_factor=3)],
        auto_leader_rebalance_enable=True,
        leader_imbalance_check_interval_seconds=0.5,
    )
    cluster.stop_broker(2)
    wait_for(lambda: all(state(zk_client, "topic-1", p)["leader"] != 2 for p in range(9)), message="failover")
    cluster.start_broker(2)
    wait_for(
        lambda: all(
            state(zk_client, "topic-1", p)["leader"] == replicas(zk_client, "topic-1", p)[0] for p in range(9)
        ),
        timeout=15,
        message="the preferred leaders back without an election request",
    )
    assert not zk_client.exists("/admin/preferred_replica_election"), "an automatic rebalance writes no znode"


def test_controlled_shutdown_moves_leadership_before_the_broker_goes(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster = make_cluster(topics=[TopicSpec(name="t", partitions=6, replication_factor=3)])
    led_by_1 = [p for p in range(6) if state(zk_client, "t", p)["leader"] == 1]
    assert led_by_1
    cluster.stop_broker(1, controlled=True)
    for p in range(6):
        after = state(zk_client, "t", p)
        assert after["leader"] not in (1, -1)
        assert 1 not in after["isr"]
    for p in led_by_1:
        # The controlled-shutdown election picked the first other replica in AR order within the ISR.
        expected = next(r for r in replicas(zk_client, "t", p) if r != 1)
        assert state(zk_client, "t", p)["leader"] == expected


def test_start_fails_clearly_when_zookeeper_is_unreachable() -> None:
    cluster = ReferenceCluster(ReferenceClusterSettings(brokers=1), "127.0.0.1:1")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"cannot reach ZooKeeper at 127\.0\.0\.1:1 within 2 s"):
        cluster.start(timeout=2)
    assert time.monotonic() - started < 60  # it gave up (after its 2 s), rather than hang
    assert not cluster.loop.running
