"""The targeted read of log sizes and topic byte counters: parsing of what brokers serve (jmx_exporter 0.x
and 1.x text, Strimzi's), malformed and missing series reported and skipped, per-broker failures, and the
rates from two reads. Through a fake behind :class:`MetricsFetcher` (no sockets); the real HTTP path is
:mod:`tests.collectors.test_metrics_reference`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.kafka.model import BrokerEndpoint, BrokerRegistration, TopicPartition
from collectors.metrics import FetchError, MetricsCollector, parse_exposition
from collectors.partition_metrics import (
    LOG_SIZE,
    MAX_PROBLEMS,
    TOPIC_BYTES_IN,
    WANTED,
    BrokerPartitionMetrics,
    bytes_in_rates,
    counter_rates,
    read_partition_metrics,
    scrape_partition_metrics,
    topic_rates,
)

pytestmark = pytest.mark.unit

JMX_EXPORTER_0X = """\
# HELP kafka_log_log_size Attribute exposed for management (kafka.log<type=Log, name=Size, topic=orders, \
partition=0><>Value)
# TYPE kafka_log_log_size gauge
kafka_log_log_size{topic="orders",partition="0",} 1.2E9
kafka_log_log_size{topic="orders",partition="1",} 8.0E8
kafka_log_log_size{topic="payments",partition="0",} 5000.0
# HELP kafka_server_brokertopicmetrics_bytesin_total Attribute exposed for management \
(kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec, topic=orders><>Count)
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total{topic="orders",} 6.0E9
kafka_server_brokertopicmetrics_bytesin_total{topic="payments",} 1000.0
kafka_server_brokertopicmetrics_bytesin_total 6.000001E9
# TYPE kafka_server_replicamanager_underreplicatedpartitions gauge
kafka_server_replicamanager_underreplicatedpartitions 0.0
"""

JMX_EXPORTER_1X = """\
# HELP kafka_log_log_size Attribute exposed for management \
kafka.log:name=Size,partition=3,topic=orders,type=Log
# TYPE kafka_log_log_size gauge
kafka_log_log_size{partition="3",topic="orders"} 42.0
# HELP kafka_server_brokertopicmetrics_bytesin_total Attribute exposed for management
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total{topic="orders"} 7.0
"""


def read(
    text: str, topics: list[str] | None = None
) -> tuple[dict[TopicPartition, float], dict[str, float], tuple[str, ...]]:
    return read_partition_metrics(parse_exposition(text, WANTED), topics)


# --- reading one exposition ---------------------------------------------------------------------------


def test_log_sizes_and_topic_counters_are_read_from_jmx_exporter_0x_text() -> None:
    sizes, bytes_in, problems = read(JMX_EXPORTER_0X)

    assert sizes == {
        TopicPartition("orders", 0): 1.2e9,
        TopicPartition("orders", 1): 8.0e8,
        TopicPartition("payments", 0): 5000.0,
    }
    assert bytes_in == {"orders": 6.0e9, "payments": 1000.0}, "the topic-less total is not a topic"
    assert problems == ()


def test_jmx_exporter_1x_text_reads_alike() -> None:
    assert read(JMX_EXPORTER_1X) == ({TopicPartition("orders", 3): 42.0}, {"orders": 7.0}, ())


CONFLUENT_RULES = """\
# TYPE kafka_log_log_size gauge
kafka_log_log_size{topic="orders",partition="0",} 1.2E9
# TYPE kafka_server_brokertopicmetrics_bytesinpersec untyped
kafka_server_brokertopicmetrics_bytesinpersec{topic="orders",} 6.0E9
kafka_server_brokertopicmetrics_bytesinpersec 6.0E9
"""
BITNAMI_RULES = """\
# TYPE kafka_log_log_size untyped
kafka_log_log_size{topic="orders",partition="0",} 1.2E9
# TYPE kafka_server_brokertopicmetrics_bytesinpersec_count untyped
kafka_server_brokertopicmetrics_bytesinpersec_count{topic="orders",} 6.0E9
# TYPE kafka_server_brokertopicmetrics_total_bytesinpersec_count untyped
kafka_server_brokertopicmetrics_total_bytesinpersec_count 6.0E9
"""


@pytest.mark.parametrize("text", [CONFLUENT_RULES, BITNAMI_RULES], ids=["confluent", "bitnami"])
def test_confluents_and_bitnamis_names_for_the_topic_counter_read_alike(text: str) -> None:
    assert read(text) == ({TopicPartition("orders", 0): 1.2e9}, {"orders": 6.0e9}, ())


def test_only_the_topics_asked_for_are_kept() -> None:
    sizes, bytes_in, problems = read(JMX_EXPORTER_0X, ["payments", "absent"])

    assert sizes == {TopicPartition("payments", 0): 5000.0}
    assert bytes_in == {"payments": 1000.0}
    assert problems == ()


def test_malformed_series_are_reported_and_skipped_and_the_rest_kept() -> None:
    text = """\
