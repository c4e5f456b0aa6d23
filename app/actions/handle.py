"""An executor's hold on the action it runs: its record, updated only by compare-and-set, and the gate that
says whether it may still act.

:class:`ActionHandle` keeps the executor's copy of the record. Every update is a compare-and-set
(:meth:`~app.actions.state.ActionLog.update`); when another writer was first it reads the stored record:

* a cancel (``cancel_requested``) is taken in, and the update applied on top of it (nothing is lost);
  :meth:`ActionHandle.update` with ``unless_cancelled`` raises :class:`CancelRequestedError` instead, so
  that an executor never records "about to write batch *n*" after a cancel;
* another owner, or a record that ended (or vanished), means another instance runs the action now:
  :class:`SupersededError`, and the executor stops without another write.

:class:`Gate` answers, before every write to ZooKeeper and at every poll, whether this instance still leads
(:class:`StoppedError` when it does not, or when the service stops): a stopped executor leaves the action
unfinished in the log, with its throttles, for the instance that adopts it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.actions.state import TERMINAL, ActionLog, ActionRecord, ActionState, StaleRecordError
from app.leadership import StandingSource

MAX_CONFLICTS = 20
"""Compare-and-set retries before giving up (only a cancel and the owner write a running action)."""


class SupersededError(Exception):
    """Another instance owns the action now, or it ended elsewhere: stop without writing anything."""


class CancelRequestedError(Exception):
    """A cancel was requested: the update asked for (``unless_cancelled``) was not made."""


class StoppedError(Exception):
    """This instance no longer leads, or the service stops: leave the action for whoever adopts it."""


class Gate:
    """Whether executors may act: the service runs (``stop`` not set) and this instance leads. A
    ``last-leader`` (its session to ZooKeeper is down) pauses: it cannot write the cluster anyway, and
    another instance may be taking over. Leadership is checked at most every ``check_s``."""

    def __init__(self, leadership: StandingSource | None = None, check_s: float = 1.0) -> None:
        self.leadership = leadership
        self.stop = threading.Event()
        self.check_s = check_s
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._standing = "leader"

    def standing(self) -> str:
        if self.leadership is None:
            return "leader"
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at >= self.check_s:
                self._standing = self.leadership.standing()
                self._checked_at = now
            return self._standing

    def check(self) -> None:
        """:class:`StoppedError` unless this instance may write now (waits out a ``last-leader`` spell)."""
        while True:
            if self.stop.is_set():
                raise StoppedError("the service is stopping")
            standing = self.standing()
            if standing == "leader":
                return
            if standing == "follower":
                raise StoppedError("another instance of the service leads the actions now")
            self.stop.wait(self.check_s)

    def sleep(self, seconds: float) -> None:
        """Wait, waking early (:class:`StoppedError`) when the service stops."""
        if self.stop.wait(seconds):
            raise StoppedError("the service is stopping")


class ActionHandle:
    def __init__(self, log: ActionLog, record: ActionRecord, owner: str) -> None:
        self._log = log
        self._record = record
        self.owner = owner

    @property
    def record(self) -> ActionRecord:
        return self._record

    @property
    def id(self) -> str:
        return self._record.id

    def refresh(self) -> ActionRecord:
        """Read the stored record (a cancel, a new owner); :class:`SupersededError` when it is not ours."""
        current = self._log.get(self._record.id)
        self._record = self._ours(current)
        return self._record

    @property
    def cancel_requested(self) -> bool:
        return self.refresh().cancel_requested

    def update(self, *, unless_cancelled: bool = False, **changes: Any) -> ActionRecord:
        """Set ``changes`` (``progress`` is merged into the current progress)."""
        return self._apply(lambda r: replace(r, **self._merged(r, changes)), unless_cancelled)

    def move(self, state: ActionState, **changes: Any) -> ActionRecord:
        """Transition (checked by :meth:`ActionRecord.moved_to`) with ``changes``."""
        if state is self._record.state:
            return self.update(**changes)
        return self._apply(lambda r: r.moved_to(state, **self._merged(r, changes)), False)

    def _merged(self, record: ActionRecord, changes: dict[str, Any]) -> dict[str, Any]:
        if "progress" in changes:
            return {**changes, "progress": {**record.progress, **changes["progress"]}}
        return changes

    def _apply(self, change: Callable[[ActionRecord], ActionRecord], unless_cancelled: bool) -> ActionRecord:
        for _ in range(MAX_CONFLICTS):
            if unless_cancelled and self._record.cancel_requested:
                raise CancelRequestedError()
            try:
                self._record = self._log.update(change(self._record))
                return self._record
            except StaleRecordError as exc:
                self._record = self._ours(exc.current)
        raise RuntimeError(f"action {self.id}: {MAX_CONFLICTS} conflicting updates in a row")

    def _ours(self, current: ActionRecord | None) -> ActionRecord:
        if current is None:
            raise SupersededError(f"action {self._record.id} is gone from the log")
        if current.owner != self.owner:
            raise SupersededError(f"action {current.id} is run by {current.owner} now")
        if current.state in TERMINAL:
            raise SupersededError(f"action {current.id} ended ({current.state}) elsewhere")
        return current


def claim(log: ActionLog, record: ActionRecord, owner: str) -> ActionHandle | None:
    """Take the action over (compare-and-set of its owner); None if it ended meanwhile."""
    current: ActionRecord | None = record
    for _ in range(MAX_CONFLICTS):
        if current is None or current.state in TERMINAL:
            return None
        try:
            return ActionHandle(log, log.update(replace(current, owner=owner)), owner)
        except StaleRecordError as exc:
            current = exc.current
    return None
