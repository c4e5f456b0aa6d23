"""The wire reader's batched reads against a real ZooKeeper (3.9): multiRead answers as single reads do,
errors in a batch are the reads' own errors, the watches the reads asked for are set (and a change that
slips in between the read and its watch still fires), and a server without multiRead (older than 3.6,
emulated by a proxy that answers opcode 22 as ZooKeeper 3.5 does) gets one read per request.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from collectors.kafka.model import TopicPartition
from collectors.kafka.zkdata import parse_connect_string
from collectors.zookeeper.collector import ZooKeeperCollector
from collectors.zookeeper.wire import (
    Code,
    EventKind,
    Item,
    Op,
    Read,
    ReaderSpec,
    Reply,
    SessionEvent,
    WatchEvent,
    WireReader,
)
from tests.support.reference_cluster import wait_for

pytestmark = pytest.mark.integration

START_TIMEOUT = 15.0
LOCKED = make_digest_acl("someone-else", "secret", all=True)
"""An ACL that lets only another identity read: our sessions get NoAuth."""


class Recorder:
    """A reader's sink: replies, watch events and session events, each in its own queue."""

    def __init__(self) -> None:
        self.replies: queue.SimpleQueue[Reply] = queue.SimpleQueue()
        self.events: queue.SimpleQueue[WatchEvent] = queue.SimpleQueue()
        self.sessions: queue.SimpleQueue[SessionEvent] = queue.SimpleQueue()

    def __call__(self, items: list[Item]) -> None:
        for item in items:
            if isinstance(item, Reply):
                self.replies.put(item)
            elif isinstance(item, WatchEvent):
                self.events.put(item)
            else:
                self.sessions.put(item)

    def take_replies(self, count: int, timeout: float = 5.0) -> list[Reply]:
        return [self.replies.get(timeout=timeout) for _ in range(count)]

    def take_event(self, timeout: float = 5.0) -> WatchEvent:
        return self.events.get(timeout=timeout)


ReaderFactory = Callable[..., tuple[WireReader, Recorder]]


@pytest.fixture
def start_reader(zk_connect: str) -> Iterator[ReaderFactory]:
    """Start wire readers on the test's chroot (or on ``connect``); all stopped after the test."""
    readers: list[WireReader] = []

    def start(
        batch: int = 64, connect: str | None = None, cls: type[WireReader] = WireReader, in_flight: int = 256
    ) -> tuple[WireReader, Recorder]:
        servers, chroot = parse_connect_string(connect or zk_connect)
        recorder = Recorder()
        reader = cls(ReaderSpec(tuple(servers), chroot, 10.0, in_flight, batch=batch), recorder)
        readers.append(reader)
        reader.start(START_TIMEOUT)
        return reader, recorder

    yield start
    for reader in readers:
        reader.stop()


def comparable(reply: Reply) -> tuple[Any, ...]:
    children = sorted(reply.children) if reply.children is not None else None
    return (reply.read, reply.code, reply.data, reply.version, reply.czxid, children)


def a_tree(zk: KazooClient) -> list[Read]:
    """Znodes of every kind a batch can meet, and reads of them (in one submission: the exists in the
    middle splits it in two batches)."""
    zk.create("/t/a", b"alpha", makepath=True)
    zk.create("/t/b", b"")
    zk.set("/t/b", b"beta, version 1")
    zk.create("/t/list/x", makepath=True)
    zk.create("/t/list/y")
    zk.create("/t/locked", b"secret", acl=[LOCKED])
    return [
        Read(Op.GET_DATA, "/t/a", True, 1, "a"),
        Read(Op.GET_DATA, "/t/missing", True, 2, "missing"),
        Read(Op.GET_CHILDREN, "/t/list", True, 3, "list"),
        Read(Op.GET_DATA, "/t/locked", True, 4, "locked"),
        Read(Op.GET_DATA, "/t/b", False, 5, "b"),
        Read(Op.EXISTS, "/t/a", False, 6, "exists"),
        Read(Op.GET_CHILDREN, "/t/missing", False, 7, "no list"),
        Read(Op.GET_DATA, "/t/list", False, 8, "list data"),
    ]


def unlock(zk: KazooClient) -> None:
    """The chroot's recursive delete cannot list what it cannot read: delete that znode first (deleting
    needs the parent's permission only)."""
    with contextlib.suppress(Exception):
        zk.delete("/t/locked")


