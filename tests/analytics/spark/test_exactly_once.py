"""Exactly once (docs/kafka-reference.md §7): kill the analytics job (SIGKILL, mid-stream) and restart it from
its checkpoint; its alert events must be exactly those of a run that was never interrupted: none lost, none
twice.

The input is a deterministic stream of samples whose load flips in and out of imbalance, so that the load
rules (8 and 9, the job's) open and resolve several times; its health flips too, which the job keeps with
its windows and never evaluates (the incident rules are serve's). The reference run reads it all in one go
in-process; the interrupted run is the real ``kafka-health analytics`` command in a child process, fed the
same samples window by window, killed with SIGKILL once it has committed some batches, and started again:
once on the spool directory, once on a Kafka topic (Tansu, with the collectors' Kafka sink).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from analytics.config import AnalyticsSettings
from analytics.model import AlertEvent
from analytics.rules import RuleSettings
from analytics.spark.job import start_query, stop_query
from collectors.samples import Sample
from collectors.transport import KafkaTopicSink
from tests.support.spark import Spool
from tests.support.store import open_store
from tests.support.tansu import TansuLog, unique_topic

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

T0 = 1_800_000_000.0
WINDOW_S = 2.0
WINDOWS = 40
CLUSTER = "eo"
RULES = RuleSettings(open_after=2, resolve_after=2, urp_for_s=0.0, open_after_by_rule={})
REPO = Path(__file__).resolve().parents[2]


def health(w: int) -> dict[str, Any]:
    def partitions(count: int, topic: str) -> dict[str, Any]:
        if not count:
            return {"count": 0, "by_topic": {}, "examples": {}}
        return {"count": count, "by_topic": {topic: count}, "examples": {topic: list(range(count))}}

    offline = 2 if w % 10 in (3, 4, 5) else 0
    urp = 3 if w % 7 in (1, 2, 3) else 0
    return {
        "snapshot": {"version": w, "taken_at": T0, "last_good_at": T0 + w * WINDOW_S, "stale": False},
        "controller": {"broker_id": 0, "epoch": 1, "active_controller_gauges": 1.0},
        "brokers": [0, 1, 2, 3],
        "brokers_down": [],
        "partitions": 16,
        "offline": partitions(offline, "singles"),
        "under_replicated": partitions(urp, "orders"),
        "under_min_isr": partitions(0, "orders"),
        "at_min_isr": partitions(0, "orders"),
        "suspects": [{"broker_id": 2, "missing_from": urp, "share": 1.0}] if urp else [],
        "imbalance": [],
        "urp_cross_check": None,
    }


def window_samples(spool: Spool, w: int) -> list[Sample]:
    t = T0 + w * WINDOW_S + 0.5
    skewed = w % 12 in (6, 7, 8, 9)
    samples = [
        spool.broker(
            CLUSTER,
            b,
            t,
            {"partitions": 8.0, "leaders": 4.0, "nwBytesIn": 400.0 if skewed and b == 1 else 100.0},
        )
        for b in range(4)
    ]
    samples.append(spool.cluster(CLUSTER, t, health(w)))
    return samples


def settings_for(source: str, root: Path) -> AnalyticsSettings:
    return AnalyticsSettings(
        source=source,
        window_s=WINDOW_S,
        watermark_s=0.0,
        trigger_s=0.5,
        checkpoint=str(root / "checkpoint"),
        store_url=f"sqlite:///{root / 'store.db'}",
        rules=RULES,
    )


def events(store_url: str) -> list[tuple[Any, ...]]:
    with open_store(store_url) as store:  # every table: the command line creates them all
        found: list[AlertEvent] = store.alert_events(limit=100_000)
    return [(e.fingerprint, e.sequence, e.kind, e.at, e.severity, e.summary) for e in found]


def last_window(store_url: str) -> float:
    with open_store(store_url) as store:
        return store.last_evaluated_window(CLUSTER) or 0.0


def start_job(settings: AnalyticsSettings, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_")}
    env |= {
        "KAFKA_HEALTH_ANALYTICS__RULES__OPEN_AFTER": str(RULES.open_after),
        "KAFKA_HEALTH_ANALYTICS__RULES__RESOLVE_AFTER": str(RULES.resolve_after),
        "KAFKA_HEALTH_ANALYTICS__RULES__URP_FOR_S": "0",
        "KAFKA_HEALTH_ANALYTICS__RULES__OPEN_AFTER_BY_RULE": "{}",
    }
    argv = [
        sys.executable, "-m", "app.cli.main", "analytics",
        "--source", settings.source,
        "--window", f"{settings.window_s}s",
        "--watermark", "0s",
        "--trigger", f"{settings.trigger_s}s",
        "--checkpoint", settings.checkpoint,
        "--store-url", settings.store_url,
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_until(predicate: Any, timeout: float, message: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}; job output:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory, spark_session: Any) -> list[tuple[Any, ...]]:
    """The reference: every window at once from a spool directory, never interrupted."""
    root = tmp_path_factory.mktemp("reference")
    ref_spool = Spool(root / "spool")
    for w in range(WINDOWS + 1):  # the last window only moves the watermark
        ref_spool.write(window_samples(ref_spool, w))
    reference = settings_for(f"spool:{ref_spool.directory}", root)
    with open_store(reference.store_url) as store:
        query = start_query(spark_session, reference, store)
        try:
            query.processAllAvailable()
        finally:
            stop_query(query)
    found = events(reference.store_url)
    assert len({e[0] for e in found}) >= 4, "the input should open several alerts"
    with open_store(reference.store_url) as store:
        assert {a.rule for a in store.alerts(limit=1000)} == {8, 9}  # the load lane's rules only
    assert sum(1 for e in found if e[2] == "resolved") >= 4
    return found


Write = Callable[[Sequence[Sample]], None]


@pytest.fixture(params=["spool", "kafka"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Write]]:
    """Where the interrupted run reads (``--source``) and how a window's samples get there."""
    if request.param == "spool":
        spool = Spool(tmp_path / "spool")
        yield f"spool:{spool.directory}", spool.write
        return
    bootstrap: str = request.getfixturevalue("kafka_broker")
    topic = unique_topic("eo")
    log = TansuLog(bootstrap)
    log.create_topic(topic, 2)
    log.close()
    sink = KafkaTopicSink(bootstrap, topic)
    try:
        yield f"kafka:{bootstrap}/{topic}", sink.write
    finally:
        sink.close()


