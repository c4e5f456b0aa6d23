"""``kafka-health``: one command line, a subcommand per process.

Each subcommand is a module of this package that describes itself (``HELP``, ``DESCRIPTION``), defines its
flags (``add_arguments``) and runs (``run``); this module builds the parser from them and dispatches. What
they share (exit codes, stop signals, settings errors, logging) is in ``common``.

Only the chosen subcommand's module is imported (all of them for the top-level ``--help``): ``describe``
need not load FastAPI, Spark's helpers and the simulator to read a cluster once.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, cast

SUBCOMMANDS = {
    "zookeeper": "app.cli.zookeeper",
    "reference-cluster": "app.cli.reference_cluster",
    "describe": "app.cli.describe",
    "safe-to-stop": "app.cli.safe_to_stop",
    "rolling-restart": "app.cli.rolling_restart",
    "collect": "app.cli.collect",
    "analytics": "app.cli.analytics",
    "serve": "app.cli.serve",
    "silence": "app.cli.silence",
    "demo": "app.cli.demo",
}
"""Each subcommand's module, in the order ``--help`` lists them."""


class Subcommand(Protocol):
    """What ``main`` needs of a subcommand's module."""

    @property
    def HELP(self) -> str: ...  # noqa: N802 (a module constant)

    @property
    def DESCRIPTION(self) -> str | None: ...  # noqa: N802

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def load(name: str) -> Subcommand:
    """The subcommand's module, imported on first use."""
    return cast(Subcommand, importlib.import_module(SUBCOMMANDS[name]))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or, given ``command``, one where only that subcommand has its flags
    (the others are still known by name)."""
    from app.cli.common import OneLineParser  # imported on use, like the subcommands (see the end)

    parser = OneLineParser(
        prog="kafka-health",
        description="Cluster health for ZooKeeper-mode Apache Kafka. Exit codes: 0 done, 1 failed "
        "(a dependency unreachable, the work failed), 2 bad input (one line on stderr, before anything "
        "starts), 3 unhealthy or not safe (describe, safe-to-stop).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        if command is None or name == command:
            subcommand = load(name)
            subcommand.add_arguments(
                sub.add_parser(name, help=subcommand.HELP, description=subcommand.DESCRIPTION)
            )
        else:
            sub.add_parser(name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The command comes first (the top-level parser has no other options); anything else, such as a lone
    # --help or a mistyped command, gets the whole parser and its full message.
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(command).parse_args(argv)
    from app.cli.common import LOG_LEVEL_ENV, ExitCode, configure_logging, log_level

    try:
        level = log_level(os.environ.get(LOG_LEVEL_ENV))
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return ExitCode.BAD_INPUT
    configure_logging(level)
    return load(args.command).run(args)


def _drop_script_directory() -> None:
    """``spark-submit app/cli/main.py analytics ...`` (docs/analytics.md) runs this file as a script, which
    puts ``app/cli`` first on ``sys.path``: there ``analytics.py`` would shadow the ``analytics`` package."""
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        del sys.path[0]


if __name__ == "__main__":
    _drop_script_directory()
    sys.exit(main())
