"""A cluster's consumer-lag collector in ``serve``: a round (:class:`~collectors.consumers.collector.
ConsumerLagCollector`) every ``kafka.interval_s`` on a thread of its own, the latest kept for the routes,
``/metrics`` and the incident lane's rule 19.

The client bootstraps from the brokers' endpoints in the current ZooKeeper snapshot (or the settings'
``bootstrap_servers``) and is opened lazily: a cluster whose brokers refuse connections, or a round that
fails, is an error kept in :attr:`ConsumerLag.error` (``/metrics``, the routes' 503) and tried again next
round with a client opened anew, never fatal. The collector (its log-end history, each group's track)
lives as long as the service, across clients.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from collectors.consumers.client import GroupOffsetsReader, open_reader
from collectors.consumers.collector import ConsumerLagCollector, ConsumerRound
from collectors.consumers.config import KafkaSettings
from collectors.kafka.model import BrokerRegistration

log = logging.getLogger(__name__)

FRESH_ROUNDS = 3
"""A round is current while younger than this many intervals (at least :data:`FRESH_MIN_S`): older, the
incident lane does not evaluate rule 19 (its alerts neither open nor resolve on stale verdicts)."""
FRESH_MIN_S = 30.0

OpenReader = Callable[[KafkaSettings, Mapping[int, BrokerRegistration]], GroupOffsetsReader]


@dataclass(frozen=True, slots=True)
class ConsumerLagStats:
    """Counters since the service started (``/metrics``)."""

    rounds: int = 0
    errors: int = 0
    last_round_at: float | None = None
    last_round_s: float | None = None
    """Wall time of the last successful round."""


class ConsumerLag:
    """The latest :class:`ConsumerRound` of one cluster; :meth:`start`, :meth:`stop`."""

    def __init__(
        self,
        settings: KafkaSettings,
        brokers: Callable[[], Mapping[int, BrokerRegistration]],
        *,
        on_round: Callable[[], None] | None = None,
        open_reader: OpenReader = open_reader,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._brokers = brokers
        self._on_round = on_round
        self._open = open_reader
        self._clock = clock
        self._collector: ConsumerLagCollector | None = None
        self._reader: GroupOffsetsReader | None = None
        self._lock = threading.Lock()
        self._latest: ConsumerRound | None = None
        self._error: str | None = None
        self._stats = ConsumerLagStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._round_lock = threading.Lock()

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Run a round now and every ``interval_s`` on a thread of its own (returns at once)."""
        if self._thread is not None:
            raise RuntimeError("the consumer-lag collector is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="consumer-lag", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.settings.timeout_s + 5)
        with self._round_lock:
            self._close_reader()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.round_now()
            if self._stop.wait(max(0.0, self.settings.interval_s - (time.monotonic() - started))):
                return

    # --- one round -----------------------------------------------------------------------------------

    def round_now(self) -> ConsumerRound | None:
        """One round (the thread's; tests may call it): the new round, or None when it failed (the error
        is kept, the client opened again next time)."""
        with self._round_lock:
            started = time.monotonic()
            try:
                if self._reader is None:
                    self._reader = self._open(self.settings, self._brokers())
                if self._collector is None:
                    self._collector = ConsumerLagCollector(self._reader, self.settings, clock=self._clock)
                else:
                    self._collector.reader = self._reader
                result = self._collector.round()
            except Exception as exc:  # no broker answers, a bad endpoint: reported, tried again
                self._failed(exc)
                return None
            took = time.monotonic() - started
            with self._lock:
                self._latest, self._error = result, None
                s = self._stats
                self._stats = ConsumerLagStats(s.rounds + 1, s.errors, result.at, took)
        if self._on_round is not None:
            self._on_round()
        return result

    def _failed(self, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        with self._lock:
            first = self._error != error
            self._error = error
            s = self._stats
            self._stats = ConsumerLagStats(s.rounds, s.errors + 1, s.last_round_at, s.last_round_s)
        if first:
            log.warning(
                "consumer lag: the round failed (tried again every %g s): %s", self.settings.interval_s, error
            )
        self._close_reader()

    def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception:  # closing a client whose brokers are gone
                log.debug("consumer lag: closing the client failed", exc_info=True)

    # --- reading -------------------------------------------------------------------------------------

    @property
    def latest(self) -> ConsumerRound | None:
        """The latest successful round (None before the first)."""
        with self._lock:
            return self._latest

    @property
    def error(self) -> str | None:
        """Why the last round failed; None when it succeeded."""
        with self._lock:
            return self._error

    def stats(self) -> ConsumerLagStats:
        with self._lock:
            return self._stats

    def current(self, now: float | None = None) -> ConsumerRound | None:
        """The latest round while it is current (:data:`FRESH_ROUNDS`), else None."""
        latest = self.latest
        if latest is None:
            return None
        now = self._clock() if now is None else now
        fresh_s = max(FRESH_MIN_S, FRESH_ROUNDS * self.settings.interval_s)
        return latest if now - latest.at <= fresh_s else None
