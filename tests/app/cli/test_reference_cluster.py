"""``kafka-health reference-cluster`` as a user runs it: the real command in a child process, its banner, the
brokers and ZooKeeper it starts, its stop on SIGINT/SIGTERM (exit 0, nothing left running), SIGKILL (the
JVM dies with it) and its bad input (exit 2 with a message, nothing started)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from app.embedded.zookeeper import pick_free_port
from tests.support.cli import Cli, CliFactory, assert_all_gone, java_processes, refuses

pytestmark = pytest.mark.integration

ZOOKEEPER_LINE = re.compile(r"^ZooKeeper: (\S+)$")
METRICS_LINE = re.compile(r"^broker (\d+): metrics (http://\S+/metrics)$")
CONTROL_LINE = re.compile(r"^control:\s+(http://\S+)/$")


def get_json(url: str) -> Any:
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    return response.json()


def scrape_ok(url: str) -> bool:
    response = httpx.get(url, timeout=10)
    return (
        response.status_code == 200
        and b"kafka_server_replicamanager_underreplicatedpartitions" in response.content
    )


def banner(cli: Cli) -> tuple[str, dict[int, str], str]:
    """Wait for ``ready`` and return (ZooKeeper connect string, metrics URL by broker, control URL)."""
    cli.expect(r"^ready \(Ctrl-C to stop\)$")
    [zookeeper] = [m[1] for line in cli.stdout if (m := ZOOKEEPER_LINE.match(line))]
    [control] = [m[1] for line in cli.stdout if (m := CONTROL_LINE.match(line))]
    metrics = {int(m[1]): m[2] for line in cli.stdout if (m := METRICS_LINE.match(line))}
    return zookeeper, metrics, control


def kazoo(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    return client


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_reference_cluster_with_its_own_zookeeper_runs_and_stops_without_orphans(
    run_cli: CliFactory, signum: signal.Signals
) -> None:
    control_port = pick_free_port()
    cli = run_cli(
        "reference-cluster", "--brokers", "3", "--topic", "orders:4:3", "--control-port", str(control_port)
    )
    zookeeper, metrics, control = banner(cli)

    assert re.fullmatch(r"127\.0\.0\.1:\d+", zookeeper), zookeeper
    assert sorted(metrics) == [0, 1, 2]
    assert len(set(metrics.values())) == 3
    assert all(scrape_ok(url) for url in metrics.values())
    assert control == f"http://127.0.0.1:{control_port}"
    state = get_json(f"{control}/")
    assert state["zookeeper"] == zookeeper
    assert [b["id"] for b in state["brokers"]] == [0, 1, 2]
    assert {b["id"]: b["metrics_url"] for b in state["brokers"]} == metrics
    client = kazoo(zookeeper)
    try:
        assert sorted(client.get_children("/brokers/ids")) == ["0", "1", "2"]
        topic = json.loads(client.get("/brokers/topics/orders")[0])
        assert sorted(topic["partitions"]) == ["0", "1", "2", "3"]
        assert all(sorted(r) == [0, 1, 2] for r in topic["partitions"].values())
        assert json.loads(client.get("/controller")[0])["brokerid"] == state["controller"]["broker_id"]
    finally:
        client.stop()
        client.close()

    children = cli.descendants()
    jvms = java_processes(children)
    assert len(jvms) == 1, [p.cmdline()[:3] for p in children]

    assert cli.stop(signum) == 0, cli.output()
    assert "stopping..." in cli.stdout
    assert_all_gone(children)
    host, _, port = zookeeper.partition(":")
    assert refuses(host, int(port)), "the ZooKeeper port still answers"
    assert refuses("127.0.0.1", control_port), "the control port still answers"


def test_reference_cluster_on_a_given_zookeeper_chroot_starts_no_jvm(
    run_cli: CliFactory, zk_connect: str, zk_client: KazooClient
) -> None:
    cli = run_cli(
        "reference-cluster", "--zookeeper", zk_connect, "--brokers", "3", "--topic", "orders:2:2",
        "--consumer-group", "billing:orders:2", "--listener-port-base", "0",
    )  # fmt: skip
    zookeeper, metrics, _ = banner(cli)
    assert zookeeper == zk_connect
    assert sorted(metrics) == [0, 1, 2]
    assert "consumer group billing: orders (2 members)" in cli.stdout
    [bootstrap] = [line.removeprefix("bootstrap: ") for line in cli.stdout if line.startswith("bootstrap: ")]
    host, _, port = bootstrap.split(",")[0].partition(":")
    socket.create_connection((host, int(port)), timeout=10).close()
    assert zk_client.exists("/brokers/topics/__consumer_offsets") is not None
    assert sorted(zk_client.get_children("/brokers/ids")) == ["0", "1", "2"]
    assert zk_client.exists("/brokers/topics/orders") is not None
    children = cli.descendants()
    assert java_processes(children) == [], [p.cmdline()[:3] for p in children]

    assert cli.stop(signal.SIGINT) == 0, cli.output()
    assert_all_gone(children)
    # the brokers closed their sessions: their registrations went with them
    assert zk_client.get_children("/brokers/ids") == []
    assert zk_client.exists("/controller") is None


def test_sigkill_of_the_cli_takes_its_zookeeper_jvm_down(run_cli: CliFactory) -> None:
    cli = run_cli("reference-cluster", "--brokers", "1")
    zookeeper, _, _ = banner(cli)
    jvms = java_processes(cli.descendants())
    assert len(jvms) == 1

    cli.process.kill()
    assert cli.wait() == -signal.SIGKILL
    assert_all_gone(jvms)  # PR_SET_PDEATHSIG: no handler runs on SIGKILL, the kernel kills the JVM
    host, _, port = zookeeper.partition(":")
    assert refuses(host, int(port))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--topic", "bad"], r"NAME:PARTITIONS:RF"),
        (["--topic", "orders:x:3"], r"NAME:PARTITIONS:RF"),
        (["--brokers", "2", "--topic", "t:1:3"], r"replication factor 3 larger than available brokers: 2"),
        (["--brokers", "3", "--topic", "bad name:1:1"], r"illegal topic name"),
        (["--zookeeper", "127.0.0.1:abc"], r"is not host:port"),
        (["--consumer-group", "g:orders"], r"NAME:TOPIC\[,TOPIC...\]:MEMBERS"),
        (["--topic", "orders:1:1", "--consumer-group", "g:other:1"], r"not created at start-up: other"),
        (["--topic", "orders:1:1", "--consumer-group", "g:orders:0"], r"members"),
    ],
    ids=[
        "no-colons",
        "non-numeric-partitions",
        "rf-above-brokers",
        "illegal-name",
        "bad-zookeeper",
        "group-not-name-topics-members",
        "group-of-an-unknown-topic",
        "group-without-members",
    ],
)
def test_bad_reference_cluster_input_exits_2_with_a_message(
    run_cli: CliFactory, args: list[str], expected: str
) -> None:
    cli = run_cli("reference-cluster", *args)
    assert cli.wait(30) == 2, cli.output()
    assert re.search(expected, "\n".join(cli.stderr)), cli.output()
    assert cli.stdout == [], "nothing should have started"


@pytest.mark.unit
def test_the_metrics_dialect_comes_from_the_flag_else_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli.main import build_parser
    from app.cli.reference_cluster import settings_from_args

    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    parser = build_parser("reference-cluster")

    assert (
        settings_from_args(parser.parse_args(["reference-cluster"])).metrics_dialect == "jmx-exporter-example"
    )
    monkeypatch.setenv("KAFKA_HEALTH_REFERENCE_CLUSTER__METRICS_DIALECT", "bitnami")
    assert settings_from_args(parser.parse_args(["reference-cluster"])).metrics_dialect == "bitnami"
    flag = parser.parse_args(["reference-cluster", "--metrics-dialect", "confluent"])
    assert settings_from_args(flag).metrics_dialect == "confluent"


@pytest.mark.unit
def test_the_broker_count_comes_from_the_flag_else_the_setting_else_three(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERS`` (docs/reference-cluster.md's example) is not overridden by
    a flag that was not given."""
    from app.cli.main import build_parser
    from app.cli.reference_cluster import settings_from_args

    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    parser = build_parser("reference-cluster")

    assert settings_from_args(parser.parse_args(["reference-cluster"])).brokers == 3
    monkeypatch.setenv("KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERS", "5")
    assert settings_from_args(parser.parse_args(["reference-cluster"])).brokers == 5
    assert settings_from_args(parser.parse_args(["reference-cluster", "--brokers", "4"])).brokers == 4
