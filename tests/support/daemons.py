"""What the fixtures running a real server binary (Prometheus, Alertmanager) share: start it on a port of
its own with its output in a log file, wait for its ``/-/ready``, and stop it (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Protocol

import httpx

START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0


def launch(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``argv`` in a session of its own, stdout and stderr appended to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`; nothing when it has exited."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


class Daemon(Protocol):
    """What :func:`ready` reads of a started server: its process, client, URL, log and stop."""

    @property
    def process(self) -> subprocess.Popen[bytes]: ...
    @property
    def client(self) -> httpx.Client: ...
    @property
    def url(self) -> str: ...
    def log(self) -> str: ...
    def stop(self) -> None: ...


def ready(daemon: Daemon, name: str) -> bool:
    """True once the daemon's ``/-/ready`` answers 200; False when its process exited (e.g. its port was
    taken); AssertionError with its log (the daemon stopped) when neither within :data:`START_TIMEOUT_S`."""
    answer = wait_ready(daemon.process, daemon.client, daemon.url)
    if answer is None:
        daemon.stop()
        raise AssertionError(f"{name} was not ready within {START_TIMEOUT_S:g}s:\n{daemon.log()}")
    return answer


def wait_ready(process: subprocess.Popen[bytes], client: httpx.Client, url: str) -> bool | None:
    """True once ``{url}/-/ready`` answers 200; False when the process exited (e.g. its port was taken);
    None when neither happened within :data:`START_TIMEOUT_S` (the caller stops it and says so)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if client.get(f"{url}/-/ready").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return None
