"""The ZooKeeper collector's reader layer: ZooKeeper sessions, as narrow as the collector needs them.

A reader (:class:`ZkReader`) is one session. The collector submits :class:`Read` requests; the reader
keeps its own window of them in flight and delivers, in order and from its own thread, a :class:`Reply`
to every read, a :class:`WatchEvent` when a watch a read set fires and a :class:`SessionEvent` when its
session starts or is lost (see :data:`Sink`). What a read is about (``Read.kind``, ``Read.key``) is opaque
to readers: they know nothing of Kafka (the collector's model, :mod:`collectors.zookeeper.cluster_model`,
does).

Why a reader of our own (:class:`WireReader`): kazoo spends about 100-250 µs of CPU per request here (four
``select`` calls, a wake-up socket write per request and a GIL hand-over per reply), so 200k state znodes
cost 20-50 s whatever the number of sessions. The wire reader speaks ZooKeeper's protocol for the requests
the collector needs (getData, getChildren, exists, ping; multiRead and SetWatches to batch them), putting
requests into one ``send`` and taking replies out of one ``recv``. Against ZooKeeper 3.6+ it reads up to
``ReaderSpec.batch`` znodes per multiRead request and sets their watches with one SetWatches request (see
:class:`WireReader`): at 200k partitions the server's CPU per full scan fell from 9-11 s to about 2 s.
:class:`KazooReader` implements the same narrow interface over kazoo (for TLS, SASL or anything else the
wire reader lacks; one request per read); tests run both.

Sessions: a lost connection loses the watches (ZooKeeper ties them to the connection; kazoo does not
restore them, the wire reader opens a new session), so a reader answers what is in flight with
``Code.CONNECTION_LOSS`` and reports the loss; the collector resyncs. The errors the readers raise live
here too (:class:`ZooKeeperUnreachableError` and its base :class:`ZooKeeperCollectorError`, both
re-exported by :mod:`collectors.zookeeper.collector`, the public API).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import select
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent
from kazoo.retry import KazooRetry

from collectors.kafka.zkclient import ZooKeeperSecurity, kazoo_client

log = logging.getLogger(__name__)

CONNECT_ATTEMPT_S = 5.0
RECONNECT_MAX_BACKOFF_S = 5.0
_RECV_BYTES = 256 * 1024
_JITTER = random.Random()
"""Our own generator: the module-level one is shared process-wide state."""


# --- errors ------------------------------------------------------------------------------------------


class ZooKeeperCollectorError(Exception):
    """Base of the errors the ZooKeeper collector and its readers raise."""


class ZooKeeperUnreachableError(ZooKeeperCollectorError):
    """No ZooKeeper server of the connect string accepted a session in time."""


class ZooKeeperAuthFailedError(ZooKeeperUnreachableError):
    """The server refused our credentials (SASL authentication failed): retrying cannot help."""


class _ConnectionLostError(Exception):
    """The wire reader's connection broke or the server stopped answering (internal)."""


# --- the reader interface ----------------------------------------------------------------------------


class Op(IntEnum):
    """ZooKeeper request types the collector uses (``ZooDefs.OpCode``)."""

    EXISTS = 3
    GET_DATA = 4
    GET_CHILDREN = 8


class Code:
    """ZooKeeper's result codes (``KeeperException.Code``) that matter here; others are reported as is."""

    OK = 0
    SYSTEM_ERROR = -1
    CONNECTION_LOSS = -4
    UNIMPLEMENTED = -6
    NO_NODE = -101
    NO_AUTH = -102
    SESSION_EXPIRED = -112

    NAMES: Mapping[int, str] = MappingProxyType(
        {-1: "SystemError", -4: "ConnectionLoss", -5: "MarshallingError", -6: "Unimplemented",
         -7: "OperationTimeout",
         -8: "BadArguments", -101: "NoNode", -102: "NoAuth", -112: "SessionExpired"}
    )  # fmt: skip


class EventKind:
    """ZooKeeper watch event types (``Watcher.Event.EventType``)."""

    CREATED = 1
    DELETED = 2
    CHANGED = 3
    CHILD = 4


class Read(NamedTuple):
    """One request; ``kind``/``key`` tell the collector what the reply is about (opaque to readers)."""

    op: Op
    path: str
    watch: bool
    kind: int = 0
    key: Any = None


