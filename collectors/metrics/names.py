"""The name table: how each metric of the load and health models (and each request signal) is read from a
broker's exposition, as PromQL selectors, and the exporter dialects, the names four common jmx_exporter
rule files give the same MBeans.

``nwBytesIn``/``nwBytesOut`` are Kafka's ``BytesInPerSec``/``BytesOutPerSec`` for all topics (the series
without a ``topic`` label): client traffic only since KIP-153 (0.11), replication being
``Replication*BytesIn/OutPerSec``, which is left out. With a replication factor equal to the number of
brokers every broker receives every byte as leader or follower, so counting replication would hide exactly
the leadership skew the load model is for. A deployment that wants NIC-level traffic points them at
``node_network_{receive,transmit}_bytes_total`` in the name table.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

LabelSet = tuple[tuple[str, str], ...]
"""A series' labels, sorted by name."""

Exposition = Mapping[str, Mapping[LabelSet, float]]
"""Sample name as exposed -> its series' values (finite only)."""


_METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SELECTOR = re.compile(rf"\s*(?P<name>{_METRIC_NAME})\s*(?:\{{(?P<matchers>.*)\}})?\s*", re.DOTALL)
_MATCHER = re.compile(
    r'\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*(?:,|$)'
)
_SELECTOR_HELP = 'write name or name{label="value", label!="value", label=~"regex", label!~"regex"}'


@dataclass(frozen=True, slots=True)
class LabelMatcher:
    """One PromQL label matcher. As in PromQL a missing label reads as "", so ``topic=""`` selects the
    series without a ``topic`` label, and regular expressions match the whole value."""

    label: str
    op: Literal["=", "!=", "=~", "!~"]
    value: str
    pattern: re.Pattern[str] | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.label, "")
        if self.pattern is not None:
            return (self.pattern.fullmatch(actual) is not None) == (self.op == "=~")
        return (actual == self.value) == (self.op == "=")


@dataclass(frozen=True, slots=True)
class SeriesSelector:
    """A PromQL instant selector: a sample name and label matchers."""

    name: str
    matchers: tuple[LabelMatcher, ...] = ()

    def select(self, exposition: Exposition) -> dict[LabelSet, float]:
        series = exposition.get(self.name, {})
        if not self.matchers:
            return dict(series)
        return {k: v for k, v in series.items() if all(m.matches(dict(k)) for m in self.matchers)}


@functools.lru_cache(maxsize=256)
def parse_selector(text: str) -> SeriesSelector:
    """``node_cpu_seconds_total{mode!~"idle|iowait"}`` -> :class:`SeriesSelector`; ValueError if bad."""
    whole = _SELECTOR.fullmatch(text)
    if whole is None:
        raise ValueError(f"metric selector {text!r} is not a selector: {_SELECTOR_HELP}")
    body, matchers, pos = whole.group("matchers") or "", [], 0
    while pos < len(body.rstrip()):
        term = _MATCHER.match(body, pos)
        if term is None:
            raise ValueError(f"metric selector {text!r}: cannot read {body[pos:]!r}: {_SELECTOR_HELP}")
        matchers.append(_matcher(text, term["label"], term["op"], _unescape(term["value"])))
        pos = term.end()
    return SeriesSelector(whole.group("name"), tuple(matchers))


def _matcher(text: str, label: str, op: str, value: str) -> LabelMatcher:
    if op not in ("=~", "!~"):
        return LabelMatcher(label, "=" if op == "=" else "!=", value)
    try:
        return LabelMatcher(label, "=~" if op == "=~" else "!~", value, re.compile(value))
    except re.error as exc:
        raise ValueError(f"metric selector {text!r}: bad regular expression {value!r}: {exc}") from None


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


