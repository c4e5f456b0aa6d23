"""``kafka-health collect``: run the collectors and write samples for the analytics job until stopped.

Bad input (flags, ``KAFKA_HEALTH_*``, a spool directory that does not exist without ``--create-spool``) is
one line and exit 2 before anything starts; a ZooKeeper or a Kafka sink that does not answer is one line and
exit 1 (a Kafka sink's bootstrap servers must answer within 10 s, and its topic must exist: the
collector does not create it).

Exit codes: 0 stopped by SIGINT/SIGTERM (or ``--once`` wrote its round), 1 the cluster or the transport
could not be reached, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any, TextIO

from app.cli.common import (
    ExitCode,
    add_zk_config_argument,
    first_line,
    metrics_overrides,
    positive_duration,
    settings_or_error,
    stop_signals,
    unreachable,
)
from app.settings import NO_ZOOKEEPER, Settings, load_settings
from collectors.kafka.zkdata import parse_connect_string
from collectors.metrics import MetricsCollector
from collectors.sampler import Round, Sampler
from collectors.samples import SampleNumbering, new_collector_id
from collectors.transport import check_spool_directory, missing_topic, open_sink, parse_transport
from collectors.zookeeper.collector import ZooKeeperCollector, ZooKeeperCollectorError

HELP = "run the collectors and write samples (spool directory or Kafka topic) for the analytics job"
DESCRIPTION = (
    "Exit codes: 0 stopped (or --once done), 1 cannot reach the cluster or the sink, 2 bad input "
    "(including a spool directory that does not exist, without --create-spool)."
)
KAFKA_REACH_TIMEOUT_S = 10.0
"""How long a Kafka sink's bootstrap servers get to accept a TCP connection before start-up fails."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/chroot]",
        help="the cluster's ZooKeeper (or KAFKA_HEALTH_ZOOKEEPER__CONNECT)",
    )
    add_zk_config_argument(parser)
    parser.add_argument(
        "--metrics-url-template", metavar="T", help="brokers' metrics, e.g. http://{host}:7071/metrics"
    )
    parser.add_argument(
        "--metrics-listener",
        metavar="NAME",
        help="the brokers' listener whose host and port fill {host}/{port} "
        "(or KAFKA_HEALTH_METRICS__LISTENER; default: PLAINTEXT if a broker has it, else its first endpoint)",
    )
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
    parser.add_argument("--once", action="store_true", help="write one round and exit")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Flags over ``KAFKA_HEALTH_*`` over defaults; raises ValueError / ValidationError with a message."""
    base = load_settings()
    overrides: dict[str, Any] = {}
    zk_flags = {
        name: value
        for name, value in (("connect", args.zookeeper), ("client_config", args.zk_config))
        if value is not None
    }
    if zk_flags:
        overrides["zookeeper"] = type(base.zookeeper).model_validate(base.zookeeper.model_dump() | zk_flags)
    current = None if base.metrics is None else base.metrics.model_dump()
    overrides |= metrics_overrides(current, args.metrics_url_template, args.metrics_listener)
    sampler: dict[str, Any] = {}
    if args.sink is not None:
        sampler["sink"] = args.sink
    if args.interval is not None:
        sampler["interval_s"] = args.interval
    if args.create_spool is not None:
        sampler["create_spool"] = args.create_spool
    if sampler:
        overrides["sampler"] = base.sampler.model_dump() | sampler
    settings = Settings.model_validate(base.model_dump() | {k: _dump(v) for k, v in overrides.items()})
    if settings.zookeeper.connect is None:
        raise ValueError(NO_ZOOKEEPER)
    parse_connect_string(settings.zookeeper.connect)
    spec = parse_transport(settings.sampler.sink)
    if spec.kind == "spool" and not settings.sampler.create_spool:
        assert spec.directory is not None
        try:
            check_spool_directory(spec.directory)
        except ValueError as exc:
            raise ValueError(f"{exc} (give --create-spool to create it)") from None
    return settings


def _dump(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def format_round(result: Round, sink: str) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(result.started_at))
    line = (
        f"{stamp} {result.samples} samples ({result.brokers} brokers) -> {sink} in {result.duration_s:.2f}s"
    )
    if result.scrape_failures:
        failed = ", ".join(f"{b}: {why}" for b, why in sorted(result.scrape_failures.items()))
        line += f"; scrape failed for {failed}"
    if result.error:
        line += f"; NOT WRITTEN ({result.error}), {result.backlog} batches kept"
    return line


def _print(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


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
    zk = settings.zookeeper
    assert zk.connect is not None
    spec = parse_transport(settings.sampler.sink)
    if spec.kind == "kafka":
        assert spec.bootstrap_servers is not None
        why = unreachable(spec.bootstrap_servers.split(","), KAFKA_REACH_TIMEOUT_S)
        if why is not None:
            err.write(f"error: cannot open the sink {spec}: no Kafka broker reachable ({why})\n")
            return ExitCode.FAILED
        assert spec.topic is not None
        why = missing_topic(spec.bootstrap_servers, spec.topic, KAFKA_REACH_TIMEOUT_S)
        if why is not None:
            err.write(f"error: cannot open the sink {spec}: {why}\n")
            return ExitCode.FAILED
    try:
        sink = open_sink(spec, settings.sampler.spool_retention_s, create_spool=settings.sampler.create_spool)
    except Exception as exc:  # OSError, TransportError; kafka-python raises its own (NoBrokersAvailable)
        err.write(f"error: cannot open the sink {spec}: {first_line(exc)}\n")
        return ExitCode.FAILED
    collector = ZooKeeperCollector(
        zk.connect, connections=zk.connections, session_timeout_s=zk.session_timeout_s, security=zk.security()
    )
    metrics = MetricsCollector(settings.metrics) if settings.metrics is not None else None
    try:
        try:
            collector.start(timeout=zk.start_timeout_s)
        except ZooKeeperCollectorError as exc:
            err.write(f"error: cannot read the cluster at {zk.connect}: {exc}\n")
            return ExitCode.FAILED
        numbering = SampleNumbering(new_collector_id(settings.sampler.collector_name))
        sampler = Sampler(
            collector,
            sink,
            numbering,
            metrics=metrics,
            settings=settings.sampler,
            on_round=lambda r: _print(out, format_round(r, str(spec))),
        )
        if args.once:
            result = sampler.sample_once()
            return ExitCode.OK if result.error is None else ExitCode.FAILED
        out.write(
            f"collector {numbering.collector_id}: {zk.connect} every {settings.sampler.interval_s:g}s\n"
        )
        if stop is not None:
            sampler.run(stop)
        else:
            with stop_signals() as signalled:
                sampler.run(signalled)
        return ExitCode.OK
    finally:
        if metrics is not None:
            metrics.close()
        collector.stop()
        sink.close()
