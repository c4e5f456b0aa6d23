"""Bulk mode of the reference cluster: a large ZK-mode Kafka cluster written straight into ZooKeeper.

For benchmarks of the collectors (a full scan of 200k partitions in ≤ 10 s): no broker and no controller
runs afterwards; ZooKeeper just holds, znode for znode, what a ZK-mode Kafka cluster would have written:
Kafka's persistent paths, ``/cluster/id``, broker registrations, ``/controller_epoch`` and ``/controller``,
and per topic its config, its assignment (Kafka's placement) and one state znode per partition, healthy or,
by the spec's fault fractions, under-replicated, offline or led by a non-preferred replica.

Speed comes from ZooKeeper's multi-op: up to ``batch_ops`` operations per transaction, many transactions
in flight per session, and several sessions in parallel, each writing whole topics. ZooKeeper applies a
session's requests in order and checks a create against the changes of earlier requests even before they
are committed, so a partition znode may follow its topic znode in a later transaction still in flight.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.serialization import Create, Delete, SetData
from kazoo.security import OPEN_ACL_UNSAFE

from app.embedded.reference_cluster.bulk.plan import (
    BulkClusterSpec,
    BulkWriteError,
    ClusterExistsError,
    ClusterPlan,
    FaultKind,
    Op,
    TopicPlan,
    batches,
    cluster_ops,
    create_op,
    persistent_paths_with_parents,
    plan_cluster,
    topic_ops,
)
from collectors.kafka import zkdata

DEFAULT_CONNECTIONS = 2
DEFAULT_BATCH_OPS = 500
DEFAULT_IN_FLIGHT = 32
"""Measured on 2 cores against the embedded ZooKeeper (``bench/bulk_write.py``, 404k znodes), with other
jobs sharing the machine: the write is CPU-bound, about 6 s of Python and 9 s of the ZooKeeper JVM, and
took 7.6-13 s. 1, 2 or 4 sessions, 250-2,000 ops per transaction and 4-64 in flight all fell within that
noise (the CPU total hardly moved); 2 sessions, 500 ops and 32 in flight were among the fastest."""

REQUEST_TIMEOUT_S = 120.0
SESSION_TIMEOUT_S = 30.0
START_TIMEOUT_S = 15.0
LIST_WINDOW = 512
PROGRESS_INTERVAL_S = 1.0
KAFKA_ROOT_PATHS: tuple[str, ...] = (
    "/admin",
    "/brokers",
    "/cluster",
    "/config",
    "/consumers",
    "/controller",
    "/controller_epoch",
    "/delegation_token",
    "/feature",
    "/isr_change_notification",
    "/kafka-acl",
    "/kafka-acl-changes",
    "/kafka-acl-extended",
    "/kafka-acl-extended-changes",
    "/latest_producer_id_block",
    "/log_dir_event_notification",
)
"""Every top-level znode a ZK-mode Kafka cluster writes; ``overwrite=True`` deletes these trees."""


# --- the report --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkWriteReport:
    """What was written and how fast; ``seconds`` covers planning and writing, not a prior deletion."""

    znodes: int
    seconds: float
    partitions: int
    brokers: int
    topics: int
    under_replicated: int
    offline: int
    non_preferred: int
    deleted_znodes: int = 0
    delete_seconds: float = 0.0

    @property
    def znodes_per_second(self) -> float:
        return self.znodes / self.seconds if self.seconds > 0 else 0.0

    @property
    def partitions_per_second(self) -> float:
        return self.partitions / self.seconds if self.seconds > 0 else 0.0


# --- ZooKeeper I/O -----------------------------------------------------------------------------------


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port,host:port/chroot`` → (hosts, chroot), the chroot without a trailing slash ('' if none)."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    if not hosts:
        raise ValueError(f"connect string {connect!r} names no ZooKeeper server")
    return hosts, chroot


@dataclass(slots=True)
class OpCount:
    """Ops and znodes (creates) done by one session; read by the main thread for progress."""

    ops: int = 0
    creates: int = 0

    def add(self, ops: Sequence[Op]) -> None:
        self.creates += sum(op.kind is Create for op in ops)
        self.ops += len(ops)


_T = TypeVar("_T")
_Job = Callable[[KazooClient, OpCount, threading.Event], None]


class _Pipeline:
    """Transactions on one session with up to ``window`` in flight; each result is checked, in order, and
    a failed one raises :class:`BulkWriteError` if ``strict``, else is only left out of the count."""

    def __init__(self, client: KazooClient, window: int, counter: OpCount, strict: bool = True) -> None:
        self._client = client
        self._strict = strict
        self._chroot: str = client.chroot or ""
        self._window = window
        self._counter = counter
        self._pending: deque[tuple[Any, list[Op]]] = deque()

    def commit(self, ops: list[Op]) -> None:
        txn = self._client.transaction()
        txn.operations.extend(self._request(op) for op in ops)
        self._pending.append((txn.commit_async(), ops))
        if len(self._pending) >= self._window:
            self._settle_oldest()

    def drain(self) -> None:
        while self._pending:
            self._settle_oldest()

    def _request(self, op: Op) -> Create | SetData | Delete:
        """kazoo's request tuples, built directly: ``TransactionRequest.create`` refuses null data."""
        path = self._chroot + op.path
        if op.kind is Create:
            return Create(path, op.data, OPEN_ACL_UNSAFE, 0)
        if op.kind is SetData:
            return SetData(path, op.data, -1)
        return Delete(path, -1)

    def _settle_oldest(self) -> None:
        result, ops = self._pending.popleft()
        try:
            outcomes = result.get(timeout=REQUEST_TIMEOUT_S)
        except (KazooException, self._client.handler.timeout_exception) as exc:
            raise BulkWriteError(f"a transaction of {len(ops)} ops failed: {exc!r}") from exc
        failures = [(op, o) for op, o in zip(ops, outcomes, strict=True) if isinstance(o, Exception)]
        if failures and not self._strict:
            return
        if failures:
            cause = [f for f in failures if not isinstance(f[1], RolledBackError | RuntimeInconsistency)]
            op, error = (cause or failures)[0]
            raise BulkWriteError(f"{op.kind.__name__} {op.path} failed: {type(error).__name__}")
        self._counter.add(ops)


