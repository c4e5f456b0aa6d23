"""The data plane of the reference cluster: produce, follower fetches, ISR shrink/expand, throttles.

The rules are Kafka's: ``Replica.updateFetchState`` (caught up at a fetch reaching the leader's LEO, or the
leader's LEO as of the previous fetch), ``Partition.isFollowerOutOfSync`` / ``isFollowerInSync``
(``replica.lag.time.max.ms``, checked by the ``isr-expiration`` task), replication quotas that apply only
to listed replicas outside the ISR, and ``NotEnoughReplicas`` for acks=all below ``min.insync.replicas``.
Brokers are built by hand; nothing here touches ZooKeeper.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from app.embedded.reference_cluster.broker import FollowerState, ReplicaLog, SimBroker
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TrafficSettings
from app.embedded.reference_cluster.replication import (
    IsrChange,
    Retention,
    Throttles,
    advance,
    parse_throttled_replicas,
    retain,
)
from app.embedded.reference_cluster.traffic import TickTraffic, TrafficModel
from collectors.kafka.model import BrokerEndpoint, LeaderAndIsr, ReplicaAssignment, TopicPartition

pytestmark = pytest.mark.unit

LAG_MS = 1_000
TICK_MS = 100
MESSAGE_BYTES = 1024
TP = TopicPartition("orders", 0)


@dataclass
class Sim:
    """Brokers plus the bits of the cluster runtime a tick needs: the clock, throttles, min ISR."""

    settings: ReferenceClusterSettings
    brokers: dict[int, SimBroker]
    traffic: TrafficModel
    throttles: Throttles = field(default_factory=Throttles.none)
    min_isr: int = 1
    now_ms: float = 0.0

    def tick(self, dt_ms: float = TICK_MS) -> tuple[list[IsrChange], dict[int, TickTraffic]]:
        self.now_ms += dt_ms
        return advance(
            self.brokers,
            self.settings,
            self.traffic,
            self.throttles,
            lambda _topic: self.min_isr,
            self.now_ms,
            dt_ms / 1000.0,
        )

    def commit(self, change: IsrChange) -> None:
        """What a successful AlterPartition does on the leader: the new ISR, the next partition epoch."""
        view = self.brokers[change.leader].partitions[change.tp]
        view.state = replace(view.state, isr=change.new_isr, zk_version=view.state.zk_version + 1)

    def leo(self, broker: int, tp: TopicPartition = TP) -> float:
        return self.brokers[broker].logs[tp].leo

    def isr(self, tp: TopicPartition = TP) -> tuple[int, ...]:
        leader = next(b for b in self.brokers.values() if b.leads(tp))
        return leader.partitions[tp].isr


def make_sim(
    n_brokers: int = 3,
    *,
    replication_factor: int = 3,
    produce_bytes_per_sec: float = 64 * 1024,
    producer_acks: str = "all",
    with_partition: bool = True,
) -> Sim:
    settings = ReferenceClusterSettings(
        brokers=n_brokers,
        replica_lag_time_max_ms=LAG_MS,
        traffic=TrafficSettings.model_validate(
            {
                "produce_bytes_per_sec": produce_bytes_per_sec,
                "message_bytes": MESSAGE_BYTES,
                "producer_acks": producer_acks,
            }
        ),
    )
    brokers = {}
    for i in range(n_brokers):
        broker = SimBroker(i, None, BrokerEndpoint("PLAINTEXT", "127.0.0.1", 19092 + i), log_dirs=1)
        broker.alive = True
        brokers[i] = broker
    sim = Sim(settings, brokers, TrafficModel(settings.traffic))
    if with_partition:
        replicas = tuple(range(replication_factor))
        add_partition(sim, TP, replicas, isr=replicas, leos=dict.fromkeys(replicas, 1000.0))
    return sim


def add_partition(
    sim: Sim,
    tp: TopicPartition,
    replicas: tuple[int, ...],
    *,
    isr: tuple[int, ...],
    leos: Mapping[int, float],
) -> None:
    """Logs on every replica, then the controller's LeaderAndIsr (leader = replicas[0]) to each of them."""
    leader = replicas[0]
    state = LeaderAndIsr(leader=leader, leader_epoch=1, isr=isr, controller_epoch=1, zk_version=0)
    assignment = ReplicaAssignment(replicas)
    for b in replicas:
        sim.brokers[b].create_log(tp, leos[b])
    for b in replicas:
        applied = sim.brokers[b].apply_leader_and_isr(
            tp, state, assignment, None if b == leader else leos[leader], 0.0, sim.now_ms
        )
        assert applied


