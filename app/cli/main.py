"""``kafka-health``: one command line, a subcommand per process.

Each subcommand is a module of this package that names itself (``NAME``, ``HELP``, ``DESCRIPTION``),
defines its flags (``add_arguments``) and runs (``run``); this module builds the parser from them and
dispatches. What they share (exit codes, stop signals, settings errors, logging) is in ``common``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol


class Subcommand(Protocol):
    """What ``main`` needs of a subcommand's module."""

    @property
    def NAME(self) -> str: ...  # noqa: N802 (a module constant)

    @property
    def HELP(self) -> str: ...  # noqa: N802

    @property
    def DESCRIPTION(self) -> str | None: ...  # noqa: N802

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def subcommands() -> Mapping[str, Subcommand]:
    """The subcommands by name, in the order ``--help`` lists them.

    Imported when called rather than with this module, so that running this file as a script (see the end
    of it) can fix ``sys.path`` first.
    """
    from app.cli import analytics, collect, demo, describe, reference_cluster, serve, zookeeper

    ordered: tuple[Subcommand, ...] = (
        zookeeper,
        reference_cluster,
        describe,
        collect,
        analytics,
        serve,
        demo,
    )
    return {command.NAME: command for command in ordered}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-health",
        description="Cluster health for ZooKeeper-mode Apache Kafka.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in subcommands().items():
        command.add_arguments(sub.add_parser(name, help=command.HELP, description=command.DESCRIPTION))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from app.cli.common import configure_logging  # on use, like the subcommands (see subcommands())

    configure_logging()
    return subcommands()[args.command].run(args)


def _drop_script_directory() -> None:
    """``spark-submit app/cli/main.py analytics ...`` (docs/analytics.md) runs this file as a script, which
    puts ``app/cli`` first on ``sys.path``: there ``analytics.py`` would shadow the ``analytics`` package."""
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        del sys.path[0]


if __name__ == "__main__":
    _drop_script_directory()
    sys.exit(main())
