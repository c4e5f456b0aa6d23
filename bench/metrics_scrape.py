"""Benchmark: the metrics scraper's HTTP client (httpx, one long-lived client per broker) against urllib (the
client it replaced, reproduced below as it was) and against one httpx client shared by all brokers.

    .venv/bin/python bench/metrics_scrape.py [--brokers 30 --partitions 1000 --rounds 20]
                                             [--collector-rounds 5 --workers 32 --timeout 5] [--tls]
                                             [--nodelay] [--fetchers urllib,httpx,httpx-shared]

N endpoints (one per broker, each on a port of its own) serve the same jmx_exporter 0.x exposition over
HTTP/1.1 with keep-alive, as jmx_exporter's JDK HTTP server does: the broker metrics the name table reads,
per-topic and per-partition series for ``--partitions`` partitions, request-time quantiles, JVM and
node_exporter host metrics. They run in a child process, so serving costs the measured process nothing.
Like the JDK's server they write the headers and the body separately with Nagle's algorithm on (``--nodelay``
turns it off); ``--tls`` serves HTTPS with a throw-away self-signed certificate (``openssl`` on the PATH),
trusted through ``SSL_CERT_FILE``, which both clients' default contexts read.

Per fetcher, two measurements, the fetchers' rounds interleaved (so that the load of the machine falls on
all alike), after one warm-up round each:

* ``fetch``: every broker's body fetched once per round on ``--workers`` threads, as the collector fetches;
  the client's own cost.
* ``collector``: :meth:`MetricsCollector.scrape` with that fetcher: fetch, parse, evaluate; the whole job
  (with a timeout of 120 s: the question here is the cost, and parsing large bodies on a busy machine can
  take longer than a scrape timeout).

Printed per fetcher and measurement: wall time per round (median and p95), CPU per broker scrape (the
process's CPU time over all threads in a round, median over rounds, divided by the brokers) and the TCP
connections the endpoints accepted per round after warm-up.

``--log-sizes`` measures instead a scrape round of a large cluster with per-replica log sizes, without
HTTP (each broker's text is handed to the collector from memory, so the figure is the parsing and the
models, not the network; the HTTP cost per body is the mode above's): ``--brokers 1000 --cluster-partitions
200000 --replication-factor 3`` gives 600 replicas per broker, each with the ``_PARTITION_SERIES`` a
jmx_exporter serves (log size among them) plus two log-dir filesystems. Per round: the collector's scrape
(parsing into ``BrokerScrape`` with the filesystems and log sizes, the name table, rates), the disk model's
update, and the disk records of every broker (the fits), each as CPU and wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from collectors.kafka.model import BrokerEndpoint, BrokerRegistration
from collectors.metrics import (
    ACCEPT,
    DEFAULT_MAX_RESPONSE_BYTES,
    KEEPALIVE_S,
    FetchError,
    FetchTimeoutError,
    HttpFetcher,
    MetricsCollector,
    MetricsFetcher,
    MetricsSettings,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=30)
    parser.add_argument("--partitions", type=int, default=1000, help="partitions per broker (1000)")
    parser.add_argument("--topics", type=int, default=50, help="topics the partitions belong to (50)")
    parser.add_argument("--rounds", type=int, default=20, help="fetch rounds per fetcher (20)")
    parser.add_argument("--collector-rounds", type=int, default=5, help="collector rounds per fetcher (5)")
    parser.add_argument("--workers", type=int, default=32, help="scrape threads, as max_workers (32)")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--tls", action="store_true", help="serve HTTPS (self-signed, openssl)")
    parser.add_argument("--nodelay", action="store_true", help="the endpoints turn Nagle's algorithm off")
    parser.add_argument("--fetchers", default=",".join(FETCHERS), help="which to compare (all)")
    parser.add_argument("--log-sizes", action="store_true", help="the large-cluster round (no HTTP)")
    parser.add_argument("--cluster-partitions", type=int, default=200_000, help="with --log-sizes (200000)")
    parser.add_argument("--replication-factor", type=int, default=3, help="with --log-sizes (3)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- the exposition ------------------------------------------------------------------------------------

_REQUESTS = (
    "Produce",
    "FetchConsumer",
    "FetchFollower",
    "Metadata",
    "OffsetCommit",
    "JoinGroup",
    "Heartbeat",
)
_QUANTILES = ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999")
_CPU_MODES = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")
_PARTITION_SERIES = (
    ("kafka_log_log_size", "gauge", "kafka.log<type=Log, name=Size"),
    ("kafka_log_log_logendoffset", "gauge", "kafka.log<type=Log, name=LogEndOffset"),
    ("kafka_log_log_logstartoffset", "gauge", "kafka.log<type=Log, name=LogStartOffset"),
    ("kafka_log_log_numlogsegments", "gauge", "kafka.log<type=Log, name=NumLogSegments"),
    (
        "kafka_cluster_partition_underreplicated",
        "gauge",
        "kafka.cluster<type=Partition, name=UnderReplicated",
    ),
    (
        "kafka_cluster_partition_insyncreplicascount",
        "gauge",
        "kafka.cluster<type=Partition, name=InSyncReplicasCount",
    ),
    ("kafka_cluster_partition_replicascount", "gauge", "kafka.cluster<type=Partition, name=ReplicasCount"),
    ("kafka_cluster_partition_underminisr", "gauge", "kafka.cluster<type=Partition, name=UnderMinIsr"),
    ("kafka_cluster_partition_atminisr", "gauge", "kafka.cluster<type=Partition, name=AtMinIsr"),
    (
        "kafka_cluster_partition_laststableoffsetlag",
        "gauge",
        "kafka.cluster<type=Partition, name=LastStableOffsetLag",
    ),
)
_TOPIC_COUNTERS = ("bytesin", "bytesout", "messagesin", "totalproducerequests", "totalfetchrequests")


def _family(lines: list[str], name: str, kind: str, bean: str, samples: list[tuple[str, float]]) -> None:
    lines.append(f"# HELP {name} Attribute exposed for management ({bean}><>Value)")
    lines.append(f"# TYPE {name} {kind}")
    lines.extend(f"{name}{labels} {value!r}" for labels, value in samples)


def exposition(partitions: int, topics: int) -> bytes:
    """One broker's ``/metrics`` as jmx_exporter 0.x (Kafka rules) plus node_exporter would show it."""
    lines: list[str] = []
    gauge = "kafka.server<type=ReplicaManager, name={}"
    for name, value in (
        ("partitioncount", float(partitions)),
        ("leadercount", float(partitions // 3)),
        ("underreplicatedpartitions", 0.0),
        ("underminisrpartitioncount", 0.0),
        ("atminisrpartitioncount", 0.0),
        ("offlinereplicacount", 0.0),
    ):
        _family(lines, f"kafka_server_replicamanager_{name}", "gauge", gauge.format(name), [("", value)])
    for name in ("activecontrollercount", "offlinepartitionscount", "preferredreplicaimbalancecount"):
        bean = f"kafka.controller<type=KafkaController, name={name}"
        _family(lines, f"kafka_controller_kafkacontroller_{name}", "gauge", bean, [("", 0.0)])
    names = [f"topic-{t:03d}" for t in range(max(1, topics))]
    for counter in _TOPIC_COUNTERS:
        samples = [("", 1.0e12)] + [(f'{{topic="{t}",}}', 2.0e10 + i) for i, t in enumerate(names)]
        bean = f"kafka.server<type=BrokerTopicMetrics, name={counter}PerSec"
        _family(lines, f"kafka_server_brokertopicmetrics_{counter}_total", "counter", bean, samples)
    for series, kind, bean in _PARTITION_SERIES:
        samples = [
            (f'{{topic="{names[p % len(names)]}",partition="{p // len(names)}",}}', 1.234e9 + p)
            for p in range(partitions)
        ]
        _family(lines, series, kind, bean, samples)
    samples = [(f'{{request="{r}",quantile="{q}",}}', 3.5) for r in _REQUESTS for q in _QUANTILES]
    _family(
        lines,
        "kafka_network_requestmetrics_totaltimems",
        "gauge",
        "kafka.network<type=RequestMetrics",
        samples,
    )
    lines += ["# HELP process_open_fds Number of open file descriptors.", "# TYPE process_open_fds gauge"]
    lines.append(f"process_open_fds {3.0 * partitions + 200.0!r}")
    lines += [
        "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.",
        "# TYPE node_cpu_seconds_total counter",
    ]
    lines += [
        f'node_cpu_seconds_total{{cpu="{c}",mode="{m}"}} 123456.78' for c in range(16) for m in _CPU_MODES
    ]
    for name in ("read_bytes", "written_bytes", "io_time_seconds", "reads_completed", "writes_completed"):
        lines += [f"# HELP node_disk_{name}_total Disk statistic.", f"# TYPE node_disk_{name}_total counter"]
        lines += [f'node_disk_{name}_total{{device="nvme{d}n1"}} 9.87654321e+11' for d in range(4)]
    for name in ("MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached", "SwapTotal", "SwapFree"):
        lines += [
            f"# HELP node_memory_{name}_bytes Memory information field.",
            f"# TYPE node_memory_{name}_bytes gauge",
        ]
        lines.append(f"node_memory_{name}_bytes 6.8719476736e+10")
    return ("\n".join(lines) + "\n").encode()


# --- the endpoints (child process) ---------------------------------------------------------------------


@dataclass
class _Counts:
    lock: threading.Lock = field(default_factory=threading.Lock)
    connections: int = 0
    requests: int = 0


def serve(brokers: int, body: bytes, nodelay: bool, cert_dir: str | None) -> None:
    """Run the brokers' endpoints and a stats endpoint; print their ports as JSON; serve until stdin ends."""
    counts = _Counts()

    class Broker(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = nodelay

        def setup(self) -> None:
            super().setup()
            with counts.lock:
                counts.connections += 1

        def do_GET(self) -> None:
            with counts.lock:
                counts.requests += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Stats(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with counts.lock:
                data = json.dumps({"connections": counts.connections, "requests": counts.requests}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Broker) for _ in range(brokers)]
    if cert_dir is not None:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(os.path.join(cert_dir, "cert.pem"), os.path.join(cert_dir, "key.pem"))
        for server in servers:  # the handshake happens in the connection's own thread, on its first read
            server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    stats = ThreadingHTTPServer(("127.0.0.1", 0), Stats)
    for server in [*servers, stats]:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ports = [s.server_address[1] for s in servers]
    print(json.dumps({"brokers": ports, "stats": stats.server_address[1]}), flush=True)
    sys.stdin.read()


# --- urllib, as the scraper used it before ---------------------------------------------------------------

_CHUNK_BYTES = 64 * 1024


class UrllibFetcher:
    """The scraper's fetcher before httpx, unchanged: urllib, no proxies, a new connection per fetch."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, user_agent: str = "kafka-health") -> None:
        self.max_bytes = max_bytes
        self.user_agent = user_agent
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def fetch(self, url: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": self.user_agent})
        try:
            with self._opener.open(request, timeout=timeout) as response:
                body = self._read(response, deadline, timeout)
                charset = response.headers.get_content_charset() or "utf-8"
        except urllib.error.HTTPError as exc:
            exc.close()
            raise FetchError(f"HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise FetchTimeoutError(f"no answer within {timeout:g} s") from None
            raise FetchError(f"cannot connect: {exc.reason}") from None
        except TimeoutError:
            raise FetchTimeoutError(f"no answer within {timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}") from None
        try:
            return body.decode(charset, errors="replace")
        except LookupError:
            return body.decode("utf-8", errors="replace")

    def _read(self, response: Any, deadline: float, timeout: float) -> bytes:
        chunks, size = [], 0
        while chunk := response.read(_CHUNK_BYTES):
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchError(f"response larger than {self.max_bytes} bytes")
            if time.monotonic() > deadline:
                raise FetchTimeoutError(f"body not complete within {timeout:g} s")
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        pass


class SharedHttpxFetcher(HttpFetcher):
    """The scraper's fetcher with one httpx client (one connection pool) for every broker: what the scraper
    does not do, measured to show why."""

    def __init__(self) -> None:
        super().__init__()
        self._shared: httpx.Client | None = None

    @contextlib.contextmanager
    def _checkout(self, url: str) -> Iterator[httpx.Client]:
        with self._lock:
            if self._shared is None:
                self._shared = httpx.Client(
                    headers={"Accept": ACCEPT, "Accept-Encoding": "identity", "User-Agent": self.user_agent},
                    verify=ssl.create_default_context(),
                    trust_env=False,
                    follow_redirects=True,
                    limits=httpx.Limits(
                        max_connections=None, max_keepalive_connections=None, keepalive_expiry=KEEPALIVE_S
                    ),
                )
        yield self._shared

    def close(self) -> None:
        super().close()
        if self._shared is not None:
            self._shared.close()


FETCHERS: dict[str, Callable[[], UrllibFetcher | HttpFetcher]] = {
    "urllib": UrllibFetcher,
    "httpx": HttpFetcher,
    "httpx-shared": SharedHttpxFetcher,
}


def self_signed_certificate(directory: str) -> None:
    """A certificate for 127.0.0.1, valid for a day, made by the openssl command line."""
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            os.path.join(directory, "key.pem"),
            "-out",
            os.path.join(directory, "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )


# --- measuring ---------------------------------------------------------------------------------------------


@dataclass
class Series:
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    connections: int = 0


@dataclass
class Contender:
    name: str
    fetcher: UrllibFetcher | HttpFetcher
    fetch: Series = field(default_factory=Series)
    collector: Series = field(default_factory=Series)


def _stats(port: int) -> dict[str, int]:
    result: dict[str, int] = httpx.get(f"http://127.0.0.1:{port}/", trust_env=False, timeout=10).json()
    return result


def _timed(run: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def fetch_round(
    fetcher: MetricsFetcher, urls: Sequence[str], pool: ThreadPoolExecutor, timeout: float
) -> None:
    for text in pool.map(lambda u: fetcher.fetch(u, timeout), urls):
        if not text:
            raise RuntimeError("empty body")


def measure(
    contenders: list[Contender],
    rounds: int,
    stats_port: int,
    run: Callable[[Contender], None],
    series: Callable[[Contender], Series],
) -> None:
    for contender in contenders:
        run(contender)  # warm-up: connections, imports, caches
    for i in range(rounds):
        order = contenders if i % 2 == 0 else contenders[::-1]
        for contender in order:
            before = _stats(stats_port)["connections"]
            wall, cpu = _timed(functools.partial(run, contender))
            target = series(contender)
            target.wall_s.append(wall)
            target.cpu_s.append(cpu)
            target.connections += _stats(stats_port)["connections"] - before


def report(
    title: str, contenders: list[Contender], series: Callable[[Contender], Series], brokers: int
) -> None:
    print(title)
    for contender in contenders:
        s = series(contender)
        if not s.wall_s:
            continue
        walls = sorted(s.wall_s)
        p95 = walls[min(len(walls) - 1, round(0.95 * (len(walls) - 1)))]
        cpu_ms = statistics.median(s.cpu_s) / brokers * 1000
        print(
            f"  {contender.name:12s} wall per round median {statistics.median(walls) * 1000:8.1f} ms, "
            f"p95 {p95 * 1000:8.1f} ms; CPU per broker scrape {cpu_ms:6.2f} ms; "
            f"connections per round {s.connections / len(walls):.1f}"
        )


def start_endpoints(args: argparse.Namespace, cert_dir: str | None) -> tuple[subprocess.Popen[str], Any]:
    command = [sys.executable, __file__, "--serve", "--brokers", str(args.brokers)]
    command += ["--partitions", str(args.partitions), "--topics", str(args.topics)]
    command += ["--nodelay"] if args.nodelay else []
    command += ["--cert-dir", cert_dir] if cert_dir is not None else []
    child = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    return child, json.loads(child.stdout.readline())


def run(args: argparse.Namespace, body: bytes, cert_dir: str | None) -> None:
    child, ports = start_endpoints(args, cert_dir)
    scheme = "https" if cert_dir is not None else "http"
    urls = [f"{scheme}://127.0.0.1:{p}/metrics" for p in ports["brokers"]]
    contenders = [Contender(name, FETCHERS[name]()) for name in args.fetchers.split(",")]
    collectors: dict[str, MetricsCollector] = {}
    try:
        with ThreadPoolExecutor(args.workers) as pool:
            measure(
                contenders,
                args.rounds,
                ports["stats"],
                lambda c: fetch_round(c.fetcher, urls, pool, args.timeout),
                lambda c: c.fetch,
            )
        report(f"fetch     {args.rounds} rounds", contenders, lambda c: c.fetch, args.brokers)
        if args.collector_rounds <= 0:
            return
        registrations = {
            b: BrokerRegistration(b, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092),))
            for b in range(len(urls))
        }
        settings = MetricsSettings(urls=dict(enumerate(urls)), timeout_s=120.0, max_workers=args.workers)
        collectors.update((c.name, MetricsCollector(settings, fetcher=c.fetcher)) for c in contenders)

        def scrape(contender: Contender) -> None:
            failures = collectors[contender.name].scrape(registrations).failures
            if failures:
                raise RuntimeError(f"scrape failed: {failures}")

        measure(contenders, args.collector_rounds, ports["stats"], scrape, lambda c: c.collector)
        report(f"collector {args.collector_rounds} rounds", contenders, lambda c: c.collector, args.brokers)
    finally:
        for collector in collectors.values():
            collector.close()
        for contender in contenders:
            contender.fetcher.close()
        if child.stdin is not None:
            child.stdin.close()
        child.wait(10)


# --- the large-cluster round (--log-sizes) ---------------------------------------------------------------


_MOUNTPOINTS = ("/var/lib/kafka/data-0", "/var/lib/kafka/data-1")


def log_dir_lines(used: float) -> str:
    """node_exporter's filesystem gauges for the root filesystem and two log dirs, and the fd limit."""
    size = 2.0e12
    lines = [
        "# HELP node_filesystem_size_bytes Filesystem size in bytes.",
        "# TYPE node_filesystem_size_bytes gauge",
    ]
    mounts = [("/dev/root", "/", 5.0e10, 2.0e10)] + [
        (f"/dev/nvme{i + 1}n1", m, size, size - used) for i, m in enumerate(_MOUNTPOINTS)
    ]
    lines += [
        f'node_filesystem_size_bytes{{device="{d}",fstype="xfs",mountpoint="{m}"}} {s!r}'
        for d, m, s, _ in mounts
    ]
    lines += [
        "# HELP node_filesystem_avail_bytes Filesystem space available.",
        "# TYPE node_filesystem_avail_bytes gauge",
    ]
    lines += [
        f'node_filesystem_avail_bytes{{device="{d}",fstype="xfs",mountpoint="{m}"}} {a!r}'
        for d, m, _, a in mounts
    ]
    lines += [
        "# HELP process_max_fds Maximum number of open file descriptors.",
        "# TYPE process_max_fds gauge",
    ]
    lines.append("process_max_fds 1048576.0")
    return "\n".join(lines) + "\n"


FULL_EVERY = 50
"""Every 50th broker's log dirs are 97 % full (rule 14 pages them): 20 brokers of 1,000, so that the rules
and the cause linking have findings to make."""


class MemoryFetcher:
    """Every broker's text from memory: the same partition series, the log dirs a little fuller each round
    (every :data:`FULL_EVERY` th broker's 97 % full)."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.used = 1.0e12

    def fetch(self, url: str, timeout: float) -> str:
        broker = int(url.split("//b", 1)[1].split(":", 1)[0])
        return self.body + log_dir_lines(1.94e12 + self.used / 1e3 if broker % FULL_EVERY == 0 else self.used)


def _cpu_and_wall(run: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return time.process_time() - cpu, time.perf_counter() - wall


def log_size_rounds(args: argparse.Namespace) -> None:
    from collectors.disks import DiskModel

    replicas = args.cluster_partitions * args.replication_factor // args.brokers
    body = exposition(replicas, args.topics).decode()
    fetcher = MemoryFetcher(body)
    lines = (body + log_dir_lines(0.0)).count("\n")
    print(
        f"{args.brokers} brokers x {replicas} replicas ({args.brokers * replicas:,} log size series), "
        f"{len(body):,} bytes and {lines:,} lines per broker, {args.workers} workers, no HTTP"
    )
    registrations = {
        b: BrokerRegistration(b, (BrokerEndpoint("PLAINTEXT", f"b{b}", 9092),)) for b in range(args.brokers)
    }
    settings = MetricsSettings(
        url_template="http://{host}:7071/metrics", timeout_s=600.0, max_workers=args.workers
    )
    model = DiskModel(settings.disk_fit_window_s, settings.log_dir_mountpoints)
    rows: list[tuple[float, float, float, float, float, float]] = []
    with MetricsCollector(settings, fetcher=fetcher) as collector:
        for round_ in range(args.collector_rounds + 1):
            fetcher.used += 5.0e7
            scraped: list[Any] = []
            scrape_cpu, scrape_wall = _cpu_and_wall(
                functools.partial(lambda out: out.append(collector.scrape(registrations)), scraped)
            )
            update_cpu, update_wall = _cpu_and_wall(functools.partial(model.observe_scrape, scraped[0]))
            fit_cpu, fit_wall = _cpu_and_wall(model.all_disks)
            sizes = sum(len(s.log_sizes) for s in scraped[0].scrapes.values())
            assert not scraped[0].failures, scraped[0].failures
            assert sizes == args.brokers * replicas, sizes
            if round_:  # the first is a warm-up (no rates yet)
                rows.append((scrape_cpu, scrape_wall, update_cpu, update_wall, fit_cpu, fit_wall))
    med = [statistics.median(column) for column in zip(*rows, strict=True)]
    print(f"median of {len(rows)} rounds (CPU / wall, seconds):")
    print(f"  scrape (parse, BrokerScrape, name table)  {med[0]:7.2f} / {med[1]:7.2f}")
    print(f"  disk model update                         {med[2]:7.2f} / {med[3]:7.2f}")
    print(f"  disk records of every broker (the fits)   {med[4]:7.2f} / {med[5]:7.2f}")
    cpu, wall = med[0] + med[2] + med[4], med[1] + med[3] + med[5]
    print(f"  round                                     {cpu:7.2f} / {wall:7.2f}")
    rule_rounds(args, scraped[0], model.all_disks())


@dataclass(frozen=True)
class _LiveState:
    """The service's live state as the incident lane reads it (``app.incidents.observe.LiveState``)."""

    snapshot: Any
    report: Any
    scrape: Any
    last_good_at: float | None


def rule_rounds(args: argparse.Namespace, scrape: Any, disks: Any) -> None:
    """The incident lane's evaluation over the round's scrape and disks, on the bulk cluster's snapshot
    (``bench/service.py``: 1,000 topics, 1 % of the partitions under-replicated, 0.1 % offline), each part
    as the lane runs it (``app.incidents.lane.IncidentLane._evaluate``): the brokers' resources, the health
    state (report and document: rules 1-7's input), rules 14-18 alone, every incident rule, and the
    lifecycle with the cause linking (every cause finding held, the most linking there can be)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench/ is on it
    from analytics.lifecycle import advance_timed
    from analytics.model import Window, fingerprint
    from analytics.rules import RuleContext, RuleSettings, evaluate, link_causes
    from analytics.rules.causes import CAUSE_RULES
    from analytics.rules.resources import (
        rule_14_log_dir_filling,
        rule_15_log_dir_offline,
        rule_16_broker_saturated,
        rule_17_file_descriptors,
        rule_18_isr_flapping,
    )
    from app.embedded.reference_cluster.bulk.plan import BulkClusterSpec
    from app.incidents.observe import HealthObserver
    from app.incidents.resources import ResourceObserver
    from bench.service import build_snapshot
    from collectors.health import assess

    topics = 1000
    spec = BulkClusterSpec(
        brokers=args.brokers,
        topics=topics,
        partitions_per_topic=args.cluster_partitions // topics,
        under_replicated_fraction=0.01,
        offline_fraction=0.001,
        non_preferred_fraction=0.02,
    )
    snapshot = build_snapshot(spec)
    settings = RuleSettings()
    cluster = snapshot.cluster_id or "unknown"
    resource_rules = (
        rule_14_log_dir_filling,
        rule_15_log_dir_offline,
        rule_16_broker_saturated,
        rule_17_file_descriptors,
        rule_18_isr_flapping,
    )

    def one_round() -> tuple[tuple[float, ...], tuple[int, int, int]]:
        now = time.time()
        observer = ResourceObserver(settings.isr_flap_window_s)
        observer.record(now, snapshot)
        resources: dict[int, Any] = {}
        health: list[Any] = []
        found: list[Any] = []
        evaluations: list[Any] = []
        linked: list[Any] = []

        def health_state() -> None:
            report = assess(snapshot)
            health.append(HealthObserver("bench").observe(_LiveState(snapshot, report, scrape, now), now))

        def lifecycle() -> None:
            evaluation = evaluations[0]
            advance_timed(cluster, now, evaluation, {}, settings)
            held = {
                fingerprint(cluster, f.rule, f.subject) for f in evaluation.findings if f.rule in CAUSE_RULES
            }
            linked.append(link_causes(evaluation, cluster, held))
            if linked[0] is not evaluation:
                advance_timed(cluster, now, linked[0], {}, settings)

        timings: tuple[float, ...] = _cpu_and_wall(
            lambda: resources.update(observer.observe(snapshot, scrape, disks, now))
        )
        timings += _cpu_and_wall(health_state)
        ctx = RuleContext(
            window=Window(cluster, now, now),
            now=now,
            health=health[0],
            history=(),
            load=None,
            settings=settings,
            stalled_actions=(),
            resources=resources,
        )
        timings += _cpu_and_wall(lambda: found.extend(f for rule in resource_rules for f in rule(ctx)))
        timings += _cpu_and_wall(lambda: evaluations.append(evaluate(ctx, "incident")))
        timings += _cpu_and_wall(lifecycle)
        named = sum(1 for f in linked[0].findings if f.evidence.get("causes"))
        return timings, (len(found), len(evaluations[0].findings), named)

    one_round()  # warm-up
    rounds = [one_round() for _ in range(args.collector_rounds)]
    rows = [timings for timings, _ in rounds]
    counts = rounds[-1][1]
    med = [statistics.median(column) for column in zip(*rows, strict=True)]
    print(
        f"incident lane on the bulk cluster's snapshot ({spec.partitions:,} partitions, {args.brokers} "
        f"brokers): rules 14-18 found {counts[0]}, all incident rules {counts[1]}, {counts[2]} pages "
        f"name a cause; median of {len(rows)} rounds (CPU / wall, seconds):"
    )
    print(f"  brokers' resources                        {med[0]:7.3f} / {med[1]:7.3f}")
    print(f"  health state (report and document)        {med[2]:7.3f} / {med[3]:7.3f}")
    print(f"  rules 14-18                               {med[4]:7.3f} / {med[5]:7.3f}")
    print(f"  every incident rule (1-7, 10-18)          {med[6]:7.3f} / {med[7]:7.3f}")
    print(f"  lifecycle and cause linking               {med[8]:7.3f} / {med[9]:7.3f}")
    cpu = med[0] + med[2] + med[6] + med[8]
    wall = med[1] + med[3] + med[7] + med[9]
    print(f"  evaluation (resources, health, rules, lifecycle) {cpu:7.3f} / {wall:7.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.log_sizes:
        log_size_rounds(args)
        return 0
    body = exposition(args.partitions, args.topics)
    if args.serve:
        serve(args.brokers, body, args.nodelay, args.cert_dir)
        return 0
    lines = body.count(b"\n")
    print(
        f"endpoints {args.brokers} brokers, {len(body):,} bytes and {lines:,} lines each "
        f"({args.partitions} partitions), {'HTTPS' if args.tls else 'HTTP'}, Nagle "
        f"{'off' if args.nodelay else 'on'}; {args.workers} workers, timeout {args.timeout:g} s"
    )
    if not args.tls:
        run(args, body, None)
        return 0
    with tempfile.TemporaryDirectory() as cert_dir:
        self_signed_certificate(cert_dir)
        os.environ["SSL_CERT_FILE"] = os.path.join(cert_dir, "cert.pem")
        run(args, body, cert_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
