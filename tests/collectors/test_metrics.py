"""The metrics collector: endpoints, parsing of jmx_exporter 0.x and node_exporter text, the name table,
rates, per-broker failures and concurrency, through a fake behind :class:`MetricsFetcher` (no sockets);
plus one contract suite run against the fake and the real HTTP fetcher, so that the fake stays honest.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from string import Template
from typing import Any

import pytest
from pydantic import ValidationError

from collectors.kafka.model import BrokerEndpoint, BrokerRegistration
from collectors.metrics import (
    BROKER_SIGNALS,
    CAPACITY_METRICS,
    DEFAULT_NAME_TABLE,
    HEALTH_METRICS,
    EndpointError,
    ExpositionError,
    FetchError,
    FetchTimeoutError,
    HttpFetcher,
    MetricRule,
    MetricsCollector,
    MetricsEndpoints,
    MetricsFetcher,
    MetricsSettings,
    evaluate,
    parse_exposition,
    parse_selector,
    selectors_of,
)
from collectors.samples import LOAD_METRICS

unit = pytest.mark.unit

# --- what brokers serve ------------------------------------------------------------------------------

JMX_EXPORTER_0X = Template("""\
# HELP jmx_config_reload_success_total Number of times configuration have successfully been reloaded.
# TYPE jmx_config_reload_success_total counter
jmx_config_reload_success_total 0.0
# HELP kafka_server_replicamanager_underreplicatedpartitions Attribute exposed for management \
(kafka.server<type=ReplicaManager, name=UnderReplicatedPartitions><>Value)
# TYPE kafka_server_replicamanager_underreplicatedpartitions gauge
kafka_server_replicamanager_underreplicatedpartitions 2.0
# TYPE kafka_server_replicamanager_partitioncount gauge
kafka_server_replicamanager_partitioncount 412.0
# TYPE kafka_server_replicamanager_leadercount gauge
kafka_server_replicamanager_leadercount 137.0
# TYPE kafka_server_replicamanager_underminisrpartitioncount gauge
kafka_server_replicamanager_underminisrpartitioncount 1.0
# TYPE kafka_server_replicamanager_atminisrpartitioncount gauge
kafka_server_replicamanager_atminisrpartitioncount 3.0
# TYPE kafka_server_replicamanager_offlinereplicacount gauge
kafka_server_replicamanager_offlinereplicacount 0.0
# TYPE kafka_controller_kafkacontroller_activecontrollercount gauge
kafka_controller_kafkacontroller_activecontrollercount 1.0
# TYPE kafka_controller_kafkacontroller_offlinepartitionscount gauge
kafka_controller_kafkacontroller_offlinepartitionscount 0.0
# TYPE kafka_controller_kafkacontroller_preferredreplicaimbalancecount gauge
kafka_controller_kafkacontroller_preferredreplicaimbalancecount 5.0
# HELP kafka_server_brokertopicmetrics_bytesin_total Attribute exposed for management \
(kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec, topic=orders><>Count)
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total{topic="orders",} $orders_in
kafka_server_brokertopicmetrics_bytesin_total{topic="payments",} $payments_in
kafka_server_brokertopicmetrics_bytesin_total $bytes_in
# TYPE kafka_server_brokertopicmetrics_bytesout_total counter
kafka_server_brokertopicmetrics_bytesout_total{topic="orders",} $bytes_out
kafka_server_brokertopicmetrics_bytesout_total $bytes_out
# TYPE kafka_server_brokertopicmetrics_replicationbytesin_total counter
kafka_server_brokertopicmetrics_replicationbytesin_total 5.0E8
# HELP kafka_network_requestmetrics_totaltimems_count Attribute exposed for management \
(kafka.network<type=RequestMetrics, name=TotalTimeMs, request=Produce><>Count)
# TYPE kafka_network_requestmetrics_totaltimems_count counter
kafka_network_requestmetrics_totaltimems_count{request="Produce",} $produce_requests
kafka_network_requestmetrics_totaltimems_count{request="FetchConsumer",} 1.0E9
# HELP kafka_network_requestmetrics_totaltimems Attribute exposed for management \
(kafka.network<type=RequestMetrics, name=TotalTimeMs, request=Produce><>99thPercentile)
# TYPE kafka_network_requestmetrics_totaltimems gauge
kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.50",} 2.0
kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99",} 12.5
kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.999",} 40.0
kafka_network_requestmetrics_totaltimems{request="FetchConsumer",quantile="0.99",} NaN
# HELP kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent Attribute exposed for \
management (kafka.server<type=KafkaRequestHandlerPool, name=RequestHandlerAvgIdlePercent><>MeanRate)
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent gauge
kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent 0.875
# HELP kafka_network_socketserver_networkprocessoravgidlepercent Attribute exposed for management \
(kafka.network<type=SocketServer, name=NetworkProcessorAvgIdlePercent><>Value)
# TYPE kafka_network_socketserver_networkprocessoravgidlepercent gauge
kafka_network_socketserver_networkprocessoravgidlepercent 0.75
# HELP kafka_server_brokertopicmetrics_bytesinpersec_count Attribute exposed for management
# TYPE kafka_server_brokertopicmetrics_bytesinpersec_count untyped
kafka_server_brokertopicmetrics_bytesinpersec_count{topic="orders",} $orders_in
kafka_server_brokertopicmetrics_bytesinpersec_count $bytes_in
# HELP process_open_fds Number of open file descriptors.
# TYPE process_open_fds gauge
process_open_fds 1234.0
# HELP jmx_scrape_duration_seconds Time this JMX scrape took, in seconds.
# TYPE jmx_scrape_duration_seconds gauge
jmx_scrape_duration_seconds 0.412361
# HELP jmx_scrape_error Non-zero if this scrape failed.
# TYPE jmx_scrape_error gauge
jmx_scrape_error 0.0
""")

NODE_EXPORTER = Template("""\
# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} $idle
node_cpu_seconds_total{cpu="0",mode="iowait"} $iowait
node_cpu_seconds_total{cpu="0",mode="irq"} 0
node_cpu_seconds_total{cpu="0",mode="nice"} 0
node_cpu_seconds_total{cpu="0",mode="softirq"} $softirq
node_cpu_seconds_total{cpu="0",mode="steal"} 0
node_cpu_seconds_total{cpu="0",mode="system"} $system
node_cpu_seconds_total{cpu="0",mode="user"} $user
node_cpu_seconds_total{cpu="1",mode="idle"} $idle
node_cpu_seconds_total{cpu="1",mode="iowait"} $iowait
node_cpu_seconds_total{cpu="1",mode="system"} $system
node_cpu_seconds_total{cpu="1",mode="user"} $user
# HELP node_disk_io_time_seconds_total Total seconds spent doing I/Os.
# TYPE node_disk_io_time_seconds_total counter
node_disk_io_time_seconds_total{device="nvme0n1"} $io_time_0
node_disk_io_time_seconds_total{device="nvme1n1"} $io_time_1
# HELP node_disk_read_bytes_total The total number of bytes read successfully.
# TYPE node_disk_read_bytes_total counter
node_disk_read_bytes_total{device="nvme0n1"} $read_0
node_disk_read_bytes_total{device="nvme1n1"} $read_1
# HELP node_disk_written_bytes_total The total number of bytes written successfully.
# TYPE node_disk_written_bytes_total counter
node_disk_written_bytes_total{device="nvme0n1"} $written
node_disk_written_bytes_total{device="nvme1n1"} $written
# HELP node_memory_MemAvailable_bytes Memory information field MemAvailable_bytes.
# TYPE node_memory_MemAvailable_bytes gauge
node_memory_MemAvailable_bytes 2.4e+10
# HELP node_memory_MemTotal_bytes Memory information field MemTotal_bytes.
# TYPE node_memory_MemTotal_bytes gauge
node_memory_MemTotal_bytes 3.2e+10
""")

COUNTERS_AT_0 = {
    "orders_in": 6.0e6,
    "payments_in": 4.0e6,
    "bytes_in": 1.0e7,
    "bytes_out": 2.0e7,
    "produce_requests": 5000.0,
    "idle": 1000.0,
    "iowait": 10.0,
    "softirq": 1.0,
    "system": 30.0,
    "user": 60.0,
    "io_time_0": 100.0,
    "io_time_1": 50.0,
    "read_0": 1.0e9,
    "read_1": 2.0e9,
    "written": 3.0e9,
}
# over 10 s: cpus busy 0.5 s in softirq (cpu 0 only), 1.5 s system, 3 s user, 1 s iowait; disk 0 busy 4 s,
# disk 1 busy 8 s; 1 MB/s produced to orders and 0.5 MB/s to payments
COUNTERS_AT_10 = COUNTERS_AT_0 | {
    "orders_in": 1.6e7,
    "payments_in": 9.0e6,
    "bytes_in": 2.5e7,
    "bytes_out": 5.0e7,
    "produce_requests": 5500.0,
    "idle": 1004.0,
    "iowait": 11.0,
    "softirq": 1.5,
    "system": 31.5,
    "user": 63.0,
    "io_time_0": 104.0,
    "io_time_1": 58.0,
    "read_0": 1.001e9,
    "read_1": 2.003e9,
    "written": 3.05e9,
}


def broker_text(counters: Mapping[str, float]) -> str:
    return JMX_EXPORTER_0X.substitute(counters) + NODE_EXPORTER.substitute(counters)


def registration(
    broker_id: int, host: str = "", port: int = 9092, rack: str | None = None
) -> BrokerRegistration:
    endpoint = BrokerEndpoint("PLAINTEXT", host or f"kafka-{broker_id}.example", port)
    return BrokerRegistration(broker_id, (endpoint,), rack=rack)


def brokers(*ids: int) -> dict[int, BrokerRegistration]:
    return {b: registration(b) for b in ids}


def url(broker_id: int) -> str:
    return f"http://kafka-{broker_id}.example:7071/metrics"


TEMPLATE = "http://{host}:7071/metrics"


# --- a fake fetcher ------------------------------------------------------------------------------------


@dataclass
class FakeEndpoint:
    body: str = ""
    status: int = 200
    delay_s: float = 0.0
    refused: bool = False
    hold: threading.Event | None = None
    """Block until set, whatever the timeout: a fetcher that does not keep its timeout."""


@dataclass
class FakeFetcher:
    """:class:`MetricsFetcher` over a dict of URL -> :class:`FakeEndpoint`; an unknown URL refuses."""

    endpoints: dict[str, FakeEndpoint] = field(default_factory=dict)
    calls: list[tuple[str, float]] = field(default_factory=list)

    def fetch(self, url: str, timeout: float) -> str:
        self.calls.append((url, timeout))
        endpoint = self.endpoints.get(url, FakeEndpoint(refused=True))
        if endpoint.refused:
            raise FetchError("cannot connect: Connection refused")
        if endpoint.hold is not None:
            endpoint.hold.wait(30)
        if endpoint.delay_s > timeout:
            time.sleep(timeout)
            raise FetchTimeoutError(f"no answer within {timeout:g} s")
        time.sleep(endpoint.delay_s)
        if endpoint.status != 200:
            raise FetchError(f"HTTP {endpoint.status}")
        return endpoint.body

    def serve(self, broker_id: int, body: str, **options: Any) -> None:
        self.endpoints[url(broker_id)] = FakeEndpoint(body, **options)


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake() -> FakeFetcher:
    return FakeFetcher()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def collector_for(fake: FakeFetcher, clock: Clock) -> Iterator[Callable[..., MetricsCollector]]:
    made: list[MetricsCollector] = []

    def make(**settings: Any) -> MetricsCollector:
        collector = MetricsCollector(
            MetricsSettings(**({"url_template": TEMPLATE} | settings)), fetcher=fake, clock=clock
        )
        made.append(collector)
        return collector

    yield make
    for collector in made:
        collector.close()


# --- endpoints ---------------------------------------------------------------------------------------


@unit
def test_a_template_is_filled_from_the_registration() -> None:
    endpoints = MetricsEndpoints("https://{host}:{port}/brokers/{id}/{rack}/metrics")
    broker = registration(3, host="kafka-3.example", port=9093, rack="eu west/1a")

    assert endpoints.url_for(broker) == "https://kafka-3.example:9093/brokers/3/eu%20west%2F1a/metrics"


@unit
def test_ipv6_hosts_are_bracketed() -> None:
    endpoints = MetricsEndpoints(TEMPLATE)

    assert endpoints.url_for(registration(1, host="fd00::17")) == "http://[fd00::17]:7071/metrics"
    assert endpoints.url_for(registration(2, host="10.0.0.2")) == "http://10.0.0.2:7071/metrics"


@unit
def test_the_explicit_map_wins_over_the_template() -> None:
    endpoints = MetricsEndpoints(TEMPLATE, {2: "http://exporter-2:9999/metrics"})

    assert endpoints.url_for(registration(2)) == "http://exporter-2:9999/metrics"
    assert endpoints.url_for(registration(1)) == "http://kafka-1.example:7071/metrics"


@unit
def test_host_and_port_come_from_the_chosen_listener_else_plaintext_else_the_first() -> None:
    internal = BrokerEndpoint("INTERNAL", "10.0.0.5", 9094, "SASL_SSL")
    external = BrokerEndpoint("EXTERNAL", "kafka-5.example.com", 9093, "SSL")
    broker = BrokerRegistration(5, (external, internal))

    assert MetricsEndpoints("http://{host}:{port}/m").url_for(broker) == "http://kafka-5.example.com:9093/m"
    chosen = MetricsEndpoints("http://{host}:{port}/m", listener="INTERNAL")
    assert chosen.url_for(broker) == "http://10.0.0.5:9094/m"
    assert MetricsEndpoints("http://{host}:{port}/m", listener=" internal ").url_for(broker) == (
        "http://10.0.0.5:9094/m"
    ), "Kafka's listener names are upper case (ListenerName.normalised)"
    plaintext = BrokerEndpoint("PLAINTEXT", "10.0.0.6", 9092)
    both = BrokerRegistration(6, (external, plaintext))
    assert MetricsEndpoints("http://{host}:7071/m").url_for(both) == "http://10.0.0.6:7071/m"


@unit
def test_a_broker_without_the_chosen_listener_gets_no_url_and_says_why() -> None:
    tls_only = BrokerRegistration(2, (BrokerEndpoint("SSL", "kafka-2.example", 9093, "SSL"),))
    endpoints = MetricsEndpoints(TEMPLATE, listener="INTERNAL")

    with pytest.raises(EndpointError, match=r"broker 2 has no listener 'INTERNAL' \(it has SSL\)"):
        endpoints.url_for(tls_only)
    # without a choice, its SSL endpoint's host: Kafka's top-level host is null for it
    assert MetricsEndpoints(TEMPLATE).url_for(tls_only) == "http://kafka-2.example:7071/metrics"


@unit
@pytest.mark.parametrize("name", ["", "  ", "SSL://x:1", "A B", "a,b"])
def test_a_listener_that_is_no_listener_name_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="is not a Kafka listener name"):
        MetricsSettings(url_template=TEMPLATE, listener=name)
    assert MetricsSettings(url_template=TEMPLATE, listener="internal").listener == "INTERNAL"


@unit
@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("http://{hostname}:7071/metrics", "unknown placeholder {hostname}"),
        ("http://{}:7071/metrics", "unknown placeholder {}"),
        ("http://{host}:{port:d}/metrics", "takes no format"),
        ("http://{host!r}:7071/metrics", "takes no format"),
        ("http://{host:7071/metrics", "use {{ and }} for braces"),
        ("ftp://{host}:7071/metrics", "must start with http:// or https://"),
        ("{host}:7071/metrics", "must start with http:// or https://"),
        ("http://[{host}]:7071/metrics", "without brackets"),
        ("http://{host}:port/metrics", "is not a valid URL"),
        ("http:///metrics", "has no host"),
    ],
)
def test_bad_templates_are_refused_with_a_message(template: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        MetricsEndpoints(template)
    with pytest.raises(ValidationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        MetricsSettings(url_template=template)


@unit
def test_settings_need_a_template_or_a_map_of_http_urls() -> None:
    with pytest.raises(ValidationError, match="needs url_template"):
        MetricsSettings()
    with pytest.raises(ValidationError, match="metrics URL of broker 1 'file:///tmp/m'"):
        MetricsSettings(urls={1: "file:///tmp/m"})
    assert MetricsSettings.model_validate({"urls": {"1": "http://b1:7071/metrics"}}).urls == {
        1: "http://b1:7071/metrics"
    }


@unit
def test_the_collector_takes_its_settings_or_keyword_options(fake: FakeFetcher) -> None:
    settings = MetricsSettings(url_template=TEMPLATE, timeout_s=3.0)

    assert MetricsCollector(url_template=TEMPLATE, timeout_s=3.0, fetcher=fake).settings == settings
    assert MetricsCollector(settings, timeout_s=1.0, fetcher=fake).settings.timeout_s == 1.0
    with pytest.raises(ValidationError, match="timeout_s"):
        MetricsCollector(url_template=TEMPLATE, timeout_s=0, fetcher=fake)
    with pytest.raises(ValidationError, match="unknown placeholder"):
        MetricsCollector(settings, url_template="http://{ip}/metrics", fetcher=fake)
    assert fake.calls == [], "constructing does no I/O"


@unit
def test_brokers_without_a_url_fail_alone(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher
) -> None:
    fake.serve(0, broker_text(COUNTERS_AT_0))
    collector = collector_for(url_template=None, urls={0: url(0)})
    racks = collector_for(url_template="http://{host}:7071/{rack}/metrics")

    scrape = collector.scrape(brokers(0, 1))
    assert scrape.scrapes[0].ok
    assert scrape.scrapes[1].url is None
    assert scrape.failures == {1: "no metrics URL for broker 1: not in the map and no template"}
    assert "has no rack for {rack}" in racks.scrape(brokers(1)).failures[1]


# --- parsing -----------------------------------------------------------------------------------------


@unit
def test_jmx_exporter_0x_text_parses_with_trailing_commas_and_count_counters() -> None:
    exposition = parse_exposition(JMX_EXPORTER_0X.substitute(COUNTERS_AT_0))

    assert exposition["kafka_server_brokertopicmetrics_bytesin_total"] == {
        (("topic", "orders"),): 6.0e6,
        (("topic", "payments"),): 4.0e6,
        (): 1.0e7,
    }
    # a counter named ..._count: the parser calls its samples ..._count_total; found under both names
    produce = {(("request", "Produce"),): 5000.0, (("request", "FetchConsumer"),): 1.0e9}
    assert exposition["kafka_network_requestmetrics_totaltimems_count"] == produce
    assert exposition["kafka_network_requestmetrics_totaltimems_count_total"] == produce
    assert exposition["kafka_server_brokertopicmetrics_bytesinpersec_count"][()] == 1.0e7
    assert exposition["kafka_server_replicamanager_underreplicatedpartitions"] == {(): 2.0}
    assert exposition["kafka_network_requestmetrics_totaltimems"] == {
        (("quantile", "0.50"), ("request", "Produce")): 2.0,
        (("quantile", "0.99"), ("request", "Produce")): 12.5,
        (("quantile", "0.999"), ("request", "Produce")): 40.0,
    }, "NaN samples are dropped"


@unit
def test_node_exporter_text_parses() -> None:
    exposition = parse_exposition(NODE_EXPORTER.substitute(COUNTERS_AT_0), wanted={"node_cpu_seconds_total"})

    assert set(exposition) == {"node_cpu_seconds_total"}
    cpu = exposition["node_cpu_seconds_total"]
    assert len(cpu) == 12
    assert cpu[("cpu", "1"), ("mode", "user")] == 60.0


@unit
@pytest.mark.parametrize(
    "text",
    [
        "<html><body>Grafana</body></html>",
        'kafka_server_replicamanager_partitioncount{topic="a" 1\n',
        "kafka_server_replicamanager_partitioncount one\n",
        "# TYPE kafka_server_replicamanager_partitioncount\n",
        "",
        "# HELP only_comments nothing here\n",
    ],
)
def test_malformed_text_is_an_exposition_error(text: str) -> None:
    with pytest.raises(ExpositionError):
        parse_exposition(text)


# --- the name table ----------------------------------------------------------------------------------


@unit
def test_the_default_table_covers_the_load_and_health_metrics() -> None:
    assert set(DEFAULT_NAME_TABLE) == (
        set(LOAD_METRICS) | set(HEALTH_METRICS) | set(BROKER_SIGNALS) | set(CAPACITY_METRICS)
    )
    assert not set(LOAD_METRICS) & set(BROKER_SIGNALS), "the load model never sees the request signals"


@unit
def test_selectors_read_as_promql() -> None:
    selector = parse_selector('node_cpu_seconds_total{ mode!~"idle|iowait", cpu="0", }')
    exposition = parse_exposition(NODE_EXPORTER.substitute(COUNTERS_AT_0))

    assert sorted(dict(k)["mode"] for k in selector.select(exposition)) == [
        "irq",
        "nice",
        "softirq",
        "steal",
        "system",
        "user",
    ]
    jmx = parse_exposition(JMX_EXPORTER_0X.substitute(COUNTERS_AT_0))
    bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
    assert parse_selector(bytes_in + '{topic=""}').select(jmx) == {(): 1.0e7}
    assert len(parse_selector(bytes_in + '{topic!=""}').select(jmx)) == 2
    assert parse_selector(r'm{a="x\"y"}').matchers[0].value == 'x"y'


@unit
@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("rate(node_cpu_seconds_total[1m])", "is not a selector"),
        ("node_cpu_seconds_total{mode=idle}", "cannot read"),
        ('node_cpu_seconds_total{mode=~"(idle"}', "bad regular expression"),
        ('node_cpu_seconds_total{mode=="idle"}', "cannot read"),
    ],
)
def test_bad_selectors_are_refused(selector: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        MetricRule(series=selector)


@unit
def test_gauges_come_as_they_are() -> None:
    values, _ = evaluate(DEFAULT_NAME_TABLE, parse_exposition(broker_text(COUNTERS_AT_0)), at=0.0)

    assert values == {
        "partitions": 412.0,
        "leaders": 137.0,
        "fd": 1234.0,
        "memUsed": 8.0e9,
        "urp": 2.0,
        "under_min_isr": 1.0,
        "at_min_isr": 3.0,
        "offline_replicas": 0.0,
        "active_controller": 1.0,
        "offline_partitions": 0.0,
        "preferred_imbalance": 5.0,
        "request_handler_idle": 0.875,
        "network_processor_idle": 0.75,
        "produce_p99_ms": 12.5,
    }, "the first scrape has gauges only: no rate is 0"


@unit
def test_counters_become_rates_over_two_scrapes() -> None:
    _, before = evaluate(DEFAULT_NAME_TABLE, parse_exposition(broker_text(COUNTERS_AT_0)), at=100.0)
    values, _ = evaluate(DEFAULT_NAME_TABLE, parse_exposition(broker_text(COUNTERS_AT_10)), 110.0, before)

    # cores busy: cpu 0 in softirq, system, user; cpu 1 (no softirq series) in system and user
    assert values["cpuUsed"] == pytest.approx((0.5 + 2 * (1.5 + 3.0)) / 10)
    assert values["iowait"] == pytest.approx(2 * 1.0 / 10)
    assert values["nwBytesIn"] == pytest.approx(1.5e6)  # the all-topics series, not the per-topic ones too
    assert values["nwBytesOut"] == pytest.approx(3.0e6)
    assert values["ioRead"] == pytest.approx((1e6 + 3e6) / 10)  # summed over devices
    assert values["ioWrite"] == pytest.approx(2 * 5e7 / 10)
    assert values["ioutil"] == pytest.approx(0.8)  # the busiest device
    assert values["partitions"] == 412.0


@unit
def test_a_counter_that_went_down_restarted_from_zero() -> None:
    _, before = evaluate(DEFAULT_NAME_TABLE, parse_exposition(broker_text(COUNTERS_AT_10)), at=0.0)
    restarted = COUNTERS_AT_10 | {"bytes_in": 2.0e6, "bytes_out": 6.0e7}
    values, _ = evaluate(DEFAULT_NAME_TABLE, parse_exposition(broker_text(restarted)), 4.0, before)

    assert values["nwBytesIn"] == pytest.approx(2.0e6 / 4)
    assert values["nwBytesOut"] == pytest.approx(1.0e7 / 4)


@unit
def test_a_table_can_be_changed_with_selectors_and_aggregations() -> None:
    settings = MetricsSettings(
        url_template=TEMPLATE,
        names={
            # Confluent-style names: meters as untyped ..._count
            "nwBytesIn": MetricRule(
                series='kafka_server_brokertopicmetrics_bytesinpersec_count{topic=""}', rate=True
            ),
            "produceTimeMs": MetricRule(
                series='kafka_network_requestmetrics_totaltimems_count{request="Produce"}', rate=True
            ),
            "busiestCpuSeconds": MetricRule(series='node_cpu_seconds_total{mode="user"}', aggregate="max"),
            "fd": None,
        },
    )
    table = settings.name_table
    _, before = evaluate(table, parse_exposition(broker_text(COUNTERS_AT_0)), at=0.0)
    values, _ = evaluate(table, parse_exposition(broker_text(COUNTERS_AT_10)), 10.0, before)

    assert values["nwBytesIn"] == pytest.approx(1.5e6)
    assert values["produceTimeMs"] == pytest.approx(50.0)
    assert values["busiestCpuSeconds"] == 63.0
    assert "fd" not in values
    assert table["partitions"] == DEFAULT_NAME_TABLE["partitions"]


STRIMZI_SIGNALS = """\
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent gauge
kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent 0.5
# TYPE kafka_network_socketserver_networkprocessoravgidle_percent gauge
kafka_network_socketserver_networkprocessoravgidle_percent 0.25
# TYPE kafka_network_requestmetrics_totaltimems gauge
kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99",} 80.0
kafka_network_requestmetrics_totaltimems{request="Fetch",quantile="0.99",} 500.0
"""
"""The request signals under Strimzi's rules: its *Percent rules come before the generic gauge rule, so
the network processors' gauge is named ..._networkprocessoravgidle_percent."""


