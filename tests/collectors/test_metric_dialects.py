"""Exporter dialects: what each common jmx_exporter rule file serves for the MBeans the collector reads
(sample lines named as each file's rules name them; docs/collectors.md "Exporter dialects" cites the files),
detection from the names alone, the setting, and a broker whose naming nobody knows."""

from __future__ import annotations

from collections.abc import Mapping
from string import Template

import pytest
from pydantic import ValidationError

from collectors.kafka.model import BrokerEndpoint, BrokerRegistration, TopicPartition
from collectors.metrics import (
    DIALECT_TABLES,
    DIALECTS,
    BrokerScrape,
    Dialect,
    ExpositionError,
    Filesystem,
    MetricsCollector,
    MetricsSettings,
    detect_dialect,
    evaluate,
    parse_exposition,
    read_exposition,
    read_filesystems,
    read_log_sizes,
)

pytestmark = pytest.mark.unit

NODE = Template("""\
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} $idle
node_cpu_seconds_total{cpu="0",mode="user"} $user
node_cpu_seconds_total{cpu="0",mode="iowait"} $iowait
# TYPE node_disk_read_bytes_total counter
node_disk_read_bytes_total{device="nvme0n1"} $read
# TYPE node_disk_written_bytes_total counter
node_disk_written_bytes_total{device="nvme0n1"} $written
# TYPE node_disk_io_time_seconds_total counter
node_disk_io_time_seconds_total{device="nvme0n1"} $io_time
# TYPE node_memory_MemTotal_bytes gauge
node_memory_MemTotal_bytes 3.2e+10
# TYPE node_memory_MemAvailable_bytes gauge
node_memory_MemAvailable_bytes 2.4e+10
# TYPE process_open_fds gauge
process_open_fds 950.0
# TYPE process_max_fds gauge
process_max_fds 1048576.0
# TYPE node_filesystem_size_bytes gauge
node_filesystem_size_bytes{device="/dev/nvme1n1",fstype="xfs",mountpoint="/var/lib/kafka/data-0"} 1.0E12
node_filesystem_size_bytes{device="/dev/root",fstype="ext4",mountpoint="/"} 5.0E10
# TYPE node_filesystem_avail_bytes gauge
node_filesystem_avail_bytes{device="/dev/nvme1n1",fstype="xfs",mountpoint="/var/lib/kafka/data-0"} 2.5E11
node_filesystem_avail_bytes{device="/dev/root",fstype="ext4",mountpoint="/"} 1.0E10
""")

# jmx_exporter 1.x with prometheus/jmx_exporter examples/kafka-2_0_0.yml
EXAMPLE = Template("""\
# HELP kafka_server_replicamanager_underreplicatedpartitions Attribute exposed for management \
kafka.server:name=UnderReplicatedPartitions,type=ReplicaManager,attribute=Value
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
# TYPE kafka_server_replicamanager_isrshrinks counter
kafka_server_replicamanager_isrshrinks_total $isr_shrinks
# TYPE kafka_server_replicamanager_isrexpands counter
kafka_server_replicamanager_isrexpands_total $isr_expands
# TYPE kafka_log_logmanager_offlinelogdirectorycount gauge
kafka_log_logmanager_offlinelogdirectorycount 1.0
# TYPE kafka_log_log_size gauge
kafka_log_log_size{partition="0",topic="orders"} 1.2E9
kafka_log_log_size{partition="1",topic="orders"} 8.0E8
# TYPE kafka_controller_kafkacontroller_activecontrollercount gauge
kafka_controller_kafkacontroller_activecontrollercount 1.0
# TYPE kafka_controller_kafkacontroller_offlinepartitionscount gauge
kafka_controller_kafkacontroller_offlinepartitionscount 0.0
# TYPE kafka_controller_kafkacontroller_preferredreplicaimbalancecount gauge
kafka_controller_kafkacontroller_preferredreplicaimbalancecount 4.0
# TYPE kafka_server_brokertopicmetrics_bytesin counter
kafka_server_brokertopicmetrics_bytesin_total $bytes_in
kafka_server_brokertopicmetrics_bytesin_total{topic="orders"} $orders_in
# TYPE kafka_server_brokertopicmetrics_bytesout counter
kafka_server_brokertopicmetrics_bytesout_total $bytes_out
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent gauge
kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent 0.875
# TYPE kafka_network_socketserver_networkprocessoravgidlepercent gauge
kafka_network_socketserver_networkprocessoravgidlepercent 0.75
# TYPE kafka_network_requestmetrics_totaltimems gauge
kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"} 12.5
kafka_network_requestmetrics_totaltimems{request="Fetch",quantile="0.99"} 500.0
""")

