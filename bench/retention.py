"""Benchmark: the store's size per broker per day and the API's load and alert reads, before and after a
retention pass, for a month of a large cluster.

    .venv/bin/python -m bench.retention [--brokers 1000 --days 30 --window-s 30]
                                        [--sample-windows 20 --bulk-brokers 20] [--workdir DIR]

A month of a 1,000-broker cluster at 30 s windows is 86.4 M load rows (about 80 GB): more than two shared
cores write in minutes. So the run has two parts, on one SQLite file:

1. **Sample, at full scale, through the store's own write path**: ``--sample-windows`` windows of
   ``--brokers`` brokers, one ``Store.commit_batch`` each, as the Spark job commits them (rows of the
   load model's 11 metrics): the bytes a broker's window really takes, indexes included.
2. **The month, for fewer brokers, through a direct bulk path**: ``--days`` of ``--bulk-brokers`` brokers
   (the same row shapes, built once per broker and written with ``executemany`` in large transactions),
   with a month of alerts and events; then one retention pass with the default settings at the month's
   end (``RetentionPruner.prune``), and the same reads before and after.

Sizes come from SQLite's ``dbstat`` (bytes of the pages each table and index uses). Rows per broker are
the same at any broker count, so the per-broker-per-day figures hold at 1,000 brokers; the totals at
``--brokers`` are those figures multiplied out, and printed as extrapolated. Reads are timed as the
routes run them (the store's queries and the response model, serialised to JSON), without HTTP.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from analytics.model import AlertEvent, AlertState, BrokerLoad, LoadWindow, Window, fingerprint
from analytics.store import Store
from analytics.store.database import json_dumps
from app.retention.config import DAY, RetentionSettings
from app.retention.pruner import RetentionPruner
from app.service.routes.load import _load_out, _rollup_out
from app.service.schemas.load import LoadOut
from app.storage import open_database
from collectors.samples import LOAD_METRICS

MB = 1e6
END = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the month ends here (and the pass runs then)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=1000, help="the cluster the figures are for")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument(
        "--sample-windows", type=int, default=20, help="windows of --brokers written for real"
    )
    parser.add_argument("--bulk-brokers", type=int, default=20, help="brokers of the month's bulk part")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each timed read")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    args = parser.parse_args(argv)
    if (
        min(args.brokers, args.days, args.sample_windows, args.bulk_brokers, args.repeats) < 1
        or args.window_s <= 0
    ):
        parser.error("counts must be positive, --window-s too")
    return args


def broker_load(rng: random.Random, broker: int, brokers: int) -> BrokerLoad:
    """A broker's window as the load model writes it: 11 metrics' averages, their shares, the loads."""
    metrics = {
        "partitions": float(rng.randint(150, 250)),
        "leaders": float(rng.randint(50, 90)),
        "cpuUsed": rng.uniform(0.05, 0.9),
        "nwBytesIn": rng.uniform(1e6, 9e7),
        "nwBytesOut": rng.uniform(1e6, 2e8),
        "ioRead": rng.uniform(0, 5e7),
        "ioWrite": rng.uniform(1e6, 9e7),
        "iowait": rng.uniform(0, 0.2),
        "ioutil": rng.uniform(0, 0.9),
        "fd": float(rng.randint(2000, 9000)),
        "memUsed": rng.uniform(0.3, 0.95),
    }
    assert set(metrics) == set(LOAD_METRICS)
    shares = {name: rng.uniform(0.5, 1.5) / brokers for name in metrics}
    normalized = sum(shares.values()) / len(shares)
    return BrokerLoad(
        broker=broker,
        metrics=metrics,
        shares=shares,
        weighted_load=normalized * len(shares),
        normalized_load=normalized,
        deviation_rate=(normalized - 1 / brokers) * brokers,
    )


def load_window(rng: random.Random, cluster: str, start: float, brokers: int, window_s: float) -> LoadWindow:
    rows = tuple(broker_load(rng, b, brokers) for b in range(brokers))
    mean = 1 / brokers
    stddev = statistics.pstdev(r.normalized_load for r in rows)
    return LoadWindow(Window(cluster, start, start + window_s), rows, stddev, 0.1 * mean, 0.1)


def table_bytes(path: Path) -> dict[str, int]:
    """Bytes of the pages of each table (its indexes included), from SQLite's ``dbstat``."""
    with sqlite3.connect(path) as conn:
        names = dict(
            conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')")
        )
        sizes: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table = names.get(name, name)
            sizes[table] = sizes.get(table, 0) + int(size)
        return sizes


