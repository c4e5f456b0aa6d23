"""Benchmark: the ZooKeeper collector's full scan and its change-to-snapshot latency on a large cluster.

    .venv/bin/python bench/zk_scan.py [--brokers 1000 --topics 1000 --partitions-per-topic 200 --rf 3]
                                      [--connections 4 --in-flight 256 --batch 64 --reader wire|kazoo]
                                      [--changes 200 --change-interval 0.02]
                                      [--zookeeper HOST:PORT[/CHROOT] [--write [--overwrite]]
                                       [--server-pid PID]]

Without ``--zookeeper`` it starts an embedded ZooKeeper (``--heap``, 3g by default: 400k znodes plus a
watch on each) and writes the bulk cluster (``write_bulk_cluster``) under ``/bench``; with ``--zookeeper``
it reads what is there (``--write`` writes the bulk cluster there first; ``--server-pid`` names the
server's process so that its CPU time is reported). ``--batch 1`` reads one znode per request (no
multiRead), as against a ZooKeeper older than 3.6.

Then it measures:

1. the full scan, ``--scans`` times with a new collector each (the first right after the write finds a
   cold JVM): ``ZooKeeperCollector.start`` until the first snapshot: seconds, reads and reads/s, the CPU
   seconds of this process and of the embedded ZooKeeper's JVM, peak RSS and RSS growth; then the last
   snapshot's own size per partition (every object reachable from it, counted once);
2. the change latency: ``--changes`` state-znode updates (alternately an ISR shrink and a leader change,
   each bumping the leader epoch) written by a separate kazoo session every ``--change-interval`` seconds,
   each timed from just before its write until a published snapshot shows it (``on_change``): p50, p95, max.

Exit status 1 when the scan reports znode errors, finds fewer partitions than it wrote, does a second full
scan, or a change is not seen within ``--change-timeout``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import random
import resource
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FunctionType, ModuleType

import psutil
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from app.embedded.reference_cluster.bulk import BulkClusterSpec, BulkWriteError, write_bulk_cluster
from app.embedded.zookeeper import EmbeddedZooKeeper, ZooKeeperServerError
from collectors.kafka import zkdata
from collectors.kafka.model import ClusterSnapshot, LeaderAndIsr, TopicPartition
from collectors.zookeeper.collector import (
    DEFAULT_BATCH,
    DEFAULT_CONNECTIONS,
    DEFAULT_IN_FLIGHT,
    ZooKeeperCollector,
)
from collectors.zookeeper.wire import KazooReader, WireReader, ZooKeeperCollectorError

EMBEDDED_CHROOT = "/bench"
TARGET_SCAN_S = 6.0
"""Also the length of the incident lane's blind spell after a lost session (the service rescans)."""
TARGET_CHANGE_P95_S = 1.0
TARGET_BYTES_PER_PARTITION = 1024


class BenchError(Exception):
    """The run went wrong (reported, exit status 1)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    cluster = parser.add_argument_group("cluster (written by bulk mode)")
    cluster.add_argument("--brokers", type=int, default=1000)
    cluster.add_argument("--topics", type=int, default=1000)
    cluster.add_argument("--partitions-per-topic", type=int, default=200)
    cluster.add_argument("--rf", type=int, default=3, help="replication factor")
    collector = parser.add_argument_group("collector")
    collector.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    collector.add_argument("--in-flight", type=int, default=DEFAULT_IN_FLIGHT)
    collector.add_argument(
        "--batch", type=int, default=DEFAULT_BATCH, help="reads per multiRead (1: one read per request)"
    )
    collector.add_argument("--reader", choices=["wire", "kazoo"], default="wire")
    collector.add_argument("--start-timeout", type=float, default=300.0)
    collector.add_argument("--scans", type=int, default=2, help="full scans, each by a new collector (2)")
    collector.add_argument("--no-gc-pause", action="store_true", help="keep Python's GC running in scans")
    changes = parser.add_argument_group("change latency")
    changes.add_argument("--changes", type=int, default=200, help="state znode updates (0: skip)")
    changes.add_argument("--change-interval", type=float, default=0.02, help="seconds between writes")
    changes.add_argument("--change-timeout", type=float, default=10.0)
    target = parser.add_argument_group("target")
    target.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="default: an embedded ZooKeeper")
    target.add_argument("--write", action="store_true", help="write the bulk cluster into --zookeeper first")
    target.add_argument("--overwrite", action="store_true", help="with --write: replace a cluster there")
    target.add_argument(
        "--server-pid", type=int, help="with --zookeeper: the server's process, whose CPU time is reported"
    )
    target.add_argument("--heap", default="3g", help="heap of the embedded ZooKeeper (default 3g)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Target:
    connect: str
    written: int | None
    """Partitions written, None if the cluster was there already."""
    server_pid: int | None
    """The embedded ZooKeeper's JVM, whose CPU time is reported."""


