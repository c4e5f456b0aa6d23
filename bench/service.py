"""Benchmark: the service on a 200k-partition cluster: ``/metrics`` render time and ``GET /api/v1/cluster``
latency under concurrent load.

    .venv/bin/python bench/service.py [--brokers 1000 --topics 1000 --partitions-per-topic 200]
                                      [--under-replicated 0.01 --offline 0.001 --non-preferred 0.02]
                                      [--renders 10 --requests 2000 --clients 16]

The cluster is the bulk cluster of ``bench/bulk_write.py`` (same spec, same seed, faults drawn the same
way), built in memory as the ZooKeeper collector's snapshot would be, behind the service's own
SnapshotCollector interface: this measures the service, not ZooKeeper (``bench/zk_scan.py`` does that).

1. ``/metrics``: ``render`` ``--renders`` times (the first computes the health report and is shown
   apart; the rest reuse it, as scrapes do until the snapshot changes): seconds per render, bytes.
2. ``GET /api/v1/cluster`` over real HTTP (uvicorn on a free port) from ``--clients`` threads with a
   keep-alive client each: p50 / p95 / p99 / max and requests per second.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import uvicorn
from pydantic import SecretStr

from app.embedded.reference_cluster.bulk.plan import (
    BulkClusterSpec,
    broker_registration,
    faulted_state,
    plan_cluster,
)
from app.embedded.zookeeper import pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.exposition import ClusterMetrics, render
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ClusterView
from collectors.kafka.model import (
    ClusterSnapshot,
    ControllerInfo,
    PartitionInfo,
    ReplicaAssignment,
    TopicInfo,
    TopicPartition,
)
from collectors.zookeeper.collector import ScanStats
from collectors.zookeeper.first_scan import CollectorSpec

TARGET_RENDER_S = 1.0
TARGET_P99_S = 0.050
TOKEN = "bench-token-123"


@dataclass
class StaticCollector:
    """A snapshot that does not change (what the service sees of a quiet cluster)."""

    snapshot: ClusterSnapshot
    in_sync: bool = True
    last_scan: ScanStats | None = None


def build_snapshot(spec: BulkClusterSpec) -> ClusterSnapshot:
    plan = plan_cluster(spec)
    now = time.time()
    partitions = {}
    topics = {}
    for topic in plan.topics:
        topics[topic.name] = TopicInfo(topic.name, topic.topic_id)
        for p, replicas in topic.replicas.items():
            tp = TopicPartition(topic.name, p)
            state = faulted_state(topic.faults.get(p, 0), replicas, spec.controller_epoch)  # type: ignore[arg-type]
            partitions[tp] = PartitionInfo(tp, ReplicaAssignment(tuple(replicas)), state)
    return ClusterSnapshot(
        version=1,
        taken_at=now,
        last_good_at=now,
        stale=False,
        cluster_id=plan.cluster_id,
        brokers={b: broker_registration(spec, b, int(now * 1000)) for b in range(spec.brokers)},
        controller=ControllerInfo(spec.controller_id, spec.controller_epoch),
        topics=topics,
        partitions=partitions,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions-per-topic", type=int, default=200)
    parser.add_argument("--under-replicated", type=float, default=0.01)
    parser.add_argument("--offline", type=float, default=0.001)
    parser.add_argument("--non-preferred", type=float, default=0.02)
    parser.add_argument("--renders", type=int, default=10)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    spec = BulkClusterSpec(
        brokers=args.brokers,
        topics=args.topics,
        partitions_per_topic=args.partitions_per_topic,
        under_replicated_fraction=args.under_replicated,
        offline_fraction=args.offline,
        non_preferred_fraction=args.non_preferred,
    )
    started = time.perf_counter()
    collector = StaticCollector(build_snapshot(spec))
    if args.serve is not None:
        return serve(args, collector)
    print(f"snapshot of {spec.partitions:,} partitions built in {time.perf_counter() - started:.1f} s")

    view = ClusterView(collector)
    cluster = ClusterMetrics(view.state.snapshot.cluster_id or "unknown", view)
    timings = []
    size = 0
    for _ in range(args.renders):
        t = time.perf_counter()
        size = len(render([cluster], None))
        timings.append(time.perf_counter() - t)
    first, rest = timings[0], timings[1:] or timings
    ok_render = max(rest) <= TARGET_RENDER_S
    print(
        f"/metrics: first render {first:.2f} s (includes the health report), then median "
        f"{statistics.median(rest) * 1000:.0f} ms, max {max(rest) * 1000:.0f} ms; {size:,} bytes "
        f"(target <= {TARGET_RENDER_S:g} s: {'met' if ok_render else 'MISSED'})"
    )

    # The service runs in a child process, so that the load generator's threads do not share its GIL.
    port = pick_free_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), *(argv if argv is not None else sys.argv[1:])]
    )
    try:
        return load(args, port)
    finally:
        child.terminate()
        child.wait(timeout=30)


def serve(args: argparse.Namespace, collector: StaticCollector) -> int:
    settings = ServiceSettings(tokens=SecretStr(f"bench:viewer:{TOKEN}"))
    app = create_app(ServiceSpec(settings, [ClusterSpec(CollectorSpec("127.0.0.1:1"), collector=collector)]))
    uvicorn.run(app, host="127.0.0.1", port=args.serve, log_level="warning")
    return 0


def load(args: argparse.Namespace, port: int) -> int:
    url = f"http://127.0.0.1:{port}/api/v1/cluster"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            print("the service did not start", file=sys.stderr)
            return 1
        time.sleep(0.2)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    per_client = args.requests // args.clients
    latencies: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        mine = []
        with httpx.Client(headers=headers) as http:
            http.get(url).raise_for_status()  # warm the connection
            for _ in range(per_client):
                t = time.perf_counter()
                http.get(url).raise_for_status()
                mine.append(time.perf_counter() - t)
        with lock:
            latencies.extend(mine)

    began = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        for future in [pool.submit(client) for _ in range(args.clients)]:
            future.result()
    elapsed = time.perf_counter() - began
    p99 = percentile(latencies, 0.99)
    print(
        f"GET /api/v1/cluster, {args.clients} concurrent clients, {len(latencies):,} requests: "
        f"p50 {percentile(latencies, 0.5) * 1000:.1f} ms, p95 {percentile(latencies, 0.95) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms; {len(latencies) / elapsed:,.0f} req/s "
        f"(target p99 <= {TARGET_P99_S * 1000:g} ms: {'met' if p99 <= TARGET_P99_S else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
