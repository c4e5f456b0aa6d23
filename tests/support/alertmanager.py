"""pytest plugin: a real Alertmanager (Debian's ``prometheus-alertmanager`` package).

* ``alertmanager`` (fixture, module scope): ``prometheus-alertmanager`` on 127.0.0.1 and a free port, its
  storage in a temporary directory, HA clustering off, with a config that routes every alert (grouped by
  all its labels, so each alert is a group of its own, notified at once and again a second after a
  change) to a webhook receiver the fixture runs: :attr:`Alertmanager.notifications` is what Alertmanager
  itself says about the alerts it got (``firing``, then ``resolved``). Stopped at teardown (SIGTERM, then
  SIGKILL).
* ``alertmanager_binary`` (fixture): the binary's path.

A missing binary fails the test under CI (``CI=true``) and says how to install it (``make alertmanager``,
i.e. ``apt-get install prometheus-alertmanager``); elsewhere it skips the test, saying the same.

Enable it in ``tests/conftest.py``: ``pytest_plugins = [..., "tests.support.alertmanager"]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from app.embedded.webhook_receiver import WebhookReceiver
from app.embedded.zookeeper import pick_free_port
from tests.support import daemons

BINARIES: Final = ("prometheus-alertmanager", "alertmanager")
"""Debian's name of the binary, then upstream's."""
INSTALL_HINT: Final = (
    "run `make alertmanager` (it installs Debian's prometheus-alertmanager package: "
    "`apt-get install --no-install-recommends prometheus-alertmanager`)"
)
RECEIVER: Final = "kafka-health-tests"


def find_binary() -> str:
    """The path of Alertmanager's binary; when it is missing, fails the test under CI, skips it elsewhere."""
    for name in BINARIES:
        path = shutil.which(name)
        if path is not None:
            return path
    message = f"Alertmanager ({' or '.join(BINARIES)}) is not on PATH: {INSTALL_HINT}"
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@dataclass
class Alertmanager:
    """A running Alertmanager, its API v2, and the notifications it sent to the fixture's receiver."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    notifications: WebhookReceiver
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10.0))

    def alerts(self, *matchers: str, **params: Any) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` with ``filter`` matchers (``cluster="prod"``) and other parameters
        (``active``, ``silenced``, ``inhibited``, ``unprocessed``: booleans): Alertmanager's
        ``gettableAlert`` list. It lists no resolved alert (one whose ``endsAt`` is past)."""
        query = httpx.QueryParams([("filter", m) for m in matchers]).merge(
            {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
        )
        response = self.client.get(f"{self.url}/api/v2/alerts", params=query)
        response.raise_for_status()
        alerts: list[dict[str, Any]] = response.json()
        return alerts

    def notified(self) -> list[dict[str, Any]]:
        """Every alert of every notification Alertmanager sent (its webhook message's ``alerts``), in
        the order sent."""
        return [alert for request in self.notifications.requests() for alert in request.json()["alerts"]]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        self.client.close()
        daemons.stop(self.process)


def write_config(path: Path, webhook_url: str) -> None:
    """Alertmanager's YAML config, written as JSON (which is YAML): one route, one webhook receiver."""
    config = {
        "route": {
            "receiver": RECEIVER,
            "group_by": ["..."],
            "group_wait": "0s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": RECEIVER, "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }
    path.write_text(json.dumps(config, indent=2))


def _launch(binary: str, config: Path, data: Path, log_path: Path, receiver: WebhookReceiver) -> Alertmanager:
    port = pick_free_port()
    process = daemons.launch(
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no HA mesh (it would bind 0.0.0.0:9094)
            "--log.level=warn",
        ],
        log_path,
    )
    return Alertmanager(f"http://127.0.0.1:{port}", process, log_path, receiver)


def _wait_ready(alertmanager: Alertmanager) -> bool:
    """True once ``/-/ready`` answers 200; False when the process exited (e.g. its port was taken)."""
    return daemons.ready(alertmanager, "Alertmanager")


@pytest.fixture(scope="module")
def alertmanager_binary() -> str:
    return find_binary()


@pytest.fixture(scope="module")
def alertmanager(
    alertmanager_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Alertmanager]:
    """Request it before the fixtures that take long to start: a missing binary fails (or skips) first."""
    home = tmp_path_factory.mktemp("alertmanager")
    with WebhookReceiver() as receiver:
        config = home / "alertmanager.yml"
        write_config(config, receiver.url)
        for attempt in range(3):  # the free port may be taken between picking it and binding it
            running = _launch(
                alertmanager_binary, config, home / f"data-{attempt}", home / "am.log", receiver
            )
            if _wait_ready(running):
                break
            running.stop()
        else:
            raise AssertionError(f"Alertmanager did not start:\n{running.log()}")
        try:
            yield running
        finally:
            running.stop()
