"""The ZooKeeper collector: a pipelined full scan of a ZK-mode Kafka cluster, then one-shot watches that keep
an immutable :class:`~collectors.kafka.model.ClusterSnapshot` current without rescanning.

This module runs the scans and publishes the snapshots (:class:`ZooKeeperCollector`, :func:`scan`, the
public API). What to read and how a reply changes the cluster is :mod:`collectors.zookeeper.cluster_model` (no
I/O); the ZooKeeper sessions that do the reading are :mod:`collectors.zookeeper.wire`
(:class:`~collectors.zookeeper.wire.WireReader` by default, :class:`~collectors.zookeeper.wire.KazooReader`
for TLS/SASL).

How it reads (docs/kafka-reference.md §1): the model's root reads first, then whatever each reply names, level
by level, spread over several sessions (a path always on the same one, so its replies stay in order), every
session keeping a window of requests in flight, never one round trip per znode (against ZooKeeper 3.6+ the
wire reader batches up to ``batch`` reads per multiRead request). Every read sets a watch;
when one fires, that znode alone is read again (re-arming the watch) and changes that arrive together are
published as one new snapshot version.

Sessions: a lost connection loses the watches (ZooKeeper ties them to the connection; kazoo does not
restore them, the wire reader opens a new session), so the collector publishes the last snapshot again as
``stale`` and, once every session is back, runs a full resync before it publishes ``stale=False`` with a
new ``last_good_at``. A malformed, unreadable or vanished znode is recorded in ``snapshot.errors`` (path +
reason) and skipped.

Errors: :class:`ZooKeeperCollectorError` (the base), :class:`ZooKeeperUnreachableError` (raised by the
readers, defined with them in :mod:`collectors.zookeeper.wire`) and :class:`ScanTimeoutError`.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from collectors.kafka import zkdata
from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.zkclient import ZooKeeperSecurity
from collectors.zookeeper.cluster_model import ClusterModel, read_for_event
from collectors.zookeeper.wire import (
    Item,
    Read,
    ReaderFactory,
    ReaderSpec,
    Reply,
    SessionEvent,
    WatchEvent,
    WireReader,
    ZkReader,
    ZooKeeperCollectorError,
    ZooKeeperUnreachableError,
    secured_readers,
)

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_CONNECTIONS",
    "DEFAULT_IN_FLIGHT",
    "DEFAULT_SESSION_TIMEOUT_S",
    "DEFAULT_START_TIMEOUT_S",
    "PUBLISH_LINGER_S",
    "PUBLISH_MAX_DELAY_S",
    "ScanStats",
    "ScanTimeoutError",
    "ZooKeeperCollector",
    "ZooKeeperCollectorError",
    "ZooKeeperUnreachableError",
    "scan",
]

log = logging.getLogger(__name__)

DEFAULT_CONNECTIONS = 4
DEFAULT_IN_FLIGHT = 256
"""Reads in flight per session. ZooKeeper stops reading a connection once ~1,000 requests are queued
server-wide (``globalOutstandingLimit``), so 4 × 256 keeps it busy without being throttled (batched, that
is 4 × 4 multiRead requests)."""
DEFAULT_BATCH = 64
"""Reads per multiRead request where the server has multiRead (ZooKeeper 3.6+; see
:class:`~collectors.zookeeper.wire.WireReader`). Measured at 200k partitions: 32, 64 and 128 scan within
noise of each other; 64 keeps a reply of 64 topic znodes of 200 partitions at about 250 KB."""
DEFAULT_SESSION_TIMEOUT_S = 18.0
"""Kafka's own ``zookeeper.session.timeout.ms`` default (2.5+)."""
DEFAULT_START_TIMEOUT_S = 60.0
PUBLISH_LINGER_S = 0.005
"""Changes arriving within this time of each other go into one snapshot version."""
PUBLISH_MAX_DELAY_S = 0.2
"""A change waits at most this long for others before it is published."""


