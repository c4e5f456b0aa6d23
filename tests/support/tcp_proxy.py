"""A TCP proxy a test can cut: the network between a client and a server failing, and coming back.

``TcpProxy(("127.0.0.1", zk_port))`` forwards every connection made to ``proxy.port`` to the target.
:meth:`TcpProxy.cut` drops every connection and refuses new ones (accepted and closed at once, as a
failing network or a server that is down looks to a client) until :meth:`TcpProxy.restore`. A ZooKeeper
client connected through it loses its connection (kazoo: SUSPENDED) but not, until the server's session
timeout passes, its session: exactly what the tests of the incident lane's staleness and of the last
leader need, which ``expire_session`` and ``lose_connection`` (tests.support.zookeeper) cannot hold.

Not a pytest plugin: use it as a context manager.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Self

__all__ = ["TcpProxy"]

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._blocked = False
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._acceptor.start()

    def address(self, chroot: str = "") -> str:
        """``127.0.0.1:PORT`` with ``chroot`` appended: a ZooKeeper connect string through the proxy."""
        return f"127.0.0.1:{self.port}{chroot}"

    def cut(self) -> None:
        """Drop every connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._blocked = True
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._blocked = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.cut()
        _close(self._listener)
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    _close(client)
                    return
                blocked = self._blocked
            if blocked:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                thread = threading.Thread(target=self._pump, args=(source, sink), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
