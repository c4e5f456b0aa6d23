"""The metrics collector's errors: each one is recorded as one broker's ``error``, never raised out of a
scrape."""

from __future__ import annotations


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
