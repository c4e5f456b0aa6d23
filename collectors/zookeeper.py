"""The ZooKeeper collector: a pipelined full scan of a ZK-mode Kafka cluster, then one-shot watches that keep
an immutable :class:`~collectors.model.ClusterSnapshot` current without rescanning.

How it reads (KAFKA_REFERENCE.md §1): the children of ``/brokers/ids``, ``/brokers/topics``,
``/config/topics``, ``/config/brokers`` and ``/admin/delete_topics`` and the singletons (``/controller``,
``/controller_epoch``, ``/cluster/id``, the two admin znodes) first; each reply asks for what it names (a
broker, topic or config znode; a topic znode its partitions' state znodes), so the tree is read level by
level with every session keeping a window of requests in flight, never one round trip per znode. Every read
sets a watch; when one fires, that znode alone is read again (re-arming the watch) and changes that arrive
together are published as one new snapshot version. A znode that does not exist is watched with ``exists``
where its creation matters (singletons, state znodes, the parents).

Why a reader of our own (:class:`WireReader`): kazoo spends about 100-250 µs of CPU per request here (four
``select`` calls, a wake-up socket write per request and a GIL hand-over per reply), so 200k state znodes
cost 20-50 s whatever the number of sessions. The wire reader speaks ZooKeeper's protocol for the four
requests the collector needs (getData, getChildren, exists, ping), batching requests into one ``send`` and
replies out of one ``recv``: ~15 µs per znode. :class:`KazooReader` implements the same narrow interface
over kazoo (for TLS, SASL or anything else the wire reader lacks); tests run both.

Sessions: a lost connection loses the watches (ZooKeeper ties them to the connection; kazoo does not
restore them, the wire reader opens a new session), so the collector publishes the last snapshot again as
``stale`` and, once every session is back, runs a full resync before it publishes ``stale=False`` with a
new ``last_good_at``. A malformed, unreadable or vanished znode is recorded in ``snapshot.errors`` (path +
reason) and skipped.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import queue
import random
import select
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, ItemsView, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, replace
from enum import IntEnum
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.retry import KazooRetry

from collectors import zkdata
from collectors.model import (
    BrokerRegistration,
    ClusterSnapshot,
    ControllerInfo,
    PartitionInfo,
    PendingOperations,
    ReplicaAssignment,
    TopicInfo,
    TopicPartition,
    ZnodeError,
)

log = logging.getLogger(__name__)

DEFAULT_CONNECTIONS = 4
DEFAULT_IN_FLIGHT = 256
"""Requests in flight per session. ZooKeeper stops reading a connection once ~1,000 requests are queued
server-wide (``globalOutstandingLimit``), so 4 × 256 keeps it busy without being throttled."""
DEFAULT_SESSION_TIMEOUT_S = 18.0
"""Kafka's own ``zookeeper.session.timeout.ms`` default (2.5+)."""
DEFAULT_START_TIMEOUT_S = 60.0
PUBLISH_LINGER_S = 0.005
"""Changes arriving within this time of each other go into one snapshot version."""
PUBLISH_MAX_DELAY_S = 0.2
"""A change waits at most this long for others before it is published."""
CONNECT_ATTEMPT_S = 5.0
RECONNECT_MAX_BACKOFF_S = 5.0
_RECV_BYTES = 256 * 1024
_JITTER = random.Random()
"""Our own generator: the module-level one is shared process-wide state."""


# --- errors ------------------------------------------------------------------------------------------


class ZooKeeperCollectorError(Exception):
    """Base of the errors this module raises."""


class ZooKeeperUnreachableError(ZooKeeperCollectorError):
    """No ZooKeeper server of the connect string accepted a session in time."""


