"""The rolling-restart conductor's journal: one JSON file, written atomically (a temporary file in the same
directory, fsynced, renamed over the old one, the directory fsynced), before and after every step.

A conductor that crashed, was SIGKILLed or paused reads it back (``--resume``) and continues where it was:
the steps it records as done are not done again, and a restart it records as started but not confirmed is
judged by the broker's registration (its czxid, the broker epoch, against the one recorded before the
restart), never by running the restart command a second time on a broker that already restarted.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
"""The journal's format version; another version is refused rather than misread."""
FILE_NAME = "rolling-restart.json"

STEPS = ("wait_safe", "demote", "silence", "restart", "rejoin", "promote", "unsilence")
"""A broker's steps, in order."""

RUNNING = "running"
PAUSED = "paused"
STOPPED = "stopped"
DONE = "done"
CANCELLED = "cancelled"
"""The service's runs only: cancelled through the API (a paused run that is not resumed)."""
STATES = (RUNNING, PAUSED, STOPPED, DONE, CANCELLED)


class JournalError(ValueError):
    """The journal cannot be read (corrupt, another format, another cluster): bad input for the command."""


@dataclass(slots=True)
class Step:
    """One step of one broker: when it started and ended (epoch seconds; None: not yet) and what it
    recorded (the action id of a demotion, the broker epoch before a restart, ...)."""

    started_at: float | None = None
    ended_at: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def started(self) -> bool:
        return self.started_at is not None

    @property
    def done(self) -> bool:
        return self.ended_at is not None


@dataclass(slots=True)
class BrokerProgress:
    broker: int
    steps: dict[str, Step] = field(default_factory=dict)
    window_ends_at: float | None = None
    """When the broker's maintenance window ends (its silence's end, the rejoin deadline): set when the
    silence is created, or when the restart starts without one."""
    done: bool = False

    def step(self, name: str) -> Step:
        return self.steps.setdefault(name, Step())


@dataclass(slots=True)
class Options:
    demote: bool
    silence: bool
    restart_command: str | None
    """The command template (None: external mode, something else restarts the brokers)."""
    wait_rejoined_s: float
    max_unsafe_wait_s: float


@dataclass(slots=True)
class RunRecord:
    """A whole run: what it was asked, the order it follows and where each broker is."""

    zookeeper: str
    order: list[int]
    """The brokers to restart, in the order they are restarted (the controller last)."""
    known_brokers: list[int]
    """The brokers of the cluster when the run began (registered or holding replicas): one of them down,
    other than the broker being restarted, stops the conductor."""
    options: Options
    started_at: float
    state: str = RUNNING
    ended_at: float | None = None
    brokers: dict[int, BrokerProgress] = field(default_factory=dict)
    stopped: dict[str, Any] | None = None
    """Where and why the run stopped or paused: ``{"broker", "step", "reason"}``."""
    format: int = FORMAT

    def progress(self, broker: int) -> BrokerProgress:
        return self.brokers.setdefault(broker, BrokerProgress(broker))

    @property
    def remaining(self) -> list[int]:
        return [b for b in self.order if not self.progress(b).done]

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["brokers"] = {str(b): p for b, p in body["brokers"].items()}
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunRecord:
        if body.get("format") != FORMAT:
            raise JournalError(f"journal format {body.get('format')!r} is not {FORMAT}")
        try:
            brokers = {
                int(b): BrokerProgress(
                    broker=int(p["broker"]),
                    steps={name: Step(**step) for name, step in p["steps"].items()},
                    window_ends_at=p.get("window_ends_at"),
                    done=bool(p.get("done", False)),
                )
                for b, p in body["brokers"].items()
            }
            return cls(
                zookeeper=str(body["zookeeper"]),
                order=[int(b) for b in body["order"]],
                known_brokers=[int(b) for b in body["known_brokers"]],
                options=Options(**body["options"]),
                started_at=float(body["started_at"]),
                state=str(body["state"]),
                ended_at=body.get("ended_at"),
                brokers=brokers,
                stopped=body.get("stopped"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"the journal is not a rolling restart's: {exc!r}") from exc


class Journal:
    """The journal file in ``directory`` (created on the first save)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / FILE_NAME

    def load(self) -> RunRecord | None:
        """The recorded run, or None when there is none; raises :class:`JournalError` when unreadable."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise JournalError(f"cannot read {self.path}: {exc}") from exc
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JournalError(f"{self.path} is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise JournalError(f"{self.path} is not a rolling restart's journal")
        return RunRecord.from_json(body)

    def save(self, run: RunRecord) -> None:
        """Write ``run`` atomically: a reader (or a resumed run) sees the old journal or the new one."""
        self.directory.mkdir(parents=True, exist_ok=True)
        data = json.dumps(run.to_json(), indent=2, sort_keys=True).encode()
        fd, temporary = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