def _write_stream(
    client: KazooClient,
    ops: Iterable[Op],
    batch_ops: int,
    in_flight: int,
    counter: OpCount,
    abort: threading.Event,
    strict: bool = True,
) -> None:
    """Write ``ops`` in order on one session; stop early when another session failed."""
    pipeline = _Pipeline(client, in_flight, counter, strict)
    for batch in batches(ops, batch_ops):
        if abort.is_set():
            return
        pipeline.commit(batch)
    pipeline.drain()


def _run_parallel(
    clients: Sequence[KazooClient], jobs: Sequence[_Job], on_tick: Callable[[OpCount], None] | None = None
) -> OpCount:
    """One job per session, each in its own thread; ``on_tick(total so far)`` about every second; the
    first error stops the others and is raised. Returns the jobs' counters summed."""
    counters = [OpCount() for _ in jobs]
    abort = threading.Event()
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="bulk-zk") as pool:
        futures = [
            pool.submit(job, client, counter, abort)
            for job, client, counter in zip(jobs, clients, counters, strict=True)
        ]
        pending: set[Future[None]] = set(futures)
        while pending:
            finished, pending = wait_futures(pending, timeout=PROGRESS_INTERVAL_S)
            if any(f.exception() is not None for f in finished):
                abort.set()
            if on_tick is not None:
                on_tick(_sum(counters))
    for future in futures:
        future.result()
    return _sum(counters)


def _sum(counters: Iterable[OpCount]) -> OpCount:
    total = OpCount()
    for counter in counters:
        total.ops += counter.ops
        total.creates += counter.creates
    return total


@contextlib.contextmanager
def _session(connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=connect, timeout=SESSION_TIMEOUT_S)
    try:
        client.start(timeout=START_TIMEOUT_S)
    except client.handler.timeout_exception:
        client.close()
        raise BulkWriteError(
            f"could not connect to ZooKeeper at {connect} within {START_TIMEOUT_S:g}s"
        ) from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def _sessions(connect: str, count: int) -> Iterator[list[KazooClient]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(_session(connect)) for _ in range(count)]


def _ensure_chroot(hosts: str, chroot: str) -> None:
    """Create the chroot through a session without chroot, with null data, as a Kafka broker does."""
    with _session(hosts) as client:
        parts = chroot.strip("/").split("/")
        for i in range(len(parts)):
            path = "/" + "/".join(parts[: i + 1])
            if client.exists(path) is None:
                txn = client.transaction()
                txn.operations.append(Create(path, None, OPEN_ACL_UNSAFE, 0))
                txn.commit()  # a NodeExistsError from a concurrent writer comes back as a result: fine


def _pipelined_gets(
    client: KazooClient, paths: Iterable[str], call: Callable[[str], Any], window: int = LIST_WINDOW
) -> Iterator[tuple[str, Any]]:
    """(path, result or exception) for ``call(path)`` on each path, ``window`` requests in flight."""
    pending: deque[tuple[str, Any]] = deque()

    def settle() -> tuple[str, Any]:
        path, result = pending.popleft()
        try:
            return path, result.get(timeout=REQUEST_TIMEOUT_S)
        except NoNodeError as exc:
            return path, exc
        except (KazooException, client.handler.timeout_exception) as exc:
            raise BulkWriteError(f"reading {path} failed: {exc!r}") from exc

    for path in paths:
        pending.append((path, call(path)))
        if len(pending) >= window:
            yield settle()
    while pending:
        yield settle()


