"""What every ``kafka-health`` subcommand shares: exit codes, stop signals, the settings-error report,
logging and the argparse value types.

Each subcommand's docstring (and ``--help``) says what the codes mean for it; the values are defined here
once so that a script can rely on them across subcommands.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import TextIO, TypeVar

from pydantic import ValidationError

from app.validation import format_validation_error

T = TypeVar("T")


class ExitCode(IntEnum):
    """A subcommand's exit status."""

    OK = 0
    """Done (``describe`` read the cluster, ``collect --once`` wrote its round) or stopped by a signal."""
    FAILED = 1
    """The work could not be done: the cluster or a sink unreachable, the job or the server failed."""
    BAD_INPUT = 2
    """Flags, ``KAFKA_HEALTH_*`` variables or the config file rejected before anything started (argparse
    exits 2 for unusable flags too)."""
    UNHEALTHY = 3
    """``describe --fail-on-unhealthy`` read a cluster that is not healthy; ``safe-to-stop``: stopping the
    broker is not safe."""


# --- stop signals --------------------------------------------------------------------------------------

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def on_stop_signals(on_stop: Callable[[], object]) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM call ``on_stop`` (and do nothing else, so that the command
    shuts down its own way and exits 0); the previous handlers come back afterwards.

    Python installs signal handlers only in the main thread; elsewhere (a command run from a test's thread)
    this installs nothing and the caller stops the command its own way.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda _signum, _frame: on_stop()) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM within the block: what a long-running subcommand waits on."""
    stop = threading.Event()
    with on_stop_signals(stop.set):
        yield stop


# --- settings errors -----------------------------------------------------------------------------------


def settings_or_error(build: Callable[[], T], err: TextIO) -> T | None:
    """``build()``; on bad input (a ValidationError or ValueError) writes ``error: ...`` to ``err`` and
    returns None, so that every command reports bad settings the same way (and exits 2)."""
    try:
        return build()
    except ValidationError as exc:
        err.write(f"error: {format_validation_error(exc)}\n")
    except ValueError as exc:
        err.write(f"error: {exc}\n")
    return None


# --- logging -------------------------------------------------------------------------------------------


def configure_logging() -> None:
    """Warnings and errors to stderr; kazoo's connection retries are expected noise, so only its errors."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)


# --- argparse value types ------------------------------------------------------------------------------


def tcp_port(text: str) -> int:
    """A TCP port, 1-65535 (0, "any free port", is what leaving the flag out means)."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """``500ms``, ``2s``, ``1.5m``, ``1h`` or plain seconds, to seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 500ms, 2s, 1m)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def positive_duration(text: str) -> float:
    """A :func:`duration` above 0 (a timeout or an interval: 0, negative or ``nan`` is bad input)."""
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration above 0 (e.g. 500ms, 2s, 1m)")
    return seconds
