"""``kafka-health`` end to end: the real command line in a child process (``python -m app.cli.main``, which is
what the ``kafka-health`` console script runs), its output, its signals and the processes it leaves.

The orphan checks collect the CLI's descendants (the ZooKeeper JVM) with psutil while it runs and require
every one of them gone after it exits, whichever way it exits.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

import psutil
import pytest
from kazoo.client import KazooClient

from app.embedded.zookeeper import pick_free_port, send_four_letter_word

pytestmark = pytest.mark.integration

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 90.0
"""JVM start plus cluster start, on a loaded machine."""
EXIT_TIMEOUT = 10.0
JVM_DEATH_TIMEOUT = 5.0
ZOOKEEPER_LINE = re.compile(r"^ZooKeeper: (\S+)$")
METRICS_LINE = re.compile(r"^broker (\d+): metrics (http://\S+/metrics)$")
CONTROL_LINE = re.compile(r"^control:\s+(http://\S+)/$")
SERVING_LINE = re.compile(r"ZooKeeper serving at 127\.0\.0\.1:(\d+) \(data dir (.+), pid (\d+)\)")


def poll(predicate: Callable[[], T], timeout: float, message: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(0.05)


def cli_env() -> dict[str, str]:
    """The caller's environment without settings that would change the reference cluster under test."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_REFERENCE_CLUSTER")}


class Cli:
    """``python -m app.cli.main ARGS`` with its output read line by line on background threads."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", *args],
            cwd=REPO,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.stdout, True), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self.stderr, False), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str], into: list[str], queued: bool) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))
            if queued:
                self._lines.put(line.rstrip("\n"))
        if queued:
            self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return "stdout:\n" + "\n".join(self.stdout) + "\nstderr:\n" + "\n".join(self.stderr)

    def expect(self, pattern: re.Pattern[str] | str, timeout: float = STARTUP_TIMEOUT) -> re.Match[str]:
        """The first stdout line from now on that matches ``pattern``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r} within {timeout:g} s\n{self.output()}"
                ) from None
            if line is None:
                self.process.wait(5)
                raise AssertionError(
                    f"exited with {self.process.returncode} before a line matching {pattern!r}\n"
                    + self.output()
                )
            if match := re.search(pattern, line):
                return match

    def descendants(self) -> list[psutil.Process]:
        children: list[psutil.Process] = psutil.Process(self.pid).children(recursive=True)
        return children

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        try:
            returncode = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {timeout:g} s later\n{self.output()}") from None
        for reader in self._readers:
            reader.join(5)
        return returncode

    def stop(self, signum: signal.Signals, timeout: float = EXIT_TIMEOUT) -> int:
        self.process.send_signal(signum)
        return self.wait(timeout)

    def kill_everything(self) -> None:
        """Teardown: whatever a failed test left, by pid: the CLI and the descendants it still has."""
        if self.process.poll() is None:
            leftovers = self.descendants()
            self.process.kill()
            self.process.wait(10)
            for process in leftovers:
                if process.is_running():
                    process.kill()
            psutil.wait_procs(leftovers, timeout=10)
        for reader in self._readers:
            reader.join(5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


class CliFactory(Protocol):
    def __call__(self, *args: str) -> Cli: ...


@pytest.fixture
def run_cli() -> Iterator[CliFactory]:
    started: list[Cli] = []

    def run(*args: str) -> Cli:
        cli = Cli(*args)
        started.append(cli)
        return cli

    yield run
    for cli in started:
        cli.kill_everything()


def _name(process: psutil.Process) -> str:
    try:
        return str(process.name())
    except psutil.NoSuchProcess:  # gone, or a zombie not yet reaped (Spark's launcher scripts)
        return ""


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:  # gone, or a zombie not yet reaped (Spark's launcher scripts)
        return ""


def java_processes(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if "ZooKeeperServerMain" in _cmdline(p)]


def assert_all_gone(processes: list[psutil.Process], within: float = JVM_DEATH_TIMEOUT) -> None:
    _, alive = psutil.wait_procs(processes, timeout=within)
    assert alive == [], f"left behind: {[(p.pid, _cmdline(p)[:200]) for p in alive]}"


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def scrape_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=10) as response:
        return (
            response.status == 200
            and b"kafka_server_replicamanager_underreplicatedpartitions" in response.read()
        )


