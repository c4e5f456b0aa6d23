"""``kafka-health rolling-restart`` in a real subprocess against a 5-broker reference cluster (replication
factor 3, ``min.insync.replicas`` 2, traffic on) on a real ZooKeeper, its restart command restarting each
broker through the cluster's control port (tests/support/restart_broker.py, which logs each restart): every
broker restarted exactly once, the controller last, while a watcher on every state znode records that no
partition was ever offline or under min ISR; a broker stopped by hand midway stops it with exit 3 naming
that broker; SIGKILLed midway, ``--resume`` finishes without restarting any broker twice.

The conductor's own logic (pause, resume by broker epoch, the window) is unit-tested with fakes in
tests/app/maintenance/test_rolling_restart.py."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from app.cli.main import main
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.control import ControlServer
from tests.support.cli import REPO, Cli, CliFactory
from tests.support.reference_cluster import ClusterFactory, live_broker_ids, wait_for, zk_partitions
from tests.support.state_watcher import StateWatcher

pytestmark = pytest.mark.integration

BROKERS = 5
MIN_ISR = {"payments": 2}
TOPICS = [
    TopicSpec(name="payments", partitions=10, replication_factor=3, config={"min.insync.replicas": "2"}),
]
RESTART_SCRIPT = REPO / "tests" / "support" / "restart_broker.py"
RUN_TIMEOUT = 600.0


class Reference:
    """The cluster, its control port, the watcher and the restart log of one test."""

    def __init__(self, make_cluster: ClusterFactory, zk_client: KazooClient, tmp_path: Path) -> None:
        self.cluster: ReferenceCluster = make_cluster(brokers=BROKERS, topics=TOPICS, min_insync_replicas=2)
        self.control = ControlServer(self.cluster)
        self.control.start()
        self.zk = zk_client
        partitions = zk_partitions(zk_client)
        replicas = {f"{t}-{p}": len(z.replicas) for (t, p), z in partitions.items()}
        self.watcher = StateWatcher(zk_client, replicas, MIN_ISR)
        for topic, index in partitions:
            self.watcher.watch(topic, index)
        self.log = tmp_path / "restarts.log"
        self.state_dir = tmp_path / "state"
        assert self.cluster.controller is not None
        self.controller = self.cluster.controller.broker_id

    def command(self, down_s: float = 0.0) -> str:
        words = [sys.executable, str(RESTART_SCRIPT), self.control.url, "{broker}", str(self.log)]
        return shlex.join([*words, f"{down_s:g}"])

    def restarts(self) -> list[int]:
        return [int(line) for line in self.log.read_text().split()] if self.log.exists() else []

    def args(self, *extra: str, down_s: float = 0.0) -> list[str]:
        """The conductor's command line; ``down_s``: how long each broker stays down in its restart."""
        return [
            "rolling-restart",
            "--zookeeper",
            self.cluster.zookeeper,
            "--brokers",
            "all",
            "--restart-command",
            self.command(down_s),
            "--no-demote",
            "--no-silence",
            "--state-dir",
            str(self.state_dir),
            "--default-min-isr",
            "2",
            *extra,
        ]

    def full_isrs(self) -> bool:
        return all(len(p.isr) == len(p.replicas) for p in zk_partitions(self.zk).values())


@pytest.fixture
def reference(make_cluster: ClusterFactory, zk_client: KazooClient, tmp_path: Path) -> Iterator[Reference]:
    ref = Reference(make_cluster, zk_client, tmp_path)
    yield ref
    ref.control.close()


def report(cli: Cli) -> dict[str, object]:
    last = json.loads(cli.stdout[-1])
    assert last["event"] == "report", cli.output()
    return dict(last)


def test_every_broker_restarted_once_controller_last_never_under_min_isr(
    reference: Reference, run_cli: CliFactory
) -> None:
    cli = run_cli(*reference.args("--format", "json"))
    assert cli.wait(RUN_TIMEOUT) == 0, cli.output()
    restarts = reference.restarts()
    assert sorted(restarts) == list(range(BROKERS)), restarts
    assert restarts[-1] == reference.controller
    assert reference.watcher.events >= 2 * BROKERS, "the watcher saw the restarts' state changes"
    assert reference.watcher.violations == [], reference.watcher.violations
    body = report(cli)
    assert body["result"] == "done"
    assert body["order"] == restarts
    brokers = body["brokers"]
    assert isinstance(brokers, list)
    for entry in brokers:
        assert entry["done"] is True
        assert set(entry["steps"]) == {"wait_safe", "restart", "rejoin"}
        assert entry["steps"]["restart"]["duration_s"] >= 0
    events = [json.loads(line) for line in cli.stdout[:-1]]
    assert [e["broker"] for e in events if e["event"] == "started" and e["step"] == "restart"] == restarts
    wait_for(reference.full_isrs, message="every ISR full again")


