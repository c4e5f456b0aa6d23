"""The Kafka transport end to end against a real Kafka-protocol broker (Tansu): ``collect --sink kafka:B/T``
on the reference cluster → the broker → the analytics job on ``--source kafka:B/T`` → the store, with the
same store contents as the spool path on the same samples (a record that is not a sample among them:
reported and skipped); and the start-up errors a user meets (exit 1, one line, before anything starts):
a topic that does not exist, a broker that refuses."""

from __future__ import annotations

import dataclasses
import io
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analytics.config import AnalyticsSettings
from analytics.rules import RuleSettings
from analytics.spark.job import query_failure, start_query, stop_query
from app.cli import analytics as analytics_command
from app.cli import collect as collect_command
from app.cli.common import ExitCode
from app.cli.main import build_parser
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.spark import Spool
from tests.support.store import open_store
from tests.support.tansu import TansuLog, unique_topic

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

WINDOW_S = 2.0
NOT_A_SAMPLE = "this record is not a sample"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_HEALTH_ZOOKEEPER__CONNECT", "KAFKA_HEALTH_SAMPLER__SINK", "KAFKA_HEALTH_METRICS"):
        monkeypatch.delenv(name, raising=False)


def run(module: Any, *argv: str, stop: threading.Event | None = None) -> tuple[int, str, str]:
    args = build_parser().parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    code = module.run(args, out, err, stop=stop)
    return code, out.getvalue(), err.getvalue()


def topic_values(bootstrap: str, topic: str) -> list[str]:
    """Every record value of the topic, partition by partition in offset order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=[bootstrap], group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning()
        values: list[str] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(r.value.decode() for r in records)
        # Tansu's ListOffsets may stop short of the last batch's tail: one more poll finds it
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value.decode() for r in records)
        return values
    finally:
        consumer.close()


def rounded(value: Any) -> Any:
    """Floats to 9 significant digits, dataclasses as dicts: the two sources hand Spark the same samples
    in a different order, and a sum of floats depends on its order in the last bits."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return rounded(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


def store_contents(store_url: str, cluster: str) -> dict[str, Any]:
    with open_store(store_url) as store:
        return {
            "clusters": store.clusters(),
            "load": rounded(store.load_history(cluster, since=0.0)),
            "windows": rounded(store.cluster_windows(cluster)),
            "alerts": [(a.fingerprint, a.rule, a.state) for a in store.alerts(limit=1000)],
            "events": [
                (e.fingerprint, e.sequence, e.kind, e.at, e.summary) for e in store.alert_events(limit=10_000)
            ],
        }


@pytest.mark.spark
def test_collect_to_kafka_then_the_job_gives_the_store_the_spool_path_gives(
    make_cluster: ClusterFactory,
    zk_connect: str,
    kafka_broker: str,
    spark_session: Any,
    tmp_path: Path,
) -> None:
    cluster = make_cluster(brokers=3, address_per_broker=True)
    topic = unique_topic("e2e")
    log = TansuLog(kafka_broker)
    log.create_topic(topic, 2)
    template = f"http://{{host}}:{cluster.metrics_port}/metrics"
    # collect: the real command, on the reference cluster, into the topic
    stop = threading.Event()
    result: list[tuple[int, str, str]] = []
    argv = [
        "collect",
        "--zookeeper", zk_connect,
        "--metrics-url-template", template,
        "--sink", f"kafka:{kafka_broker}/{topic}",
        "--interval", "0.25",
    ]  # fmt: skip
    collector = threading.Thread(target=lambda: result.append(run(collect_command, *argv, stop=stop)))
    collector.start()
    try:
        wait_for(
            lambda: len(topic_values(kafka_broker, topic)) >= 4 * 4 * 5 * WINDOW_S,
            timeout=120,
            message="five windows of rounds in the topic",
        )
    finally:
        stop.set()
        collector.join(timeout=30)
    ((code, out, err),) = result
    assert (code, err) == (ExitCode.OK, ""), out
    log.append(topic, 0, [NOT_A_SAMPLE])
    log.close()
    values = topic_values(kafka_broker, topic)
    assert NOT_A_SAMPLE in values
    # the spool path: the same records as files
    spool = Spool(tmp_path / "spool")
    spool.directory.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(values), 16):
        spool.write_lines(values[i : i + 16], f"{i:06d}")

    rules = RuleSettings(open_after=1, resolve_after=1, urp_for_s=0.0)
    contents = {}
    for name, source in (("kafka", f"kafka:{kafka_broker}/{topic}"), ("spool", f"spool:{spool.directory}")):
        settings = AnalyticsSettings(
            source=source,
            window_s=WINDOW_S,
            watermark_s=0.0,
            trigger_s=0.5,
            checkpoint=str(tmp_path / f"checkpoint-{name}"),
            store_url=f"sqlite:///{tmp_path / f'{name}.db'}",
            rules=rules,
        )
        with open_store(settings.store_url) as store:
            query = start_query(spark_session, settings, store)
            try:
                query.processAllAvailable()
            finally:
                stop_query(query)
            assert query_failure(query) is None
        clusters = store_contents(settings.store_url, "")["clusters"]
        assert len(clusters) == 1, clusters
        contents[name] = store_contents(settings.store_url, clusters[0])
    assert len(contents["kafka"]["load"]) >= 3
    assert contents["kafka"] == contents["spool"]
    windows = contents["kafka"]["windows"]
    assert all(w["brokers"] == 3 for w in windows if w["brokers"] is not None)
    assert all(b["metrics"] for w in contents["kafka"]["load"] for b in w["brokers"]), "scraped load"


def test_collect_names_a_topic_that_does_not_exist(kafka_broker: str) -> None:
    topic = unique_topic("absent")
    started = time.monotonic()
    code, _, err = run(
        collect_command, "collect", "--zookeeper", "127.0.0.1:2181", "--sink", f"kafka:{kafka_broker}/{topic}"
    )
    assert code == ExitCode.FAILED
    assert err.startswith(f"error: cannot open the sink kafka:{kafka_broker}/{topic}: Kafka topic {topic!r}")
    assert "does not exist" in err
    assert err.count("\n") == 1
    assert time.monotonic() - started < 60  # it gave up, rather than hang


def test_analytics_names_a_topic_that_does_not_exist_before_spark_starts(
    kafka_broker: str, tmp_path: Path
) -> None:
    topic = unique_topic("absent")
    started = time.monotonic()
    code, out, err = run(
        analytics_command,
        "analytics",
        "--source", f"kafka:{kafka_broker}/{topic}",
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--store-url", f"sqlite:///{tmp_path / 'store.db'}",
    )  # fmt: skip
    assert code == ExitCode.FAILED
    assert (
        err
        == f"error: Kafka topic {topic!r} does not exist on {kafka_broker} "
        + err.split(f"{kafka_broker} ", 1)[1]
    )
    assert out == ""  # no banner: nothing started (Spark's start alone is 6-13 s)
    assert time.monotonic() - started < 60  # it gave up, rather than hang


def test_a_broker_that_refuses_is_one_line_and_exit_1(private_tansu: Callable[[], Any]) -> None:
    broker = private_tansu()
    broker.stop()
    code, _, err = run(
        collect_command, "collect", "--zookeeper", "127.0.0.1:2181", "--sink", f"kafka:{broker.bootstrap}/t"
    )
    assert code == ExitCode.FAILED
    assert err.startswith(
        f"error: cannot open the sink kafka:{broker.bootstrap}/t: no Kafka broker reachable"
    )
    assert "Connection refused" in err
    assert err.count("\n") == 1
