"""Lag in records and in seconds, interpolated from the log-end history (issue 25, item 2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.consumers.lag import (
    LagSeconds,
    LogEndHistory,
    group_lag,
    lag_records,
    lag_seconds,
    partition_lag,
)
from collectors.kafka.model import TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition("orders", 0)


def test_lag_is_log_end_minus_committed_and_none_without_a_commit() -> None:
    assert lag_records(90, 100) == 10
    assert lag_records(None, 100) is None
    assert lag_records(105, 100) == 0


def test_lag_seconds_interpolates_between_two_samples() -> None:
    history = [(0.0, 0), (10.0, 100), (20.0, 200)]
    assert lag_seconds(history, 150, now=20.0) == LagSeconds(5.0)
    assert lag_seconds(history, 100, now=20.0) == LagSeconds(10.0)


def test_a_caught_up_consumer_is_zero_seconds_behind() -> None:
    assert lag_seconds([(0.0, 5), (10.0, 7)], 7, now=10.0) == LagSeconds(0.0)


def test_behind_the_whole_history_is_at_least_its_age() -> None:
    assert lag_seconds([(100.0, 50), (110.0, 60)], 10, now=110.0) == LagSeconds(10.0, at_least=True)


def test_an_idle_log_end_counts_from_when_it_stopped_growing() -> None:
    # the log end was 100 from t=10 on; a consumer at 50 is behind what was written between 0 and 10
    history = [(0.0, 0), (10.0, 100), (20.0, 100), (30.0, 100)]
    assert lag_seconds(history, 50, now=30.0) == LagSeconds(25.0)


def test_a_log_end_that_went_backwards_starts_the_history_again() -> None:
    history = [(0.0, 500), (10.0, 600), (20.0, 10), (30.0, 20)]
    assert lag_seconds(history, 15, now=30.0) == LagSeconds(5.0)
    assert lag_seconds(history, 5, now=30.0) == LagSeconds(10.0, at_least=True)


def test_no_history_or_no_commit_gives_none() -> None:
    assert lag_seconds([], 5, now=1.0) is None
    assert lag_seconds([(0.0, 1)], None, now=1.0) is None


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=5000),
    interval=st.floats(min_value=1, max_value=30),
    rounds=st.integers(min_value=20, max_value=1000),
    jitter=st.lists(st.floats(min_value=-0.3, max_value=0.3), min_size=1000, max_size=1000),
)
def test_a_consumer_60_s_behind_a_steady_producer_reads_60_plus_minus_10(
    rate: float, interval: float, rounds: int, jitter: list[float]
) -> None:
    """The done-means: rounds at a jittered interval, a producer at a steady rate, the consumer committed
    where the log end was 60 s ago; the collector's default history (thinned past its bound)."""
    history = LogEndHistory()
    t = 1000.0
    for i in range(rounds):
        t += interval * (1 + jitter[i])
        history.record(t, {TP: int(rate * t)})
    committed = int(rate * (t - 60))
    seconds = lag_seconds(history.of(TP), committed, now=t)
    assert seconds is not None
    if t - 60 >= history.of(TP)[0][0]:
        assert not seconds.at_least
        assert seconds.value == pytest.approx(60, abs=10)
    else:
        assert seconds.at_least
        assert seconds.value <= 60 + 10


def test_the_history_is_bounded_keeps_the_newest_half_and_reaches_back_sparsely() -> None:
    history = LogEndHistory(max_samples=8)
    other = TopicPartition("orders", 1)
    for t in range(100):
        history.record(float(t), {TP: t * 10, other: t})
    samples = history.of(TP)
    assert len(samples) <= 8
    assert samples[0] == (0.0, 0)  # the oldest is kept: the history reaches back to the start
    assert list(samples[-4:]) == [(96.0, 960), (97.0, 970), (98.0, 980), (99.0, 990)]
    assert [t for t, _ in samples] == sorted(t for t, _ in samples)
    history.forget_except([TP])
    assert history.of(other) == ()
    with pytest.raises(ValueError, match="at least 4"):
        LogEndHistory(max_samples=3)


def test_a_log_end_that_does_not_move_keeps_the_first_and_last_round_of_the_run() -> None:
    history = LogEndHistory()
    for t, end in [(0.0, 0), (10.0, 100), (20.0, 100), (30.0, 100), (3600.0, 100), (3610.0, 150)]:
        history.record(t, {TP: end})
    assert list(history.of(TP)) == [(0.0, 0), (10.0, 100), (3600.0, 100), (3610.0, 150)]
    # records 100..150 were written in the last round, not over the quiet hour
    assert lag_seconds(history.of(TP), 125, now=3610.0) == LagSeconds(5.0)
    assert lag_seconds(history.of(TP), 50, now=3610.0) == LagSeconds(3605.0)


def test_a_group_sums_its_lag_and_takes_its_worst_seconds() -> None:
    a = partition_lag(TopicPartition("t", 0), 5, 0, 10, [(0.0, 0), (10.0, 10)], 10.0, member="m1")
    b = partition_lag(TopicPartition("t", 1), None, 0, 10, [(0.0, 0), (10.0, 10)], 10.0)
    c = partition_lag(TopicPartition("t", 2), 2, 0, 30, [(5.0, 5), (10.0, 30)], 10.0)
    group = group_lag("g", "Stable", 1, [c, b, a])
    assert [p.partition for p in group.partitions] == [0, 1, 2]
    assert group.lag == 5 + 28
    assert group.max_lag_seconds == 5.0
    assert group.max_lag_seconds_at_least
    assert group_lag("g", "Empty", 0, [b]).lag is None
