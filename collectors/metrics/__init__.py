"""The metrics collector: scrape every broker's Prometheus endpoint, map its series through a name table to
the load model's and the health model's metrics (and the request signals: how busy each broker's request
threads are), and turn counters into per-second rates.

Brokers expose jmx_exporter's Kafka names (docs/kafka-reference.md §5) and node_exporter's host metrics. The
Kafka names depend on the exporter's rule file: four common ones are known as dialects (``DIALECT_TABLES``),
set per broker or detected from the names each broker serves (:func:`detect_dialect`). Each broker's URL
comes from a template or an explicit map; all brokers are scraped at once on a thread pool, each with its
own timeout, and whatever goes wrong with one broker is that broker's ``error``.

The modules, each importing only those listed before it (the import contract "metrics-seams"):

* :mod:`~collectors.metrics.errors`: the errors, each recorded as one broker's ``error``;
* :mod:`~collectors.metrics.names`: the name table (PromQL selectors, :class:`MetricRule`), the exporter
  dialects' tables and :func:`detect_dialect`;
* :mod:`~collectors.metrics.endpoints`: each broker's URL (:class:`MetricsEndpoints`);
* :mod:`~collectors.metrics.config`: the settings section (:class:`MetricsSettings`);
* :mod:`~collectors.metrics.fetch`: HTTP behind :class:`MetricsFetcher` (:class:`HttpFetcher`);
* :mod:`~collectors.metrics.parse`: parsing and rates, pure (:func:`parse_exposition`, :func:`evaluate`);
* :mod:`~collectors.metrics.results`: what a scrape gives (:class:`MetricsScrape`);
* :mod:`~collectors.metrics.collector`: the threaded collector (:class:`MetricsCollector`).

The package re-exports their public names, so ``from collectors.metrics import X`` reads any of them.
"""

from __future__ import annotations

from collectors.metrics.collector import MetricsCollector
from collectors.metrics.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_S, MetricsSettings
from collectors.metrics.endpoints import (
    PLACEHOLDERS,
    MetricsEndpoints,
    missing_listener,
    normalise_listener,
    validate_url,
    validate_url_template,
)
from collectors.metrics.errors import (
    EndpointError,
    ExpositionError,
    FetchError,
    FetchTimeoutError,
    MetricsError,
)
from collectors.metrics.fetch import ACCEPT, KEEPALIVE_S, HttpFetcher, MetricsFetcher
from collectors.metrics.names import (
    BROKER_SIGNALS,
    CAPACITY_METRICS,
    DEFAULT_NAME_TABLE,
    DIALECT_SIGNATURES,
    DIALECT_TABLES,
    DIALECTS,
    FILESYSTEM_AVAIL,
    FILESYSTEM_SIZE,
    HEALTH_METRICS,
    LABELLED_SERIES,
    LOG_SIZE,
    LOG_SIZE_NAMES,
    Dialect,
    DialectSetting,
    Exposition,
    LabelMatcher,
    LabelSet,
    MetricRule,
    SeriesSelector,
    detect_dialect,
    parse_selector,
    resolve_dialect,
)
from collectors.metrics.parse import (
    MAX_PROBLEMS,
    CounterState,
    evaluate,
    parse_exposition,
    rates,
    read_exposition,
    selectors_of,
)
from collectors.metrics.results import (
    BrokerScrape,
    Filesystem,
    MetricsScrape,
    RawScrape,
    read_filesystems,
    read_log_sizes,
)

__all__ = [
    "ACCEPT",
    "BROKER_SIGNALS",
    "CAPACITY_METRICS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_NAME_TABLE",
    "DEFAULT_TIMEOUT_S",
    "DIALECTS",
    "DIALECT_SIGNATURES",
    "DIALECT_TABLES",
    "FILESYSTEM_AVAIL",
    "FILESYSTEM_SIZE",
    "HEALTH_METRICS",
    "KEEPALIVE_S",
    "LABELLED_SERIES",
    "LOG_SIZE",
    "LOG_SIZE_NAMES",
    "MAX_PROBLEMS",
    "PLACEHOLDERS",
    "BrokerScrape",
    "CounterState",
    "Dialect",
    "DialectSetting",
    "EndpointError",
    "Exposition",
    "ExpositionError",
    "FetchError",
    "FetchTimeoutError",
    "Filesystem",
    "HttpFetcher",
    "LabelMatcher",
    "LabelSet",
    "MetricRule",
    "MetricsCollector",
    "MetricsEndpoints",
    "MetricsError",
    "MetricsFetcher",
    "MetricsScrape",
    "MetricsSettings",
    "RawScrape",
    "SeriesSelector",
    "detect_dialect",
    "evaluate",
    "missing_listener",
    "normalise_listener",
    "parse_exposition",
    "parse_selector",
    "rates",
    "read_exposition",
    "read_filesystems",
    "read_log_sizes",
    "resolve_dialect",
    "selectors_of",
    "validate_url",
    "validate_url_template",
]
