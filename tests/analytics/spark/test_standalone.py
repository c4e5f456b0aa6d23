"""The analytics job on a Spark cluster (docs/analytics.md, "Running on a Spark cluster"): submitted with
the wheel's ``spark-submit`` to a standalone master and worker (``tests/support/spark_cluster.py``), the
way a user would, with our packages shipped in ``--py-files`` and the executors' Python named by
``spark.pyspark.python`` (a virtualenv that has the dependencies, not the project). Its store must hold
what ``local[2]`` stores from the same samples: the same load windows, the same alerts and events.

The samples are a fixed stream of windows whose load flips in and out of imbalance (rules 8 and 9 open and
resolve); the spool directory is on this machine's disk, which works only because driver, master and
worker share it (on a real cluster: a shared file system, or the Kafka transport).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from analytics.config import AnalyticsSettings
from analytics.rules import RuleSettings
from analytics.spark.job import start_query, stop_query
from collectors.samples import Sample
from collectors.transport import KafkaTopicSink, SampleSink, SpoolDirectorySink
from tests.support.spark_cluster import (
    ExecutorPython,
    SparkStandalone,
    package_zip,
    spark_env,
    spark_home,
)
from tests.support.store import open_store

pytestmark = [pytest.mark.spark, pytest.mark.integration]

T0 = 1_800_000_000.0
WINDOW_S = 2.0
WINDOWS = 16
CLUSTER = "standalone"
RULES = RuleSettings(open_after=2, resolve_after=2, urp_for_s=0.0, open_after_by_rule={})
RULE_ENV = {
    "KAFKA_HEALTH_ANALYTICS__RULES__OPEN_AFTER": str(RULES.open_after),
    "KAFKA_HEALTH_ANALYTICS__RULES__RESOLVE_AFTER": str(RULES.resolve_after),
    "KAFKA_HEALTH_ANALYTICS__RULES__URP_FOR_S": "0",
    "KAFKA_HEALTH_ANALYTICS__RULES__OPEN_AFTER_BY_RULE": "{}",
}
REPO = Path(__file__).resolve().parents[3]
JOB_TIMEOUT_S = 150.0


def health(w: int) -> dict[str, Any]:
    none = {"count": 0, "by_topic": {}, "examples": {}}
    return {
        "snapshot": {"version": w, "taken_at": T0, "last_good_at": T0 + w * WINDOW_S, "stale": False},
        "controller": {"broker_id": 0, "epoch": 1, "active_controller_gauges": 1.0},
        "brokers": [0, 1, 2, 3],
        "brokers_down": [],
        "partitions": 16,
        "offline": none,
        "under_replicated": none,
        "under_min_isr": none,
        "at_min_isr": none,
        "suspects": [],
        "imbalance": [],
        "urp_cross_check": None,
    }


def window_samples(w: int, sequence: Iterator[int]) -> list[Sample]:
    """Window ``w``: broker 1 takes four times the others' bytes in windows 4-8 and 12-14."""
    skewed = 4 <= w <= 8 or 12 <= w <= 14
    samples = []
    for offset in (0.3, 1.3):  # two rounds per window: the averages are averages
        t = T0 + w * WINDOW_S + offset
        for b in range(4):
            metrics = {
                "partitions": 8.0,
                "leaders": 4.0 + b % 2,
                "nwBytesIn": (400.0 if skewed and b == 1 else 100.0) + 10 * b + offset,
            }
            samples.append(Sample("c", next(sequence), t, "broker", CLUSTER, b, metrics))
        samples.append(Sample("c", next(sequence), t, "cluster", CLUSTER, None, {}, health(w)))
    return samples


def write_samples(sink: SampleSink) -> None:
    """Every window's samples, in order, numbered from 0 (the same samples every time)."""
    sequence = itertools.count()
    for w in range(WINDOWS + 1):  # the last window only moves the watermark past the one before
        sink.write(window_samples(w, sequence))


def settings_for(source: str | Path, root: Path) -> AnalyticsSettings:
    root.mkdir(parents=True, exist_ok=True)
    return AnalyticsSettings(
        source=f"spool:{source}" if isinstance(source, Path) else source,
        window_s=WINDOW_S,
        watermark_s=0.0,
        trigger_s=0.5,
        checkpoint=str(root / "checkpoint"),
        store_url=f"sqlite:///{root / 'store.db'}",
        rules=RULES,
    )


def store_contents(store_url: str) -> dict[str, Any]:
    """What the job wrote: every load window (brokers' loads rounded: float sums may differ in the last
    bit between partitionings), every alert and every alert event."""
    with open_store(store_url) as store:
        windows = [
            (
                w.window.cluster,
                w.window.start,
                w.window.end,
                round(w.stddev, 9),
                [(b.broker, round(b.normalized_load, 9), round(b.deviation_rate, 9)) for b in w.brokers],
            )
            for w in store.load_history(CLUSTER, since=0.0)
        ]
        alerts = sorted((a.fingerprint, a.rule, a.subject, a.state) for a in store.alerts(limit=1000))
        events = [
            (e.fingerprint, e.sequence, e.kind, e.at, e.severity) for e in store.alert_events(limit=10_000)
        ]
        last = store.last_evaluated_window(CLUSTER) or 0.0
    return {"windows": windows, "alerts": alerts, "events": events, "last": last}


