"""``describe``'s effective topic settings on a real ZooKeeper holding a tree in Kafka's own formats: where
``min.insync.replicas`` and ``unclean.leader.election.enable`` came from, and a ``/config/brokers`` that an
ACL keeps from us (as Kafka protects its sensitive paths) reported rather than silently defaulted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from app.cli.main import main
from tests.support.zookeeper import ZkClientFactory

pytestmark = pytest.mark.integration

KAFKA_ONLY = [make_digest_acl("kafka", "kafka-secret", all=True)]
"""What ``zookeeper.set.acl=true`` gives a sensitive path: only Kafka's identity may read it."""


def js(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def config(**entries: str) -> bytes:
    return js({"version": 1, "config": {k.replace("_", "."): v for k, v in entries.items()}})


def registration(broker: int) -> bytes:
    return js(
        {"listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}, "endpoints": [f"PLAINTEXT://b{broker}:9092"],
         "rack": None, "jmx_port": -1, "host": f"b{broker}", "timestamp": "1700000000000", "port": 9092,
         "version": 5}
    )  # fmt: skip


def state(leader: int, isr: list[int]) -> bytes:
    return js({"controller_epoch": 3, "leader": leader, "version": 1, "leader_epoch": 2, "isr": isr})


def tree() -> dict[str, bytes]:
    """orders-0 led by 1 (ISR 2 of 3), orders-1 led by 2 (ISR 2 of 3), payments-0 with its own min ISR 3."""
    return {
        **{f"/brokers/ids/{b}": registration(b) for b in (1, 2, 3)},
        "/controller": js({"version": 1, "brokerid": 1, "timestamp": "1700000000000"}),
        "/controller_epoch": b"3",
        "/cluster/id": js({"version": "1", "id": "abcdefghijklmnopqrstuv"}),
        "/brokers/topics/orders": js({"version": 3, "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
                                      "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "adding_replicas": {},
                                      "removing_replicas": {}}),
        "/brokers/topics/orders/partitions/0/state": state(1, [1, 2]),
        "/brokers/topics/orders/partitions/1/state": state(2, [2, 3]),
        "/brokers/topics/payments": js({"version": 3, "partitions": {"0": [3, 1, 2]},
                                        "topic_id": "BBBBBBBBBBBBBBBBBBBBBB", "adding_replicas": {},
                                        "removing_replicas": {}}),
        "/brokers/topics/payments/partitions/0/state": state(3, [3, 1, 2]),
        "/config/topics/orders": config(),
        "/config/topics/payments": config(min_insync_replicas="3"),
    }  # fmt: skip


def write(zk: KazooClient, nodes: dict[str, bytes]) -> None:
    for path, data in nodes.items():
        zk.create(path, data, makepath=True)


def describe(capsys: pytest.CaptureFixture[str], zk_connect: str, *args: str) -> tuple[int, str, str]:
    code = main(["describe", "--zookeeper", zk_connect, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def describe_json(capsys: pytest.CaptureFixture[str], zk_connect: str, *args: str) -> dict[str, Any]:
    code, out, err = describe(capsys, zk_connect, "--format", "json", *args)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def settings_of(result: dict[str, Any], name: str) -> dict[str, tuple[Any, ...]]:
    """``topic-partition`` -> (value, source, assumed_from) of ``min_isr`` or ``unclean_leader_election``."""
    return {
        f"{p['topic']}-{p['partition']}": (p[name], p[f"{name}_source"], p[f"{name}_assumed_from"])
        for p in result["partitions"]
    }


@pytest.fixture
def kafka_client(make_zk_client: ZkClientFactory) -> KazooClient:
    """A session with Kafka's identity: it may read and write what ``KAFKA_ONLY`` protects."""
    return make_zk_client(auth_data=[("digest", "kafka:kafka-secret")])


@pytest.fixture
def protected_broker_configs(kafka_client: KazooClient) -> Iterator[None]:
    """``/config/brokers`` and its children readable by Kafka's identity only; removed by that identity
    afterwards (the chroot's cleanup cannot list what it cannot read)."""
    kafka_client.ensure_path("/config")  # open, like Kafka's /config: only the sensitive path is protected
    kafka_client.create("/config/brokers", b"", acl=KAFKA_ONLY)
    kafka_client.create("/config/brokers/<default>", config(min_insync_replicas="2"), acl=KAFKA_ONLY)
    yield
    kafka_client.set_acls("/config/brokers", OPEN_ACL_UNSAFE)
    kafka_client.delete("/config/brokers", recursive=True)


def test_each_value_says_the_level_it_came_from(
    zk_client: KazooClient, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(zk_client, tree())
    write(
        zk_client,
        {
            "/config/brokers/<default>": config(
                min_insync_replicas="2", unclean_leader_election_enable="false"
            ),
            "/config/brokers/2": config(min_insync_replicas="1"),
            "/config/brokers/1": config(unclean_leader_election_enable="true"),  # the controller's own
        },
    )

    result = describe_json(capsys, zk_connect, "--default-min-isr", "3")

    assert settings_of(result, "min_isr") == {
        "orders-0": (2, "cluster_default", None),
        "orders-1": (1, "broker", None),  # its leader, broker 2, has its own value
        "payments-0": (3, "topic", None),
    }
    assert set(settings_of(result, "unclean_leader_election").values()) == {(True, "broker", None)}
    flags = {f"{p['topic']}-{p['partition']}": p["at_min_isr"] for p in result["partitions"]}
    assert flags == {"orders-0": True, "orders-1": False, "payments-0": True}
    assert result["effective_settings"]["static_defaults"]["min_insync_replicas"] == 3
    assert result["effective_settings"]["unreadable"] == []

    zk_client.delete("/config/brokers", recursive=True)  # no dynamic broker config at all
    result = describe_json(
        capsys, zk_connect, "--default-min-isr", "3", "--default-unclean-leader-election", "true"
    )

    assert settings_of(result, "min_isr")["orders-0"] == (3, "static_default", None)
    assert settings_of(result, "unclean_leader_election")["orders-0"] == (True, "static_default", None)
    assert result["summary"]["under_min_isr"] == 2
    without_static = describe_json(capsys, zk_connect)
    assert settings_of(without_static, "min_isr")["orders-0"] == (1, "kafka_default", None)
    assert settings_of(without_static, "unclean_leader_election")["orders-0"] == (
        False,
        "kafka_default",
        None,
    )


@pytest.mark.usefixtures("protected_broker_configs")
def test_an_acl_protected_config_brokers_is_reported_not_silently_defaulted(
    zk_client: KazooClient, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(zk_client, tree())

    result = describe_json(capsys, zk_connect, "--default-min-isr", "2")

    noauth = "not authorised: the ZooKeeper ACL refuses this read (NoAuth, -102); see docs/collectors.md"
    assert {"path": "/config/brokers", "reason": noauth} in result["errors"]
    assert result["effective_settings"]["unreadable"] == [{"path": "/config/brokers", "reason": noauth}]
    assert result["effective_settings"]["partitions_with_unknown_min_isr"] == 2
    assert result["effective_settings"]["partitions_with_unknown_unclean_leader_election"] == 3
    assert settings_of(result, "min_isr") == {
        "orders-0": (2, "unknown", "static_default"),
        "orders-1": (2, "unknown", "static_default"),
        "payments-0": (3, "topic", None),  # its own override decides: nothing below it matters
    }
    orders = next(p for p in result["partitions"] if p["topic"] == "orders")
    assert orders["min_isr_unknown_reason"] == f"/config/brokers: {noauth}"
    assert orders["at_min_isr"]  # judged with the static default given, not Kafka's 1

    code, text, _ = describe(capsys, zk_connect)
    assert code == 0
    assert "MinIsr: 1 (unknown: assumed from kafka_default)" in text
    assert "MinIsr: 3 (topic)" in text
    assert "settings unknown: /config/brokers unreadable" in text