@unit
def test_the_request_signals_are_read_under_jmx_exporters_and_strimzis_names() -> None:
    signals = {name: DEFAULT_NAME_TABLE[name] for name in BROKER_SIGNALS}

    jmx, _ = evaluate(signals, parse_exposition(broker_text(COUNTERS_AT_0)), at=0.0)
    strimzi, _ = evaluate(signals, parse_exposition(STRIMZI_SIGNALS, selectors_of(signals)), at=0.0)

    assert jmx == {"request_handler_idle": 0.875, "network_processor_idle": 0.75, "produce_p99_ms": 12.5}
    assert strimzi == {"request_handler_idle": 0.5, "network_processor_idle": 0.25, "produce_p99_ms": 80.0}


@unit
def test_a_fallback_is_read_only_when_the_series_selects_nothing() -> None:
    rule = MetricRule(series="first_name", fallbacks=("second_name", "third_name"))
    table = {"m": rule}

    def value(text: str) -> float | None:
        return evaluate(table, parse_exposition(text), at=0.0)[0].get("m")

    assert value("first_name 1\nsecond_name 2\nthird_name 3\n") == 1.0
    assert value("second_name 2\nthird_name 3\n") == 2.0
    assert value("third_name 3\n") == 3.0
    assert value("other 0\n") is None
    assert selectors_of(table) == {"first_name", "second_name", "third_name"}