class ScanTimeoutError(ZooKeeperCollectorError, TimeoutError):
    """The first full scan did not complete in time."""


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
    NO_NODE = -101
    NO_AUTH = -102
    SESSION_EXPIRED = -112

    NAMES: Mapping[int, str] = MappingProxyType(
        {-1: "SystemError", -4: "ConnectionLoss", -5: "MarshallingError", -7: "OperationTimeout",
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
    servers: tuple[tuple[str, int], ...]
    chroot: str
    session_timeout_s: float
    in_flight: int
    index: int = 0


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


class WireReader:
    """A ZooKeeper session over a plain socket, one I/O thread, requests batched and pipelined.

    On a broken connection it fails what is in flight, reports the loss and opens a *new* session (with
    backoff): the old session's watches are gone anyway, and the collector resyncs. No TLS, no SASL/digest
    auth (use :class:`KazooReader`); no writes.
    """

    def __init__(self, spec: ReaderSpec, sink: Sink) -> None:
        self._spec = spec
        self._sink = sink
        self._queue: deque[Read] = deque()
        self._pending: deque[tuple[int, Read]] = deque()
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
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                sock = socket.create_connection((host, port), timeout=min(remaining, CONNECT_ATTEMPT_S))
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc}")
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(max(0.1, min(deadline - time.monotonic(), CONNECT_ATTEMPT_S)))
                session_id, password, timeout_s = _handshake(sock, self._spec.session_timeout_s)
                sock.setblocking(False)
            except (OSError, _ProtocolError) as exc:
                sock.close()
                failures.append(f"{host}:{port}: {exc}")
                continue
            self._sock, self._xid, self._timeout_s = sock, 0, timeout_s
            self.session_id, self.session_password, self.server = session_id, password, (host, port)
            self._sink([SessionEvent(self._spec.index, True, f"session 0x{session_id:x} on {host}:{port}")])
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
        lost: list[Item] = [Reply(read, Code.CONNECTION_LOSS) for _, read in self._pending]
        self._pending.clear()
        while self._queue:
            lost.append(Reply(self._queue.popleft(), Code.CONNECTION_LOSS))
        lost.append(SessionEvent(self._spec.index, False, reason))
        self._sink(lost)

    # --- the I/O loop ---

    def _serve(self, sock: socket.socket) -> None:
        ping_every, dead_after = self._timeout_s / 3.0, self._timeout_s * 2.0 / 3.0
        inbuf, out = bytearray(), bytearray()
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
        """Move queued reads into the output buffer while the window has room."""
        room = self._spec.in_flight - len(self._pending)
        chroot = self._spec.chroot
        queued, pending = self._queue, self._pending
        while room > 0 and queued:
            read = queued.popleft()
            path = (chroot + read.path).encode()
            self._xid = xid = self._xid % 0x7FFFFFFF + 1
            out += _REQUEST.pack(13 + len(path), xid, read.op, len(path))
            out += path
            out += b"\x01" if read.watch else b"\x00"
            pending.append((xid, read))
            room -= 1

    def _parse(self, buf: bytearray) -> int:
        """Deliver every complete frame in ``buf``; return the bytes consumed."""
        items: list[Item] = []
        pending = self._pending
        off, size = 0, len(buf)
        with memoryview(buf) as view:
            while size - off >= 4:
                (length,) = _INT.unpack_from(buf, off)
                end = off + 4 + length
                if end > size:
                    break
                xid, _, err = _REPLY_HEADER.unpack_from(buf, off + 4)
                pos = off + 20
                if xid == _WATCH_XID:
                    kind, _, path_length = _WATCH_EVENT.unpack_from(buf, pos)
                    path = view[pos + 12 : pos + 12 + path_length].tobytes().decode()
                    items.append(WatchEvent(kind, self._unchroot(path)))
                elif xid >= 0:
                    sent_xid, read = pending.popleft()
                    if sent_xid != xid:
                        raise _ProtocolError(f"reply to xid {xid} while waiting for {sent_xid}")
                    items.append(_decode_reply(read, err, buf, view, pos))
                off = end  # pings (xid -2) and anything else negative need no action
        if items:
            self._sink(items)
        return off

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


def _decode_reply(read: Read, err: int, buf: bytearray, view: memoryview, pos: int) -> Reply:
    if err:
        return Reply(read, err)
    if read.op == Op.GET_DATA:
        (length,) = _INT.unpack_from(buf, pos)
        pos += 4
        data = None
        if length >= 0:
            data = view[pos : pos + length].tobytes()
            pos += length
        czxid, version = _STAT_HEAD.unpack_from(buf, pos)
        return Reply(read, Code.OK, data, version, czxid)
    if read.op == Op.GET_CHILDREN:
        (count,) = _INT.unpack_from(buf, pos)
        pos += 4
        children = []
        for _ in range(max(count, 0)):
            (length,) = _INT.unpack_from(buf, pos)
            children.append(view[pos + 4 : pos + 4 + length].tobytes().decode())
            pos += 4 + length
        return Reply(read, Code.OK, children=children)
    czxid, version = _STAT_HEAD.unpack_from(buf, pos)
    return Reply(read, Code.OK, version=version, czxid=czxid)


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

    def __init__(self, spec: ReaderSpec, sink: Sink, **client_options: Any) -> None:
        self._spec = spec
        self._sink = sink
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in spec.servers) + spec.chroot
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_BACKOFF_S)
        options = {"handler": _PlainSelectHandler()} | client_options
        self.client = KazooClient(
            hosts=hosts, timeout=spec.session_timeout_s, connection_retry=retry, **options
        )
        self.client.add_listener(self._on_state)
        self._lock = threading.Lock()
        self._queue: deque[Read] = deque()
        self._in_flight = 0

    def start(self, timeout: float) -> None:
        try:
            self.client.start(timeout=timeout)
        except self.client.handler.timeout_exception:
            self.client.close()
            raise ZooKeeperUnreachableError(
                f"no ZooKeeper server of {self.client.hosts} accepted a session within {timeout:g}s"
            ) from None

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
        self._sink([SessionEvent(self._spec.index, state == KazooState.CONNECTED, str(state))])


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


