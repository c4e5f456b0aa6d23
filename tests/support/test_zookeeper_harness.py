"""The ZooKeeper pytest plugin: chroot isolation and real session faults on the shared server."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from tests.support.zookeeper import ZkClientFactory, ZooKeeperEndpoint, expire_session, lose_connection

pytestmark = pytest.mark.integration


def test_chroot_is_fresh_and_rooted_under_its_own_node(
    zk_client: KazooClient, zk_chroot: str, zk_connect: str, zookeeper_server: ZooKeeperEndpoint
) -> None:
    assert zk_connect == f"{zookeeper_server.connect_string}{zk_chroot}"
    assert zk_chroot.startswith("/t-test_chroot_is_fresh")
    assert zk_client.get_children("/") == []
    zk_client.create("/brokers/ids/1", b"{}", makepath=True)


def test_chroots_do_not_leak_between_tests(zk_client: KazooClient, make_zk_client: ZkClientFactory) -> None:
    assert zk_client.exists("/brokers") is None
    root = make_zk_client(hosts=_root_hosts(zk_client))
    leftovers = [child for child in root.get_children("/") if child.startswith("t-test_chroot_is_fresh")]
    assert leftovers == []


def test_two_chroots_in_one_run_are_distinct(zk_chroot: str, make_zk_client: ZkClientFactory) -> None:
    other = make_zk_client()
    other.create("/mine", b"x")
    root = make_zk_client(hosts=_root_hosts(other))
    assert root.get(f"{zk_chroot}/mine")[0] == b"x"


def test_expire_session_drops_ephemerals_and_reconnects_with_new_session(
    zk_client: KazooClient, make_zk_client: ZkClientFactory
) -> None:
    observer = make_zk_client()
    zk_client.create("/controller", b"1", ephemeral=True)
    old_session = zk_client.client_id[0]

    expire_session(zk_client)

    assert zk_client.state == KazooState.CONNECTED
    assert zk_client.client_id[0] != old_session
    assert observer.exists("/controller") is None


def test_lose_connection_keeps_session_and_ephemerals(
    zk_client: KazooClient, make_zk_client: ZkClientFactory
) -> None:
    observer = make_zk_client()
    zk_client.create("/controller", b"1", ephemeral=True)
    old_session = zk_client.client_id[0]
    states: list[KazooState] = []
    zk_client.add_listener(states.append)

    lose_connection(zk_client)

    assert KazooState.SUSPENDED in states
    assert zk_client.state == KazooState.CONNECTED
    assert zk_client.client_id[0] == old_session
    assert observer.exists("/controller") is not None


def test_make_zk_client_can_defer_start(make_zk_client: ZkClientFactory) -> None:
    client = make_zk_client(start=False, timeout=5.0)
    assert not client.connected
    client.start()
    assert client.get_children("/") == []


def _root_hosts(client: KazooClient) -> str:
    return ",".join(f"{host}:{port}" for host, port in client.hosts)
