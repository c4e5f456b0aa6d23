"""Simulated client traffic: skew requests (validated as a whole, then applied) and the host counters."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from app.embedded.reference_cluster.broker import SimBroker
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TrafficSettings
from app.embedded.reference_cluster.replication import Throttles, advance
from app.embedded.reference_cluster.traffic import (
    PRODUCE_LATENCY_CAP_MS,
    PRODUCE_QUANTILES,
    SkewError,
    TickTraffic,
    TrafficModel,
    busy_fraction,
    produce_latency_ms,
    smooth,
    update_host,
    update_request_load,
)
from collectors.kafka.model import BrokerEndpoint, LeaderAndIsr, ReplicaAssignment, TopicPartition

pytestmark = pytest.mark.unit

BASE_RATE = 1000.0
BROKERS = {0, 1, 2}
TOPICS = {"orders": 6, "my-topic": 2}


def model() -> TrafficModel:
    return TrafficModel(TrafficSettings(produce_bytes_per_sec=BASE_RATE))


def factors(m: TrafficModel) -> tuple[dict[int, float], dict[str, float], dict[TopicPartition, float]]:
    return dict(m.broker_factors), dict(m.topic_factors), dict(m.partition_factors)


# --- apply_skew --------------------------------------------------------------------------------------


def test_skew_factors_multiply() -> None:
    m = model()

    m.apply_skew(
        {"brokers": {"1": 3}, "topics": {"orders": 2}, "partitions": {"orders-0": 5}}, BROKERS, TOPICS
    )

    assert m.produce_bytes_per_sec(TopicPartition("orders", 0), 1) == BASE_RATE * 3 * 2 * 5
    assert m.produce_bytes_per_sec(TopicPartition("orders", 1), 1) == BASE_RATE * 3 * 2
    assert m.produce_bytes_per_sec(TopicPartition("orders", 0), 2) == BASE_RATE * 2 * 5
    assert m.produce_bytes_per_sec(TopicPartition("my-topic", 0), 0) == BASE_RATE


def test_skew_factor_zero_stops_traffic_and_floats_are_accepted() -> None:
    m = model()

    m.apply_skew({"brokers": {"0": 0}, "topics": {"orders": 0.5}}, BROKERS, TOPICS)

    assert m.produce_bytes_per_sec(TopicPartition("orders", 0), 0) == 0
    assert m.produce_bytes_per_sec(TopicPartition("orders", 0), 1) == BASE_RATE * 0.5


def test_partition_of_topic_with_dash_in_its_name() -> None:
    m = model()

    m.apply_skew({"partitions": {"my-topic-1": 4}}, BROKERS, TOPICS)

    assert m.partition_factors == {TopicPartition("my-topic", 1): 4.0}


def test_later_skew_adds_to_and_replaces_earlier_factors() -> None:
    m = model()
    m.apply_skew({"brokers": {"1": 3, "2": 2}}, BROKERS, TOPICS)

    m.apply_skew({"brokers": {"1": 4}, "topics": {"orders": 2}}, BROKERS, TOPICS)

    assert m.broker_factors == {1: 4.0, 2: 2.0}
    assert m.topic_factors == {"orders": 2.0}


def test_reset_clears_every_factor_before_applying_the_rest() -> None:
    m = model()
    m.apply_skew(
        {"brokers": {"1": 3}, "topics": {"orders": 2}, "partitions": {"orders-0": 5}}, BROKERS, TOPICS
    )

    m.apply_skew({"reset": True, "brokers": {"2": 7}}, BROKERS, TOPICS)

    assert factors(m) == ({2: 7.0}, {}, {})


def test_reset_alone_restores_the_base_rate() -> None:
    m = model()
    m.apply_skew({"brokers": {"1": 3}, "topics": {"orders": 2}}, BROKERS, TOPICS)

    m.apply_skew({"reset": True}, BROKERS, TOPICS)

    assert factors(m) == ({}, {}, {})
    assert m.produce_bytes_per_sec(TopicPartition("orders", 0), 1) == BASE_RATE


def test_reset_false_keeps_factors() -> None:
    m = model()
    m.apply_skew({"brokers": {"1": 3}}, BROKERS, TOPICS)

    m.apply_skew({"reset": False, "topics": {"orders": 2}}, BROKERS, TOPICS)

    assert factors(m) == ({1: 3.0}, {"orders": 2.0}, {})


def test_describe_reports_the_skew() -> None:
    m = model()
    m.apply_skew({"brokers": {"1": 3}, "partitions": {"orders-0": 5}}, BROKERS, TOPICS)

    assert m.describe()["skew"] == {"brokers": {"1": 3.0}, "topics": {}, "partitions": {"orders-0": 5.0}}


BAD_BODIES: dict[str, tuple[Any, str]] = {
    "empty body": ({}, "a skew body is an object"),
    "not an object": ([1, 2], "a skew body is an object"),
    "unknown key": ({"brokers": {"1": 2}, "racks": {"r1": 2}}, "a skew body is an object"),
    "unknown broker": ({"brokers": {"7": 2}}, "unknown broker '7'"),
    "negative broker": ({"brokers": {"-1": 2}}, "unknown broker '-1'"),
    "broker not a number": ({"brokers": {"one": 2}}, "unknown broker 'one'"),
    "unknown topic": ({"topics": {"payments": 2}}, "unknown topic 'payments'"),
    "unknown partition number": ({"partitions": {"orders-6": 2}}, "unknown partition 'orders-6'"),
    "unknown partition topic": ({"partitions": {"payments-0": 2}}, "unknown partition 'payments-0'"),
    "partition without number": ({"partitions": {"orders": 2}}, "write TOPIC-PARTITION"),
    "negative factor": ({"brokers": {"1": -1}}, "finite number >= 0, got -1"),
    "NaN factor": ({"topics": {"orders": math.nan}}, "finite number >= 0, got nan"),
    "infinite factor": ({"topics": {"orders": math.inf}}, "finite number >= 0, got inf"),
    "bool factor": ({"brokers": {"1": True}}, "finite number >= 0, got True"),
    "string factor": ({"brokers": {"1": "2"}}, "finite number >= 0, got '2'"),
    "null factor": ({"brokers": {"1": None}}, "finite number >= 0, got None"),
    "section not an object": ({"brokers": [1, 2]}, "brokers must be an object"),
    "reset not a bool": ({"reset": "yes"}, "reset must be true or false"),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_skew_is_refused_with_a_clear_message(case: str) -> None:
    body, message = BAD_BODIES[case]
    m = model()

    with pytest.raises(SkewError, match=re.escape(message)):
        m.apply_skew(body, BROKERS, TOPICS)


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_skew_changes_nothing(case: str) -> None:
    body, _ = BAD_BODIES[case]
    m = model()
    m.apply_skew(
        {"brokers": {"1": 3}, "topics": {"orders": 2}, "partitions": {"orders-0": 5}}, BROKERS, TOPICS
    )
    before = factors(m)
    if isinstance(body, dict) and body:
        # a good part next to the bad one, and a reset, must not be applied either
        body = {"reset": True, "brokers": {"2": 9}, "partitions": {"orders-3": 9}, **body}

    with pytest.raises(SkewError):
        m.apply_skew(body, BROKERS, TOPICS)

    assert factors(m) == before


def test_skew_error_is_a_value_error() -> None:
    assert issubclass(SkewError, ValueError)


# --- host counters -----------------------------------------------------------------------------------

SETTINGS = TrafficSettings()


def fresh_broker(broker_id: int = 0) -> SimBroker:
    broker = SimBroker(broker_id, None, BrokerEndpoint("PLAINTEXT", "127.0.0.1", 19092 + broker_id), 1)
    broker.alive = True
    return broker


def host_counters(broker: SimBroker) -> dict[str, float]:
    c = broker.host_counters
    return {
        "cpu_user": c.cpu_seconds["user"],
        "cpu_system": c.cpu_seconds["system"],
        "disk_written": c.disk_written_bytes,
        "disk_read": c.disk_read_bytes,
        "disk_io_time": c.disk_io_time_seconds,
        "net_rx": c.network_receive_bytes,
        "net_tx": c.network_transmit_bytes,
    }


def test_host_counters_grow_with_traffic() -> None:
    idle, busy = fresh_broker(0), fresh_broker(1)
    traffic = TickTraffic(produce_in=50e6, consumer_out=100e6, replication_in=20e6, replication_out=40e6)

    for _ in range(10):
        update_host(idle, TickTraffic(), 1.0, SETTINGS)
        update_host(busy, traffic, 1.0, SETTINGS)

    idle_counters, busy_counters = host_counters(idle), host_counters(busy)
    for name, value in busy_counters.items():
        assert value > idle_counters[name], name
    assert busy.host_counters.network_receive_bytes == pytest.approx(10 * 70e6)
    assert busy.host_counters.network_transmit_bytes == pytest.approx(10 * 140e6)
    assert busy.host_counters.disk_written_bytes == pytest.approx(10 * 70e6)
    assert busy.host_counters.cpu_seconds["idle"] < idle.host_counters.cpu_seconds["idle"]


def test_cpu_seconds_add_up_to_cores_times_time() -> None:
    broker = fresh_broker()

    update_host(broker, TickTraffic(produce_in=80e6, consumer_out=200e6), 2.0, SETTINGS)

    assert sum(broker.host_counters.cpu_seconds.values()) == pytest.approx(SETTINGS.cpu_cores * 2.0)


def test_host_counters_are_monotonic() -> None:
    broker = fresh_broker()
    previous = host_counters(broker)

    for moved in (TickTraffic(produce_in=1e6), TickTraffic(), TickTraffic(consumer_out=5e6)):
        update_host(broker, moved, 0.5, SETTINGS)
        current = host_counters(broker)
        assert all(current[k] >= previous[k] for k in current)
        previous = current


def test_skewed_broker_counters_grow_faster() -> None:
    """Two brokers each leading one partition; skewing broker 1 x4 raises all of its host metrics."""
    settings = ReferenceClusterSettings(brokers=2)
    brokers = {0: fresh_broker(0), 1: fresh_broker(1)}
    for leader in (0, 1):
        tp = TopicPartition("orders", leader)
        brokers[leader].create_log(tp, 0.0)
        brokers[leader].apply_leader_and_isr(
            tp, LeaderAndIsr(leader, 0, (leader,), 1), ReplicaAssignment((leader,)), None, 0.0, 0.0
        )
    traffic = TrafficModel(settings.traffic)
    traffic.apply_skew({"brokers": {"1": 4}}, {0, 1}, {"orders": 2})

    for step in range(1, 11):
        _, moved = advance(brokers, settings, traffic, Throttles.none(), lambda _t: 1, step * 100.0, 0.1)
        for broker in brokers.values():
            update_host(broker, moved[broker.id], 0.1, settings.traffic)

    normal, skewed = host_counters(brokers[0]), host_counters(brokers[1])
    for name in ("cpu_user", "cpu_system", "disk_written", "disk_read", "net_rx", "net_tx"):
        assert skewed[name] > normal[name], name
    assert skewed["net_rx"] == pytest.approx(4 * normal["net_rx"])
    assert brokers[1].counters.bytes_in["orders"] == pytest.approx(4 * brokers[0].counters.bytes_in["orders"])


# --- request load: idle ratios and produce latency ----------------------------------------------------

CAPACITY = 100e6
FAST = TrafficSettings(request_capacity_bytes_per_sec=CAPACITY, signal_smoothing_s=1.0, produce_p99_ms=5.0)


@pytest.mark.parametrize(
    ("moved", "dt_s", "expected"),
    [
        (TickTraffic(), 1.0, 0.0),
        (TickTraffic(produce_in=10e6), 1.0, 0.1),
        (TickTraffic(consumer_out=10e6), 0.5, 0.2),
        (TickTraffic(replication_in=20e6, replication_out=20e6), 1.0, 0.4),
        (TickTraffic(produce_in=10e6, consumer_out=20e6, replication_in=5e6, replication_out=15e6), 1.0, 0.5),
        (TickTraffic(replication_in=500e6), 1.0, 1.0),
        (TickTraffic(produce_in=10e6), 0.0, 0.0),
    ],
)
def test_busy_fraction_counts_every_byte_against_the_capacity(
    moved: TickTraffic, dt_s: float, expected: float
) -> None:
    assert busy_fraction(moved, dt_s, CAPACITY) == pytest.approx(expected)


def test_smoothing_follows_a_step_as_a_one_minute_rate_does() -> None:
    value, elapsed = 0.0, 0.0
    while elapsed < 60.0 - 1e-9:
        value = smooth(value, 1.0, 0.1, 60.0)
        elapsed += 0.1
    assert value == pytest.approx(1 - math.exp(-1), rel=1e-6), "63 % of a step after one time constant"
    assert smooth(0.4, 1.0, 0.0, 60.0) == 0.4, "no time, no change"
    assert smooth(0.4, 0.0, 1e9, 60.0) == pytest.approx(0.0), "a long pause forgets the past"


def test_produce_latency_rises_with_busy_as_a_queue_and_is_capped() -> None:
    assert produce_latency_ms(0.0, 5.0) == 5.0
    assert produce_latency_ms(0.5, 5.0) == pytest.approx(10.0)
    assert produce_latency_ms(0.9, 5.0) == pytest.approx(50.0)
    assert produce_latency_ms(1.0, 5.0) == PRODUCE_LATENCY_CAP_MS
    assert produce_latency_ms(1.5, 5.0) == PRODUCE_LATENCY_CAP_MS
    assert produce_latency_ms(-1.0, 5.0) == 5.0
    series = [produce_latency_ms(b / 100, 5.0) for b in range(101)]
    assert series == sorted(series)
    assert max(series) == PRODUCE_LATENCY_CAP_MS


def test_the_percentiles_are_ordered_at_every_load() -> None:
    assert list(PRODUCE_QUANTILES) == ["0.50", "0.75", "0.95", "0.98", "0.99", "0.999"]
    assert PRODUCE_QUANTILES["0.99"] == 1.0
    for busy in (0.0, 0.3, 0.7, 0.99):
        values = [produce_latency_ms(busy, 5.0, f) for f in PRODUCE_QUANTILES.values()]
        assert values == sorted(values), busy


def test_request_load_rises_with_traffic_and_falls_back_when_it_stops() -> None:
    broker = fresh_broker()
    heavy = TickTraffic(produce_in=20e6, consumer_out=40e6, replication_out=20e6)

    for _ in range(100):  # 10 s at 100 ms ticks: ten time constants
        update_request_load(broker, scale(heavy, 0.1), 0.1, FAST)
    assert broker.request_load.busy == pytest.approx(0.8, abs=1e-3)

    for _ in range(100):
        update_request_load(broker, TickTraffic(), 0.1, FAST)
    assert broker.request_load.busy == pytest.approx(0.0, abs=1e-3)


def test_un_throttled_replication_alone_makes_a_broker_busy() -> None:
    broker = fresh_broker()
    replication = TickTraffic(replication_in=FAST.replica_fetch_bytes_per_sec * 0.1)

    for _ in range(100):
        update_request_load(broker, replication, 0.1, FAST)

    assert broker.request_load.busy == pytest.approx(
        min(1.0, FAST.replica_fetch_bytes_per_sec / CAPACITY), abs=1e-3
    )


def test_the_default_capacity_makes_a_follower_copying_at_full_speed_busy_past_the_threshold() -> None:
    """The defaults are chosen so that an un-throttled reassignment shows: one follower's full
    replication bandwidth takes its request threads below 30 % idle."""
    defaults = TrafficSettings()
    busy = busy_fraction(
        TickTraffic(replication_in=defaults.replica_fetch_bytes_per_sec),
        1.0,
        defaults.request_capacity_bytes_per_sec,
    )
    assert 1 - busy < 0.3


def test_request_load_is_lost_with_the_broker_process() -> None:
    broker = fresh_broker()
    update_request_load(broker, TickTraffic(produce_in=50e6), 1.0, FAST)
    assert broker.request_load.busy > 0

    broker.forget_session_state()

    assert broker.request_load.busy == 0.0


def test_a_skewed_broker_is_busier_and_its_signals_come_back_when_the_skew_is_reset() -> None:
    """Two brokers each leading one partition, with the produce rate and capacity such that a skew of x8
    takes broker 1 to 80 % busy; resetting the skew brings it back to 10 %."""
    settings = ReferenceClusterSettings(
        brokers=2,
        traffic=TrafficSettings(
            produce_bytes_per_sec=1e6,
            consumer_fanout=1.0,
            request_capacity_bytes_per_sec=20e6,
            signal_smoothing_s=0.5,
        ),
    )
    brokers = {0: fresh_broker(0), 1: fresh_broker(1)}
    for leader in (0, 1):
        tp = TopicPartition("orders", leader)
        brokers[leader].create_log(tp, 0.0)
        brokers[leader].apply_leader_and_isr(
            tp, LeaderAndIsr(leader, 0, (leader,), 1), ReplicaAssignment((leader,)), None, 0.0, 0.0
        )
    traffic = TrafficModel(settings.traffic)
    step = 0

    def run(seconds: float) -> dict[int, float]:
        nonlocal step
        for _ in range(int(seconds * 10)):
            step += 1
            _, moved = advance(brokers, settings, traffic, Throttles.none(), lambda _t: 1, step * 100.0, 0.1)
            for broker in brokers.values():
                update_request_load(broker, moved[broker.id], 0.1, settings.traffic)
        return {b: broker.request_load.busy for b, broker in brokers.items()}

    assert run(5) == pytest.approx({0: 0.1, 1: 0.1}, abs=1e-3)
    traffic.apply_skew({"brokers": {"1": 8}}, {0, 1}, {"orders": 2})
    assert run(5) == pytest.approx({0: 0.1, 1: 0.8}, abs=1e-3)
    traffic.apply_skew({"reset": True}, {0, 1}, {"orders": 2})
    assert run(5) == pytest.approx({0: 0.1, 1: 0.1}, abs=1e-3)


def scale(moved: TickTraffic, factor: float) -> TickTraffic:
    return TickTraffic(
        moved.produce_in * factor,
        moved.consumer_out * factor,
        moved.replication_in * factor,
        moved.replication_out * factor,
    )
