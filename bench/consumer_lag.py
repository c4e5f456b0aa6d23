"""Benchmark: a round of the consumer-lag collector against the reference cluster at scale.

    .venv/bin/python -m bench.consumer_lag [--groups 1000 --topics 1000 --partitions-per-topic 20]
                                           [--topics-per-group 1 --members 2 --brokers 6 --rf 1]
                                           [--rounds 5 --interval 1 --tick-ms 2000] [--profile N]
                                           [--profile-server FILE]

The reference cluster (an embedded ZooKeeper, ``--brokers`` simulated brokers speaking Kafka's protocol,
``--topics`` topics of ``--partitions-per-topic`` partitions and ``--groups`` simulated consumer groups,
group i reading ``--topics-per-group`` topics from topic i on, all started at once from the cluster's
settings) runs in a child process, so that serving costs the measured process nothing. Then this process
opens the collector's reader (kafka-python, bootstrapped from the brokers' listeners) and runs
``--rounds`` rounds of :meth:`ConsumerLagCollector.round`, ``--interval`` seconds apart (the first on
fresh connections and an empty coordinator cache: "cold"; the others "warm").

The simulation's tick (``--tick-ms``, 2000 here, the cluster's default 100) advances every partition's log
and the groups due to commit on the cluster's one loop, which also answers the requests: at 20,000
partitions a tick takes most of a second of CPU, and a request that arrives during one waits for it. A
longer tick is a coarser simulation (a tick advances at most 1 s of traffic), not a different collector
round.

Printed per round: wall time, this process's CPU time (every thread: the collector's and kafka-python's
I/O thread), the child's (the simulated brokers answering), the groups and partitions reported and the
errors. Then the median of the warm rounds against the target (a round within 2 s) and this process's
peak RSS. ``--profile N`` prints the N costliest functions (cumulative) of the warm rounds under
cProfile; ``--profile-server FILE`` writes the profile (pstats) of the child's loop thread (ticks and
answers; not the connections' threads, which decode and encode) to FILE when it stops.

Exit status 1 when a round misses groups or partitions, or reports errors.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import logging
import pstats
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

TARGET_ROUND_S = 2.0


class BenchError(Exception):
    """The run went wrong (reported, exit status 1)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    cluster = parser.add_argument_group("the reference cluster")
    cluster.add_argument("--groups", type=int, default=1000, help="consumer groups (1000)")
    cluster.add_argument("--topics", type=int, default=1000, help="topics (1000)")
    cluster.add_argument("--partitions-per-topic", type=int, default=20, help="(20: 20,000 partitions)")
    cluster.add_argument("--topics-per-group", type=int, default=1, help="topics each group reads (1)")
    cluster.add_argument("--members", type=int, default=2, help="members per group (2)")
    cluster.add_argument("--brokers", type=int, default=6, help="simulated brokers (6)")
    cluster.add_argument("--rf", type=int, default=1, help="replication factor (1)")
    cluster.add_argument(
        "--tick-ms", type=int, default=2000, help="the simulation's tick (2000; the cluster's default 100)"
    )
    cluster.add_argument("--commit-interval-ms", type=int, default=5000, help="the groups' (5000)")
    cluster.add_argument("--start-timeout", type=float, default=600.0, help="seconds (600)")
    run = parser.add_argument_group("the rounds")
    run.add_argument("--rounds", type=int, default=5, help="collector rounds (5: one cold, four warm)")
    run.add_argument("--interval", type=float, default=1.0, help="seconds between rounds (1)")
    run.add_argument("--timeout", type=float, default=30.0, help="the reader's request timeout (30 s)")
    run.add_argument("--profile", type=int, default=0, metavar="N", help="print cProfile's top N")
    run.add_argument("--profile-server", metavar="FILE", help="the child's cProfile stats to FILE")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("groups", "topics", "partitions_per_topic", "topics_per_group", "members", "brokers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.topics_per_group > args.topics:
        parser.error("--topics-per-group cannot exceed --topics")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def topic_name(i: int) -> str:
    return f"t{i:05d}"


def group_topics(args: argparse.Namespace, group: int) -> list[str]:
    return [topic_name((group + k) % args.topics) for k in range(args.topics_per_group)]


def expected_partitions(args: argparse.Namespace) -> int:
    """Group-partitions the rounds must report (each group: every partition of its topics)."""
    return int(args.groups * args.topics_per_group * args.partitions_per_topic)


# --- the child: the reference cluster ----------------------------------------------------------------


def serve(args: argparse.Namespace) -> int:
    """Start ZooKeeper and the cluster, print ``{"bootstrap", "started_s"}`` on a line, serve until stdin
    closes."""
    from app.embedded.reference_cluster.cluster import ReferenceCluster
    from app.embedded.reference_cluster.config import (
        ConsumerGroupSpec,
        ReferenceClusterSettings,
        TopicSpec,
    )
    from app.embedded.zookeeper import EmbeddedZooKeeper

    logging.basicConfig(level=logging.WARNING, format="server %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    settings = ReferenceClusterSettings(
        brokers=args.brokers,
        topics=[
            TopicSpec(name=topic_name(i), partitions=args.partitions_per_topic, replication_factor=args.rf)
            for i in range(args.topics)
        ],
        consumer_groups=[
            ConsumerGroupSpec(
                name=f"group-{g:05d}",
                topics=group_topics(args, g),
                members=args.members,
                commit_interval_ms=args.commit_interval_ms,
            )
            for g in range(args.groups)
        ],
        listener_port_base=0,
        tick_ms=args.tick_ms,
        placement_seed=1,
    )
    profiler = cProfile.Profile() if args.profile_server else None
    with EmbeddedZooKeeper(heap="1g") as zookeeper:
        started = time.perf_counter()
        cluster = ReferenceCluster(settings, zookeeper.connect_string)
        cluster.start(timeout=args.start_timeout)
        try:
            print(
                json.dumps(
                    {"bootstrap": cluster.kafka_bootstrap(), "started_s": time.perf_counter() - started}
                ),
                flush=True,
            )
            if profiler is not None:
                cluster.loop.call(profiler.enable)  # the loop's thread: where the answers are computed
            sys.stdin.read()  # until the parent closes it
        finally:
            if profiler is not None:
                cluster.loop.call(profiler.disable)
                profiler.dump_stats(args.profile_server)
            cluster.stop()
    return 0


@dataclass
class Server:
    process: subprocess.Popen[str]
    bootstrap: str
    started_s: float

    def cpu_s(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)


@contextlib.contextmanager
def server(args: argparse.Namespace, argv: Sequence[str]) -> Iterator[Server]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.consumer_lag", *argv, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        if not line:
            raise BenchError(f"the reference cluster did not start (exit status {process.wait()})")
        started = json.loads(line)
        yield Server(process, started["bootstrap"], started["started_s"])
    finally:
        process.stdin.close()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the rounds ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundFigures:
    wall_s: float
    cpu_s: float
    server_cpu_s: float
    groups: int
    partitions: int
    errors: dict[str, str]


def measure_round(collector: Any, srv: Server) -> RoundFigures:
    cpu0, server0, wall0 = time.process_time(), srv.cpu_s(), time.perf_counter()
    result = collector.round()
    wall = time.perf_counter() - wall0
    cpu, server_cpu = time.process_time() - cpu0, srv.cpu_s() - server0
    partitions = sum(len(r.lag.partitions) for r in result.groups.values())
    return RoundFigures(wall, cpu, server_cpu, len(result.groups), partitions, dict(result.errors))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def mib(n: float) -> str:
    return f"{n / 1024**2:.0f} MiB"


def run_rounds(args: argparse.Namespace, srv: Server) -> list[RoundFigures]:
    from collectors.consumers.client import open_reader
    from collectors.consumers.collector import ConsumerLagCollector
    from collectors.consumers.config import KafkaSettings

    settings = KafkaSettings(bootstrap_servers=srv.bootstrap, timeout_s=args.timeout)
    wall0 = time.perf_counter()
    reader = open_reader(settings, {})
    print(f"reader opened in {time.perf_counter() - wall0:.2f} s")
    profiler = cProfile.Profile() if args.profile else None
    figures = []
    try:
        collector = ConsumerLagCollector(reader, settings)
        for number in range(1, args.rounds + 1):
            if number > 1:
                time.sleep(args.interval)
            if profiler is not None and number > 1:
                profiler.enable()
            f = measure_round(collector, srv)
            if profiler is not None:
                profiler.disable()
            figures.append(f)
            print(
                f"round {number} ({'cold' if number == 1 else 'warm'}): {f.wall_s:.2f} s wall, "
                f"{f.cpu_s:.2f} s CPU (the cluster's process {f.server_cpu_s:.2f} s), "
                f"{f.groups:,} groups, {f.partitions:,} partitions, {len(f.errors)} errors",
                flush=True,
            )
    finally:
        reader.close()
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.profile)
        print(out.getvalue())
    return figures


