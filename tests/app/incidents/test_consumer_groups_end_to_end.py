"""Consumer lag end to end (issue 25, "Done means"): the reference cluster's simulated consumer groups, one
real ``kafka-health serve`` (consumer lag every second, a group stopped after 3 s without a commit) with
its webhook subscribed by a real receiver, and kafka-python's own clients as the referee. One cluster, one
service and one receiver for the whole module; each test works on its own group:

- ``billing`` (on ``orders``) is stopped: one alert for the group (not one per partition), ``stopped``;
- ``idle`` (on ``quiet``, a topic without traffic) has no lag and never pages;
- ``audit`` (on ``orders``) is rewound by a minute of records: ``rewound``, and once the service's log-end
  history reaches a minute back its ``lag_seconds`` read 60 ± 10;
- ``archiver`` (on ``shrinking``, whose retention keeps ~64 records) is stopped: retention passes its
  committed offset, ``falling_off_log``.

Every group commits every 500 ms (less than the 3 s ``stopped_after_s``: a running group is never
stopped between two commits).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.cli.main import main
from app.embedded.reference_cluster.cluster import ClusterError, ReferenceCluster
from app.embedded.reference_cluster.config import ConsumerGroupSpec, TopicSpec
from app.embedded.webhook_receiver import WebhookReceiver
from tests.support.reference_cluster import scrape, small_settings, wait_for
from tests.support.serve_process import START_TIMEOUT_S, Serve
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = [
    pytest.mark.integration,
    # kafka-python 3 reads its protocol schemas with importlib.resources' legacy read_text
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

SECRET = "a-shared-secret-for-the-tests"
RATE = 64
"""Records per second per partition: the reference cluster's 64 KiB/s of 1 KiB records."""
BEHIND_S = 60
COMMIT_MS = 500


def group(name: str, topic: str) -> ConsumerGroupSpec:
    return ConsumerGroupSpec(name=name, topics=[topic], members=2, commit_interval_ms=COMMIT_MS)


@pytest.fixture(scope="module")
def zk(zookeeper_server: ZooKeeperEndpoint) -> Iterator[str]:
    with own_chroot(zookeeper_server, "consumers") as connect:
        yield connect


@pytest.fixture(scope="module")
def cluster(zk: str) -> Iterator[ReferenceCluster]:
    settings = small_settings(
        topics=[
            TopicSpec(name="orders", partitions=4, replication_factor=3),
            TopicSpec(name="quiet", partitions=2, replication_factor=3),
            TopicSpec(
                name="shrinking",
                partitions=1,
                replication_factor=3,
                config={"retention.bytes": str(64 * 1024), "segment.bytes": str(16 * 1024)},
            ),
        ],
        consumer_groups=[
            group("billing", "orders"),
            group("audit", "orders"),
            group("archiver", "shrinking"),
        ],
        listener_port_base=0,
    )
    running = ReferenceCluster(settings, zk)
    running.start()
    try:
        running.skew({"topics": {"quiet": 0}})
        running.add_consumer_group(group("idle", "quiet"))  # after the skew: it starts at a still log end
        yield running
    finally:
        running.stop()
    assert running.errors == []


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as running:
        yield running


@pytest.fixture(scope="module")
def serve(
    cluster: ReferenceCluster, zk: str, receiver: WebhookReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Serve]:
    where = tmp_path_factory.mktemp("consumers")
    running = Serve(
        zk,
        f"sqlite:///{where / 'store.db'}",
        where / "serve.log",
        KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS="127.0.0.1/32",
        KAFKA_HEALTH_KAFKA__INTERVAL_S="1",
        KAFKA_HEALTH_KAFKA__THRESHOLDS__STOPPED_AFTER_S="3",
        KAFKA_HEALTH_KAFKA__EXPORTER_COMPATIBLE_METRICS="true",
    )
    try:
        wait_for(running.ready, timeout=START_TIMEOUT_S, message="serve ready")
        wait_for(lambda: running.standing() == "leader", timeout=30, message="its incident lane elected")
        body = {"name": "oncall", "url": receiver.url, "secret": SECRET, "rules": [19]}
        created = running.post("/api/v1/webhooks", body)
        assert created.status_code == 201, created.text
        wait_for(lambda: groups_of(running).keys() >= {"billing", "audit", "archiver", "idle"}, timeout=30)
        # a minute behind, from now on: its lag in seconds is checked once the history reaches that far
        cluster.consumer_group_action("audit", "rewind", {"records": RATE * BEHIND_S})
        yield running
    finally:
        running.stop()


