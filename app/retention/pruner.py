"""The retention pruner: deletes what :mod:`app.retention.plan` says is due, in small transactions, in the
background of ``kafka-health serve`` (its leader only: the replicas share one database).

Every delete takes at most ``batch_rows`` rows (load windows: whole windows up to that many rows) in a
short transaction of its own, with ``pause_s`` between two, so that the Spark job's and the service's
writers wait for one short transaction at most (SQLite has one writer at a time; PostgreSQL's row locks
never meet the pruner's, whose rows nobody writes any more). Each age predicate is a range scan of an
index (migration 5 adds the two that were missing). Load windows are rolled up before they go: the
transaction that deletes a chunk of windows folds them into their hour's ``load_rollups`` and
``cluster_rollups`` rows, so a pass stopped anywhere leaves every window either raw or in its rollup, once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analytics.store import BrokerRollup, Database, StoreError
from analytics.store.tables import (
    ROLLUP_S,
    alert_events_table,
    alerts_table,
    cluster_rollups_table,
    cluster_windows_table,
    load_rollups_table,
    load_windows_table,
    processed_batches_table,
)
from app.actions.store import actions_table, audit_log_table
from app.leadership import Leadership
from app.retention.config import TABLES, RetentionSettings
from app.retention.plan import (
    KEEP_LAST_BATCHES,
    PRUNABLE_ACTION_STATES,
    PRUNABLE_DELIVERY_STATES,
    BrokerWindowLoad,
    ClusterRollup,
    ClusterWindowLoad,
    cutoffs,
    hour_of,
    merge_brokers,
    merge_cluster,
    rollup_brokers,
    rollup_cluster,
    windows_per_transaction,
)
from app.webhooks.tables import webhook_deliveries_table

__all__ = ["PassReport", "RetentionPruner", "RetentionStats"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassReport:
    """One pass: when, how long, rows deleted per table, load windows rolled up, and whether it finished."""

    started_at: float
    duration_s: float
    pruned: dict[str, int]
    rolled_up_windows: int
    transactions: int
    finished: bool
    """False: stopped (shutdown, or the leadership was lost) before every table was done."""


@dataclass(frozen=True, slots=True)
class RetentionStats:
    """What ``/metrics`` shows: totals since start and the last pass."""

    pruned_total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    rolled_up_windows_total: int = 0
    passes: int = 0
    errors: int = 0
    last_pass_at: float | None = None
    last_pass_duration_s: float | None = None


class _StopPassError(Exception):
    """The pass was asked to stop between two transactions."""


class RetentionPruner:
    """Prunes ``database`` by ``settings``: :meth:`prune` runs one pass now; :meth:`start` runs a pass
    every ``interval_s`` in a thread while ``leadership`` (None: always) says this instance leads, until
    :meth:`stop`. Thread-safe stats (:meth:`stats`)."""

    def __init__(
        self,
        database: Database,
        settings: RetentionSettings | None = None,
        leadership: Leadership | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database = database
        self.settings = settings or RetentionSettings()
        self.leadership = leadership
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()
        self._stats = RetentionStats()
        self._transactions = 0

    # -- the background thread

    def start(self) -> None:
        if self._thread is not None or not self.settings.enabled:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="retention-pruner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (a pass in progress stops after its current transaction)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        delay = self.settings.interval_s / 10
        while not self._stop.wait(delay):
            delay = self.settings.interval_s
            if not self._leading():
                continue
            try:
                self.prune()
            except StoreError as exc:
                with self._mutex:
                    self._stats = replace(self._stats, errors=self._stats.errors + 1)
                log.warning("retention: pass failed (next in %.0f s): %s", delay, exc)

    def _leading(self) -> bool:
        return self.leadership is None or self.leadership.is_leader()

    def stats(self) -> RetentionStats:
        with self._mutex:
            return self._stats

    # -- one pass

    def prune(self, now: float | None = None) -> PassReport:
        """One pass at ``now`` (default: the clock): every table with a period, in :data:`TABLES` order.
        Raises :class:`StoreError` when the database fails (what was committed stays)."""
        started = self._clock()
        at = started if now is None else now
        due = cutoffs(self.settings.periods(), at)
        pruned = dict.fromkeys(TABLES, 0)
        rolled = [0]
        self._transactions = 0
        finished = True
        with self.database.errors("retention pass"):
            try:
                for table in TABLES:
                    cutoff = due[table]
                    if cutoff is None:
                        continue
                    if not self._leading():
                        raise _StopPassError
                    pruned[table] += self._prune_table(table, cutoff, pruned, rolled)
            except _StopPassError:
                finished = False
        duration = self._clock() - started
        report = PassReport(started, duration, pruned, rolled[0], self._transactions, finished)
        with self._mutex:
            s = self._stats
            self._stats = replace(
                s,
                pruned_total={t: s.pruned_total.get(t, 0) + pruned[t] for t in TABLES},
                rolled_up_windows_total=s.rolled_up_windows_total + rolled[0],
                passes=s.passes + 1,
                last_pass_at=started,
                last_pass_duration_s=duration,
            )
        counts = ", ".join(f"{t}={n}" for t, n in pruned.items() if n)
        log.info(
            "retention: pass %s in %.2f s: %d rows pruned (%s), %d load windows rolled up, %d transactions",
            "done" if finished else "stopped",
            duration,
            sum(pruned.values()),
            counts or "nothing due",
            rolled[0],
            self._transactions,
        )
        return report

    def _prune_table(self, table: str, cutoff: float, pruned: dict[str, int], rolled: list[int]) -> int:
        if table == "load_windows":
            return self._prune_load_windows(cutoff, rolled)
        if table == "load_rollups":
            return self._prune_rollups(cutoff, pruned)
        if table == "cluster_windows":
            return self._prune_cluster_windows(cutoff)
        if table == "processed_batches":
            return self._prune_batches(cutoff)
        if table == "webhook_deliveries":
            d = webhook_deliveries_table.c
            return self._delete_chunks(
                webhook_deliveries_table,
                (d.id,),
                sa.and_(d.event_at < cutoff, d.state.in_(PRUNABLE_DELIVERY_STATES)),
            )
        if table == "alert_events":
            e = alert_events_table.c
            return self._delete_chunks(
                alert_events_table, (e.fingerprint, e.sequence), sa.and_(e.at < cutoff, ~_pending_delivery(e))
            )
        if table == "alerts":
            a = alerts_table.c
            d = webhook_deliveries_table.c
            pending = sa.exists().where(d.fingerprint == a.fingerprint, d.state == "pending")
            return self._delete_chunks(
                alerts_table,
                (a.fingerprint,),
                sa.and_(a.state == "resolved", a.resolved_at < cutoff, ~pending),
            )
        if table == "actions":
            x = actions_table.c
            return self._delete_chunks(
                actions_table,
                (x.id,),
                # requested_at bounds finished_at from below: the index range scan on it does the work
                sa.and_(x.requested_at < cutoff, x.finished_at < cutoff, x.state.in_(PRUNABLE_ACTION_STATES)),
            )
        if table == "audit_log":
            g = audit_log_table.c
            return self._delete_chunks(audit_log_table, (g.sequence,), g.at < cutoff)
        raise ValueError(f"no such table with a retention period: {table}")

    # -- transactions

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """One short write transaction, after the pause that lets other writers in; :class:`_StopPassError`
        when the pruner is stopping."""
        if self._stop.is_set():
            raise _StopPassError
        if self._transactions and self.settings.pause_s:
            time.sleep(self.settings.pause_s)
        self._transactions += 1
        with self.database.write() as conn:
            yield conn

    def _delete_chunks(self, table: sa.Table, key: tuple[Any, ...], where: sa.ColumnElement[bool]) -> int:
        """Delete the rows matching ``where``, at most ``batch_rows`` per transaction; returns how many."""
        n = self.settings.batch_rows
        chosen = sa.select(*key).where(where).limit(n)
        target = key[0].in_(chosen) if len(key) == 1 else sa.tuple_(*key).in_(chosen)
        total = 0
        while True:
            with self._transaction() as conn:
                deleted = int(conn.execute(sa.delete(table).where(target)).rowcount)
            total += deleted
            if deleted < n:
                return total

    def _prune_rollups(self, cutoff: float, pruned: dict[str, int]) -> int:
        """Both rollup tables, cluster by cluster (their keys start with the cluster: a range scan each)."""
        r, c = load_rollups_table.c, cluster_rollups_table.c
        with self.database.read() as conn:
            clusters = list(conn.execute(sa.select(c.cluster).distinct()).scalars())
        total = 0
        for name in sorted(clusters):
            pruned["load_rollups"] += self._delete_chunks(
                cluster_rollups_table,
                (c.cluster, c.hour_start),
                sa.and_(c.cluster == name, c.hour_start < cutoff),
            )
            total += self._delete_chunks(
                load_rollups_table,
                (r.cluster, r.hour_start, r.broker),
                sa.and_(r.cluster == name, r.hour_start < cutoff),
            )
        return total

    def _prune_batches(self, cutoff: float) -> int:
        b = processed_batches_table.c
        with self.database.read() as conn:
            newest = dict(
                conn.execute(sa.select(b.query_name, sa.func.max(b.batch_id)).group_by(b.query_name)).all()
            )
        total = 0
        for query_name, last in sorted(newest.items()):
            total += self._delete_chunks(
                processed_batches_table,
                (b.query_name, b.batch_id),
                sa.and_(
                    b.committed_at < cutoff,
                    b.query_name == query_name,
                    b.batch_id <= int(last) - KEEP_LAST_BATCHES,
                ),
            )
        return total

    def _kept_window(self, conn: Connection, cluster: str, *, load: bool) -> float | None:
        """The start of the cluster's window a pass always keeps: its latest load window (the load lane's
        heartbeat, ``/load``'s latest), or its latest window and latest evaluated one."""
        c = cluster_windows_table.c
        if load:
            return conn.execute(
                sa.select(sa.func.max(load_windows_table.c.window_start)).where(
                    load_windows_table.c.cluster == cluster
                )
            ).scalar()
        latest = conn.execute(sa.select(sa.func.max(c.window_start)).where(c.cluster == cluster)).scalar()
        evaluated = conn.execute(
            sa.select(sa.func.max(c.window_start)).where(c.cluster == cluster, c.evaluated)
        ).scalar()
        return min((v for v in (latest, evaluated) if v is not None), default=None)

    def _prune_cluster_windows(self, cutoff: float) -> int:
        c, w = cluster_windows_table.c, load_windows_table.c
        with self.database.read() as conn:
            clusters = list(conn.execute(sa.select(c.cluster).distinct()).scalars())
            keep = {name: self._kept_window(conn, name, load=False) for name in clusters}
        total = 0
        for name in sorted(clusters):
            below = cutoff if keep[name] is None else min(cutoff, float(keep[name]))  # type: ignore[arg-type]
            has_rows = sa.exists().where(w.cluster == c.cluster, w.window_start == c.window_start)
            total += self._delete_chunks(
                cluster_windows_table,
                (c.cluster, c.window_start),
                sa.and_(c.cluster == name, c.window_start < below, ~has_rows),
            )
        return total

    def _prune_load_windows(self, cutoff: float, rolled: list[int]) -> int:
        c, w = cluster_windows_table.c, load_windows_table.c
        with self.database.read() as conn:
            # from the windows' table (a row per window, not per broker); the load rows' key starts with it
            clusters = list(
                conn.execute(sa.select(c.cluster).distinct().where(c.window_start < cutoff)).scalars()
            )
            due: dict[str, float] = {}
            for name in clusters:
                kept = self._kept_window(conn, name, load=True)
                below = cutoff if kept is None else min(cutoff, float(kept))
                oldest = conn.execute(
                    sa.select(sa.func.min(w.window_start)).where(w.cluster == name)
                ).scalar()
                if oldest is not None and float(oldest) < below:
                    due[name] = below
        total = 0
        for name, below in sorted(due.items()):
            more = True
            while more:
                with self._transaction() as conn:
                    deleted, windows = self._roll_up_chunk(conn, name, below)
                    more = windows > 0 and self._any_before(conn, name, below)
                total += deleted
                rolled[0] += windows
        return total

    @staticmethod
    def _any_before(conn: Connection, cluster: str, below: float) -> bool:
        w = load_windows_table.c
        query = sa.select(sa.literal(1)).where(w.cluster == cluster, w.window_start < below).limit(1)
        return conn.execute(query).first() is not None

    def _roll_up_chunk(self, conn: Connection, cluster: str, below: float) -> tuple[int, int]:
        """In one transaction: the oldest load windows of ``cluster`` before ``below`` (whole windows of
        one hour, up to ``batch_rows`` rows) folded into their hour's rollups, then deleted (and their
        ``cluster_windows`` row's load columns cleared). Returns (rows deleted, windows rolled up)."""
        w, c = load_windows_table.c, cluster_windows_table.c
        first = conn.execute(
            sa.select(w.window_start)
            .where(w.cluster == cluster, w.window_start < below)
            .order_by(w.window_start)
            .limit(1)
        ).scalar()
        if first is None:
            return 0, 0
        hour = hour_of(float(first))
        brokers = conn.execute(
            sa.select(sa.func.count()).where(w.cluster == cluster, w.window_start == first)
        ).scalar_one()
        k = windows_per_transaction(self.settings.batch_rows, int(brokers))
        starts = list(
            conn.execute(
                sa.select(w.window_start)
                .distinct()
                .where(
                    w.cluster == cluster,
                    w.window_start >= first,
                    w.window_start < min(below, hour + ROLLUP_S),
                )
                .order_by(w.window_start)
                .limit(k)
            ).scalars()
        )
        last = float(starts[-1])
        in_chunk = sa.and_(w.cluster == cluster, w.window_start >= first, w.window_start <= last)
        broker_rows = [
            BrokerWindowLoad(
                int(r.broker), float(r.weighted_load), float(r.normalized_load), float(r.deviation_rate)
            )
            for r in conn.execute(
                sa.select(w.broker, w.weighted_load, w.normalized_load, w.deviation_rate).where(in_chunk)
            )
        ]
        window_rows = [
            ClusterWindowLoad(
                int(r.brokers or 0),
                float(r.stddev),
                float(r.stddev_threshold),
                float(r.rated_deviation),
                bool(r.imbalanced),
            )
            for r in conn.execute(
                sa.select(c.brokers, c.stddev, c.stddev_threshold, c.rated_deviation, c.imbalanced).where(
                    c.cluster == cluster,
                    c.window_start >= first,
                    c.window_start <= last,
                    c.stddev.is_not(None),
                    c.stddev_threshold.is_not(None),
                    c.rated_deviation.is_not(None),
                )
            )
        ]
        self._fold(conn, cluster, hour, rollup_brokers(broker_rows), rollup_cluster(window_rows))
        deleted = int(conn.execute(sa.delete(load_windows_table).where(in_chunk)).rowcount)
        conn.execute(
            sa.update(cluster_windows_table)
            .where(c.cluster == cluster, c.window_start >= first, c.window_start <= last)
            .values(brokers=None, stddev=None, stddev_threshold=None, rated_deviation=None, imbalanced=None)
        )
        return deleted, len(starts)

    def _fold(
        self,
        conn: Connection,
        cluster: str,
        hour: float,
        brokers: dict[int, BrokerRollup],
        window: ClusterRollup | None,
    ) -> None:
        """Merge a chunk's rollups into the hour's rows (read, merge, upsert: the pruner is their writer)."""
        r, c = load_rollups_table.c, cluster_rollups_table.c
        if brokers:
            old = {
                int(row.broker): BrokerRollup.from_row(row)
                for row in conn.execute(
                    sa.select(load_rollups_table).where(r.cluster == cluster, r.hour_start == hour)
                )
            }
            rows = [
                {"cluster": cluster, "hour_start": hour, **_fields(merge_brokers(old.get(b), new))}
                for b, new in brokers.items()
            ]
            stmt = self.database.insert(load_rollups_table)
            keys = ("cluster", "hour_start", "broker")
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=list(keys),
                    set_={
                        col.name: stmt.excluded[col.name]
                        for col in load_rollups_table.columns
                        if col.name not in keys
                    },
                ),
                rows,
            )
        if window is not None:
            row = conn.execute(
                sa.select(cluster_rollups_table).where(c.cluster == cluster, c.hour_start == hour)
            ).first()
            previous = None
            if row is not None:
                previous = ClusterRollup(
                    windows=int(row.windows),
                    brokers_max=int(row.brokers_max),
                    stddev_avg=float(row.stddev_avg),
                    stddev_max=float(row.stddev_max),
                    stddev_threshold_avg=float(row.stddev_threshold_avg),
                    rated_deviation_avg=float(row.rated_deviation_avg),
                    imbalanced_windows=int(row.imbalanced_windows),
                )
            merged = _fields(merge_cluster(previous, window))
            stmt = self.database.insert(cluster_rollups_table).values(
                cluster=cluster, hour_start=hour, **merged
            )
            conn.execute(stmt.on_conflict_do_update(index_elements=["cluster", "hour_start"], set_=merged))


def _fields(value: BrokerRollup | ClusterRollup) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}


def _pending_delivery(e: Any) -> sa.Exists:
    d = webhook_deliveries_table.c
    return sa.exists().where(d.fingerprint == e.fingerprint, d.sequence == e.sequence, d.state == "pending")
