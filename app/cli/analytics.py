"""``kafka-health analytics``: run the PySpark streaming job until SIGINT/SIGTERM.

Before the banner and before Spark starts, what can be checked is: the settings (a bad flag, variable or
store URL, a spool directory that does not exist without ``--create-spool``, an SQLite store's directory
that does not exist without ``--create-store-dir``: exit 2), the store (opened
and migrated: exit 1 when it cannot be), a Kafka source's bootstrap servers (one of them must answer
within 10 s) and its topic (it must exist): exit 1. A query that fails later is one line too; its Spark
plan and traceback go to the debug log (``KAFKA_HEALTH_LOG_LEVEL=DEBUG``).

Several clusters (``--cluster NAME=ZK[,TEMPLATE]``, repeatable, or ``[clusters.NAME]``: the deployment's
one config): the job evaluates each cluster's samples on their own (windows, load, alerts keyed by its
name) and drops, with a warning once per name, the samples of any cluster not configured.

Exit codes: 0 stopped, 1 the job failed or a dependency (the store, Kafka) is unreachable, 2 bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from typing import Any, TextIO

from analytics.config import AnalyticsSettings
from analytics.pipeline import BatchOutcome
from analytics.store import Store, StoreError
from app.cli.common import (
    ExitCode,
    add_cluster_argument,
    duration,
    first_line,
    positive_duration,
    require_spool,
    settings_or_error,
    settings_tree_with_flags,
    stop_signals,
    unreachable,
)
from app.settings import Settings
from app.storage import MIGRATIONS
from collectors.transport import missing_topic, parse_transport

log = logging.getLogger(__name__)

HELP = "run the PySpark streaming job: samples -> load model -> alert rules -> store"
DESCRIPTION = (
    "Exit codes: 0 stopped, 1 the job failed or the store or Kafka is unreachable, 2 bad input "
    "(including a spool directory that does not exist, without --create-spool, and an SQLite store's "
    "directory that does not exist, without --create-store-dir)."
)
KAFKA_REACH_TIMEOUT_S = 10.0
"""How long the bootstrap servers of a Kafka source get to accept a TCP connection before start-up fails."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        help="Spark master: local[N], or spark://HOST:7077 for a cluster (default: spark-submit's "
        "--master, else local[2])",
    )
    parser.add_argument(
        "--source",
        metavar="spool:DIR|kafka:BOOTSTRAP/TOPIC",
        help="where the samples are (the collectors' sink)",
    )
    parser.add_argument(
        "--create-spool",
        action="store_true",
        default=None,
        help="create the spool directory if it does not exist (default: a missing one is an error)",
    )
    parser.add_argument(
        "--trigger", type=positive_duration, metavar="DURATION", help="micro-batch interval (2s)"
    )
    parser.add_argument(
        "--window", type=positive_duration, metavar="DURATION", help="event-time window (30s)"
    )
    parser.add_argument("--watermark", type=duration, metavar="DURATION", help="allowed lateness (10s)")
    parser.add_argument("--checkpoint", metavar="DIR", help="Spark checkpoint directory")
    parser.add_argument(
        "--store-url", metavar="URL", help="sqlite:///FILE (default) or postgresql+psycopg://..."
    )
    parser.add_argument(
        "--create-store-dir",
        action="store_true",
        default=None,
        help="create the SQLite store's directory if it does not exist (default: a missing one is an error)",
    )
    parser.add_argument("--rated-deviation", type=float, metavar="R", help="r of the load model (0.10)")
    add_cluster_argument(
        parser,
        text="a cluster of the deployment (repeat for several, as given to collect; or [clusters.NAME] "
        "in the config file): only these clusters' samples are evaluated, others are dropped with a "
        "warning",
    )


