"""The metrics collector: scrape every broker's Prometheus endpoint, map its series through a name table to
the load model's and the health model's metrics (and the request signals: how busy each broker's request
threads are), and turn counters into per-second rates.

Brokers expose jmx_exporter's Kafka names (docs/kafka-reference.md §5) and node_exporter's host metrics. The
Kafka names depend on the exporter's rule file: four common ones are known as dialects (``DIALECT_TABLES``),
set per broker or detected from the names each broker serves (:func:`detect_dialect`). Each
broker's URL comes from a template or an explicit map; all brokers are scraped at once on a thread pool,
each with its own timeout, and whatever goes wrong with one broker (no URL, refused, timed out, HTTP
error, text that does not parse) is that broker's ``error``, never an exception out of :meth:`scrape`.

HTTP sits behind :class:`MetricsFetcher` so that unit tests hand in a fake; the parsing, the name table and
the rate arithmetic are pure functions (:func:`parse_exposition`, :func:`evaluate`).

Decisions:

* ``nwBytesIn``/``nwBytesOut`` are Kafka's ``BytesInPerSec``/``BytesOutPerSec`` for all topics (the
  series without a ``topic`` label): client traffic only since KIP-153 (0.11), replication being
  ``Replication*BytesIn/OutPerSec``, which is left out. With a replication factor equal to the number of
  brokers every broker receives every byte as leader or follower, so counting replication would hide
  exactly the leadership skew the load model is for. A deployment that wants NIC-level traffic points
  them at ``node_network_{receive,transmit}_bytes_total`` in the name table.
* Rates are taken as Prometheus takes them: per series, (value now − value before) / (time between the two
  scrapes' start), a value that went down counting as a restart from 0, and summed or maxed afterwards. A
  series needs two scrapes, so the first scrape of a broker (or a series new since the last one) gives no
  rate: the metric is absent, never 0. A failed scrape keeps the previous counters for the next one.
* A metric whose series are all missing, or not finite, is absent from ``values``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
import ssl
import string
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from collectors.kafka.model import BrokerRegistration

log = logging.getLogger(__name__)

# --- errors ------------------------------------------------------------------------------------------


class MetricsError(Exception):
    """Base of the metrics collector's errors; each is recorded as one broker's ``error``."""


class EndpointError(MetricsError):
    """A broker has no metrics URL (not in the map and no template, or a placeholder it cannot fill)."""


class FetchError(MetricsError):
    """The endpoint could not be read: refused, unreachable, an HTTP status other than 200, too large."""


class FetchTimeoutError(FetchError):
    """The endpoint did not answer in full within the timeout."""


class ExpositionError(MetricsError):
    """The response is not Prometheus text format."""


# --- the name table ----------------------------------------------------------------------------------

LabelSet = tuple[tuple[str, str], ...]
"""A series' labels, sorted by name."""

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


# --- exporter dialects -------------------------------------------------------------------------------

Dialect = Literal["jmx-exporter-example", "strimzi", "confluent", "bitnami"]
"""A widely used jmx_exporter rule file for Kafka brokers, each naming the same MBeans its own way
(docs/collectors.md "Exporter dialects" cites the file and commit each table was read from)."""
DIALECTS: tuple[Dialect, ...] = ("jmx-exporter-example", "strimzi", "confluent", "bitnami")
DialectSetting = Literal["auto", "reference", "jmx-exporter-example", "strimzi", "confluent", "bitnami"]
"""What a user may set: ``auto`` (detected per broker from what it serves), ``reference`` (what the reference
cluster serves by default: the same as ``jmx-exporter-example``) or a dialect."""

_HOST_RULES = ("cpuUsed", "ioRead", "ioWrite", "iowait", "ioutil", "fd", "memUsed")
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


# --- endpoints ---------------------------------------------------------------------------------------

PLACEHOLDERS = ("host", "port", "id", "rack")
_PROBE = {"host": "broker.example", "port": "9092", "id": "0", "rack": "rack-a"}


