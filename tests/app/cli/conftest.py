"""``run_cli``: start ``kafka-health ARGS`` in a child process (``tests.support.cli.Cli``); at teardown, kill
by pid whatever a failed test left running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cli import Cli, CliFactory


@pytest.fixture
def run_cli() -> Iterator[CliFactory]:
    started: list[Cli] = []

    def run(*args: str) -> Cli:
        cli = Cli(*args)
        started.append(cli)
        return cli

    yield run
    for cli in started:
        cli.kill_everything()
