"""The fan-out of the ZooKeeper collector's ``on_change``: the collector takes one callback, given when it is
built, and several parts of the service want to hear of a new snapshot (the incident lane first).

Pass the hub as the collector's ``on_change``; listeners subscribe later. A listener runs on the collector's
thread: it must be quick and must not raise (exceptions are logged and the other listeners still run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from collectors.kafka.model import ClusterSnapshot

__all__ = ["Listener", "SnapshotChanges"]

log = logging.getLogger(__name__)

Listener = Callable[[ClusterSnapshot], None]


class SnapshotChanges:
    """Calls every subscribed listener with each new snapshot (``hub(snapshot)``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: tuple[Listener, ...] = ()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add ``listener``; returns the function that removes it."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                self._listeners = tuple(fn for fn in self._listeners if fn is not listener)

        return unsubscribe

    def __call__(self, snapshot: ClusterSnapshot) -> None:
        for listener in self._listeners:
            try:
                listener(snapshot)
            except Exception:
                log.exception("a snapshot listener failed")