class Reply(NamedTuple):
    """The answer to a :class:`Read`: ``code`` 0 and the data (getData), children (getChildren) or just the
    stat (exists); ``version`` is the znode's data version, ``czxid`` the zxid that created it."""

    read: Read
    code: int
    data: bytes | None = None
    version: int = -1
    czxid: int = -1
    children: list[str] | None = None


class WatchEvent(NamedTuple):
    kind: int
    path: str


class SessionEvent(NamedTuple):
    """Reader ``reader`` has a (new) session (``connected``), or lost its connection and its watches."""

    reader: int
    connected: bool
    detail: str = ""


Item = Reply | WatchEvent | SessionEvent
Sink = Callable[[list[Item]], None]
"""Where a reader delivers replies, watch events and session events, in order, from its own thread."""


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """One session's settings: ``in_flight`` reads at most in flight; up to ``batch`` of them in one
    batched request where the reader and the server can (1: one request per read)."""

    servers: tuple[tuple[str, int], ...]
    chroot: str
    session_timeout_s: float
    in_flight: int
    index: int = 0
    batch: int = 1


class ZkReader(Protocol):
    """One ZooKeeper session, as narrow as the collector needs it.

    Every submitted read gets exactly one :class:`Reply` on the sink (``Code.CONNECTION_LOSS`` when the
    connection breaks first); replies to one reader come in submission order. Watches set by reads arrive
    as :class:`WatchEvent`; session changes as :class:`SessionEvent` (``connected=True`` after ``start``).
    """

    def start(self, timeout: float) -> None:
        """Connect; raise :class:`ZooKeeperUnreachableError` when no server answers within ``timeout``."""

    def submit(self, reads: Sequence[Read]) -> None:
        """Queue reads (thread-safe, non-blocking); the reader keeps its own window in flight."""

    def stop(self) -> None:
        """Close the session; idempotent."""


ReaderFactory = Callable[[ReaderSpec, Sink], ZkReader]


# --- the wire reader ---------------------------------------------------------------------------------

_INT = struct.Struct(">i")
_REQUEST = struct.Struct(">iiii")  # length, xid, type, path length (then path bytes and the watch flag)
_REQUEST_HEAD = struct.Struct(">iii")  # length, xid, type
_MULTI_READ_TYPE = 22  # ZooDefs.OpCode.multiRead (ZooKeeper 3.6+)
_MULTI_HEADER = struct.Struct(">i?i")  # MultiHeader: type, done, err
_MULTI_OP = struct.Struct(">i?ii")  # MultiHeader(type, false, -1), then the op's path length
_MULTI_DONE = _MULTI_HEADER.pack(-1, True, -1)
_OP_ERROR = -1  # ZooDefs.OpCode.error: the op's result is an ErrorResponse
_SET_WATCHES_TYPE = 101  # ZooDefs.OpCode.setWatches
_SET_WATCHES_XID = -8  # ZooKeeper's own client sends SetWatches with this xid; its reply needs no action
_ZXID_AND_COUNT = struct.Struct(">qi")
_PROBE_PATH = b"/"
_GET_DATA, _GET_CHILDREN = Op.GET_DATA, Op.GET_CHILDREN
"""Hot-path aliases: an enum member costs a lookup through its class each time (~0.1 us in 3.11)."""
_BATCHED = frozenset({_GET_DATA, _GET_CHILDREN})
"""The reads a multiRead can carry (exists cannot)."""
_REPLY_HEADER = struct.Struct(">iqi")  # xid, zxid, err
_STAT_HEAD = struct.Struct(">q24xi")  # czxid, (mzxid, ctime, mtime), version
_STAT_BYTES = 68
_WATCH_EVENT = struct.Struct(">iii")  # type, state, path length
_CONNECT_REQUEST = struct.Struct(">iqiqi")  # protocol, last zxid, timeout ms, session id, password length
_CONNECT_REPLY = struct.Struct(">iiqi")  # protocol, timeout ms, session id, password length
_WATCH_XID, _PING_XID = -1, -2
_PING = struct.pack(">iii", 8, _PING_XID, 11)
_CLOSE_SESSION_TYPE = -11


class _ProtocolError(Exception):
    pass


def _recv_exact(sock: socket.socket, length: int) -> bytes:
    parts: list[bytes] = []
    while length:
        chunk = sock.recv(length)
        if not chunk:
            raise _ProtocolError("the server closed the connection")
        parts.append(chunk)
        length -= len(chunk)
    return b"".join(parts)