# --- the partition map -------------------------------------------------------------------------------


class PartitionMap(Mapping[TopicPartition, PartitionInfo]):
    """``snapshot.partitions``: an immutable mapping stored per topic, so that a new snapshot version
    copies only the topics that changed (copy-on-write), never all 200k partitions."""

    __slots__ = ("_by_topic", "_len")

    def __init__(self, by_topic: Mapping[str, Mapping[int, PartitionInfo]], length: int) -> None:
        self._by_topic = by_topic
        self._len = length

    def __getitem__(self, tp: TopicPartition) -> PartitionInfo:
        try:
            return self._by_topic[tp[0]][tp[1]]
        except (KeyError, IndexError, TypeError):
            raise KeyError(tp) from None

    def __iter__(self) -> Iterator[TopicPartition]:
        for partitions in self._by_topic.values():
            for info in partitions.values():
                yield info.tp

    def __len__(self) -> int:
        return self._len

    def values(self) -> ValuesView[PartitionInfo]:
        return _PartitionValues(self)

    def items(self) -> ItemsView[TopicPartition, PartitionInfo]:
        return _PartitionItems(self)

    def of_topic(self, topic: str) -> Mapping[int, PartitionInfo]:
        """The partitions of one topic by partition id (empty if the topic is unknown)."""
        return MappingProxyType(self._by_topic.get(topic, {}))

    def _infos(self) -> Iterator[PartitionInfo]:
        for partitions in self._by_topic.values():
            yield from partitions.values()

    def __repr__(self) -> str:
        return f"PartitionMap({len(self._by_topic)} topics, {self._len} partitions)"


class _PartitionValues(ValuesView[PartitionInfo]):
    _mapping: PartitionMap

    def __iter__(self) -> Iterator[PartitionInfo]:
        return self._mapping._infos()


class _PartitionItems(ItemsView[TopicPartition, PartitionInfo]):
    _mapping: PartitionMap

    def __iter__(self) -> Iterator[tuple[TopicPartition, PartitionInfo]]:
        return ((info.tp, info) for info in self._mapping._infos())


# --- the cluster model (collector thread only; no I/O) -----------------------------------------------