def settings_from_args(args: argparse.Namespace) -> tuple[AnalyticsSettings, tuple[str, ...]]:
    """Flags over ``KAFKA_HEALTH_*`` over defaults, validated as the whole tree (errors name
    ``analytics.<field>``), and the spool directory there unless it is to be created; with the names of
    the clusters configured (``--cluster``, ``[clusters.NAME]``; none for a single-cluster deployment).
    Raises ValueError / ValidationError with a message."""
    tree = settings_tree_with_flags(args)
    base = tree["analytics"]
    overrides: dict[str, Any] = {}
    for flag, key in (
        ("master", "master"),
        ("source", "source"),
        ("create_spool", "create_spool"),
        ("trigger", "trigger_s"),
        ("window", "window_s"),
        ("watermark", "watermark_s"),
        ("checkpoint", "checkpoint"),
        ("store_url", "store_url"),
        ("create_store_dir", "create_store_dir"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            overrides[key] = value
    if args.rated_deviation is not None:
        overrides["rules"] = base["rules"] | {"rated_deviation": args.rated_deviation}
    whole = Settings.model_validate(tree | {"analytics": base | overrides})
    settings = whole.analytics
    require_spool(settings.source, settings.create_spool)
    settings.require_store_directory()
    return settings, tuple(sorted(whole.clusters))


def check_dependencies(settings: AnalyticsSettings) -> str | None:
    """Why the job cannot start (the store cannot be opened, no bootstrap server of a Kafka source
    answers), in one line; None when it can. Before Spark starts, so that the answer takes seconds."""
    try:
        Store.open(settings.store_url, migrations=MIGRATIONS).close()
    except StoreError as exc:
        log.debug("the store cannot be opened", exc_info=True)
        return first_line(exc)
    spec = parse_transport(settings.source)
    if spec.kind == "kafka":
        assert spec.bootstrap_servers is not None
        why = unreachable(spec.bootstrap_servers.split(","), KAFKA_REACH_TIMEOUT_S)
        if why is not None:
            return f"no Kafka broker reachable at {spec.bootstrap_servers} ({why})"
        assert spec.topic is not None
        return missing_topic(spec.bootstrap_servers, spec.topic, KAFKA_REACH_TIMEOUT_S)
    return None


def format_batch(batch_id: int, outcome: BatchOutcome) -> str:
    stamp = time.strftime("%H:%M:%S")
    if not outcome.committed:
        return f"{stamp} batch {batch_id}: committed before (replay), skipped"
    line = f"{stamp} batch {batch_id}: {outcome.windows} windows"
    if outcome.skipped_windows:
        line += f" ({outcome.skipped_windows} already evaluated)"
    for event in outcome.events:
        line += f"\n  {event.kind} {event.fingerprint} [{event.severity}] {event.summary}"
    for problem in outcome.problems:
        line += f"\n  skipped: {problem}"
    return line


def run(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parsed = settings_or_error(lambda: settings_from_args(args), err)
    if parsed is None:
        return ExitCode.BAD_INPUT
    settings, clusters = parsed
    why = check_dependencies(settings)
    if why is not None:
        err.write(f"error: {why}\n")
        return ExitCode.FAILED
    from analytics.spark.job import running_job

    def report(batch_id: int, outcome: BatchOutcome) -> None:
        out.write(format_batch(batch_id, outcome) + "\n")
        out.flush()

    master = settings.master or "spark-submit's master (else local[2])"
    out.write(
        f"analytics: {settings.source} -> {settings.store_url} on {master}, "
        f"window {settings.window_s:g}s, watermark {settings.watermark_s:g}s, "
        f"trigger {settings.trigger_s:g}s" + (f", clusters {', '.join(clusters)}" if clusters else "") + "\n"
    )
    out.flush()
    try:
        with running_job(settings, on_batch=report, migrations=MIGRATIONS, clusters=clusters) as query:
            if stop is None:
                with stop_signals() as signalled:
                    _wait(query, signalled)
            else:
                _wait(query, stop)
    except StoreError as exc:
        log.debug("the store failed", exc_info=True)
        err.write(f"error: {first_line(exc)}\n")
        return ExitCode.FAILED
    except Exception as exc:
        # A failed streaming query's message carries its whole plan (hundreds of lines): the first line
        # says what failed; the rest is for the debug log.
        log.debug("the analytics job failed", exc_info=True)
        err.write(f"error: the analytics job failed: {first_line(exc)}\n")
        return ExitCode.FAILED
    return ExitCode.OK


def _wait(query: Any, stop: threading.Event) -> None:
    """Until stopped, or until the query dies (its exception is raised)."""
    while not stop.wait(0.5):
        if not query.isActive:
            from analytics.spark.job import query_failure

            failure = query_failure(query)
            if failure is not None:
                raise RuntimeError(failure)
            return