def test_a_second_broker_stopped_by_hand_midway_stops_the_run_with_3_naming_it(
    reference: Reference, run_cli: CliFactory
) -> None:
    cli = run_cli(*reference.args())
    first = cli.expect(r"broker (\d+): restarted and back in every ISR", timeout=RUN_TIMEOUT)
    done = int(first.group(1))
    others = [b for b in range(BROKERS) if b not in (done, reference.controller)]
    by_hand = others[-1]
    httpx.post(f"{reference.control.url}/brokers/{by_hand}/stop", json={}, timeout=30).raise_for_status()
    assert cli.wait(RUN_TIMEOUT) == 3, cli.output()
    assert f"broker {by_hand} is down (not registered in /brokers/ids)" in cli.stderr[-1], cli.output()
    assert cli.stderr[-1].startswith("stopped at broker "), cli.output()
    assert by_hand not in reference.restarts()
    assert reference.restarts().count(done) == 1


def test_sigkill_midway_then_resume_finishes_without_restarting_any_broker_twice(
    reference: Reference, run_cli: CliFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    # each broker stays down 3 s in its restart, so that the test sees the second one down (a stop and an
    # immediate start can come and go between two looks)
    def args(*extra: str) -> list[str]:
        return reference.args(*extra, down_s=3.0)

    cli = run_cli(*args())
    cli.expect(r"broker \d+: restarted and back in every ISR", timeout=RUN_TIMEOUT)
    second = int(cli.expect(r"broker (\d+): running the restart command", timeout=RUN_TIMEOUT).group(1))
    # killed while the restart it started is under way (the command, its child, goes on)
    wait_for(lambda: second not in live_broker_ids(reference.zk), message=f"broker {second} going down")
    cli.process.kill()
    cli.wait()
    saved = json.loads((reference.state_dir / "rolling-restart.json").read_text())
    assert saved["state"] == "running"
    assert saved["brokers"][str(second)]["steps"]["restart"]["ended_at"] is None

    # without --resume, an unfinished run is refused
    assert main(args()) == 2
    assert "has not finished (running): run again with --resume" in capsys.readouterr().err

    resumed = run_cli(*args("--resume"))
    assert resumed.wait(RUN_TIMEOUT) == 0, resumed.output()
    restarts = reference.restarts()
    assert sorted(restarts) == list(range(BROKERS)), restarts
    assert restarts[-1] == reference.controller
    assert any("resuming: " in line for line in resumed.stdout), resumed.output()
    assert reference.watcher.violations == [], reference.watcher.violations

    # run again with --resume once done: nothing to do
    again = run_cli(*args("--resume"))
    assert again.wait(60) == 0, again.output()
    assert "is done already" in again.stdout[-1]
    assert reference.restarts() == restarts


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's errors
        return exc.code if isinstance(exc.code, int) else -1


def test_bad_input_exits_2_with_one_line(
    zk_connect: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = ["rolling-restart", "--zookeeper", zk_connect, "--state-dir", str(tmp_path)]
    quiet = ["--no-demote", "--no-silence"]
    cases = {
        "pass --service-url URL": [*base, "--restart-command", "true"],
        "pass --restart-command CMD (or --external)": [*base, *quiet],
        "is not a command found on PATH": [*base, "--restart-command", "no-such-cmd {broker}", *quiet],
        "nothing to resume": [*base, "--resume", *quiet],
        "names a broker twice": [*base, "--brokers", "1,1", "--restart-command", "true", *quiet],
        "cannot be split": [*base, "--restart-command", "echo 'open", *quiet],
    }
    for message, argv in cases.items():
        assert exit_code(argv) == 2, message
        err = capsys.readouterr().err
        assert message in err, (message, err)
        assert err.count("\n") == 1, err