def used_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * page)


def sample(path: Path, args: argparse.Namespace) -> dict[str, float]:
    """``--sample-windows`` windows of ``--brokers`` brokers through ``Store.commit_batch``."""
    rng = random.Random(1)
    url = f"sqlite:///{path}"
    with open_database(url) as database:
        store = Store(database)
        before = table_bytes(path)
        took = []
        for i in range(args.sample_windows):
            window = load_window(rng, "sample", END + i * args.window_s, args.brokers, args.window_s)
            started = time.perf_counter()
            store.commit_batch("sample", i, load_windows=[window])
            took.append(time.perf_counter() - started)
        after = table_bytes(path)
        # a pass once they are all older than the raw windows' retention (the latest one is kept)
        report = RetentionPruner(database).prune(now=END + 30 * DAY)
    rows = args.sample_windows * args.brokers
    grown = sum(after.get(t, 0) - before.get(t, 0) for t in ("load_windows", "cluster_windows"))
    pruned = report.pruned["load_windows"]
    return {
        "bytes_per_row": grown / rows,
        "commit_s": statistics.median(took),
        "rows": rows,
        "prune_rows_s": pruned / max(report.duration_s, 1e-9),
        "prune_transactions": report.transactions,
    }


def bulk(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A month of ``--bulk-brokers`` through the direct path, with alerts and events."""
    rng = random.Random(2)
    brokers, window_s = args.bulk_brokers, args.window_s
    start = END - args.days * DAY
    windows = int(args.days * DAY // window_s)
    templates = [
        [
            (
                json_dumps(b.metrics),
                json_dumps(b.shares),
                b.weighted_load,
                b.normalized_load,
                b.deviation_rate,
            )
            for b in load_window(rng, "bulk", 0, brokers, window_s).brokers
        ]
        for _ in range(16)
    ]
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    started = time.perf_counter()
    chunk = max(1, 200_000 // brokers)
    for first in range(0, windows, chunk):
        cluster_rows: list[tuple[Any, ...]] = []
        load_rows: list[tuple[Any, ...]] = []
        for i in range(first, min(windows, first + chunk)):
            ws = start + i * window_s
            variant = templates[i % 16]
            jitter = 1 + (i % 97) / 1000
            cluster_rows.append(
                ("bulk", ws, ws + window_s, brokers, 0.01 * jitter, 0.1 / brokers, 0.1, i % 50 == 0, True)
            )
            load_rows.extend(
                ("bulk", ws, ws + window_s, b, m, s, wl * jitter, nl * jitter, dr * jitter)
                for b, (m, s, wl, nl, dr) in enumerate(variant)
            )
        with conn:
            conn.executemany(
                "INSERT INTO cluster_windows (cluster, window_start, window_end, brokers, stddev,"
                " stddev_threshold, rated_deviation, imbalanced, evaluated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                cluster_rows,
            )
            conn.executemany(
                "INSERT INTO load_windows (cluster, window_start, window_end, broker, metrics, shares,"
                " weighted_load, normalized_load, deviation_rate) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                load_rows,
            )
    conn.close()
    wrote = time.perf_counter() - started
    alerts = write_alerts(path, start)
    return {"windows": windows, "rows": windows * brokers, "write_s": wrote, **alerts}


def write_alerts(path: Path, start: float) -> dict[str, int]:
    """A month of load alerts through the store: 20 brokers' rule-8 alerts opening and resolving every few
    hours (an event each way), as a noisy cluster would have."""
    url = f"sqlite:///{path}"
    rng = random.Random(3)
    events = 0
    with open_database(url) as database:
        store = Store(database)
        batch = 10_000
        for broker in range(20):
            fp = fingerprint("bulk", 8, f"broker:{broker}")
            t, sequence = start + rng.uniform(0, 3600), 0
            states, evs = [], []
            while t < END - 7200:
                opened, resolved = t, t + rng.uniform(600, 7200)
                sequence += 2
                evs.append(AlertEvent(fp, sequence - 1, "opened", opened, "warning", "skew", {"r_n": 0.3}))
                evs.append(AlertEvent(fp, sequence, "resolved", resolved, "warning", "skew", {"r_n": 0.05}))
                t = resolved + rng.uniform(3600, 6 * 3600)
            states.append(
                AlertState(
                    fingerprint=fp,
                    cluster="bulk",
                    rule=8,
                    subject=f"broker:{broker}",
                    severity="warning",
                    state="resolved",
                    summary="skew",
                    evidence={"r_n": 0.05},
                    action=None,
                    hits=0,
                    clean=3,
                    first_seen=start,
                    last_seen=t,
                    opened_at=evs[-2].at,
                    resolved_at=evs[-1].at,
                    last_window_end=evs[-1].at,
                    event_sequence=sequence,
                )
            )
            store.commit_batch("alerts", batch, alert_states=states, events=evs)
            batch += 1
            events += len(evs)
    return {"alerts": 20, "events": events}


def timed(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Median seconds of ``repeats`` runs, and the last result."""
    took, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        took.append(time.perf_counter() - started)
    return statistics.median(took), result


def reads(path: Path, repeats: int) -> dict[str, tuple[float, int]]:
    """The load and alert reads of the API, as the routes run them: (median seconds, entries)."""
    with open_database(f"sqlite:///{path}") as database:
        store = Store(database)

        def load(since: float, until: float) -> int:
            history = [_rollup_out(r) for r in store.load_rollups("bulk", since=since, until=until)]
            history += [
                _load_out(w) for w in store.load_history("bulk", since=since, until=until, limit=10_000)
            ]
            latest = store.latest_load("bulk")
            body = LoadOut(latest=None if latest is None else _load_out(latest), history=history)
            json.loads(body.model_dump_json())
            return len(history)

        return {
            "load, the last hour (raw windows)": timed(repeats, lambda: load(END - 3600, END)),
            "load, 6 hours 20 days ago": timed(
                repeats, lambda: load(END - 20 * DAY, END - 20 * DAY + 6 * 3600)
            ),
            "alerts, resolved, first page of 100": timed(
                repeats, lambda: len(store.alerts(state="resolved", limit=100))
            ),
            "alert events, the last 30 days (1000)": timed(
                repeats, lambda: len(store.alert_events(since=END - 30 * DAY, limit=1000))
            ),
            "alert events of one alert": timed(
                repeats, lambda: len(store.alert_events(fingerprint("bulk", 8, "broker:3"), limit=1000))
            ),
        }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kh-retention-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"workdir {workdir}; {args.days} days at {args.window_s:g} s windows", flush=True)

    shape = sample(workdir / "sample.db", args)
    print(
        f"sample: {args.sample_windows} windows x {args.brokers} brokers through Store.commit_batch: "
        f"{shape['bytes_per_row']:.0f} bytes per broker row (tables and indexes), "
        f"{shape['commit_s'] * 1000:.0f} ms per window committed (median); a pass rolled up and deleted "
        f"them at {shape['prune_rows_s']:,.0f} rows/s in {shape['prune_transactions']} transactions",
        flush=True,
    )

    path = workdir / "month.db"
    open_database(f"sqlite:///{path}").close()
    month = bulk(path, args)
    print(
        f"bulk: {month['rows']:,} load rows ({args.bulk_brokers} brokers x {month['windows']:,} windows) in "
        f"{month['write_s']:.0f} s; {month['alerts']} alerts, {month['events']:,} events",
        flush=True,
    )
    before_tables, before_used = table_bytes(path), used_bytes(path)
    raw_rows_bytes = before_tables["load_windows"] + before_tables["cluster_windows"]
    raw_per_broker_day = raw_rows_bytes / args.bulk_brokers / args.days
    before_reads = reads(path, args.repeats)

    settings = RetentionSettings()
    pruner = RetentionPruner(open_database(f"sqlite:///{path}"), settings)
    report = pruner.prune(now=END)
    pruner.database.close()
    after_tables, after_used = table_bytes(path), used_bytes(path)
    after_reads = reads(path, args.repeats)

    kept_days = settings.load_windows / DAY
    rolled_days = args.days - kept_days
    rollup_bytes = after_tables.get("load_rollups", 0) + after_tables.get("cluster_rollups", 0)
    rollup_per_broker_day = rollup_bytes / args.bulk_brokers / max(rolled_days, 1e-9)
    health_per_day = after_tables["cluster_windows"] / args.days  # nulled load columns, per cluster
    # the rows the job writes at --brokers (through commit_batch) are what the store keeps: their size
    # per broker, not the bulk rows', is what the totals at --brokers are made of
    real_per_broker_day = max(raw_per_broker_day, shape["bytes_per_row"] * DAY / args.window_s)
    steady = (
        settings.load_windows / DAY * real_per_broker_day * args.brokers
        + settings.load_rollups / DAY * rollup_per_broker_day * args.brokers
        + settings.cluster_windows / DAY * health_per_day
    )
    pruned = sum(report.pruned.values())
    n, days = args.bulk_brokers, args.days
    figures = [
        (f"raw windows, per broker per day (measured, {n} brokers)", f"{raw_per_broker_day / MB:.3f} MB"),
        (
            f"raw windows, per broker per day at {args.brokers} brokers (sample through commit_batch)",
            f"{shape['bytes_per_row'] * DAY / args.window_s / MB:.3f} MB",
        ),
        ("hourly rollups, per broker per day", f"{rollup_per_broker_day / 1000:.1f} kB"),
        (f"store before the pass ({days} d, {n} brokers)", f"{before_used / MB:.1f} MB"),
        (
            "store after the pass (pages in use; the file keeps free pages for reuse)",
            f"{after_used / MB:.1f} MB",
        ),
        (
            "the pass: rows deleted, windows rolled up, transactions",
            f"{pruned:,}, {report.rolled_up_windows:,}, {report.transactions:,}",
        ),
        (
            "the pass: duration, rows/s",
            f"{report.duration_s:.1f} s, {pruned / max(report.duration_s, 1e-9):,.0f}",
        ),
        (
            f"extrapolated to {args.brokers} brokers: a month raw",
            f"{real_per_broker_day * args.brokers * days / 1e9:.1f} GB",
        ),
        (
            f"extrapolated to {args.brokers} brokers: steady state with the defaults ({kept_days:g} d raw, "
            f"{settings.load_rollups / DAY:g} d rollups, {settings.cluster_windows / DAY:g} d health)",
            f"{steady / 1e9:.1f} GB",
        ),
    ]
    print()
    print("| figure | value |")
    print("|---|---|")
    for name, value in figures:
        print(f"| {name} | {value} |")
    print()
    print(f"| read ({n} brokers) | before: median, entries | after: median, entries |")
    print("|---|---|---|")
    for name, (took, count) in before_reads.items():
        took_after, count_after = after_reads[name]
        print(f"| {name} | {took * 1000:.1f} ms, {count} | {took_after * 1000:.1f} ms, {count_after} |")
    print()
    print("tables after, MB: " + ", ".join(f"{t} {b / MB:.2f}" for t, b in sorted(after_tables.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