def check(args: argparse.Namespace, figures: Sequence[RoundFigures]) -> None:
    for number, f in enumerate(figures, 1):
        if f.errors:
            shown = "; ".join(f"{g}: {e}" for g, e in list(f.errors.items())[:3])
            raise BenchError(f"round {number}: {len(f.errors)} errors, e.g. {shown}")
        if f.groups != args.groups or f.partitions != expected_partitions(args):
            raise BenchError(
                f"round {number}: {f.groups:,} groups and {f.partitions:,} partitions, expected "
                f"{args.groups:,} and {expected_partitions(args):,}"
            )


def summarise(figures: Sequence[RoundFigures]) -> None:
    warm = figures[1:] or figures
    wall = statistics.median(f.wall_s for f in warm)
    cpu = statistics.median(f.cpu_s for f in warm)
    verdict = "met" if wall <= TARGET_ROUND_S else "missed"
    print(
        f"warm rounds: median {wall:.2f} s wall (max {max(f.wall_s for f in warm):.2f} s), "
        f"{cpu:.2f} s CPU; target {TARGET_ROUND_S:.0f} s: {verdict}"
    )
    print(f"cold round: {figures[0].wall_s:.2f} s wall, {figures[0].cpu_s:.2f} s CPU")
    print(f"peak RSS of this process: {mib(peak_rss_bytes())}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in psutil.getloadavg())} ({psutil.cpu_count()} cores)")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.serve:
        return serve(args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)
    print(
        f"reference cluster: {args.brokers} brokers, {args.topics:,} topics x {args.partitions_per_topic} "
        f"partitions = {args.topics * args.partitions_per_topic:,} partitions (RF {args.rf}), "
        f"{args.groups:,} groups of {args.members} members reading {args.topics_per_group} topic(s) each "
        f"({expected_partitions(args):,} group partitions), tick {args.tick_ms} ms",
        flush=True,
    )
    try:
        with server(args, argv) as srv:
            print(f"started in {srv.started_s:.1f} s; bootstrap {srv.bootstrap}", flush=True)
            figures = run_rounds(args, srv)
        summarise(figures)
        check(args, figures)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