@contextmanager
def target_cluster(args: argparse.Namespace) -> Iterator[Target]:
    if args.zookeeper:
        written = write_cluster(args.zookeeper, args) if args.write else None
        yield Target(args.zookeeper, written, args.server_pid)
        return
    started = time.monotonic()
    with EmbeddedZooKeeper(heap=args.heap) as server:
        print(f"embedded ZooKeeper at {server.connect_string} (started in {time.monotonic() - started:.1f}s)")
        connect = server.connect_string + EMBEDDED_CHROOT
        yield Target(connect, write_cluster(connect, args), server.pid)


def write_cluster(connect: str, args: argparse.Namespace) -> int:
    spec = BulkClusterSpec(
        brokers=args.brokers,
        topics=args.topics,
        partitions_per_topic=args.partitions_per_topic,
        replication_factor=args.rf,
        seed=args.seed,
    )
    report = write_bulk_cluster(connect, spec, overwrite=args.overwrite)
    print(
        f"wrote     {report.brokers:,} brokers, {report.topics:,} topics, {report.partitions:,} partitions "
        f"({report.znodes:,} znodes) in {report.seconds:.1f}s",
        flush=True,
    )
    return report.partitions


# --- sizes -------------------------------------------------------------------------------------------


def deep_size(root: object) -> int:
    """Bytes of every object reachable from ``root`` (each counted once; classes, functions and modules
    are not part of it)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | FunctionType | ModuleType):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def cpu_seconds(pid: int | None) -> float | None:
    if pid is None:
        return None
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


# --- the scan ----------------------------------------------------------------------------------------


def measure_scan(
    target: Target, args: argparse.Namespace, watcher: ChangeWatcher, number: int
) -> ZooKeeperCollector:
    factory = WireReader if args.reader == "wire" else KazooReader
    collector = ZooKeeperCollector(
        target.connect,
        connections=args.connections,
        in_flight=args.in_flight,
        batch=args.batch,
        reader_factory=factory,
        on_change=watcher.on_change,
        pause_gc=not args.no_gc_pause,
    )
    rss_before, cpu_before = rss(), time.process_time()
    server_before = cpu_seconds(target.server_pid)
    started = time.monotonic()
    collector.start(args.start_timeout)
    wall = time.monotonic() - started
    cpu = time.process_time() - cpu_before
    server_after = cpu_seconds(target.server_pid)
    rss_after = rss()
    stats = collector.last_scan
    assert stats is not None
    print(
        f"scan {number}    {stats.seconds:.2f}s ({wall:.2f}s with connecting), "
        f"{args.connections} sessions of {args.in_flight} in flight, {args.reader} reader"
        f"{batching(collector)}"
    )
    print(f"found     {stats.brokers:,} brokers, {stats.topics:,} topics, {stats.partitions:,} partitions")
    server = ""
    if server_before is not None and server_after is not None:
        server = f"; ZooKeeper JVM CPU {server_after - server_before:.2f}s"
    print(
        f"reads     {stats.reads:,} ({stats.reads_per_second:,.0f}/s); this process's CPU {cpu:.2f}s{server}"
    )
    mib = 2**20
    print(
        f"memory    RSS {rss_before / mib:,.0f} -> {rss_after / mib:,.0f} MiB; "
        f"peak RSS of the process so far {peak_rss() / mib:,.0f} MiB",
        flush=True,
    )
    verdict("scan", stats.seconds <= TARGET_SCAN_S, f"{stats.seconds:.2f}s vs {TARGET_SCAN_S:g}s")
    return collector


def batching(collector: ZooKeeperCollector) -> str:
    wire = [r for r in collector.readers if isinstance(r, WireReader)]
    if not wire or not any(r.multi_read for r in wire):
        return ", one read per request"
    return f", {sum(r.multi_reads for r in wire):,} multiReads of up to {collector.batch}"


def measure_snapshot(collector: ZooKeeperCollector) -> None:
    snapshot = collector.snapshot
    partitions = len(snapshot.partitions)
    size = deep_size(snapshot)
    per_partition = size / max(partitions, 1)
    print(f"snapshot  {size / 2**20:,.1f} MiB = {per_partition:,.0f} bytes per partition", flush=True)
    verdict("memory", per_partition <= TARGET_BYTES_PER_PARTITION, f"{per_partition:,.0f} B vs 1 KiB")


def verdict(name: str, ok: bool, detail: str) -> None:
    print(f"target    {name}: {'met' if ok else 'MISSED'} ({detail})")


# --- change latency ----------------------------------------------------------------------------------


class ChangeWatcher:
    """Times each expected change from its write until a published snapshot shows it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expected: dict[TopicPartition, tuple[int, float]] = {}
        self.latencies: list[float] = []
        self.versions = 0

    def expect(self, tp: TopicPartition, leader_epoch: int, written_at: float) -> None:
        with self._lock:
            self._expected[tp] = (leader_epoch, written_at)

    def on_change(self, snapshot: ClusterSnapshot) -> None:
        now = time.perf_counter()
        with self._lock:
            self.versions += 1
            for tp, (epoch, written_at) in list(self._expected.items()):
                info = snapshot.partitions.get(tp)
                if info is not None and info.state is not None and info.state.leader_epoch >= epoch:
                    self.latencies.append(now - written_at)
                    del self._expected[tp]

    def pending(self) -> int:
        with self._lock:
            return len(self._expected)


