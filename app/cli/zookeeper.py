"""``kafka-health zookeeper``: a real ZooKeeper server in a child JVM until SIGINT or SIGTERM.

Both signals only set an event, so the shutdown always runs the server's own stop (SIGTERM, wait, SIGKILL)
and removes a private data dir, rather than the death-signal path that takes the JVM down with a killed
parent.

Exit codes: 0 stopped, 1 the server failed (no java, no jars, it exited), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.common import ExitCode, stop_signals, tcp_port
from app.embedded.zookeeper import EmbeddedZooKeeper, ZooKeeperConfigError, ZooKeeperServerError

HELP = "run a real ZooKeeper server from the jars in the pyspark wheel"
DESCRIPTION = None

_POLL_S = 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, help="client port (default: a free one)")
    parser.add_argument("--data-dir", type=Path, help="data directory (default: a private temporary one)")


def run(args: argparse.Namespace) -> int:
    with stop_signals() as stop:
        try:
            with EmbeddedZooKeeper(args.port, args.data_dir) as server:
                where = f"data dir {server.data_dir}, pid {server.pid}"
                print(f"ZooKeeper serving at {server.connect_string} ({where})", flush=True)
                while not stop.wait(_POLL_S):
                    if not server.is_running:
                        raise ZooKeeperServerError(
                            f"the ZooKeeper JVM exited unexpectedly\n{server.log_tail()}"
                        )
        except ZooKeeperConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.BAD_INPUT
        except ZooKeeperServerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.FAILED
    return ExitCode.OK