def existing_cluster(client: KazooClient) -> list[str]:
    """What shows that ``client``'s root holds a Kafka cluster (empty if nothing does)."""
    signs: list[str] = []
    for parent in (zkdata.BROKER_TOPICS_PATH, zkdata.BROKER_IDS_PATH, "/config/topics"):
        with contextlib.suppress(NoNodeError):
            if client.get_children(parent):
                signs.append(f"{parent} has children")
    for path in (zkdata.CLUSTER_ID_PATH, zkdata.CONTROLLER_PATH, zkdata.CONTROLLER_EPOCH_PATH):
        if client.exists(path) is not None:
            signs.append(f"{path} exists")
    return signs


def _list_level(client: KazooClient, paths: Sequence[str]) -> list[str]:
    children: list[str] = []
    for path, names in _pipelined_gets(client, paths, client.get_children_async):
        if not isinstance(names, Exception):
            children.extend(f"{path.rstrip('/')}/{name}" for name in names)
    return children


_PARTITION_ZNODE = re.compile(r"^/brokers/topics/[^/]+/partitions/[^/]+$")
_LEAF_PARENTS = frozenset({zkdata.BROKER_IDS_PATH, "/config/topics"})


def kafka_layout_children(path: str) -> tuple[str, ...] | None:
    """The children Kafka's layout gives ``path`` (a partition znode holds only ``state``; a state, broker
    or topic config znode holds nothing), or None where it must be listed. Listing the children of 400k
    znodes one request at a time is what makes a deletion slow: kazoo manages ~3k requests/s here."""
    parent = path.rsplit("/", 1)[0]
    if _PARTITION_ZNODE.match(path):
        return ("state",)
    if parent in _LEAF_PARENTS or (path.endswith("/state") and _PARTITION_ZNODE.match(parent)):
        return ()
    return None


def delete_trees(clients: Sequence[KazooClient], roots: Sequence[str], batch_ops: int, in_flight: int) -> int:
    """Delete whole trees fast; returns the number of znodes deleted.

    A first pass trusts :func:`kafka_layout_children` and skips the transactions that fail because the
    tree differs from it; a second pass lists whatever is left and deletes it, failing on any error. Each
    pass lists level by level, then deletes the deepest level first, every level sharded over the sessions
    and pipelined.
    """
    layout = _levels(clients, roots, kafka_layout_children)
    deleted = _delete_levels(clients, layout, batch_ops, in_flight, strict=False)
    rest = _levels(clients, roots, lambda path: None)
    return deleted + _delete_levels(clients, rest, batch_ops, in_flight, strict=True)


def _levels(
    clients: Sequence[KazooClient], roots: Sequence[str], known: Callable[[str], tuple[str, ...] | None]
) -> list[list[str]]:
    """The existing roots, their children, their grandchildren...: listed unless ``known`` tells them."""
    first = clients[0]
    levels = [[p for p, stat in _pipelined_gets(first, roots, first.exists_async) if stat is not None]]
    while levels[-1]:
        next_level: list[str] = []
        unknown: list[str] = []
        for path in levels[-1]:
            children = known(path)
            if children is None:
                unknown.append(path)
            else:
                next_level.extend(f"{path}/{child}" for child in children)
        found: list[list[str]] = [[] for _ in clients]
        shards = _shard(unknown, len(clients))
        _run_parallel(clients, [_list_job(shard, out) for shard, out in zip(shards, found, strict=True)])
        levels.append(next_level + [path for out in found for path in out])
    return levels


def _delete_levels(
    clients: Sequence[KazooClient], levels: list[list[str]], batch_ops: int, in_flight: int, strict: bool
) -> int:
    deleted = 0
    for level in reversed(levels):
        streams = _shard([Op(Delete, path) for path in level], len(clients))
        deleted += _run_parallel(clients, _stream_jobs(streams, batch_ops, in_flight, strict)).ops
    return deleted


def _list_job(paths: list[str], out: list[str]) -> _Job:
    return lambda client, counter, abort: out.extend(_list_level(client, paths))


def _shard(items: list[_T], n: int) -> list[list[_T]]:
    return [items[i::n] for i in range(n)]


def _stream_jobs(
    streams: Sequence[Iterable[Op]], batch_ops: int, in_flight: int, strict: bool = True
) -> list[_Job]:
    def job(stream: Iterable[Op]) -> _Job:
        return lambda client, counter, abort: _write_stream(
            client, stream, batch_ops, in_flight, counter, abort, strict
        )

    return [job(stream) for stream in streams]