# jmx_exporter 0.x with Strimzi's packaging/examples/metrics/kafka-metrics.yaml (Kafka 3.9): the example's
# names but the *Percent gauges, whose rules come first
STRIMZI = Template(
    EXAMPLE.template.replace(
        "kafka_network_socketserver_networkprocessoravgidlepercent",
        "kafka_network_socketserver_networkprocessoravgidle_percent",
    ).replace('"Fetch",quantile="0.99"}', '"Fetch",quantile="0.99",}')
    + """\
# TYPE kafka_network_processor_idle_percent gauge
kafka_network_processor_idle_percent{networkProcessor="0",} 0.9
"""
)

# jmx_exporter 0.x with confluentinc/jmx-monitoring-stacks shared-assets/jmx-exporter/kafka_broker.yml:
# untyped Count/Value under the MBean's name, the all-topic rates as ..._alltopics gauges
CONFLUENT = Template("""\
# HELP kafka_server_replicamanager_underreplicatedpartitions Attribute exposed for management \
(kafka.server<type=ReplicaManager, name=UnderReplicatedPartitions><>Value)
# TYPE kafka_server_replicamanager_underreplicatedpartitions untyped
kafka_server_replicamanager_underreplicatedpartitions 2.0
# TYPE kafka_server_replicamanager_partitioncount untyped
kafka_server_replicamanager_partitioncount 412.0
# TYPE kafka_server_replicamanager_leadercount untyped
kafka_server_replicamanager_leadercount 137.0
# TYPE kafka_server_replicamanager_underminisrpartitioncount untyped
kafka_server_replicamanager_underminisrpartitioncount 1.0
# TYPE kafka_server_replicamanager_atminisrpartitioncount untyped
kafka_server_replicamanager_atminisrpartitioncount 3.0
# TYPE kafka_server_replicamanager_offlinereplicacount untyped
kafka_server_replicamanager_offlinereplicacount 0.0
# TYPE kafka_server_replicamanager_isrshrinkspersec untyped
kafka_server_replicamanager_isrshrinkspersec $isr_shrinks
# TYPE kafka_server_replicamanager_isrexpandspersec untyped
kafka_server_replicamanager_isrexpandspersec $isr_expands
# TYPE kafka_log_logmanager_offlinelogdirectorycount untyped
kafka_log_logmanager_offlinelogdirectorycount 1.0
# TYPE kafka_log_log_size untyped
kafka_log_log_size{topic="orders",partition="0",} 1.2E9
kafka_log_log_size{topic="orders",partition="1",} 8.0E8
# TYPE kafka_controller_kafkacontroller_activecontrollercount untyped
kafka_controller_kafkacontroller_activecontrollercount 1.0
# TYPE kafka_controller_kafkacontroller_offlinepartitionscount untyped
kafka_controller_kafkacontroller_offlinepartitionscount 0.0
# TYPE kafka_controller_kafkacontroller_preferredreplicaimbalancecount untyped
kafka_controller_kafkacontroller_preferredreplicaimbalancecount 4.0
# TYPE kafka_server_brokertopicmetrics_bytesinpersec untyped
kafka_server_brokertopicmetrics_bytesinpersec $bytes_in
kafka_server_brokertopicmetrics_bytesinpersec{topic="orders",} $orders_in
# TYPE kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate_alltopics gauge
kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate_alltopics 1480000.0
# TYPE kafka_server_brokertopicmetrics_bytesoutpersec untyped
kafka_server_brokertopicmetrics_bytesoutpersec $bytes_out
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent untyped
kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent 8.64E13
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_total gauge
kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_total 0.875
# TYPE kafka_network_socketserver_networkprocessoravgidlepercent untyped
kafka_network_socketserver_networkprocessoravgidlepercent 0.75
# TYPE kafka_network_requestmetrics_totaltimems gauge
kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99",} 12.5
# TYPE kafka_network_requestmetrics_requestspersec untyped
kafka_network_requestmetrics_requestspersec{request="Produce",version="9",} 5000.0
""")