class Kind(IntEnum):
    """What a read is about; decides how its reply is applied."""

    BROKER_IDS = 1
    BROKER = 2
    TOPICS = 3
    TOPIC = 4
    STATE = 5
    CONTROLLER = 6
    CONTROLLER_EPOCH = 7
    CLUSTER_ID = 8
    PREFERRED_ELECTION = 9
    REASSIGNMENT = 10
    DELETIONS = 11
    TOPIC_CONFIGS = 12
    TOPIC_CONFIG = 13
    BROKER_CONFIGS = 14
    BROKER_CONFIG = 15


_LISTS: Mapping[Kind, str] = MappingProxyType(
    {
        Kind.BROKER_IDS: zkdata.BROKER_IDS_PATH,
        Kind.TOPICS: zkdata.BROKER_TOPICS_PATH,
        Kind.TOPIC_CONFIGS: f"{zkdata.CONFIG_PATH}/topics",
        Kind.BROKER_CONFIGS: f"{zkdata.CONFIG_PATH}/brokers",
        Kind.DELETIONS: zkdata.DELETE_TOPICS_PATH,
    }
)
_SINGLETONS: Mapping[Kind, str] = MappingProxyType(
    {
        Kind.CONTROLLER: zkdata.CONTROLLER_PATH,
        Kind.CONTROLLER_EPOCH: zkdata.CONTROLLER_EPOCH_PATH,
        Kind.CLUSTER_ID: zkdata.CLUSTER_ID_PATH,
        Kind.PREFERRED_ELECTION: zkdata.PREFERRED_REPLICA_ELECTION_PATH,
        Kind.REASSIGNMENT: zkdata.REASSIGN_PARTITIONS_PATH,
    }
)
_KIND_OF_PATH: Mapping[str, Kind] = MappingProxyType(
    {path: kind for kind, path in (*_LISTS.items(), *_SINGLETONS.items())}
)
_CHILD_KINDS: Mapping[Kind, Kind] = MappingProxyType(
    {
        Kind.BROKER_IDS: Kind.BROKER,
        Kind.TOPICS: Kind.TOPIC,
        Kind.TOPIC_CONFIGS: Kind.TOPIC_CONFIG,
        Kind.BROKER_CONFIGS: Kind.BROKER_CONFIG,
    }
)
_WATCH_WHEN_ABSENT = frozenset({*_LISTS, *_SINGLETONS})
"""Kinds whose creation no parent's children watch reports: an ``exists`` watch waits for them (state
znodes too, while their partition exists: see ``_on_state``)."""
_SESSION_CODES = frozenset({Code.CONNECTION_LOSS, Code.SESSION_EXPIRED})
_READ_CODES = frozenset({Code.OK, Code.NO_NODE})
_EMPTY_CONFIG: Mapping[str, str] = MappingProxyType({})
_EMPTY_REASSIGNMENTS: Mapping[TopicPartition, tuple[int, ...]] = MappingProxyType({})


def _reason(code: int) -> str:
    return f"ZooKeeper refused the read: {Code.NAMES.get(code, 'error')} ({code})"


def read_for_event(event: WatchEvent) -> Read | None:
    """The read that refreshes what a watch event is about (None for paths the collector never watches)."""
    path = event.path
    kind = _KIND_OF_PATH.get(path)
    if kind is not None:
        return Read(Op.GET_CHILDREN if kind in _LISTS else Op.GET_DATA, path, True, kind)
    parts = path.split("/")
    if len(parts) == 4:
        parent = _KIND_OF_PATH.get(path.rsplit("/", 1)[0])
        child = _CHILD_KINDS.get(parent) if parent is not None else None
        if child is Kind.BROKER:
            return Read(Op.GET_DATA, path, True, child, int(parts[3])) if parts[3].isdecimal() else None
        if child is not None:
            return Read(Op.GET_DATA, path, True, child, parts[3])
    is_state = (
        len(parts) == 7 and parts[1:3] == ["brokers", "topics"] and parts[4:7:2] == ["partitions", "state"]
    )
    if is_state and parts[5].isdecimal():
        return Read(Op.GET_DATA, path, True, Kind.STATE, TopicPartition(parts[3], int(parts[5])))
    return None