def run_until_change(sim: Sim, limit_ms: float) -> tuple[float, list[IsrChange]]:
    """Tick until a tick returns ISR changes; (time of that tick, the changes)."""
    end = sim.now_ms + limit_ms
    while sim.now_ms < end:
        changes, _ = sim.tick()
        if changes:
            return sim.now_ms, changes
    return sim.now_ms, []


# --- FollowerState.record_fetch (Replica.updateFetchState) -------------------------------------------


def test_fetch_reaching_leader_leo_is_caught_up_now() -> None:
    state = FollowerState(last_caught_up_ms=0.0, last_fetch_leader_leo=50, last_fetch_ms=500.0)

    state.record_fetch(fetch_offset=100, leader_leo=100, now_ms=1_000.0)

    assert state.last_caught_up_ms == 1_000.0
    assert (state.last_fetch_leader_leo, state.last_fetch_ms) == (100, 1_000.0)


def test_fetch_reaching_previous_leader_leo_was_caught_up_at_previous_fetch() -> None:
    state = FollowerState(last_caught_up_ms=0.0, last_fetch_leader_leo=90, last_fetch_ms=500.0)

    state.record_fetch(fetch_offset=95, leader_leo=100, now_ms=1_000.0)

    assert state.last_caught_up_ms == 500.0
    assert (state.last_fetch_leader_leo, state.last_fetch_ms) == (100, 1_000.0)


def test_fetch_behind_both_is_not_caught_up() -> None:
    state = FollowerState(last_caught_up_ms=200.0, last_fetch_leader_leo=90, last_fetch_ms=500.0)

    state.record_fetch(fetch_offset=89, leader_leo=100, now_ms=1_000.0)

    assert state.last_caught_up_ms == 200.0
    assert (state.last_fetch_leader_leo, state.last_fetch_ms) == (100, 1_000.0)


def test_last_caught_up_never_goes_back() -> None:
    state = FollowerState(last_caught_up_ms=800.0, last_fetch_leader_leo=90, last_fetch_ms=500.0)

    state.record_fetch(fetch_offset=95, leader_leo=100, now_ms=1_000.0)

    assert state.last_caught_up_ms == 800.0


def test_a_follower_always_one_fetch_behind_stays_caught_up() -> None:
    """Under steady produce a follower never equals the leader's LEO at fetch time, yet is in sync."""
    state = FollowerState()
    leader_leo = 0
    for step in range(1, 20):
        fetch_offset = leader_leo  # what the leader had at the previous fetch
        leader_leo += 10
        state.record_fetch(fetch_offset, leader_leo, now_ms=step * 100.0)

    assert state.last_caught_up_ms == 1_800.0


# --- ISR shrink and expand ---------------------------------------------------------------------------