def groups_of(serve: Serve) -> dict[str, dict[str, Any]]:
    answer = serve.get("/api/v1/consumer-groups")
    if answer.status_code == 503:
        return {}
    assert answer.status_code == 200, answer.text
    return {g["group"]: g for g in answer.json()["groups"]}


def detail(serve: Serve, name: str) -> dict[str, Any]:
    answer = serve.get(f"/api/v1/consumer-groups/{name}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def stop(cluster: ReferenceCluster, name: str) -> None:
    """Stop the group (a group stopped already stays so: each test may run alone)."""
    with contextlib.suppress(ClusterError):
        cluster.consumer_group_action(name, "stop", {})


def events(receiver: WebhookReceiver, subject: str) -> list[dict[str, Any]]:
    found = [b for b in receiver.accepted().values() if b["rule"] == 19 and b["subject"] == subject]
    return sorted(found, key=lambda b: b["sequence"])


def test_a_stopped_group_is_one_stopped_page(
    serve: Serve, cluster: ReferenceCluster, receiver: WebhookReceiver
) -> None:
    stop(cluster, "billing")
    wait_for(
        lambda: any("stopped" in e["summary"] for e in events(receiver, "group:billing")),
        timeout=60,
        message="rule 19 says billing stopped",
    )
    sent = events(receiver, "group:billing")
    assert [e["kind"] for e in sent if e["kind"] == "opened"] == [
        "opened"
    ]  # one alert, not one per partition
    assert len({e["idempotency_key"].partition(":")[0] for e in sent}) == 1
    stopped = [e for e in sent if "stopped" in e["summary"]]
    assert len(stopped) == 1, sent
    assert stopped[0]["severity"] == "critical"
    assert groups_of(serve)["billing"]["status"] == "stopped"


def test_a_rewound_group_pages_rewound(serve: Serve, receiver: WebhookReceiver) -> None:
    (opened, *_) = wait_for(lambda: events(receiver, "group:audit"), timeout=60, message="audit paged")
    assert opened["kind"] == "opened"
    assert "rewound" in opened["summary"]
    assert opened["severity"] == "warning"


def test_a_group_below_the_log_start_is_falling_off_the_log(
    serve: Serve, cluster: ReferenceCluster, receiver: WebhookReceiver
) -> None:
    stop(cluster, "archiver")
    wait_for(
        lambda: any("falling off the log" in e["summary"] for e in events(receiver, "group:archiver")),
        timeout=60,
        message="rule 19 says archiver is falling off the log",
    )
    (p,) = detail(serve, "archiver")["partitions"]
    assert p["committed"] < p["log_start"]
    assert groups_of(serve)["archiver"]["severity"] == "critical"


def test_a_group_on_a_topic_without_traffic_never_pages(serve: Serve, receiver: WebhookReceiver) -> None:
    """After the tests above (each waited for pages of its own): the idle group's rounds all said ok."""
    idle = detail(serve, "idle")
    assert (idle["status"], idle["lag"]) == ("ok", 0)
    assert all(p["lag"] == 0 and p["lag_seconds"] == 0 for p in idle["partitions"])
    assert events(receiver, "group:idle") == []


def test_kafka_pythons_own_clients_agree_with_the_routes(serve: Serve, cluster: ReferenceCluster) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    bootstrap = cluster.kafka_bootstrap().split(",")
    admin: Any = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="referee")
    consumer: Any = KafkaConsumer(bootstrap_servers=bootstrap, client_id="referee")
    try:
        listed = {g["group_id"] for g in admin.list_groups()}
        assert {"billing", "audit", "archiver", "idle"} <= listed
        # idle: no traffic, so its commits and log ends stand still; billing is stopped: its commits do
        stop(cluster, "billing")
        wait_for(lambda: detail(serve, "billing")["members"] == 0, timeout=30, message="billing stopped")
        for name in ("idle", "billing"):
            theirs = admin.list_group_offsets(name)[name]
            committed = {(tp.topic, tp.partition): o.offset for tp, o in theirs.items()}

            def shows_committed(group: str = name, want: dict[Any, Any] = committed) -> dict[str, Any] | None:
                shown = detail(serve, group)
                columns = {(p["topic"], p["partition"]): p["committed"] for p in shown["partitions"]}
                return shown if columns == want else None

            # the group commits no more: a round after its last commit shows what the coordinator has
            shown = wait_for(shows_committed, timeout=30, message=f"{name}'s committed column")
            tps = [KafkaTopicPartition(p["topic"], p["partition"]) for p in shown["partitions"]]
            ends = consumer.end_offsets(tps)
            behind = time.time() - shown["at"] + 2  # the round read its log ends this long ago, at most
            for p in shown["partitions"]:
                end = ends[KafkaTopicPartition(p["topic"], p["partition"])]
                assert 0 <= end - p["log_end"] <= RATE * behind, (name, p, end)
    finally:
        consumer.close()
        admin.close()


