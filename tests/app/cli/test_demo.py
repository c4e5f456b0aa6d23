"""``kafka-health demo --once``: the README's first command, end to end in a child process."""

from __future__ import annotations

import re

import pytest

from tests.support.cli import CliFactory, assert_all_gone, java_processes, process_name

pytestmark = pytest.mark.integration


DEMO_STEPS = [
    "== 1. A healthy cluster",
    "== 2. Load skewed onto broker 1: the Spark job's load lane",
    "== 3. Broker 2 crashes: the incident lane pages within a second",
    "== 4. A preferred replica election through the API",
]


@pytest.mark.timeout(600)  # the waits below (180 s up, 400 s the story and the stop), not the suite's 300 s
def test_demo_once_plays_the_story_through_the_api_and_exits_0(run_cli: CliFactory) -> None:
    """The README's first command: ZooKeeper, brokers, collectors, Spark and the service in one process
    tree, a story told through the service's API (the crash paged within a second by the incident lane, the
    skew by the Spark job's load lane), and nothing left running afterwards."""
    cli = run_cli("demo", "--once")
    cli.expect(r"^kafka-health is up on the embedded reference cluster", timeout=180)
    children = cli.descendants()
    assert len(java_processes(children)) == 1, "the ZooKeeper JVM"
    assert len([p for p in children if process_name(p) == "java"]) == 2, "ZooKeeper's JVM and Spark's"

    assert cli.wait(timeout=400) == 0, cli.output()
    assert_all_gone(children)
    steps = [line for line in cli.stdout if line.startswith("== ")]
    assert len(steps) == len(DEMO_STEPS), cli.output()
    for step, expected in zip(steps, DEMO_STEPS, strict=True):
        assert step.startswith(expected), (step, expected)
    output = cli.output()
    paged = re.search(
        r"alert opened (\d+\.\d+) s after the crash by the incident lane \(serve\): \[critical\] "
        r"clickstream: 1 partition offline",
        output,
    )
    assert paged, output
    assert float(paged[1]) < 1.0, "the broker crash is announced within a second"
    assert re.search(
        r"by the incident lane \(serve\): \[critical\] broker 2 holds replicas but is not registered", output
    ), output
    assert "the offline-partition and broker-down alerts resolved" in output
    assert re.search(r"by the load lane \(Spark\): \[warning\] broker 1 carries a load share", output), output
    assert re.search(r"action \w+: SUCCEEDED, [1-9]\d* partitions elected", output), output
