"""``kafka-health collect``: run the collectors and write samples for the analytics job until stopped.

Bad input (flags, ``KAFKA_HEALTH_*``, a spool directory that does not exist without ``--create-spool``) is
one line and exit 2 before anything starts; a ZooKeeper or a Kafka sink that does not answer is one line and
exit 1 (a Kafka sink's bootstrap servers must answer within 10 s, and its topic must exist: the
collector does not create it).

Several clusters (``--cluster NAME=ZK[,TEMPLATE]``, repeatable, or ``[clusters.NAME]``): one ZooKeeper
collector, metrics scraper, sampler and sink per cluster, each sampler on its own thread, so that one
cluster's slow round never delays another's. Their first scans run in parallel; a cluster that cannot be
read then is a ``warning:`` line and is tried again in the background (its sampler starts once its
ZooKeeper answers) while the others run. Exit 1 only when no cluster can be read.

Exit codes: 0 stopped by SIGINT/SIGTERM (or ``--once`` wrote its rounds), 1 no cluster or the transport
could not be reached (or a ``--once`` round could not be written), 2 bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

from app.cli.common import (
    ExitCode,
    add_metrics_arguments,
    add_watched_cluster_arguments,
    first_line,
    positive_duration,
    require_spool,
    settings_or_error,
    settings_tree_with_flags,
    stop_signals,
    unreachable,
)
from app.settings import Settings, WatchedCluster
from collectors.metrics import MetricsCollector
from collectors.sampler import Round, Sampler
from collectors.samples import SampleNumbering, new_collector_id
from collectors.transport import (
    SampleSink,
    TransportSpec,
    missing_topic,
    open_sink,
    parse_transport,
)
from collectors.zookeeper.collector import ZooKeeperCollector, ZooKeeperCollectorError
from collectors.zookeeper.first_scan import first_scans, start_collector

log = logging.getLogger(__name__)

HELP = "run the collectors and write samples (spool directory or Kafka topic) for the analytics job"
DESCRIPTION = (
    "Watches one cluster (--zookeeper) or several (--cluster NAME=ZK, repeated), one sampler each. "
    "Exit codes: 0 stopped (or --once done), 1 cannot reach any cluster or the sink, 2 bad input "
    "(including a spool directory that does not exist, without --create-spool)."
)
KAFKA_REACH_TIMEOUT_S = 10.0
"""How long a Kafka sink's bootstrap servers get to accept a TCP connection before start-up fails."""
RETRY_MIN_S = 1.0
RETRY_MAX_S = 30.0
"""A cluster unreadable at start-up is tried again every sampling interval, within these bounds."""
STOP_GRACE_S = 30.0
"""How long a stop waits for each cluster's thread (a round under way finishes first)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_watched_cluster_arguments(parser)
    add_metrics_arguments(parser)
    parser.add_argument(
        "--sink",
        metavar="spool:DIR|kafka:BOOTSTRAP/TOPIC",
        help="where samples go (default spool:./kafka-health-data/spool)",
    )
    parser.add_argument(
        "--create-spool",
        action="store_true",
        default=None,
        help="create the spool directory if it does not exist (default: a missing one is an error)",
    )
    parser.add_argument(
        "--interval",
        type=positive_duration,
        metavar="SECONDS",
        help="time between rounds: seconds or 500ms, 2s, 1m (default 10)",
    )
    parser.add_argument("--once", action="store_true", help="write one round (of every cluster) and exit")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Flags over ``KAFKA_HEALTH_*`` over defaults; raises ValueError / ValidationError with a message."""
    tree = settings_tree_with_flags(args)
    for flag, key in (("sink", "sink"), ("interval", "interval_s"), ("create_spool", "create_spool")):
        if getattr(args, flag) is not None:
            tree["sampler"][key] = getattr(args, flag)
    settings = Settings.model_validate(tree)
    settings.require_watched()
    require_spool(settings.sampler.sink, settings.sampler.create_spool)
    return settings