def test_a_killed_and_restarted_job_neither_loses_nor_duplicates_an_alert_event(
    tmp_path: Path, expected: list[tuple[Any, ...]], transport: tuple[str, Write]
) -> None:
    source, write = transport
    numbering = Spool(tmp_path / "numbering")  # the same samples as the reference's, numbered the same
    settings = settings_for(source, tmp_path / "run")
    (tmp_path / "run").mkdir()
    log = tmp_path / "job.log"
    batches = [window_samples(numbering, w) for w in range(WINDOWS + 1)]
    job = start_job(settings, log)
    try:
        fed = 0
        for batch in batches[: WINDOWS // 2]:
            write(batch)
            fed += 1
            time.sleep(0.1)
        wait_until(
            lambda: (
                Path(settings.store_url.removeprefix("sqlite:///")).exists()
                and len(events(settings.store_url)) >= 2
            ),
            timeout=120,
            message="the first alert events",
            log=log,
        )
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=30)
        killed_at = events(settings.store_url)
        assert len(killed_at) < len(expected), "killed too late to test anything"

        job = start_job(settings, log)
        for batch in batches[fed:]:
            write(batch)
            time.sleep(0.05)
        final = T0 + WINDOWS * WINDOW_S
        wait_until(lambda: last_window(settings.store_url) >= final, 180, "the last window", log)
    finally:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait(timeout=30)
    assert events(settings.store_url) == expected