def _topic_streams(spec: BulkClusterSpec, plan: ClusterPlan, n: int) -> list[Iterator[Op]]:
    """Topic i goes to session i mod n; each stream is generated (and encoded) in its session's thread."""

    def stream(topics: list[TopicPlan]) -> Iterator[Op]:
        for topic in topics:
            yield from topic_ops(spec, topic)

    return [stream(topics) for topics in _shard(plan.topics, n)]


# --- the entry point ---------------------------------------------------------------------------------


def write_bulk_cluster(
    connect: str,
    spec: BulkClusterSpec,
    *,
    connections: int = DEFAULT_CONNECTIONS,
    batch_ops: int = DEFAULT_BATCH_OPS,
    in_flight: int = DEFAULT_IN_FLIGHT,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
) -> BulkWriteReport:
    """Write the cluster of ``spec`` into ZooKeeper at ``connect`` (``host:port[,...][/chroot]``).

    The chroot is created first, through a session without chroot. A target that already holds a cluster
    is refused with :class:`ClusterExistsError` unless ``overwrite``, which first deletes every Kafka path
    (:data:`KAFKA_ROOT_PATHS`). ``/brokers/ids/<id>`` and ``/controller``, ephemeral in Kafka, are written
    persistent, since they would vanish with the writer's sessions. ``connections`` sessions write in
    parallel, each with transactions of up to ``batch_ops`` ops, ``in_flight`` of them pipelined.
    Raises :class:`BulkWriteError` when a write fails, leaving part of a cluster behind.
    """
    if connections < 1 or batch_ops < 1 or in_flight < 1:
        raise ValueError("connections, batch_ops and in_flight must each be at least 1")
    say = progress or (lambda message: None)
    hosts, chroot = split_connect(connect)
    try:
        if chroot:
            _ensure_chroot(hosts, chroot)
        with _sessions(connect, connections) as clients:
            deleted, delete_seconds = _clear_target(clients, connect, overwrite, batch_ops, in_flight, say)
            started = time.monotonic()
            written = _write_cluster(clients, spec, batch_ops, in_flight, say)
            seconds = time.monotonic() - started
    except KazooException as exc:
        raise BulkWriteError(f"ZooKeeper at {connect}: {exc!r}") from exc
    counts = spec.fault_counts()
    return BulkWriteReport(
        znodes=written.creates,
        seconds=seconds,
        partitions=spec.partitions,
        brokers=spec.brokers,
        topics=spec.topics,
        under_replicated=counts[FaultKind.UNDER_REPLICATED],
        offline=counts[FaultKind.OFFLINE],
        non_preferred=counts[FaultKind.NON_PREFERRED],
        deleted_znodes=deleted,
        delete_seconds=delete_seconds,
    )


def _clear_target(
    clients: Sequence[KazooClient],
    connect: str,
    overwrite: bool,
    batch_ops: int,
    in_flight: int,
    say: Callable[[str], None],
) -> tuple[int, float]:
    signs = existing_cluster(clients[0])
    if not signs:
        return 0, 0.0
    if not overwrite:
        raise ClusterExistsError(
            f"ZooKeeper at {connect} already holds a Kafka cluster ({'; '.join(signs)}); "
            "pass overwrite=True (--overwrite) to delete it first"
        )
    say(f"deleting the existing cluster at {connect}")
    started = time.monotonic()
    deleted = delete_trees(clients, KAFKA_ROOT_PATHS, batch_ops, in_flight)
    seconds = time.monotonic() - started
    say(f"deleted {deleted:,} znodes in {seconds:.1f}s")
    return deleted, seconds


def _write_cluster(
    clients: Sequence[KazooClient],
    spec: BulkClusterSpec,
    batch_ops: int,
    in_flight: int,
    say: Callable[[str], None],
) -> OpCount:
    plan = plan_cluster(spec)
    first = clients[0]
    paths = persistent_paths_with_parents()
    missing = [path for path, stat in _pipelined_gets(first, paths, first.exists_async) if stat is None]
    prelude = OpCount()
    _write_stream(
        first,
        [*(create_op(path) for path in missing), *cluster_ops(spec, plan)],  # null data, as Kafka's
        batch_ops,
        in_flight,
        prelude,
        threading.Event(),
    )
    say(f"wrote {prelude.creates:,} cluster znodes; writing {spec.topics:,} topics")
    updates = sum(len(t.faults) for t in plan.topics)
    total = prelude.ops + len(plan.topics) * 3 + spec.partitions * 2 + updates

    def tick(done: OpCount) -> None:
        say(f"{prelude.ops + done.ops:,}/{total:,} znode writes")

    streams = _topic_streams(spec, plan, len(clients))
    return _sum([prelude, _run_parallel(clients, _stream_jobs(streams, batch_ops, in_flight), tick)])