def format_round(result: Round, sink: str, cluster: str | None = None) -> str:
    """One round's line; ``cluster`` (a deployment watching several) leads it as ``[NAME]``."""
    stamp = time.strftime("%H:%M:%S", time.localtime(result.started_at))
    prefix = "" if cluster is None else f"[{cluster}] "
    line = (
        f"{prefix}{stamp} {result.samples} samples ({result.brokers} brokers) -> {sink} "
        f"in {result.duration_s:.2f}s"
    )
    if result.scrape_failures:
        failed = ", ".join(f"{b}: {why}" for b, why in sorted(result.scrape_failures.items()))
        line += f"; scrape failed for {failed}"
    if result.error:
        line += f"; NOT WRITTEN ({result.error}), {result.backlog} batches kept"
    return line


class _Lines:
    """A stream several clusters' threads print whole lines to."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


@dataclass(eq=False)
class _Watch:
    """One watched cluster: its sink, scraper, ZooKeeper collector (once its first scan is done) and
    sampler, all its own."""

    cluster: WatchedCluster
    numbering: SampleNumbering
    sink: SampleSink
    metrics: MetricsCollector | None
    collector: ZooKeeperCollector | None = None
    sampler: Sampler | None = None
    why: str | None = None
    """Why its last first-scan attempt failed."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def cannot_read(self) -> str:
        what = f"cannot read the cluster at {self.cluster.connect}: {self.why}"
        return what if self.cluster.name is None else f"cluster {self.cluster.name}: {what}"

    def try_start(self) -> bool:
        """One attempt at the first full scan (:func:`adopt` its outcome)."""
        spec = self.cluster.zookeeper.collector_spec()
        try:
            outcome: ZooKeeperCollector | Exception = start_collector(spec)
        except Exception as exc:
            outcome = exc
        return self.adopt(outcome)

    def adopt(self, outcome: ZooKeeperCollector | Exception) -> bool:
        """A first scan's outcome: on success the collector is kept (unless the command is closing
        meanwhile, then it is stopped again); a failure is :attr:`why` (this cluster only, never the
        others)."""
        if isinstance(outcome, ZooKeeperCollectorError):
            self.why = first_line(outcome)
            return False
        if isinstance(outcome, Exception):  # a bug or an OS error
            log.debug("starting the collector of %s failed", self.cluster.label(), exc_info=outcome)
            self.why = f"{type(outcome).__name__}: {first_line(outcome)}"
            return False
        with self.lock:
            if self.closed:
                outcome.stop()
                return False
            self.collector = outcome
        return True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            collector, self.collector = self.collector, None
        if self.metrics is not None:
            self.metrics.close()
        if collector is not None:
            collector.stop()
        self.sink.close()