# --- errors ------------------------------------------------------------------------------------------


class ScanTimeoutError(ZooKeeperCollectorError, TimeoutError):
    """The first full scan did not complete in time."""


# --- the collector -----------------------------------------------------------------------------------


class ScanStats(NamedTuple):
    """The last full scan: wall time, reads issued (znodes and children lists) and what it found."""

    seconds: float
    reads: int
    brokers: int
    topics: int
    partitions: int

    @property
    def reads_per_second(self) -> float:
        return self.reads / self.seconds if self.seconds > 0 else 0.0


class _GcPause:
    """Pauses Python's cyclic garbage collector (process-wide) while any full scan runs.

    A scan builds about a million long-lived objects, and the collector's generation-2 passes walk all of
    them again every time the heap has grown by a quarter: about 1 s of a 200k-partition scan (15%).
    Reference counting frees everything else meanwhile; only cyclic garbage waits for the scan to end.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_enabled = False

    def acquire(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._was_enabled:
                gc.enable()


_GC_PAUSE = _GcPause()


def _empty_snapshot() -> ClusterSnapshot:
    return ClusterModel().build(version=0, taken_at=time.time(), last_good_at=None, stale=True)


class ZooKeeperCollector:
    """Keeps :attr:`snapshot` in line with a ZK-mode Kafka cluster's ZooKeeper.

    Lifecycle as every collector: ``__init__`` validates (no I/O), :meth:`start` connects ``connections``
    sessions and waits for the first full scan, :meth:`stop` closes them. One thread ("zk-collector")
    applies replies and watch events and publishes each new snapshot version by swapping one reference,
    so readers on any thread just take :attr:`snapshot`. ``on_change(snapshot)`` runs on that thread after
    every new version; it must be quick and must not raise (exceptions are logged).

    ``watch=False`` makes a one-shot reader (:func:`scan`): no watches are left on the server.
    ``pause_gc`` pauses Python's cyclic garbage collector during full scans (see :class:`_GcPause`).
    ``reader_factory`` builds the sessions (default :class:`~collectors.zookeeper.wire.WireReader`;
    :class:`~collectors.zookeeper.wire.KazooReader` or a fake). ``in_flight`` reads at most are in flight
    per session, ``batch`` of them at most in one multiRead request (the wire reader against ZooKeeper
    3.6+; 1 turns batching off). ``security`` (digest, SASL, TLS: :mod:`collectors.zookeeper.security`)
    makes the sessions :class:`~collectors.zookeeper.wire.KazooReader` with those credentials.
    """

    def __init__(
        self,
        connect: str,
        *,
        connections: int = DEFAULT_CONNECTIONS,
        in_flight: int = DEFAULT_IN_FLIGHT,
        batch: int = DEFAULT_BATCH,
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
        on_change: Callable[[ClusterSnapshot], None] | None = None,
        watch: bool = True,
        reader_factory: ReaderFactory | None = None,
        pause_gc: bool = True,
        security: ZooKeeperSecurity | None = None,
    ) -> None:
        servers, chroot = zkdata.parse_connect_string(connect)
        if connections < 1 or in_flight < 1 or batch < 1:
            raise ValueError(
                "connections, in_flight and batch must be at least 1, "
                f"got {connections}, {in_flight}, {batch}"
            )
        if not session_timeout_s > 0:
            raise ValueError(f"session_timeout_s must be positive, got {session_timeout_s}")
        self.connect = connect
        self.batch = batch
        self._specs = [
            ReaderSpec(tuple(servers), chroot, session_timeout_s, in_flight, i, batch)
            for i in range(connections)
        ]
        if reader_factory is None:
            reader_factory = (
                secured_readers(security) if security is not None and security.secured else WireReader
            )
        self._factory: ReaderFactory = reader_factory
        self._on_change = on_change
        self._watch = watch
        self._pause_gc = pause_gc
        self._gc_paused = False
        self._queue: queue.SimpleQueue[list[Item] | None] = queue.SimpleQueue()
        self._readers: list[ZkReader] = []
        self._shards: list[list[Read]] = []
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._first_good = threading.Event()
        self._snapshot = _empty_snapshot()
        self._model = ClusterModel(watch)
        self._up: set[int] = set()
        self._need_resync = True
        self._scanning = False
        self._scan_started = 0.0
        self._scan_reads_before = 0
        self._outstanding = 0
        self._last_item_at = 0.0
        self._dirty_since: float | None = None
        self.full_scans = 0
        """Full scans started: 1 after :meth:`start`, +1 per resync after a lost session."""
        self.reads = 0
        """Reads issued since start (scans and watch-triggered re-reads)."""
        self.last_scan: ScanStats | None = None

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    @property
    def readers(self) -> tuple[ZkReader, ...]:
        """The sessions (tests expire them; benchmarks inspect them)."""
        return tuple(self._readers)

    @property
    def in_sync(self) -> bool:
        """True while the watches keep the snapshot current (a quiet cluster publishes nothing new, so
        ``snapshot.last_good_at`` can be old while this is True)."""
        return not self._snapshot.stale and not self._need_resync

    def start(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Connect every session and wait for the first full scan; on failure everything is closed again.

        Raises :class:`ZooKeeperUnreachableError` or :class:`ScanTimeoutError`.
        """
        if self._thread is not None:
            raise RuntimeError("the collector was started already")
        deadline = time.monotonic() + timeout
        self._readers = [self._factory(spec, self._queue.put) for spec in self._specs]
        self._shards = [[] for _ in self._readers]
        self._thread = threading.Thread(target=self._run, name="zk-collector", daemon=True)
        self._thread.start()
        try:
            for reader in self._readers:
                reader.start(max(deadline - time.monotonic(), 0.1))
            if not self._first_good.wait(max(deadline - time.monotonic(), 0.0)):
                raise ScanTimeoutError(f"the full scan of {self.connect} did not finish within {timeout:g}s")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for reader in self._readers:
            try:
                reader.stop()
            except Exception:
                log.exception("error while closing a ZooKeeper session")
        self._queue.put(None)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)

    def __enter__(self) -> ZooKeeperCollector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the collector thread ---

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._resume_gc()

    def _loop(self) -> None:
        while True:
            wait = self._wait_time()
            try:
                items = (
                    self._queue.get(timeout=wait) if wait is None or wait > 0 else self._queue.get_nowait()
                )
            except queue.Empty:
                items = []
            if items is None:
                return
            if items:
                self._handle(items)
            try:
                self._maybe_publish()
            except Exception:
                log.exception("publishing a ZooKeeper snapshot failed")

    def _handle(self, items: list[Item]) -> None:
        model = self._model
        for item in items:
            try:
                if type(item) is Reply:
                    self._outstanding -= 1
                    follow = model.apply(item)
                    if follow:
                        self._submit(follow)
                elif type(item) is WatchEvent:
                    read = read_for_event(item)
                    if read is not None:
                        self._submit([read])
                elif type(item) is SessionEvent:
                    self._on_session(item)
                    model = self._model
            except Exception:
                log.exception("applying %r failed", item)
        self._flush()
        self._last_item_at = time.monotonic()
        if model.dirty and self._dirty_since is None:
            self._dirty_since = self._last_item_at

    def _submit(self, reads: list[Read]) -> None:
        """Queue reads for their sessions; :meth:`_flush` hands them over, once per batch of items."""
        self._outstanding += len(reads)
        self.reads += len(reads)
        shards = self._shards
        if len(shards) == 1:
            shards[0].extend(reads)
            return
        for read in reads:  # a path always goes to the same session, so its replies stay in order
            shards[hash(read.path) % len(shards)].append(read)

    def _flush(self) -> None:
        for reader, shard in zip(self._readers, self._shards, strict=True):
            if shard:
                reader.submit(shard)
                shard.clear()

    def _on_session(self, event: SessionEvent) -> None:
        if event.connected:
            self._up.add(event.reader)
            if self._need_resync and len(self._up) == len(self._readers):
                self._start_scan()
            return
        self._up.discard(event.reader)
        if self._need_resync:
            return
        self._need_resync = True
        log.warning(
            "ZooKeeper session %d lost (%s): snapshot stale until resynced", event.reader, event.detail
        )
        if not self._snapshot.stale:
            last = self._snapshot
            self._publish_snapshot(replace(last, version=last.version + 1, taken_at=time.time(), stale=True))

    def _start_scan(self) -> None:
        self._need_resync = False
        self._scanning = True
        self.full_scans += 1
        if self.full_scans > 1:
            log.info("resyncing with ZooKeeper (full scan %d)", self.full_scans)
        self._model = ClusterModel(self._watch)
        self._dirty_since = None
        if self._pause_gc and not self._gc_paused:
            _GC_PAUSE.acquire()
            self._gc_paused = True
        self._scan_started = time.monotonic()
        self._scan_reads_before = self.reads
        self._submit(self._model.root_reads())

    def _wait_time(self) -> float | None:
        if self._scanning or self._need_resync or self._dirty_since is None:
            return None  # nothing to publish until a reply or event arrives
        deadline = self._dirty_since + PUBLISH_MAX_DELAY_S
        if self._outstanding <= 0:
            deadline = min(deadline, self._last_item_at + PUBLISH_LINGER_S)
        return max(deadline - time.monotonic(), 0.0)

    def _maybe_publish(self) -> None:
        if self._scanning:
            if self._outstanding <= 0:
                self._finish_scan()
            return
        if self._dirty_since is None or self._need_resync:
            return
        now = time.monotonic()
        idle = self._outstanding <= 0 and now - self._last_item_at >= PUBLISH_LINGER_S
        if idle or now - self._dirty_since >= PUBLISH_MAX_DELAY_S:
            self._publish_model()

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            _GC_PAUSE.release()

    def _finish_scan(self) -> None:
        self._scanning = False
        if self._need_resync:
            self._resume_gc()
            return  # a session broke during the scan: the next reconnect scans again
        model = self._model
        self.last_scan = ScanStats(
            seconds=time.monotonic() - self._scan_started,
            reads=self.reads - self._scan_reads_before,
            brokers=len(model.brokers),
            topics=len(model.assignments),
            partitions=model.partition_count,
        )
        log.info("full ZooKeeper scan %d: %s", self.full_scans, self.last_scan)
        self._publish_model()
        self._first_good.set()
        # Only now: the first collection after the pause walks every object the scan made (0.2-0.4 s at
        # 200k partitions), which would otherwise come before the snapshot that ends the stale spell.
        self._resume_gc()

    def _publish_model(self) -> None:
        self._dirty_since = None
        now = time.time()
        self._publish_snapshot(self._model.build(self._snapshot.version + 1, now, now, stale=False))

    def _publish_snapshot(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot
        if self._on_change is not None:
            try:
                self._on_change(snapshot)
            except Exception:
                log.exception("on_change callback failed")


def scan(
    connect: str,
    timeout: float = DEFAULT_START_TIMEOUT_S,
    *,
    connections: int = DEFAULT_CONNECTIONS,
    security: ZooKeeperSecurity | None = None,
) -> ClusterSnapshot:
    """Read the cluster at ``connect`` once (no watches left behind), for ``kafka-health describe``.

    Raises ValueError for a bad connect string, :class:`ZooKeeperUnreachableError` or
    :class:`ScanTimeoutError` when the cluster cannot be read in ``timeout`` seconds.
    """
    collector = ZooKeeperCollector(connect, connections=connections, watch=False, security=security)
    collector.start(timeout)
    try:
        return collector.snapshot
    finally:
        collector.stop()