def changed_state(state: LeaderAndIsr, shrink: bool) -> LeaderAndIsr:
    """An ISR shrink (the last member leaves) or a leader change (the next ISR member leads)."""
    isr = state.isr
    if shrink and len(isr) > 1:
        isr = isr[:-1]
    elif len(isr) > 1:
        leader = isr[(isr.index(state.leader) + 1) % len(isr)] if state.leader in isr else isr[0]
        return LeaderAndIsr(leader, state.leader_epoch + 1, isr, state.controller_epoch)
    return LeaderAndIsr(state.leader, state.leader_epoch + 1, isr, state.controller_epoch)


def measure_changes(
    connect: str, collector: ZooKeeperCollector, watcher: ChangeWatcher, args: argparse.Namespace
) -> None:
    snapshot = collector.snapshot
    candidates = [tp for tp, info in snapshot.partitions.items() if info.state is not None]
    picks = random.Random(args.seed).sample(candidates, min(args.changes, len(candidates)))
    writer = KazooClient(hosts=connect)
    writer.start(timeout=15)
    versions_before = watcher.versions
    try:
        for i, tp in enumerate(picks):
            path = zkdata.partition_state_path(tp)
            data, stat = writer.get(path)
            new = changed_state(zkdata.decode_partition_state(path, data, stat.version), shrink=i % 2 == 0)
            payload = zkdata.encode_partition_state(new)
            watcher.expect(tp, new.leader_epoch, time.perf_counter())
            writer.set(path, payload, version=stat.version)
            time.sleep(args.change_interval)
        deadline = time.monotonic() + args.change_timeout
        while watcher.pending() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        writer.stop()
        writer.close()
    report_latency(watcher, len(picks), watcher.versions - versions_before)


def report_latency(watcher: ChangeWatcher, written: int, versions: int) -> None:
    latencies = sorted(watcher.latencies)
    if not latencies:
        raise BenchError("no change reached the snapshot")
    p50 = statistics.median(latencies)
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    print(
        f"changes   {len(latencies)}/{written} seen in {versions} snapshot versions; latency "
        f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
    verdict("change p95", p95 <= TARGET_CHANGE_P95_S, f"{p95 * 1000:.0f} ms vs 1,000 ms")
    if watcher.pending():
        raise BenchError(f"{watcher.pending()} changes never reached the snapshot")


def check(collector: ZooKeeperCollector, written: int | None) -> None:
    snapshot = collector.snapshot
    if snapshot.errors:
        shown = "; ".join(f"{e.path}: {e.reason}" for e in snapshot.errors[:5])
        raise BenchError(f"{len(snapshot.errors)} znode errors, e.g. {shown}")
    if written is not None and len(snapshot.partitions) != written:
        raise BenchError(
            f"the snapshot has {len(snapshot.partitions):,} partitions, {written:,} were written"
        )
    if collector.full_scans != 1:
        raise BenchError(f"{collector.full_scans} full scans: the changes caused a rescan")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        if args.scans < 1:
            raise ValueError(f"--scans must be at least 1, got {args.scans}")
        with target_cluster(args) as target:
            watcher = ChangeWatcher()
            for number in range(1, args.scans):
                collector = measure_scan(target, args, watcher, number)
                try:
                    check(collector, target.written)
                finally:
                    collector.stop()
                del collector  # so that its snapshot is gone before the next scan
            collector = measure_scan(target, args, watcher, args.scans)
            try:
                measure_snapshot(collector)
                if args.changes > 0:
                    measure_changes(target.connect, collector, watcher, args)
                check(collector, target.written)
            finally:
                collector.stop()
    except (BenchError, BulkWriteError, ZooKeeperCollectorError, ZooKeeperServerError, KazooException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
