"""``kafka-health serve`` as an operator runs it: a child process (``python -m app.cli.main serve``) with an
admin token, its output in a log file, stopped at teardown (SIGTERM, then SIGKILL). The ``serves`` fixture
starts as many as a test needs; :meth:`Serve.kill` and :meth:`Serve.terminate` are the crashes and the
rolling restarts the tests inflict on it.

Enable with ``pytest_plugins = ["tests.support.serve_process"]``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.embedded.zookeeper import pick_free_port
from tests.support.cli import REPO
from tests.support.reference_cluster import scrape

ADMIN_TOKEN = "admin-token-for-the-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
START_TIMEOUT_S = 60.0


class Serve:
    """``python -m app.cli.main serve`` in a child process (output in ``log``)."""

    def __init__(self, zookeeper: str, store_url: str, log: Path, **env: str) -> None:
        self.port = pick_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        clean = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_")}
        clean |= {"KAFKA_HEALTH_SERVICE__TOKENS": f"root:admin:{ADMIN_TOKEN}", **env}
        argv = [
            sys.executable, "-m", "app.cli.main", "serve", "--zookeeper", zookeeper,
            "--store-url", store_url, "--port", str(self.port),
        ]  # fmt: skip
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, cwd=REPO, env=clean, stdout=out, stderr=subprocess.STDOUT)

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"serve exited with {self.process.returncode}:\n{self.output()}")
        try:
            return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def standing(self) -> str | None:
        """Where its incident lane stands (its ``/metrics``), or None when it does not answer."""
        try:
            metrics = scrape(self.url + "/metrics", timeout=2)
        except httpx.HTTPError:
            return None
        for sample in metrics.series("kafka_health_incident_lane_leader"):
            if sample.value == 1:
                return sample.labels["standing"]
        return None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing cleaned up."""
        self.process.kill()
        self.process.wait(10)

    def terminate(self) -> int:
        """SIGTERM (a rolling restart of the service): returns its exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(self.url + path, params=params, headers=ADMIN, timeout=10)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        return httpx.post(self.url + path, json=body, headers=ADMIN, timeout=30)


@pytest.fixture
def serves(tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    """``start(zookeeper, store_url, **env) -> Serve``; every one started is stopped at teardown."""
    started: list[Serve] = []

    def start(zookeeper: str, store_url: str, **env: str) -> Serve:
        serve = Serve(zookeeper, store_url, tmp_path / f"serve-{len(started)}.log", **env)
        started.append(serve)
        return serve

    yield start
    for serve in started:
        serve.stop()