# jmx_exporter 0.x with bitnami/charts bitnami/kafka templates/metrics/jmx-configmap.yaml: untyped, the
# attribute last, "_total_" after kafka.server's type; no percentiles
BITNAMI = Template("""\
# HELP kafka_server_replicamanager_total_underreplicatedpartitions_value Attribute exposed for management \
(kafka.server<type=ReplicaManager, name=UnderReplicatedPartitions><>Value)
# TYPE kafka_server_replicamanager_total_underreplicatedpartitions_value untyped
kafka_server_replicamanager_total_underreplicatedpartitions_value 2.0
# TYPE kafka_server_replicamanager_total_partitioncount_value untyped
kafka_server_replicamanager_total_partitioncount_value 412.0
# TYPE kafka_server_replicamanager_total_leadercount_value untyped
kafka_server_replicamanager_total_leadercount_value 137.0
# TYPE kafka_server_replicamanager_total_underminisrpartitioncount_value untyped
kafka_server_replicamanager_total_underminisrpartitioncount_value 1.0
# TYPE kafka_server_replicamanager_total_atminisrpartitioncount_value untyped
kafka_server_replicamanager_total_atminisrpartitioncount_value 3.0
# TYPE kafka_server_replicamanager_total_offlinereplicacount_value untyped
kafka_server_replicamanager_total_offlinereplicacount_value 0.0
# TYPE kafka_server_replicamanager_total_isrshrinkspersec_count untyped
kafka_server_replicamanager_total_isrshrinkspersec_count $isr_shrinks
# TYPE kafka_server_replicamanager_total_isrexpandspersec_count untyped
kafka_server_replicamanager_total_isrexpandspersec_count $isr_expands
# TYPE kafka_log_log_size untyped
kafka_log_log_size{topic="orders",partition="0",} 1.2E9
kafka_log_log_size{topic="orders",partition="1",} 8.0E8
# TYPE kafka_controller_kafkacontroller_activecontrollercount_value untyped
kafka_controller_kafkacontroller_activecontrollercount_value 1.0
# TYPE kafka_controller_kafkacontroller_offlinepartitionscount_value untyped
kafka_controller_kafkacontroller_offlinepartitionscount_value 0.0
# TYPE kafka_controller_kafkacontroller_preferredreplicaimbalancecount_value untyped
kafka_controller_kafkacontroller_preferredreplicaimbalancecount_value 4.0
# TYPE kafka_server_brokertopicmetrics_total_bytesinpersec_count untyped
kafka_server_brokertopicmetrics_total_bytesinpersec_count $bytes_in
# TYPE kafka_server_brokertopicmetrics_total_bytesinpersec_oneminuterate untyped
kafka_server_brokertopicmetrics_total_bytesinpersec_oneminuterate 1480000.0
# TYPE kafka_server_brokertopicmetrics_bytesinpersec_count untyped
kafka_server_brokertopicmetrics_bytesinpersec_count{topic="orders",} $orders_in
# TYPE kafka_server_brokertopicmetrics_total_bytesoutpersec_count untyped
kafka_server_brokertopicmetrics_total_bytesoutpersec_count $bytes_out
# TYPE kafka_server_kafkarequesthandlerpool_total_requesthandleravgidlepercent_count untyped
kafka_server_kafkarequesthandlerpool_total_requesthandleravgidlepercent_count 8.64E13
# TYPE kafka_server_kafkarequesthandlerpool_total_requesthandleravgidlepercent_oneminuterate untyped
kafka_server_kafkarequesthandlerpool_total_requesthandleravgidlepercent_oneminuterate 0.875
# TYPE kafka_network_socketserver_networkprocessoravgidlepercent_value untyped
kafka_network_socketserver_networkprocessoravgidlepercent_value 0.75
# TYPE kafka_network_requestmetrics_totaltimems_count untyped
kafka_network_requestmetrics_totaltimems_count{request="Produce",} 5000.0
""")