def validate_url(url: str, what: str = "metrics URL") -> str:
    """An absolute http(s) URL with a host and, if given, a valid port."""
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port
    except ValueError as exc:
        raise ValueError(f"{what} {url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{what} {url!r} must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"{what} {url!r} has no host")
    return url


def validate_url_template(template: str) -> str:
    """Only ``{host}``, ``{port}``, ``{id}`` and ``{rack}`` (no format specs), and an http(s) URL."""
    allowed = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"metrics URL template {template!r}: {exc} (use {{{{ and }}}} for braces)") from None
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            raise ValueError(
                f"unknown placeholder {{{name}}} in metrics URL template {template!r}: use {allowed}"
            )
        if spec or conversion:
            raise ValueError(f"placeholder {{{name}}} in metrics URL template {template!r} takes no format")
    if "[{host}]" in template:
        raise ValueError(
            f"metrics URL template {template!r}: write {{host}} without brackets; IPv6 hosts get them"
        )
    validate_url(template.format(**_PROBE), f"metrics URL template {template!r} gives")
    return template


def normalise_listener(name: str) -> str:
    """A listener name as Kafka stores it (``ListenerName.normalised``: upper case), or ValueError."""
    text = name.strip()
    if not text or any(c.isspace() for c in text) or ":" in text or "/" in text or "," in text:
        raise ValueError(
            f"listener name {name!r} is not a Kafka listener name (e.g. PLAINTEXT, INTERNAL: the part "
            "before :// in advertised.listeners)"
        )
    return text.upper()


def missing_listener(brokers: Mapping[int, BrokerRegistration], listener: str | None) -> str | None:
    """Why ``listener`` is bad input: no registered broker has it (a typo, or the wrong cluster); else None.
    A listener only some brokers have is not an error: those brokers get no metrics URL and say why."""
    if listener is None or not brokers:
        return None
    if any(b.endpoint(listener) is not None for b in brokers.values()):
        return None
    seen = sorted({e.listener for b in brokers.values() for e in b.endpoints})
    return f"no registered broker has that listener (their listeners: {', '.join(seen) or 'none'})"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class MetricsEndpoints:
    """Where each broker's metrics are: the explicit map first, else the template filled from the
    broker's registration (host and port of ``listener``, else of the listener named PLAINTEXT, Kafka's
    default inter-broker listener, else of the first one: :meth:`BrokerRegistration.endpoint`; IPv6 hosts
    bracketed; the rack percent-encoded). A broker without ``listener`` gets no URL (its scrape says why)."""

    def __init__(
        self, template: str | None = None, urls: Mapping[int, str] | None = None, listener: str | None = None
    ) -> None:
        self.template = None if template is None else validate_url_template(template)
        self.urls = {b: validate_url(u, f"metrics URL of broker {b}") for b, u in (urls or {}).items()}
        self.listener = None if listener is None else normalise_listener(listener)

    def url_for(self, broker: BrokerRegistration) -> str:
        if broker.id in self.urls:
            return self.urls[broker.id]
        if self.template is None:
            raise EndpointError(f"no metrics URL for broker {broker.id}: not in the map and no template")
        host, port = self._address(broker)
        if "{rack}" in self.template and broker.rack is None:
            raise EndpointError(f"broker {broker.id} has no rack for {{rack}} in {self.template!r}")
        rack = urllib.parse.quote(broker.rack or "", safe="")
        return self.template.format(host=_url_host(host), port=port, id=broker.id, rack=rack)

    def _address(self, broker: BrokerRegistration) -> tuple[str, int]:
        endpoint = broker.endpoint(self.listener)
        if endpoint is None and self.listener is not None:
            listeners = ", ".join(e.listener for e in broker.endpoints) or "none"
            raise EndpointError(f"broker {broker.id} has no listener {self.listener!r} (it has {listeners})")
        if endpoint is None:
            raise EndpointError(f"broker {broker.id} registered no endpoint")
        return endpoint.host, endpoint.port