class ClusterModel:
    """The collector's working state: applies replies, says what to read next, builds snapshots.

    Pure (no I/O, no threads), so it can be driven by a fake reader. Partitions are kept per topic; a
    topic's dict is copied before its first change after a snapshot was built from it (copy-on-write).
    """

    def __init__(self, watch: bool = True) -> None:
        self.watch = watch
        self.dirty = False
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id: int | None = None
        self.controller_epoch: int | None = None
        self.controller_epoch_version: int | None = None
        self.cluster_id: str | None = None
        self.assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        self.topic_ids: dict[str, str | None] = {}
        self.partitions: dict[str, dict[int, PartitionInfo]] = {}
        self.partition_count = 0
        self.topic_configs: dict[str, Mapping[str, str]] = {}
        self.broker_configs: dict[str, Mapping[str, str]] = {}
        self.deletions: tuple[str, ...] = ()
        self.preferred_election: tuple[TopicPartition, ...] = ()
        self.reassignments: Mapping[TopicPartition, tuple[int, ...]] = _EMPTY_REASSIGNMENTS
        self.errors: dict[str, ZnodeError] = {}
        self._owned: set[str] = set()
        self._views: dict[str, Any] = {}

    def root_reads(self) -> list[Read]:
        """The first level of a full scan."""
        w = self.watch
        return [Read(Op.GET_CHILDREN, path, w, kind) for kind, path in _LISTS.items()] + [
            Read(Op.GET_DATA, path, w, kind) for kind, path in _SINGLETONS.items()
        ]

    def apply(self, reply: Reply) -> list[Read] | None:
        """Apply one reply; return the reads it calls for (None if none)."""
        read, code = reply.read, reply.code
        if code in _SESSION_CODES:
            return None  # the session event that comes with it triggers the resync
        if read.op == Op.EXISTS:
            if code == Code.OK:  # created between our read and the exists: read it now
                op = Op.GET_CHILDREN if read.kind in _LISTS else Op.GET_DATA
                return [read._replace(op=op)]
            if code != Code.NO_NODE:
                self._error(read.path, _reason(code))
            return None
        if code not in _READ_CODES:
            self._error(read.path, _reason(code))
            return None
        follow = _HANDLERS[read.kind](self, reply)
        if code == Code.NO_NODE and self.watch and read.kind in _WATCH_WHEN_ABSENT:
            return [*(follow or ()), read._replace(op=Op.EXISTS)]
        return follow

    # --- handlers ---

    def _on_children(self, reply: Reply) -> list[Read] | None:
        read = reply.read
        kind = Kind(read.kind)
        child_kind = _CHILD_KINDS[kind]
        known: Mapping[Any, Any]
        if kind is Kind.BROKER_IDS:
            known = self.brokers
        elif kind is Kind.TOPICS:
            known = self.assignments
        else:
            known = self.topic_configs if kind is Kind.TOPIC_CONFIGS else self.broker_configs
        listed: dict[Any, str] = {}
        for name in reply.children or ():
            if kind is Kind.BROKER_IDS and not name.isdecimal():
                self._error(f"{read.path}/{name}", f"{name!r} is not a broker id")
                continue
            listed[int(name) if kind is Kind.BROKER_IDS else name] = name
        for key in [k for k in known if k not in listed]:
            self._remove(child_kind, key)
        self._forget_errors_under(read.path, set(reply.children or ()))
        return [
            Read(Op.GET_DATA, f"{read.path}/{name}", self.watch, child_kind, key)
            for key, name in listed.items()
            if key not in known
        ] or None

    def _remove(self, kind: Kind, key: Any) -> None:
        if kind is Kind.BROKER:
            del self.brokers[key]
            self._views.pop("brokers", None)
        elif kind is Kind.TOPIC:
            self._drop_topic(key)
        elif kind is Kind.TOPIC_CONFIG:
            del self.topic_configs[key]
            self._views.pop("topics", None)
        else:
            del self.broker_configs[key]
            self._views.pop("broker_configs", None)
        self.dirty = True

    def _on_broker(self, reply: Reply) -> None:
        broker_id: int = reply.read.key
        path = reply.read.path
        registration = None
        if reply.code == Code.OK:
            try:
                registration = zkdata.decode_broker_registration(path, broker_id, reply.data, reply.czxid)
            except zkdata.ZnodeFormatError as exc:
                self._format_error(exc)
            else:
                self._clear_error(path)
        else:
            self._clear_error(path)
        if registration is not None:
            self.brokers[broker_id] = registration
        elif broker_id not in self.brokers:
            return
        else:
            del self.brokers[broker_id]
        self._views.pop("brokers", None)
        self.dirty = True

    def _on_topic(self, reply: Reply) -> list[Read] | None:
        topic: str = reply.read.key
        path = reply.read.path
        if reply.code == Code.NO_NODE:
            self._clear_error(path)
            self._drop_topic(topic)
            return None
        try:
            assignment, topic_id = zkdata.decode_topic(path, reply.data)
        except zkdata.ZnodeFormatError as exc:
            self._format_error(exc)
            self._drop_topic(topic)
            return None
        self._clear_error(path)
        old = self.assignments.get(topic, {})
        self.assignments[topic] = assignment
        if topic not in self.topic_ids or self.topic_ids[topic] != topic_id:
            self.topic_ids[topic] = topic_id
            self._views.pop("topics", None)
        self.dirty = True
        return self._reassign_partitions(topic, old, assignment)

    def _reassign_partitions(
        self, topic: str, old: Mapping[int, ReplicaAssignment], new: Mapping[int, ReplicaAssignment]
    ) -> list[Read] | None:
        """Bring the topic's partitions in line with its topic znode; read the states of new ones."""
        parts = self._writable(topic)
        reads = []
        prefix = zkdata.topic_partitions_path(topic)
        for partition, assignment in new.items():
            info = parts.get(partition)
            if info is None:
                tp = TopicPartition(topic, partition)
                parts[partition] = PartitionInfo(tp, assignment)
                reads.append(Read(Op.GET_DATA, f"{prefix}/{partition}/state", self.watch, Kind.STATE, tp))
            elif info.assignment != assignment:
                parts[partition] = PartitionInfo(info.tp, assignment, info.state)
        for partition in old.keys() - new.keys():
            if parts.pop(partition, None) is not None:
                self._clear_error(zkdata.partition_state_path(TopicPartition(topic, partition)))
        self.partition_count += len(new) - len(old)
        return reads or None

    def _drop_topic(self, topic: str) -> None:
        if self.assignments.pop(topic, None) is None:
            return
        self.topic_ids.pop(topic, None)
        self.partition_count -= len(self.partitions.pop(topic, ()))
        self._owned.discard(topic)
        self._forget_errors_under(zkdata.topic_path(topic), set())
        self._views.pop("topics", None)
        self.dirty = True

    def _writable(self, topic: str) -> dict[int, PartitionInfo]:
        parts = self.partitions.get(topic)
        if parts is None:
            parts = self.partitions[topic] = {}
            self._owned.add(topic)
        elif topic not in self._owned:
            parts = self.partitions[topic] = dict(parts)
            self._owned.add(topic)
        return parts

    def _on_state(self, reply: Reply) -> list[Read] | None:
        tp: TopicPartition = reply.read.key
        parts = self.partitions.get(tp.topic)
        info = parts.get(tp.partition) if parts is not None else None
        if info is None:
            return None  # the topic or partition is gone (or not read yet: its topic reply asks again)
        state = None
        follow = None
        if reply.code == Code.OK:
            try:
                state = zkdata.decode_partition_state(reply.read.path, reply.data, reply.version)
            except zkdata.ZnodeFormatError as exc:
                self._format_error(exc)
            else:
                if self.errors:
                    self._clear_error(reply.read.path)
        else:
            if self.errors:
                self._clear_error(reply.read.path)
            if self.watch:  # no state yet (a new partition): wait for the controller to write it
                follow = [reply.read._replace(op=Op.EXISTS)]
        if state != info.state:
            self._writable(tp.topic)[tp.partition] = PartitionInfo(info.tp, info.assignment, state)
            self.dirty = True
        return follow

    def _on_config(self, reply: Reply) -> None:
        read = reply.read
        configs = self.topic_configs if read.kind == Kind.TOPIC_CONFIG else self.broker_configs
        config = None
        if reply.code == Code.OK:
            try:
                config = MappingProxyType(zkdata.decode_config(read.path, reply.data))
            except zkdata.ZnodeFormatError as exc:
                self._format_error(exc)
            else:
                self._clear_error(read.path)
        else:
            self._clear_error(read.path)
        if config is None:
            if configs.pop(read.key, None) is None:
                return
        else:
            configs[read.key] = config
        self._views.pop("topics" if read.kind == Kind.TOPIC_CONFIG else "broker_configs", None)
        self.dirty = True

    def _on_deletions(self, reply: Reply) -> None:
        deletions = tuple(sorted(reply.children or ()))
        if deletions != self.deletions:
            self.deletions = deletions
            self._views.pop("topics", None)
            self.dirty = True

    def _on_controller(self, reply: Reply) -> None:
        self._set("controller_id", self._decode(reply, zkdata.decode_controller))

    def _on_controller_epoch(self, reply: Reply) -> None:
        epoch = self._decode(reply, zkdata.decode_controller_epoch)
        self._set("controller_epoch", epoch)
        self._set("controller_epoch_version", None if epoch is None else reply.version)

    def _on_cluster_id(self, reply: Reply) -> None:
        self._set("cluster_id", self._decode(reply, zkdata.decode_cluster_id))

    def _on_preferred_election(self, reply: Reply) -> None:
        partitions = self._decode(reply, zkdata.decode_partition_list)
        self._set("preferred_election", tuple(partitions or ()))

    def _on_reassignment(self, reply: Reply) -> None:
        targets = self._decode(reply, zkdata.decode_reassignment)
        self._set("reassignments", MappingProxyType(targets) if targets else _EMPTY_REASSIGNMENTS)

    def _decode(self, reply: Reply, decoder: Callable[[str, bytes | None], Any]) -> Any:
        """Decoded data of a singleton znode; None when it is absent or malformed (then recorded)."""
        path = reply.read.path
        if reply.code != Code.OK:
            self._clear_error(path)
            return None
        try:
            value = decoder(path, reply.data)
        except zkdata.ZnodeFormatError as exc:
            self._format_error(exc)
            return None
        self._clear_error(path)
        return value

    def _set(self, attribute: str, value: Any) -> None:
        if getattr(self, attribute) != value:
            setattr(self, attribute, value)
            self.dirty = True

    # --- errors ---

    def _format_error(self, exc: zkdata.ZnodeFormatError) -> None:
        self._error(exc.path, exc.reason)

    def _error(self, path: str, reason: str) -> None:
        if self.errors.get(path) != ZnodeError(path, reason):
            self.errors[path] = ZnodeError(path, reason)
            self._views.pop("errors", None)
            self.dirty = True

    def _clear_error(self, path: str) -> None:
        if self.errors.pop(path, None) is not None:
            self._views.pop("errors", None)
            self.dirty = True

    def _forget_errors_under(self, parent: str, keep: set[str]) -> None:
        prefix = parent + "/"
        for path in [p for p in self.errors if p.startswith(prefix)]:
            if path[len(prefix) :].split("/", 1)[0] not in keep:
                self._clear_error(path)

    # --- snapshots ---

    def build(
        self, version: int, taken_at: float, last_good_at: float | None, stale: bool
    ) -> ClusterSnapshot:
        """A snapshot of the current state; later changes copy what they touch, so it stays immutable."""
        self._owned.clear()
        self.dirty = False
        return ClusterSnapshot(
            version=version,
            taken_at=taken_at,
            last_good_at=last_good_at,
            stale=stale,
            cluster_id=self.cluster_id,
            brokers=self._view("brokers", lambda: MappingProxyType(dict(sorted(self.brokers.items())))),
            controller=ControllerInfo(
                self.controller_id, self.controller_epoch, self.controller_epoch_version
            ),
            topics=self._view("topics", self._topic_infos),
            partitions=PartitionMap(dict(self.partitions), self.partition_count),
            broker_configs=self._view("broker_configs", lambda: MappingProxyType(dict(self.broker_configs))),
            pending=PendingOperations(self.preferred_election, self.reassignments, self.deletions),
            errors=self._view("errors", lambda: tuple(sorted(self.errors.values(), key=lambda e: e.path))),
        )

    def _view(self, name: str, make: Callable[[], Any]) -> Any:
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = make()
        return view

    def _topic_infos(self) -> Mapping[str, TopicInfo]:
        deletions = set(self.deletions)
        return MappingProxyType(
            {
                name: TopicInfo(
                    name,
                    self.topic_ids.get(name),
                    self.topic_configs.get(name, _EMPTY_CONFIG),
                    name in deletions,
                )
                for name in sorted(self.assignments)
            }
        )