@unit
def test_a_rate_with_a_fallback_keeps_its_counters_under_the_name_it_read() -> None:
    table = {"m": MetricRule(series="new_total", rate=True, fallbacks=("old_total",))}
    text = "# TYPE old counter\nold_total {}\n"

    _, before = evaluate(table, parse_exposition(text.format(100)), at=0.0)
    values, _ = evaluate(table, parse_exposition(text.format(160)), 10.0, before)

    assert values == {"m": 6.0}


@unit
def test_bad_fallbacks_are_refused_and_settings_take_them_as_a_list() -> None:
    with pytest.raises(ValidationError, match="cannot read"):
        MetricRule(series="m", fallbacks=("m{a=b}",))
    settings = MetricsSettings.model_validate(
        {
            "url_template": TEMPLATE,
            "names": {"network_processor_idle": {"series": "a_name", "fallbacks": ["b_name", "c_name"]}},
        }
    )
    assert settings.name_table["network_processor_idle"].selectors == ("a_name", "b_name", "c_name")


# --- the collector -----------------------------------------------------------------------------------


@unit
def test_two_scrapes_give_rates_on_the_collectors_clock(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher, clock: Clock
) -> None:
    collector = collector_for(timeout_s=2.5)
    fake.serve(1, broker_text(COUNTERS_AT_0))

    first = collector.scrape(brokers(1))
    assert first.failures == {}
    assert first.started_at == first.scrapes[1].scraped_at == clock.now
    assert first.scrapes[1].url == url(1)
    assert "nwBytesIn" not in first.scrapes[1].values
    assert fake.calls == [(url(1), 2.5)]

    clock.now += 10.0
    fake.serve(1, broker_text(COUNTERS_AT_10))
    second = collector.scrape(brokers(1))
    assert second.scrapes[1].values["nwBytesIn"] == pytest.approx(1.5e6)
    assert set(second.scrapes[1].values) == set(DEFAULT_NAME_TABLE) - set(CAPACITY_METRICS)  # not served here
    assert second.values("urp") == {1: 2.0}
    assert second.total("urp") == 2.0
    assert second.total("no such metric") is None