# --- settings ----------------------------------------------------------------------------------------

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class MetricsSettings(BaseModel):
    """The metrics collector's section of the settings tree, validated when built (no I/O)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url_template: str | None = None
    """E.g. ``http://{host}:7071/metrics``; placeholders ``{host}``, ``{port}``, ``{id}``, ``{rack}``."""
    urls: dict[int, str] = Field(default_factory=dict)
    """Broker id -> URL; wins over the template."""
    listener: str | None = None
    """The listener whose host and port fill ``{host}`` and ``{port}`` (``KAFKA_HEALTH_METRICS__LISTENER``,
    ``--metrics-listener``); default: the listener named PLAINTEXT (Kafka's default inter-broker listener),
    else each broker's first endpoint."""
    timeout_s: Annotated[float, Field(gt=0, le=600)] = DEFAULT_TIMEOUT_S
    max_workers: Annotated[int, Field(ge=1, le=1024)] = 32
    max_response_bytes: Annotated[int, Field(ge=1024)] = DEFAULT_MAX_RESPONSE_BYTES
    names: dict[str, MetricRule | None] = Field(default_factory=dict)
    """Changes to every dialect's table (:data:`DIALECT_TABLES`): a rule replaces or adds a metric, None
    removes one."""
    dialect: DialectSetting = "auto"
    """The exporter rule file the brokers' names come from; ``auto`` detects it per broker at each scrape
    from the names it serves (:func:`detect_dialect`)."""
    dialects: dict[int, DialectSetting] = Field(default_factory=dict)
    """Broker id -> its dialect, for a fleet whose brokers differ; wins over ``dialect``."""

    @field_validator("url_template")
    @classmethod
    def _check_template(cls, value: str | None) -> str | None:
        return None if value is None else validate_url_template(value)

    @field_validator("listener")
    @classmethod
    def _check_listener(cls, value: str | None) -> str | None:
        return None if value is None else normalise_listener(value)

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, value: dict[int, str]) -> dict[int, str]:
        for broker_id, url in value.items():
            validate_url(url, f"metrics URL of broker {broker_id}")
        return value

    @model_validator(mode="after")
    def _check_some_endpoint(self) -> MetricsSettings:
        if self.url_template is None and not self.urls:
            raise ValueError(
                "the metrics collector needs url_template (e.g. http://{host}:7071/metrics) "
                "or urls (broker id -> URL)"
            )
        return self

    @property
    def name_table(self) -> dict[str, MetricRule]:
        """jmx_exporter's example table with ``names`` applied."""
        return self.table_for("jmx-exporter-example")

    def table_for(self, dialect: Dialect) -> dict[str, MetricRule]:
        """The dialect's table with ``names`` applied."""
        table = {**DIALECT_TABLES[dialect], **self.names}
        return {name: rule for name, rule in table.items() if rule is not None}

    def dialect_of(self, broker_id: int) -> Dialect | None:
        """The dialect set for the broker, None when it is to be detected."""
        return resolve_dialect(self.dialects.get(broker_id, self.dialect))


# --- fetching ----------------------------------------------------------------------------------------


class MetricsFetcher(Protocol):
    """Reads one endpoint: the body as text, or :class:`FetchError` (:class:`FetchTimeoutError` when it takes
    longer than ``timeout`` seconds)."""

    def fetch(self, url: str, timeout: float) -> str: ...


ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
"""The classic text format: an exporter that can also speak OpenMetrics keeps to the format we parse."""


KEEPALIVE_S = 25.0
"""How long an idle connection to a broker is kept for the next scrape: longer than the sampler's default
10 s interval, shorter than the 30 s after which the JDK's built-in HTTP server (jmx_exporter's) closes an
idle connection, so that the scraper lets go first and never sends on a connection the server is closing."""
_MAX_REDIRECTS = 10
"""As many redirects as urllib, the scraper's HTTP client before httpx, followed."""


@dataclass(slots=True)
class _Broker:
    """One broker endpoint's client (one keep-alive connection), when it was last used, how many fetches
    are using it now."""

    client: httpx.Client
    used: float
    fetching: int = 0


