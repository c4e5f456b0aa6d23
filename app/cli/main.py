"""``kafka-health``: one command line, a subcommand per process.

Each subcommand is a module of this package that names itself (``NAME``, ``HELP``, ``DESCRIPTION``),
defines its flags (``add_arguments``) and runs (``run``); this module builds the parser from them and
dispatches. What they share (exit codes, stop signals, settings errors, logging) is in ``common``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
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
    """The subcommands by name, in the order ``--help`` lists them."""
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
    from app.cli.common import configure_logging

    configure_logging()
    return subcommands()[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