class MetricRule(BaseModel):
    """How one metric of the load or health model is read from a broker's exposition.

    ``series`` selects the samples (a PromQL selector); with ``rate`` each series becomes its per-second
    rate (counters); ``aggregate`` combines the series (``sum`` over CPUs and disks, ``max`` for the
    busiest disk); ``minus`` names a second selector, treated alike, whose result is subtracted (e.g.
    memory total − available). ``fallbacks`` are selectors read in turn when ``series`` selects nothing:
    the name another common exporter configuration gives the same MBean (Strimzi's rules name some
    gauges differently from jmx_exporter's example rules), so that one table reads both.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    series: str
    rate: bool = False
    aggregate: Literal["sum", "max"] = "sum"
    minus: str | None = None
    fallbacks: tuple[str, ...] = ()

    @field_validator("series", "minus")
    @classmethod
    def _check_selector(cls, value: str | None) -> str | None:
        if value is not None:
            parse_selector(value)
        return value

    @field_validator("fallbacks")
    @classmethod
    def _check_fallbacks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for selector in value:
            parse_selector(selector)
        return value

    @property
    def selectors(self) -> tuple[str, ...]:
        """``series`` then its fallbacks, in the order they are tried."""
        return (self.series, *self.fallbacks)


def _gauge(series: str) -> MetricRule:
    return MetricRule(series=series)


def _rate(series: str, aggregate: Literal["sum", "max"] = "sum") -> MetricRule:
    return MetricRule(series=series, rate=True, aggregate=aggregate)


DEFAULT_NAME_TABLE: Mapping[str, MetricRule] = {
    # the load model (docs/kafka-reference.md §4); units: counts, cores busy, bytes/s, fraction of time busy,
    # bytes
    "partitions": _gauge("kafka_server_replicamanager_partitioncount"),
    "leaders": _gauge("kafka_server_replicamanager_leadercount"),
    "cpuUsed": _rate('node_cpu_seconds_total{mode!~"idle|iowait"}'),
    "nwBytesIn": _rate('kafka_server_brokertopicmetrics_bytesin_total{topic=""}'),
    "nwBytesOut": _rate('kafka_server_brokertopicmetrics_bytesout_total{topic=""}'),
    "ioRead": _rate("node_disk_read_bytes_total"),
    "ioWrite": _rate("node_disk_written_bytes_total"),
    "iowait": _rate('node_cpu_seconds_total{mode="iowait"}'),
    "ioutil": _rate("node_disk_io_time_seconds_total", aggregate="max"),
    "fd": _gauge("process_open_fds"),
    "memUsed": MetricRule(series="node_memory_MemTotal_bytes", minus="node_memory_MemAvailable_bytes"),
    # the brokers' own health gauges (docs/kafka-reference.md §3, §5); controller gauges are 0 off the
    # controller
    "urp": _gauge("kafka_server_replicamanager_underreplicatedpartitions"),
    "under_min_isr": _gauge("kafka_server_replicamanager_underminisrpartitioncount"),
    "at_min_isr": _gauge("kafka_server_replicamanager_atminisrpartitioncount"),
    "offline_replicas": _gauge("kafka_server_replicamanager_offlinereplicacount"),
    "active_controller": _gauge("kafka_controller_kafkacontroller_activecontrollercount"),
    "offline_partitions": _gauge("kafka_controller_kafkacontroller_offlinepartitionscount"),
    "preferred_imbalance": _gauge("kafka_controller_kafkacontroller_preferredreplicaimbalancecount"),
    # how busy the broker's request threads are (docs/kafka-reference.md §5), read by the adaptive
    # throttle; fractions idle in [0, 1], milliseconds
    "request_handler_idle": _gauge("kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent"),
    "network_processor_idle": MetricRule(
        series="kafka_network_socketserver_networkprocessoravgidlepercent",
        fallbacks=("kafka_network_socketserver_networkprocessoravgidle_percent",),
    ),
    "produce_p99_ms": MetricRule(
        series='kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"}', aggregate="max"
    ),
    # capacity and churn (issue 24): failed JBOD log dirs, the descriptor limit beside ``fd``, and how
    # often the broker's leaders shrank and expanded ISRs (per second; a rate needs two scrapes)
    "offline_log_dirs": _gauge("kafka_log_logmanager_offlinelogdirectorycount"),
    "max_fds": _gauge("process_max_fds"),
    "isr_shrinks_per_s": _rate("kafka_server_replicamanager_isrshrinks_total"),
    "isr_expands_per_s": _rate("kafka_server_replicamanager_isrexpands_total"),
}
"""Metric name -> rule, for jmx_exporter's Kafka example rules (Strimzi's where they differ) and
node_exporter."""

HEALTH_METRICS = (
    "urp",
    "under_min_isr",
    "at_min_isr",
    "offline_replicas",
    "active_controller",
    "offline_partitions",
    "preferred_imbalance",
)
BROKER_SIGNALS = ("request_handler_idle", "network_processor_idle", "produce_p99_ms")
"""How busy each broker is: its request handlers' and network processors' idle fractions and its Produce
requests' 99th percentile total time. Neither load-model metrics nor health gauges: samples leave them
out (``collectors.samples.LOAD_METRICS``); the adaptive throttle reads them from the service's scrape."""
CAPACITY_METRICS = ("offline_log_dirs", "max_fds", "isr_shrinks_per_s", "isr_expands_per_s")
"""What the cause rules read beside ``fd`` and the request signals (docs/collectors.md "Capacity and
churn"): ``offline_log_dirs`` (Kafka's ``OfflineLogDirectoryCount``), ``max_fds`` (the process'
descriptor limit), ``isr_shrinks_per_s``/``isr_expands_per_s`` (``IsrShrinksPerSec``/``IsrExpandsPerSec``,
the counters' rates). Not load metrics: samples leave them out."""

