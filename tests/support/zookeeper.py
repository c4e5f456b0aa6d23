"""pytest plugin: one real ZooKeeper for the whole run, a fresh chroot per test, and fault helpers.

Modelled on kazoo's own test harness (``kazoo/testing/harness.py``): tests never share znodes because each
gets its own chroot, and sessions are broken for real, on a real server, by ``expire_session()`` and
``lose_connection()``; ``jvm_gone()`` waits for a server's JVM to exit. Enable it with
``pytest_plugins = ["tests.support.zookeeper"]`` in a conftest.

Set ``KAFKA_HEALTH_TEST_ZOOKEEPER=host:port`` to run against an existing server instead of starting one.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import psutil
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError
from kazoo.protocol.connection import _CONNECTION_DROP
from kazoo.protocol.states import KazooState

from app.embedded.zookeeper import EmbeddedZooKeeper

EXTERNAL_SERVER_ENV = "KAFKA_HEALTH_TEST_ZOOKEEPER"
CLIENT_START_TIMEOUT = 15.0
_UNSAFE_NODE_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


class ZooKeeperEndpoint(Protocol):
    """What a test needs of the server: where to connect."""

    @property
    def connect_string(self) -> str: ...


@dataclass(frozen=True)
class ExternalZooKeeper:
    """A server someone else runs, named by ``KAFKA_HEALTH_TEST_ZOOKEEPER``."""

    connect_string: str


class ZkClientFactory(Protocol):
    """``make_zk_client(**kazoo_options)``: a started client on the test's chroot, closed after the test."""

    def __call__(self, *, hosts: str | None = None, start: bool = True, **options: Any) -> KazooClient: ...


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperEndpoint]:
    """One server for the whole run: starting a JVM per test would dominate the run time."""
    external = os.environ.get(EXTERNAL_SERVER_ENV)
    if external:
        yield ExternalZooKeeper(external)
        return
    with EmbeddedZooKeeper(heap="512m") as server:
        yield server


@pytest.fixture
def _zk_root_client(zookeeper_server: ZooKeeperEndpoint) -> Iterator[KazooClient]:
    """Un-chrooted admin client that creates and removes the test's chroot.

    Per test, not per session: a live kazoo client draws from the process-wide ``random`` in its
    connection loop, which hypothesis reports as an error in any property test that runs meanwhile.
    """
    client = KazooClient(hosts=zookeeper_server.connect_string)
    client.start(timeout=CLIENT_START_TIMEOUT)
    yield client
    _close(client)


@pytest.fixture
def zk_chroot(request: pytest.FixtureRequest, _zk_root_client: KazooClient) -> Iterator[str]:
    """A fresh chroot node, e.g. ``/t-test_name-1a2b3c4d``, deleted with everything under it afterwards."""
    name = _UNSAFE_NODE_CHARS.sub("_", request.node.name)[:60]
    chroot = f"/t-{name}-{uuid.uuid4().hex[:8]}"
    _zk_root_client.ensure_path(chroot)
    yield chroot
    _delete_tree(_zk_root_client, chroot)


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeperEndpoint, zk_chroot: str) -> str:
    """``host:port/chroot`` for code under test that takes a connect string."""
    return f"{zookeeper_server.connect_string}{zk_chroot}"


@pytest.fixture
def make_zk_client(zk_connect: str) -> Iterator[ZkClientFactory]:
    """Factory for extra clients (watchers, competing sessions); every one is closed after the test."""
    clients: list[KazooClient] = []

    def make(*, hosts: str | None = None, start: bool = True, **options: Any) -> KazooClient:
        client = KazooClient(hosts=hosts or zk_connect, **options)
        clients.append(client)
        if start:
            client.start(timeout=CLIENT_START_TIMEOUT)
        return client

    yield make
    for client in reversed(clients):
        _close(client)


@pytest.fixture
def zk_client(make_zk_client: ZkClientFactory) -> KazooClient:
    """A started kazoo client rooted at the test's chroot."""
    return make_zk_client()