@unit
def test_each_broker_fails_alone(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher, clock: Clock
) -> None:
    collector = collector_for(timeout_s=0.2)
    fake.serve(0, broker_text(COUNTERS_AT_0))
    fake.serve(1, "<html>502 Bad Gateway</html>")
    fake.serve(2, "", status=503)
    fake.serve(3, broker_text(COUNTERS_AT_0), delay_s=5.0)
    # broker 4: nothing listens

    scrape = collector.scrape(brokers(0, 1, 2, 3, 4))

    assert set(scrape.failures) == {1, 2, 3, 4}
    assert scrape.failures[1].startswith("not Prometheus text format")
    assert scrape.failures[2] == "HTTP 503"
    assert scrape.failures[3] == "no answer within 0.2 s"
    assert scrape.failures[4] == "cannot connect: Connection refused"
    assert scrape.scrapes[0].values["urp"] == 2.0
    assert all(s.values == {} for b, s in scrape.scrapes.items() if b != 0)


@unit
def test_a_failed_scrape_keeps_the_counters_for_the_next_rate(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher, clock: Clock
) -> None:
    collector = collector_for()
    fake.serve(1, broker_text(COUNTERS_AT_0))
    collector.scrape(brokers(1))
    clock.now += 5.0
    fake.serve(1, "", refused=True)
    assert collector.scrape(brokers(1)).failures == {1: "cannot connect: Connection refused"}
    clock.now += 5.0
    fake.serve(1, broker_text(COUNTERS_AT_10))

    assert collector.scrape(brokers(1)).scrapes[1].values["nwBytesIn"] == pytest.approx(1.5e6)