SERVED: Mapping[Dialect, Template] = {
    "jmx-exporter-example": EXAMPLE,
    "strimzi": STRIMZI,
    "confluent": CONFLUENT,
    "bitnami": BITNAMI,
}

AT_0 = {
    "isr_shrinks": 7.0,
    "isr_expands": 5.0,
    "bytes_in": 1.0e7,
    "orders_in": 6.0e6,
    "bytes_out": 2.0e7,
    "idle": 1000.0,
    "user": 60.0,
    "iowait": 10.0,
    "read": 1.0e9,
    "written": 3.0e9,
    "io_time": 100.0,
}
AT_10 = AT_0 | {
    "isr_shrinks": 10.0,
    "isr_expands": 7.0,
    "bytes_in": 2.5e7,
    "orders_in": 1.6e7,
    "bytes_out": 5.0e7,
    "idle": 1004.0,
    "user": 63.0,
    "iowait": 11.0,
    "read": 1.003e9,
    "written": 3.05e9,
    "io_time": 104.0,
}
EXPECTED = {
    "partitions": 412.0,
    "leaders": 137.0,
    "urp": 2.0,
    "under_min_isr": 1.0,
    "at_min_isr": 3.0,
    "offline_replicas": 0.0,
    "active_controller": 1.0,
    "offline_partitions": 0.0,
    "preferred_imbalance": 4.0,
    "nwBytesIn": 1.5e6,
    "nwBytesOut": 3.0e6,
    "request_handler_idle": 0.875,
    "network_processor_idle": 0.75,
    "produce_p99_ms": 12.5,
    "cpuUsed": 0.3,
    "iowait": 0.1,
    "ioRead": 3.0e5,
    "ioWrite": 5.0e6,
    "ioutil": 0.4,
    "fd": 950.0,
    "memUsed": 8.0e9,
    "max_fds": 1048576.0,
    "offline_log_dirs": 1.0,
    "isr_shrinks_per_s": 0.3,
    "isr_expands_per_s": 0.2,
}
NOT_SERVED: Mapping[Dialect, set[str]] = {"bitnami": {"produce_p99_ms", "offline_log_dirs"}}
"""What a dialect's rules do not export at all: Bitnami's have no rule for a histogram's percentiles nor
for a kafka.log bean without a topic (the offline log dir count)."""


def served(dialect: Dialect, at: Mapping[str, float]) -> str:
    return SERVED[dialect].substitute(at) + NODE.substitute(at)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_is_detected_from_its_names_and_read_in_full(dialect: Dialect) -> None:
    table = DIALECT_TABLES[dialect]
    first = parse_exposition(served(dialect, AT_0))
    second = parse_exposition(served(dialect, AT_10))

    assert detect_dialect(first) == dialect
    _, before = evaluate(table, first, at=100.0)
    values, _ = evaluate(table, second, 110.0, before)

    expected = {k: v for k, v in EXPECTED.items() if k not in NOT_SERVED.get(dialect, set())}
    assert values == pytest.approx(expected)


def read(dialect: Dialect, table: Dialect) -> dict[str, float]:
    """``dialect``'s text, scraped twice 10 s apart, read with ``table``'s names."""
    _, before = evaluate(DIALECT_TABLES[table], parse_exposition(served(dialect, AT_0)), at=100.0)
    values, _ = evaluate(DIALECT_TABLES[table], parse_exposition(served(dialect, AT_10)), 110.0, before)
    return values