class HttpFetcher:
    """:class:`MetricsFetcher` over httpx, keeping one long-lived client per broker endpoint (scheme, host
    and port) so that each broker's connection is reused from one scrape to the next (HTTP keep-alive, as
    Prometheus scrapes).

    One client per endpoint rather than one for all: httpx's connection pool re-examines every connection
    it holds on each request, which made one shared client cost 22 ms of CPU per scrape at 200 brokers
    against 0.8 ms this way (docs/benchmarks.md). A client unused for :data:`KEEPALIVE_S` (a broker that
    went away) is closed.

    As a scraper talks to the brokers directly, nothing is taken from the environment (``trust_env=False``:
    no proxies, no ``.netrc``) and certificates are verified against the system's trust store (what
    :func:`ssl.create_default_context` loads, as before). ``timeout`` bounds connecting, each read and the
    whole body; a body over ``max_bytes`` is refused. Bodies are asked for uncompressed, as they always
    were. Clients are made on first use (the constructor does no I/O) and closed by :meth:`close`.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, user_agent: str = "kafka-health") -> None:
        self.max_bytes = max_bytes
        self.user_agent = user_agent
        self._brokers: dict[tuple[str, str, int | None], _Broker] = {}
        self._tls: ssl.SSLContext | None = None
        self._swept = time.monotonic()
        self._lock = threading.Lock()

    def fetch(self, url: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        try:
            with self._checkout(url) as client, client.stream("GET", url, timeout=timeout) as response:
                if not response.is_success:
                    raise FetchError(f"HTTP {response.status_code} {response.reason_phrase}")
                body = self._read(response, deadline, timeout)
                charset = response.charset_encoding or "utf-8"
        except httpx.TimeoutException:
            raise FetchTimeoutError(f"no answer within {timeout:g} s") from None
        except httpx.ConnectError as exc:
            raise FetchError(f"cannot connect: {_os_reason(exc)}") from None
        except httpx.HTTPError as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}") from None
        try:
            return body.decode(charset, errors="replace")
        except LookupError:
            return body.decode("utf-8", errors="replace")

    def close(self) -> None:
        """Close every kept connection; a later :meth:`fetch` connects afresh."""
        with self._lock:
            brokers, self._brokers = list(self._brokers.values()), {}
        for broker in brokers:
            broker.client.close()

    @contextlib.contextmanager
    def _checkout(self, url: str) -> Iterator[httpx.Client]:
        """The endpoint's client, made on first use, counted as in use until the fetch is done."""
        parts = urllib.parse.urlsplit(url)
        endpoint = (parts.scheme, parts.hostname or "", parts.port)
        now = time.monotonic()
        with self._lock:
            idle = self._idle(now)
            broker = self._brokers.get(endpoint)
            if broker is None:
                broker = self._brokers[endpoint] = _Broker(self._new_client(), now)
            broker.used = now
            broker.fetching += 1
        for client in idle:
            client.close()
        try:
            yield broker.client
        finally:
            with self._lock:
                broker.fetching -= 1
                broker.used = time.monotonic()

    def _idle(self, now: float) -> list[httpx.Client]:
        """Take out the clients no fetch has used for KEEPALIVE_S (their connection has expired anyway: a
        broker that went away); looked for at most once per KEEPALIVE_S. Called under the lock."""
        if now - self._swept < KEEPALIVE_S:
            return []
        self._swept = now
        idle = [e for e, b in self._brokers.items() if not b.fetching and now - b.used > KEEPALIVE_S]
        return [self._brokers.pop(e).client for e in idle]

    def _new_client(self) -> httpx.Client:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return httpx.Client(
            headers={"Accept": ACCEPT, "Accept-Encoding": "identity", "User-Agent": self.user_agent},
            verify=self._tls,
            trust_env=False,
            follow_redirects=True,
            max_redirects=_MAX_REDIRECTS,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )

    def _read(self, response: httpx.Response, deadline: float, timeout: float) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchError(f"response larger than {self.max_bytes} bytes")
            if time.monotonic() > deadline:
                raise FetchTimeoutError(f"body not complete within {timeout:g} s")
            chunks.append(chunk)
        return b"".join(chunks)


def _os_reason(exc: BaseException) -> str:
    """The operating system's words for a failed connection ("Connection refused", "Name or service not
    known"): httpx wraps the socket's error, which is found down the chain of causes."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return str(exc)


# --- parsing and evaluation (pure) -------------------------------------------------------------------

Exposition = Mapping[str, Mapping[LabelSet, float]]
"""Sample name as exposed -> its series' values (finite only)."""