@unit
def test_a_broker_that_left_or_moved_starts_without_a_rate(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher, clock: Clock
) -> None:
    collector = collector_for()
    fake.serve(1, broker_text(COUNTERS_AT_0))
    fake.serve(2, broker_text(COUNTERS_AT_0))
    collector.scrape(brokers(1, 2))
    clock.now += 10.0
    collector.scrape(brokers(2))  # broker 1 is not registered for a while
    clock.now += 10.0
    fake.serve(1, broker_text(COUNTERS_AT_10))
    moved = {2: registration(2, host="kafka-1.example")}  # now behind broker 1's URL

    assert "nwBytesIn" not in collector.scrape(brokers(1)).scrapes[1].values
    assert "nwBytesIn" not in collector.scrape(moved).scrapes[2].values


@unit
def test_brokers_are_scraped_concurrently(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher
) -> None:
    collector = collector_for(timeout_s=30.0)
    all_in_flight = threading.Event()  # each answer waits until all six requests are under way
    for b in range(6):
        fake.serve(b, broker_text(COUNTERS_AT_0), delay_s=0.3, hold=all_in_flight)

    def release_once_all_asked() -> None:
        deadline = time.monotonic() + 60
        while len(fake.calls) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        all_in_flight.set()

    releaser = threading.Thread(target=release_once_all_asked)
    releaser.start()
    scrape = collector.scrape(brokers(*range(6)))
    releaser.join()

    # one after the other, the first would have waited for the other five: 30 s, then timed out
    assert scrape.failures == {}
    assert all(s.duration_s >= 0.25 for s in scrape.scrapes.values())