def _handshake(sock: socket.socket, session_timeout_s: float) -> tuple[int, bytes, float]:
    """A new session: (session id, password, negotiated timeout in seconds)."""
    body = _CONNECT_REQUEST.pack(0, 0, int(session_timeout_s * 1000), 0, 16) + bytes(16) + b"\x00"
    sock.sendall(_INT.pack(len(body)) + body)
    (length,) = _INT.unpack(_recv_exact(sock, 4))
    if not _CONNECT_REPLY.size <= length <= 4096:
        raise _ProtocolError(f"unexpected connect reply of {length} bytes")
    reply = _recv_exact(sock, length)
    _, timeout_ms, session_id, password_length = _CONNECT_REPLY.unpack_from(reply)
    if timeout_ms <= 0:
        raise _ProtocolError("the server refused the session")
    start = _CONNECT_REPLY.size
    return session_id, reply[start : start + password_length], timeout_ms / 1000.0


def _multi_read_request(xid: int, reads: Sequence[Read], paths: Sequence[bytes]) -> bytes:
    """A ``MultiOperationRecord`` of getData/getChildren ops (opcode 22). Each op carries the watch flag
    false: the server drops it anyway (it rebuilds each op from its path alone), so watches are set
    afterwards with SetWatches (see :meth:`WireReader._arm_watches`)."""
    parts: list[bytes] = []
    for read, path in zip(reads, paths, strict=True):
        parts += (_MULTI_OP.pack(read.op, False, -1, len(path)), path, b"\x00")
    parts.append(_MULTI_DONE)
    body = b"".join(parts)
    return _REQUEST_HEAD.pack(8 + len(body), xid, _MULTI_READ_TYPE) + body


def _set_watches_request(zxid: int, data_paths: Sequence[bytes], child_paths: Sequence[bytes]) -> bytes:
    """``SetWatches`` (opcode 101): the watches a getData/getChildren with the watch flag would have set,
    guarded by ``zxid``. For a znode modified after ``zxid`` (or gone) the server fires the event at once
    instead of setting the watch, so nothing that changed after the read goes unnoticed."""
    parts = [_ZXID_AND_COUNT.pack(zxid, len(data_paths))]
    for path in data_paths:
        parts += (_INT.pack(len(path)), path)
    parts += (_INT.pack(0), _INT.pack(len(child_paths)))  # no exist watches
    for path in child_paths:
        parts += (_INT.pack(len(path)), path)
    body = b"".join(parts)
    return _REQUEST_HEAD.pack(8 + len(body), _SET_WATCHES_XID, _SET_WATCHES_TYPE) + body


def _multi_read_works(sock: socket.socket) -> bool:
    """Ask the server for a one-op multiRead (opcode 22, ZooKeeper 3.6+). Older servers answer any unknown
    opcode with an ``Unimplemented`` error and then close the connection (``UnimplementedRequestProcessor``).
    The op's own result does not matter (a NoNode or NoAuth is still a multiRead answered)."""
    sock.sendall(_multi_read_request(1, [Read(Op.GET_DATA, "/", False)], [_PROBE_PATH]))
    while True:
        (length,) = _INT.unpack(_recv_exact(sock, 4))
        frame = _recv_exact(sock, length)
        xid, _, err = _REPLY_HEADER.unpack_from(frame)
        if xid == 1:
            return bool(err == Code.OK)


class _Pending(NamedTuple):
    """A request in flight: one read (``paths`` None) or a multiRead of ``reads`` at ``paths``."""

    xid: int
    reads: Read | list[Read]
    paths: list[bytes] | None


