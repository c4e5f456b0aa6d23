"""``kafka-health safe-to-stop``: is it safe to stop broker N now? The step a rolling-restart script runs
before each broker (docs/runbooks/rolling-restart.md).

Without ``--wait`` it reads the cluster once (a full scan, like ``describe``) and answers. With ``--wait
SECONDS`` it keeps a live snapshot (the ZooKeeper collector's watches, not a scan per poll), re-judges it at
every change until the broker is safe to stop or the time runs out, printing what it waits for whenever that
changes (:func:`app.maintenance.watch.wait`, the loop the rolling-restart conductor reuses), then the
final answer. The answer is :func:`collectors.safe_to_stop.safe_to_stop`'s, the same as
``GET /api/v1/brokers/{id}/safe-to-stop``'s.

Exit codes: 0 safe to stop, 3 not safe (also when ``--wait`` ran out, or a SIGINT/SIGTERM ended the wait:
a script must never take an interrupted wait for a yes), 1 the cluster could not be read or its view
cannot be trusted, 2 bad input (flags, settings, a broker id nobody knows).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any, TextIO

from app.cli.common import (
    ExitCode,
    add_zk_config_argument,
    duration,
    positive_duration,
    settings_or_error,
    settings_tree_with_flags,
    stop_signals,
)
from app.maintenance.watch import wait
from app.settings import NO_ZOOKEEPER, Settings
from collectors.health import no_kafka_cluster
from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.zkdata import parse_connect_string
from collectors.safe_to_stop import SafeToStop, UnknownBrokerError, answer_json, safe_to_stop
from collectors.zookeeper.collector import ZooKeeperCollector, ZooKeeperCollectorError, scan

HELP = "is it safe to stop broker N now (no partition offline or under min ISR)? --wait until it is"
DESCRIPTION = (
    "Exit codes: 0 safe to stop, 3 not safe (or --wait ran out), 1 cannot read the cluster or its view "
    "is stale, 2 bad input (including a broker id nobody knows)."
)


def broker_id(text: str) -> int:
    """A Kafka broker id: an integer ≥ 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a broker id (an integer >= 0)")
    return int(text)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/chroot]",
        help="the cluster's ZooKeeper (or KAFKA_HEALTH_ZOOKEEPER__CONNECT)",
    )
    add_zk_config_argument(parser)
    parser.add_argument("--broker", type=broker_id, required=True, metavar="N", help="the broker to stop")
    parser.add_argument(
        "--wait",
        type=duration,
        metavar="SECONDS",
        help="keep watching until the broker is safe to stop, at most this long (e.g. 300, 5m)",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument(
        "--timeout",
        type=positive_duration,
        default=30.0,
        metavar="SECONDS",
        help="seconds to read the cluster (default 30)",
    )
    parser.add_argument(
        "--default-min-insync-replicas",
        "--default-min-isr",
        type=positive_int,
        metavar="N",
        help="the brokers' static min.insync.replicas, for topics that set none and no dynamic broker "
        "default (default: KAFKA_HEALTH_SERVICE__VIEW__DEFAULT_MIN_INSYNC_REPLICAS, else Kafka's 1, as the "
        "service)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Flags over ``KAFKA_HEALTH_*`` over defaults; raises ValueError / ValidationError with a message."""
    tree = settings_tree_with_flags(args)
    if args.default_min_insync_replicas is not None:
        tree["service"]["view"]["default_min_insync_replicas"] = args.default_min_insync_replicas
    settings = Settings.model_validate(tree)
    if settings.zookeeper.connect is None:
        raise ValueError(NO_ZOOKEEPER)
    parse_connect_string(settings.zookeeper.connect)
    return settings


# --- output ----------------------------------------------------------------------------------------------


def verdict(answer: SafeToStop) -> str:
    if not answer.trusted:
        return f"broker {answer.broker}: CANNOT TELL whether it is safe to stop"
    if answer.safe:
        return f"broker {answer.broker}: safe to stop"
    return f"broker {answer.broker}: NOT safe to stop"


def write_text(answer: SafeToStop, out: TextIO, waited_s: float | None) -> None:
    out.write(verdict(answer) + "\n")
    for reason in answer.reasons:
        out.write(f"  - {reason}\n")
    for note in answer.notes:
        out.write(f"  note: {note}\n")
    waited = "" if waited_s is None else f", waited {waited_s:.1f} s"
    out.write(f"  (snapshot version {answer.snapshot_version}{waited})\n")


def write_answer(answer: SafeToStop, fmt: str, out: TextIO, waited_s: float | None = None) -> None:
    if fmt == "json":
        body: dict[str, Any] = answer_json(answer)
        if waited_s is not None:
            body["waited_s"] = round(waited_s, 3)
        json.dump(body, out, indent=2)
        out.write("\n")
    else:
        write_text(answer, out, waited_s)
    out.flush()


def exit_code(answer: SafeToStop) -> int:
    if not answer.trusted:
        return ExitCode.FAILED
    return ExitCode.OK if answer.safe else ExitCode.UNHEALTHY


# --- the command -----------------------------------------------------------------------------------------


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
    default = settings.service.view.default_min_insync_replicas

    def judge(snapshot: ClusterSnapshot) -> SafeToStop:
        return safe_to_stop(snapshot, args.broker, default_min_insync_replicas=default)

    if args.wait is None:
        try:
            snapshot = scan(
                zk.connect, timeout=args.timeout, connections=zk.connections, security=zk.security()
            )
        except Exception as exc:
            err.write(f"error: cannot read the cluster at {zk.connect}: {exc}\n")
            return ExitCode.FAILED
        missing = no_kafka_cluster(snapshot)
        if missing is not None:
            err.write(f"error: {zk.connect}: {missing}\n")
            return ExitCode.FAILED
        try:
            answer = judge(snapshot)
        except UnknownBrokerError as exc:
            err.write(f"error: {exc}\n")
            return ExitCode.BAD_INPUT
        write_answer(answer, args.format, out)
        return exit_code(answer)

    changed = threading.Event()
    collector = ZooKeeperCollector(
        zk.connect,
        connections=zk.connections,
        session_timeout_s=zk.session_timeout_s,
        on_change=lambda _snapshot: changed.set(),
        security=zk.security(),
    )
    try:
        collector.start(timeout=args.timeout)
    except ZooKeeperCollectorError as exc:
        err.write(f"error: cannot read the cluster at {zk.connect}: {exc}\n")
        return ExitCode.FAILED
    missing = no_kafka_cluster(collector.snapshot)
    if missing is not None:
        collector.stop()
        err.write(f"error: {zk.connect}: {missing}\n")
        return ExitCode.FAILED
    progress = err if args.format == "json" else out
    try:
        if stop is not None:
            result = wait(collector, judge, changed, stop, args.wait, progress)
        else:
            with stop_signals() as signalled:
                result = wait(collector, judge, changed, signalled, args.wait, progress)
    except UnknownBrokerError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.BAD_INPUT
    finally:
        collector.stop()
    answer, waited_s = result
    write_answer(answer, args.format, out, waited_s)
    return exit_code(answer)