def parse_exposition(text: str, wanted: Iterable[str] | None = None) -> dict[str, dict[LabelSet, float]]:
    """Parse Prometheus text with prometheus_client's parser, keeping the samples named in ``wanted``
    (all when None). Raises :class:`ExpositionError` for text that is not the format, or has no sample.

    The parser renames a counter's samples to ``<family>_total`` when the ``# TYPE`` line lacks the
    suffix, as jmx_exporter 0.x writes its ``_count`` counters (``..._count`` becomes ``..._count_total``),
    so each such sample is also found under its family's name. Trailing commas in label sets
    (``{topic="orders",}``, jmx_exporter 0.x) parse as they are. A series given twice keeps its first value.
    """
    keep = None if wanted is None else frozenset(wanted)
    exact: dict[str, dict[LabelSet, float]] = {}
    aliased: dict[str, dict[LabelSet, float]] = {}
    samples = 0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples += 1
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                labels: LabelSet = tuple(sorted(sample.labels.items()))
                if keep is None or sample.name in keep:
                    exact.setdefault(sample.name, {}).setdefault(labels, value)
                alias = family.name
                if (
                    family.type == "counter"
                    and sample.name == f"{alias}_total"
                    and (keep is None or alias in keep)
                ):
                    aliased.setdefault(alias, {}).setdefault(labels, value)
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad input
        raise ExpositionError(f"not Prometheus text format: {type(exc).__name__}: {exc}") from None
    if samples == 0:
        raise ExpositionError("no samples in the response")
    return {**aliased, **exact}


MAX_PROBLEMS = 20
"""Malformed lines reported one by one per scrape; beyond, a count."""


def read_exposition(
    text: str, wanted: Iterable[str] | None = None
) -> tuple[dict[str, dict[LabelSet, float]], tuple[str, ...]]:
    """:func:`parse_exposition`, except that malformed lines among good ones are reported and skipped:
    (the samples of the good lines, one sentence per skipped line). prometheus_client's parser gives up
    on the whole text at the first bad line, and one exporter rule that writes a bad label (or a bad value)
    would then cost the broker every metric; so a text the parser refuses is read again line by line, each
    sample with its family's ``# TYPE`` line. Text with no good sample at all (an HTML error page) is still
    :class:`ExpositionError`."""
    try:
        return parse_exposition(text, wanted), ()
    except ExpositionError as whole:
        kept, skipped, good = _line_by_line(text, None if wanted is None else frozenset(wanted))
        if not good:
            raise whole from None
        return kept, skipped


def _line_by_line(
    text: str, wanted: frozenset[str] | None
) -> tuple[dict[str, dict[LabelSet, float]], tuple[str, ...], int]:
    """(the wanted samples, the skipped lines, how many sample lines parsed)."""
    kept: dict[str, dict[LabelSet, float]] = {}
    skipped: list[str] = []
    good = 0
    type_line: tuple[str, str] | None = None  # (family, its "# TYPE" line)
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            parts = stripped.split()
            if len(parts) >= 3 and parts[1] == "TYPE":
                type_line = (parts[2], stripped)
            continue
        chunks = [f"{line}\n"]
        if type_line is not None and stripped.startswith(type_line[0]):
            chunks.insert(0, f"{type_line[1]}\n{line}\n")
        for chunk in chunks:
            try:
                parsed = parse_exposition(chunk, wanted)
            except ExpositionError as exc:
                reason = str(exc)
                continue
            good += 1
            for name, series in parsed.items():
                for labels, value in series.items():
                    kept.setdefault(name, {}).setdefault(labels, value)
            break
        else:
            shown = stripped if len(stripped) <= 120 else stripped[:117] + "..."
            skipped.append(
                f"line {number} skipped ({reason.removeprefix('not Prometheus text format: ')}): {shown}"
            )
    if len(skipped) > MAX_PROBLEMS:
        skipped[MAX_PROBLEMS:] = [f"and {len(skipped) - MAX_PROBLEMS} more malformed lines skipped"]
    return kept, tuple(skipped), good


def selectors_of(table: Mapping[str, MetricRule]) -> frozenset[str]:
    """The sample names the table reads."""
    texts = [t for rule in table.values() for t in (*rule.selectors, rule.minus) if t is not None]
    return frozenset(parse_selector(t).name for t in texts)