class WireReader:
    """A ZooKeeper session over a plain socket, one I/O thread, requests batched and pipelined.

    Batched reads (``spec.batch`` > 1): when several getData/getChildren reads are queued, up to ``batch``
    of them go out as one multiRead (ZooKeeper 3.6+), answered in one reply: one request through the
    server's request processors and one reply frame here instead of ``batch``. A multiRead sets no watch
    (the server ignores each op's watch flag), so for the reads that asked for one the reader sends a
    SetWatches request right after the reply, guarded by the zxid in the reply's header: the server took
    that zxid before reading, so a znode modified after the read fires its event at once instead of being
    watched, exactly as if the change had happened right after a watched single read. An op that fails
    (NoNode, NoAuth) is that read's :class:`Reply` with the error code, and no watch, as for a single read.
    A server older than 3.6 is found out by a one-op probe after each handshake (it answers
    ``Unimplemented`` and closes the connection): the reader then opens a new session and reads one znode
    per request (:attr:`multi_read` False). Single reads and exists are sent as before.

    On a broken connection it fails what is in flight, reports the loss and opens a *new* session (with
    backoff): the old session's watches are gone anyway, and the collector resyncs. No TLS, no SASL/digest
    auth (use :class:`KazooReader`); no writes.
    """

    def __init__(self, spec: ReaderSpec, sink: Sink) -> None:
        self._spec = spec
        self._sink = sink
        self._queue: deque[Read] = deque()
        self._pending: deque[_Pending] = deque()
        self._in_flight = 0
        self._out = bytearray()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._xid = 0
        self._timeout_s = spec.session_timeout_s
        self._wake_pending = False
        self.session_id: int | None = None
        self.session_password = b""
        self.server: tuple[str, int] | None = None
        self.multi_read = False
        """Whether this session batches reads into multiRead requests (``spec.batch`` > 1 and the server
        answered the probe)."""
        self.multi_reads = 0
        """multiRead requests sent (all sessions of this reader), for tests and benchmarks."""
        self._without_multi_read: set[tuple[str, int]] = set()
        """Servers that refused a multiRead after their probe had answered one: not probed again."""

    def start(self, timeout: float) -> None:
        self._connect(time.monotonic() + timeout)
        self._thread = threading.Thread(target=self._run, name=f"zk-wire-{self._spec.index}", daemon=True)
        self._thread.start()

    def submit(self, reads: Sequence[Read]) -> None:
        self._queue.extend(reads)
        # A reply still due makes the I/O thread fill the window again, and it sees these reads (queued
        # before the check); otherwise one wake-up byte until the I/O thread has seen it. Each send is a
        # syscall that hands the GIL over, which the collector thread (the busy one) pays dearly for.
        if not self._pending and not self._wake_pending:
            self._wake_pending = True
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\x00")

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\x00")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._close_socket()
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def drop_connection(self) -> None:
        """Break the TCP connection as a network failure would (a test hook, like kazoo's
        ``_CONNECTION_DROP``): the reader reports the loss and opens a new session."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # --- connection ---

    def _connect(self, deadline: float) -> None:
        servers = list(self._spec.servers)
        _JITTER.shuffle(servers)
        failures = []
        for host, port in servers:
            if deadline - time.monotonic() <= 0:
                break
            probe = self._spec.batch > 1 and (host, port) not in self._without_multi_read
            try:
                session = _open_session(host, port, deadline, self._spec.session_timeout_s, probe)
                if probe and not session.multi_read:
                    # The server closes this connection after refusing opcode 22: a new one, no probe.
                    session.sock.close()
                    log.info(
                        "ZooKeeper %s:%d has no multiRead (older than 3.6): one read per request", host, port
                    )
                    session = _open_session(host, port, deadline, self._spec.session_timeout_s, False)
            except (OSError, _ProtocolError) as exc:
                failures.append(f"{host}:{port}: {exc}")
                continue
            self._sock, self._timeout_s, self.multi_read = session.sock, session.timeout_s, session.multi_read
            self._xid = 1  # the probe's
            self.session_id, self.session_password, self.server = session.id, session.password, (host, port)
            self._sink([SessionEvent(self._spec.index, True, f"session 0x{session.id:x} on {host}:{port}")])
            return
        raise ZooKeeperUnreachableError(
            f"no ZooKeeper server accepted a session ({'; '.join(failures) or 'timed out'})"
        )

    def _run(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            sock = self._sock
            if sock is None:
                try:
                    self._connect(time.monotonic() + CONNECT_ATTEMPT_S)
                    backoff = 0.1
                except ZooKeeperUnreachableError as exc:
                    log.warning("ZooKeeper reader %d: %s; retrying in %.1fs", self._spec.index, exc, backoff)
                    self._stopping.wait(backoff * _JITTER.uniform(0.8, 1.2))
                    backoff = min(backoff * 2, RECONNECT_MAX_BACKOFF_S)
                continue
            reason = "stopped"
            try:
                self._serve(sock)
            except (OSError, _ConnectionLostError, _ProtocolError, struct.error) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # a bug must not end the session thread silently
                log.exception("ZooKeeper reader %d failed", self._spec.index)
                reason = f"{type(exc).__name__}: {exc}"
            self._close_socket()
            if not self._stopping.is_set():
                log.warning("ZooKeeper reader %d lost its session: %s", self._spec.index, reason)
                self._fail_all(reason)

    def _close_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _fail_all(self, reason: str) -> None:
        lost: list[Item] = []
        for pending in self._pending:
            reads = pending.reads
            if isinstance(reads, list):
                lost += (Reply(read, Code.CONNECTION_LOSS) for read in reads)
            else:
                lost.append(Reply(reads, Code.CONNECTION_LOSS))
        self._pending.clear()
        self._in_flight = 0
        while self._queue:
            lost.append(Reply(self._queue.popleft(), Code.CONNECTION_LOSS))
        lost.append(SessionEvent(self._spec.index, False, reason))
        self._sink(lost)

    # --- the I/O loop ---

    def _serve(self, sock: socket.socket) -> None:
        ping_every, dead_after = self._timeout_s / 3.0, self._timeout_s * 2.0 / 3.0
        inbuf = bytearray()
        out = self._out = bytearray()
        last_recv = last_send = time.monotonic()
        writing = False
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                self._fill(out)
                if out:  # send at once; wait for writability only when the socket buffer is full
                    with contextlib.suppress(BlockingIOError):
                        del out[: sock.send(out)]
                        last_send = time.monotonic()
                if bool(out) != writing:
                    writing = bool(out)
                    selector.modify(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if writing else 0))
                wait = min(last_send + ping_every, last_recv + dead_after) - time.monotonic()
                for key, mask in selector.select(max(wait, 0.0)):
                    if key.fileobj is self._wake_r:
                        with contextlib.suppress(BlockingIOError):
                            self._wake_r.recv(4096)
                        # Cleared after the bytes are drained and before _fill drains the queue: a submit
                        # that still saw it set has already queued its reads; a later one sends a byte.
                        self._wake_pending = False
                    elif mask & selectors.EVENT_READ and self._receive(sock, inbuf):
                        last_recv = time.monotonic()
                now = time.monotonic()
                if now - last_recv > dead_after:
                    raise _ConnectionLostError(f"no reply from the server for {now - last_recv:.1f}s")
                if now - last_send >= ping_every and not out:
                    out += _PING
        self._close_session(sock)

    def _receive(self, sock: socket.socket, inbuf: bytearray) -> bool:
        try:
            chunk = sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return False
        if not chunk:
            raise _ConnectionLostError("the server closed the connection")
        inbuf += chunk
        del inbuf[: self._parse(inbuf)]
        return True

    def _fill(self, out: bytearray) -> None:
        """Move queued reads into the output buffer while the window has room: runs of getData/getChildren
        as multiRead requests of up to ``batch`` reads when the server has multiRead, the rest one by one."""
        room = self._spec.in_flight - self._in_flight
        chroot = self._spec.chroot
        queued, pending = self._queue, self._pending
        batch = self._spec.batch if self.multi_read else 1
        while room > 0 and queued:
            read = queued.popleft()
            if batch > 1 and room > 1 and queued and read.op in _BATCHED and queued[0].op in _BATCHED:
                reads = [read]
                limit = min(batch, room)
                while len(reads) < limit and queued and queued[0].op in _BATCHED:
                    reads.append(queued.popleft())
                paths = [(chroot + r.path).encode() for r in reads]
                self._xid = xid = self._xid % 0x7FFFFFFF + 1
                out += _multi_read_request(xid, reads, paths)
                pending.append(_Pending(xid, reads, paths))
                self.multi_reads += 1
                room -= len(reads)
                self._in_flight += len(reads)
                continue
            path = (chroot + read.path).encode()
            self._xid = xid = self._xid % 0x7FFFFFFF + 1
            out += _REQUEST.pack(13 + len(path), xid, read.op, len(path))
            out += path
            out += b"\x01" if read.watch else b"\x00"
            pending.append(_Pending(xid, read, None))
            room -= 1
            self._in_flight += 1

    def _parse(self, buf: bytearray) -> int:
        """Deliver every complete frame in ``buf``; return the bytes consumed."""
        items: list[Item] = []
        pending = self._pending
        off, size = 0, len(buf)
        refused = False
        with memoryview(buf) as view:
            while size - off >= 4:
                (length,) = _INT.unpack_from(buf, off)
                end = off + 4 + length
                if end > size:
                    break
                xid, zxid, err = _REPLY_HEADER.unpack_from(buf, off + 4)
                pos = off + 20
                if xid == _WATCH_XID:
                    kind, _, path_length = _WATCH_EVENT.unpack_from(buf, pos)
                    path = view[pos + 12 : pos + 12 + path_length].tobytes().decode()
                    items.append(WatchEvent(kind, self._unchroot(path)))
                elif xid >= 0:
                    entry = pending.popleft()
                    sent_xid, reads, paths = entry
                    if sent_xid != xid:
                        raise _ProtocolError(f"reply to xid {xid} while waiting for {sent_xid}")
                    if paths is None:
                        assert type(reads) is Read
                        self._in_flight -= 1
                        items.append(_decode_reply(reads, err, buf, view, pos))
                    elif err == Code.UNIMPLEMENTED:
                        # Refused although the probe was answered (a server in front of another?): the
                        # server closes the connection now, as it does after any unknown request.
                        pending.appendleft(entry)  # answered with the rest by _fail_all
                        refused = True
                        off = end
                        break
                    else:
                        assert type(reads) is list
                        self._in_flight -= len(reads)
                        self._multi_reply(reads, paths, zxid, err, buf, view, pos, items)
                off = end  # pings (xid -2), SetWatches (-8) and anything else negative need no action
        if items:
            self._sink(items)
        if refused:
            if self.server is not None:
                self._without_multi_read.add(self.server)
            raise _ConnectionLostError("the server refused a multiRead; its next session reads one by one")
        return off

    def _multi_reply(
        self,
        reads: list[Read],
        paths: list[bytes],
        zxid: int,
        err: int,
        buf: bytearray,
        view: memoryview,
        pos: int,
        items: list[Item],
    ) -> None:
        """One reply per read of a multiRead (an op's ErrorResponse is that read's error), then the watches
        the reads asked for."""
        if err:  # the whole request failed: every read gets the error, none set a watch
            items += (Reply(read, err) for read in reads)
            return
        data_watches: list[bytes] = []
        child_watches: list[bytes] = []
        for read, path in zip(reads, paths, strict=True):
            op, done, _ = _MULTI_HEADER.unpack_from(buf, pos)
            pos += _MULTI_HEADER.size
            if op == _OP_ERROR:
                (code,) = _INT.unpack_from(buf, pos)
                pos += 4
                items.append(Reply(read, code))
                continue
            if done or op != read.op:
                raise _ProtocolError(
                    f"multiRead result of type {op} (done={done}) for a read of type {read.op}"
                )
            reply, pos = _decode_result(read, buf, view, pos)
            items.append(reply)
            if read.watch:
                (data_watches if op == _GET_DATA else child_watches).append(path)
        if not _MULTI_HEADER.unpack_from(buf, pos)[1]:
            raise _ProtocolError(f"a multiRead of {len(reads)} reads was answered with more results")
        if data_watches or child_watches:
            self._arm_watches(zxid, data_watches, child_watches)

    def _arm_watches(self, zxid: int, data_paths: list[bytes], child_paths: list[bytes]) -> None:
        """Set the watches of a multiRead's reads: see :func:`_set_watches_request`."""
        self._out += _set_watches_request(zxid, data_paths, child_paths)

    def _unchroot(self, path: str) -> str:
        chroot = self._spec.chroot
        if chroot and path.startswith(chroot):
            return path[len(chroot) :] or "/"
        return path

    def _close_session(self, sock: socket.socket) -> None:
        """Tell the server we are done so that it drops the session (and its watches) now."""
        self._xid += 1
        with contextlib.suppress(OSError):
            sock.setblocking(True)
            sock.settimeout(1.0)
            sock.sendall(struct.pack(">iii", 8, self._xid, _CLOSE_SESSION_TYPE))
            sock.recv(64)