def refuses(host: str, port: int) -> bool:
    try:
        send_four_letter_word(host, port, "ruok", timeout=1.0)
    except OSError:
        return True
    return False


def banner(cli: Cli) -> tuple[str, dict[int, str], str]:
    """Wait for ``ready`` and return (ZooKeeper connect string, metrics URL by broker, control URL)."""
    cli.expect(r"^ready \(Ctrl-C to stop\)$")
    [zookeeper] = [m[1] for line in cli.stdout if (m := ZOOKEEPER_LINE.match(line))]
    [control] = [m[1] for line in cli.stdout if (m := CONTROL_LINE.match(line))]
    metrics = {int(m[1]): m[2] for line in cli.stdout if (m := METRICS_LINE.match(line))}
    return zookeeper, metrics, control


def kazoo(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    return client


# --- reference-cluster ----------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_reference_cluster_with_its_own_zookeeper_runs_and_stops_without_orphans(
    run_cli: CliFactory, signum: signal.Signals
) -> None:
    control_port = pick_free_port()
    cli = run_cli(
        "reference-cluster", "--brokers", "3", "--topic", "orders:4:3", "--control-port", str(control_port)
    )
    zookeeper, metrics, control = banner(cli)

    assert re.fullmatch(r"127\.0\.0\.1:\d+", zookeeper), zookeeper
    assert sorted(metrics) == [0, 1, 2]
    assert len(set(metrics.values())) == 3
    assert all(scrape_ok(url) for url in metrics.values())
    assert control == f"http://127.0.0.1:{control_port}"
    state = get_json(f"{control}/")
    assert state["zookeeper"] == zookeeper
    assert [b["id"] for b in state["brokers"]] == [0, 1, 2]
    assert {b["id"]: b["metrics_url"] for b in state["brokers"]} == metrics
    client = kazoo(zookeeper)
    try:
        assert sorted(client.get_children("/brokers/ids")) == ["0", "1", "2"]
        topic = json.loads(client.get("/brokers/topics/orders")[0])
        assert sorted(topic["partitions"]) == ["0", "1", "2", "3"]
        assert all(sorted(r) == [0, 1, 2] for r in topic["partitions"].values())
        assert json.loads(client.get("/controller")[0])["brokerid"] == state["controller"]["broker_id"]
    finally:
        client.stop()
        client.close()

    children = cli.descendants()
    jvms = java_processes(children)
    assert len(jvms) == 1, [p.cmdline()[:3] for p in children]

    assert cli.stop(signum) == 0, cli.output()
    assert "stopping..." in cli.stdout
    assert_all_gone(children)
    host, _, port = zookeeper.partition(":")
    assert refuses(host, int(port)), "the ZooKeeper port still answers"
    assert refuses("127.0.0.1", control_port), "the control port still answers"


def test_reference_cluster_on_a_given_zookeeper_chroot_starts_no_jvm(
    run_cli: CliFactory, zk_connect: str, zk_client: KazooClient
) -> None:
    cli = run_cli("reference-cluster", "--zookeeper", zk_connect, "--brokers", "3", "--topic", "orders:2:2")
    zookeeper, metrics, _ = banner(cli)
    assert zookeeper == zk_connect
    assert sorted(metrics) == [0, 1, 2]
    assert sorted(zk_client.get_children("/brokers/ids")) == ["0", "1", "2"]
    assert zk_client.exists("/brokers/topics/orders") is not None
    children = cli.descendants()
    assert java_processes(children) == [], [p.cmdline()[:3] for p in children]

    assert cli.stop(signal.SIGINT) == 0, cli.output()
    assert_all_gone(children)
    # the brokers closed their sessions: their registrations went with them
    assert zk_client.get_children("/brokers/ids") == []
    assert zk_client.exists("/controller") is None