def test_healthy_followers_stay_in_sync() -> None:
    sim = make_sim()

    for _ in range(10 * LAG_MS // TICK_MS):
        changes, _ = sim.tick()
        assert changes == []

    assert sim.leo(0) > 1000.0
    assert sim.leo(1) == pytest.approx(sim.leo(0))
    assert sim.leo(2) == pytest.approx(sim.leo(0))


def test_stalled_follower_leaves_isr_only_after_replica_lag_time_max() -> None:
    sim = make_sim()
    for _ in range(5):
        assert sim.tick()[0] == []
    last_fetch_ms = sim.now_ms
    sim.brokers[2].stalled = True

    at_ms, changes = run_until_change(sim, limit_ms=3 * LAG_MS)

    assert changes == [IsrChange(leader=0, tp=TP, new_isr=(0, 1), shrink=True)]
    assert at_ms > last_fetch_ms + LAG_MS  # not before replica.lag.time.max.ms
    assert at_ms <= last_fetch_ms + LAG_MS + LAG_MS / 2 + TICK_MS  # the check runs every lag/2
    assert sim.leo(2) < sim.leo(0)


def test_slow_follower_leaves_isr_only_after_replica_lag_time_max() -> None:
    sim = make_sim()
    for _ in range(5):
        assert sim.tick()[0] == []
    slow_since_ms = sim.now_ms
    leo_before = sim.leo(2)
    sim.brokers[2].slow = True

    at_ms, changes = run_until_change(sim, limit_ms=3 * LAG_MS)

    assert changes == [IsrChange(leader=0, tp=TP, new_isr=(0, 1), shrink=True)]
    assert at_ms > slow_since_ms + LAG_MS
    assert leo_before < sim.leo(2) < sim.leo(0)  # it fetches, but not fast enough


def test_shrink_is_asked_again_until_committed_then_not() -> None:
    sim = make_sim()
    sim.tick()
    sim.brokers[2].stalled = True
    _, first = run_until_change(sim, limit_ms=3 * LAG_MS)
    _, again = run_until_change(sim, limit_ms=LAG_MS)
    assert again == first

    sim.commit(first[0])

    _, after_commit = run_until_change(sim, limit_ms=3 * LAG_MS)
    assert after_commit == []
    assert sim.isr() == (0, 1)


def test_resumed_follower_rejoins_isr_once_caught_up() -> None:
    sim = make_sim()
    sim.tick()
    sim.brokers[2].stalled = True
    _, shrink = run_until_change(sim, limit_ms=3 * LAG_MS)
    sim.commit(shrink[0])
    for _ in range(5):
        assert sim.tick()[0] == []  # still stalled: no expand

    sim.brokers[2].stalled = False
    changes, _ = sim.tick()

    assert changes == [IsrChange(leader=0, tp=TP, new_isr=(0, 1, 2), shrink=False)]
    assert sim.leo(2) == pytest.approx(sim.leo(0))


def test_resumed_follower_does_not_rejoin_before_reaching_the_high_watermark() -> None:
    sim = make_sim()
    sim.tick()
    sim.brokers[2].stalled = True
    _, shrink = run_until_change(sim, limit_ms=5 * LAG_MS)
    sim.commit(shrink[0])
    for _ in range(30):
        sim.tick()  # the leader's log runs further ahead
    # throttle the out-of-ISR follower so that catching up takes several fetches
    rate = 2 * sim.settings.traffic.produce_bytes_per_sec
    sim.throttles = Throttles({}, {2: rate}, {}, {"orders": "*"})
    sim.brokers[2].stalled = False

    ticks = 0
    while True:
        ticks += 1
        changes, _ = sim.tick()
        leader_view = sim.brokers[0].partitions[TP]
        high_watermark = min(int(sim.leo(0) + 1e-9), leader_view.followers[1].leo)
        if changes:
            break
        assert leader_view.followers[2].leo < high_watermark
        assert ticks < 1_000

    assert changes == [IsrChange(leader=0, tp=TP, new_isr=(0, 1, 2), shrink=False)]
    assert leader_view.followers[2].leo >= high_watermark
    assert ticks > 1


def test_dead_follower_is_not_fetching_and_leaves_the_isr() -> None:
    sim = make_sim()
    sim.tick()
    sim.brokers[1].alive = False

    at_ms, changes = run_until_change(sim, limit_ms=3 * LAG_MS)

    assert changes == [IsrChange(leader=0, tp=TP, new_isr=(0, 2), shrink=True)]
    assert at_ms > LAG_MS


# --- produce and min.insync.replicas -----------------------------------------------------------------


def test_acks_all_produce_refused_below_min_isr() -> None:
    sim = make_sim()
    sim.min_isr = 2
    sim.commit(IsrChange(0, TP, (0,), shrink=True))
    leo_before = sim.leo(0)

    _, moved = sim.tick()

    counters = sim.brokers[0].counters
    assert counters.failed_produce_requests["orders"] > 0
    assert sim.leo(0) == leo_before
    assert counters.bytes_in["orders"] == 0
    assert moved[0].produce_in == 0


def test_acks_all_produce_accepted_at_min_isr() -> None:
    """``Partition.appendRecordsToLeader`` refuses when ``inSyncSize < minIsr``: equal is enough."""
    sim = make_sim()
    sim.min_isr = 2
    sim.commit(IsrChange(0, TP, (0, 1), shrink=True))
    leo_before = sim.leo(0)

    sim.tick()

    assert sim.brokers[0].counters.failed_produce_requests["orders"] == 0
    assert sim.leo(0) > leo_before


def test_acks_one_produce_ignores_min_isr() -> None:
    sim = make_sim(producer_acks="1")
    sim.min_isr = 3
    sim.commit(IsrChange(0, TP, (0,), shrink=True))
    leo_before = sim.leo(0)

    sim.tick()

    assert sim.brokers[0].counters.failed_produce_requests["orders"] == 0
    assert sim.leo(0) > leo_before


def test_produce_counts_bytes_and_messages() -> None:
    sim = make_sim(produce_bytes_per_sec=10 * MESSAGE_BYTES)

    _, moved = sim.tick(dt_ms=1_000)

    counters = sim.brokers[0].counters
    assert counters.bytes_in["orders"] == pytest.approx(10 * MESSAGE_BYTES)
    assert counters.messages_in["orders"] == pytest.approx(10)
    assert moved[0].produce_in == pytest.approx(10 * MESSAGE_BYTES)
    assert moved[1].replication_in == pytest.approx(10 * MESSAGE_BYTES)
    assert moved[0].replication_out == pytest.approx(20 * MESSAGE_BYTES)


# --- replication throttles ---------------------------------------------------------------------------


def lagging_sim() -> Sim:
    """Leader 0 with 10,000 messages; follower 1 in the ISR and follower 2 outside it, both empty; no
    produce traffic, so only replication moves bytes."""
    sim = make_sim(produce_bytes_per_sec=0, with_partition=False)
    add_partition(sim, TP, (0, 1, 2), isr=(0, 1), leos={0: 10_000.0, 1: 0.0, 2: 0.0})
    return sim


RATE = 100 * MESSAGE_BYTES  # bytes/s


def test_follower_throttle_limits_an_out_of_isr_replica_to_rate_times_dt() -> None:
    sim = lagging_sim()
    sim.throttles = Throttles({}, {1: RATE, 2: RATE}, {}, {"orders": {0: frozenset({1, 2})}})

    sim.tick(dt_ms=500)

    assert sim.leo(2) * MESSAGE_BYTES <= RATE * 0.5 + 1e-6
    assert sim.leo(2) > 0
    assert sim.leo(1) == pytest.approx(10_000.0)  # listed and rate-limited, but in the ISR: not throttled


def test_follower_throttle_budget_is_shared_by_the_brokers_partitions() -> None:
    sim = lagging_sim()
    other = TopicPartition("orders", 1)
    add_partition(sim, other, (0, 1, 2), isr=(0, 1), leos={0: 10_000.0, 1: 0.0, 2: 0.0})
    sim.throttles = Throttles({}, {2: RATE}, {}, {"orders": "*"})

    sim.tick(dt_ms=1_000)

    copied = (sim.leo(2, TP) + sim.leo(2, other)) * MESSAGE_BYTES
    assert copied == pytest.approx(RATE)


def test_leader_throttle_limits_what_the_leader_serves_out_of_isr_replicas() -> None:
    sim = lagging_sim()
    sim.throttles = Throttles({0: RATE}, {}, {"orders": {0: frozenset({0})}}, {})

    sim.tick(dt_ms=1_000)

    assert sim.leo(2) * MESSAGE_BYTES == pytest.approx(RATE)
    assert sim.leo(1) == pytest.approx(10_000.0)


def test_unlisted_replica_is_not_throttled() -> None:
    sim = lagging_sim()
    sim.throttles = Throttles({}, {2: RATE}, {}, {"payments": "*", "orders": {1: frozenset({2})}})

    sim.tick(dt_ms=1_000)

    assert sim.leo(2) == pytest.approx(10_000.0)


def test_listed_replica_without_a_rate_is_not_throttled() -> None:
    sim = lagging_sim()
    sim.throttles = Throttles({}, {}, {}, {"orders": "*"})

    sim.tick(dt_ms=1_000)

    assert sim.leo(2) == pytest.approx(10_000.0)


def test_parse_throttled_replicas_pairs() -> None:
    assert parse_throttled_replicas("0:1,0:2,1:3") == {0: frozenset({1, 2}), 1: frozenset({3})}
    assert parse_throttled_replicas(" 0:1 , 2:0 ") == {0: frozenset({1}), 2: frozenset({0})}


def test_parse_throttled_replicas_wildcard() -> None:
    assert parse_throttled_replicas("*") == "*"
    assert parse_throttled_replicas("  *  ") == "*"


def test_parse_throttled_replicas_skips_malformed_pairs() -> None:
    assert parse_throttled_replicas("0:1,x:2,3:y,4,:5,6:,-1:2,7:8:9,2:3") == {
        0: frozenset({1}),
        2: frozenset({3}),
    }
    assert parse_throttled_replicas("") == {}


def test_throttles_is_listed() -> None:
    table: dict[str, Mapping[int, frozenset[int]] | str] = {
        "orders": {0: frozenset({1, 2})},
        "payments": "*",
    }

    assert Throttles.is_listed(table, TopicPartition("orders", 0), 1)
    assert not Throttles.is_listed(table, TopicPartition("orders", 0), 3)
    assert not Throttles.is_listed(table, TopicPartition("orders", 1), 1)
    assert Throttles.is_listed(table, TopicPartition("payments", 7), 9)
    assert not Throttles.is_listed(table, TopicPartition("other", 0), 1)
    assert not Throttles.is_listed(Throttles.none().follower_replicas, TopicPartition("orders", 0), 1)


# --- retention ----------------------------------------------------------------------------------------


def test_size_retention_drops_the_oldest_segment_once_the_rest_holds_retention_bytes() -> None:
    """1-byte messages, 100-byte segments, 250 bytes kept: the log grows to 350 and drops to 250, a
    sawtooth; the active segment is never deleted."""
    log = ReplicaLog(log_start=0.0, leo=0.0, log_dir=0)
    retention = Retention(retention_bytes=250, segment_bytes=100)
    sizes = []
    for _ in range(1000):
        log.leo += 10
        retain(log, retention, message_bytes=1)
        sizes.append(log.leo - log.log_start)
        assert log.log_start % 100 == 0
    assert max(sizes) == 340
    assert min(sizes[100:]) == 250
    assert set(sizes[100:]) == set(range(250, 341, 10))
    drops = [later - earlier for earlier, later in itertools.pairwise(sizes) if later < earlier]
    assert len(drops) >= 90
    assert set(drops) == {-90}, "one segment (100) goes as the next append (10) comes"
    unlimited = ReplicaLog(log_start=0.0, leo=5000.0, log_dir=0)
    retain(unlimited, Retention(retention_bytes=None, segment_bytes=100), message_bytes=1)
    assert unlimited.log_start == 0
    everything = ReplicaLog(log_start=0.0, leo=450.0, log_dir=0)
    retain(everything, Retention(retention_bytes=0, segment_bytes=100), message_bytes=1)
    assert everything.log_start == 400, "retention.bytes 0 keeps only the active segment"