def submit_argv(
    cluster: SparkStandalone, executors: ExecutorPython, py_files: Path, settings: AnalyticsSettings
) -> list[str]:
    """``spark-submit`` as docs/analytics.md gives it, on this machine's paths."""
    return [
        str(spark_home() / "bin" / "spark-submit"),
        "--master", cluster.master_url,
        "--py-files", str(py_files),
        "--conf", f"spark.pyspark.python={executors.python}",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.cores.max=1",
        str(REPO / "app" / "cli" / "main.py"), "analytics",
        "--source", settings.source,
        "--window", f"{settings.window_s:g}s",
        "--watermark", "0s",
        "--trigger", f"{settings.trigger_s:g}s",
        "--checkpoint", settings.checkpoint,
        "--store-url", settings.store_url,
    ]  # fmt: skip


def stop_submitted(job: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the Python driver, the child of ``spark-submit``'s JVM: it stops the query between
    micro-batches and exits 0, and ``spark-submit`` with it (SIGTERM to ``spark-submit`` would end the JVM
    that holds the SparkContext under the driver's feet)."""
    if job.poll() is None:
        for child in psutil.Process(job.pid).children():
            try:  # a child may exit between the listing and the look (spark-submit's short-lived ones)
                if child.name().startswith("python"):
                    child.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                continue
    try:
        job.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(job.pid).children(recursive=True):
            child.kill()
        job.kill()
        job.wait(timeout=30)
        raise


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory, spark_session: Any) -> dict[str, Any]:
    """What ``local[2]`` (this process's session) stores from the samples: the reference."""
    root = tmp_path_factory.mktemp("local")
    spool = SpoolDirectorySink(root / "spool", retention_s=10**9)
    write_samples(spool)
    reference = settings_for(spool.directory, root)
    with open_store(reference.store_url) as store:
        query = start_query(spark_session, reference, store)
        try:
            query.processAllAvailable()
        finally:
            stop_query(query)
    expected = store_contents(reference.store_url)
    assert len(expected["windows"]) == WINDOWS
    assert {a[1] for a in expected["alerts"]} == {8, 9}
    assert sum(1 for e in expected["events"] if e[2] == "resolved") >= 2
    return expected


def publish_samples(bootstrap: str, topic: str) -> None:
    """The same samples on a new topic of two partitions (a task per partition), through the collectors'
    Kafka sink."""
    with warnings.catch_warnings():  # kafka-python's admin module reads its schemas the deprecated way
        warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        admin.close()
    sink = KafkaTopicSink(bootstrap, topic)
    try:
        write_samples(sink)
    finally:
        sink.close()


# The spool case costs another minute and runs the same submission path (the Kafka case needs both of the
# job's fixes for a cluster: the master from spark-submit, the shipped zip on the planning workers):
# KAFKA_HEALTH_TEST_STANDALONE_SPOOL=1 adds it.
@pytest.mark.parametrize(
    "transport", ["kafka", *(["spool"] if os.environ.get("KAFKA_HEALTH_TEST_STANDALONE_SPOOL") else [])]
)
def test_a_job_submitted_to_a_standalone_cluster_stores_what_local_mode_stores(
    transport: str,
    tmp_path: Path,
    local_store: dict[str, Any],
    spark_standalone: SparkStandalone,
    executor_python: ExecutorPython,
    request: pytest.FixtureRequest,
) -> None:
    # the executors cannot import our packages but from the zip
    assert not executor_python.imports("analytics", spark_env())
    if transport == "spool":
        spool = SpoolDirectorySink(tmp_path / "spool", retention_s=10**9)
        write_samples(spool)
        source = f"spool:{spool.directory}"
    else:
        bootstrap = request.getfixturevalue("kafka_broker")
        topic = f"standalone-{uuid.uuid4().hex[:8]}"
        publish_samples(bootstrap, topic)
        source = f"kafka:{bootstrap}/{topic}"
    settings = settings_for(source, tmp_path / "run")
    py_files = package_zip(tmp_path / "kafka-health.zip")
    log = tmp_path / "submit.log"
    with log.open("ab") as out:
        job = subprocess.Popen(
            submit_argv(spark_standalone, executor_python, py_files, settings),
            cwd=tmp_path,
            env=spark_env() | RULE_ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        db = Path(settings.store_url.removeprefix("sqlite:///"))
        while not (db.exists() and store_contents(settings.store_url)["last"] >= local_store["last"]):
            if job.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the submitted job did not finish its windows:\n{log.read_text()[-4000:]}"
                )
            time.sleep(0.5)
        # it ran on the cluster: the master granted the application the worker's core
        apps = spark_standalone.state()["activeapps"]
        assert [(a["name"], a["cores"]) for a in apps] == [("kafka-health-analytics", 1)], apps
    finally:
        stop_submitted(job)
    assert job.returncode == 0, log.read_text()[-4000:]
    assert store_contents(settings.store_url) == local_store