def test_a_batched_read_answers_as_single_reads(zk_client: KazooClient, start_reader: ReaderFactory) -> None:
    reads = a_tree(zk_client)
    try:
        batched, batched_sink = start_reader(batch=64)
        single, single_sink = start_reader(batch=1)
        batched.submit(reads)
        single.submit(reads)
        got = batched_sink.take_replies(len(reads))
        expected = single_sink.take_replies(len(reads))
    finally:
        unlock(zk_client)

    assert (batched.multi_read, batched.multi_reads) == (True, 2)  # split by the exists
    assert (single.multi_read, single.multi_reads) == (False, 0)
    assert [comparable(r) for r in got] == [comparable(r) for r in expected]
    by_key = {r.read.key: r for r in got}
    assert (by_key["a"].code, by_key["a"].data, by_key["a"].version) == (Code.OK, b"alpha", 0)
    assert (by_key["b"].data, by_key["b"].version) == (b"beta, version 1", 1)
    assert by_key["a"].czxid == zk_client.exists("/t/a").czxid
    assert by_key["missing"].code == by_key["no list"].code == Code.NO_NODE
    assert by_key["locked"].code == Code.NO_AUTH
    assert sorted(by_key["list"].children or ()) == ["x", "y"]
    assert by_key["list data"].data == b""


def test_batched_reads_set_exactly_the_watches_they_ask_for(
    zk_client: KazooClient, start_reader: ReaderFactory
) -> None:
    """A multiRead sets no watch itself (the server drops each op's watch flag), so the reader sets them
    with SetWatches: every read that asked for one and succeeded is watched, as with a single read; an
    unwatched read, a missing znode and an unreadable one are not."""
    reads = a_tree(zk_client)
    try:
        reader, sink = start_reader(batch=64)
        reader.submit(reads)
        sink.take_replies(len(reads))

        zk_client.set("/t/b", b"unwatched")  # read without a watch
        zk_client.create("/t/missing", b"now here")  # was missing when read: no watch, as for getData
        zk_client.create("/t/list/z")  # the children list: watched
        zk_client.set("/t/list", b"data of the list")  # read without a watch (getData, not getChildren)
        zk_client.set("/t/a", b"changed")  # watched
        events = [sink.take_event(), sink.take_event()]
    finally:
        unlock(zk_client)

    # Watch events of one session come in the order of the changes: nothing else was watched.
    assert events == [WatchEvent(EventKind.CHILD, "/t/list"), WatchEvent(EventKind.CHANGED, "/t/a")]
    zk_client.set("/t/a", b"changed again")  # the watches fired once and are gone (one-shot, as ever)
    zk_client.create("/t/list/w")
    zk_client.create("/t/sentinel")
    reader.submit([Read(Op.GET_DATA, "/t/sentinel", True)])
    sink.take_replies(1)
    zk_client.set("/t/sentinel", b"last")
    assert sink.take_event() == WatchEvent(EventKind.CHANGED, "/t/sentinel")
    assert reader.multi_reads == 2


class ArmLate(WireReader):
    """Runs ``before_arming`` just before it sends the SetWatches of a multiRead, as if the request had
    been slow to reach the server."""

    before_arming: Callable[[], None] | None = None

    def _arm_watches(self, zxid: int, data_paths: list[bytes], child_paths: list[bytes]) -> None:
        if self.before_arming is not None:
            self.before_arming()
        super()._arm_watches(zxid, data_paths, child_paths)


