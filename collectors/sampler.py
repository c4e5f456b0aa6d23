"""The sampler: every ``interval_s`` seconds, the cluster's health and each broker's load as samples, written
to the transport the analytics job reads.

One round: take the ZooKeeper collector's current snapshot (kept fresh by its watches, never rescanned
here), scrape every registered broker's metrics, assess the health model, and write one ``broker`` sample
per registered broker plus one ``cluster`` sample, all stamped with the round's start time.

Rounds run at a fixed rate (round *k* starts at ``start + k × interval_s``); a round that overruns skips
the slots it missed rather than bunching up. Nothing is lost on a transport failure: the batch is kept and
written again, in order, before the next one (the analytics job drops a sample it has already seen by
``(collector_id, sequence)``, so a batch that was in fact partly published does no harm). The backlog is
bounded (``max_backlog`` batches); beyond it the oldest batch is dropped and counted, because the newest
state matters most to an on-call engineer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

from collectors.health import (
    DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
    assess,
)
from collectors.kafka.model import ClusterSnapshot
from collectors.metrics import MetricsCollector, MetricsScrape
from collectors.samples import Sample, SampleNumbering, broker_samples, cluster_sample
from collectors.transport import SampleSink, TransportError

log = logging.getLogger(__name__)


class SamplerSettings(BaseModel):
    """The sampler's section of the settings tree."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    sink: str = "spool:./kafka-health-data/spool"
    """``spool:DIR`` (default) or ``kafka:BOOTSTRAP/TOPIC``."""
    create_spool: bool = False
    """Create the spool directory when it does not exist. Off: a missing directory is a start-up error (a
    typo would otherwise send the samples where no analytics job reads them)."""
    spool_retention_s: Annotated[float, Field(gt=0)] = 3600.0
    collector_name: str | None = None
    """Prefix of the collector id (default: the host name); a random suffix is added at every start."""
    max_backlog: Annotated[int, Field(ge=1)] = 360
    """Batches kept while the transport fails (360 × 10 s: an hour)."""
    default_min_insync_replicas: Annotated[int | None, Field(ge=1)] = None
    """The brokers' static ``min.insync.replicas`` (ZooKeeper holds only dynamic overrides); unset: 1."""
    leader_imbalance_per_broker_percentage: Annotated[int, Field(ge=0, le=100)] = (
        DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE
    )


class SnapshotSource(Protocol):
    """What the sampler needs of the ZooKeeper collector."""

    @property
    def snapshot(self) -> ClusterSnapshot: ...

    @property
    def in_sync(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Round:
    """What one round did."""

    started_at: float
    samples: int
    brokers: int
    scrape_failures: dict[int, str]
    written: int
    """Batches written this round (backlog included)."""
    backlog: int
    error: str | None
    duration_s: float


class Sampler:
    """Samples one cluster; :meth:`sample_once` for one round, :meth:`run` until stopped.

    A deployment that watches several clusters runs one sampler per cluster, each on its own thread with
    its own collector, numbering and sink: nothing is shared between them, so one cluster's slow round
    (a ZooKeeper that is down, a scrape that times out) never delays another's."""

    def __init__(
        self,
        zookeeper: SnapshotSource,
        sink: SampleSink,
        numbering: SampleNumbering,
        *,
        metrics: MetricsCollector | None = None,
        settings: SamplerSettings | None = None,
        clock: Callable[[], float] = time.time,
        on_round: Callable[[Round], None] | None = None,
        cluster: str | None = None,
    ) -> None:
        """``cluster``: the watched cluster's name, which its samples carry in ``cluster``; None (one
        cluster per deployment): the cluster id from ``/cluster/id``."""
        self.settings = settings or SamplerSettings()
        self._zookeeper = zookeeper
        self._sink = sink
        self._metrics = metrics
        self._numbering = numbering
        self._clock = clock
        self._on_round = on_round
        self.cluster = cluster
        self._previous: ClusterSnapshot | None = None
        self._backlog: deque[list[Sample]] = deque()
        self.rounds = 0
        self.dropped_batches = 0

    @property
    def collector_id(self) -> str:
        return self._numbering.collector_id

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    def sample_once(self) -> Round:
        """One round: snapshot, scrape, assess, write (with whatever is left from failed rounds first)."""
        started = self._clock()
        mono = time.monotonic()
        snapshot = self._zookeeper.snapshot
        # The watches keep a quiet snapshot current: while in sync it is good as of now.
        last_good_at = started if self._zookeeper.in_sync else snapshot.last_good_at
        scrape: MetricsScrape | None = None
        if self._metrics is not None:
            scrape = self._metrics.scrape(snapshot.brokers)
        gauges = None if scrape is None else scrape.values("urp")
        report = assess(
            snapshot,
            previous=self._previous,
            urp_gauges=gauges,
            default_min_insync_replicas=self.settings.default_min_insync_replicas,
            leader_imbalance_per_broker_percentage=self.settings.leader_imbalance_per_broker_percentage,
        )
        self._previous = snapshot
        scraped = {} if scrape is None else {b: s.values for b, s in scrape.scrapes.items() if s.ok}
        batch = broker_samples(snapshot, scraped, self._numbering, timestamp=started, cluster=self.cluster)
        batch.append(
            cluster_sample(
                snapshot,
                report,
                self._numbering,
                started,
                last_good_at=last_good_at,
                scrape=scrape,
                cluster=self.cluster,
            )
        )
        self._backlog.append(batch)
        written, error = self._drain()
        self._trim()
        self.rounds += 1
        result = Round(
            started_at=started,
            samples=len(batch),
            brokers=len(snapshot.brokers),
            scrape_failures={} if scrape is None else scrape.failures,
            written=written,
            backlog=len(self._backlog),
            error=error,
            duration_s=time.monotonic() - mono,
        )
        if self._on_round is not None:
            self._on_round(result)
        return result

    def run(self, stop: threading.Event) -> None:
        """Rounds at a fixed rate until ``stop`` is set; an exception in a round is logged, not fatal."""
        interval = self.settings.interval_s
        start = time.monotonic()
        slot = 0
        while not stop.is_set():
            try:
                self.sample_once()
            except Exception:
                log.exception("sampling round failed; trying again at the next interval")
            elapsed = time.monotonic() - start
            slot = max(slot + 1, int(elapsed // interval) + 1)
            stop.wait(max(0.0, start + slot * interval - time.monotonic()))

    def _trim(self) -> None:
        while len(self._backlog) > self.settings.max_backlog:
            lost = self._backlog.popleft()
            self.dropped_batches += 1
            log.error(
                "sample backlog full (%d batches): dropped the oldest batch (%d samples, sequence %d-%d)",
                self.settings.max_backlog,
                len(lost),
                lost[0].sequence,
                lost[-1].sequence,
            )

    def _drain(self) -> tuple[int, str | None]:
        written = 0
        while self._backlog:
            try:
                self._sink.write(self._backlog[0])
            except TransportError as exc:
                log.warning("%s; %d batches kept for the next round", exc, len(self._backlog))
                return written, str(exc)
            self._backlog.popleft()
            written += 1
        return written, None