@unit
def test_a_broker_that_ignores_its_timeout_does_not_hold_up_the_others(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher
) -> None:
    collector = collector_for(timeout_s=0.3)
    hold = threading.Event()
    fake.serve(0, broker_text(COUNTERS_AT_0), delay_s=0.1)
    fake.serve(1, broker_text(COUNTERS_AT_0), hold=hold)
    fake.serve(2, broker_text(COUNTERS_AT_0), delay_s=0.1)
    try:
        scrape = collector.scrape(brokers(0, 1, 2))
    finally:
        hold.set()

    assert scrape.failures == {1: "timed out after 0.3 s"}  # returned while broker 1 is still held
    assert scrape.scrapes[1].duration_s >= 0.3


@unit
def test_brokers_queued_behind_busy_workers_are_still_scraped(
    collector_for: Callable[..., MetricsCollector], fake: FakeFetcher
) -> None:
    collector = collector_for(timeout_s=1.0, max_workers=2)
    for b in range(5):
        fake.serve(b, broker_text(COUNTERS_AT_0), delay_s=0.1)

    scrape = collector.scrape(brokers(*range(5)))

    assert scrape.failures == {}
    assert len(scrape.scrapes) == 5


@unit
def test_a_closed_collector_refuses_to_scrape(collector_for: Callable[..., MetricsCollector]) -> None:
    collector = collector_for()
    collector.close()

    with pytest.raises(RuntimeError, match="closed"):
        collector.scrape(brokers(1))


