"""The reference cluster's single event loop: controller events, broker requests, ticks and faults.

Kafka's controller processes one event at a time; the simulation goes further and runs every broker on one
thread too, so that no state is ever shared between threads. ZooKeeper watch callbacks and the HTTP
threads only post work here.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class LoopStoppedError(RuntimeError):
    """Work was handed to a loop that is not running."""


class EventLoop:
    def __init__(self, name: str, on_error: Callable[[BaseException], None]) -> None:
        self._name = name
        self._on_error = on_error
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._running = False
        self._thread: threading.Thread | None = None
        self._pending_calls: set[Future[Any]] = set()

    def start(self) -> None:
        with self._cv:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._running = False
            self._heap.clear()
            pending, self._pending_calls = self._pending_calls, set()
            self._cv.notify_all()
        for future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(LoopStoppedError(f"{self._name} stopped"))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._running

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def post(self, fn: Callable[[], None], delay_ms: float = 0.0) -> bool:
        """Queue ``fn``; False (and nothing queued) when the loop is not running."""
        with self._cv:
            if not self._running:
                return False
            heapq.heappush(self._heap, (time.monotonic() + delay_ms / 1000.0, next(self._seq), fn))
            self._cv.notify()
            return True

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run ``fn`` on the loop and return its result (or raise its exception) to the caller."""
        if self.in_loop():
            return fn()
        if not self._running:
            raise LoopStoppedError(f"{self._name} is not running")
        future: Future[T] = Future()

        def run() -> None:
            with self._cv:
                self._pending_calls.discard(future)
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        with self._cv:
            self._pending_calls.add(future)
        if not self.post(run):
            with self._cv:
                self._pending_calls.discard(future)
            raise LoopStoppedError(f"{self._name} is not running")
        return future.result(timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._running and (not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cv.wait(wait)
                if not self._running:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception as exc:
                log.exception("error in %s", self._name)
                self._on_error(exc)