def test_a_change_between_a_batched_read_and_its_watch_fires_at_once(
    zk_client: KazooClient, make_zk_client: Callable[..., KazooClient], start_reader: ReaderFactory
) -> None:
    """SetWatches carries the zxid the server read at: a znode changed (or deleted, or given a child) after
    the read fires its event at once, so the change is not missed although no watch was set when it
    happened."""
    zk_client.create("/t/a", b"1", makepath=True)
    zk_client.create("/t/gone", b"1")
    zk_client.create("/t/list/x", makepath=True)
    zk_client.create("/t/quiet", b"1")
    writer = make_zk_client()

    def change() -> None:
        writer.set("/t/a", b"2")
        writer.delete("/t/gone")
        writer.create("/t/list/y")

    reader, sink = start_reader(batch=64, cls=ArmLate)
    assert isinstance(reader, ArmLate)
    reader.before_arming = change
    reads = [
        Read(Op.GET_DATA, "/t/a", True),
        Read(Op.GET_DATA, "/t/gone", True),
        Read(Op.GET_CHILDREN, "/t/list", True),
        Read(Op.GET_DATA, "/t/quiet", True),
    ]
    reader.submit(reads)
    replies = sink.take_replies(len(reads))
    events = {sink.take_event() for _ in range(3)}

    assert replies[0].data == b"1"  # read before the change
    assert events == {
        WatchEvent(EventKind.CHANGED, "/t/a"),
        WatchEvent(EventKind.DELETED, "/t/gone"),
        WatchEvent(EventKind.CHILD, "/t/list"),
    }
    zk_client.set("/t/quiet", b"2")  # unchanged when armed: watched normally
    assert sink.take_event() == WatchEvent(EventKind.CHANGED, "/t/quiet")
    assert reader.multi_reads == 1


# --- a server without multiRead ------------------------------------------------------------------------


