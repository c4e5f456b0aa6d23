"""``kafka-health zookeeper``: serves until SIGINT or SIGTERM, then stops its JVM and removes its private
data dir (exit 0); bad input exits 2 and a server that cannot start exits 1, each with a message."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from app.cli import zookeeper
from app.embedded.zookeeper import pick_free_port, send_four_letter_word
from tests.support.cli import CliFactory, assert_all_gone, refuses
from tests.support.zookeeper import jvm_gone

pytestmark = pytest.mark.integration

SERVING_LINE = re.compile(r"ZooKeeper serving at 127\.0\.0\.1:(\d+) \(data dir (.+), pid (\d+)\)")


def args(port: int | None = None, data_dir: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(port=port, data_dir=data_dir)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_serves_until_signalled_then_stops_cleanly(signum: signal.Signals) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "zookeeper"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as cli:
        assert cli.stdout is not None
        line = cli.stdout.readline().strip()
        match = SERVING_LINE.fullmatch(line)
        assert match, line
        port, data_dir, jvm_pid = int(match[1]), Path(match[2]), int(match[3])
        assert send_four_letter_word("127.0.0.1", port, "ruok") == "imok"
        cli.send_signal(signum)
        _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == 0, stderr
    assert stderr == ""
    assert jvm_gone(jvm_pid, within=0)
    assert not data_dir.exists()


def test_cli_rejects_a_bad_port_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert zookeeper.run(args(port=70000)) == 2
    assert capsys.readouterr().err.startswith("error: port must be between 1 and 65535")


def test_cli_reports_a_startup_failure_with_exit_code_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jdk")
    monkeypatch.setenv("PATH", "/nonexistent-bin")
    assert zookeeper.run(args()) == 1
    assert capsys.readouterr().err.startswith("error: no java found")


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