class _Session(NamedTuple):
    sock: socket.socket
    id: int
    password: bytes
    timeout_s: float
    multi_read: bool


def _open_session(host: str, port: int, deadline: float, session_timeout_s: float, probe: bool) -> _Session:
    """Connect, start a session and (``probe``) ask for multiRead; the socket is non-blocking on return."""
    timeout = max(0.1, min(deadline - time.monotonic(), CONNECT_ATTEMPT_S))
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(max(0.1, min(deadline - time.monotonic(), CONNECT_ATTEMPT_S)))
        session_id, password, timeout_s = _handshake(sock, session_timeout_s)
        multi_read = probe and _multi_read_works(sock)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return _Session(sock, session_id, password, timeout_s, multi_read)


def _decode_reply(read: Read, err: int, buf: bytearray, view: memoryview, pos: int) -> Reply:
    if err:
        return Reply(read, err)
    return _decode_result(read, buf, view, pos)[0]


def _decode_result(read: Read, buf: bytearray, view: memoryview, pos: int) -> tuple[Reply, int]:
    """The successful result of ``read`` at ``pos`` (a reply body or a multiRead op's result), and the
    position after it."""
    op = read.op
    if op == _GET_DATA:
        (length,) = _INT.unpack_from(buf, pos)
        pos += 4
        data = None
        if length >= 0:
            data = view[pos : pos + length].tobytes()
            pos += length
        czxid, version = _STAT_HEAD.unpack_from(buf, pos)
        return Reply(read, Code.OK, data, version, czxid), pos + _STAT_BYTES
    if op == _GET_CHILDREN:
        (count,) = _INT.unpack_from(buf, pos)
        pos += 4
        children = []
        for _ in range(max(count, 0)):
            (length,) = _INT.unpack_from(buf, pos)
            children.append(view[pos + 4 : pos + 4 + length].tobytes().decode())
            pos += 4 + length
        return Reply(read, Code.OK, children=children), pos
    czxid, version = _STAT_HEAD.unpack_from(buf, pos)
    return Reply(read, Code.OK, version=version, czxid=czxid), pos + _STAT_BYTES


