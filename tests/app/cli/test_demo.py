"""``kafka-health demo --once``: the README's first command, end to end in a child process."""

from __future__ import annotations

import io
import logging
import re
import time
from pathlib import Path

import pytest

from app.cli.demo import DemoLogs, logs_to_files
from tests.support.cli import CliFactory, assert_all_gone, java_processes, process_name
from tests.support.reference_cluster import wait_for

DEMO_STEPS = [
    "== 1. A healthy cluster",
    "== 2. Load skewed onto broker 1: the Spark job's load lane",
    "== 3. Broker 2 crashes: the incident lane pages within a second",
    "== 4. A preferred replica election through the API",
    "== 5. Consumer group recommendations falls behind: rule 19 pages it lagging, then it catches up",
]
LOG_FILES = {"reference-cluster.log", "zookeeper.log", "spark.log", "service.log"}


@pytest.mark.integration
@pytest.mark.timeout(600)  # the waits below (180 s up, 400 s the story and the stop), not the suite's 300 s
def test_demo_once_plays_the_story_through_the_api_and_exits_0(run_cli: CliFactory) -> None:
    """The README's first command: ZooKeeper, brokers, collectors, Spark and the service in one process
    tree, a story told through the service's API (the crash paged by the incident lane, the
    skew by the Spark job's load lane), and nothing left running afterwards. The console tells the story
    only: the log files, named before anything starts, have the simulator's, ZooKeeper's and Spark's lines
    (the crash's "no leader can be elected" among them)."""
    cli = run_cli("demo", "--once")
    named = cli.expect(r"^logs: (.+)$", timeout=60)
    logs = {path.name: path for path in map(Path, named[1].split(", "))}
    assert set(logs) == LOG_FILES, named[0]
    cli.expect(r"^kafka-health is up on the embedded reference cluster", timeout=180)
    story_deadline = time.monotonic() + 400
    children = cli.descendants()
    assert len(java_processes(children)) == 1, "the ZooKeeper JVM"
    assert len([p for p in children if process_name(p) == "java"]) == 2, "ZooKeeper's JVM and Spark's"
    assert "Using Spark's default log4j profile" in logs["spark.log"].read_text(), "the Spark JVM's console"
    assert logs["zookeeper.log"].is_file()
    assert logs["service.log"].is_file()

    cli.expect(r"s after the crash by the incident lane", timeout=story_deadline - time.monotonic())
    wait_for(
        lambda: (
            "ERROR app.embedded.reference_cluster.controller: no leader can be elected for offline "
            "partition clickstream-" in logs["reference-cluster.log"].read_text()
        ),
        timeout=60,
        message="the simulator's controller logging the offline partition to reference-cluster.log",
    )
    assert cli.wait(timeout=max(10, story_deadline - time.monotonic())) == 0, cli.output()
    assert_all_gone(children)
    steps = [line for line in cli.stdout if line.startswith("== ")]
    assert len(steps) == len(DEMO_STEPS), cli.output()
    for step, expected in zip(steps, DEMO_STEPS, strict=True):
        assert step.startswith(expected), (step, expected)
    output = cli.output()
    assert not cli.stderr, "the story only, no simulator, Spark or ZooKeeper line:\n" + "\n".join(cli.stderr)
    assert "no leader can be elected" not in output
    assert not logs["service.log"].parent.exists(), "the data directory removed on a clean exit"
    paged = re.search(
        r"alert opened (\d+\.\d+) s after the crash by the incident lane \(serve\): \[critical\] "
        r"clickstream: 1 partition offline",
        output,
    )
    # paged at all, and with a figure; how fast is bench/alert_latency.py's to measure, not a loaded machine's
    assert paged, output
    assert float(paged[1]) > 0, output
    assert re.search(
        r"by the incident lane \(serve\): \[critical\] broker 2 holds replicas but is not registered", output
    ), output
    assert "the offline-partition and broker-down alerts resolved" in output
    assert re.search(r"by the load lane \(Spark\): \[warning\] broker 1 carries a load share", output), output
    assert re.search(r"action \w+: SUCCEEDED, [1-9]\d* partitions elected", output), output
    # the two consumer groups keep pace, then one is slowed: paged lagging once, caught up, resolved
    step_5 = output.split("== 5. ", 1)[1]
    before, after_page = step_5.split("alert opened", 1)
    assert re.search(r"billing: ok, 2 members, lag \d+ records.*recommendations: ok, 3 members", before), (
        output
    )
    assert re.match(
        r" \d+\.\d+ s after the slowdown by the incident lane \(serve\): \[warning\] consumer group "
        r"recommendations is lagging",
        after_page,
    ), output
    assert "alert opened" not in after_page, (
        "one page, for the group: not one per partition, none for billing"
    )
    assert "recommendations consumed 4x as fast until caught up: the lagging alert resolved" in after_page
    final = [line for line in after_page.splitlines() if line.startswith("   billing: ")][-1]
    assert re.search(r"billing: ok, .*recommendations: ok, 3 members", final), output


@pytest.mark.unit
def test_the_demo_logs_to_its_files_and_shows_only_the_products_errors(tmp_path: Path) -> None:
    """The simulator's errors (Kafka's own, part of the story), third-party clients' errors and everyone's
    warnings go to the log files only; the product's errors (a failure of the demo) reach the console too."""
    console = io.StringIO()
    logs = DemoLogs(tmp_path)
    root = logging.getLogger()
    before = root.handlers[:]
    with logs_to_files(logs, console):
        logging.getLogger("app.embedded.reference_cluster.controller").error(
            "no leader can be elected for offline partition clickstream-1"
        )
        logging.getLogger("app.embedded.zookeeper").warning("ZooKeeper's port was taken")
        logging.getLogger("app.incidents.lane").error("incident lane: the evaluation failed; retrying")
        logging.getLogger("collectors.sampler").warning("a broker's metrics unreachable")
        logging.getLogger("uvicorn.error").error("Exception in ASGI application")
        logging.getLogger("kazoo.client").error("Connection dropped: socket connection broken")
        logging.getLogger("analytics.spark.job").error("the batch failed")
        logging.getLogger("py4j.clientserver").error("Error while sending or receiving")
    assert root.handlers == before
    assert logging.getLogger("app.embedded").propagate
    shown = console.getvalue().splitlines()
    assert len(shown) == 3, shown
    expected_lines = ("evaluation failed", "ASGI application", "the batch failed")
    for line, expected in zip(shown, expected_lines, strict=True):
        assert " ERROR " in line, line
        assert expected in line, line
    simulator = logs.reference_cluster.read_text()
    assert "ERROR app.embedded.reference_cluster.controller: no leader can be elected" in simulator
    assert "ZooKeeper's port was taken" in simulator
    service = logs.service.read_text()
    for line in ("evaluation failed", "metrics unreachable", "ASGI application", "Connection dropped"):
        assert line in service, service
    assert "no leader" not in service
    spark = logs.spark.read_text()
    assert "the batch failed" in spark
    assert "Error while sending or receiving" in spark