@dataclass(frozen=True, slots=True)
class CounterState:
    """The counter series one scrape saw, kept for the next scrape's rates."""

    at: float
    """When the scrape started (epoch seconds): Prometheus's sample timestamp."""
    series: Mapping[str, Mapping[LabelSet, float]] = field(default_factory=dict)
    """Selector text -> the series it selected."""


def evaluate(
    table: Mapping[str, MetricRule], exposition: Exposition, at: float, previous: CounterState | None = None
) -> tuple[dict[str, float], CounterState]:
    """The table's metrics from one exposition taken at ``at``, rates against ``previous``; returns them
    with the counters to keep for next time."""
    counters: dict[str, Mapping[LabelSet, float]] = {}
    values: dict[str, float] = {}
    for name, rule in table.items():
        value = _term(rule, _chosen(rule, exposition), exposition, at, previous, counters)
        if value is not None and rule.minus is not None:
            minus = _term(rule, rule.minus, exposition, at, previous, counters)
            value = None if minus is None else value - minus
        if value is not None and math.isfinite(value):
            values[name] = value
    return values, CounterState(at, counters)


def _chosen(rule: MetricRule, exposition: Exposition) -> str:
    """The rule's first selector that selects a series (``series`` when none does)."""
    if rule.fallbacks:
        for selector in rule.selectors:
            if parse_selector(selector).select(exposition):
                return selector
    return rule.series


def _term(
    rule: MetricRule,
    text: str,
    exposition: Exposition,
    at: float,
    previous: CounterState | None,
    counters: dict[str, Mapping[LabelSet, float]],
) -> float | None:
    selected = parse_selector(text).select(exposition)
    if rule.rate:
        counters[text] = selected
        before = None if previous is None else previous.series.get(text)
        selected = rates(selected, before, at - previous.at if previous is not None else 0.0)
    if not selected:
        return None
    return sum(selected.values()) if rule.aggregate == "sum" else max(selected.values())


def rates(
    now: Mapping[LabelSet, float], before: Mapping[LabelSet, float] | None, elapsed_s: float
) -> dict[LabelSet, float]:
    """Per-second increase of each series seen both times; a value that went down restarted from 0."""
    if before is None or elapsed_s <= 0:
        return {}
    result = {}
    for labels, value in now.items():
        if labels in before:
            increase = value - before[labels] if value >= before[labels] else value
            result[labels] = increase / elapsed_s
    return result