# --- the kazoo reader --------------------------------------------------------------------------------

_KAZOO_EVENTS: Mapping[str, int] = MappingProxyType(
    {
        EventType.CREATED: EventKind.CREATED,
        EventType.DELETED: EventKind.DELETED,
        EventType.CHANGED: EventKind.CHANGED,
        EventType.CHILD: EventKind.CHILD,
    }
)


class _PlainSelectHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler with ``select.select``: the stock one builds and closes an epoll selector
    on every call, four times per request, which halves kazoo's throughput here."""

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> Any:
        fds = [f if isinstance(f, int) else f.fileno() for f in (*rlist, *wlist, *xlist)]
        if max(fds, default=0) >= _FD_SETSIZE:
            return super().select(rlist, wlist, xlist, timeout)
        return select.select(rlist, wlist, xlist, timeout)


_FD_SETSIZE = 1024


class KazooReader:
    """The reader interface over a :class:`~kazoo.client.KazooClient`: far slower per znode than
    :class:`WireReader` (kazoo pays several syscalls and GIL hand-overs per request: ~60 s instead of
    ~7 s for 200k partitions, measured), but with kazoo's TLS/SASL/auth options via ``client_options``.

    kazoo retries the connection by itself; SUSPENDED and LOST are reported as a loss (kazoo drops every
    watch then), CONNECTED as a (new) session.
    """

    def __init__(
        self,
        spec: ReaderSpec,
        sink: Sink,
        *,
        security: ZooKeeperSecurity | None = None,
        **client_options: Any,
    ) -> None:
        self._spec = spec
        self._sink = sink
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in spec.servers) + spec.chroot
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_BACKOFF_S)
        options = {"handler": _PlainSelectHandler(), "connection_retry": retry} | client_options
        self.client = kazoo_client(hosts, timeout=spec.session_timeout_s, security=security, **options)
        self._was_connected = False
        self._tls_hint = (
            " (TLS: is it the secure client port, does the trust store hold the server's CA, does the "
            "server want a client certificate? KAFKA_HEALTH_LOG_LEVEL=DEBUG shows the handshake)"
            if security is not None and security.tls is not None
            else ""
        )
        self.client.add_listener(self._on_state)
        self._lock = threading.Lock()
        self._queue: deque[Read] = deque()
        self._in_flight = 0

    def start(self, timeout: float) -> None:
        """As kazoo's ``start``, until one request is answered: kazoo reports CONNECTED before its SASL
        login, so only a reply tells that the login worked. A refused login fails at once (kazoo gives up
        on the session and would only time out) with :class:`ZooKeeperAuthFailedError`; a connection
        dropped during the login is retried by kazoo, and so is the request here, until ``timeout``."""
        deadline = time.monotonic() + timeout
        self.client.start_async()
        while True:
            remaining = deadline - time.monotonic()
            # kazoo stops its connection loop only when closed or when a login failed (AUTH_FAILED, then
            # CLOSED at once): a session that was connected and is CLOSED without our stop was refused
            state = self.client.client_state
            if state == KeeperState.AUTH_FAILED or (state == KeeperState.CLOSED and self._was_connected):
                self._give_up()
                raise ZooKeeperAuthFailedError(
                    f"ZooKeeper at {self.client.hosts} refused the SASL login (authentication failed): "
                    "check the credentials"
                )
            if remaining <= 0:
                self._give_up()
                raise ZooKeeperUnreachableError(
                    f"no ZooKeeper server of {self.client.hosts} accepted a session within {timeout:g}s"
                    + self._tls_hint
                )
            if self.client.connected:
                probe = self.client.exists_async("/")
                probe.wait(remaining)
                # any answer but a lost connection or a refused login (NoAuth on an ACL too) is a session
                if probe.ready() and not isinstance(probe.exception, _NOT_A_SESSION):
                    return
            time.sleep(min(0.05, max(remaining, 0.0)))

    def _give_up(self) -> None:
        self.client.remove_listener(self._on_state)
        self.client.stop()
        self.client.close()

    def submit(self, reads: Sequence[Read]) -> None:
        with self._lock:
            self._queue.extend(reads)
            self._pump()

    def stop(self) -> None:
        self.client.remove_listener(self._on_state)
        self.client.stop()
        self.client.close()

    def _pump(self) -> None:
        while self._queue and self._in_flight < self._spec.in_flight:
            read = self._queue.popleft()
            watch = self._on_watch if read.watch else None
            try:
                if read.op == Op.GET_DATA:
                    result = self.client.get_async(read.path, watch=watch)
                elif read.op == Op.GET_CHILDREN:
                    result = self.client.get_children_async(read.path, watch=watch)
                else:
                    result = self.client.exists_async(read.path, watch=watch)
            except Exception as exc:  # e.g. a client already closed
                self._sink([Reply(read, Code.CONNECTION_LOSS, data=str(exc).encode())])
                continue
            self._in_flight += 1
            result.rawlink(functools.partial(self._done, read))

    def _done(self, read: Read, result: Any) -> None:
        self._sink([_kazoo_reply(read, result)])
        with self._lock:
            self._in_flight -= 1
            self._pump()

    def _on_watch(self, event: WatchedEvent) -> None:
        kind = _KAZOO_EVENTS.get(event.type)
        if kind is not None and event.path is not None:  # NONE: the connection dropped the watch
            self._sink([WatchEvent(kind, event.path)])

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            self._was_connected = True
        self._sink([SessionEvent(self._spec.index, state == KazooState.CONNECTED, str(state))])


