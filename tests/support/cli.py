"""The real command line in a child process, for the tests of ``app/cli``: ``python -m app.cli.main ARGS``
(what the ``kafka-health`` console script runs) with its output read line by line, its descendants (the
ZooKeeper JVM, Spark's) and checks that none of them outlives it.

The ``run_cli`` fixture (``tests/app/cli/conftest.py``) starts them and kills whatever a failed test left.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Protocol

import psutil

from app.embedded.zookeeper import send_four_letter_word

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 90.0
"""JVM start plus cluster start, on a loaded machine."""
EXIT_TIMEOUT = 10.0
JVM_DEATH_TIMEOUT = 5.0


def cli_env() -> dict[str, str]:
    """The caller's environment without settings that would change the reference cluster under test."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_REFERENCE_CLUSTER")}


class Cli:
    """``python -m app.cli.main ARGS`` with its output read line by line on background threads."""

    def __init__(self, *args: str, new_session: bool = False) -> None:
        """``new_session``: in a process group of its own, for :meth:`stop_group`."""
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", *args],
            cwd=REPO,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=new_session,
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

    def stop_group(self, signum: signal.Signals, timeout: float = EXIT_TIMEOUT) -> int:
        """``signum`` to the whole process group (as systemd or a terminal sends it): needs
        ``new_session``."""
        os.killpg(self.pid, signum)
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


def process_name(process: psutil.Process) -> str:
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


def refuses(host: str, port: int) -> bool:
    try:
        send_four_letter_word(host, port, "ruok", timeout=1.0)
    except OSError:
        return True
    return False
