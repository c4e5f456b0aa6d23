"""Benchmark: what one large request costs the service, and the others' latency while it runs (issue 13, "No
request size limit").

    .venv/bin/python -m bench.limits [--body-mb 16.7] [--in-flight 3] [--probe-s 5]

Runs an embedded ZooKeeper, the reference cluster (3 brokers, a topic of 4 partitions) and ``kafka-health
serve`` as a child process on a fresh SQLite store, then:

1. ``GET /api/v1/cluster`` alone, one request after another for ``--probe-s`` seconds: p50 / max.
2. **The issue's case**: ``--in-flight`` reassignment dry runs of ``--body-mb`` MB each at once (partitions
   of topics that do not exist: every item is a problem), ``GET /api/v1/cluster`` timed meanwhile: each
   answer's status, size and time, the service's CPU time (``/proc/<pid>/stat``), the largest audit row.
3. **The largest request the limit lets in**: the same, with bodies just under 1 MiB (the default
   ``KAFKA_HEALTH_SERVICE__MAX_BODY_BYTES``).

Before/after: run it on a checkout without the limits with ``PYTHONPATH=<that checkout>
.venv/bin/python bench/limits.py`` (the file uses nothing the limits added).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TopicSpec
from app.embedded.zookeeper import EmbeddedZooKeeper
from bench.alert_latency import TOKEN, BenchError, Service, start_service

REASSIGN = "/api/v1/actions/reassignments"
CLUSTER = "/api/v1/cluster"
LIMIT = 1024 * 1024
"""The default body limit (``app.service.limits.DEFAULT_BODY_BYTES``; not imported, see the docstring)."""


@dataclass
class Sent:
    status: int | str
    response_bytes: int
    seconds: float


def cluster_settings() -> ReferenceClusterSettings:
    return ReferenceClusterSettings(
        brokers=3,
        auto_leader_rebalance_enable=False,
        placement_seed=7,
        topics=[TopicSpec(name="orders", partitions=4, replication_factor=3)],
    )


def body_of(size: int) -> bytes:
    """A reassignment dry run of about ``size`` bytes: partitions of topics that do not exist."""
    item = len(json.dumps({"topic": "missing-000000000", "partition": 0, "replicas": [0, 1, 2]})) + 2
    count = max(1, (size - 64) // item)
    items = [{"topic": f"missing-{n:09d}", "partition": 0, "replicas": [0, 1, 2]} for n in range(count)]
    return json.dumps({"partitions": items, "dry_run": True}).encode()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(service: Service, stop: threading.Event, seconds: float | None = None) -> list[float]:
    """``GET /api/v1/cluster`` one after another until ``stop`` (or ``seconds``): the latencies."""
    latencies = []
    deadline = None if seconds is None else time.monotonic() + seconds
    with service.client() as client:
        client.get(CLUSTER).raise_for_status()
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            began = time.perf_counter()
            client.get(CLUSTER).raise_for_status()
            latencies.append(time.perf_counter() - began)
    return latencies


def send(service: Service, body: bytes) -> Sent:
    began = time.perf_counter()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    try:
        response = httpx.post(service.url + REASSIGN, content=body, headers=headers, timeout=600)
    except httpx.TransportError as exc:  # a server that closes on a body it will not read
        return Sent(type(exc).__name__, 0, time.perf_counter() - began)
    return Sent(response.status_code, len(response.content), time.perf_counter() - began)


def largest_audit_row(workdir: Path) -> int:
    with sqlite3.connect(workdir / "kafka-health.db") as conn:
        (size,) = conn.execute("SELECT coalesce(max(length(detail)), 0) FROM audit_log").fetchone()
    return int(size)


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000:.0f} ms"


def load_case(service: Service, workdir: Path, name: str, body: bytes, in_flight: int) -> None:
    pid = service.process.popen.pid
    cpu = cpu_seconds(pid)
    stop = threading.Event()
    with ThreadPoolExecutor(in_flight + 1) as pool:
        probing = pool.submit(probe, service, stop)
        time.sleep(0.5)
        began = time.perf_counter()
        sent = [f.result() for f in [pool.submit(send, service, body) for _ in range(in_flight)]]
        wall = time.perf_counter() - began
        stop.set()
        latencies = probing.result()
    used = cpu_seconds(pid) - cpu
    print(f"\n{name}: {in_flight} x {len(body) / 1e6:.1f} MB reassignment dry runs at once")
    for n, s in enumerate(sent, 1):
        print(f"  request {n}: {s.status}, {s.response_bytes / 1e6:.3f} MB answered in {s.seconds:.2f} s")
    print(f"  all answered in {wall:.2f} s; the service used {used:.2f} s of CPU")
    print(
        f"  GET {CLUSTER} meanwhile: {len(latencies)} requests, p50 {ms(latencies, 0.5)}, "
        f"max {max(latencies) * 1000:.0f} ms"
    )
    print(f"  largest audit row: {largest_audit_row(workdir) / 1e6:.3f} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--body-mb", type=float, default=16.7)
    parser.add_argument("--in-flight", type=int, default=3)
    parser.add_argument("--probe-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp,
        EmbeddedZooKeeper() as zookeeper,
        ReferenceCluster(cluster_settings(), zookeeper.connect_string),
    ):
        workdir = Path(tmp)
        service = start_service(zookeeper.connect_string, workdir, {})
        try:
            alone = probe(service, threading.Event(), args.probe_s)
            print(
                f"GET {CLUSTER} alone: {len(alone)} requests, p50 {ms(alone, 0.5)}, p99 {ms(alone, 0.99)}, "
                f"max {max(alone) * 1000:.0f} ms (mean {statistics.mean(alone) * 1000:.1f} ms)"
            )
            load_case(service, workdir, "the issue's case", body_of(int(args.body_mb * 1e6)), args.in_flight)
            load_case(service, workdir, "just under the 1 MiB limit", body_of(LIMIT - 1024), args.in_flight)
        finally:
            service.process.stop()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