def test_sigkill_of_the_cli_takes_its_zookeeper_jvm_down(run_cli: CliFactory) -> None:
    cli = run_cli("reference-cluster", "--brokers", "1")
    zookeeper, _, _ = banner(cli)
    jvms = java_processes(cli.descendants())
    assert len(jvms) == 1

    cli.process.kill()
    assert cli.wait() == -signal.SIGKILL
    assert_all_gone(jvms)  # PR_SET_PDEATHSIG: no handler runs on SIGKILL, the kernel kills the JVM
    host, _, port = zookeeper.partition(":")
    assert refuses(host, int(port))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--topic", "bad"], r"NAME:PARTITIONS:RF"),
        (["--topic", "orders:x:3"], r"NAME:PARTITIONS:RF"),
        (["--brokers", "2", "--topic", "t:1:3"], r"replication factor 3 larger than available brokers: 2"),
        (["--brokers", "3", "--topic", "bad name:1:1"], r"illegal topic name"),
        (["--zookeeper", "127.0.0.1:abc"], r"is not host:port"),
    ],
    ids=["no-colons", "non-numeric-partitions", "rf-above-brokers", "illegal-name", "bad-zookeeper"],
)
def test_bad_reference_cluster_input_exits_2_with_a_message(
    run_cli: CliFactory, args: list[str], expected: str
) -> None:
    cli = run_cli("reference-cluster", *args)
    assert cli.wait(30) == 2, cli.output()
    assert re.search(expected, "\n".join(cli.stderr)), cli.output()
    assert cli.stdout == [], "nothing should have started"


# --- zookeeper ---------------------------------------------------------------------------------------------


def test_zookeeper_subcommand_serves_on_the_given_port_until_sigint(run_cli: CliFactory) -> None:
    port = pick_free_port()
    cli = run_cli("zookeeper", "--port", str(port))
    match = cli.expect(SERVING_LINE, timeout=60)
    assert int(match[1]) == port
    data_dir, jvm_pid = Path(match[2]), int(match[3])
    assert send_four_letter_word("127.0.0.1", port, "ruok") == "imok"
    jvm = psutil.Process(jvm_pid)
    assert jvm in cli.descendants()

    assert cli.stop(signal.SIGINT) == 0, cli.output()
    assert_all_gone([jvm])
    assert refuses("127.0.0.1", port)
    assert not data_dir.exists(), "the private data dir should be removed"


# --- demo --------------------------------------------------------------------------------------------------


DEMO_STEPS = [
    "== 1. A healthy cluster",
    "== 2. Load skewed onto broker 1",
    "== 3. Broker 2 crashes",
    "== 4. A preferred replica election through the API",
]


def test_demo_once_plays_the_story_through_the_api_and_exits_0(run_cli: CliFactory) -> None:
    """The README's first command: ZooKeeper, brokers, collectors, Spark and the service in one process
    tree, a story told through the service's API, and nothing left running afterwards."""
    cli = run_cli("demo", "--once")
    cli.expect(r"^kafka-health is up on the embedded reference cluster", timeout=180)
    children = cli.descendants()
    assert len(java_processes(children)) == 1, "the ZooKeeper JVM"
    assert len([p for p in children if _name(p) == "java"]) == 2, "ZooKeeper's JVM and Spark's"

    assert cli.wait(timeout=400) == 0, cli.output()
    assert_all_gone(children)
    steps = [line for line in cli.stdout if line.startswith("== ")]
    assert len(steps) == len(DEMO_STEPS), cli.output()
    for step, expected in zip(steps, DEMO_STEPS, strict=True):
        assert step.startswith(expected), (step, expected)
    output = cli.output()
    assert "alert opened: [warning] broker 1 carries a load share" in output
    assert "alert opened: [critical] broker 2 holds replicas but is not registered" in output
    assert re.search(r"action \w+: SUCCEEDED, [1-9]\d* partitions elected", output), output
    assert "the broker-down alert resolved" in output