INTERCHANGEABLE = {"jmx-exporter-example", "strimzi"}
"""Strimzi's names differ from the example's in one gauge, which each table reads under both names."""


@pytest.mark.parametrize("dialect", DIALECTS)
def test_read_with_another_dialects_names_kafka_metrics_go_missing(dialect: Dialect) -> None:
    for other in DIALECTS:
        values = read(dialect, other)
        if other == dialect or {dialect, other} <= INTERCHANGEABLE:
            assert values == pytest.approx({k: v for k, v in EXPECTED.items() if k in values})
            assert set(EXPECTED) - set(values) <= NOT_SERVED.get(dialect, set()) | NOT_SERVED.get(
                other, set()
            )
        else:
            missing = {"urp", "nwBytesIn", "request_handler_idle"} - set(values)
            assert missing, f"{dialect}'s text read with {other}'s names"


def test_detection_needs_a_kafka_name_and_prefers_the_distinctive_ones() -> None:
    assert detect_dialect(["node_cpu_seconds_total", "process_open_fds"]) is None
    assert detect_dialect([]) is None
    # Confluent's rules also give the example's URP name; Strimzi's also its bytes-in name
    assert (
        detect_dialect(
            [
                "kafka_server_replicamanager_underreplicatedpartitions",
                "kafka_server_brokertopicmetrics_bytesinpersec",
            ]
        )
        == "confluent"
    )
    assert (
        detect_dialect(
            [
                "kafka_server_brokertopicmetrics_bytesin_total",
                "kafka_network_socketserver_networkprocessoravgidle_percent",
            ]
        )
        == "strimzi"
    )
    assert detect_dialect(["kafka_server_replicamanager_underreplicatedpartitions"]) == "jmx-exporter-example"


# --- the collector ---------------------------------------------------------------------------------------


class Fetcher:
    """Broker i's URL -> the text it serves."""

    def __init__(self, bodies: Mapping[str, str]) -> None:
        self.bodies = dict(bodies)

    def fetch(self, url: str, timeout: float) -> str:
        return self.bodies[url]


def url(broker_id: int) -> str:
    return f"http://kafka-{broker_id}.example:7071/metrics"


def registration(broker_id: int) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (BrokerEndpoint("PLAINTEXT", f"kafka-{broker_id}.example", 9092),))


class Clock:
    now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def scrape_twice(
    settings: MetricsSettings, dialects: Mapping[int, Dialect | None]
) -> dict[int, BrokerScrape]:
    fetcher, clock = Fetcher({}), Clock()
    brokers = {b: registration(b) for b in dialects}

    def serve(at: Mapping[str, float]) -> None:
        for b, d in dialects.items():
            fetcher.bodies[url(b)] = served(d, at) if d is not None else NODE.substitute(at)

    with MetricsCollector(settings, fetcher=fetcher, clock=clock) as collector:
        serve(AT_0)
        collector.scrape(brokers)
        clock.now += 10.0
        serve(AT_10)
        return dict(collector.scrape(brokers).scrapes)


def test_auto_detects_each_brokers_dialect_on_its_own() -> None:
    dialects: dict[int, Dialect | None] = dict(enumerate(DIALECTS))
    scrapes = scrape_twice(MetricsSettings(url_template="http://{host}:7071/metrics"), dialects)

    for b, dialect in dialects.items():
        scrape = scrapes[b]
        assert scrape.dialect == dialect
        assert scrape.problems == ()
        assert scrape.values["urp"] == 2.0
        assert scrape.values["nwBytesIn"] == pytest.approx(1.5e6)