def expire_session(client: KazooClient, timeout: float = 10.0) -> None:
    """Expire ``client``'s session on the server and wait until it has a new one.

    As kazoo's harness did: a second client joins the same session (id and password) and closes it, so
    the server really expires it, ephemerals and watches included. The original client then sees LOST and
    reconnects with a fresh session. Repeated, because the original may win the race to the server.
    """
    session_id, password = client.client_id
    lost, reconnected = threading.Event(), threading.Event()
    listener = _state_watcher(KazooState.LOST, lost, reconnected)
    client.add_listener(listener)
    deadline = time.monotonic() + timeout
    try:
        while not lost.is_set() and time.monotonic() < deadline:
            _close_session(_server_hosts(client), session_id, password, _remaining(deadline))
            lost.wait(min(2.0, _remaining(deadline)))
        _await(lost, deadline, "the client never saw its session expire")
        _await(reconnected, deadline, "the client did not reconnect after its session expired")
    finally:
        client.remove_listener(listener)
    client.retry(client.exists, "/")


def lose_connection(client: KazooClient, timeout: float = 10.0) -> None:
    """Drop ``client``'s TCP connection without expiring its session; wait until it reconnects.

    Uses kazoo's own test hook (the ``_CONNECTION_DROP`` request), as its harness does: the connection
    thread tears the socket down as if the network failed, then resumes the same session.
    """
    suspended, reconnected = threading.Event(), threading.Event()
    listener = _state_watcher(KazooState.SUSPENDED, suspended, reconnected)
    client.add_listener(listener)
    deadline = time.monotonic() + timeout
    try:
        client._call(_CONNECTION_DROP, client.handler.async_result())
        _await(suspended, deadline, "the client never noticed the dropped connection")
        _await(reconnected, deadline, "the client did not reconnect after the dropped connection")
    finally:
        client.remove_listener(listener)
    client.retry(client.exists, "/")


def jvm_gone(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` no longer runs; a zombie counts as gone (PID 1 may not reap in a container)."""
    deadline = time.monotonic() + within
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _state_watcher(
    broken: KazooState, seen_broken: threading.Event, seen_connected: threading.Event
) -> Callable[[KazooState], bool]:
    """Kazoo listener: note ``broken``, then the first CONNECTED after it (returning True unregisters)."""

    def listener(state: KazooState) -> bool:
        if state == broken:
            seen_broken.set()
        elif state == KazooState.CONNECTED and seen_broken.is_set():
            seen_connected.set()
            return True
        return False

    return listener


def _close_session(hosts: str, session_id: int, password: bytes, timeout: float) -> None:
    """Join the session from a second client and close it, which expires it on the server."""
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    try:
        intruder.start(timeout=max(timeout, 0.1))
        intruder.stop()
    except intruder.handler.timeout_exception:
        pass
    finally:
        intruder.close()


def _server_hosts(client: KazooClient) -> str:
    """The client's servers without its chroot (the intruder needs no chroot)."""
    return ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in client.hosts)


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _await(event: threading.Event, deadline: float, failure: str) -> None:
    if not event.wait(_remaining(deadline)):
        raise TimeoutError(failure)


def _delete_tree(client: KazooClient, path: str, attempts: int = 3) -> None:
    """Recursive delete, retried because a still-open client may recreate nodes mid-delete."""
    for attempt in range(1, attempts + 1):
        try:
            client.delete(path, recursive=True)
            return
        except NoNodeError:
            return
        except NotEmptyError:
            if attempt == attempts:
                raise


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


@contextmanager
def own_chroot(endpoint: ZooKeeperEndpoint, prefix: str) -> Iterator[str]:
    """A chroot of its own on the run's ZooKeeper for a module-scoped fixture (``zk_connect`` is per
    test): its connect string for the ``with`` block, the tree deleted afterwards."""
    chroot = f"/t-{prefix}-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=endpoint.connect_string)
    root.start(timeout=CLIENT_START_TIMEOUT)
    root.ensure_path(chroot)
    _close(root)
    try:
        yield endpoint.connect_string + chroot
    finally:
        root = KazooClient(hosts=endpoint.connect_string)
        root.start(timeout=CLIENT_START_TIMEOUT)
        _delete_tree(root, chroot)
        _close(root)
