"""The analytics store: load windows, per-window health facts, alert lifecycle rows and their events.

Two writers, one per lane (:data:`analytics.rules.RULE_LANES`), and each refuses the other's rules:

- the load lane, Spark's ``foreachBatch``: :meth:`Store.commit_batch` writes one micro-batch in one
  transaction, exactly once per ``(query_name, batch_id)`` (``processed_batches``), and every row it writes
  is an idempotent upsert, so a batch replayed under a new id changes nothing either;
- the incident lane, ``kafka-health serve``: :meth:`Store.commit_incidents` writes the alerts an evaluation
  changed and their events in one transaction, each alert compared-and-set against the row it read, and
  its events inserted without ``ON CONFLICT``, so a writer that lost a race writes nothing and retries.

See ``docs/store.md``.

Timestamps are epoch seconds as floats (``DOUBLE PRECISION``); JSON columns keep floats exactly (Python's
``repr`` round-trips), but NaN and infinities are refused, as are non-finite numbers in numeric columns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from analytics.model import AlertEvent, AlertState, AlertStateName, BrokerLoad, LoadWindow, Window
from analytics.rules import RULE_LANES, Lane
from analytics.store.batch import BatchRows, alert_rows, event_rows
from analytics.store.database import (
    DEFAULT_BUSY_TIMEOUT,
    TIME_TYPE,
    Database,
    check_page,
    finite,
    one_or_many,
    opt_int,
)
from analytics.store.errors import StoreConflictError, StoreError, error_detail
from analytics.store.migrations import Migration
from analytics.store.rows import (
    Acknowledgement,
    BrokerRollup,
    ClusterWindowRow,
    LoadRollup,
    read_alert_event,
    read_alert_state,
    read_broker_load,
    read_cluster_window,
)
from analytics.store.tables import (
    ANALYTICS_MIGRATIONS,
    ROLLUP_S,
    alert_events_table,
    alerts_table,
    cluster_rollups_table,
    cluster_windows_table,
    load_rollups_table,
    load_windows_table,
    processed_batches_table,
)

__all__ = ["ALL_ALERT_STATES", "Store"]

ALL_ALERT_STATES: Final[tuple[AlertStateName, ...]] = ("pending", "open", "resolved")

Version = tuple[int, float]
"""What the incident lane's compare-and-set compares: an alert row's ``(event_sequence, last_window_end)``
as it was read (every write changes ``last_window_end``, every event ``event_sequence``)."""


class Store:
    """The analytics store, on a :class:`Database`: ``Store(database)`` on a database the caller opened
    (and closes), or :meth:`Store.open` for a store with a database of its own (closed with :meth:`close`,
    or ``with``).

    Thread-safe: every call takes a pooled connection for one transaction. Reads see one consistent
    snapshot per call. Errors are :class:`StoreError`.
    """

    def __init__(self, database: Database) -> None:
        self._db = database
        self._owns_database = False

    # -- opening and closing

    @classmethod
    def open(
        cls,
        url: str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        migrations: Sequence[Migration] = ANALYTICS_MIGRATIONS,
    ) -> Store:
        """Open the store at ``url`` on a database of its own, creating or upgrading its schema.

        ``migrations``: the analytics tables' by default; a database shared with the service needs the
        full list (``app.storage.MIGRATIONS``), since a database recording a version the list does not
        reach is refused. See :meth:`Database.open` for ``url``, ``busy_timeout`` and the errors.
        """
        store = cls(Database.open(url, migrations, busy_timeout=busy_timeout))
        store._owns_database = True
        return store

    def close(self) -> None:
        """Close the database the store opened (:meth:`open`); the store cannot be used afterwards (closing
        twice is fine). A store built on a caller's database leaves it to the caller."""
        if self._owns_database:
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def database(self) -> Database:
        return self._db

    @property
    def schema_version(self) -> int:
        """The database's schema version (the last of its migrations once open)."""
        return self._db.schema_version

    @property
    def url(self) -> str:
        """The store's URL, password hidden."""
        return self._db.url

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    def __repr__(self) -> str:
        state = "closed" if self._db.closed else f"schema version {self._db.schema_version}"
        return f"Store({self._db.url!r}, {state})"

    # -- writing

    def commit_batch(
        self,
        query_name: str,
        batch_id: int,
        *,
        load_windows: Sequence[LoadWindow] = (),
        cluster_windows: Sequence[ClusterWindowRow] = (),
        alert_states: Sequence[AlertState] = (),
        events: Sequence[AlertEvent] = (),
    ) -> bool:
        """Write one micro-batch in one transaction, exactly once per ``(query_name, batch_id)``.

        Returns False, writing nothing, when the batch was committed before; True once it is committed.
        Every row is upserted (events are inserted unless their ``(fingerprint, sequence)`` exists), so the
        same rows under another batch id change nothing. It is the load lane's writer: an alert state or
        event of a rule the load lane does not own (an incident rule) is refused with a
        :class:`StoreError` naming the rule and its lane, and nothing is written. Within a batch: cluster
        window rows are written
        first, then the load windows (whose aggregates win over a row's load fields for the same window;
        a row's ``None`` load fields keep what is stored), then alert states, then events (whose alert must
        exist). A load window replaces its window's broker rows. Raises :class:`StoreError` (nothing is
        written) for non-finite numbers, values that are not JSON-serialisable, or constraint violations.
        """
        if not query_name:
            raise StoreError("commit_batch: query_name must not be empty")
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise StoreError(f"commit_batch: batch_id must be a non-negative integer, got {batch_id!r}")
        _check_lane("commit_batch", "load", alert_states)
        rows = BatchRows.build(load_windows, cluster_windows, alert_states, events)
        with self._db.errors(f"commit batch {batch_id} of query {query_name!r}"), self._db.write() as conn:
            _check_event_lanes(conn, "commit_batch", "load", alert_states, events)
            claimed = conn.execute(
                self._db.insert(processed_batches_table)
                .values(query_name=query_name, batch_id=batch_id, committed_at=time.time())
                .on_conflict_do_nothing(index_elements=["query_name", "batch_id"])
                .returning(processed_batches_table.c.batch_id)
            ).first()
            if claimed is None:  # committed before (or, on PostgreSQL, just now by a concurrent writer)
                return False
            if rows.health_windows:
                conn.execute(self._upsert_health_windows(), rows.health_windows)
            if rows.load_aggregates:
                conn.execute(self._upsert_load_aggregates(), rows.load_aggregates)
                for (cluster, start), brokers in rows.window_brokers.items():
                    conn.execute(
                        sa.delete(load_windows_table).where(
                            load_windows_table.c.cluster == cluster,
                            load_windows_table.c.window_start == start,
                            load_windows_table.c.broker.not_in(brokers),
                        )
                    )
            if rows.broker_loads:
                conn.execute(self._upsert_broker_loads(), rows.broker_loads)
            if rows.alerts:
                conn.execute(self._upsert_alerts(), rows.alerts)
            if rows.events:
                conn.execute(
                    self._db.insert(alert_events_table).on_conflict_do_nothing(
                        index_elements=["fingerprint", "sequence"]
                    ),
                    rows.events,
                )
            return True

    def commit_incidents(
        self,
        cluster: str,
        alert_states: Sequence[AlertState],
        events: Sequence[AlertEvent] = (),
        *,
        expected: Mapping[str, Version | None],
        also: Callable[[Connection], None] | None = None,
    ) -> None:
        """The incident lane's writer: the alerts one evaluation changed and their events, in one transaction.

        Each alert is compared-and-set against the row the writer read: ``expected[fingerprint]`` is its
        ``(event_sequence, last_window_end)`` then, or None when there was no row (the row is inserted
        without ``ON CONFLICT``). Events are inserted without ``ON CONFLICT`` either. If any row changed
        since it was read (another writer was first), :class:`StoreConflictError` is raised and nothing is
        written: read the states again and evaluate again. ``also(conn)`` runs last in the same transaction
        (the webhook outbox rows of the events). An acknowledgement is cleared when the alert opens anew,
        as :meth:`commit_batch` does.

        Refused with :class:`StoreError` (nothing written): a state of another cluster or of a rule the
        incident lane does not own, an event without its alert's state in ``alert_states``, a state
        without an ``expected`` entry, non-finite numbers or values that are not JSON.
        """
        _check_lane("commit_incidents", "incident", alert_states)
        own = {s.fingerprint for s in alert_states}
        for state in alert_states:
            if state.cluster != cluster:
                raise StoreError(
                    f"commit_incidents for cluster {cluster!r}: alert {state.fingerprint} is of "
                    f"cluster {state.cluster!r}"
                )
            if state.fingerprint not in expected:
                raise StoreError(f"commit_incidents: no expected version for alert {state.fingerprint}")
        for event in events:
            if event.fingerprint not in own:
                raise StoreError(
                    f"commit_incidents: event {event.fingerprint}#{event.sequence} without its alert's state"
                )
        rows, new_events = alert_rows(alert_states), event_rows(events)
        if not rows and not new_events and also is None:
            return
        a = alerts_table.c
        with self._db.errors(f"commit incident alerts of cluster {cluster!r}"), self._db.write() as conn:
            try:
                for row in rows:
                    fp = row["fingerprint"]
                    version = expected[fp]
                    if version is None:
                        conn.execute(sa.insert(alerts_table).values(**row))
                        continue
                    reopened = a.opened_at.is_distinct_from(sa.literal(row["opened_at"], TIME_TYPE))
                    changes = {k: v for k, v in row.items() if k not in _OWN_COLUMNS}
                    result = conn.execute(
                        sa.update(alerts_table)
                        .where(
                            a.fingerprint == fp,
                            a.event_sequence == version[0],
                            a.last_window_end == version[1],
                        )
                        .values(
                            **changes,
                            acknowledged_by=sa.case((reopened, sa.null()), else_=a.acknowledged_by),
                            acknowledged_at=sa.case((reopened, sa.null()), else_=a.acknowledged_at),
                        )
                    )
                    if result.rowcount != 1:
                        raise StoreConflictError(
                            f"alert {fp} changed since it was read (expected event {version[0]} at "
                            f"{version[1]!r}): another writer was first"
                        )
                if new_events:
                    conn.execute(sa.insert(alert_events_table), new_events)
            except IntegrityError as exc:
                raise StoreConflictError(
                    f"commit incident alerts of cluster {cluster!r}: another writer was first: "
                    f"{error_detail(exc)}"
                ) from exc
            if also is not None:
                also(conn)

    def acknowledge(self, fingerprint: str, by: str, at: float) -> bool:
        """Record who acknowledged the alert and when; False when there is no such alert.

        An acknowledgement belongs to one opening of the alert: it is cleared when the alert opens anew
        (its ``opened_at`` changes).
        """
        if not by:
            raise StoreError("acknowledge: 'by' must not be empty")
        at = finite(at, "acknowledge: at")
        with self._db.errors(f"acknowledge alert {fingerprint}"), self._db.write() as conn:
            result = conn.execute(
                sa.update(alerts_table)
                .where(alerts_table.c.fingerprint == fingerprint)
                .values(acknowledged_by=by, acknowledged_at=at)
            )
            return result.rowcount == 1

    # -- reading

    def batch_committed(self, query_name: str, batch_id: int) -> bool:
        """Whether ``(query_name, batch_id)`` was committed."""
        query = sa.select(sa.literal(1)).where(
            processed_batches_table.c.query_name == query_name, processed_batches_table.c.batch_id == batch_id
        )
        with self._db.errors("read processed batches"), self._db.read() as conn:
            return conn.execute(query).first() is not None

    def alert_states(
        self,
        cluster: str,
        states: Collection[str] = ALL_ALERT_STATES,
        *,
        rules: Collection[int] | None = None,
    ) -> dict[str, AlertState]:
        """The cluster's alerts in ``states`` (of ``rules``, when given), by fingerprint (what a lane resumes
        from after a restart)."""
        query = sa.select(alerts_table).where(
            alerts_table.c.cluster == cluster, alerts_table.c.state.in_(list(states))
        )
        if rules is not None:
            query = query.where(alerts_table.c.rule.in_(sorted(rules)))
        with self._db.errors(f"read alert states of cluster {cluster!r}"), self._db.read() as conn:
            return {row.fingerprint: read_alert_state(row) for row in conn.execute(query)}

    def alerts(
        self,
        *,
        cluster: str | None = None,
        state: str | Collection[str] | None = None,
        rule: int | None = None,
        severity: str | Collection[str] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[AlertState]:
        """Alerts matching every filter given, most recently seen first (then by fingerprint)."""
        check_page(limit, offset)
        query = sa.select(alerts_table)
        if cluster is not None:
            query = query.where(alerts_table.c.cluster == cluster)
        if state is not None:
            query = query.where(alerts_table.c.state.in_(one_or_many(state)))
        if rule is not None:
            query = query.where(alerts_table.c.rule == rule)
        if severity is not None:
            query = query.where(alerts_table.c.severity.in_(one_or_many(severity)))
        query = (
            query.order_by(alerts_table.c.last_seen.desc(), alerts_table.c.fingerprint)
            .limit(limit)
            .offset(offset)
        )
        with self._db.errors("read alerts"), self._db.read() as conn:
            return [read_alert_state(row) for row in conn.execute(query)]

    def alert(self, fingerprint: str) -> AlertState | None:
        """One alert, or None."""
        query = sa.select(alerts_table).where(alerts_table.c.fingerprint == fingerprint)
        with self._db.errors(f"read alert {fingerprint}"), self._db.read() as conn:
            row = conn.execute(query).first()
        return None if row is None else read_alert_state(row)

    def acknowledgements(self, fingerprints: Collection[str]) -> dict[str, Acknowledgement]:
        """The acknowledgements of those of ``fingerprints`` that are acknowledged."""
        if not fingerprints:
            return {}
        query = sa.select(
            alerts_table.c.fingerprint, alerts_table.c.acknowledged_by, alerts_table.c.acknowledged_at
        ).where(
            alerts_table.c.fingerprint.in_(list(fingerprints)), alerts_table.c.acknowledged_by.is_not(None)
        )
        with self._db.errors("read acknowledgements"), self._db.read() as conn:
            return {
                str(row.fingerprint): Acknowledgement(str(row.acknowledged_by), float(row.acknowledged_at))
                for row in conn.execute(query)
            }

    def alert_events(
        self,
        fingerprint: str | None = None,
        *,
        since_sequence: int = 0,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[AlertEvent]:
        """Events of one alert (``sequence > since_sequence``, in sequence order) or of all alerts (in
        ``(at, fingerprint, sequence)`` order); ``since``: only events at or after this time."""
        check_page(limit, 0)
        query = sa.select(alert_events_table).where(alert_events_table.c.sequence > since_sequence)
        if since is not None:
            query = query.where(alert_events_table.c.at >= since)
        if fingerprint is not None:
            query = query.where(alert_events_table.c.fingerprint == fingerprint).order_by(
                alert_events_table.c.sequence
            )
        else:
            query = query.order_by(
                alert_events_table.c.at, alert_events_table.c.fingerprint, alert_events_table.c.sequence
            )
        with self._db.errors("read alert events"), self._db.read() as conn:
            return [read_alert_event(row) for row in conn.execute(query.limit(limit))]

    def last_evaluated_window(self, cluster: str) -> float | None:
        """End of the cluster's latest window the rules evaluated, or None."""
        query = sa.select(sa.func.max(cluster_windows_table.c.window_end)).where(
            cluster_windows_table.c.cluster == cluster, cluster_windows_table.c.evaluated
        )
        with self._db.errors(f"read windows of cluster {cluster!r}"), self._db.read() as conn:
            value = conn.execute(query).scalar()
        return None if value is None else float(value)

    def latest_load_end(self, cluster: str) -> float | None:
        """End of the cluster's latest window with load (the load lane's heartbeat), or None."""
        c = cluster_windows_table.c
        query = (
            sa.select(c.window_end)
            .where(c.cluster == cluster, _has_load())
            .order_by(c.window_start.desc())
            .limit(1)
        )
        with self._db.errors(f"read the latest load window of cluster {cluster!r}"), self._db.read() as conn:
            value = conn.execute(query).scalar()
        return None if value is None else float(value)

    def health_history(self, cluster: str, since: float) -> list[dict[str, Any]]:
        """The cluster's windows starting at or after ``since``, oldest first, as dicts with ``cluster``,
        ``window_start``, ``window_end``, ``controller_id``, ``controller_epoch``, ``health`` (None for a
        window without health) and ``evaluated``."""
        c = cluster_windows_table.c
        query = (
            sa.select(
                c.cluster,
                c.window_start,
                c.window_end,
                c.controller_id,
                c.controller_epoch,
                c.health,
                c.evaluated,
            )
            .where(c.cluster == cluster, c.window_start >= since)
            .order_by(c.window_start)
        )
        with self._db.errors(f"read health history of cluster {cluster!r}"), self._db.read() as conn:
            return [
                {
                    "cluster": str(row.cluster),
                    "window_start": float(row.window_start),
                    "window_end": float(row.window_end),
                    "controller_id": opt_int(row.controller_id),
                    "controller_epoch": opt_int(row.controller_epoch),
                    "health": row.health,
                    "evaluated": bool(row.evaluated),
                }
                for row in conn.execute(query)
            ]

    def cluster_windows(
        self, cluster: str, since: float | None = None, limit: int = 1000
    ) -> list[ClusterWindowRow]:
        """The cluster's windows (load aggregates and health facts) starting at or after ``since``, oldest
        first, at most ``limit``."""
        check_page(limit, 0)
        query = sa.select(cluster_windows_table).where(cluster_windows_table.c.cluster == cluster)
        if since is not None:
            query = query.where(cluster_windows_table.c.window_start >= since)
        query = query.order_by(cluster_windows_table.c.window_start).limit(limit)
        with self._db.errors(f"read windows of cluster {cluster!r}"), self._db.read() as conn:
            return [read_cluster_window(row) for row in conn.execute(query)]

    def latest_load(self, cluster: str | None = None) -> LoadWindow | None:
        """The latest window with load (of ``cluster``, or of any cluster: the one that ended last)."""
        query = sa.select(cluster_windows_table).where(_has_load())
        if cluster is not None:
            query = query.where(cluster_windows_table.c.cluster == cluster)
        query = query.order_by(
            cluster_windows_table.c.window_end.desc(),
            cluster_windows_table.c.window_start.desc(),
            cluster_windows_table.c.cluster,
        ).limit(1)
        with self._db.errors("read the latest load window"), self._db.read() as conn:
            window = conn.execute(query).first()
            if window is None:
                return None
            return self._load_windows(conn, [window])[0]

    def load_history(
        self, cluster: str, since: float, until: float | None = None, limit: int = 1000
    ) -> list[LoadWindow]:
        """The cluster's load windows starting in ``[since, until)``, oldest first, at most ``limit``."""
        check_page(limit, 0)
        query = sa.select(cluster_windows_table).where(
            cluster_windows_table.c.cluster == cluster,
            cluster_windows_table.c.window_start >= since,
            _has_load(),
        )
        if until is not None:
            query = query.where(cluster_windows_table.c.window_start < until)
        query = query.order_by(cluster_windows_table.c.window_start).limit(limit)
        with self._db.errors(f"read load history of cluster {cluster!r}"), self._db.read() as conn:
            return self._load_windows(conn, list(conn.execute(query)))

    def load_rollups(
        self, cluster: str, since: float, until: float | None = None, limit: int = 1000
    ) -> list[LoadRollup]:
        """The cluster's hourly load rollups whose hour overlaps ``[since, until)``, oldest first, at most
        ``limit``: what is left of its load windows older than their retention (the retention pruner writes
        an hour's rollup in the transactions that delete its windows, so an hour is either here or in
        :meth:`load_history`, never both)."""
        check_page(limit, 0)
        c = cluster_rollups_table.c
        query = sa.select(cluster_rollups_table).where(c.cluster == cluster, c.hour_start > since - ROLLUP_S)
        if until is not None:
            query = query.where(c.hour_start < until)
        query = query.order_by(c.hour_start).limit(limit)
        r = load_rollups_table.c
        with self._db.errors(f"read load rollups of cluster {cluster!r}"), self._db.read() as conn:
            hours = list(conn.execute(query))
            if not hours:
                return []
            brokers: dict[float, list[BrokerRollup]] = {float(h.hour_start): [] for h in hours}
            rows = conn.execute(
                sa.select(load_rollups_table)
                .where(
                    r.cluster == cluster,
                    r.hour_start >= float(hours[0].hour_start),
                    r.hour_start <= float(hours[-1].hour_start),
                )
                .order_by(r.hour_start, r.broker)
            )
            for row in rows:
                target = brokers.get(float(row.hour_start))
                if target is not None:
                    target.append(BrokerRollup.from_row(row))
        return [
            LoadRollup(
                cluster=str(h.cluster),
                hour_start=float(h.hour_start),
                hour_end=float(h.hour_start) + ROLLUP_S,
                windows=int(h.windows),
                brokers_max=int(h.brokers_max),
                stddev_avg=float(h.stddev_avg),
                stddev_max=float(h.stddev_max),
                stddev_threshold_avg=float(h.stddev_threshold_avg),
                rated_deviation_avg=float(h.rated_deviation_avg),
                imbalanced_windows=int(h.imbalanced_windows),
                brokers=tuple(brokers[float(h.hour_start)]),
            )
            for h in hours
        ]

    def clusters(self) -> list[str]:
        """Every cluster with a window or an alert, sorted."""
        query = sa.union(sa.select(cluster_windows_table.c.cluster), sa.select(alerts_table.c.cluster))
        with self._db.errors("read clusters"), self._db.read() as conn:
            return sorted(str(name) for name in conn.execute(query).scalars())

    # -- internals

    def _upsert_health_windows(self) -> sa.Insert:
        stmt = self._db.insert(cluster_windows_table)
        new, old = stmt.excluded, cluster_windows_table.c
        load = {name: sa.func.coalesce(new[name], old[name]) for name in _LOAD_COLUMNS}
        return stmt.on_conflict_do_update(
            index_elements=["cluster", "window_start"],
            set_={
                "window_end": new.window_end,
                **load,
                "controller_id": new.controller_id,
                "controller_epoch": new.controller_epoch,
                "health": new.health,
                "evaluated": sa.or_(old.evaluated, new.evaluated),
            },
        )

    def _upsert_load_aggregates(self) -> sa.Insert:
        stmt = self._db.insert(cluster_windows_table)
        new = stmt.excluded
        return stmt.on_conflict_do_update(
            index_elements=["cluster", "window_start"],
            set_={"window_end": new.window_end, **{name: new[name] for name in _LOAD_COLUMNS}},
        )

    def _upsert_broker_loads(self) -> sa.Insert:
        stmt = self._db.insert(load_windows_table)
        new = stmt.excluded
        keys = ("cluster", "window_start", "broker")
        return stmt.on_conflict_do_update(
            index_elements=list(keys),
            set_={c.name: new[c.name] for c in load_windows_table.columns if c.name not in keys},
        )

    def _upsert_alerts(self) -> sa.Insert:
        stmt = self._db.insert(alerts_table)
        new, old = stmt.excluded, alerts_table.c
        reopened = new.opened_at.is_distinct_from(old.opened_at)
        own = {"fingerprint", "acknowledged_by", "acknowledged_at"}
        return stmt.on_conflict_do_update(
            index_elements=["fingerprint"],
            set_={
                **{c.name: new[c.name] for c in alerts_table.columns if c.name not in own},
                "acknowledged_by": sa.case((reopened, sa.null()), else_=old.acknowledged_by),
                "acknowledged_at": sa.case((reopened, sa.null()), else_=old.acknowledged_at),
            },
        )

    def _load_windows(self, conn: Connection, windows: Sequence[sa.Row[Any]]) -> list[LoadWindow]:
        """The load windows of these cluster_windows rows (one cluster, or one window), with their brokers."""
        if not windows:
            return []
        starts = [float(w.window_start) for w in windows]
        brokers_of: dict[tuple[str, float], list[BrokerLoad]] = {
            (str(w.cluster), float(w.window_start)): [] for w in windows
        }
        clusters = sorted({str(w.cluster) for w in windows})
        query = (
            sa.select(load_windows_table)
            .where(
                load_windows_table.c.cluster.in_(clusters),
                load_windows_table.c.window_start >= min(starts),
                load_windows_table.c.window_start <= max(starts),
            )
            .order_by(
                load_windows_table.c.cluster, load_windows_table.c.window_start, load_windows_table.c.broker
            )
        )
        for row in conn.execute(query):
            target = brokers_of.get((str(row.cluster), float(row.window_start)))
            if target is not None:
                target.append(read_broker_load(row))
        return [
            LoadWindow(
                window=Window(str(w.cluster), float(w.window_start), float(w.window_end)),
                brokers=tuple(brokers_of[str(w.cluster), float(w.window_start)]),
                stddev=float(w.stddev),
                stddev_threshold=float(w.stddev_threshold),
                rated_deviation=float(w.rated_deviation),
            )
            for w in windows
        ]


_LOAD_COLUMNS: Final = ("brokers", "stddev", "stddev_threshold", "rated_deviation", "imbalanced")
_OWN_COLUMNS: Final = frozenset({"fingerprint", "acknowledged_by", "acknowledged_at"})
"""Columns an alert's writer never changes: its key, and the acknowledgement (the API's)."""


def _check_lane(writer: str, lane: Lane, states: Sequence[AlertState]) -> None:
    for state in states:
        owner = RULE_LANES.get(state.rule)
        if owner is None:
            raise StoreError(
                f"{writer}: alert {state.fingerprint} has rule {state.rule}: no such rule (1-19)"
            )
        if owner != lane:
            raise StoreError(
                f"{writer} is the {lane} lane's writer: alert {state.fingerprint} is rule {state.rule} "
                f"({state.subject}), which the {owner} lane owns"
            )


def _check_event_lanes(
    conn: Connection, writer: str, lane: Lane, states: Sequence[AlertState], events: Sequence[AlertEvent]
) -> None:
    """Events whose alert is not in the batch: their stored alert's rule must be the lane's too."""
    batch = {s.fingerprint for s in states}
    others = sorted({e.fingerprint for e in events} - batch)
    if not others:
        return
    query = sa.select(alerts_table.c.fingerprint, alerts_table.c.rule, alerts_table.c.subject).where(
        alerts_table.c.fingerprint.in_(others)
    )
    for row in conn.execute(query):
        owner = RULE_LANES.get(int(row.rule))
        if owner != lane:
            raise StoreError(
                f"{writer} is the {lane} lane's writer: an event of alert {row.fingerprint} is rule "
                f"{row.rule} ({row.subject}), which the {owner or 'no'} lane owns"
            )


def _has_load() -> sa.ColumnElement[bool]:
    c = cluster_windows_table.c
    return sa.and_(c.stddev.is_not(None), c.stddev_threshold.is_not(None), c.rated_deviation.is_not(None))