def test_a_set_dialect_is_used_as_set_and_a_wrong_one_reads_no_kafka_metric() -> None:
    settings = MetricsSettings(
        url_template="http://{host}:7071/metrics", dialect="reference", dialects={1: "bitnami"}
    )
    scrapes = scrape_twice(settings, {0: "jmx-exporter-example", 1: "bitnami", 2: "confluent"})

    assert [scrapes[b].dialect for b in (0, 1, 2)] == [
        "jmx-exporter-example",
        "bitnami",
        "jmx-exporter-example",
    ]
    assert scrapes[1].values["urp"] == 2.0
    wrong = scrapes[2].values
    assert "nwBytesIn" not in wrong
    assert "request_handler_idle" not in wrong
    assert wrong["cpuUsed"] == pytest.approx(0.3), "node_exporter's names are every dialect's"


def test_a_broker_whose_naming_is_unknown_is_reported_and_read_for_what_it_has() -> None:
    scrapes = scrape_twice(MetricsSettings(url_template="http://{host}:7071/metrics"), {0: None})

    scrape = scrapes[0]
    assert scrape.error is None
    assert scrape.dialect == "jmx-exporter-example"
    assert len(scrape.problems) == 1
    assert "no exporter dialect recognised" in scrape.problems[0]
    assert "urp" not in scrape.values
    assert scrape.values["fd"] == 950.0


def test_the_dialect_setting_takes_the_documented_names_only() -> None:
    template = "http://{host}:7071/metrics"
    for value in ("auto", "reference", *DIALECTS):
        assert MetricsSettings.model_validate({"url_template": template, "dialect": value}).dialect == value
    with pytest.raises(ValidationError, match="dialect"):
        MetricsSettings.model_validate({"url_template": template, "dialect": "prometheus"})
    with pytest.raises(ValidationError, match="dialects"):
        MetricsSettings.model_validate({"url_template": template, "dialects": {"0": "strimzy"}})


# --- malformed lines ---------------------------------------------------------------------------------------

BAD_LINES = """\
# TYPE kafka_server_replicamanager_isrexpands counter
kafka_server_replicamanager_isrexpands_total{topic="a" 1.0
# TYPE kafka_server_replicamanager_reassigningpartitions gauge
kafka_server_replicamanager_reassigningpartitions one
"""


def test_malformed_lines_are_reported_and_skipped_and_the_rest_read() -> None:
    text = served("bitnami", AT_0) + BAD_LINES
    with pytest.raises(ExpositionError):
        parse_exposition(text)

    exposition, skipped = read_exposition(text)

    assert exposition == parse_exposition(served("bitnami", AT_0))
    assert len(skipped) == 2
    assert skipped[0].startswith("line ")
    assert skipped[0].endswith('kafka_server_replicamanager_isrexpands_total{topic="a" 1.0')
    assert skipped[1].endswith("kafka_server_replicamanager_reassigningpartitions one")
    assert read_exposition(served("bitnami", AT_0)) == (exposition, ())


def test_many_malformed_lines_are_counted_past_twenty_and_text_without_a_good_line_is_refused() -> None:
    bad = "".join(f"series_{i} one\n" for i in range(25))
    _, skipped = read_exposition(NODE.substitute(AT_0) + bad)
    assert len(skipped) == 21
    assert skipped[-1] == "and 5 more malformed lines skipped"
    with pytest.raises(ExpositionError):
        read_exposition("<html><body>Bad Gateway</body></html>\n" + bad)


def test_a_broker_serving_a_malformed_line_is_read_with_the_line_in_its_problems() -> None:
    fetcher = Fetcher({url(0): served("confluent", AT_0) + BAD_LINES})
    with MetricsCollector(
        MetricsSettings(url_template="http://{host}:7071/metrics"), fetcher=fetcher, clock=Clock()
    ) as collector:
        scrape = collector.scrape({0: registration(0)}).scrapes[0]

    assert scrape.error is None
    assert scrape.dialect == "confluent"
    assert scrape.values["urp"] == 2.0
    # the collector reads only the families it wants (read_exposition's fast path): the bad line of
    # reassigningpartitions, which no table reads, is not looked at
    text = fetcher.bodies[url(0)]
    number = text.splitlines().index('kafka_server_replicamanager_isrexpands_total{topic="a" 1.0') + 1
    assert len(scrape.problems) == 1
    assert scrape.problems[0].startswith(f"line {number} skipped (")
    assert scrape.problems[0].endswith('kafka_server_replicamanager_isrexpands_total{topic="a" 1.0')


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("subset", ["all", "some"])
def test_reading_only_the_wanted_families_gives_what_the_full_parser_gives(
    dialect: Dialect, subset: str
) -> None:
    text = served(dialect, AT_0) + '# TYPE odd_gauge gauge\nodd_gauge{a="x\\"y",b="}"} 3 1700000000000\n'
    everything = parse_exposition(text)
    wanted = (
        set(everything) if subset == "all" else {n for n in everything if "replicamanager" in n or "odd" in n}
    )
    wanted |= {"kafka_server_replicamanager_isrshrinks", "kafka_server_brokertopicmetrics_bytesin"}
    fast, problems = read_exposition(text, wanted)
    assert problems == ()
    assert fast == parse_exposition(text, wanted)


