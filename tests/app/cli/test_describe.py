"""``kafka-health describe`` against the reference cluster on a real ZooKeeper."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from app.cli.describe import describe_json as describe_json_of
from app.cli.describe import describe_text
from app.cli.main import main
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from collectors.health import assess
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from tests.support import snapshots
from tests.support.reference_cluster import ClusterFactory, wait_for

pytestmark = pytest.mark.integration


def describe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["describe", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def describe_json(capsys: pytest.CaptureFixture[str], zk_connect: str, *args: str) -> dict[str, Any]:
    code, out, err = describe(capsys, "--zookeeper", zk_connect, "--format", "json", *args)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


Json = dict[str, Any]


def when(read: Callable[[], Json], condition: Callable[[Json], bool]) -> Callable[[], Json | None]:
    def check() -> Json | None:
        value = read()
        return value if condition(value) else None

    return check


def start(make_cluster: ClusterFactory) -> ReferenceCluster:
    return make_cluster(
        topics=[
            TopicSpec(name="orders", partitions=4, replication_factor=3),
            TopicSpec(
                name="payments", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"}
            ),
        ],
        address_per_broker=True,
    )


def test_json_of_a_healthy_cluster(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = start(make_cluster)
    result = describe_json(capsys, zk_connect)
    assert [b["id"] for b in result["brokers"]] == [0, 1, 2]
    assert result["brokers"][1]["host"] == "127.0.0.2"
    port = cluster.brokers[1].endpoint.port  # the configured port, or a free one if that was taken
    assert result["brokers"][1]["endpoints"] == [
        {"listener": "PLAINTEXT", "security_protocol": "PLAINTEXT", "host": "127.0.0.2", "port": port}
    ]
    assert (result["brokers"][1]["listener"], result["brokers"][1]["listener_note"]) == ("PLAINTEXT", None)
    assert cluster.controller is not None
    assert result["controller"] == {
        "broker_id": cluster.controller.broker_id,
        "epoch": cluster.controller.epoch,
        "kraft_controller_epoch": -1,  # a ZK-mode controller of Kafka 3.4+ (v2)
    }
    assert result["migration"]["phase"] == "none"
    assert len(result["partitions"]) == 6
    first = result["partitions"][0]
    assert set(first) >= {
        "topic", "partition", "replicas", "isr", "leader", "leader_epoch", "adding_replicas",
        "removing_replicas", "under_replicated", "under_min_isr", "at_min_isr", "offline", "preferred_leader",
    }  # fmt: skip
    summary = result["summary"]
    assert summary == {
        "brokers": 3,
        "topics": 2,
        "partitions": 6,
        "under_replicated": 0,
        "under_min_isr": 0,
        "at_min_isr": 0,
        "offline": 0,
        "preferred_replica_imbalance": 0,
        "brokers_down": [],
        "unknown": 0,
    }
    assert result["pending"] == {"preferred_election": [], "reassignments": [], "deletions": []}
    assert result["errors"] == []


def test_a_stalled_follower_shows_as_under_replicated_with_its_broker_suspected(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = start(make_cluster)
    cluster.stall_follower(2)
    followed = wait_for(
        when(lambda: describe_json(capsys, zk_connect), lambda r: r["summary"]["under_replicated"] == 4),
        timeout=60,
        message="the 4 partitions broker 2 follows under-replicated",
    )
    urps = [p for p in followed["partitions"] if p["under_replicated"]]
    assert all(2 not in p["isr"] for p in urps)
    assert followed["suspect_brokers"][0]["broker_id"] == 2
    assert followed["suspect_brokers"][0]["share"] == 1.0

    only = describe_json(capsys, zk_connect, "--under-replicated")
    assert [(p["topic"], p["partition"]) for p in only["partitions"]] == [
        (p["topic"], p["partition"]) for p in urps
    ]

    code, _, _ = describe(capsys, "--zookeeper", zk_connect, "--fail-on-unhealthy")
    assert code == 3


def test_the_urp_gauges_cross_check_through_a_url_template(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = start(make_cluster)
    template = f"http://{{host}}:{cluster.metrics_port}/metrics"
    cluster.stall_follower(1)
    wait_for(
        lambda: describe_json(capsys, zk_connect)["summary"]["under_replicated"] > 0,
        timeout=60,
    )
    result = wait_for(
        when(
            lambda: describe_json(
                capsys, zk_connect, "--metrics-url-template", template, "--metrics-listener", "plaintext"
            ),
            lambda r: bool(r["urp_cross_check"]["agrees"]),
        ),
        message="brokers' URP gauges agreeing with ZooKeeper",
    )
    cross = result["urp_cross_check"]
    assert cross["reporting"] == [0, 1, 2]
    assert cross["gauges"] == cross["zookeeper"] == result["summary"]["under_replicated"]


def test_the_cross_check_reads_each_exporter_dialect_detected_or_as_set(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = make_cluster(address_per_broker=True, metrics_dialect="bitnami")
    template = f"http://{{host}}:{cluster.metrics_port}/metrics"

    detected = describe_json(capsys, zk_connect, "--metrics-url-template", template)
    as_set = describe_json(
        capsys, zk_connect, "--metrics-url-template", template, "--metrics-dialect", "bitnami"
    )
    wrong = describe_json(
        capsys, zk_connect, "--metrics-url-template", template, "--metrics-dialect", "strimzi"
    )

    assert detected["urp_cross_check"]["reporting"] == [0, 1, 2]
    assert as_set["urp_cross_check"]["reporting"] == [0, 1, 2]
    assert wrong["urp_cross_check"]["reporting"] == [], "Strimzi's names are not what these brokers serve"


def test_text_output_reads_like_kafka_topics(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = start(make_cluster)
    cluster.stop_broker(2)
    # the controller moves leaders first, then the ISRs shrink: wait until ZooKeeper shows both
    wait_for(
        lambda: describe_json(capsys, zk_connect)["summary"]["under_replicated"] > 0,
        timeout=60,
    )
    code, out, _ = describe(capsys, "--zookeeper", zk_connect)
    assert code == 0
    assert "Topic: orders\tTopicId: " in out
    assert "\tTopic: orders\tPartition: 0\tLeader: " in out
    assert "ReplicationFactor: 3" in out
    assert "Configs: min.insync.replicas=2" in out
    assert "brokers 2 (down: 2)" in out
    assert "UNDER-REPLICATED" in out
    assert "\nReplication throttles: none\n" in out


def test_an_unreadable_partition_state_is_unknown_not_offline(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = start(make_cluster)
    cluster.corrupt_partition_state(TopicPartition("orders", 1))
    path = "/brokers/topics/orders/partitions/1/state"

    result = describe_json(capsys, zk_connect)
    (unknown,) = [p for p in result["partitions"] if p["state_unknown"]]
    assert (unknown["topic"], unknown["partition"]) == ("orders", 1)
    assert (unknown["offline"], unknown["under_replicated"], unknown["under_min_isr"]) == (
        False,
        False,
        False,
    )
    summary = result["summary"]
    assert (summary["unknown"], summary["offline"], summary["under_replicated"]) == (1, 0, 0)
    assert [e["path"] for e in result["errors"]] == [path]
    assert "invalid JSON" in result["errors"][0]["reason"]

    code, out, _ = describe(capsys, "--zookeeper", zk_connect)
    assert code == 0
    assert "\tTopic: orders\tPartition: 1\tLeader: unknown\t" in out
    assert "[STATE-UNKNOWN]" in out
    assert "offline 0," in out
    assert "state unknown 1: their state znodes cannot be read" in out
    assert f"unreadable znode {path}: invalid JSON" in out
    code, _, _ = describe(capsys, "--zookeeper", zk_connect, "--fail-on-unhealthy")
    assert code == 3, "a cluster whose state is partly unknown is not known to be healthy"


def kafka_written_tree() -> dict[str, bytes]:
    """Brokers registered as Kafka 3.x (v5) and 2.x (v4) write them: 1 with PLAINTEXT and INTERNAL,
    2 TLS only (``host`` null, ``port`` -1), 3 INTERNAL only; one topic on them."""

    def js(obj: Json) -> bytes:
        return json.dumps(obj).encode()

    return {
        "/cluster/id": js({"version": "1", "id": "abcdefghijklmnopqrstuv"}),
        "/controller": js({"version": 1, "brokerid": 1, "timestamp": "1700000000000"}),
        "/controller_epoch": b"3",
        "/brokers/ids/1": js(
            {"features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SSL"},
             "endpoints": ["PLAINTEXT://kafka-1.example:9092", "INTERNAL://10.0.0.1:9094"], "jmx_port": -1,
             "host": "kafka-1.example", "timestamp": "1700000000000", "port": 9092, "version": 5}
        ),
        "/brokers/ids/2": js(
            {"features": {}, "listener_security_protocol_map": {"SSL": "SSL", "INTERNAL": "SSL"},
             "endpoints": ["SSL://kafka-2.example:9093", "INTERNAL://10.0.0.2:9094"], "jmx_port": -1,
             "host": None, "timestamp": "1700000000000", "port": -1, "version": 5, "rack": "r2"}
        ),
        "/brokers/ids/3": js(
            {"listener_security_protocol_map": {"INTERNAL": "SASL_SSL"},
             "endpoints": ["INTERNAL://10.0.0.3:9094"], "jmx_port": -1, "host": None,
             "timestamp": "1700000000000", "port": -1, "version": 4}
        ),
        "/brokers/topics/orders": js({"version": 2, "partitions": {"0": [1, 2, 3]}}),
        "/brokers/topics/orders/partitions/0/state": js(
            {"controller_epoch": 3, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2, 3]}
        ),
    }  # fmt: skip


def test_broker_addresses_come_from_the_chosen_listener(
    zk_client: KazooClient, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, data in kafka_written_tree().items():
        zk_client.create(path, data, makepath=True)

    default = {b["id"]: b for b in describe_json(capsys, zk_connect)["brokers"]}
    assert [(b["host"], b["port"], b["listener"]) for b in default.values()] == [
        ("kafka-1.example", 9092, "PLAINTEXT"),
        ("kafka-2.example", 9093, "SSL"),  # Kafka wrote host null: the first endpoint's
        ("10.0.0.3", 9094, "INTERNAL"),
    ]
    assert default[2]["endpoints"] == [
        {"listener": "SSL", "security_protocol": "SSL", "host": "kafka-2.example", "port": 9093},
        {"listener": "INTERNAL", "security_protocol": "SSL", "host": "10.0.0.2", "port": 9094},
    ]
    assert default[3]["endpoints"][0]["security_protocol"] == "SASL_SSL"

    internal = describe_json(capsys, zk_connect, "--metrics-listener", "internal")["brokers"]
    assert [(b["host"], b["port"], b["listener"]) for b in internal] == [
        ("10.0.0.1", 9094, "INTERNAL"),
        ("10.0.0.2", 9094, "INTERNAL"),
        ("10.0.0.3", 9094, "INTERNAL"),
    ]
    ssl = describe_json(capsys, zk_connect, "--metrics-listener", "SSL")["brokers"]
    assert [b["host"] for b in ssl] == [None, "kafka-2.example", None]
    assert ssl[0]["listener_note"] == "broker 1 has no listener SSL (it has PLAINTEXT, INTERNAL)"

    code, out, err = describe(capsys, "--zookeeper", zk_connect, "--metrics-listener", "REPLICATION")
    assert (code, out) == (2, "")
    assert err == (
        "error: --metrics-listener REPLICATION: no registered broker has that listener "
        "(their listeners: INTERNAL, PLAINTEXT, SSL)\n"
    )
    code, _, err = describe(capsys, "--zookeeper", zk_connect, "--metrics-listener", "SSL://x:1")
    assert code == 2
    assert "is not a Kafka listener name" in err


def test_bad_input_and_an_unreachable_cluster_exit_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = describe(capsys, "--zookeeper", "zk1:abc")
    assert code == 2
    assert "is not host:port" in err
    code, _, err = describe(capsys, "--zookeeper", "127.0.0.1:1", "--timeout", "2")
    assert code == 1
    assert "cannot read the cluster at 127.0.0.1:1" in err


def throttled() -> ClusterSnapshot:
    """A leftover of Kafka's tool (rates on 1 and 2, orders' lists) and half a throttle on <default>."""
    snap = snapshots.cluster(
        snapshots.partition("orders", 0, [1, 2, 3]),
        topic_configs={
            "orders": {
                "leader.replication.throttled.replicas": "0:1,0:4",
                "follower.replication.throttled.replicas": "*",
                "retention.ms": "1",
            }
        },
    )
    rates = {"leader.replication.throttled.rate": "100", "follower.replication.throttled.rate": "200"}
    configs = {"1": rates, "2": rates, "<default>": {"leader.replication.throttled.rate": "5"}}
    return dataclasses.replace(snap, broker_configs=configs)


def text_of(snapshot: ClusterSnapshot) -> str:
    out = io.StringIO()
    describe_text(snapshot, assess(snapshot), sorted(snapshot.partitions), out)
    return out.getvalue()


@pytest.mark.unit
def test_the_text_has_a_replication_throttles_section() -> None:
    text = text_of(throttled())
    section = text.split("\nReplication throttles: ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section == [
        "4 leftover, 0 in use",
        "  broker 1: leader 100 B/s, follower 200 B/s; limits leader and follower; leftover",
        "  broker 2: leader 100 B/s, follower 200 B/s; limits follower; leftover",
        "    no_list: no topic lists a replica on broker 2 in leader.replication.throttled.replicas: "
        "leader.replication.throttled.rate limits nothing until one does",
        "  broker <default>: leader 5 B/s; inert; leftover",
        "    no_list: no topic lists a replica on a broker without a rate of its own in "
        "leader.replication.throttled.replicas: leader.replication.throttled.rate limits nothing until "
        "one does",
        "  topic orders: leader 0:1,0:4, follower *; limits leader and follower; leftover",
        "    unknown_broker: leader.replication.throttled.replicas names brokers that are not registered: "
        "0:4 (they apply if the broker comes back)",
    ]
    assert "\nReplication throttles: none\n" in text_of(snapshots.cluster(snapshots.partition("t", 0, [1])))


@pytest.mark.unit
def test_the_json_has_the_throttle_inventory_as_the_api_gives_it() -> None:
    snapshot = throttled()
    result = describe_json_of(snapshot, assess(snapshot), [])
    throttles = result["throttles"]
    assert throttles["summary"]["leftover"] == 4
    assert throttles["summary"]["brokers_throttled"] == [1, 2, 3]
    assert [b["entity"] for b in throttles["brokers"]] == ["1", "2", "<default>"]
    assert throttles["topics"][0]["follower"]["all_replicas"] is True
    assert {r["broker"]: r["leader"] for r in throttles["rates"]} == {1: 100, 2: 100, 3: 5}


def test_a_chroot_with_no_kafka_in_it_is_an_error_not_an_empty_healthy_cluster(
    zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = describe(capsys, "--zookeeper", zk_connect + "-typo")
    assert code == 1
    assert out == ""
    assert "no Kafka cluster there" in err
    assert err.count("\n") == 1, "one line"


@pytest.mark.unit
@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "0ms", "soon"])
def test_a_timeout_that_is_not_a_positive_duration_is_bad_input(
    capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["describe", "--zookeeper", "127.0.0.1:1", "--timeout", timeout])
    assert exited.value.code == 2
    assert "argument --timeout" in capsys.readouterr().err
