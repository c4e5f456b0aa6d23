"""pytest plugin: one local Spark session per test run (starting one takes seconds), and helpers to feed the
analytics job samples through a spool directory exactly as the collectors write them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from analytics.config import AnalyticsSettings
from collectors.samples import Sample
from collectors.transport import SpoolDirectorySink

SPARK_MASTER = "local[2]"

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The test run's Spark JVMs compile with the C1 compiler only: a test's JVM lives for a minute or two, and
C2's compilations of Spark's planner and codegen cost more CPU than they save in that time (the first
micro-batches of a fresh ``kafka-health analytics`` took half the CPU with C1 only on the 2-core test
machine: 24 s instead of 57 s for three batches). Same bytecode, same results; production keeps the JVM's
default. Given as ``--driver-java-options`` in ``PYSPARK_SUBMIT_ARGS``, which pyspark reads when it launches
its JVM: this process's session and the children's (the CLI under test, the demo) inherit it. A
``PYSPARK_SUBMIT_ARGS`` already set wins."""

os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options {TEST_JVM_OPTIONS} pyspark-shell")


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    from analytics.spark.job import build_session, stop_session

    session = build_session(AnalyticsSettings(master=SPARK_MASTER), app_name="kafka-health-tests")
    try:
        yield session
    finally:
        stop_session(session)


class Spool:
    """Writes samples into a spool directory with the collectors' sink (atomic files)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._sink = SpoolDirectorySink(directory, retention_s=10**9)
        self._sequence = 0

    def write(self, samples: Iterable[Sample]) -> None:
        self._sink.write(list(samples))

    def write_lines(self, lines: Iterable[str], name: str) -> None:
        """Raw lines (malformed ones too), atomically."""
        temp = self.directory / f".tmp-{name}"
        temp.write_text("".join(line + "\n" for line in lines))
        temp.rename(self.directory / f"{name}.ndjson")

    def next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence - 1

    def broker(
        self, cluster: str, broker: int, timestamp: float, metrics: Mapping[str, float], collector: str = "t"
    ) -> Sample:
        return Sample(collector, self.next_sequence(), timestamp, "broker", cluster, broker, dict(metrics))

    def cluster(
        self, cluster: str, timestamp: float, health: Mapping[str, Any], collector: str = "t"
    ) -> Sample:
        return Sample(collector, self.next_sequence(), timestamp, "cluster", cluster, None, {}, health)


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    directory = tmp_path / "spool"
    directory.mkdir()
    return Spool(directory)