def secured_readers(security: ZooKeeperSecurity) -> ReaderFactory:
    """Sessions with ``security``'s credentials: :class:`KazooReader`, made by the one kazoo factory
    (:func:`~collectors.kafka.zkclient.kazoo_client`). The wire reader speaks neither TLS nor SASL; it
    could send digest's AuthPacket itself, but one reader for every kind of security is one code path to
    test, and a secured cluster's scan is slower, not wrong (docs/collectors.md)."""

    def make(spec: ReaderSpec, sink: Sink) -> KazooReader:
        return KazooReader(spec, sink, security=security)

    return make


_NOT_A_SESSION = (ConnectionLoss, SessionExpiredError, ConnectionClosedError, AuthFailedError)


def _kazoo_reply(read: Read, result: Any) -> Reply:
    try:
        value = result.get_nowait()
    except NoNodeError:
        return Reply(read, Code.NO_NODE)
    except (ConnectionLoss, SessionExpiredError, ConnectionClosedError):
        return Reply(read, Code.CONNECTION_LOSS)
    except NoAuthError:
        return Reply(read, Code.NO_AUTH)
    except KazooException as exc:
        return Reply(read, getattr(exc, "code", Code.SYSTEM_ERROR) or Code.SYSTEM_ERROR)
    if read.op == Op.GET_DATA:
        data, stat = value
        return Reply(read, Code.OK, data, stat.version, stat.czxid)
    if read.op == Op.GET_CHILDREN:
        return Reply(read, Code.OK, children=list(value))
    if value is None:
        return Reply(read, Code.NO_NODE)
    return Reply(read, Code.OK, version=value.version, czxid=value.czxid)
