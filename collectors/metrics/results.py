"""What a scrape gives: each broker's values (:class:`BrokerScrape`), all brokers' (:class:`MetricsScrape`),
and one broker's samples as exposed (:class:`RawScrape`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from collectors.metrics.names import Dialect, Exposition


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
