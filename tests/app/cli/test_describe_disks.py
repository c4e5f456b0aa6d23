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