def run(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    settings = settings_or_error(lambda: settings_from_args(args), err)
    if settings is None:
        return ExitCode.BAD_INPUT
    spec = parse_transport(settings.sampler.sink)
    why = _sink_unusable(spec)
    if why is not None:
        err.write(f"error: cannot open the sink {spec}: {why}\n")
        return ExitCode.FAILED
    watched = settings.watched()
    several = len(watched) > 1
    lines = _Lines(out)
    base_id = new_collector_id(settings.sampler.collector_name)
    watches: list[_Watch] = []
    try:
        for cluster in watched:
            try:
                sink = open_sink(
                    spec, settings.sampler.spool_retention_s, create_spool=settings.sampler.create_spool
                )
            except Exception as exc:  # OSError, TransportError; kafka-python raises its own
                err.write(f"error: cannot open the sink {spec}: {first_line(exc)}\n")
                return ExitCode.FAILED
            collector_id = base_id if cluster.name is None else f"{base_id}-{cluster.name}"
            metrics = MetricsCollector(cluster.metrics) if cluster.metrics is not None else None
            watches.append(_Watch(cluster, SampleNumbering(collector_id), sink, metrics))
        _first_scans(watches)
        readable = [w for w in watches if w.collector is not None]
        unreadable = [w for w in watches if w.collector is None]
        if not readable:
            if several:
                each = "; ".join(w.cannot_read() for w in watches)
                err.write(f"error: none of the {len(watches)} clusters can be read: {each}\n")
            else:
                err.write(f"error: {watches[0].cannot_read()}\n")
            return ExitCode.FAILED
        then = "no round written for it" if args.once else "trying again in the background"
        for watch in unreadable:
            err.write(f"warning: {watch.cannot_read()}; {then}\n")
        err.flush()
        for watch in readable:
            _make_sampler(watch, settings, spec, lines, several)
        if args.once:
            return _once(readable)
        for watch in readable:
            lines(_banner(watch, settings))
        if stop is not None:
            _run(watches, settings, spec, lines, several, stop)
        else:
            with stop_signals() as signalled:
                _run(watches, settings, spec, lines, several, signalled)
        return ExitCode.OK
    finally:
        for watch in watches:
            watch.close()


def _sink_unusable(spec: TransportSpec) -> str | None:
    """Why a Kafka sink cannot be used (no broker answers, no topic); None for a spool or a usable one."""
    if spec.kind != "kafka":
        return None
    assert spec.bootstrap_servers is not None
    why = unreachable(spec.bootstrap_servers.split(","), KAFKA_REACH_TIMEOUT_S)
    if why is not None:
        return f"no Kafka broker reachable ({why})"
    assert spec.topic is not None
    return missing_topic(spec.bootstrap_servers, spec.topic, KAFKA_REACH_TIMEOUT_S)


def _first_scans(watches: list[_Watch]) -> None:
    """Every cluster's first full scan at once (:func:`~collectors.zookeeper.first_scan.first_scans`), so
    that N clusters take one start timeout, not N."""
    outcomes = first_scans([w.cluster.zookeeper.collector_spec() for w in watches])
    for watch, outcome in zip(watches, outcomes, strict=True):
        watch.adopt(outcome)


def _make_sampler(
    watch: _Watch, settings: Settings, spec: TransportSpec, lines: _Lines, several: bool
) -> None:
    assert watch.collector is not None
    label = watch.cluster.name if several else None
    watch.sampler = Sampler(
        watch.collector,
        watch.sink,
        watch.numbering,
        metrics=watch.metrics,
        settings=settings.sampler,
        on_round=lambda r: lines(format_round(r, str(spec), label)),
        cluster=watch.cluster.name,
    )


def _banner(watch: _Watch, settings: Settings) -> str:
    where = (
        watch.cluster.connect
        if watch.cluster.name is None
        else f"cluster {watch.cluster.name} at {watch.cluster.connect}"
    )
    return f"collector {watch.numbering.collector_id}: {where} every {settings.sampler.interval_s:g}s"


def _once(watches: list[_Watch]) -> int:
    """One round of every readable cluster, at once; exit 1 when a round could not be written."""
    results: dict[int, Round | None] = {}

    def one(index: int, watch: _Watch) -> None:
        assert watch.sampler is not None
        try:
            results[index] = watch.sampler.sample_once()
        except Exception:
            log.exception("the round of %s failed", watch.cluster.label())
            results[index] = None

    threads = [threading.Thread(target=one, args=(i, w), daemon=True) for i, w in enumerate(watches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ok = all(r is not None and r.error is None for r in results.values()) and len(results) == len(watches)
    return ExitCode.OK if ok else ExitCode.FAILED


def _run(
    watches: list[_Watch],
    settings: Settings,
    spec: TransportSpec,
    lines: _Lines,
    several: bool,
    stop: threading.Event,
) -> None:
    """Each cluster's sampler on a thread of its own until ``stop``; a cluster unreadable at start-up is
    tried again on its thread every interval (within 1-30 s) and sampled once its first scan is done."""
    retry_s = min(max(settings.sampler.interval_s, RETRY_MIN_S), RETRY_MAX_S)

    def sample(watch: _Watch) -> None:
        if watch.sampler is None:
            while not stop.wait(retry_s):
                if watch.try_start():
                    break
                log.info("%s", watch.cannot_read())
            if stop.is_set():
                return
            _make_sampler(watch, settings, spec, lines, several)
            lines(_banner(watch, settings) + " (its ZooKeeper answers now)")
        assert watch.sampler is not None
        watch.sampler.run(stop)

    threads = [
        threading.Thread(target=sample, args=(w,), name=f"collect-{w.cluster.label()}", daemon=True)
        for w in watches
    ]
    for thread in threads:
        thread.start()
    while not stop.wait(0.5):
        pass
    # A thread still in a first scan (up to the start timeout) is not waited for: it stops the collector it
    # gets once the scan ends, since the command is closing.
    deadline = time.monotonic() + STOP_GRACE_S
    for thread, watch in zip(threads, watches, strict=True):
        thread.join(timeout=max(0.0, deadline - time.monotonic()) if watch.sampler is not None else 0.5)
