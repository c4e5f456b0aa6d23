"""``kafka-health describe`` shows each broker's log dirs from its one scrape (size, available, used; no
growth) and the standing risks, in text and JSON, on the reference cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.cli.main import main
from app.embedded.reference_cluster.config import TopicSpec
from collectors.risks import MIN_ISR_AT_RF, REPLICATION_FACTOR_ONE, RISK_KINDS
from tests.support.reference_cluster import ClusterFactory

pytestmark = pytest.mark.integration

TOPICS = [
    TopicSpec(name="orders", partitions=2, replication_factor=3),
    TopicSpec(name="scratch", partitions=1, replication_factor=1),
    TopicSpec(name="payments", partitions=1, replication_factor=2, config={"min.insync.replicas": "2"}),
]


def describe(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["describe", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_disks_and_risks_in_json_and_text(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = make_cluster(topics=TOPICS, address_per_broker=True)
    template = f"http://{{host}}:{cluster.metrics_port}/metrics"

    result: dict[str, Any] = json.loads(
        describe(capsys, "--zookeeper", zk_connect, "--format", "json", "--metrics-url-template", template)
    )
    assert [b["broker"] for b in result["disks"]] == [0, 1, 2]
    for broker in result["disks"]:
        assert [d["mountpoint"] for d in broker["disks"]] == [
            "/var/lib/kafka/data-0",
            "/var/lib/kafka/data-1",
        ]
        for disk in broker["disks"]:
            assert 0 < disk["used_ratio"] < 1
            assert disk["growth_bytes_per_s"] is None  # one scrape: no fit
            assert disk["full_in_s"] is None
    kinds = {(r["kind"], r["subject"]) for r in result["risks"]["risks"]}
    assert kinds == {(REPLICATION_FACTOR_ONE, "topic:scratch"), (MIN_ISR_AT_RF, "topic:payments")}
    assert set(result["risks"]["counts"]) == set(RISK_KINDS)

    text = describe(capsys, "--zookeeper", zk_connect, "--metrics-url-template", template)
    assert "\nLog dirs (one scrape: growth and time to full need the service's history)\n" in text
    assert "  broker 1 /var/lib/kafka/data-0: " in text
    assert "\nRisks: 2\n" in text
    assert "  replication_factor_one topic:scratch: 1 of 1 partitions of scratch" in text
    assert "--entity-name payments --add-config min.insync.replicas=1" in text


def test_without_metrics_disks_are_null_and_risks_still_listed(
    make_cluster: ClusterFactory, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_cluster(topics=TOPICS[:2])
    result = json.loads(describe(capsys, "--zookeeper", zk_connect, "--format", "json"))
    assert result["disks"] is None
    assert [r["subject"] for r in result["risks"]["risks"]] == ["topic:scratch"]
    text = describe(capsys, "--zookeeper", zk_connect)
    assert "Log dirs" not in text
    assert "\nRisks: 1\n" in text


def test_the_log_dir_mountpoints_setting_chooses_and_orders_the_log_dirs(
    make_cluster: ClusterFactory,
    zk_connect: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the service reads it (``KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS``), not the name rule alone:
    only the mount points listed, in their order (a listed one the broker does not serve is left out)."""
    cluster = make_cluster(topics=TOPICS[:1], address_per_broker=True)
    template = f"http://{{host}}:{cluster.metrics_port}/metrics"
    monkeypatch.setenv(
        "KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS",
        '["/var/lib/kafka/data-1", "/srv/none", "/var/lib/kafka/data-0"]',
    )
    args = ["--zookeeper", zk_connect, "--metrics-url-template", template]
    result = json.loads(describe(capsys, *args, "--format", "json"))
    for broker in result["disks"]:
        assert [d["mountpoint"] for d in broker["disks"]] == [
            "/var/lib/kafka/data-1",
            "/var/lib/kafka/data-0",
        ]

    monkeypatch.setenv("KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS", "/var/lib/kafka/data-1")
    text = describe(capsys, *args)
    assert "  broker 1 /var/lib/kafka/data-1: " in text
    assert "/var/lib/kafka/data-0" not in text

    monkeypatch.setenv("KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS", "data-1")
    assert main(["describe", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "'data-1' is not an absolute mount point" in err
    assert err.count("\n") == 1