def test_metrics_show_the_groups_in_both_names(serve: Serve) -> None:
    metrics = scrape(serve.url + "/metrics", timeout=10)
    lags = {
        (s.labels["group"], s.labels["topic"], s.labels["partition"])
        for s in metrics.series("kafka_health_consumergroup_lag")
    }
    assert ("idle", "quiet", "0") in lags
    assert {s.labels["cluster"] for s in metrics.series("kafka_health_consumergroup_lag")} != {""}
    status = {
        s.labels["status"]: s.value
        for s in metrics.series("kafka_health_consumergroup_status")
        if s.labels["group"] == "idle"
    }
    assert status["ok"] == 1
    assert sum(status.values()) == 1
    exported = {
        (s.labels["consumergroup"], s.labels["topic"], s.labels["partition"])
        for s in metrics.series("kafka_consumergroup_lag")
    }
    assert exported == lags
    assert metrics.series("kafka_consumergroup_current_offset")
    assert {("quiet", "0"), ("quiet", "1")} <= {
        (s.labels["topic"], s.labels["partition"])
        for s in metrics.series("kafka_topic_partition_current_offset")
    }


def test_describe_reads_the_groups_directly(
    serve: Serve, zk: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["describe", "--zookeeper", zk, "--consumer-groups", "--format", "json"]) == 0
    described = {g["group"]: g for g in json.loads(capsys.readouterr().out)["groups"]}
    idle = described["idle"]
    assert [(p["topic"], p["lag"]) for p in idle["partitions"]] == [("quiet", 0), ("quiet", 0)]
    assert main(["describe", "--zookeeper", zk, "--consumer-groups"]) == 0
    text = capsys.readouterr().out
    assert "Group: idle\tState: Stable\tMembers: 2\tLag: 0" in text


def test_lag_seconds_of_a_group_a_minute_behind(serve: Serve) -> None:
    """Last: the service's log-end history must reach a minute back (the module's other tests ran
    meanwhile)."""
    audit = wait_for(
        lambda: (d := detail(serve, "audit"))["max_lag_seconds_at_least"] is False and d["lag"] > 0 and d,
        timeout=180,
        message="audit's lag in seconds within the history",
    )
    assert abs(audit["max_lag_seconds"] - BEHIND_S) <= 10, audit
    for p in audit["partitions"]:
        assert abs(p["lag_seconds"] - BEHIND_S) <= 10, p
