"""The adaptive throttle's controller: the request model, the signals from a scrape, the thresholds, the
URPs outside the reassignment, and :func:`next_rate` (additive increase, multiplicative decrease, the
interval, missing signals), :func:`catch_up` (a copy falling behind), with properties over random inputs:
the rate never leaves its bounds."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.actions.adaptive import (
    NETWORK_PROCESSOR_IDLE,
    PRODUCE_P99_MS,
    REQUEST_HANDLER_IDLE,
    UNDER_REPLICATED,
    AdaptiveThrottle,
    BrokerSignals,
    ThrottleDecision,
    assess,
    catch_up,
    next_rate,
    produce_baselines,
    produce_p99_limit_ms,
    signals_from_scrape,
    urps_outside,
)
from collectors.kafka.model import TopicPartition
from collectors.metrics import BrokerScrape, MetricsScrape
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit

MIB = 1024 * 1024
SETTINGS = AdaptiveThrottle(mode="adaptive", min_bytes_per_s=10 * MIB, max_bytes_per_s=110 * MIB)
"""Step 10 MiB/s (a tenth of the range), interval 30 s, halving when unhealthy."""
HEALTHY = BrokerSignals(request_handler_idle=0.8, network_processor_idle=0.7, produce_p99_ms=8.0)
BUSY_HANDLERS = BrokerSignals(request_handler_idle=0.2, network_processor_idle=0.7, produce_p99_ms=8.0)
INVOLVED = (1, 2, 3)


def decide(
    current: int = 50 * MIB,
    signals: dict[int, BrokerSignals] | None = None,
    involved: tuple[int, ...] = INVOLVED,
    urps: tuple[TopicPartition, ...] = (),
    now: float = 1000.0,
    last_change_at: float | None = None,
    settings: AdaptiveThrottle = SETTINGS,
) -> Any:
    if signals is None:
        signals = dict.fromkeys(involved, HEALTHY)
    return next_rate(current, signals, involved, urps, now, last_change_at, settings)


# --- the request model ---------------------------------------------------------------------------------


def test_the_request_takes_the_mode_and_bounds_and_defaults_the_rest() -> None:
    throttle = AdaptiveThrottle.model_validate(
        {"mode": "adaptive", "min_bytes_per_s": 1_000_000, "max_bytes_per_s": 50_000_000}
    )

    assert throttle.interval_s == 30.0
    assert throttle.step == 4_900_000
    assert throttle.initial_rate == 1_000_000
    assert throttle.decrease_factor == 0.5
    assert (throttle.request_handler_idle_min, throttle.network_processor_idle_min) == (0.3, 0.3)
    assert (throttle.produce_p99_max_ms, throttle.produce_p99_factor, throttle.produce_p99_floor_ms) == (
        500.0,
        3.0,
        20.0,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"min_bytes_per_s": 0, "max_bytes_per_s": 10}, "min_bytes_per_s"),
        (
            {"min_bytes_per_s": 20, "max_bytes_per_s": 10},
            r"min_bytes_per_s \(20\) is above max_bytes_per_s \(10\)",
        ),
        ({"max_bytes_per_s": 10}, "min_bytes_per_s"),
        ({"min_bytes_per_s": 1}, "max_bytes_per_s"),
        ({"min_bytes_per_s": 1, "max_bytes_per_s": 10, "mode": "static"}, "mode"),
        ({"min_bytes_per_s": 1, "max_bytes_per_s": 10, "interval_s": 0}, "interval_s"),
        ({"min_bytes_per_s": 1, "max_bytes_per_s": 10, "decrease_factor": 1}, "decrease_factor"),
        (
            {"min_bytes_per_s": 1, "max_bytes_per_s": 10, "request_handler_idle_min": 1.5},
            "request_handler_idle_min",
        ),
        ({"min_bytes_per_s": 1, "max_bytes_per_s": 10, "produce_p99_factor": 1}, "produce_p99_factor"),
        ({"min_bytes_per_s": 1, "max_bytes_per_s": 10, "throttle": 5}, "Extra inputs are not permitted"),
        ({"min_bytes_per_s": 1.5, "max_bytes_per_s": 10}, "min_bytes_per_s"),
    ],
)
def test_bad_requests_are_refused_with_the_field_named(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AdaptiveThrottle.model_validate({"mode": "adaptive", **body})


def test_equal_bounds_make_a_fixed_rate_and_a_step_of_at_least_one_byte() -> None:
    fixed = AdaptiveThrottle(mode="adaptive", min_bytes_per_s=5, max_bytes_per_s=5)
    assert fixed.step == 1
    assert decide(5, settings=fixed) is None
    assert decide(5, {1: BUSY_HANDLERS}, settings=fixed) is None


# --- signals from a scrape --------------------------------------------------------------------------------


def scrape_of(values: dict[int, dict[str, float] | None]) -> MetricsScrape:
    scrapes = {
        b: BrokerScrape(b, f"http://b{b}/metrics", 0.0, 0.01, v or {}, None if v is not None else "refused")
        for b, v in values.items()
    }
    return MetricsScrape(scrapes, 0.0, 0.01)


def test_signals_come_from_the_scrape_of_the_brokers_scraped_well() -> None:
    scrape = scrape_of(
        {
            1: {REQUEST_HANDLER_IDLE: 0.9, NETWORK_PROCESSOR_IDLE: 0.8, PRODUCE_P99_MS: 7.0, "urp": 0.0},
            2: {REQUEST_HANDLER_IDLE: 0.4},
            3: None,
            4: {"cpuUsed": 2.0, PRODUCE_P99_MS: 0.0},
        }
    )

    signals = signals_from_scrape(scrape, baselines={1: 5.0})

    assert signals == {
        1: BrokerSignals(0.9, 0.8, 7.0, 5.0),
        2: BrokerSignals(request_handler_idle=0.4),
        4: BrokerSignals(produce_p99_ms=0.0),
    }
    assert [b for b, s in signals.items() if s.known] == [1, 2, 4]
    assert not BrokerSignals().known
    assert not BrokerSignals(request_handler_idle=math.nan).known
    assert signals_from_scrape(None) == {}


def test_baselines_are_each_brokers_produce_p99_when_it_has_one() -> None:
    scrape = scrape_of({1: {PRODUCE_P99_MS: 6.5}, 2: {PRODUCE_P99_MS: 0.0}, 3: None, 4: {}})

    assert produce_baselines(scrape) == {1: 6.5}
    assert produce_baselines(None) == {}


# --- thresholds ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("baseline", "limit"),
    [
        (None, 500.0),
        (0.0, 500.0),
        (-1.0, 500.0),
        (math.nan, 500.0),
        (2.0, 20.0),
        (10.0, 30.0),
        (400.0, 500.0),
    ],
)
def test_the_produce_latency_limit_is_relative_to_the_baseline_between_floor_and_bound(
    baseline: float | None, limit: float
) -> None:
    assert produce_p99_limit_ms(baseline, SETTINGS) == limit


@pytest.mark.parametrize(
    ("signals", "signal", "sentence"),
    [
        (
            BrokerSignals(request_handler_idle=0.29),
            REQUEST_HANDLER_IDLE,
            "broker 2: request-handler idle 0.29 < 0.30",
        ),
        (
            BrokerSignals(network_processor_idle=0.1),
            NETWORK_PROCESSOR_IDLE,
            "broker 2: network-processor idle 0.10 < 0.30",
        ),
        (
            BrokerSignals(produce_p99_ms=501.0),
            PRODUCE_P99_MS,
            "broker 2: produce p99 501.0 ms > 500.0 ms (the absolute bound)",
        ),
        (
            BrokerSignals(produce_p99_ms=31.0, produce_p99_baseline_ms=10.0),
            PRODUCE_P99_MS,
            "broker 2: produce p99 31.0 ms > 30.0 ms (3x its baseline 10.0 ms)",
        ),
    ],
)
def test_each_signal_past_its_threshold_is_a_finding_naming_the_broker(
    signals: BrokerSignals, signal: str, sentence: str
) -> None:
    found = assess({1: HEALTHY, 2: signals}, INVOLVED, (), SETTINGS)

    assert found.healthy == (1,)
    assert found.unhealthy == (2,)
    assert found.unknown == (3,)
    [finding] = found.findings
    assert (finding.broker, finding.signal, finding.sentence) == (2, signal, sentence)


def test_signals_at_their_thresholds_are_healthy() -> None:
    edge = BrokerSignals(0.3, 0.3, 30.0, 10.0)
    assert assess({1: edge}, (1,), (), SETTINGS).healthy == (1,)
    assert assess({1: BrokerSignals(produce_p99_ms=500.0)}, (1,), (), SETTINGS).healthy == (1,)


def test_a_broker_with_every_signal_bad_has_a_finding_for_each() -> None:
    bad = BrokerSignals(0.1, 0.2, 900.0, 5.0)
    found = assess({7: bad}, (7,), (), SETTINGS)
    assert [f.signal for f in found.findings] == [
        REQUEST_HANDLER_IDLE,
        NETWORK_PROCESSOR_IDLE,
        PRODUCE_P99_MS,
    ]


def test_brokers_not_involved_do_not_count() -> None:
    found = assess({1: HEALTHY, 9: BUSY_HANDLERS}, (1,), (), SETTINGS)
    assert (found.healthy, found.unhealthy, found.findings) == ((1,), (), ())


# --- URPs outside the reassignment -----------------------------------------------------------------------


def test_urps_outside_the_moving_partitions() -> None:
    snapshot = cluster(
        partition("orders", 0, [1, 2, 3], isr=[1]),  # moving
        partition("orders", 1, [1, 2, 3], isr=[1, 2]),  # under-replicated, not moving
        partition("orders", 2, [1, 2, 3]),  # healthy
        partition(
            "orders", 3, [4, 1, 2, 3], adding=[4], removing=[3]
        ),  # a reassignment's new replica: not URP
        partition("payments", 0, [2, 3], isr=[3]),
        partition("payments", 1, [2, 3], with_state=False),  # no state: not known
        partition("payments", 2, [2, 3], isr=[], leader=-1),  # offline: under-replicated too
        brokers=(1, 2, 3, 4),
    )

    assert urps_outside(snapshot, [TopicPartition("orders", 0)]) == (
        TopicPartition("orders", 1),
        TopicPartition("payments", 0),
        TopicPartition("payments", 2),
    )
    assert urps_outside(snapshot, snapshot.partitions) == ()


# --- next_rate ------------------------------------------------------------------------------------------


def test_healthy_brokers_raise_the_rate_by_the_step() -> None:
    decision = decide(50 * MIB)

    assert decision.rate == 60 * MIB
    assert decision.previous == 50 * MIB
    assert decision.direction == "raise"
    assert decision.at == 1000.0
    assert decision.findings == ()
    assert decision.reason == (
        "raising the throttle 52428800 B/s (50.0 MiB/s) -> 62914560 B/s (60.0 MiB/s): "
        "brokers 1, 2, 3 healthy (every signal within its threshold)"
    )


def test_one_unhealthy_broker_halves_the_rate_and_the_reason_names_it() -> None:
    decision = decide(50 * MIB, {1: HEALTHY, 2: BUSY_HANDLERS, 3: HEALTHY})

    assert decision.rate == 25 * MIB
    assert decision.direction == "lower"
    assert decision.reason == (
        "lowering the throttle 52428800 B/s (50.0 MiB/s) -> 26214400 B/s (25.0 MiB/s): "
        "broker 2: request-handler idle 0.20 < 0.30"
    )
    assert [(f.broker, f.signal) for f in decision.findings] == [(2, REQUEST_HANDLER_IDLE)]


def test_under_replicated_partitions_outside_lower_the_rate_even_without_signals() -> None:
    urps = tuple(TopicPartition("orders", p) for p in range(7))
    decision = decide(50 * MIB, {}, urps=urps)

    assert decision.rate == 25 * MIB
    assert decision.reason.endswith(
        "7 partition(s) under-replicated outside the reassignment "
        "(orders-0, orders-1, orders-2, orders-3, orders-4 and 2 more); "
        "brokers 1, 2, 3 without signals, counted neither healthy nor unhealthy"
    )
    assert [f.signal for f in decision.findings] == [UNDER_REPLICATED]


def test_no_signals_at_all_hold_the_rate() -> None:
    assert decide(50 * MIB, {}) is None
    assert decide(50 * MIB, {1: BrokerSignals(), 2: BrokerSignals(request_handler_idle=math.nan)}) is None
    assert decide(50 * MIB, {1: HEALTHY}, involved=()) is None


def test_a_broker_without_signals_counts_neither_way_and_the_reason_says_so() -> None:
    raised = decide(50 * MIB, {1: HEALTHY})
    assert raised.rate == 60 * MIB
    assert raised.reason.endswith(
        "broker 1 healthy (every signal within its threshold); "
        "brokers 2, 3 without signals, counted neither healthy nor unhealthy"
    )
    lowered = decide(50 * MIB, {3: BUSY_HANDLERS})
    assert lowered.rate == 25 * MIB
    assert "brokers 1, 2 without signals" in lowered.reason


def test_never_more_often_than_the_interval() -> None:
    unhealthy = {1: BUSY_HANDLERS}
    assert decide(last_change_at=1000.0, now=1029.9) is None
    assert decide(signals=unhealthy, last_change_at=1000.0, now=1029.9) is None
    assert decide(last_change_at=1000.0, now=1030.0).rate == 60 * MIB
    assert decide(signals=unhealthy, last_change_at=None, now=0.0).rate == 25 * MIB


def test_the_rate_stops_at_its_bounds() -> None:
    assert decide(105 * MIB).rate == 110 * MIB
    assert decide(110 * MIB) is None, "at the ceiling, healthy: no change"
    assert decide(15 * MIB, {1: BUSY_HANDLERS}).rate == 10 * MIB
    assert decide(10 * MIB, {1: BUSY_HANDLERS}) is None, "at the floor, unhealthy: no change"


def test_a_rate_outside_the_bounds_is_brought_back_within() -> None:
    above = decide(500 * MIB)
    assert above.rate == 110 * MIB
    assert above.direction == "lower"
    assert above.reason.startswith("lowering (back within the bounds) the throttle")
    below = decide(1 * MIB, {1: BUSY_HANDLERS})
    assert below.rate == 10 * MIB
    assert below.reason.startswith("raising (back within the bounds) the throttle")


def test_a_ramp_from_the_floor_takes_ten_healthy_intervals_and_one_bad_one_halves_it() -> None:
    rate, at, last = SETTINGS.initial_rate, 0.0, None
    rates = [rate]
    for _ in range(12):
        at += SETTINGS.interval_s
        decision = decide(rate, now=at, last_change_at=last)
        if decision is not None:
            rate, last = decision.rate, decision.at
        rates.append(rate)
    assert rates[10] == rates[-1] == SETTINGS.max_bytes_per_s
    assert rates[:11] == [SETTINGS.min_bytes_per_s + i * SETTINGS.step for i in range(11)]
    at += SETTINGS.interval_s
    assert decide(rate, {2: BUSY_HANDLERS}, now=at, last_change_at=last).rate == 55 * MIB


# --- properties -----------------------------------------------------------------------------------------

idle = st.one_of(st.none(), st.floats(-0.5, 1.5), st.just(math.nan))
latency = st.one_of(st.none(), st.floats(0, 1e5), st.just(math.nan))
signals_strategy = st.builds(BrokerSignals, idle, idle, latency, latency)
throttles = st.integers(1, 10**10).flatmap(
    lambda low: st.builds(
        AdaptiveThrottle,
        mode=st.just("adaptive"),
        min_bytes_per_s=st.just(low),
        max_bytes_per_s=st.integers(low, low + 10**10),
        increase_step_bytes_per_s=st.one_of(st.none(), st.integers(1, 10**9)),
        decrease_factor=st.floats(0.01, 0.99),
    )
)


@given(
    settings=throttles,
    position=st.floats(0, 1),
    signals=st.dictionaries(st.integers(0, 5), signals_strategy, max_size=6),
    involved=st.frozensets(st.integers(0, 5), max_size=6),
    urps=st.lists(st.builds(TopicPartition, st.just("t"), st.integers(0, 9)), max_size=3),
)
def test_the_rate_never_leaves_its_bounds_and_moves_the_way_the_signals_say(
    settings: AdaptiveThrottle,
    position: float,
    signals: dict[int, BrokerSignals],
    involved: frozenset[int],
    urps: list[TopicPartition],
) -> None:
    low, high = settings.min_bytes_per_s, settings.max_bytes_per_s
    current = settings.clamp(low + position * (high - low))
    decision = next_rate(current, signals, involved, urps, 100.0, None, settings)
    found = assess(signals, involved, urps, settings)

    if decision is None:
        assert not found.findings or current == low
        assert found.findings or not found.healthy or current == high
        return
    assert low <= decision.rate <= high
    assert decision.rate != current
    assert decision.direction == ("lower" if found.findings else "raise")
    assert (decision.rate < current) == (decision.direction == "lower")
    assert decision.reason


@given(
    settings=throttles,
    steps=st.lists(st.tuples(st.booleans(), st.floats(0, 120)), min_size=1, max_size=40),
)
def test_over_a_run_the_rate_stays_within_bounds_and_changes_at_most_once_per_interval(
    settings: AdaptiveThrottle, steps: list[tuple[bool, float]]
) -> None:
    rate, now, last = settings.initial_rate, 0.0, None
    changes = []
    for healthy, wait in steps:
        now += wait
        decision = next_rate(rate, {1: HEALTHY if healthy else BUSY_HANDLERS}, (1,), (), now, last, settings)
        if decision is not None:
            rate, last = decision.rate, decision.at
            changes.append(now)
        assert settings.min_bytes_per_s <= rate <= settings.max_bytes_per_s
    assert all(b - a >= settings.interval_s for a, b in itertools.pairwise(changes))


# --- a copy falling behind --------------------------------------------------------------------------------

BEHIND = "falling behind: bytes remaining grew from 47.0 MiB to 58.0 MiB in 120 s"


def behind(
    current: int = 50 * MIB,
    growth: float = 3 * MIB,
    signals: dict[int, BrokerSignals] | None = None,
    urps: tuple[TopicPartition, ...] = (),
    settings: AdaptiveThrottle = SETTINGS,
) -> ThrottleDecision | str:
    if signals is None:
        signals = dict.fromkeys(INVOLVED, HEALTHY)
    return catch_up(current, growth, BEHIND, signals, INVOLVED, urps, 1000.0, settings)


def test_falling_behind_raises_by_twice_the_growth_at_once() -> None:
    decision = behind(growth=15 * MIB)
    assert isinstance(decision, ThrottleDecision)
    assert (decision.previous, decision.rate, decision.direction) == (50 * MIB, 80 * MIB, "raise")
    assert BEHIND in decision.reason
    assert decision.reason.startswith("raising the throttle")


def test_falling_behind_slowly_raises_by_the_step_at_least() -> None:
    decision = behind(growth=1.0)
    assert isinstance(decision, ThrottleDecision)
    assert decision.rate == 60 * MIB


def test_falling_behind_without_signals_still_raises() -> None:
    decision = behind(signals={})
    assert isinstance(decision, ThrottleDecision)
    assert decision.rate == 60 * MIB


def test_falling_behind_stops_at_the_ceiling_and_then_says_it_cannot_rise() -> None:
    decision = behind(current=105 * MIB, growth=50 * MIB)
    assert isinstance(decision, ThrottleDecision)
    assert decision.rate == 110 * MIB
    held = behind(current=110 * MIB)
    assert held == "the adaptive throttle is at its maximum, 115343360 B/s (110.0 MiB/s)"


def test_falling_behind_does_not_raise_while_a_broker_is_unhealthy() -> None:
    held = behind(signals={1: HEALTHY, 2: BUSY_HANDLERS, 3: HEALTHY})
    assert isinstance(held, str)
    assert held.startswith("the adaptive throttle cannot rise from 52428800 B/s")
    assert "broker 2: request-handler idle 0.20 < 0.30" in held
    urps = behind(urps=(TopicPartition("other", 0),))
    assert isinstance(urps, str)
    assert "under-replicated outside the reassignment" in urps
