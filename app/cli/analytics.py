"""``kafka-health analytics``: run the PySpark streaming job until SIGINT/SIGTERM.

Exit codes: 0 stopped, 1 the job failed (Spark, the store), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any, TextIO

from analytics.config import AnalyticsSettings
from analytics.pipeline import BatchOutcome
from analytics.store import StoreError
from app.cli.common import ExitCode, duration, settings_or_error, stop_signals
from app.settings import load_settings
from app.storage import MIGRATIONS

HELP = "run the PySpark streaming job: samples -> load model -> alert rules -> store"
DESCRIPTION = "Exit codes: 0 stopped, 1 the job failed, 2 bad input."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", help="Spark master (default local[2]; spark://HOST:7077 for a cluster)")
    parser.add_argument(
        "--source",
        metavar="spool:DIR|kafka:BOOTSTRAP/TOPIC",
        help="where the samples are (the collectors' sink)",
    )
    parser.add_argument("--trigger", type=duration, metavar="DURATION", help="micro-batch interval (2s)")
    parser.add_argument("--window", type=duration, metavar="DURATION", help="event-time window (30s)")
    parser.add_argument("--watermark", type=duration, metavar="DURATION", help="allowed lateness (10s)")
    parser.add_argument("--checkpoint", metavar="DIR", help="Spark checkpoint directory")
    parser.add_argument(
        "--store-url", metavar="URL", help="sqlite:///FILE (default) or postgresql+psycopg://..."
    )
    parser.add_argument("--rated-deviation", type=float, metavar="R", help="r of the load model (0.10)")


def settings_from_args(args: argparse.Namespace) -> AnalyticsSettings:
    base = load_settings().analytics.model_dump()
    overrides: dict[str, Any] = {}
    for flag, key in (
        ("master", "master"),
        ("source", "source"),
        ("trigger", "trigger_s"),
        ("window", "window_s"),
        ("watermark", "watermark_s"),
        ("checkpoint", "checkpoint"),
        ("store_url", "store_url"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            overrides[key] = value
    if args.rated_deviation is not None:
        overrides["rules"] = base["rules"] | {"rated_deviation": args.rated_deviation}
    return AnalyticsSettings.model_validate(base | overrides)


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
    settings = settings_or_error(lambda: settings_from_args(args), err)
    if settings is None:
        return ExitCode.BAD_INPUT
    from analytics.spark.job import running_job

    def report(batch_id: int, outcome: BatchOutcome) -> None:
        out.write(format_batch(batch_id, outcome) + "\n")
        out.flush()

    out.write(
        f"analytics: {settings.source} -> {settings.store_url} on {settings.master}, "
        f"window {settings.window_s:g}s, watermark {settings.watermark_s:g}s, "
        f"trigger {settings.trigger_s:g}s\n"
    )
    out.flush()
    try:
        with running_job(settings, on_batch=report, migrations=MIGRATIONS) as query:
            if stop is None:
                with stop_signals() as signalled:
                    _wait(query, signalled)
            else:
                _wait(query, stop)
    except StoreError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.FAILED
    except Exception as exc:
        err.write(f"error: the analytics job failed: {exc}\n")
        return ExitCode.FAILED
    return ExitCode.OK


def _wait(query: Any, stop: threading.Event) -> None:
    """Until stopped, or until the query dies (its exception is raised)."""
    while not stop.wait(0.5):
        if not query.isActive:
            failure = query.exception()
            if failure is not None:
                raise RuntimeError(str(failure))
            return
