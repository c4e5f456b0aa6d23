"""The admin znode writer against a real ZooKeeper (a fresh chroot per test): entity configs with their
``/config/changes`` notifications as ``kafka-configs`` writes them, and the znode operations the runbook
actions' executors rely on (create once, wait for the controller's delete)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from collectors.kafka import zkdata
from collectors.kafka.admin import KazooAdmin, read_entity_config, write_entity_config

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(zk_connect: str) -> Iterator[KazooAdmin]:
    writer = KazooAdmin(zk_connect)
    yield writer
    writer.close()


def _notifications(zk: KazooClient) -> list[tuple[str, dict[str, object]]]:
    """The ``/config/changes`` children in sequence order, with their JSON."""
    if zk.exists(zkdata.CONFIG_CHANGES_PATH) is None:
        return []
    names = sorted(zk.get_children(zkdata.CONFIG_CHANGES_PATH))
    return [(n, json.loads(zk.get(f"{zkdata.CONFIG_CHANGES_PATH}/{n}")[0])) for n in names]


def test_set_config_writes_the_config_znode_and_one_notification_naming_the_entity(
    admin: KazooAdmin, zk_client: KazooClient
) -> None:
    admin.set_config("topics", "orders", {"min.insync.replicas": "2", "retention.ms": "1000"})

    data, _ = zk_client.get("/config/topics/orders")
    assert json.loads(data) == {"version": 1, "config": {"min.insync.replicas": "2", "retention.ms": "1000"}}
    assert _notifications(zk_client) == [
        ("config_change_0000000000", {"version": 2, "entity_path": "topics/orders"})
    ]
    assert admin.get_config("topics", "orders") == {"min.insync.replicas": "2", "retention.ms": "1000"}


def test_set_config_replaces_the_whole_config_and_notifies_every_time(
    admin: KazooAdmin, zk_client: KazooClient
) -> None:
    admin.set_config("brokers", "1", {"follower.replication.throttled.rate": "100", "a": "b"})
    admin.set_config("brokers", "1", {"leader.replication.throttled.rate": "200"})
    admin.set_config("brokers", "<default>", {"unclean.leader.election.enable": "false"})

    assert admin.get_config("brokers", "1") == {"leader.replication.throttled.rate": "200"}
    assert admin.get_config("brokers", "<default>") == {"unclean.leader.election.enable": "false"}
    assert _notifications(zk_client) == [
        ("config_change_0000000000", {"version": 2, "entity_path": "brokers/1"}),
        ("config_change_0000000001", {"version": 2, "entity_path": "brokers/1"}),
        ("config_change_0000000002", {"version": 2, "entity_path": "brokers/<default>"}),
    ]


def test_an_entity_without_a_config_znode_has_no_overrides(admin: KazooAdmin, zk_client: KazooClient) -> None:
    assert admin.get_config("topics", "absent") == {}
    assert read_entity_config(zk_client, "brokers", "7") == {}


def test_a_config_written_without_notification_leaves_config_changes_alone(zk_client: KazooClient) -> None:
    """As topic creation writes it: the brokers read the config with the new topic."""
    write_entity_config(zk_client, "topics", "fresh", {"cleanup.policy": "compact"}, notify=False)

    assert read_entity_config(zk_client, "topics", "fresh") == {"cleanup.policy": "compact"}
    assert _notifications(zk_client) == []


def test_create_makes_the_parents_and_refuses_a_znode_that_is_there(
    admin: KazooAdmin, zk_client: KazooClient
) -> None:
    assert not admin.exists(zkdata.REASSIGN_PARTITIONS_PATH)
    admin.create(zkdata.REASSIGN_PARTITIONS_PATH, b"first")

    assert admin.exists(zkdata.REASSIGN_PARTITIONS_PATH)
    with pytest.raises(NodeExistsError):
        admin.create(zkdata.REASSIGN_PARTITIONS_PATH, b"second")
    assert zk_client.get(zkdata.REASSIGN_PARTITIONS_PATH)[0] == b"first"


def test_wait_deleted_returns_when_another_session_deletes_the_znode(
    admin: KazooAdmin, zk_client: KazooClient
) -> None:
    path = zkdata.PREFERRED_REPLICA_ELECTION_PATH
    admin.create(path, b"{}")
    deleter = threading.Timer(0.3, zk_client.delete, args=(path,))
    deleter.start()
    try:
        assert admin.wait_deleted(path, timeout_s=20.0)
    finally:
        deleter.join()
    assert zk_client.exists(path) is None


def test_wait_deleted_gives_up_after_the_timeout_and_is_at_once_true_for_an_absent_znode(
    admin: KazooAdmin,
) -> None:
    path = zkdata.PREFERRED_REPLICA_ELECTION_PATH
    assert admin.wait_deleted(path, timeout_s=0.0)
    admin.create(path, b"{}")

    assert not admin.wait_deleted(path, timeout_s=0.5)
    assert admin.exists(path)


def test_close_ends_the_session_and_the_next_call_opens_a_new_one(admin: KazooAdmin) -> None:
    admin.set_config("topics", "t", {"k": "v"})
    admin.close()
    admin.close()

    assert admin.get_config("topics", "t") == {"k": "v"}
