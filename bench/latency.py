"""Benchmark: the latency figures the tests used to bound with a wall clock, measured here instead.

    .venv/bin/python -m bench.latency collect-rounds [--interval 0.3] [--seconds 20]
    .venv/bin/python -m bench.latency give-up [--repeats 3]

The tests assert what happens (a's rounds go on while b's are slow, the command gives up and says why);
how long it takes depends on the machine, so it is printed here (docs/benchmarks.md).

``collect-rounds``: ``kafka-health collect`` watching two reference clusters, ``a`` on one embedded
ZooKeeper and ``b`` on another, with ``b``'s metrics URL a server that accepts and never answers (each of
b's rounds waits for its scrape timeout, 5 s). Prints the gaps between the starts of a's rounds (target:
under 3 intervals) for ``--seconds``, then again as long with b's ZooKeeper stopped.

``give-up``: the commands against a ZooKeeper nobody listens on, each a child process, timed from start to
exit: ``collect --once`` with a 3 s start timeout; the same with three clusters (their first scans run at
once: about one start timeout, not three); ``safe-to-stop --timeout 1``. Prints each time and its exit
status.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from app.cli import collect as collect_command
from app.cli.main import build_parser
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TopicSpec
from app.embedded.zookeeper import EmbeddedZooKeeper, pick_free_port


def cluster_settings(brokers: int) -> ReferenceClusterSettings:
    return ReferenceClusterSettings.model_validate(
        {"brokers": brokers, "topics": [TopicSpec(name="orders", partitions=4, replication_factor=2)]}
    )


def round_starts(spool: Path, cluster: str) -> list[float]:
    """The start times of ``cluster``'s rounds (one cluster sample per round), in order."""
    times = []
    for path in spool.glob("*.ndjson"):
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            sample = json.loads(line)
            if sample["cluster"] == cluster and sample["kind"] == "cluster":
                times.append(sample["timestamp"])
    return sorted(times)


def report_gaps(what: str, starts: Sequence[float], interval: float) -> None:
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    if not gaps:
        print(f"{what}: fewer than two rounds")
        return
    over = sum(1 for g in gaps if g >= 3 * interval)
    print(
        f"{what}: {len(starts)} rounds, gap p50 {statistics.median(gaps) * 1000:.0f} ms, "
        f"max {max(gaps) * 1000:.0f} ms (target < {3 * interval * 1000:.0f} ms: {over} gaps over)"
    )


def run_collect_rounds(args: argparse.Namespace, workdir: Path) -> None:
    servers = [EmbeddedZooKeeper(pick_free_port(), workdir / f"zk-{n}", heap="256m") for n in ("a", "b")]
    clusters: list[ReferenceCluster] = []
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)  # accepts, never answers
    try:
        for server in servers:
            server.start()
        for server, brokers in zip(servers, (3, 2), strict=True):
            cluster = ReferenceCluster(cluster_settings(brokers), f"{server.connect_string}/bench")
            cluster.start()
            clusters.append(cluster)
        spool = workdir / "spool"
        spool.mkdir()
        silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
        argv = [
            "collect",
            "--cluster", f"a={servers[0].connect_string}/bench",
            "--cluster", f"b={servers[1].connect_string}/bench,{silent_url}",
            "--sink", f"spool:{spool}",
            "--interval", f"{args.interval}",
        ]  # fmt: skip
        stop = threading.Event()
        out, err = io.StringIO(), io.StringIO()
        thread = threading.Thread(
            target=collect_command.run,
            args=(build_parser().parse_args(argv), out, err),
            kwargs={"stop": stop},
        )
        thread.start()
        try:
            started = time.time()
            time.sleep(args.seconds)
            up = [t for t in round_starts(spool, "a") if t >= started]
            servers[1].stop()
            down_at = time.time()
            time.sleep(args.seconds)
            down = [t for t in round_starts(spool, "a") if t >= down_at]
        finally:
            stop.set()
            thread.join(60)
        print(f"interval {args.interval:g} s; b's rounds: {len(round_starts(spool, 'b'))} (each waits 5 s)")
        report_gaps("a, both ZooKeepers up", up, args.interval)
        report_gaps("a, b's ZooKeeper down", down, args.interval)
    finally:
        silent.close()
        servers[1].start()
        for cluster in clusters:
            cluster.stop()
        for server in servers:
            server.stop()


def timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, int, str]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", *argv], env=env, capture_output=True, text=True, check=False
    )
    last = (result.stderr.strip().splitlines() or [""])[-1]
    return time.monotonic() - started, result.returncode, last


def run_give_up(args: argparse.Namespace, workdir: Path) -> None:
    env = {**os.environ, "KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S": "3"}
    nobody = [f"127.0.0.1:{pick_free_port()}" for _ in range(3)]
    cases = {
        "collect --once, start timeout 3 s": ["collect", "--zookeeper", nobody[0], "--once",
                                              "--sink", f"spool:{workdir / 's1'}"],
        "collect --once, 3 clusters, start timeout 3 s": [
            "collect", *(a for n, z in zip("abc", nobody, strict=True) for a in ("--cluster", f"{n}={z}")),
            "--once", "--sink", f"spool:{workdir / 's2'}",
        ],
        "safe-to-stop --timeout 1": ["safe-to-stop", "--zookeeper", nobody[0], "--broker", "0",
                                     "--timeout", "1"],
    }  # fmt: skip
    for n in ("s1", "s2"):
        (workdir / n).mkdir()
    for name, argv in cases.items():
        runs = [timed(argv, env) for _ in range(args.repeats)]
        times = ", ".join(f"{t:.2f}" for t, _, _ in runs)
        print(f"{name}: {times} s; exit {sorted({c for _, c, _ in runs})}; {runs[-1][2][:100]}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rounds = sub.add_parser(
        "collect-rounds", help="collect's round gaps on a, b slow, then b's ZooKeeper down"
    )
    rounds.add_argument("--interval", type=float, default=0.3, help="collect --interval (s)")
    rounds.add_argument("--seconds", type=float, default=20.0, help="how long each phase runs (s)")
    give_up = sub.add_parser("give-up", help="how long the commands take to give up on a dead ZooKeeper")
    give_up.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        {"collect-rounds": run_collect_rounds, "give-up": run_give_up}[args.command](args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
