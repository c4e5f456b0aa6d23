"""Waiting on a live snapshot until broker N is safe to stop: the loop of ``kafka-health safe-to-stop
--wait``, which the rolling-restart conductor runs before each broker.

It re-judges the snapshot at every change (the ZooKeeper collector's watches set ``changed``), not at
every poll, and looks for a stop signal every :data:`POLL_S` between changes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol, TextIO

from collectors.kafka.model import ClusterSnapshot
from collectors.safe_to_stop import SafeToStop

POLL_S = 0.5
"""How often a waiting command looks for a stop signal between snapshot changes."""


class SnapshotSource(Protocol):
    """What :func:`wait` needs of the ZooKeeper collector: its live snapshot."""

    @property
    def snapshot(self) -> ClusterSnapshot: ...


def wait(
    collector: SnapshotSource,
    judge: Callable[[ClusterSnapshot], SafeToStop],
    changed: threading.Event,
    stop: threading.Event,
    seconds: float,
    progress: TextIO,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[SafeToStop, float]:
    """Judge every new snapshot until the answer is safe, ``seconds`` pass or ``stop`` is set; returns the
    last answer and how long it waited. Prints what it waits for whenever that changes (the reasons, which
    name the partitions still in the way), not at every snapshot. An exception ``judge`` raises ends the
    wait (the conductor's way to stop on a condition the answer does not cover)."""
    started = clock()
    deadline = started + seconds
    shown: tuple[str, ...] | None = None
    while True:
        changed.clear()  # before reading: a change that lands after the read sets it again
        answer = judge(collector.snapshot)
        if answer.safe:
            return answer, clock() - started
        if answer.reasons != shown:
            shown = answer.reasons
            left = max(0.0, deadline - clock())
            stamp = time.strftime("%H:%M:%S")
            progress.write(f"{stamp} waiting for broker {answer.broker} ({left:.0f} s left):\n")
            for reason in answer.reasons:
                progress.write(f"  - {reason}\n")
            progress.flush()
        while not changed.is_set():
            remaining = deadline - clock()
            if remaining <= 0 or stop.is_set():
                return answer, clock() - started
            changed.wait(min(remaining, POLL_S))