# --- contract: the fake and the real HTTP fetcher behave alike ---------------------------------------

BODY = (
    "kafka_server_replicamanager_underreplicatedpartitions 0.0\n"
    'node_cpu_seconds_total{cpu="0",mode="é",} 1.0\n'
)
SLOW_S = 2.0


class _Handler(BaseHTTPRequestHandler):
    release: threading.Event

    def do_GET(self) -> None:
        if self.path == "/slow":
            self.release.wait(SLOW_S)
        if self.path == "/down":
            self.send_error(503, "broker is not running")
            return
        if self.path not in ("/metrics", "/slow"):
            self.send_error(404)
            return
        body = BODY.encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up

    def log_message(self, format: str, *args: object) -> None:
        pass


def _refusing_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@dataclass
class ContractTarget:
    fetcher: MetricsFetcher
    base: str
    refused_url: str


@pytest.fixture
def http_target() -> Iterator[ContractTarget]:
    release = threading.Event()
    handler = type("Handler", (_Handler,), {"release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    port = server.server_address[1]
    fetcher = HttpFetcher()
    try:
        yield ContractTarget(
            fetcher, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{_refusing_port()}/metrics"
        )
    finally:
        fetcher.close()
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def fake_target() -> ContractTarget:
    base = "http://fake.example:7071"
    fake = FakeFetcher(
        {
            f"{base}/metrics": FakeEndpoint(BODY),
            f"{base}/slow": FakeEndpoint(BODY, delay_s=SLOW_S),
            f"{base}/down": FakeEndpoint(status=503),
            f"{base}/other": FakeEndpoint(status=404),
        }
    )
    return ContractTarget(fake, base, "http://fake.example:1/metrics")


@pytest.fixture(
    params=[
        pytest.param("fake", marks=pytest.mark.unit),
        pytest.param("http", marks=pytest.mark.integration),
    ]
)
def target(request: pytest.FixtureRequest) -> ContractTarget:
    result: ContractTarget = request.getfixturevalue(f"{request.param}_target")
    return result


def test_contract_a_200_gives_the_body(target: ContractTarget) -> None:
    assert target.fetcher.fetch(f"{target.base}/metrics", 2.0) == BODY


@pytest.mark.parametrize(("path", "status"), [("/down", "503"), ("/other", "404")])
def test_contract_another_status_is_a_fetch_error(target: ContractTarget, path: str, status: str) -> None:
    with pytest.raises(FetchError, match=f"HTTP {status}") as raised:
        target.fetcher.fetch(f"{target.base}{path}", 2.0)
    assert not isinstance(raised.value, FetchTimeoutError)


def test_contract_a_refused_connection_is_a_fetch_error(target: ContractTarget) -> None:
    with pytest.raises(FetchError, match="cannot connect") as raised:
        target.fetcher.fetch(target.refused_url, 2.0)
    assert not isinstance(raised.value, FetchTimeoutError)


def test_contract_a_slow_answer_times_out_in_time(target: ContractTarget) -> None:
    with pytest.raises(FetchTimeoutError, match=r"within 0\.2 s"):  # not the answer, 2 s later
        target.fetcher.fetch(f"{target.base}/slow", 0.2)


def test_contract_the_collector_reads_through_either(target: ContractTarget, clock: Clock) -> None:
    settings = MetricsSettings(urls={7: f"{target.base}/metrics", 8: f"{target.base}/down"}, timeout_s=2.0)
    with MetricsCollector(settings, fetcher=target.fetcher, clock=clock) as collector:
        scrape = collector.scrape(brokers(7, 8))

    assert scrape.scrapes[7].values == {"urp": 0.0}
    assert scrape.failures[8].startswith("HTTP 503")


# --- the real HTTP fetcher: size cap, whole-body deadline, charsets, proxies, connections --------------


class _KeepAliveHandler(BaseHTTPRequestHandler):
    """An HTTP/1.1 endpoint that keeps connections open, as jmx_exporter's does, and counts them."""

    protocol_version = "HTTP/1.1"
    stats: _ServerStats

    def setup(self) -> None:
        super().setup()
        with self.stats.lock:
            self.stats.opened += 1
            self.stats.open += 1

    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError):  # a client that gave up mid-body
            super().handle()

    def finish(self) -> None:
        with self.stats.lock:
            self.stats.open -= 1
        super().finish()

    def do_GET(self) -> None:
        if self.path == "/trickle":
            self._trickle()
            return
        body, charset = BODY.encode(), "utf-8"
        if self.path == "/big":
            body = b"# padding\n" * (BIG_BYTES // 10)
        elif self.path.startswith("/charset/"):
            charset = self.path.removeprefix("/charset/")
            body = BODY.encode("latin-1") if charset == "iso-8859-1" else body
        self.send_response(200)
        self.send_header("Content-Type", f"text/plain; version=0.0.4; charset={charset}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client gave up
            self.wfile.write(body)

    def _trickle(self) -> None:
        """One byte every TRICKLE_GAP_S: every read answers well within the timeout, the body does not."""
        body = BODY.encode()[:TRICKLE_BYTES]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(TRICKLE_GAP_S)
        except OSError:
            self.close_connection = True  # the client gave up

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class _ServerStats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    opened: int = 0
    open: int = 0


BIG_BYTES = 200_000
TRICKLE_BYTES = 40
TRICKLE_GAP_S = 0.05


@dataclass
class KeepAliveServer:
    base: str
    stats: _ServerStats


@pytest.fixture
def make_keep_alive_server() -> Iterator[Callable[[], KeepAliveServer]]:
    servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def make() -> KeepAliveServer:
        stats = _ServerStats()
        handler = type("Handler", (_KeepAliveHandler,), {"stats": stats})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        servers.append((server, thread))
        return KeepAliveServer(f"http://127.0.0.1:{server.server_address[1]}", stats)

    yield make
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def keep_alive_server(make_keep_alive_server: Callable[[], KeepAliveServer]) -> KeepAliveServer:
    return make_keep_alive_server()


@pytest.fixture
def http_fetcher() -> Iterator[HttpFetcher]:
    fetcher = HttpFetcher(max_bytes=100_000)
    yield fetcher
    fetcher.close()


@pytest.mark.integration
def test_http_a_body_over_the_size_cap_is_a_fetch_error(
    keep_alive_server: KeepAliveServer, http_fetcher: HttpFetcher
) -> None:
    with pytest.raises(FetchError, match=r"^response larger than 100000 bytes$") as raised:
        http_fetcher.fetch(f"{keep_alive_server.base}/big", 2.0)
    assert not isinstance(raised.value, FetchTimeoutError)


@pytest.mark.integration
def test_http_the_timeout_bounds_the_whole_body_not_only_each_read(
    keep_alive_server: KeepAliveServer, http_fetcher: HttpFetcher
) -> None:
    # each read comes within 0.05 s: a timeout per read would return the whole body after 2 s
    with pytest.raises(FetchTimeoutError, match=r"^body not complete within 0\.3 s$"):
        http_fetcher.fetch(f"{keep_alive_server.base}/trickle", 0.3)


@pytest.mark.integration
@pytest.mark.parametrize("charset", ["iso-8859-1", "utf-8", "no-such-charset"])
def test_http_the_body_is_decoded_with_its_declared_charset_else_utf_8(
    keep_alive_server: KeepAliveServer, http_fetcher: HttpFetcher, charset: str
) -> None:
    assert http_fetcher.fetch(f"{keep_alive_server.base}/charset/{charset}", 2.0) == BODY


@pytest.mark.integration
def test_http_proxies_from_the_environment_are_ignored(
    keep_alive_server: KeepAliveServer, http_fetcher: HttpFetcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = f"http://127.0.0.1:{_refusing_port()}"
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    assert http_fetcher.fetch(f"{keep_alive_server.base}/metrics", 2.0) == BODY


@pytest.mark.integration
def test_http_one_connection_per_broker_is_kept_across_fetches(
    keep_alive_server: KeepAliveServer, http_fetcher: HttpFetcher
) -> None:
    for _ in range(3):
        assert http_fetcher.fetch(f"{keep_alive_server.base}/metrics", 2.0) == BODY

    assert keep_alive_server.stats.opened == 1


@pytest.mark.integration
def test_http_closing_the_collector_closes_the_connections_of_the_fetcher_it_made(
    keep_alive_server: KeepAliveServer, clock: Clock
) -> None:
    collector = MetricsCollector(urls={1: f"{keep_alive_server.base}/metrics"}, timeout_s=2.0, clock=clock)
    assert collector.scrape(brokers(1)).failures == {}
    collector.scrape(brokers(1))
    assert (keep_alive_server.stats.opened, keep_alive_server.stats.open) == (1, 1)

    collector.close()
    deadline = time.monotonic() + 5.0
    while keep_alive_server.stats.open and time.monotonic() < deadline:
        time.sleep(0.01)
    assert keep_alive_server.stats.open == 0


@pytest.mark.integration
def test_http_the_client_of_a_broker_gone_quiet_is_closed_but_never_one_in_use(
    make_keep_alive_server: Callable[[], KeepAliveServer],
    http_fetcher: HttpFetcher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("collectors.metrics.fetch.KEEPALIVE_S", 0.2)
    quiet, busy, other = (make_keep_alive_server() for _ in range(3))
    assert http_fetcher.fetch(f"{quiet.base}/metrics", 2.0) == BODY
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(http_fetcher.fetch, f"{busy.base}/trickle", 5.0)
        time.sleep(0.5)

        assert http_fetcher.fetch(f"{other.base}/metrics", 2.0) == BODY
        assert slow.result(timeout=10) == BODY[:TRICKLE_BYTES]
    deadline = time.monotonic() + 5.0
    while quiet.stats.open and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [s.stats.opened for s in (quiet, busy, other)] == [1, 1, 1]
    assert [s.stats.open for s in (quiet, busy, other)] == [0, 1, 1], "only the quiet broker's is closed"