# --- results -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerScrape:
    broker_id: int
    url: str | None
    scraped_at: float
    """Epoch seconds when the request started (the collector's clock)."""
    duration_s: float
    values: Mapping[str, float]
    """Metric name (of the name table) -> value; a metric the broker could not give is absent."""
    error: str | None = None
    dialect: Dialect | None = None
    """The exporter dialect the values were read in (set or detected); None when the scrape failed."""
    problems: tuple[str, ...] = ()
    """What was wrong with what the broker served without failing the scrape (e.g. no dialect
    recognised: the example's names were tried)."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class MetricsScrape:
    scrapes: Mapping[int, BrokerScrape]
    started_at: float
    duration_s: float

    @property
    def failures(self) -> dict[int, str]:
        """Broker id -> why its scrape failed."""
        return {b: s.error for b, s in self.scrapes.items() if s.error is not None}

    def values(self, name: str) -> dict[int, float]:
        """Broker id -> the metric, for the brokers that gave it."""
        return {b: s.values[name] for b, s in self.scrapes.items() if name in s.values}

    def total(self, name: str) -> float | None:
        """The metric summed over the brokers that gave it (e.g. the cluster's URP); None if none did."""
        given = self.values(name)
        return sum(given.values()) if given else None


@dataclass(frozen=True, slots=True)
class RawScrape:
    """One broker's endpoint read once, its samples as exposed (:meth:`MetricsCollector.fetch_series`)."""

    broker_id: int
    url: str | None
    scraped_at: float
    """Epoch seconds when the request started (the collector's clock)."""
    duration_s: float
    exposition: Exposition | None
    """Sample name -> series; None when the read failed."""
    error: str | None = None


# --- the collector -----------------------------------------------------------------------------------

_ABANDON_GRACE_S = 0.25
"""Beyond its timeout a request gets this long to report its own timeout before the collector gives up."""
_POLL_S = 0.05


@dataclass(slots=True)
class _Job:
    broker_id: int
    url: str
    wanted: frozenset[str] | None = None
    started_at: float | None = None
    started_mono: float | None = None
    future: Future[_Outcome] | None = None


@dataclass(frozen=True, slots=True)
class _Outcome:
    duration_s: float
    exposition: Exposition | None = None
    error: str | None = None
    problems: tuple[str, ...] = ()


class MetricsCollector:
    """Scrapes the brokers it is given, concurrently; keeps each broker's counters between scrapes.

    Lifecycle as the other collectors: the constructor validates and does no I/O; :meth:`scrape` may be
    called repeatedly (one at a time; calls are serialised); :meth:`close` releases the thread pool.

    ``settings`` is the collector's section of the settings tree; ``options`` (fields of
    :class:`MetricsSettings`, e.g. ``url_template=...``) build or amend it, validated alike.
    """

    def __init__(
        self,
        settings: MetricsSettings | None = None,
        *,
        fetcher: MetricsFetcher | None = None,
        clock: Callable[[], float] = time.time,
        **options: Any,
    ) -> None:
        if settings is None:
            settings = MetricsSettings(**options)
        elif options:
            settings = MetricsSettings.model_validate(settings.model_dump() | options)
        self.settings = settings
        self.endpoints = MetricsEndpoints(settings.url_template, settings.urls, settings.listener)
        self.table = settings.name_table
        self.tables = {dialect: settings.table_for(dialect) for dialect in DIALECTS}
        self._wanted = frozenset().union(
            *(selectors_of(t) for t in self.tables.values()), *(names for _, names in DIALECT_SIGNATURES)
        )
        self._own_fetcher: HttpFetcher | None = None
        if fetcher is None:
            fetcher = self._own_fetcher = HttpFetcher(settings.max_response_bytes)
        self._fetcher = fetcher
        self._clock = clock
        self._previous: dict[int, tuple[str, CounterState]] = {}
        self._lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def __enter__(self) -> MetricsCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the pool and close the connections of the HTTP fetcher the collector made (a fetcher handed
        in is its owner's); requests still running are left to end on their own and ignored."""
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if self._own_fetcher is not None:
            self._own_fetcher.close()

    def scrape(self, brokers: Mapping[int, BrokerRegistration]) -> MetricsScrape:
        """Scrape every broker in ``brokers`` (id -> registration) once."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the metrics collector is closed")
            started_at, started_mono = self._clock(), time.monotonic()
            results: dict[int, BrokerScrape] = {}
            jobs: list[_Job] = []
            for broker_id, registration in sorted(brokers.items()):
                try:
                    jobs.append(_Job(broker_id, self.endpoints.url_for(registration)))
                except EndpointError as exc:
                    results[broker_id] = BrokerScrape(broker_id, None, started_at, 0.0, {}, str(exc))
            self._run(jobs)
            for job in jobs:
                results[job.broker_id] = self._record(job, started_at)
            self._previous = {b: p for b, p in self._previous.items() if b in brokers}
            for broker_id, error in sorted((b, s.error) for b, s in results.items() if s.error):
                log.debug("metrics of broker %d not scraped: %s", broker_id, error)
            return MetricsScrape(dict(sorted(results.items())), started_at, time.monotonic() - started_mono)

    def now(self) -> float:
        """The collector's clock (epoch seconds), which stamps every scrape."""
        return self._clock()

    def fetch_series(
        self, brokers: Mapping[int, BrokerRegistration], wanted: Iterable[str]
    ) -> list[RawScrape]:
        """Fetch ``brokers``' endpoints once and return the samples named in ``wanted`` as they are (no name
        table, no rates, nothing kept for the next :meth:`scrape`), one :class:`RawScrape` per broker in id
        order. For a targeted read of a few brokers' labelled series (e.g. the log sizes of the partitions
        a reassignment moves); may run while :meth:`scrape` does, on the same endpoints, timeouts and
        workers. A broker's failure is its ``error``, as in :meth:`scrape`."""
        names = frozenset(wanted)
        started_at = self._clock()
        results: dict[int, RawScrape] = {}
        jobs: list[_Job] = []
        for broker_id, registration in sorted(brokers.items()):
            try:
                jobs.append(_Job(broker_id, self.endpoints.url_for(registration), names))
            except EndpointError as exc:
                results[broker_id] = RawScrape(broker_id, None, started_at, 0.0, None, str(exc))
        self._run(jobs)
        for job in jobs:
            outcome = self._outcome(job)
            at = job.started_at if job.started_at is not None else started_at
            results[job.broker_id] = RawScrape(
                job.broker_id, job.url, at, outcome.duration_s, outcome.exposition, outcome.error
            )
        return [results[b] for b in sorted(results)]

    # the workers only fetch and parse; every state change happens on the caller's thread

    def _fetch(self, job: _Job) -> _Outcome:
        job.started_at, job.started_mono = self._clock(), time.monotonic()
        try:
            text = self._fetcher.fetch(job.url, self.settings.timeout_s)
            exposition, skipped = read_exposition(text, self._wanted if job.wanted is None else job.wanted)
        except Exception as exc:  # any failure is this broker's, never the collector's
            return _Outcome(time.monotonic() - job.started_mono, error=_describe(exc))
        return _Outcome(time.monotonic() - job.started_mono, exposition=exposition, problems=skipped)

    def _run(self, jobs: list[_Job]) -> None:
        """Run the jobs on the pool and wait until each is done or overdue: ``timeout`` (plus a grace)
        after it started, or, for a job still queued behind busy workers, a deadline for the whole run."""
        if not jobs:
            return
        with self._pool_lock:
            if self._closed:
                raise RuntimeError("the metrics collector is closed")
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.settings.max_workers, thread_name_prefix="metrics-scrape"
                )
            pool = self._pool
        allowed = self.settings.timeout_s + _ABANDON_GRACE_S
        waves = math.ceil(len(jobs) / self.settings.max_workers)
        run_deadline = time.monotonic() + waves * allowed + _ABANDON_GRACE_S
        for job in jobs:
            job.future = pool.submit(self._fetch, job)
        pending = {job.future: job for job in jobs if job.future is not None}
        while pending:
            now = time.monotonic()
            overdue = [
                f
                for f, job in pending.items()
                if now >= run_deadline or (job.started_mono is not None and now - job.started_mono >= allowed)
            ]
            for future in overdue:
                future.cancel()
                del pending[future]
            if pending:
                wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
                pending = {f: job for f, job in pending.items() if not f.done()}

    def _record(self, job: _Job, scrape_started_at: float) -> BrokerScrape:
        started_at = job.started_at if job.started_at is not None else scrape_started_at
        outcome = self._outcome(job)
        if outcome.exposition is None:
            return BrokerScrape(job.broker_id, job.url, started_at, outcome.duration_s, {}, outcome.error)
        dialect, problems = self._dialect(job.broker_id, outcome.exposition)
        url, previous = self._previous.get(job.broker_id, (job.url, None))
        values, counters = evaluate(
            self.tables[dialect], outcome.exposition, started_at, previous if url == job.url else None
        )
        self._previous[job.broker_id] = (job.url, counters)
        return BrokerScrape(
            job.broker_id,
            job.url,
            started_at,
            outcome.duration_s,
            values,
            None,
            dialect,
            outcome.problems + problems,
        )

    def _dialect(self, broker_id: int, exposition: Exposition) -> tuple[Dialect, tuple[str, ...]]:
        """The broker's set dialect, else the one its names show, else the example's with a problem."""
        chosen = self.settings.dialect_of(broker_id)
        if chosen is not None:
            return chosen, ()
        detected = detect_dialect(exposition)
        if detected is not None:
            return detected, ()
        return "jmx-exporter-example", (
            "no exporter dialect recognised in the names served (none of "
            + ", ".join(DIALECTS)
            + "): read with jmx_exporter's example names",
        )

    def _outcome(self, job: _Job) -> _Outcome:
        future = job.future
        if future is not None and future.done() and not future.cancelled():
            return future.result()
        if job.started_mono is None:
            return _Outcome(0.0, error=f"not started: all {self.settings.max_workers} scrape workers busy")
        elapsed = time.monotonic() - job.started_mono
        return _Outcome(elapsed, error=f"timed out after {self.settings.timeout_s:g} s")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, MetricsError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