# TYPE kafka_log_log_size gauge
kafka_log_log_size{topic="orders",partition="0"} 10
kafka_log_log_size{partition="1"} 11
kafka_log_log_size{topic="orders",partition="x"} 12
kafka_log_log_size{topic="orders",partition="-1"} 13
kafka_log_log_size{topic="orders"} 14
kafka_log_log_size{topic="orders",partition="2"} -15
kafka_log_log_size{topic="orders",partition="3"} NaN
kafka_log_log_size{topic="orders",partition="0",instance="b"} 16
kafka_log_log_size{topic="orders",partition="4",is_future="true"} 17
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total{topic="orders"} 100
kafka_server_brokertopicmetrics_bytesin_total{topic="payments"} -1
"""
    sizes, bytes_in, problems = read(text)

    assert sizes == {TopicPartition("orders", 0): 10.0}
    assert bytes_in == {"orders": 100.0}
    assert problems == (
        'kafka_log_log_size{partition="1"} has no topic: skipped',
        *(
            f"kafka_log_log_size{labels}: partition {partition!r} is not a partition number: skipped"
            for labels, partition in (
                ('{partition="x",topic="orders"}', "x"),
                ('{partition="-1",topic="orders"}', "-1"),
                ('{topic="orders"}', ""),
            )
        ),
        'kafka_log_log_size{partition="2",topic="orders"} is negative (-15): skipped',
        "kafka_log_log_size for orders-0 given twice: the first kept",
        'kafka_server_brokertopicmetrics_bytesin_total{topic="payments"} is negative (-1): skipped',
    ), "NaN is dropped by the parser; a future log (an intra-broker move's copy) is not a problem"


def test_missing_families_are_reported() -> None:
    sizes, bytes_in, problems = read("# TYPE other gauge\nother 1\n")

    assert (sizes, bytes_in) == ({}, {})
    assert problems == (
        f"no {LOG_SIZE} series: the brokers' Log MBeans are not exported",
        f"no {TOPIC_BYTES_IN} series",
    )


def test_problems_are_listed_up_to_a_bound_and_the_rest_counted() -> None:
    lines = [f'kafka_log_log_size{{topic="t",partition="p{i}"}} 1' for i in range(MAX_PROBLEMS + 30)]
    text = "# TYPE kafka_log_log_size gauge\n" + "\n".join(lines) + "\n"

    _, _, problems = read(text)

    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1] == "... and 31 more", "30 partitions and the missing counter family"


# --- rates -----------------------------------------------------------------------------------------------


def reading(
    broker: int, at: float, counters: dict[str, float], error: str | None = None
) -> BrokerPartitionMetrics:
    return BrokerPartitionMetrics(broker, "http://b/metrics", at, {}, counters, (), error)


def test_two_reads_give_each_topics_bytes_per_second() -> None:
    before = reading(1, 100.0, {"orders": 1000.0, "payments": 50.0, "gone": 7.0})
    after = reading(1, 110.0, {"orders": 6000.0, "payments": 50.0, "new": 9.0})

    assert topic_rates(before, after) == {"orders": 500.0, "payments": 0.0}


def test_a_counter_that_went_down_restarted_from_zero() -> None:
    assert counter_rates({"orders": 5000.0}, {"orders": 300.0}, 3.0) == {"orders": 100.0}


def test_no_rate_without_elapsed_time_or_from_a_failed_read() -> None:
    assert counter_rates({"orders": 1.0}, {"orders": 2.0}, 0.0) == {}
    assert counter_rates({"orders": 1.0}, {"orders": 2.0}, -1.0) == {}
    good = reading(1, 100.0, {"orders": 1.0})
    failed = reading(1, 110.0, {}, error="cannot connect: Connection refused")
    assert topic_rates(good, failed) == {}
    assert topic_rates(failed, good) == {}


def test_rates_need_two_reads_of_the_same_broker() -> None:
    with pytest.raises(ValueError, match="two reads of one broker, got brokers 1 and 2"):
        topic_rates(reading(1, 0.0, {}), reading(2, 1.0, {}))


@given(
    before=st.dictionaries(st.sampled_from("abcde"), st.floats(0, 1e15)),
    after=st.dictionaries(st.sampled_from("abcde"), st.floats(0, 1e15)),
    elapsed=st.floats(1e-3, 1e6),
)
def test_rates_are_finite_never_negative_and_only_for_counters_read_twice(
    before: dict[str, float], after: dict[str, float], elapsed: float
) -> None:
    rates = counter_rates(before, after, elapsed)

    assert set(rates) == set(before) & set(after)
    assert all(math.isfinite(r) and r >= 0 for r in rates.values())


# --- scraping brokers -------------------------------------------------------------------------------


@dataclass
class FakeFetcher:
    bodies: dict[str, str] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def fetch(self, url: str, timeout: float) -> str:
        self.calls.append(url)
        if url not in self.bodies:
            raise FetchError("cannot connect: Connection refused")
        return self.bodies[url]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def registration(broker_id: int) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (BrokerEndpoint("PLAINTEXT", f"kafka-{broker_id}", 9092),))


def endpoint(broker_id: int) -> str:
    return f"http://kafka-{broker_id}:7071/metrics"


@pytest.fixture
def fake() -> FakeFetcher:
    return FakeFetcher()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def collector(fake: FakeFetcher, clock: Clock) -> Iterator[MetricsCollector]:
    with MetricsCollector(url_template="http://{host}:7071/metrics", fetcher=fake, clock=clock) as made:
        yield made


def test_a_few_brokers_are_read_each_alone_and_a_failure_is_that_brokers(
    collector: MetricsCollector, fake: FakeFetcher, clock: Clock
) -> None:
    fake.bodies[endpoint(1)] = JMX_EXPORTER_0X
    fake.bodies[endpoint(2)] = "<html>a proxy's error page</html>"
    fake.bodies[endpoint(3)] = JMX_EXPORTER_1X

    scraped = scrape_partition_metrics(collector, {b: registration(b) for b in (1, 2, 3, 4)}, ["orders"])

    assert sorted(fake.calls) == [endpoint(b) for b in (1, 2, 3, 4)]
    assert scraped.started_at == clock.now
    assert set(scraped.failures) == {2, 4}
    assert scraped.failures[2].startswith("not Prometheus text format")
    assert scraped.failures[4] == "cannot connect: Connection refused"
    assert scraped.log_sizes() == {
        1: {TopicPartition("orders", 0): 1.2e9, TopicPartition("orders", 1): 8.0e8},
        3: {TopicPartition("orders", 3): 42.0},
    }
    assert scraped.brokers[1].topic_bytes_in == {"orders": 6.0e9}
    assert scraped.brokers[1].scraped_at == clock.now
    assert scraped.brokers[1].url == endpoint(1)
    assert scraped.problems == {}


def test_a_targeted_read_leaves_the_collectors_rates_alone(
    collector: MetricsCollector, fake: FakeFetcher, clock: Clock
) -> None:
    """The sampler's next scrape computes its rates against its own previous scrape, not this read."""
    counters = "# TYPE kafka_server_brokertopicmetrics_bytesin_total counter\n"
    fake.bodies[endpoint(1)] = counters + "kafka_server_brokertopicmetrics_bytesin_total 1000\n"
    collector.scrape({1: registration(1)})
    clock.now += 10
    fake.bodies[endpoint(1)] = counters + "kafka_server_brokertopicmetrics_bytesin_total 5000\n"
    scrape_partition_metrics(collector, {1: registration(1)})
    clock.now += 10
    fake.bodies[endpoint(1)] = counters + "kafka_server_brokertopicmetrics_bytesin_total 6000\n"

    assert collector.scrape({1: registration(1)}).values("nwBytesIn") == {1: pytest.approx(250.0)}


def test_rates_between_two_scrapes_for_the_brokers_read_well_both_times(
    collector: MetricsCollector, fake: FakeFetcher, clock: Clock
) -> None:
    counters = "# TYPE kafka_server_brokertopicmetrics_bytesin_total counter\n"
    line = 'kafka_server_brokertopicmetrics_bytesin_total{{topic="orders"}} {}\n'
    fake.bodies = {endpoint(1): counters + line.format(100), endpoint(2): counters + line.format(0)}
    brokers = {b: registration(b) for b in (1, 2, 3)}
    first = scrape_partition_metrics(collector, brokers)
    clock.now += 5
    fake.bodies = {endpoint(1): counters + line.format(600), endpoint(3): counters + line.format(50)}
    second = scrape_partition_metrics(collector, brokers)

    assert bytes_in_rates(first, second) == {1: {"orders": 100.0}}
    assert second.problems[1] == (f"no {LOG_SIZE} series: the brokers' Log MBeans are not exported",)


def test_a_closed_collector_refuses_a_targeted_read(collector: MetricsCollector, fake: FakeFetcher) -> None:
    collector.close()
    with pytest.raises(RuntimeError, match="closed"):
        scrape_partition_metrics(collector, {1: registration(1)})
