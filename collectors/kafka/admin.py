"""The ZooKeeper writer of Kafka's admin znodes, as Kafka's ZooKeeper-mode admin tools write them.

In ZooKeeper mode an operator's tool never talks to a broker: it writes a znode (an entity config and its
``/config/changes`` notification, ``/admin/preferred_replica_election``, ``/admin/reassign_partitions``)
and the controller or the brokers act on it. Writing them the way Kafka's tools do matters, since the
brokers only re-read an entity's config when a notification names it.

- :class:`AdminZooKeeper` is what the runbook actions' executors need of ZooKeeper; :class:`KazooAdmin`
  implements it on its own kazoo session (the service's).
- :func:`read_entity_config` and :func:`write_entity_config` are the one implementation of the entity
  config znodes, shared by :class:`KazooAdmin` and the reference cluster's admin tools.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent
from kazoo.security import ACL

from collectors.kafka import zkclient, zkdata
from collectors.kafka.zkclient import ZooKeeperSecurity


class AdminZooKeeper(Protocol):
    def exists(self, path: str) -> bool: ...

    def read(self, path: str) -> bytes | None:
        """The znode's data; None when it does not exist."""

    def create(self, path: str, data: bytes) -> None:
        """Raises NodeExistsError when the znode is there already."""

    def wait_deleted(self, path: str, timeout_s: float) -> bool: ...

    def get_config(self, entity_type: str, entity: str) -> dict[str, str]: ...

    def set_config(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        """Replace the entity's config and tell the brokers (``/config/changes``), as kafka-configs does."""


def read_entity_config(zk: KazooClient, entity_type: str, entity: str) -> dict[str, str]:
    """The entity's config overrides (``/config/<type>/<entity>``); none when the znode is absent."""
    path = zkdata.entity_config_path(entity_type, entity)
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return {}
    return zkdata.decode_config(path, data)


AclPolicy = Callable[[str], Sequence[ACL] | None]
"""The ACL a znode created at a path gets (None: kazoo's default, open to all): Kafka's
``zookeeper.set.acl``."""


def write_entity_config(
    zk: KazooClient,
    entity_type: str,
    entity: str,
    config: Mapping[str, str],
    *,
    notify: bool = True,
    acls: AclPolicy | None = None,
) -> None:
    """Replace the entity's config, then (``notify``) create the sequential ``/config/changes`` znode that
    names it, as ``kafka-configs --alter`` does: brokers re-read a config only when told so.

    Topic creation writes the config without a notification (``AdminZkClient.createTopic``): the brokers
    read it with the new topic.
    """
    path = zkdata.entity_config_path(entity_type, entity)
    data = zkdata.encode_config(config)
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data, acl=_acl(acls, path), makepath=True)
    if notify:
        change = f"{zkdata.CONFIG_CHANGES_PATH}/{zkdata.CONFIG_CHANGE_PREFIX}"
        zk.create(
            change,
            zkdata.encode_config_change(entity_type, entity),
            acl=_acl(acls, change),
            sequence=True,
            makepath=True,
        )


def _acl(acls: AclPolicy | None, path: str) -> list[ACL] | None:
    chosen = None if acls is None else acls(path)
    return None if chosen is None else list(chosen)


class KazooAdmin:
    """:class:`AdminZooKeeper` on a kazoo session, connected on first use, with ``security``'s credentials
    (digest, SASL, TLS); with ``zookeeper.set.acl`` the znodes it creates get Kafka's secure ACLs."""

    def __init__(
        self, connect: str, timeout_s: float = 15.0, *, security: ZooKeeperSecurity | None = None
    ) -> None:
        self._connect = connect
        self._timeout_s = timeout_s
        self._security = security or ZooKeeperSecurity()
        self._acls: AclPolicy = functools.partial(zkclient.acls_for, security=self._security)
        self._client: KazooClient | None = None
        self._lock = threading.Lock()

    def _zk(self) -> KazooClient:
        with self._lock:
            if self._client is None:
                client = zkclient.kazoo_client(
                    self._connect, timeout=self._timeout_s, security=self._security
                )
                client.start(timeout=self._timeout_s)
                self._client = client
            return self._client

    def exists(self, path: str) -> bool:
        return self._zk().exists(path) is not None

    def read(self, path: str) -> bytes | None:
        try:
            data, _ = self._zk().get(path)
        except NoNodeError:
            return None
        return bytes(data)

    def create(self, path: str, data: bytes) -> None:
        self._zk().create(path, data, acl=_acl(self._acls, path), makepath=True)

    def wait_deleted(self, path: str, timeout_s: float) -> bool:
        gone = threading.Event()

        def watch(_: WatchedEvent) -> None:
            gone.set()

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._zk().exists(path, watch=watch) is None:
                return True
            gone.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            gone.clear()
        return self._zk().exists(path) is None

    def get_config(self, entity_type: str, entity: str) -> dict[str, str]:
        return read_entity_config(self._zk(), entity_type, entity)

    def set_config(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        write_entity_config(self._zk(), entity_type, entity, config, acls=self._acls)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None