# --- the labelled series: filesystems and log sizes --------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_gives_the_filesystems_and_the_partitions_log_sizes(dialect: Dialect) -> None:
    fetcher = Fetcher({url(0): served(dialect, AT_0)})
    with MetricsCollector(
        MetricsSettings(url_template="http://{host}:7071/metrics"), fetcher=fetcher, clock=Clock()
    ) as collector:
        scrape = collector.scrape({0: registration(0)}).scrapes[0]

    assert scrape.dialect == dialect
    assert scrape.problems == ()
    assert scrape.filesystems == {
        "/": Filesystem(5.0e10, 1.0e10),
        "/var/lib/kafka/data-0": Filesystem(1.0e12, 2.5e11),
    }
    assert scrape.filesystems["/var/lib/kafka/data-0"].used_ratio == pytest.approx(0.75)
    assert scrape.log_sizes == {
        TopicPartition("orders", 0): 1_200_000_000,
        TopicPartition("orders", 1): 800_000_000,
    }


def test_malformed_filesystem_and_log_size_series_are_skipped_and_said() -> None:
    exposition = parse_exposition("""\
# TYPE node_filesystem_size_bytes gauge
node_filesystem_size_bytes{mountpoint="/data"} 100.0
node_filesystem_size_bytes{device="x"} 100.0
node_filesystem_size_bytes{mountpoint="/only-size"} 100.0
node_filesystem_size_bytes{mountpoint="/neg"} -1.0
# TYPE node_filesystem_avail_bytes gauge
node_filesystem_avail_bytes{mountpoint="/data"} 40.0
node_filesystem_avail_bytes{mountpoint="/neg"} 1.0
# TYPE kafka_log_log_size gauge
kafka_log_log_size{topic="a",partition="0"} 10.0
kafka_log_log_size{partition="1"} 10.0
kafka_log_log_size{topic="a",partition="x"} 10.0
kafka_log_log_size{topic="a",partition="2"} -3.0
kafka_log_log_size{topic="a",partition="3"} 1.5
kafka_log_log_size{topic="a",partition="4",is_future="true"} 10.0
""")
    filesystems, fs_problems = read_filesystems(exposition)
    assert filesystems == {"/data": Filesystem(100.0, 40.0)}
    assert fs_problems == (
        'node_filesystem_size_bytes{device="x"} has no mountpoint: skipped',
        'node_filesystem_size_bytes{mountpoint="/neg"} is negative (-1): skipped',
        "mount point /neg has no node_filesystem_size_bytes: skipped",
        "mount point /only-size has no node_filesystem_avail_bytes: skipped",
    )
    sizes, size_problems = read_log_sizes(exposition, "kafka_log_log_size")
    assert sizes == {TopicPartition("a", 0): 10, TopicPartition("a", 3): 2}  # 1.5 rounded
    assert size_problems == (
        'kafka_log_log_size{partition="1"} has no topic: skipped',
        'kafka_log_log_size{partition="x",topic="a"}: partition \'x\' is not a partition number: skipped',
        'kafka_log_log_size{partition="2",topic="a"} is not a size in bytes (-3): skipped',
    )
