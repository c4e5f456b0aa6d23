"""The threaded collector: scrapes every broker at once on a thread pool, each with its own timeout, and
keeps each broker's counters between scrapes for the next rates. Whatever goes wrong with one broker (no
URL, refused, timed out, HTTP error, text that does not parse) is that broker's ``error``, never an
exception out of :meth:`MetricsCollector.scrape`. A failed scrape keeps the previous counters for the next
one."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from collectors.kafka.model import BrokerRegistration
from collectors.metrics.config import MetricsSettings
from collectors.metrics.endpoints import MetricsEndpoints
from collectors.metrics.errors import EndpointError, MetricsError
from collectors.metrics.fetch import HttpFetcher, MetricsFetcher
from collectors.metrics.names import (
    DIALECT_SIGNATURES,
    DIALECTS,
    LABELLED_SERIES,
    LOG_SIZE_NAMES,
    Dialect,
    Exposition,
    detect_dialect,
)
from collectors.metrics.parse import CounterState, evaluate, read_exposition, selectors_of
from collectors.metrics.results import (
    BrokerScrape,
    MetricsScrape,
    RawScrape,
    read_filesystems,
    read_log_sizes,
)

log = logging.getLogger("collectors.metrics")
"""The package's logger: log lines carry the package's name, whichever module writes them."""

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
            *(selectors_of(t) for t in self.tables.values()),
            *(names for _, names in DIALECT_SIGNATURES),
            LABELLED_SERIES,
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
        filesystems, fs_problems = read_filesystems(outcome.exposition)
        log_sizes, size_problems = read_log_sizes(outcome.exposition, LOG_SIZE_NAMES[dialect])
        return BrokerScrape(
            job.broker_id,
            job.url,
            started_at,
            outcome.duration_s,
            values,
            None,
            dialect,
            outcome.problems + problems + fs_problems + size_problems,
            filesystems,
            log_sizes,
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