class OldServerProxy:
    """A TCP proxy in front of the real ZooKeeper that answers opcode 22 (multiRead) as a server older than
    3.6 does: ``ZooKeeperServer.submitRequest`` finds the type invalid and ``UnimplementedRequestProcessor``
    sends a reply header with ``Unimplemented`` (-6), then closes the connection. Everything else passes.

    With ``answer_up_to`` n, multiReads of up to n ops are passed on (a one-op probe is answered, a batch
    refused: a server that changes its mind, as a mixed ensemble behind one address might).
    """

    def __init__(self, upstream: tuple[str, int], chroot: str, answer_up_to: int = 0) -> None:
        self._upstream = upstream
        self._answer_up_to = answer_up_to
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.connect = f"127.0.0.1:{self._listener.getsockname()[1]}{chroot}"
        self.refused = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets += [client, server]
            self._spawn(self._requests, client, server)
            self._spawn(self._replies, server, client)

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        first = True  # the ConnectRequest has no request header
        try:
            while True:
                head = _recv_exact(client, 4)
                body = _recv_exact(client, struct.unpack(">i", head)[0])
                if (
                    not first
                    and struct.unpack_from(">i", body, 4)[0] == 22
                    and _ops(body) > self._answer_up_to
                ):
                    with self._lock:
                        self.refused += 1
                    xid = struct.unpack_from(">i", body)[0]
                    client.sendall(struct.pack(">iiqi", 16, xid, 0, Code.UNIMPLEMENTED))
                    break
                first = False
                server.sendall(head + body)
        except OSError:
            pass
        _close(client, server)

    def _replies(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while chunk := server.recv(65536):
                client.sendall(chunk)
        except OSError:
            pass
        _close(client, server)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (closing alone would not)
        self._listener.close()
        with self._lock:
            _close(*self._sockets)
        for thread in self._threads:
            thread.join(timeout=5)


def _ops(request: bytes) -> int:
    """The ops of a multiRead request: MultiHeaders (type, done, err), each but the last followed by a
    path and a watch flag."""
    pos, ops = 8, 0
    while not struct.unpack_from(">i?i", request, pos)[1]:
        (path_length,) = struct.unpack_from(">i", request, pos + 9)
        pos += 9 + 4 + path_length + 1
        ops += 1
    return ops


def _recv_exact(sock: socket.socket, length: int) -> bytes:
    data = b""
    while len(data) < length:
        chunk = sock.recv(length - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


OldServer = Callable[..., OldServerProxy]


@pytest.fixture
def old_server(zookeeper_server: Any, zk_chroot: str) -> Iterator[OldServer]:
    """``old_server(answer_up_to=0)``: an :class:`OldServerProxy` whose ``connect`` has the test's chroot;
    the proxies are closed after the test."""
    proxies: list[OldServerProxy] = []

    def make(answer_up_to: int = 0) -> OldServerProxy:
        [upstream], _ = parse_connect_string(zookeeper_server.connect_string)
        proxy = OldServerProxy(upstream, zk_chroot, answer_up_to)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def test_a_server_without_multi_read_gets_one_read_per_request(
    zk_client: KazooClient, start_reader: ReaderFactory, old_server: OldServer
) -> None:
    reads = a_tree(zk_client)
    proxy = old_server()
    try:
        reader, sink = start_reader(batch=64, connect=proxy.connect)
        reference, reference_sink = start_reader(batch=1)
        reader.submit(reads)
        reference.submit(reads)
        got = sink.take_replies(len(reads))
        expected = reference_sink.take_replies(len(reads))
    finally:
        unlock(zk_client)

    assert (reader.multi_read, reader.multi_reads, proxy.refused) == (False, 0, 1)  # the probe
    assert [comparable(r) for r in got] == [comparable(r) for r in expected]
    assert [s.connected for s in _drain(sink.sessions)] == [True]  # the probe's session is not reported
    zk_client.set("/t/a", b"changed")  # single reads set their watches themselves
    assert sink.take_event() == WatchEvent(EventKind.CHANGED, "/t/a")


def test_the_collector_scans_a_server_without_multi_read(
    zk_client: KazooClient, old_server: OldServer, zk_connect: str
) -> None:
    """The same snapshot as through multiRead, changes arrive, and no resync."""
    zk_client.create("/kafka/brokers/ids/1", b'{"version":1,"host":"b1","port":9092}', makepath=True)
    zk_client.create(
        "/kafka/brokers/topics/orders", b'{"version":1,"partitions":{"0":[1],"1":[1]}}', makepath=True
    )
    for p in (0, 1):
        zk_client.create(
            f"/kafka/brokers/topics/orders/partitions/{p}/state",
            b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}',
            makepath=True,
        )
    with (
        ZooKeeperCollector(old_server().connect + "/kafka", connections=2) as old,
        ZooKeeperCollector(zk_connect + "/kafka", connections=2) as new,
    ):
        old_readers, new_readers = wire_readers(old), wire_readers(new)
        assert [r.multi_read for r in old_readers] == [False, False]
        assert [r.multi_read for r in new_readers] == [True, True]
        assert sum(r.multi_reads for r in new_readers) > 0
        assert old.snapshot.errors == ()
        assert len(old.snapshot.partitions) == 2
        assert dict(old.snapshot.partitions) == dict(new.snapshot.partitions)
        assert old.snapshot.brokers == new.snapshot.brokers

        state = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":1,"isr":[1]}'
        zk_client.set("/kafka/brokers/topics/orders/partitions/1/state", state)

        def changed() -> bool:
            state = old.snapshot.partitions[TopicPartition("orders", 1)].state
            return state is not None and state.leader_epoch == 1

        wait_for(changed, 5, "the change")
        assert old.full_scans == 1


def test_a_multi_read_refused_after_the_probe_costs_one_resync(
    zk_client: KazooClient, old_server: OldServer
) -> None:
    """The probe is answered, the next multiRead is refused and the connection closed: the reads in flight
    come back as a connection loss, the collector resyncs, and that server is not probed again (else the
    probe would be answered again, and the next batch refused, forever)."""
    zk_client.create(
        "/kafka/brokers/topics/orders", b'{"version":1,"partitions":{"0":[1],"1":[1],"2":[1]}}', makepath=True
    )
    for p in (0, 1, 2):
        zk_client.create(
            f"/kafka/brokers/topics/orders/partitions/{p}/state",
            b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}',
            makepath=True,
        )
    proxy = old_server(answer_up_to=1)
    collector = ZooKeeperCollector(proxy.connect + "/kafka", connections=1)
    collector.start(START_TIMEOUT)
    try:
        [reader] = wire_readers(collector)
        assert proxy.refused == 1
        assert (collector.full_scans, reader.multi_read) == (2, False)
        assert collector.snapshot.errors == ()
        assert len(collector.snapshot.partitions) == 3
        assert all(info.state is not None for info in collector.snapshot.partitions.values())
    finally:
        collector.stop()


def wire_readers(collector: ZooKeeperCollector) -> list[WireReader]:
    readers = [r for r in collector.readers if isinstance(r, WireReader)]
    assert len(readers) == len(collector.readers)
    return readers


def _drain(q: queue.SimpleQueue[SessionEvent]) -> list[SessionEvent]:
    items = []
    while not q.empty():
        items.append(q.get_nowait())
    return items