LOG_SIZE = "kafka_log_log_size"
"""``kafka.log:type=Log,name=Size,topic=T,partition=P`` (bytes): one series per partition replica, labels
``topic`` and ``partition``. All four dialects' rules name it alike (:data:`LOG_SIZE_NAMES`)."""
FILESYSTEM_SIZE = "node_filesystem_size_bytes"
FILESYSTEM_AVAIL = "node_filesystem_avail_bytes"
"""node_exporter's filesystem gauges, one series per mounted filesystem (labels ``device``, ``fstype``,
``mountpoint``): its size and the bytes available to unprivileged users, in every dialect."""
LOG_SIZE_NAMES: Mapping[Dialect, str] = {
    "jmx-exporter-example": LOG_SIZE,
    "strimzi": LOG_SIZE,
    "confluent": LOG_SIZE,
    "bitnami": LOG_SIZE,
}
"""Dialect -> the sample name its rules give ``kafka.log:type=Log,name=Size`` (the example's and Strimzi's
``kafka_$1_$2_$3`` gauge rule with ``topic`` and ``partition`` labels; Confluent's untyped
``kafka_$1_$2_$3``; Bitnami's ``kafka.log`` rule, which only matches beans with a topic and partition)."""
LABELLED_SERIES = frozenset({LOG_SIZE, *LOG_SIZE_NAMES.values(), FILESYSTEM_SIZE, FILESYSTEM_AVAIL})
"""The labelled series a scrape keeps beside the table's values (``BrokerScrape.filesystems`` and
``log_sizes``)."""


# --- exporter dialects -------------------------------------------------------------------------------

Dialect = Literal["jmx-exporter-example", "strimzi", "confluent", "bitnami"]
"""A widely used jmx_exporter rule file for Kafka brokers, each naming the same MBeans its own way
(docs/collectors.md "Exporter dialects" cites the file and commit each table was read from)."""
DIALECTS: tuple[Dialect, ...] = ("jmx-exporter-example", "strimzi", "confluent", "bitnami")
DialectSetting = Literal["auto", "reference", "jmx-exporter-example", "strimzi", "confluent", "bitnami"]
"""What a user may set: ``auto`` (detected per broker from what it serves), ``reference`` (what the reference
cluster serves by default: the same as ``jmx-exporter-example``) or a dialect."""

_HOST_RULES = ("cpuUsed", "ioRead", "ioWrite", "iowait", "ioutil", "fd", "max_fds", "memUsed")
"""node_exporter's and the process collector's metrics: the same whichever rule file the JMX side uses."""


def _kafka_table(**rules: MetricRule | None) -> dict[str, MetricRule]:
    """jmx_exporter's example table with ``rules`` changed (None: the dialect's rules export no such name)."""
    table = {**DEFAULT_NAME_TABLE, **rules}
    return {name: rule for name, rule in table.items() if rule is not None}


_BITNAMI_SERVER = "kafka_server_replicamanager_total_{}_value"
"""Bitnami's catch-all ``kafka.server<type=(.+), name=(.+)><>(Count|Value|OneMinuteRate)`` rule:
``kafka_server_$1_total_$2_$3``, lower-cased."""

