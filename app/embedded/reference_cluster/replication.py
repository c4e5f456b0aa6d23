"""One tick of the data plane: leaders take produce traffic, followers fetch, leaders keep their ISR.

Pure over the brokers' in-memory state (no ZooKeeper I/O): it returns the ISR changes leaders want, and
the cluster runtime carries them out through ZooKeeper or the controller as the protocol version says.

Lag follows Kafka's rule: a follower is caught up at a fetch that reaches the leader's log end, or that
reaches the log end the leader had at the follower's previous fetch; it leaves the ISR when not caught up
for ``replica.lag.time.max.ms`` (checked every half of that, as Kafka's ``isr-expiration`` task) and rejoins
once its log end reaches the high watermark and the start of the leader's epoch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.embedded.reference_cluster.broker import FollowerState, ReplicaLog, SimBroker
from app.embedded.reference_cluster.config import ReferenceClusterSettings
from app.embedded.reference_cluster.traffic import TickTraffic, TrafficModel
from collectors.kafka.model import TopicPartition


@dataclass(frozen=True, slots=True)
class IsrChange:
    leader: int
    tp: TopicPartition
    new_isr: tuple[int, ...]
    shrink: bool


@dataclass(frozen=True, slots=True)
class Throttles:
    """Replication throttles as the brokers read them from ``/config``: rates per broker (bytes/s) and the
    throttled replicas per topic (``{partition: brokers}`` or ``"*"``)."""

    leader_rate: Mapping[int, float]
    follower_rate: Mapping[int, float]
    leader_replicas: Mapping[str, Mapping[int, frozenset[int]] | str]
    follower_replicas: Mapping[str, Mapping[int, frozenset[int]] | str]

    @staticmethod
    def none() -> Throttles:
        return Throttles({}, {}, {}, {})

    @staticmethod
    def is_listed(
        table: Mapping[str, Mapping[int, frozenset[int]] | str], tp: TopicPartition, broker: int
    ) -> bool:
        entry = table.get(tp.topic)
        if entry is None:
            return False
        if isinstance(entry, str):
            return entry == "*"
        return broker in entry.get(tp.partition, frozenset())


@dataclass(frozen=True, slots=True)
class Retention:
    """A topic's size-based retention as its brokers read it: ``retention.bytes`` (None: -1, no limit)
    and ``segment.bytes``."""

    retention_bytes: float | None
    segment_bytes: float


def retain(log: ReplicaLog, retention: Retention, message_bytes: int) -> None:
    """Kafka's size-based retention (``UnifiedLog.deleteRetentionSizeBreachedSegments``): the oldest
    segment goes while the log without it still holds ``retention.bytes``; the active segment stays. The
    segments are the offset ranges [k × segment, (k + 1) × segment) (in messages), so a log grows to
    retention + one segment and drops back by a segment: a sawtooth."""
    if retention.retention_bytes is None:
        return
    segment = retention.segment_bytes / message_bytes
    keep = retention.retention_bytes / message_bytes
    while True:
        next_base = (math.floor(log.log_start / segment + 1e-9) + 1) * segment
        if next_base >= log.leo or log.leo - next_base < keep:
            return
        log.log_start = next_base


def parse_throttled_replicas(value: str) -> dict[int, frozenset[int]] | str:
    """``"0:1,0:2,1:3"`` (partition:broker pairs) or ``"*"``; malformed pairs are ignored, as Kafka's
    brokers ignore them after the config was validated on write."""
    value = value.strip()
    if value == "*":
        return "*"
    table: defaultdict[int, set[int]] = defaultdict(set)
    for pair in value.split(","):
        partition, _, broker = pair.strip().partition(":")
        if partition.isdigit() and broker.isdigit():
            table[int(partition)].add(int(broker))
    return {p: frozenset(b) for p, b in table.items()}


def advance(
    brokers: Mapping[int, SimBroker],
    settings: ReferenceClusterSettings,
    traffic: TrafficModel,
    throttles: Throttles,
    min_isr: Callable[[str], int],
    now_ms: float,
    dt_s: float,
    retention: Callable[[str], Retention] | None = None,
) -> tuple[list[IsrChange], dict[int, TickTraffic]]:
    """Run one tick of ``dt_s`` seconds; returns the ISR changes leaders ask for and the bytes moved.
    ``retention`` gives each topic's retention (None: the logs only grow); leaders apply it and their
    followers take the leader's log start with their next fetch, as Kafka's fetch response carries it."""
    moved: dict[int, dict[str, float]] = {b: defaultdict(float) for b in brokers}
    live = {b.id: b for b in brokers.values() if b.alive}
    _produce(live, settings, traffic, min_isr, dt_s, moved, retention)
    _fetch(live, settings, traffic, throttles, now_ms, dt_s, moved)
    changes = _maintain_isr(live, settings, now_ms)
    return changes, {
        b: TickTraffic(m["produce_in"], m["consumer_out"], m["replication_in"], m["replication_out"])
        for b, m in moved.items()
    }


def _produce(
    live: Mapping[int, SimBroker],
    settings: ReferenceClusterSettings,
    traffic: TrafficModel,
    min_isr: Callable[[str], int],
    dt_s: float,
    moved: Mapping[int, dict[str, float]],
    retention: Callable[[str], Retention] | None,
) -> None:
    message_bytes = settings.traffic.message_bytes
    acks_all = settings.traffic.producer_acks == "all"
    fanout = settings.traffic.consumer_fanout
    for broker in live.values():
        counters = broker.counters
        for tp, view in broker.led_partitions():
            rate = traffic.produce_bytes_per_sec(tp, broker.id)
            if rate <= 0:
                continue
            counters.requests["Produce"] += dt_s * rate / (16 * message_bytes)
            if acks_all and len(view.isr) < min_isr(tp.topic):
                counters.failed_produce_requests[tp.topic] += dt_s * rate / (16 * message_bytes)
                continue  # NotEnoughReplicas: acks=all producers are refused below min ISR
            produced = rate * dt_s
            log = broker.logs[tp]
            log.leo += produced / message_bytes
            if retention is not None:
                retain(log, retention(tp.topic), message_bytes)
            counters.bytes_in[tp.topic] += produced
            counters.messages_in[tp.topic] += produced / message_bytes
            counters.bytes_out[tp.topic] += produced * fanout
            counters.requests["FetchConsumer"] += dt_s * fanout * 2
            moved[broker.id]["produce_in"] += produced
            moved[broker.id]["consumer_out"] += produced * fanout


def _fetch(
    live: Mapping[int, SimBroker],
    settings: ReferenceClusterSettings,
    traffic: TrafficModel,
    throttles: Throttles,
    now_ms: float,
    dt_s: float,
    moved: Mapping[int, dict[str, float]],
) -> None:
    message_bytes = settings.traffic.message_bytes
    leader_budget = {b: rate * dt_s for b, rate in throttles.leader_rate.items()}
    follower_budget = {b: rate * dt_s for b, rate in throttles.follower_rate.items()}
    for follower in live.values():
        if follower.stalled:
            continue
        fetches = []
        for tp, view in follower.partitions.items():
            leader = live.get(view.leader)
            if view.leader == follower.id or leader is None or not follower.is_replica_online(tp):
                continue
            leader_view = leader.partitions.get(tp)
            if leader_view is None or not leader.leads(tp):
                continue
            if leader_view.state.leader_epoch != view.state.leader_epoch:
                continue  # FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH: retried after the next LeaderAndIsr
            fetches.append((tp, leader, leader_view))
        if not fetches:
            continue
        capacity = settings.traffic.replica_fetch_bytes_per_sec * dt_s / len(fetches)
        for tp, leader, leader_view in fetches:
            log, leader_log = follower.logs[tp], leader.logs[tp]
            if log.leo < leader_log.log_start:
                log.log_start = log.leo = leader_log.log_start
            elif log.log_start < leader_log.log_start:
                log.log_start = leader_log.log_start
            in_sync = follower.id in leader_view.isr
            wanted = max(0.0, leader_log.leo - log.leo) * message_bytes
            allowed = min(wanted, capacity)
            if follower.slow:
                allowed = min(
                    allowed,
                    settings.traffic.slow_follower_ratio
                    * traffic.produce_bytes_per_sec(tp, leader.id)
                    * dt_s,
                )
            if not in_sync:
                allowed = _throttle(
                    allowed, tp, leader.id, follower.id, throttles, leader_budget, follower_budget
                )
            log.leo += allowed / message_bytes
            state = leader_view.followers.setdefault(follower.id, FollowerState(last_fetch_ms=now_ms))
            state.record_fetch(int(log.leo + 1e-9), int(leader_log.leo + 1e-9), now_ms)
            state.leo = int(log.leo + 1e-9)
            follower.counters.replication_bytes_in += allowed
            leader.counters.replication_bytes_out += allowed
            follower.counters.requests["FetchFollower"] += dt_s * 2
            moved[follower.id]["replication_in"] += allowed
            moved[leader.id]["replication_out"] += allowed


def _throttle(
    wanted: float,
    tp: TopicPartition,
    leader: int,
    follower: int,
    throttles: Throttles,
    leader_budget: dict[int, float],
    follower_budget: dict[int, float],
) -> float:
    """Kafka throttles only replicas out of the ISR that are listed on the topic, against the broker's
    rate: the leader's for leader-side listings, the follower's for follower-side ones."""
    allowed = wanted
    leader_side = leader in leader_budget and Throttles.is_listed(throttles.leader_replicas, tp, leader)
    follower_side = follower in follower_budget and Throttles.is_listed(
        throttles.follower_replicas, tp, follower
    )
    if leader_side:
        allowed = min(allowed, leader_budget[leader])
    if follower_side:
        allowed = min(allowed, follower_budget[follower])
    if leader_side:
        leader_budget[leader] -= allowed
    if follower_side:
        follower_budget[follower] -= allowed
    return max(0.0, allowed)


def _maintain_isr(
    live: Mapping[int, SimBroker], settings: ReferenceClusterSettings, now_ms: float
) -> list[IsrChange]:
    lag_ms = settings.replica_lag_time_max_ms
    changes: list[IsrChange] = []
    for leader in live.values():
        check_shrink = now_ms >= leader.next_isr_check_ms
        if check_shrink:
            leader.next_isr_check_ms = now_ms + lag_ms / 2
        for tp, view in leader.led_partitions():
            if view.isr_change_in_flight:
                continue
            leader_leo = int(leader.logs[tp].leo + 1e-9)
            isr_leos = [leader_leo] + [view.followers[r].leo for r in view.isr if r in view.followers]
            high_watermark = min(isr_leos)
            joining = [
                r
                for r, state in view.followers.items()
                if r not in view.isr
                and r in view.assignment.replicas
                and r in live
                and state.last_fetch_ms >= now_ms
                and state.leo >= high_watermark
                and state.leo >= view.leader_epoch_start_offset
            ]
            if joining:
                new_isr = (*view.isr, *sorted(joining))
                changes.append(IsrChange(leader.id, tp, new_isr, shrink=False))
                continue
            if not check_shrink:
                continue
            out_of_sync = [
                r
                for r in view.isr
                if r != leader.id
                and r in view.followers
                and view.followers[r].leo != leader_leo
                and now_ms - view.followers[r].last_caught_up_ms > lag_ms
            ]
            if out_of_sync:
                new_isr = tuple(r for r in view.isr if r not in out_of_sync)
                changes.append(IsrChange(leader.id, tp, new_isr, shrink=True))
    return changes
