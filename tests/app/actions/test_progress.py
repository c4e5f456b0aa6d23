"""Progress and ETA of a reassignment: bytes per moving replica against its leader's log, partitions and
replicas done, the smoothed rate and the ETA over observations, the fall back to partition counts, and the
verdict on a copy falling behind (its bytes remaining growing over the window)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.actions.progress import (
    FallingBehind,
    PartitionMove,
    ProgressEstimate,
    ReplicaProgress,
    Sample,
    byte_size,
    bytes_remaining_of,
    estimate_progress,
    falling_behind,
    moves_of,
    window_of,
)
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit

BROKERS = (1, 2, 3, 4, 5)
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
MOVE_0 = PartitionMove(P0, origin=(1, 2, 3), target=(2, 3, 4))  # adds broker 4
MOVE_1 = PartitionMove(P1, origin=(2, 3, 1), target=(5, 3, 1))  # adds broker 5


def before_any_batch() -> ClusterSnapshot:
    return cluster(partition("orders", 0, [1, 2, 3]), partition("orders", 1, [2, 3, 1]), brokers=BROKERS)


def copying(isr_0: tuple[int, ...] = (1, 2, 3), isr_1: tuple[int, ...] = (2, 3, 1)) -> ClusterSnapshot:
    """Both partitions being reassigned (Kafka's RS = target ++ origin, distinct)."""
    return cluster(
        partition("orders", 0, [2, 3, 4, 1], isr=isr_0, leader=1, adding=[4], removing=[1]),
        partition("orders", 1, [5, 3, 1, 2], isr=isr_1, leader=2, adding=[5], removing=[2]),
        brokers=BROKERS,
    )


def finished(partitions: tuple[int, ...] = (0, 1)) -> ClusterSnapshot:
    return cluster(
        partition("orders", 0, [2, 3, 4]) if 0 in partitions else partition("orders", 0, [1, 2, 3]),
        partition("orders", 1, [5, 3, 1]) if 1 in partitions else partition("orders", 1, [2, 3, 1]),
        brokers=BROKERS,
    )


def sizes(new_0: float | None = 0.0, new_1: float | None = 0.0) -> dict[int, dict[TopicPartition, float]]:
    """Leaders 1 (orders-0, 1000 bytes) and 2 (orders-1, 3000 bytes); brokers 4 and 5 hold the copies."""
    out: dict[int, dict[TopicPartition, float]] = {
        1: {P0: 1000.0, P1: 3000.0},
        2: {P0: 1000.0, P1: 3000.0},
        3: {P0: 1000.0, P1: 3000.0},
        4: {TopicPartition("other", 0): 5.0},
        5: {TopicPartition("other", 1): 5.0},
    }
    if new_0 is not None:
        out[4][P0] = new_0
    else:
        del out[4]
    if new_1 is not None:
        out[5][P1] = new_1
    else:
        del out[5]
    return out


MOVES = [MOVE_0, MOVE_1]


def test_a_move_is_the_replicas_the_target_adds() -> None:
    assert MOVE_0.new_replicas == (4,)
    assert PartitionMove(P0, (1, 2, 3), (3, 2, 1)).new_replicas == ()
    assert PartitionMove(P0, (1, 2), (3, 4, 1)).new_replicas == (3, 4)
    assert moves_of({P0: [2, 3, 4], P1: [5]}, {P0: (1, 2, 3)}) == [
        MOVE_0,
        PartitionMove(P1, (), (5,)),
    ]


def test_before_the_first_batch_everything_remains_and_there_is_no_eta() -> None:
    estimate = estimate_progress(MOVES, before_any_batch(), sizes(), None, now=100.0)

    assert (estimate.partitions_total, estimate.partitions_done, estimate.partitions_remaining) == (2, 0, 2)
    assert (estimate.replicas_total, estimate.replicas_done) == (2, 0)
    assert estimate.basis == "bytes"
    assert (estimate.bytes_total, estimate.bytes_done, estimate.bytes_remaining) == (4000.0, 0.0, 4000.0)
    assert estimate.rate_bytes_per_s is None
    assert estimate.eta_s is None
    assert estimate.observations == 1
    assert estimate.replicas == (
        ReplicaProgress(P0, 4, False, 0.0, 1000.0),
        ReplicaProgress(P1, 5, False, 0.0, 3000.0),
    )


def test_the_rate_and_eta_follow_the_copy_and_smooth_over_observations() -> None:
    first = estimate_progress(MOVES, copying(), sizes(0.0, 0.0), None, now=100.0)
    second = estimate_progress(MOVES, copying(), sizes(200.0, 200.0), first, now=110.0)

    assert second.bytes_done == 400.0
    assert second.rate_bytes_per_s == pytest.approx(40.0), "the first rate is the first observed"
    assert second.eta_s == pytest.approx(3600.0 / 40.0)

    third = estimate_progress(MOVES, copying(), sizes(350.0, 350.0), second, now=120.0)
    rate = 0.3 * 30.0 + 0.7 * 40.0
    assert third.rate_bytes_per_s == pytest.approx(rate)
    assert third.eta_s == pytest.approx(3300.0 / rate)
    assert third.observations == 3

    stalled = estimate_progress(MOVES, copying(), sizes(350.0, 350.0), third, now=130.0)
    assert stalled.rate_bytes_per_s == pytest.approx(0.7 * rate)
    assert stalled.eta_s == pytest.approx(3300.0 / (0.7 * rate)), "no progress: the ETA moves away"


def test_no_eta_until_two_observations_show_progress() -> None:
    first = estimate_progress(MOVES, copying(), sizes(0.0, 0.0), None, now=100.0)
    still = estimate_progress(MOVES, copying(), sizes(0.0, 0.0), first, now=110.0)
    assert (still.rate_bytes_per_s, still.eta_s) == (None, None)
    moving = estimate_progress(MOVES, copying(), sizes(100.0, 0.0), still, now=120.0)
    assert moving.rate_bytes_per_s == pytest.approx(10.0)
    assert moving.eta_s == pytest.approx(3900.0 / 10.0)


def test_a_replica_in_the_isr_is_done_and_a_finished_partition_counts_in_full() -> None:
    in_sync = estimate_progress(MOVES, copying(isr_0=(1, 2, 3, 4)), sizes(990.0, 100.0), None, now=100.0)
    assert in_sync.replicas_done == 1
    assert in_sync.partitions_done == 0, "still reassigning: the old replica is not removed yet"
    assert in_sync.replicas[0] == ReplicaProgress(P0, 4, True, 1000.0, 1000.0)
    assert in_sync.bytes_done == 1100.0

    one_done = estimate_progress(MOVES, finished((0,)), sizes(1000.0, 100.0), None, now=100.0)
    assert (one_done.partitions_done, one_done.partitions_remaining) == (1, 1)

    done = estimate_progress(MOVES, finished(), sizes(1000.0, 3000.0), one_done, now=200.0)
    assert (done.partitions_done, done.replicas_done) == (2, 2)
    assert done.bytes_remaining == 0.0
    assert done.eta_s == 0.0


def test_a_copy_larger_than_its_leader_counts_as_the_leaders_size() -> None:
    estimate = estimate_progress([MOVE_0], copying(), sizes(1500.0), None, now=1.0)
    assert estimate.replicas[0].bytes_done == 1000.0


def test_without_the_leaders_size_an_in_sync_replicas_is_used() -> None:
    measured = sizes(250.0)
    del measured[1]  # the leader of orders-0 was not read
    measured[2][P0], measured[3][P0] = 990.0, 1000.0

    estimate = estimate_progress([MOVE_0], copying(), measured, None, now=1.0)

    assert estimate.replicas[0] == ReplicaProgress(P0, 4, False, 250.0, 1000.0)


@pytest.mark.parametrize(
    ("log_sizes", "why"),
    [
        (None, "no read at all"),
        (sizes(0.0, None), "broker 5 not read"),
        ({**sizes(0.0, 0.0), 5: {}}, "broker 5 read with no log at all: not exporting log sizes, or new"),
        ({b: {} for b in BROKERS}, "no broker exports log sizes"),
    ],
)
def test_partition_counts_are_the_fall_back_when_a_replicas_bytes_are_not_known(
    log_sizes: dict[int, dict[TopicPartition, float]] | None, why: str
) -> None:
    first = estimate_progress(MOVES, copying(), log_sizes, None, now=100.0)
    assert first.basis == "partitions", why
    assert (first.bytes_total, first.bytes_done, first.bytes_remaining) == (None, None, None)
    assert first.eta_s is None

    second = estimate_progress(MOVES, finished((0,)), log_sizes, first, now=160.0)
    assert second.basis == "partitions"
    assert second.rate_partitions_per_s == pytest.approx(1 / 60)
    assert second.eta_s == pytest.approx(60.0)


def test_a_broker_missing_from_one_read_does_not_show_as_a_jump() -> None:
    first = estimate_progress(MOVES, copying(), sizes(100.0, 1000.0), None, now=100.0)
    second = estimate_progress(MOVES, copying(), sizes(200.0, None), first, now=110.0)
    third = estimate_progress(MOVES, copying(), sizes(300.0, 1200.0), second, now=120.0)

    assert second.basis == "partitions"
    assert second.rate_bytes_per_s == pytest.approx(10.0), "over the replica measured both times"
    assert third.basis == "bytes"
    assert third.rate_bytes_per_s == pytest.approx(10.0), "orders-1's 1000 -> 1200 spans the gap: not counted"
    fourth = estimate_progress(MOVES, copying(), sizes(400.0, 1400.0), third, now=130.0)
    assert fourth.rate_bytes_per_s == pytest.approx(0.3 * (10.0 + 20.0) + 0.7 * 10.0)


def test_a_reordering_moves_no_bytes_and_counts_as_a_partition() -> None:
    reorder = PartitionMove(P0, (1, 2, 3), (3, 2, 1))

    pending = estimate_progress([reorder], before_any_batch(), sizes(), None, now=1.0)
    assert (pending.replicas_total, pending.partitions_done, pending.basis) == (0, 0, "partitions")
    done = estimate_progress(
        [reorder], cluster(partition("orders", 0, [3, 2, 1]), brokers=BROKERS), None, pending, 2.0
    )
    assert done.partitions_done == 1
    assert done.eta_s == 0.0


def test_the_figures_as_json_for_the_actions_progress() -> None:
    first = estimate_progress(MOVES, copying(), sizes(0.0, 0.0), None, now=100.0)
    second = estimate_progress(MOVES, copying(), sizes(200.0, 200.0), first, now=110.0)

    assert second.as_progress() == {
        "at": 110.0,
        "basis": "bytes",
        "partitions": {"total": 2, "done": 0, "remaining": 2},
        "replicas": {"total": 2, "done": 0},
        "bytes": {"total": 4000.0, "done": 400.0, "remaining": 3600.0},
        "rate_bytes_per_s": pytest.approx(40.0),
        "rate_partitions_per_s": None,
        "eta_s": pytest.approx(90.0),
        "observations": 2,
    }
    unmeasured = estimate_progress(MOVES, copying(), None, None, now=1.0).as_progress()
    assert unmeasured["bytes"] is None
    assert unmeasured["basis"] == "partitions"


def test_the_smoothing_weight_is_checked() -> None:
    for bad in (0.0, -0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="smoothing"):
            estimate_progress(MOVES, copying(), None, None, 1.0, smoothing=bad)


@given(
    reads=st.lists(
        st.tuples(st.floats(0, 2000), st.floats(0, 4000), st.floats(0.001, 100), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_figures_stay_consistent_over_any_sequence_of_reads(
    reads: list[tuple[float, float, float, bool]],
) -> None:
    previous: ProgressEstimate | None = None
    now = 0.0
    for new_0, new_1, wait, in_sync in reads:
        now += wait
        snapshot = copying(isr_0=(1, 2, 3, 4) if in_sync else (1, 2, 3))
        estimate = estimate_progress(MOVES, snapshot, sizes(new_0, new_1), previous, now)
        assert estimate.bytes_total == 4000.0
        assert estimate.bytes_done is not None
        assert 0.0 <= estimate.bytes_done <= estimate.bytes_total
        assert estimate.rate_bytes_per_s is None or estimate.rate_bytes_per_s >= 0
        assert estimate.eta_s is None or estimate.eta_s >= 0
        assert 0 <= estimate.replicas_done <= estimate.replicas_total == 2
        previous = estimate


# --- falling behind ------------------------------------------------------------------------------------

MB = 1024 * 1024


def grows(start: float, per_s: float, seconds: int, every: float = 2.0) -> list[Sample]:
    """Samples every ``every`` s over ``seconds``, the bytes remaining from ``start`` at ``per_s``."""
    steps = int(seconds / every)
    return [(1000.0 + i * every, start + per_s * i * every) for i in range(steps + 1)]


def test_bytes_remaining_growing_over_the_window_falls_behind_with_the_figures() -> None:
    """The probe's case: 47 MB to 58 MB over two minutes at a 256 KiB/s throttle."""
    samples = grows(47 * MB, 11 * MB / 120, 120)
    verdict = falling_behind(samples, 120.0)
    assert verdict == FallingBehind(1000.0, 1120.0, 47 * MB, 47 * MB + 11 * MB)
    assert verdict.growth_bytes_per_s == pytest.approx(11 * MB / 120)
    reason = verdict.reason(256 * 1024)
    assert reason.startswith("falling behind: bytes remaining grew from 47.0 MiB to 58.0 MiB in 120 s")
    assert "(+93.9 KiB/s)" in reason
    assert "at a throttle of 256.0 KiB/s" in reason
    assert "never catch up" in reason
    assert "no throttle" in verdict.reason(None)
    assert "; the adaptive throttle is at its maximum" in verdict.reason(
        1, held="the adaptive throttle is at its maximum"
    )


def test_too_soon_to_tell_until_the_samples_cover_the_window() -> None:
    assert falling_behind([], 10.0) is None
    assert falling_behind([(0.0, 5.0)], 10.0) is None
    assert falling_behind(grows(MB, 1000.0, 8), 10.0) is None
    assert falling_behind(grows(MB, 1000.0, 10), 10.0) is not None


def test_a_copy_catching_up_or_holding_does_not_fall_behind() -> None:
    assert falling_behind(grows(50 * MB, -1000.0, 60), 30.0) is None
    assert falling_behind(grows(50 * MB, 0.0, 60), 30.0) is None
    assert falling_behind(grows(0.0, 0.0, 60), 30.0) is None


def test_only_the_last_window_counts() -> None:
    """Grew, then caught up over the last window: not behind (however much it grew before)."""
    samples = grows(MB, 10_000.0, 30) + [(1032.0 + i * 2, 1.3 * MB - i * 5000.0) for i in range(16)]
    assert falling_behind(samples, 30.0) is None
    assert falling_behind(samples[:16], 30.0) is not None


def test_one_noisy_sample_neither_makes_nor_unmakes_the_verdict() -> None:
    catching_up = grows(MB, -5000.0, 20)
    spiked = [*catching_up[:-1], (catching_up[-1][0], MB + 1.0)]  # the last read a byte above the start
    assert falling_behind(spiked, 20.0) is None, "the trend over the window falls"
    rising = grows(MB, 5000.0, 20)
    rising[5] = (rising[5][0], 0.0)  # one read far below the line
    assert falling_behind(rising, 20.0) is not None
    ends_low = [*grows(MB, 5000.0, 20)[:-1], (1020.0, 0.9 * MB)]
    assert falling_behind(ends_low, 20.0) is None, "ends below where the window began"


def test_the_window_keeps_the_sample_where_it_begins() -> None:
    samples = grows(MB, 1.0, 20)
    kept = window_of(samples, 5.0)
    assert [at for at, _ in kept] == [1014.0, 1016.0, 1018.0, 1020.0], "from the last read 5 s ago or more"
    assert [at for at, _ in window_of([*kept, (1021.0, 2.0)], 5.0)] == [1016.0, 1018.0, 1020.0, 1021.0]
    assert window_of([], 5.0) == []
    assert window_of(samples[:2], 5.0) == samples[:2]
    with pytest.raises(ValueError, match="positive"):
        falling_behind(samples, 0.0)


@given(
    st.lists(st.floats(min_value=0, max_value=1e12, allow_nan=False), min_size=2, max_size=40),
    st.floats(min_value=0.5, max_value=100.0),
)
def test_a_verdict_always_means_net_growth_over_at_least_the_window(
    values: list[float], window: float
) -> None:
    samples = [(float(i), v) for i, v in enumerate(values)]
    verdict = falling_behind(samples, window)
    if verdict is not None:
        assert verdict.bytes_now > verdict.bytes_then
        assert verdict.elapsed_s >= window
        assert verdict.growth_bytes_per_s > 0
        assert verdict.at == samples[-1][0]


def test_bytes_remaining_of_the_batch_in_flight() -> None:
    estimate = estimate_progress(MOVES, copying(), sizes(new_0=400.0, new_1=1000.0), None, 0.0)
    assert bytes_remaining_of(estimate, [P0]) == 600.0
    assert bytes_remaining_of(estimate, [P0, P1]) == 600.0 + 2000.0
    assert bytes_remaining_of(estimate, [TopicPartition("other", 0)]) is None, "nothing moving"
    unmeasured = estimate_progress(MOVES, copying(), sizes(new_0=400.0, new_1=None), None, 0.0)
    assert bytes_remaining_of(unmeasured, [P0]) == 600.0
    assert bytes_remaining_of(unmeasured, [P0, P1]) is None
    caught_up = estimate_progress(MOVES, copying(isr_0=(1, 2, 3, 4)), sizes(new_0=400.0), None, 0.0)
    assert bytes_remaining_of(caught_up, [P0]) == 0.0


def test_byte_sizes_read_in_binary_units() -> None:
    assert [byte_size(v) for v in (12, 2048, 47 * MB, 3 * 1024 * MB)] == [
        "12 B",
        "2.0 KiB",
        "47.0 MiB",
        "3.0 GiB",
    ]