_Handler = Callable[[ClusterModel, Reply], "list[Read] | None"]
_HANDLERS: Mapping[int, _Handler] = MappingProxyType(
    {
        # A table of plain functions, not of bound methods: those would make every model a reference cycle
        # that only the cyclic GC frees, holding a replaced model's 200k partitions until it runs.
        Kind.BROKER_IDS: ClusterModel._on_children,
        Kind.TOPICS: ClusterModel._on_children,
        Kind.TOPIC_CONFIGS: ClusterModel._on_children,
        Kind.BROKER_CONFIGS: ClusterModel._on_children,
        Kind.BROKER: ClusterModel._on_broker,
        Kind.TOPIC: ClusterModel._on_topic,
        Kind.STATE: ClusterModel._on_state,
        Kind.TOPIC_CONFIG: ClusterModel._on_config,
        Kind.BROKER_CONFIG: ClusterModel._on_config,
        Kind.DELETIONS: ClusterModel._on_deletions,
        Kind.CONTROLLER: ClusterModel._on_controller,
        Kind.CONTROLLER_EPOCH: ClusterModel._on_controller_epoch,
        Kind.CLUSTER_ID: ClusterModel._on_cluster_id,
        Kind.PREFERRED_ELECTION: ClusterModel._on_preferred_election,
        Kind.REASSIGNMENT: ClusterModel._on_reassignment,
    }
)


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
    ``reader_factory`` builds the sessions (default :class:`WireReader`; :class:`KazooReader` or a fake).
    """

    def __init__(
        self,
        connect: str,
        *,
        connections: int = DEFAULT_CONNECTIONS,
        in_flight: int = DEFAULT_IN_FLIGHT,
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
        on_change: Callable[[ClusterSnapshot], None] | None = None,
        watch: bool = True,
        reader_factory: ReaderFactory | None = None,
        pause_gc: bool = True,
    ) -> None:
        servers, chroot = zkdata.parse_connect_string(connect)
        if connections < 1 or in_flight < 1:
            raise ValueError(f"connections and in_flight must be at least 1, got {connections}, {in_flight}")
        if not session_timeout_s > 0:
            raise ValueError(f"session_timeout_s must be positive, got {session_timeout_s}")
        self.connect = connect
        self._specs = [
            ReaderSpec(tuple(servers), chroot, session_timeout_s, in_flight, i) for i in range(connections)
        ]
        self._factory: ReaderFactory = reader_factory or WireReader
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
        self._resume_gc()
        if self._need_resync:
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
    connect: str, timeout: float = DEFAULT_START_TIMEOUT_S, *, connections: int = DEFAULT_CONNECTIONS
) -> ClusterSnapshot:
    """Read the cluster at ``connect`` once (no watches left behind), for ``kafka-health describe``.

    Raises ValueError for a bad connect string, :class:`ZooKeeperUnreachableError` or
    :class:`ScanTimeoutError` when the cluster cannot be read in ``timeout`` seconds.
    """
    collector = ZooKeeperCollector(connect, connections=connections, watch=False)
    collector.start(timeout)
    try:
        return collector.snapshot
    finally:
        collector.stop()