DIALECT_TABLES: Mapping[Dialect, Mapping[str, MetricRule]] = {
    # prometheus/jmx_exporter example_configs/kafka-2_0_0.yml: what the reference cluster serves
    "jmx-exporter-example": dict(DEFAULT_NAME_TABLE),
    # Strimzi's kafka-metrics.yaml puts its *Percent rules before the generic Value rule
    "strimzi": _kafka_table(
        network_processor_idle=MetricRule(
            series="kafka_network_socketserver_networkprocessoravgidle_percent",
            fallbacks=("kafka_network_socketserver_networkprocessoravgidlepercent",),
        ),
    ),
    # confluentinc/jmx-monitoring-stacks kafka_broker.yml: meters' Count under the MBean's own name
    # (untyped, ``...persec``), the request handlers' OneMinuteRate as a gauge named ``..._total``
    "confluent": _kafka_table(
        nwBytesIn=_rate('kafka_server_brokertopicmetrics_bytesinpersec{topic=""}'),
        nwBytesOut=_rate('kafka_server_brokertopicmetrics_bytesoutpersec{topic=""}'),
        request_handler_idle=_gauge(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_total"
        ),
        network_processor_idle=_gauge("kafka_network_socketserver_networkprocessoravgidlepercent"),
        isr_shrinks_per_s=_rate("kafka_server_replicamanager_isrshrinkspersec"),
        isr_expands_per_s=_rate("kafka_server_replicamanager_isrexpandspersec"),
    ),
    # bitnami/charts kafka templates/metrics/jmx-configmap.yaml: the attribute in every name, ``_total_``
    # after the type for kafka.server, no percentiles (so no produce_p99_ms)
    "bitnami": _kafka_table(
        partitions=_gauge(_BITNAMI_SERVER.format("partitioncount")),
        leaders=_gauge(_BITNAMI_SERVER.format("leadercount")),
        nwBytesIn=_rate("kafka_server_brokertopicmetrics_total_bytesinpersec_count"),
        nwBytesOut=_rate("kafka_server_brokertopicmetrics_total_bytesoutpersec_count"),
        urp=_gauge(_BITNAMI_SERVER.format("underreplicatedpartitions")),
        under_min_isr=_gauge(_BITNAMI_SERVER.format("underminisrpartitioncount")),
        at_min_isr=_gauge(_BITNAMI_SERVER.format("atminisrpartitioncount")),
        offline_replicas=_gauge(_BITNAMI_SERVER.format("offlinereplicacount")),
        active_controller=_gauge("kafka_controller_kafkacontroller_activecontrollercount_value"),
        offline_partitions=_gauge("kafka_controller_kafkacontroller_offlinepartitionscount_value"),
        preferred_imbalance=_gauge("kafka_controller_kafkacontroller_preferredreplicaimbalancecount_value"),
        request_handler_idle=_gauge(
            "kafka_server_kafkarequesthandlerpool_total_requesthandleravgidlepercent_oneminuterate"
        ),
        network_processor_idle=_gauge("kafka_network_socketserver_networkprocessoravgidlepercent_value"),
        produce_p99_ms=None,
        # no rule matches a kafka.log bean without a topic: the offline log dir count is not exported
        offline_log_dirs=None,
        isr_shrinks_per_s=_rate("kafka_server_replicamanager_total_isrshrinkspersec_count"),
        isr_expands_per_s=_rate("kafka_server_replicamanager_total_isrexpandspersec_count"),
    ),
}
"""Dialect -> its name table (node_exporter's metrics alike in all)."""

DIALECT_SIGNATURES: tuple[tuple[Dialect, frozenset[str]], ...] = (
    (
        "bitnami",
        frozenset(
            {
                _BITNAMI_SERVER.format("underreplicatedpartitions"),
                _BITNAMI_SERVER.format("partitioncount"),
                "kafka_controller_kafkacontroller_activecontrollercount_value",
            }
        ),
    ),
    (
        "confluent",
        frozenset(
            {
                "kafka_server_brokertopicmetrics_bytesinpersec",
                "kafka_server_replicamanager_isrshrinkspersec",
                "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_total",
            }
        ),
    ),
    ("strimzi", frozenset({"kafka_network_socketserver_networkprocessoravgidle_percent"})),
    (
        "jmx-exporter-example",
        frozenset(
            {
                "kafka_server_brokertopicmetrics_bytesin_total",
                "kafka_network_socketserver_networkprocessoravgidlepercent",
                "kafka_server_replicamanager_underreplicatedpartitions",
            }
        ),
    ),
)
"""Names only one dialect serves (or, for jmx_exporter's example, serves when none of the others' are
there), tried in this order: Confluent's rules also give ``..._underreplicatedpartitions`` and
Strimzi's ``..._bytesin_total``, so the example comes last."""


def detect_dialect(names: Iterable[str]) -> Dialect | None:
    """The dialect whose signature names a broker serves (sample names as exposed), None if no Kafka
    naming is recognised (e.g. an endpoint with node_exporter's metrics only)."""
    served = frozenset(names)
    for dialect, signature in DIALECT_SIGNATURES:
        if served & signature:
            return dialect
    return None


def resolve_dialect(setting: DialectSetting) -> Dialect | None:
    """``auto``: None (detect); ``reference`` -> the example's names, which the reference cluster serves."""
    if setting == "auto":
        return None
    if setting == "reference":
        return "jmx-exporter-example"
    return setting
