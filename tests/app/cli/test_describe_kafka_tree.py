"""``describe`` on one ZooKeeper tree written in Kafka's own formats (not by our reference cluster) that has
what real clusters have at once: a broker registered with TLS listeners only, a partition state znode that
cannot be parsed, a cluster-wide dynamic ``min.insync.replicas``, and a ZK→KRaft migration in progress
(a KRaft controller in ``/controller`` and ``/migration``).

The formats: broker registrations v4/v5 (``BrokerIdZNode``), ``/controller`` v2 with
``kraftControllerEpoch`` and ``/migration`` v0 (``ControllerZNode`` and ``MigrationZNode``), topic
assignments v3 and partition state v1, dynamic configs v1 (``ConfigEntityZNode``), as Kafka 3.6-3.9 write
them. The same tree's health document, as the service's incident lane reads it, is evaluated by the alert
rules: rule 13 (state partly unreadable) and no controller finding.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from analytics.model import HealthState, Window
from analytics.rules import RuleContext, RuleSettings, evaluate
from app.cli.main import main
from collectors.health import assess
from collectors.samples import health_document
from collectors.zookeeper.collector import scan

pytestmark = pytest.mark.integration

KRAFT_CONTROLLER = 3000


def js(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def config(**entries: str) -> bytes:
    return js({"version": 1, "config": {k.replace("_", "."): v for k, v in entries.items()}})


def state(leader: int, isr: list[int], leader_epoch: int = 4) -> bytes:
    return js({"controller_epoch": 7, "leader": leader, "version": 1, "leader_epoch": leader_epoch,
               "isr": isr})  # fmt: skip


def assignment(partitions: dict[str, list[int]], topic_id: str) -> bytes:
    return js({"version": 3, "partitions": partitions, "topic_id": topic_id, "adding_replicas": {},
               "removing_replicas": {}})  # fmt: skip


def kafka_tree() -> dict[str, bytes]:
    """Three brokers: 1 with PLAINTEXT and an SSL listener, 2 with SSL listeners only (Kafka writes ``host``
    null and ``port`` -1), 3 a 2.x broker with one SASL_SSL listener; ``orders`` (3 partitions, one state
    unparseable) on the cluster-wide default min ISR 2, ``payments`` with its own min ISR 3; a KRaft
    controller (node 3000) holds ``/controller`` and has migrated the metadata (hybrid phase)."""
    return {
        "/cluster/id": js({"version": "1", "id": "Zk2KraftMigrating00001"}),
        "/brokers/ids/1": js(
            {"features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SSL"},
             "endpoints": ["PLAINTEXT://kafka-1.example:9092", "INTERNAL://10.0.0.1:9094"], "jmx_port": -1,
             "host": "kafka-1.example", "timestamp": "1700000000000", "port": 9092, "version": 5, "rack": "a"}
        ),
        "/brokers/ids/2": js(
            {"features": {}, "listener_security_protocol_map": {"SSL": "SSL", "INTERNAL": "SSL"},
             "endpoints": ["SSL://kafka-2.example:9093", "INTERNAL://10.0.0.2:9094"], "jmx_port": -1,
             "host": None, "timestamp": "1700000000000", "port": -1, "version": 5, "rack": "b"}
        ),
        "/brokers/ids/3": js(
            {"listener_security_protocol_map": {"INTERNAL": "SASL_SSL"},
             "endpoints": ["INTERNAL://10.0.0.3:9094"], "jmx_port": -1, "host": None,
             "timestamp": "1700000000000", "port": -1, "version": 4, "rack": "c"}
        ),
        "/controller": js({"version": 2, "brokerid": KRAFT_CONTROLLER, "timestamp": "1700000100000",
                           "kraftControllerEpoch": 5}),
        "/controller_epoch": b"7",
        "/migration": js({"version": 0, "kraft_controller_id": KRAFT_CONTROLLER, "kraft_controller_epoch": 5,
                          "kraft_metadata_offset": 4812, "kraft_metadata_epoch": 5}),
        "/brokers/topics/orders": assignment({"0": [1, 2, 3], "1": [2, 3, 1], "2": [3, 1, 2]},
                                             "AAAAAAAAAAAAAAAAAAAAAA"),
        "/brokers/topics/orders/partitions/0/state": state(1, [1, 2, 3]),
        "/brokers/topics/orders/partitions/1/state": b'{"controller_epoch": 7, "leader": 2, "isr": [2, 3',
        "/brokers/topics/orders/partitions/2/state": state(3, [3, 1]),
        "/brokers/topics/payments": assignment({"0": [2, 1, 3]}, "BBBBBBBBBBBBBBBBBBBBBB"),
        "/brokers/topics/payments/partitions/0/state": state(2, [2, 1, 3]),
        "/config/topics/orders": config(),
        "/config/topics/payments": config(min_insync_replicas="3"),
        "/config/brokers/<default>": config(min_insync_replicas="2"),
    }  # fmt: skip


def describe_json(capsys: pytest.CaptureFixture[str], zk_connect: str, *args: str) -> dict[str, Any]:
    code = main(["describe", "--zookeeper", zk_connect, "--format", "json", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result: dict[str, Any] = json.loads(captured.out)
    return result


def by_partition(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{p['topic']}-{p['partition']}": p for p in result["partitions"]}


def test_describe_reads_a_real_cluster_as_it_is(
    zk_client: KazooClient, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, data in kafka_tree().items():
        zk_client.create(path, data, makepath=True)

    result = describe_json(capsys, zk_connect)

    # the TLS-only broker's address is its first endpoint's, not Kafka's top-level null
    brokers = {b["id"]: b for b in result["brokers"]}
    ssl_only = brokers[2]
    assert (ssl_only["host"], ssl_only["port"], ssl_only["listener"]) == ("kafka-2.example", 9093, "SSL")
    assert {e["security_protocol"] for e in brokers[2]["endpoints"]} == {"SSL"}
    assert (brokers[3]["host"], brokers[3]["endpoints"][0]["security_protocol"]) == ("10.0.0.3", "SASL_SSL")

    # the unparseable state is unknown: not offline, not counted as offline, and its znode is named
    partitions = by_partition(result)
    unknown = partitions["orders-1"]
    assert (unknown["state_unknown"], unknown["offline"], unknown["under_replicated"]) == (True, False, False)
    assert not unknown["under_min_isr"]
    summary = result["summary"]
    assert (summary["offline"], summary["unknown"], summary["under_replicated"]) == (0, 1, 1)
    assert [e["path"] for e in result["errors"]] == ["/brokers/topics/orders/partitions/1/state"]

    # min ISR and where it came from: the topic's own, else the cluster-wide dynamic default
    payments, orders = partitions["payments-0"], partitions["orders-2"]
    assert (payments["min_isr"], payments["min_isr_source"]) == (3, "topic")
    assert (orders["min_isr"], orders["min_isr_source"], orders["at_min_isr"]) == (2, "cluster_default", True)
    assert not orders["under_min_isr"]

    # the migration: a KRaft controller holds /controller, and it is the active controller
    assert result["migration"] == {
        "phase": "hybrid",
        "kraft_controller_id": KRAFT_CONTROLLER,
        "kraft_controller_epoch": 5,
        "metadata_offset": 4812,
        "metadata_epoch": 5,
        "migration_zk_version": 0,
        "zk_brokers": 3,
    }
    assert result["controller"] == {"broker_id": KRAFT_CONTROLLER, "epoch": 7, "kraft_controller_epoch": 5}
    assert result["controller_health"] == {"active": True, "kraft": True}

    # the alert rules on the same tree, as the service's incident lane reads it: the view is partly
    # blind (rule 13, a warning), nothing is offline (rule 1) and the controller is not missing (rule 4)
    snapshot = scan(zk_connect, timeout=10.0)
    now = time.time()
    health = HealthState.from_json(
        health_document(snapshot, assess(snapshot)), cluster="c", collector_id="test", timestamp=now
    )
    ctx = RuleContext(
        window=Window("c", now, now), now=now, health=health, history=(), load=None, settings=RuleSettings()
    )
    findings = evaluate(ctx, lane="incident").findings
    assert [(f.rule, f.severity) for f in findings if f.rule in (1, 4, 13)] == [(13, "warning")]

    # a value only server.properties knows: without the dynamic default, the user's static default
    zk_client.set("/config/brokers/<default>", config())
    static = by_partition(describe_json(capsys, zk_connect, "--default-min-isr", "2"))
    assert (static["orders-2"]["min_isr"], static["orders-2"]["min_isr_source"]) == (2, "static_default")
    assert (static["payments-0"]["min_isr"], static["payments-0"]["min_isr_source"]) == (3, "topic")
    kafka_default = by_partition(describe_json(capsys, zk_connect))
    assert (kafka_default["orders-2"]["min_isr"], kafka_default["orders-2"]["min_isr_source"]) == (
        1,
        "kafka_default",
    )
