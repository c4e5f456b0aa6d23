"""The disk model: which filesystems are log dirs, the robust growth fit (a line recovered, retention drops
and a sudden fill survived, too few samples give nothing), the records, the top topics and bounded memory."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.disks import (
    MAX_SAMPLES,
    TOPIC_SNAPSHOTS,
    DiskModel,
    TopicGrowth,
    fit_growth,
    full_in,
    log_dir_filesystems,
)
from collectors.kafka.model import TopicPartition
from collectors.metrics import BrokerScrape, Filesystem, MetricsScrape

pytestmark = pytest.mark.unit

GB = 1024.0**3
MB = 1024.0**2
DATA0 = "/var/lib/kafka/data-0"
DATA1 = "/var/lib/kafka/data-1"


def test_log_dirs_are_the_set_mount_points_in_order_else_the_kafka_and_data_ones() -> None:
    served = {"/": Filesystem(50 * GB, 20 * GB), DATA1: Filesystem(GB, GB), DATA0: Filesystem(GB, GB),
              "/boot": Filesystem(GB, GB), "/mnt/kafka": Filesystem(GB, GB)}  # fmt: skip
    assert list(log_dir_filesystems(served)) == ["/mnt/kafka", DATA0, DATA1]
    assert list(log_dir_filesystems(served, (DATA1, DATA0, "/gone"))) == [DATA1, DATA0]
    assert log_dir_filesystems({"/": Filesystem(GB, GB)}) == {}


@settings(max_examples=60, deadline=None)
@given(
    slope=st.floats(1e3, 5e8),
    start=st.floats(0, 1e12),
    interval=st.floats(1, 60),
    count=st.integers(3, 200),
)
def test_linear_growth_is_recovered_within_one_percent(
    slope: float, start: float, interval: float, count: int
) -> None:
    samples = [(1000.0 + i * interval, start + slope * i * interval) for i in range(count)]
    growth = fit_growth(samples)
    assert growth is not None
    assert growth == pytest.approx(slope, rel=0.01)


@settings(max_examples=60, deadline=None)
@given(
    slope=st.floats(1e5, 1e8),
    period=st.integers(8, 40),
    drop_share=st.floats(0.1, 0.9),
    phase=st.integers(0, 39),
)
def test_a_sawtooth_of_retention_drops_still_grows_at_its_underlying_rate(
    slope: float, period: int, drop_share: float, phase: int
) -> None:
    """Every ``period`` scrapes retention deletes ``drop_share`` of what was written since: the disk still
    fills (net rate slope * (1 - drop_share)); the fit is the rate between the drops, never negative, so
    full_in_s is between the tooth's and the net trend's prediction. (Drops smaller than 4 intervals' growth
    are no steps: Theil-Sen then weighs them, and gives about the net trend, within 5 %.)"""
    interval = 10.0
    used, samples = 100 * GB, []
    for i in range(180):
        if i and (i + phase) % period == 0:
            used -= drop_share * slope * interval * period
        samples.append((i * interval, used))
        used += slope * interval
    growth = fit_growth(samples)
    assert growth is not None
    assert growth > 0
    assert slope * (1 - drop_share) * 0.95 <= growth <= slope * 1.01
    avail = 500 * GB
    full = full_in(avail, growth)
    assert full is not None
    assert avail / slope * 0.99 <= full <= avail / (slope * (1 - drop_share)) * 1.05


def test_one_retention_drop_neither_empties_the_disk_nor_hides_its_growth() -> None:
    samples = [(i * 10.0, 100 * GB + 5 * MB * i * 10) for i in range(180)]
    dropped = [(t, u - (40 * GB if i >= 120 else 0)) for i, (t, u) in enumerate(samples)]
    assert fit_growth(dropped) == pytest.approx(5 * MB, rel=0.01)
    just_after = [(t, u - (40 * GB if i >= 178 else 0)) for i, (t, u) in enumerate(samples)]
    assert fit_growth(just_after) == pytest.approx(5 * MB, rel=0.01)


def test_a_sudden_fill_shows_its_new_rate_a_few_scrapes_later() -> None:
    """The done-means of issue 24: a log dir idle at 20 % for half an hour, filled to 90 % growing 5 MB/s:
    a minute later full_in_s is within 20 % of the truth (here: exact)."""
    size = 1000 * GB
    samples = [(i * 10.0, 0.2 * size) for i in range(180)]
    for k in range(7):
        samples.append((1800.0 + k * 10.0, 0.9 * size + 5 * MB * k * 10.0))
    growth = fit_growth(samples[-180:])
    assert growth == pytest.approx(5 * MB, rel=0.01)
    avail = size - samples[-1][1]
    truth = avail / (5 * MB)
    full = full_in(avail, growth)
    assert full is not None
    assert abs(full - truth) <= 0.2 * truth


def test_too_few_samples_give_no_growth_and_a_shrinking_disk_is_never_full() -> None:
    assert fit_growth([]) is None
    assert fit_growth([(0.0, 1.0), (10.0, 2.0)]) is None
    assert fit_growth([(0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]) is None
    assert fit_growth([(0.0, 3 * GB), (10.0, 2 * GB), (20.0, GB)]) == pytest.approx(-GB / 10)
    assert full_in(GB, -5.0) is None
    assert full_in(GB, None) is None
    assert full_in(GB, 0.0) is None
    assert full_in(GB, 1 * MB) == pytest.approx(1024.0)


def scrape(
    broker_id: int, at: float, used: dict[str, float], sizes: dict[TopicPartition, int]
) -> BrokerScrape:
    filesystems = {m: Filesystem(1000 * GB, 1000 * GB - u) for m, u in used.items()}
    filesystems["/"] = Filesystem(50 * GB, 10 * GB)
    return BrokerScrape(broker_id, "http://b/metrics", at, 0.01, {}, filesystems=filesystems, log_sizes=sizes)


def test_the_model_gives_each_log_dir_its_fields_and_the_brokers_fastest_topics() -> None:
    model = DiskModel(window_s=1800.0)
    for i in range(30):
        at = 1000.0 + 10 * i
        sizes = {
            TopicPartition("orders", 0): int(GB + 3 * MB * 10 * i),
            TopicPartition("orders", 1): int(GB + 1 * MB * 10 * i),
            TopicPartition("clicks", 0): int(2 * MB * 10 * i),
            TopicPartition("audit", 0): int(MB * 10 * i),
            TopicPartition("idle", 0): 5000,
        }
        broker = scrape(1, at, {DATA0: 900 * GB + 5 * MB * 10 * i, DATA1: 100 * GB}, sizes)
        model.observe_scrape(MetricsScrape({1: broker}, at, 0.1))

    data0, data1 = model.disks(1)
    assert data0.mountpoint == DATA0
    assert data1.mountpoint == DATA1
    assert data0.size_bytes == 1000 * GB
    assert data0.avail_bytes == pytest.approx(100 * GB - 5 * MB * 290)
    assert data0.used_ratio == pytest.approx(1 - data0.avail_bytes / data0.size_bytes)
    assert data0.growth_bytes_per_s == pytest.approx(5 * MB)
    assert data0.full_in_s == pytest.approx(data0.avail_bytes / (5 * MB))
    assert data1.growth_bytes_per_s == 0.0
    assert data1.full_in_s is None
    assert [t.topic for t in data0.top_topics] == ["orders", "clicks", "audit"]
    assert data0.top_topics[0].topic == "orders"
    assert data0.top_topics[0].bytes_per_s == pytest.approx(4 * MB)
    assert isinstance(data0.top_topics[0], TopicGrowth)
    assert data1.top_topics == data0.top_topics  # per broker: Kafka's metrics do not say which log dir
    assert model.disks(2) == ()
    assert model.all_disks() == {1: (data0, data1)}


def test_a_failed_or_older_scrape_changes_nothing_and_a_silent_broker_is_forgotten() -> None:
    model = DiskModel(window_s=600.0, mountpoints=(DATA0,))
    model.observe(scrape(1, 100.0, {DATA0: GB, DATA1: GB}, {}))
    before = model.disks(1)
    assert [d.mountpoint for d in before] == [DATA0]
    model.observe(BrokerScrape(1, "u", 110.0, 0.0, {}, error="refused"))
    model.observe(scrape(1, 50.0, {DATA0: 500 * GB}, {}))
    assert model.disks(1) == before
    model.prune(100.0 + 601.0)
    assert model.disks(1) == ()


def test_memory_is_bounded_whatever_the_scrape_rate() -> None:
    model = DiskModel(window_s=1800.0)
    partitions = {TopicPartition(f"t{p}", 0): p for p in range(50)}
    for i in range(5000):
        model.observe(scrape(1, float(i), {DATA0: GB + i * MB, DATA1: GB}, partitions))
    assert model.sample_count() <= 2 * (MAX_SAMPLES + 2) + TOPIC_SNAPSHOTS + 2
    (data0, _) = model.disks(1)
    assert data0.growth_bytes_per_s == pytest.approx(MB)


def test_a_window_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        DiskModel(window_s=0)
