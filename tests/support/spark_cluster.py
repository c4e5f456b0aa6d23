"""pytest plugin: a Spark standalone cluster (one master, one worker) from the pyspark wheel's own classes,
and what a user ships to it: the executors' Python and a zip of our packages.

``spark_standalone`` (session) starts ``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker`` through the wheel's ``bin/spark-class`` on free ports of
127.0.0.1 (the worker with 1 core and 1 GB: the test machine has 2 cores), waits until the master's
JSON (``http://127.0.0.1:WEBUI/json``) lists the worker alive, and stops both at the end of the session
(SIGTERM, then SIGKILL; an ``atexit`` hook covers a run that ends without teardown). The worker's
environment has no ``PYTHONPATH`` (the test run puts the repository there), so an executor can import
our packages only from what the job ships.

``executor_python`` (session) is that shipped Python: a virtualenv with the project's third-party
dependencies and **not** the project (its ``site-packages`` reaches the test virtualenv's through a path
line in a ``.pth`` file, which does not run the editable install's finder), as a cluster's nodes would
have one installed; our code goes to the executors in ``--py-files`` (:func:`package_zip`).

Enable it in ``tests/conftest.py``: ``pytest_plugins = [..., "tests.support.spark_cluster"]``.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
import venv
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.embedded.zookeeper import pick_free_port
from tests.support.spark import TEST_JVM_OPTIONS

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
WORKER_CORES = 1
WORKER_MEMORY = "1g"
DAEMON_MEMORY = "256m"
"""The master's and the worker's own heaps (Spark's default is 1 GB each); the executor's is separate."""
LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("analytics", "collectors", "app")
"""What the executors import (the job's functions are pickled by reference to their modules): the zip
holds all three packages, as ``zip -r kafka-health.zip analytics collectors app`` would."""


def spark_home() -> Path:
    """The pyspark wheel's directory: it has Spark's ``bin/`` scripts and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Spark process started here: the wheel as ``SPARK_HOME``, loopback as the local
    address, the test run's JVM options, and none of the test run's ``PYTHONPATH``/``PYSPARK_*`` (they would
    hand the executors the repository and this interpreter, which a real cluster's nodes do not have)."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k != "PYTHONPATH" and not k.startswith(("PYSPARK_", "SPARK_", "KAFKA_HEALTH_"))
    }
    env |= {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": LOOPBACK,
        # the test run's JIT (tests/support/spark.py): the master's and worker's JVMs, spark-submit's driver
        # and, through the driver's conf, the executors'
        "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS,
        "SPARK_SUBMIT_OPTS": f"{TEST_JVM_OPTIONS} -Dspark.executor.extraJavaOptions={TEST_JVM_OPTIONS}",
    }
    return env


def _master_state(web_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{web_port}/json", timeout=2) as response:
        state: dict[str, Any] = json.load(response)
    return state


class _Daemon:
    """A ``spark-class`` process (``exec`` makes its pid the JVM's) with its log file."""

    def __init__(self, main_class: str, args: list[str], log: Path, env: Mapping[str, str]) -> None:
        self.log = log
        argv = [str(spark_home() / "bin" / "spark-class"), main_class, *args]
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


class SparkStandalone:
    """A standalone master and one worker on 127.0.0.1; ``master_url`` is ``spark://127.0.0.1:PORT``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        port, self.web_port, worker_web_port = pick_free_port(), pick_free_port(), pick_free_port()
        self.master_url = f"spark://{LOOPBACK}:{port}"
        env = spark_env() | {
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # the REST submission server would take port 6066, whoever else has it
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_LOG_DIR": str(workdir),
        }
        self.daemons: list[_Daemon] = []
        atexit.register(self.stop)
        try:
            master = _Daemon(
                "org.apache.spark.deploy.master.Master",
                ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(self.web_port)],
                workdir / "master.log",
                env,
            )
            self.daemons.append(master)
            self._wait(lambda s: s.get("status") == "ALIVE", "the master alive", master)
            worker = _Daemon(
                "org.apache.spark.deploy.worker.Worker",
                [
                    "--host", LOOPBACK,
                    "--webui-port", str(worker_web_port),
                    "--cores", str(WORKER_CORES),
                    "--memory", WORKER_MEMORY,
                    "--work-dir", str(workdir / "work"),
                    self.master_url,
                ],
                workdir / "worker.log",
                env,
            )  # fmt: skip
            self.daemons.append(worker)
            self._wait(lambda s: s.get("aliveworkers", 0) >= 1, "the worker registered", worker)
        except BaseException:
            self.stop()
            raise

    def _wait(self, ready: Any, what: str, daemon: _Daemon) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        why = ""
        while True:
            try:
                if ready(_master_state(self.web_port)):
                    return
            except OSError as exc:
                why = str(exc)
            if daemon.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Spark standalone: no sign of {what} ({why}): {daemon.tail()}")
            time.sleep(0.2)

    def state(self) -> dict[str, Any]:
        """The master's JSON: workers, cores, active and completed applications."""
        return _master_state(self.web_port)

    def stop(self) -> None:
        """The worker first (it stops its executors), then the master."""
        for daemon in reversed(self.daemons):
            daemon.stop()


@pytest.fixture(scope="session")
def spark_standalone() -> Iterator[SparkStandalone]:
    with tempfile.TemporaryDirectory(prefix="kafka-health-spark-standalone-") as workdir:
        cluster = SparkStandalone(Path(workdir))
        try:
            yield cluster
        finally:
            cluster.stop()


@dataclass(frozen=True)
class ExecutorPython:
    """A virtualenv for the executors: the project's dependencies, not the project."""

    python: Path

    def imports(self, module: str, env: Mapping[str, str]) -> bool:
        """Whether this interpreter can import ``module`` in ``env`` (a worker's environment)."""
        probe = [str(self.python), "-c", f"import {module}"]
        done = subprocess.run(probe, env=dict(env), cwd="/", capture_output=True, check=False)
        return done.returncode == 0


def make_executor_python(root: Path) -> ExecutorPython:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    purelib = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    # A path line adds the test virtualenv's site-packages without processing the .pth files in it: the
    # editable install of this project (a finder installed by a .pth) stays out.
    (purelib / "kafka_health_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = root / "bin" / "python"
    assert Path(sys.executable).name.startswith("python")
    return ExecutorPython(python)


@pytest.fixture(scope="session")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> ExecutorPython:
    return make_executor_python(tmp_path_factory.mktemp("executor-venv"))


def package_zip(target: Path, packages: tuple[str, ...] = PACKAGES) -> Path:
    """``zip -r target analytics collectors app`` (Python sources and package data, no caches)."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in packages:
            for path in sorted((REPO / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    archive.write(path, path.relative_to(REPO).as_posix())
    return target
