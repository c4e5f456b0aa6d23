"""The analytics store: load windows, per-window health facts, alert lifecycle rows and their events.

SQLAlchemy 2 Core over an SQLite file (the default; WAL journal, foreign keys on, a busy timeout) or
PostgreSQL (``postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE``). :meth:`Store.open` creates the
schema or upgrades it: :data:`MIGRATIONS` is the ordered list of steps, ``schema_version`` records the ones
applied, and the missing ones run in one transaction (a database newer than this code is refused).

Writes come from Spark's ``foreachBatch``: :meth:`Store.commit_batch` writes one micro-batch in one
transaction, exactly once per ``(query_name, batch_id)`` (``processed_batches``), and every row it writes
is an idempotent upsert, so a batch replayed under a new id changes nothing either. See ``docs/store.md``.

Timestamps are epoch seconds as floats (``DOUBLE PRECISION``); JSON columns keep floats exactly (Python's
``repr`` round-trips), but NaN and infinities are refused, as are non-finite numbers in numeric columns.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from analytics.model import (
    SEVERITY_ORDER,
    ActionRef,
    AlertEvent,
    AlertState,
    AlertStateName,
    BrokerLoad,
    EventKind,
    LoadWindow,
    Severity,
    Window,
)

__all__ = [
    "DELIVERY_STATES",
    "MIGRATIONS",
    "WEBHOOK_FORMATS",
    "Acknowledgement",
    "AlertNotice",
    "ClusterWindowRow",
    "DeliveryState",
    "Migration",
    "MigrationStep",
    "Store",
    "StoreError",
    "Webhook",
    "WebhookDelivery",
    "WebhookFormat",
    "WebhookRenderer",
    "metadata",
]

ALL_ALERT_STATES: Final[tuple[AlertStateName, ...]] = ("pending", "open", "resolved")
DEFAULT_BUSY_TIMEOUT: Final = 30.0
"""Seconds an SQLite connection waits for another writer's lock before failing."""

_URL_FORMS: Final = "sqlite:///PATH (a file) or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
_WRITE: Final = "kafka_health_write"
"""Connection execution option: begin the SQLite transaction with BEGIN IMMEDIATE (take the write lock
first, so that a read-then-write transaction never fails to upgrade its lock)."""
_MIGRATION_LOCK_KEY: Final = 0x6B68_5F73_746F_7265  # "kh_store": PostgreSQL advisory lock for migrations
_MAX_DETAIL: Final = 600


class StoreError(Exception):
    """The store cannot be opened or used; the message says which store and why."""


# --- the schema ------------------------------------------------------------------------------------------
#
# The migrations below are the DDL of record. The tables here describe the schema they leave behind and
# are what the queries are built from; tests/analytics/test_store.py checks that the two agree.

metadata = sa.MetaData()
"""The current schema, as :data:`MIGRATIONS` create it (for building queries, not for creating tables)."""

_Json = sa.JSON(none_as_null=True)
_Time = sa.Double

schema_version_table = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("applied_at", _Time, nullable=False),
)

cluster_windows_table = sa.Table(
    "cluster_windows",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("window_start", _Time, primary_key=True),
    sa.Column("window_end", _Time, nullable=False),
    sa.Column("brokers", sa.Integer),
    sa.Column("stddev", sa.Double),
    sa.Column("stddev_threshold", sa.Double),
    sa.Column("rated_deviation", sa.Double),
    sa.Column("imbalanced", sa.Boolean),
    sa.Column("controller_id", sa.Integer),
    sa.Column("controller_epoch", sa.BigInteger),
    sa.Column("health", _Json),
    sa.Column("evaluated", sa.Boolean, nullable=False),
)

load_windows_table = sa.Table(
    "load_windows",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("window_start", _Time, primary_key=True),
    sa.Column("window_end", _Time, nullable=False),
    sa.Column("broker", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("metrics", _Json, nullable=False),
    sa.Column("shares", _Json, nullable=False),
    sa.Column("weighted_load", sa.Double, nullable=False),
    sa.Column("normalized_load", sa.Double, nullable=False),
    sa.Column("deviation_rate", sa.Double, nullable=False),
    sa.ForeignKeyConstraint(
        ["cluster", "window_start"], ["cluster_windows.cluster", "cluster_windows.window_start"]
    ),
)

alerts_table = sa.Table(
    "alerts",
    metadata,
    sa.Column("fingerprint", sa.Text, primary_key=True),
    sa.Column("cluster", sa.Text, nullable=False),
    sa.Column("rule", sa.Integer, nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("severity", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("first_seen", _Time, nullable=False),
    sa.Column("last_seen", _Time, nullable=False),
    sa.Column("opened_at", _Time),
    sa.Column("resolved_at", _Time),
    sa.Column("evidence", _Json, nullable=False),
    sa.Column("action", _Json),
    sa.Column("hits", sa.Integer, nullable=False),
    sa.Column("clean", sa.Integer, nullable=False),
    sa.Column("last_window_end", _Time, nullable=False),
    sa.Column("event_sequence", sa.Integer, nullable=False),
    sa.Column("acknowledged_by", sa.Text),
    sa.Column("acknowledged_at", _Time),
    sa.Index("ix_alerts_cluster_state", "cluster", "state"),
    sa.Index("ix_alerts_rule", "rule"),
)

alert_events_table = sa.Table(
    "alert_events",
    metadata,
    sa.Column("fingerprint", sa.Text, sa.ForeignKey("alerts.fingerprint"), primary_key=True),
    sa.Column("sequence", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("at", _Time, nullable=False),
    sa.Column("severity", sa.Text, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("evidence", _Json, nullable=False),
    sa.Index("ix_alert_events_at", "at"),
)

processed_batches_table = sa.Table(
    "processed_batches",
    metadata,
    sa.Column("query_name", sa.Text, primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("committed_at", _Time, nullable=False),
)

webhooks_table = sa.Table(
    "webhooks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("format", sa.Text, nullable=False),
    sa.Column("rules", _Json),
    sa.Column("severities", _Json),
    sa.Column("secret", sa.Text),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("created_at", _Time, nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("updated_at", _Time, nullable=False),
)

webhook_deliveries_table = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("webhook_id", sa.Integer, sa.ForeignKey("webhooks.id"), nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("sequence", sa.Integer, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("event_at", _Time, nullable=False),
    sa.Column("payload", sa.Text),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", _Time),
    sa.Column("last_attempt_at", _Time),
    sa.Column("last_status", sa.Integer),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", _Time, nullable=False),
    sa.Column("delivered_at", _Time),
    sa.ForeignKeyConstraint(
        ["fingerprint", "sequence"], ["alert_events.fingerprint", "alert_events.sequence"]
    ),
    sa.UniqueConstraint("webhook_id", "fingerprint", "sequence", name="uq_webhook_deliveries_event"),
    sa.UniqueConstraint("webhook_id", "idempotency_key", name="uq_webhook_deliveries_key"),
    sa.Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
    sa.Index("ix_webhook_deliveries_event_at", "event_at"),
)

actions_table = sa.Table(
    "actions",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("requested_by", sa.Text, nullable=False),
    sa.Column("requested_at", _Time, nullable=False),
    sa.Column("request", _Json, nullable=False),
    sa.Column("plan", _Json, nullable=False),
    sa.Column("progress", _Json, nullable=False),
    sa.Column("result", _Json, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("started_at", _Time),
    sa.Column("finished_at", _Time),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Index("ix_actions_requested_at", "requested_at"),
)

audit_log_table = sa.Table(
    "audit_log",
    metadata,
    sa.Column("sequence", sa.BigInteger, primary_key=True),
    sa.Column("at", _Time, nullable=False),
    sa.Column("who", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("action_id", sa.Text),
    sa.Column("detail", _Json, nullable=False),
    sa.Index("ix_audit_log_at", "at"),
)


# --- migrations ------------------------------------------------------------------------------------------

MigrationStep = str | Callable[[Connection], None]
"""A DDL statement (portable between SQLite and PostgreSQL) or a function run on the migrating connection."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: the steps that take the schema from ``version - 1`` to ``version``.

    Never edit a released migration: append a new one (versions are 1, 2, 3, ... in order).
    """

    version: int
    description: str
    steps: tuple[MigrationStep, ...]


_SCHEMA_VERSION_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS schema_version ("
    " version INTEGER NOT NULL PRIMARY KEY,"
    " description TEXT NOT NULL,"
    " applied_at DOUBLE PRECISION NOT NULL)"
)

_SEVERITIES: Final = "('critical', 'warning', 'info')"

_V1_INITIAL: Final[tuple[MigrationStep, ...]] = (
    """CREATE TABLE cluster_windows (
        cluster TEXT NOT NULL,
        window_start DOUBLE PRECISION NOT NULL,
        window_end DOUBLE PRECISION NOT NULL,
        brokers INTEGER,
        stddev DOUBLE PRECISION,
        stddev_threshold DOUBLE PRECISION,
        rated_deviation DOUBLE PRECISION,
        imbalanced BOOLEAN,
        controller_id INTEGER,
        controller_epoch BIGINT,
        health JSON,
        evaluated BOOLEAN NOT NULL DEFAULT FALSE,
        CONSTRAINT pk_cluster_windows PRIMARY KEY (cluster, window_start),
        CONSTRAINT ck_cluster_windows_window CHECK (window_end >= window_start),
        CONSTRAINT ck_cluster_windows_brokers CHECK (brokers >= 0)
    )""",
    """CREATE TABLE load_windows (
        cluster TEXT NOT NULL,
        window_start DOUBLE PRECISION NOT NULL,
        window_end DOUBLE PRECISION NOT NULL,
        broker INTEGER NOT NULL,
        metrics JSON NOT NULL,
        shares JSON NOT NULL,
        weighted_load DOUBLE PRECISION NOT NULL,
        normalized_load DOUBLE PRECISION NOT NULL,
        deviation_rate DOUBLE PRECISION NOT NULL,
        CONSTRAINT pk_load_windows PRIMARY KEY (cluster, window_start, broker),
        CONSTRAINT fk_load_windows_window FOREIGN KEY (cluster, window_start)
            REFERENCES cluster_windows (cluster, window_start) ON DELETE CASCADE
    )""",
    f"""CREATE TABLE alerts (
        fingerprint TEXT NOT NULL,
        cluster TEXT NOT NULL,
        rule INTEGER NOT NULL,
        subject TEXT NOT NULL,
        severity TEXT NOT NULL,
        state TEXT NOT NULL,
        summary TEXT NOT NULL,
        first_seen DOUBLE PRECISION NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL,
        opened_at DOUBLE PRECISION,
        resolved_at DOUBLE PRECISION,
        evidence JSON NOT NULL,
        action JSON,
        hits INTEGER NOT NULL,
        clean INTEGER NOT NULL,
        last_window_end DOUBLE PRECISION NOT NULL,
        event_sequence INTEGER NOT NULL,
        acknowledged_by TEXT,
        acknowledged_at DOUBLE PRECISION,
        CONSTRAINT pk_alerts PRIMARY KEY (fingerprint),
        CONSTRAINT ck_alerts_severity CHECK (severity IN {_SEVERITIES}),
        CONSTRAINT ck_alerts_state CHECK (state IN ('pending', 'open', 'resolved')),
        CONSTRAINT ck_alerts_counters CHECK (hits >= 0 AND clean >= 0 AND event_sequence >= 0)
    )""",
    "CREATE INDEX ix_alerts_cluster_state ON alerts (cluster, state)",
    "CREATE INDEX ix_alerts_rule ON alerts (rule)",
    f"""CREATE TABLE alert_events (
        fingerprint TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        kind TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        severity TEXT NOT NULL,
        summary TEXT NOT NULL,
        evidence JSON NOT NULL,
        CONSTRAINT pk_alert_events PRIMARY KEY (fingerprint, sequence),
        CONSTRAINT fk_alert_events_alert FOREIGN KEY (fingerprint)
            REFERENCES alerts (fingerprint) ON DELETE CASCADE,
        CONSTRAINT ck_alert_events_kind CHECK (kind IN ('opened', 'updated', 'resolved')),
        CONSTRAINT ck_alert_events_severity CHECK (severity IN {_SEVERITIES}),
        CONSTRAINT ck_alert_events_sequence CHECK (sequence > 0)
    )""",
    "CREATE INDEX ix_alert_events_at ON alert_events (at)",
    """CREATE TABLE processed_batches (
        query_name TEXT NOT NULL,
        batch_id BIGINT NOT NULL,
        committed_at DOUBLE PRECISION NOT NULL,
        CONSTRAINT pk_processed_batches PRIMARY KEY (query_name, batch_id)
    )""",
)

_V2_WEBHOOKS: Final = (
    """CREATE TABLE webhooks (
        {id},
        name TEXT NOT NULL,
        url TEXT NOT NULL,
        format TEXT NOT NULL,
        rules JSON,
        severities JSON,
        secret TEXT,
        enabled BOOLEAN NOT NULL DEFAULT TRUE,
        created_at DOUBLE PRECISION NOT NULL,
        created_by TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        CONSTRAINT ck_webhooks_format CHECK (format IN ('generic', 'alertmanager', 'slack'))
    )""",
    """CREATE TABLE webhook_deliveries (
        {big_id},
        webhook_id INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        idempotency_key TEXT NOT NULL,
        kind TEXT NOT NULL,
        event_at DOUBLE PRECISION NOT NULL,
        payload TEXT,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at DOUBLE PRECISION,
        last_attempt_at DOUBLE PRECISION,
        last_status INTEGER,
        last_error TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        delivered_at DOUBLE PRECISION,
        CONSTRAINT fk_webhook_deliveries_webhook FOREIGN KEY (webhook_id)
            REFERENCES webhooks (id) ON DELETE CASCADE,
        CONSTRAINT fk_webhook_deliveries_event FOREIGN KEY (fingerprint, sequence)
            REFERENCES alert_events (fingerprint, sequence) ON DELETE CASCADE,
        CONSTRAINT uq_webhook_deliveries_event UNIQUE (webhook_id, fingerprint, sequence),
        CONSTRAINT uq_webhook_deliveries_key UNIQUE (webhook_id, idempotency_key),
        CONSTRAINT ck_webhook_deliveries_state
            CHECK (state IN ('pending', 'delivered', 'dead', 'skipped')),
        CONSTRAINT ck_webhook_deliveries_kind CHECK (kind IN ('opened', 'updated', 'resolved')),
        CONSTRAINT ck_webhook_deliveries_counters CHECK (attempts >= 0 AND sequence > 0)
    )""",
    "CREATE INDEX ix_webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at)",
    "CREATE INDEX ix_webhook_deliveries_event_at ON webhook_deliveries (event_at)",
)


def _create_webhook_tables(conn: Connection) -> None:
    """Migration 2's DDL: the same on both databases but for the generated ids (SQLite: AUTOINCREMENT, so
    that an id is never reused after a delete)."""
    if conn.dialect.name == "postgresql":
        ids = {
            "id": "id INTEGER GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
            "big_id": "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        }
    else:
        sqlite_id = "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT"
        ids = {"id": sqlite_id, "big_id": sqlite_id}
    for statement in _V2_WEBHOOKS:
        conn.exec_driver_sql(statement.replace("{id}", ids["id"]).replace("{big_id}", ids["big_id"]))


_V3_ACTIONS: Final = (
    """CREATE TABLE actions (
        id TEXT NOT NULL PRIMARY KEY,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        requested_at DOUBLE PRECISION NOT NULL,
        request JSON NOT NULL,
        plan JSON NOT NULL,
        progress JSON NOT NULL,
        result JSON NOT NULL,
        error TEXT,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        CONSTRAINT ck_actions_state
            CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'PARTIAL', 'FAILED', 'CANCELLED'))
    )""",
    "CREATE INDEX ix_actions_requested_at ON actions (requested_at)",
    """CREATE TABLE audit_log (
        {big_id},
        at DOUBLE PRECISION NOT NULL,
        who TEXT NOT NULL,
        role TEXT NOT NULL,
        action TEXT NOT NULL,
        dry_run BOOLEAN NOT NULL,
        outcome TEXT NOT NULL,
        action_id TEXT,
        detail JSON NOT NULL
    )""",
    "CREATE INDEX ix_audit_log_at ON audit_log (at)",
)


def _create_action_tables(conn: Connection) -> None:
    """Migration 3: runbook actions and the audit log (append-only; ``sequence`` orders it)."""
    big_id = (
        "sequence BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
        if conn.dialect.name == "postgresql"
        else "sequence INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT"
    )
    for statement in _V3_ACTIONS:
        conn.exec_driver_sql(statement.replace("{big_id}", big_id))


MIGRATIONS: Sequence[Migration] = (
    Migration(
        1, "initial schema: load and cluster windows, alerts, alert events, processed batches", _V1_INITIAL
    ),
    Migration(2, "webhooks and their delivery outbox", (_create_webhook_tables,)),
    Migration(3, "runbook actions and the audit log", (_create_action_tables,)),
)
"""Every schema version this code knows, in order; the last one is the version :meth:`Store.open` leaves."""


# --- rows ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterWindowRow:
    """One cluster's facts for one window: the load model's aggregates (when the window has load) and the
    health facts the alert rules need from history after a restart (when it has health)."""

    window: Window
    brokers: int | None = None
    """N: brokers in the load model."""
    stddev: float | None = None
    """σ of the brokers' normalised loads."""
    stddev_threshold: float | None = None
    rated_deviation: float | None = None
    imbalanced: bool | None = None
    controller_id: int | None = None
    controller_epoch: int | None = None
    health: Mapping[str, Any] | None = None
    """The window's health summary (JSON-serialisable); None: the window has no health sample."""
    evaluated: bool = False
    """The alert rules have evaluated this window (sticky: once stored as True it stays True)."""


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """Who acknowledged an alert, and when (epoch seconds)."""

    by: str
    at: float


WebhookFormat = Literal["generic", "alertmanager", "slack"]
DeliveryState = Literal["pending", "delivered", "dead", "skipped"]
WEBHOOK_FORMATS: Final[tuple[WebhookFormat, ...]] = ("generic", "alertmanager", "slack")
DELIVERY_STATES: Final[tuple[DeliveryState, ...]] = ("pending", "delivered", "dead", "skipped")
DEFAULT_WEBHOOK_HORIZON_S: Final = 7 * 86400.0
"""How far back (event time) :meth:`Store.enqueue_deliveries` looks for events not yet in the outbox."""
_WEBHOOK_FIELDS: Final = frozenset({"name", "url", "format", "rules", "severities", "secret", "enabled"})
_MAX_ERROR: Final = 500


@dataclass(frozen=True, slots=True)
class Webhook:
    """A webhook subscription: where to send which alert events, in which format, signed with which secret."""

    id: int
    name: str
    url: str
    format: WebhookFormat
    rules: tuple[int, ...] | None
    """Alert rules whose events are sent; None: every rule."""
    severities: tuple[Severity, ...] | None
    """Event severities that are sent; None: every severity."""
    secret: str | None = field(repr=False)
    """HMAC-SHA256 key of the signature header; None: deliveries are not signed."""
    enabled: bool
    created_at: float
    created_by: str
    updated_at: float

    def mismatch(self, rule: int, severity: str) -> str | None:
        """Why an event of ``rule`` at ``severity`` is filtered out, or None when it matches."""
        if self.rules is not None and rule not in self.rules:
            return f"rule {rule} is not in the webhook's rules {list(self.rules)}"
        if self.severities is not None and severity not in self.severities:
            return f"severity {severity} is not in the webhook's severities {list(self.severities)}"
        return None


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One row of the outbox: one alert event for one webhook (``idempotency_key`` = fingerprint:sequence).

    ``pending``: to be sent (again) at ``next_attempt_at``; ``delivered``: the receiver answered 2xx;
    ``dead``: given up (a permanent error or too many attempts), until requeued; ``skipped``: not sent, the
    reason in ``last_error`` (filtered out, or the event predates the webhook or happened while disabled).
    """

    id: int
    webhook_id: int
    fingerprint: str
    sequence: int
    idempotency_key: str
    kind: EventKind
    event_at: float
    payload: str | None
    """The request body, rendered once when the row was written (None for a skipped row)."""
    state: DeliveryState
    attempts: int
    next_attempt_at: float | None
    last_attempt_at: float | None
    last_status: int | None
    last_error: str | None
    created_at: float
    delivered_at: float | None


@dataclass(frozen=True, slots=True)
class AlertNotice:
    """An alert event with its alert's identity: everything a webhook payload is made of."""

    event: AlertEvent
    cluster: str
    rule: int
    subject: str
    action: ActionRef | None
    opened_at: float | None
    """When the run this event belongs to opened (its latest ``opened`` event's ``at``)."""

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.event.fingerprint, self.event.sequence)


WebhookRenderer = Callable[[Webhook, AlertNotice], str]
"""Renders the request body of one event for one webhook (called when the outbox row is written)."""


def idempotency_key(fingerprint: str, sequence: int) -> str:
    """The key a receiver deduplicates on: one per alert event (and per webhook, as each has its own row)."""
    return f"{fingerprint}:{sequence}"


# --- the store -------------------------------------------------------------------------------------------


class Store:
    """The analytics store; open it with :meth:`Store.open`, close it with :meth:`close` (or ``with``).

    Thread-safe: every call takes a pooled connection for one transaction. Reads see one consistent
    snapshot per call. Errors are :class:`StoreError`.
    """

    def __init__(self, engine: Engine, shown_url: str, version: int) -> None:
        """Use :meth:`Store.open`."""
        self._engine: Engine | None = engine
        self._shown_url = shown_url
        self._version = version
        self._dialect = engine.dialect.name

    # -- opening and closing

    @classmethod
    def open(cls, url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Store:
        """Open the store at ``url``, creating or upgrading its schema.

        ``url``: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` (the parent directory is
        created) or ``postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE`` (``postgresql://`` and
        ``postgres://`` mean the same). ``busy_timeout``: seconds an SQLite connection waits for a lock.
        Raises :class:`StoreError` for a bad or unsupported URL, a database that cannot be opened, a failed
        migration, or a schema newer than this code.
        """
        parsed = _parse_url(url)
        shown = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite":
            engine = _sqlite_engine(parsed, shown, busy_timeout)
        else:
            engine = sa.create_engine(
                parsed,
                pool_pre_ping=True,
                json_serializer=_json_dumps,
                connect_args={"connect_timeout": max(1, math.ceil(busy_timeout))},
            )
        try:
            version = _migrate(engine, MIGRATIONS, shown)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, shown, version)

    def close(self) -> None:
        """Close every pooled connection; the store cannot be used afterwards (closing twice is fine)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        """The database's schema version (the last of :data:`MIGRATIONS` once open)."""
        return self._version

    @property
    def url(self) -> str:
        """The store's URL, password hidden."""
        return self._shown_url

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._dialect

    def __repr__(self) -> str:
        state = "closed" if self._engine is None else f"schema version {self._version}"
        return f"Store({self._shown_url!r}, {state})"

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
        same rows under another batch id change nothing. Within a batch: cluster window rows are written
        first, then the load windows (whose aggregates win over a row's load fields for the same window;
        a row's ``None`` load fields keep what is stored), then alert states, then events (whose alert must
        exist). A load window replaces its window's broker rows. Raises :class:`StoreError` (nothing is
        written) for non-finite numbers, values that are not JSON-serialisable, or constraint violations.
        """
        if not query_name:
            raise StoreError("commit_batch: query_name must not be empty")
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise StoreError(f"commit_batch: batch_id must be a non-negative integer, got {batch_id!r}")
        rows = _BatchRows.build(load_windows, cluster_windows, alert_states, events)
        with self._errors(f"commit batch {batch_id} of query {query_name!r}"), self._write() as conn:
            claimed = conn.execute(
                self._insert(processed_batches_table)
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
                    self._insert(alert_events_table).on_conflict_do_nothing(
                        index_elements=["fingerprint", "sequence"]
                    ),
                    rows.events,
                )
            return True

    def acknowledge(self, fingerprint: str, by: str, at: float) -> bool:
        """Record who acknowledged the alert and when; False when there is no such alert.

        An acknowledgement belongs to one opening of the alert: it is cleared when the alert opens anew
        (its ``opened_at`` changes).
        """
        if not by:
            raise StoreError("acknowledge: 'by' must not be empty")
        at = _finite(at, "acknowledge: at")
        with self._errors(f"acknowledge alert {fingerprint}"), self._write() as conn:
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
        with self._errors("read processed batches"), self._read() as conn:
            return conn.execute(query).first() is not None

    def alert_states(self, cluster: str, states: Collection[str] = ALL_ALERT_STATES) -> dict[str, AlertState]:
        """The cluster's alerts in ``states``, by fingerprint (what the rules resume from after a restart)."""
        query = sa.select(alerts_table).where(
            alerts_table.c.cluster == cluster, alerts_table.c.state.in_(list(states))
        )
        with self._errors(f"read alert states of cluster {cluster!r}"), self._read() as conn:
            return {row.fingerprint: _alert_state(row) for row in conn.execute(query)}

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
        _check_page(limit, offset)
        query = sa.select(alerts_table)
        if cluster is not None:
            query = query.where(alerts_table.c.cluster == cluster)
        if state is not None:
            query = query.where(alerts_table.c.state.in_(_one_or_many(state)))
        if rule is not None:
            query = query.where(alerts_table.c.rule == rule)
        if severity is not None:
            query = query.where(alerts_table.c.severity.in_(_one_or_many(severity)))
        query = (
            query.order_by(alerts_table.c.last_seen.desc(), alerts_table.c.fingerprint)
            .limit(limit)
            .offset(offset)
        )
        with self._errors("read alerts"), self._read() as conn:
            return [_alert_state(row) for row in conn.execute(query)]

    def alert(self, fingerprint: str) -> AlertState | None:
        """One alert, or None."""
        query = sa.select(alerts_table).where(alerts_table.c.fingerprint == fingerprint)
        with self._errors(f"read alert {fingerprint}"), self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else _alert_state(row)

    def acknowledgements(self, fingerprints: Collection[str]) -> dict[str, Acknowledgement]:
        """The acknowledgements of those of ``fingerprints`` that are acknowledged."""
        if not fingerprints:
            return {}
        query = sa.select(
            alerts_table.c.fingerprint, alerts_table.c.acknowledged_by, alerts_table.c.acknowledged_at
        ).where(
            alerts_table.c.fingerprint.in_(list(fingerprints)), alerts_table.c.acknowledged_by.is_not(None)
        )
        with self._errors("read acknowledgements"), self._read() as conn:
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
        _check_page(limit, 0)
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
        with self._errors("read alert events"), self._read() as conn:
            return [_alert_event(row) for row in conn.execute(query.limit(limit))]

    def last_evaluated_window(self, cluster: str) -> float | None:
        """End of the cluster's latest window the rules evaluated, or None."""
        query = sa.select(sa.func.max(cluster_windows_table.c.window_end)).where(
            cluster_windows_table.c.cluster == cluster, cluster_windows_table.c.evaluated
        )
        with self._errors(f"read windows of cluster {cluster!r}"), self._read() as conn:
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
        with self._errors(f"read health history of cluster {cluster!r}"), self._read() as conn:
            return [
                {
                    "cluster": str(row.cluster),
                    "window_start": float(row.window_start),
                    "window_end": float(row.window_end),
                    "controller_id": _opt_int(row.controller_id),
                    "controller_epoch": _opt_int(row.controller_epoch),
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
        _check_page(limit, 0)
        query = sa.select(cluster_windows_table).where(cluster_windows_table.c.cluster == cluster)
        if since is not None:
            query = query.where(cluster_windows_table.c.window_start >= since)
        query = query.order_by(cluster_windows_table.c.window_start).limit(limit)
        with self._errors(f"read windows of cluster {cluster!r}"), self._read() as conn:
            return [_cluster_window(row) for row in conn.execute(query)]

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
        with self._errors("read the latest load window"), self._read() as conn:
            window = conn.execute(query).first()
            if window is None:
                return None
            return self._load_windows(conn, [window])[0]

    def load_history(
        self, cluster: str, since: float, until: float | None = None, limit: int = 1000
    ) -> list[LoadWindow]:
        """The cluster's load windows starting in ``[since, until)``, oldest first, at most ``limit``."""
        _check_page(limit, 0)
        query = sa.select(cluster_windows_table).where(
            cluster_windows_table.c.cluster == cluster,
            cluster_windows_table.c.window_start >= since,
            _has_load(),
        )
        if until is not None:
            query = query.where(cluster_windows_table.c.window_start < until)
        query = query.order_by(cluster_windows_table.c.window_start).limit(limit)
        with self._errors(f"read load history of cluster {cluster!r}"), self._read() as conn:
            return self._load_windows(conn, list(conn.execute(query)))

    def clusters(self) -> list[str]:
        """Every cluster with a window or an alert, sorted."""
        query = sa.union(sa.select(cluster_windows_table.c.cluster), sa.select(alerts_table.c.cluster))
        with self._errors("read clusters"), self._read() as conn:
            return sorted(str(name) for name in conn.execute(query).scalars())

    # -- webhooks and their outbox (app/webhooks; docs/webhooks.md)

    def create_webhook(
        self,
        *,
        name: str,
        url: str,
        format: WebhookFormat,
        rules: Collection[int] | None = None,
        severities: Collection[str] | None = None,
        secret: str | None = None,
        enabled: bool = True,
        created_by: str,
        now: float,
    ) -> Webhook:
        """Add a subscription; it receives the events recorded from now on (those already in the store are
        entered in its outbox as ``skipped``, so that a new webhook is not flooded with history)."""
        values = _webhook_values(
            {
                "name": name,
                "url": url,
                "format": format,
                "rules": rules,
                "severities": severities,
                "secret": secret,
                "enabled": enabled,
            }
        )
        if not created_by:
            raise StoreError("create_webhook: created_by must not be empty")
        now = _finite(now, "create_webhook: now")
        with self._errors(f"create webhook {name!r}"), self._write() as conn:
            webhook_id = int(
                conn.execute(
                    sa.insert(webhooks_table)
                    .values(**values, created_at=now, created_by=created_by, updated_at=now)
                    .returning(webhooks_table.c.id)
                ).scalar_one()
            )
            if values["enabled"]:
                self._skip_recorded_events(conn, webhook_id, now, "recorded before the webhook was created")
            return _webhook(conn.execute(_select_webhook(webhook_id)).one())

    def webhooks(self, *, enabled: bool | None = None) -> list[Webhook]:
        """Every webhook (or only the enabled or disabled ones), by id."""
        query = sa.select(webhooks_table).order_by(webhooks_table.c.id)
        if enabled is not None:
            query = query.where(webhooks_table.c.enabled == enabled)
        with self._errors("read webhooks"), self._read() as conn:
            return [_webhook(row) for row in conn.execute(query)]

    def webhook(self, webhook_id: int) -> Webhook | None:
        """One webhook, or None."""
        with self._errors(f"read webhook {webhook_id}"), self._read() as conn:
            row = conn.execute(_select_webhook(webhook_id)).first()
        return None if row is None else _webhook(row)

    def update_webhook(self, webhook_id: int, changes: Mapping[str, Any], now: float) -> Webhook | None:
        """Change some of ``name``, ``url``, ``format``, ``rules``, ``severities``, ``secret``, ``enabled``;
        None when there is no such webhook.

        Rows already in the outbox keep their payload (rendered in the format of the time) but are sent to
        the current URL with the current secret. Re-enabling a webhook enters the events recorded while it
        was disabled as ``skipped``; its pending deliveries, held while it was disabled, go out again.
        """
        unknown = sorted(set(changes) - _WEBHOOK_FIELDS)
        if unknown:
            raise StoreError(f"update_webhook: unknown fields {unknown}; use {sorted(_WEBHOOK_FIELDS)}")
        values = _webhook_values(changes)
        now = _finite(now, "update_webhook: now")
        with self._errors(f"update webhook {webhook_id}"), self._write() as conn:
            before = conn.execute(_select_webhook(webhook_id)).first()
            if before is None:
                return None
            conn.execute(
                sa.update(webhooks_table)
                .where(webhooks_table.c.id == webhook_id)
                .values(**values, updated_at=now)
            )
            if values.get("enabled") and not before.enabled:
                self._skip_recorded_events(conn, webhook_id, now, "recorded while the webhook was disabled")
            return _webhook(conn.execute(_select_webhook(webhook_id)).one())

    def delete_webhook(self, webhook_id: int) -> bool:
        """Delete the webhook and its outbox rows; False when there is no such webhook."""
        with self._errors(f"delete webhook {webhook_id}"), self._write() as conn:
            conn.execute(
                sa.delete(webhook_deliveries_table).where(webhook_deliveries_table.c.webhook_id == webhook_id)
            )
            result = conn.execute(sa.delete(webhooks_table).where(webhooks_table.c.id == webhook_id))
            return result.rowcount == 1

    def enqueue_deliveries(
        self,
        now: float,
        render: WebhookRenderer,
        *,
        horizon_s: float = DEFAULT_WEBHOOK_HORIZON_S,
        limit: int = 1000,
    ) -> int:
        """Write an outbox row for every (enabled webhook, alert event) pair that has none yet, for events
        at or after ``now - horizon_s``, at most ``limit`` per call; returns how many rows were written.

        Idempotent, and needs no cursor: the candidates are an anti-join on the outbox's unique
        ``(webhook_id, fingerprint, sequence)``, so events committed late or out of order are found, and a
        concurrent call inserts nothing twice. An event is ``pending`` when it passes the webhook's filter,
        or when it follows (updated, resolved) an event of the same run of its alert that was sent to the
        webhook, so that a receiver that saw an alert open also sees it resolve; otherwise ``skipped``,
        with the reason. The payload is rendered now (a failing ``render`` makes the row ``dead``).
        """
        _check_page(limit, 0)
        now = _finite(now, "enqueue_deliveries: now")
        w, e, a = webhooks_table.c, alert_events_table.c, alerts_table.c
        d = webhook_deliveries_table.c
        recorded = sa.exists().where(
            d.webhook_id == w.id, d.fingerprint == e.fingerprint, d.sequence == e.sequence
        )
        candidates = (
            sa.select(
                w.id.label("webhook_id"),
                e.fingerprint,
                e.sequence,
                e.kind,
                e.at,
                e.severity,
                e.summary,
                e.evidence,
                a.cluster,
                a.rule,
                a.subject,
                a.action,
            )
            .select_from(
                webhooks_table.join(alert_events_table, sa.true()).join(
                    alerts_table, a.fingerprint == e.fingerprint
                )
            )
            .where(w.enabled, e.at >= now - horizon_s, ~recorded)
            .order_by(w.id, e.fingerprint, e.sequence)
            .limit(limit)
        )
        with self._errors("read alert events for webhooks"), self._read() as conn:
            rows: list[sa.Row[Any]] = list(conn.execute(candidates))
            if not rows:
                return 0
            hook_ids = sorted({int(r.webhook_id) for r in rows})
            fingerprints = sorted({str(r.fingerprint) for r in rows})
            hooks = {
                h.id: h
                for h in (
                    _webhook(r) for r in conn.execute(sa.select(webhooks_table).where(w.id.in_(hook_ids)))
                )
            }
            openings: dict[str, list[tuple[int, float]]] = {}
            for opening in conn.execute(
                sa.select(e.fingerprint, e.sequence, e.at)
                .where(e.fingerprint.in_(fingerprints), e.kind == "opened")
                .order_by(e.fingerprint, e.sequence)
            ):
                openings.setdefault(str(opening.fingerprint), []).append(
                    (int(opening.sequence), float(opening.at))
                )
            sent: dict[tuple[int, str], set[int]] = {}
            for delivered in conn.execute(
                sa.select(d.webhook_id, d.fingerprint, d.sequence).where(
                    d.webhook_id.in_(hook_ids), d.fingerprint.in_(fingerprints), d.state != "skipped"
                )
            ):
                key = (int(delivered.webhook_id), str(delivered.fingerprint))
                sent.setdefault(key, set()).add(int(delivered.sequence))
        outbox: list[dict[str, Any]] = []
        for candidate in rows:
            hook = hooks[int(candidate.webhook_id)]
            event = _alert_event(candidate)
            run_start, opened_at = 0, None
            for sequence, at in openings.get(event.fingerprint, []):
                if sequence <= event.sequence:
                    run_start, opened_at = sequence, at
            notice = AlertNotice(
                event=event,
                cluster=str(candidate.cluster),
                rule=int(candidate.rule),
                subject=str(candidate.subject),
                action=_action(candidate.action),
                opened_at=opened_at,
            )
            earlier = sent.setdefault((hook.id, event.fingerprint), set())
            reason = hook.mismatch(notice.rule, event.severity)
            if (
                reason is not None
                and event.kind != "opened"
                and any(run_start <= s < event.sequence for s in earlier)
            ):
                reason = None  # a follow-up of an event the receiver got
            state: DeliveryState = "pending" if reason is None else "skipped"
            error = None if reason is None else f"not sent: {reason}"
            payload = None
            if state == "pending":
                earlier.add(event.sequence)
                try:
                    payload = render(hook, notice)
                except Exception as exc:  # a bug in a renderer must not stop the outbox
                    state, error = "dead", f"cannot render the payload: {type(exc).__name__}: {exc}"
            outbox.append(
                {
                    "webhook_id": hook.id,
                    "fingerprint": event.fingerprint,
                    "sequence": event.sequence,
                    "idempotency_key": notice.idempotency_key,
                    "kind": event.kind,
                    "event_at": event.at,
                    "payload": payload,
                    "state": state,
                    "attempts": 0,
                    "next_attempt_at": now if state == "pending" else None,
                    "last_attempt_at": None,
                    "last_status": None,
                    "last_error": None if error is None else _clip(error),
                    "created_at": now,
                    "delivered_at": None,
                }
            )
        with self._errors("enqueue webhook deliveries"), self._write() as conn:
            written = conn.execute(
                self._insert(webhook_deliveries_table)
                .on_conflict_do_nothing(index_elements=["webhook_id", "fingerprint", "sequence"])
                .returning(d.id),
                outbox,
            )
            return len(written.all())

    def due_deliveries(self, now: float, limit: int = 100) -> list[WebhookDelivery]:
        """Pending deliveries of enabled webhooks due at ``now``, oldest due first, at most ``limit``: only
        the first pending event of each alert per webhook, so that an alert's events arrive in order."""
        _check_page(limit, 0)
        d = webhook_deliveries_table.c
        earlier = webhook_deliveries_table.alias("earlier")
        query = (
            sa.select(webhook_deliveries_table)
            .join(webhooks_table, webhooks_table.c.id == d.webhook_id)
            .where(
                webhooks_table.c.enabled,
                d.state == "pending",
                d.next_attempt_at <= now,
                ~sa.exists().where(
                    earlier.c.webhook_id == d.webhook_id,
                    earlier.c.fingerprint == d.fingerprint,
                    earlier.c.state == "pending",
                    earlier.c.sequence < d.sequence,
                ),
            )
            .order_by(d.next_attempt_at, d.id)
            .limit(limit)
        )
        with self._errors("read due webhook deliveries"), self._read() as conn:
            return [_delivery(row) for row in conn.execute(query)]

    def claim_delivery(self, delivery_id: int, now: float, lease_until: float) -> WebhookDelivery | None:
        """Take a due pending delivery for one attempt: count the attempt and hold the row until
        ``lease_until`` (no other sender picks it before; should this one crash, it is retried then).
        None when it is no longer pending and due (another sender claimed it, or it was delivered)."""
        d = webhook_deliveries_table.c
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == delivery_id, d.state == "pending", d.next_attempt_at <= now)
            .values(attempts=d.attempts + 1, last_attempt_at=now, next_attempt_at=lease_until)
            .returning(*webhook_deliveries_table.columns)
        )
        with self._errors(f"claim webhook delivery {delivery_id}"), self._write() as conn:
            row = conn.execute(statement).first()
        return None if row is None else _delivery(row)

    def mark_delivered(self, delivery_id: int, *, at: float, status: int | None) -> bool:
        """The receiver accepted the delivery; False when it was not pending."""
        return self._settle(
            delivery_id,
            {"state": "delivered", "delivered_at": at, "next_attempt_at": None, "last_status": status},
            error=None,
        )

    def mark_failed(
        self, delivery_id: int, *, next_attempt_at: float, error: str, status: int | None = None
    ) -> bool:
        """The attempt failed and the delivery is to be retried at ``next_attempt_at``."""
        return self._settle(
            delivery_id, {"next_attempt_at": next_attempt_at, "last_status": status}, error=error
        )

    def mark_dead(self, delivery_id: int, *, error: str, status: int | None = None) -> bool:
        """Give up on the delivery (a dead letter, listed until requeued or its webhook is deleted)."""
        return self._settle(
            delivery_id, {"state": "dead", "next_attempt_at": None, "last_status": status}, error=error
        )

    def requeue_delivery(self, delivery_id: int, now: float) -> bool:
        """Send a dead delivery again, from its first attempt, at ``now``; False when it is not dead."""
        d = webhook_deliveries_table.c
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == delivery_id, d.state == "dead", d.payload.is_not(None))
            .values(state="pending", attempts=0, next_attempt_at=now)
        )
        with self._errors(f"requeue webhook delivery {delivery_id}"), self._write() as conn:
            return conn.execute(statement).rowcount == 1

    def delivery(self, delivery_id: int) -> WebhookDelivery | None:
        """One outbox row, or None."""
        query = sa.select(webhook_deliveries_table).where(webhook_deliveries_table.c.id == delivery_id)
        with self._errors(f"read webhook delivery {delivery_id}"), self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else _delivery(row)

    def deliveries(
        self,
        webhook_id: int | None = None,
        *,
        state: str | Collection[str] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[WebhookDelivery]:
        """Outbox rows (of one webhook, in ``state``), newest first."""
        _check_page(limit, offset)
        d = webhook_deliveries_table.c
        query = sa.select(webhook_deliveries_table)
        if webhook_id is not None:
            query = query.where(d.webhook_id == webhook_id)
        if state is not None:
            query = query.where(d.state.in_(_one_or_many(state)))
        query = query.order_by(d.id.desc()).limit(limit).offset(offset)
        with self._errors("read webhook deliveries"), self._read() as conn:
            return [_delivery(row) for row in conn.execute(query)]

    def delivery_stats(self) -> dict[int, dict[DeliveryState, int]]:
        """Outbox rows per webhook and state (every state present, zero when none)."""
        d = webhook_deliveries_table.c
        query = sa.select(d.webhook_id, d.state, sa.func.count()).group_by(d.webhook_id, d.state)
        stats: dict[int, dict[DeliveryState, int]] = {}
        with self._errors("read webhook delivery counts"), self._read() as conn:
            for webhook_id in conn.execute(sa.select(webhooks_table.c.id)).scalars():
                stats[int(webhook_id)] = dict.fromkeys(DELIVERY_STATES, 0)
            for webhook_id, state, count in conn.execute(query):
                stats.setdefault(int(webhook_id), dict.fromkeys(DELIVERY_STATES, 0))[
                    cast(DeliveryState, state)
                ] = int(count)
        return stats

    def prune_deliveries(self, before: float) -> int:
        """Delete delivered and skipped rows of events before ``before`` (event time); returns how many.
        Keep ``before`` at or below ``now - horizon_s`` of :meth:`enqueue_deliveries`, else a pruned event
        still inside the horizon would be entered (and sent) again."""
        d = webhook_deliveries_table.c
        statement = sa.delete(webhook_deliveries_table).where(
            d.state.in_(("delivered", "skipped")), d.event_at < before
        )
        with self._errors("prune webhook deliveries"), self._write() as conn:
            return int(conn.execute(statement).rowcount)

    def _skip_recorded_events(self, conn: Connection, webhook_id: int, now: float, reason: str) -> None:
        """Enter every recorded event that has no outbox row for the webhook as ``skipped``."""
        e, d = alert_events_table.c, webhook_deliveries_table.c
        recorded = sa.exists().where(
            d.webhook_id == webhook_id, d.fingerprint == e.fingerprint, d.sequence == e.sequence
        )
        events = sa.select(
            sa.literal(webhook_id, sa.Integer),
            e.fingerprint,
            e.sequence,
            e.fingerprint.concat(":").concat(sa.cast(e.sequence, sa.Text)),
            e.kind,
            e.at,
            sa.literal("skipped", sa.Text),
            sa.literal(0, sa.Integer),
            sa.literal(f"not sent: {reason}", sa.Text),
            sa.literal(now, sa.Double),
        ).where(~recorded)
        conn.execute(
            sa.insert(webhook_deliveries_table).from_select(
                [
                    "webhook_id",
                    "fingerprint",
                    "sequence",
                    "idempotency_key",
                    "kind",
                    "event_at",
                    "state",
                    "attempts",
                    "last_error",
                    "created_at",
                ],
                events,
            )
        )

    def _settle(self, delivery_id: int, values: dict[str, Any], error: str | None) -> bool:
        d = webhook_deliveries_table.c
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == delivery_id, d.state == "pending")
            .values(**values, last_error=None if error is None else _clip(error))
        )
        with self._errors(f"update webhook delivery {delivery_id}"), self._write() as conn:
            return conn.execute(statement).rowcount == 1

    # -- internals

    # -- runbook actions and the audit log (plain rows: the app layer owns their types)

    def save_action(self, row: Mapping[str, Any]) -> None:
        """Insert or replace one action (a dict with the ``actions`` columns)."""
        values = {c.name: row[c.name] for c in actions_table.columns}
        statement = self._insert(actions_table).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=["id"], set_={k: v for k, v in values.items() if k != "id"}
        )
        with self._errors(f"save action {row.get('id')}"), self._write() as conn:
            conn.execute(statement)

    def action(self, action_id: str) -> dict[str, Any] | None:
        query = sa.select(actions_table).where(actions_table.c.id == action_id)
        with self._errors(f"read action {action_id}"), self._read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else dict(row)

    def actions(self, state: str | None = None, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Newest first."""
        _check_page(limit, offset)
        query = sa.select(actions_table)
        if state is not None:
            query = query.where(actions_table.c.state == state)
        query = (
            query.order_by(actions_table.c.requested_at.desc(), actions_table.c.id)
            .limit(limit)
            .offset(offset)
        )
        with self._errors("read actions"), self._read() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def append_audit(self, row: Mapping[str, Any]) -> int:
        """Append one audit entry (the ``audit_log`` columns but ``sequence``); returns its sequence."""
        values = {c.name: row[c.name] for c in audit_log_table.columns if c.name != "sequence"}
        statement = sa.insert(audit_log_table).values(values).returning(audit_log_table.c.sequence)
        with self._errors("append to the audit log"), self._write() as conn:
            return int(conn.execute(statement).scalar_one())

    def audit_log(self, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Newest first."""
        _check_page(limit, offset)
        query = (
            sa.select(audit_log_table).order_by(audit_log_table.c.sequence.desc()).limit(limit).offset(offset)
        )
        with self._errors("read the audit log"), self._read() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def _engine_or_fail(self) -> Engine:
        if self._engine is None:
            raise StoreError(f"the store at {self._shown_url} is closed")
        return self._engine

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A connection whose statements share one transaction (one snapshot), rolled back at the end."""
        with self._engine_or_fail().connect() as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A connection in a write transaction, committed at the end (rolled back on an exception)."""
        with self._engine_or_fail().connect() as conn:
            conn.execution_options(**{_WRITE: True})
            with conn.begin():
                yield conn

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StoreError(f"{action} failed on {self._shown_url}: {_detail(exc)}") from exc

    def _insert(self, table: sa.Table) -> sqlite.Insert | postgresql.Insert:
        return sqlite.insert(table) if self._dialect == "sqlite" else postgresql.insert(table)

    def _upsert_health_windows(self) -> sa.Insert:
        stmt = self._insert(cluster_windows_table)
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
        stmt = self._insert(cluster_windows_table)
        new = stmt.excluded
        return stmt.on_conflict_do_update(
            index_elements=["cluster", "window_start"],
            set_={"window_end": new.window_end, **{name: new[name] for name in _LOAD_COLUMNS}},
        )

    def _upsert_broker_loads(self) -> sa.Insert:
        stmt = self._insert(load_windows_table)
        new = stmt.excluded
        keys = ("cluster", "window_start", "broker")
        return stmt.on_conflict_do_update(
            index_elements=list(keys),
            set_={c.name: new[c.name] for c in load_windows_table.columns if c.name not in keys},
        )

    def _upsert_alerts(self) -> sa.Insert:
        stmt = self._insert(alerts_table)
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
                target.append(_broker_load(row))
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


def _has_load() -> sa.ColumnElement[bool]:
    c = cluster_windows_table.c
    return sa.and_(c.stddev.is_not(None), c.stddev_threshold.is_not(None), c.rated_deviation.is_not(None))


# --- building a batch's rows (validated before any SQL runs) ----------------------------------------------


@dataclass
class _BatchRows:
    health_windows: list[dict[str, Any]]
    load_aggregates: list[dict[str, Any]]
    window_brokers: dict[tuple[str, float], list[int]]
    broker_loads: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    events: list[dict[str, Any]]

    @staticmethod
    def build(
        load: Sequence[LoadWindow],
        windows: Sequence[ClusterWindowRow],
        states: Sequence[AlertState],
        events: Sequence[AlertEvent],
    ) -> _BatchRows:
        """Rows keyed by primary key (a later duplicate replaces an earlier one; for events the first
        stays, as the database would keep it)."""
        health: dict[tuple[str, float], dict[str, Any]] = {}
        for row in windows:
            where = f"cluster window {_window_name(row.window)}"
            health[row.window.cluster, row.window.start] = {
                **_window_key(row.window, where),
                "brokers": row.brokers,
                "stddev": _opt_finite(row.stddev, f"{where}: stddev"),
                "stddev_threshold": _opt_finite(row.stddev_threshold, f"{where}: stddev_threshold"),
                "rated_deviation": _opt_finite(row.rated_deviation, f"{where}: rated_deviation"),
                "imbalanced": row.imbalanced,
                "controller_id": row.controller_id,
                "controller_epoch": row.controller_epoch,
                "health": None if row.health is None else _json_object(row.health, f"{where}: health"),
                "evaluated": bool(row.evaluated),
            }
        aggregates: dict[tuple[str, float], dict[str, Any]] = {}
        window_brokers: dict[tuple[str, float], list[int]] = {}
        brokers: dict[tuple[str, float], dict[int, dict[str, Any]]] = {}
        for lw in load:
            where = f"load window {_window_name(lw.window)}"
            key = (lw.window.cluster, lw.window.start)
            stddev = _finite(lw.stddev, f"{where}: stddev")
            threshold = _finite(lw.stddev_threshold, f"{where}: stddev_threshold")
            aggregates[key] = {
                **_window_key(lw.window, where),
                "brokers": len(lw.brokers),
                "stddev": stddev,
                "stddev_threshold": threshold,
                "rated_deviation": _finite(lw.rated_deviation, f"{where}: rated_deviation"),
                "imbalanced": stddev > threshold,
                "controller_id": None,
                "controller_epoch": None,
                "health": None,
                "evaluated": False,
            }
            window_rows: dict[int, dict[str, Any]] = {}
            for b in lw.brokers:
                at = f"{where}, broker {b.broker}"
                window_rows[b.broker] = {
                    **_window_key(lw.window, where),
                    "broker": b.broker,
                    "metrics": _float_map(b.metrics, f"{at}: metrics"),
                    "shares": _float_map(b.shares, f"{at}: shares"),
                    "weighted_load": _finite(b.weighted_load, f"{at}: weighted_load"),
                    "normalized_load": _finite(b.normalized_load, f"{at}: normalized_load"),
                    "deviation_rate": _finite(b.deviation_rate, f"{at}: deviation_rate"),
                }
            brokers[key] = window_rows
            window_brokers[key] = sorted(window_rows)
        alert_rows: dict[str, dict[str, Any]] = {}
        for s in states:
            where = f"alert {s.fingerprint}"
            alert_rows[s.fingerprint] = {
                "fingerprint": s.fingerprint,
                "cluster": s.cluster,
                "rule": s.rule,
                "subject": s.subject,
                "severity": s.severity,
                "state": s.state,
                "summary": s.summary,
                "first_seen": _finite(s.first_seen, f"{where}: first_seen"),
                "last_seen": _finite(s.last_seen, f"{where}: last_seen"),
                "opened_at": _opt_finite(s.opened_at, f"{where}: opened_at"),
                "resolved_at": _opt_finite(s.resolved_at, f"{where}: resolved_at"),
                "evidence": _json_object(s.evidence, f"{where}: evidence"),
                "action": None if s.action is None else s.action.to_json(),
                "hits": s.hits,
                "clean": s.clean,
                "last_window_end": _finite(s.last_window_end, f"{where}: last_window_end"),
                "event_sequence": s.event_sequence,
                "acknowledged_by": None,
                "acknowledged_at": None,
            }
        event_rows: dict[tuple[str, int], dict[str, Any]] = {}
        for e in events:
            where = f"event {e.fingerprint}#{e.sequence}"
            event_rows.setdefault(
                (e.fingerprint, e.sequence),
                {
                    "fingerprint": e.fingerprint,
                    "sequence": e.sequence,
                    "kind": e.kind,
                    "at": _finite(e.at, f"{where}: at"),
                    "severity": e.severity,
                    "summary": e.summary,
                    "evidence": _json_object(e.evidence, f"{where}: evidence"),
                },
            )
        return _BatchRows(
            health_windows=list(health.values()),
            load_aggregates=list(aggregates.values()),
            window_brokers=window_brokers,
            broker_loads=[row for rows in brokers.values() for row in rows.values()],
            alerts=list(alert_rows.values()),
            events=list(event_rows.values()),
        )


def _window_name(window: Window) -> str:
    return f"{window.cluster}@[{window.start!r}, {window.end!r})"


def _window_key(window: Window, where: str) -> dict[str, Any]:
    return {
        "cluster": window.cluster,
        "window_start": _finite(window.start, f"{where}: start"),
        "window_end": _finite(window.end, f"{where}: end"),
    }


def _finite(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StoreError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _opt_finite(value: float | None, what: str) -> float | None:
    return None if value is None else _finite(value, what)


def _float_map(values: Mapping[str, float], what: str) -> dict[str, float]:
    return {str(name): _finite(v, f"{what}[{name!r}]") for name, v in values.items()}


def _json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON round-trip copy (so that a bad value fails here, naming the field, not halfway into SQL)."""
    try:
        loaded = json.loads(_json_dumps(value))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} is not JSON-serialisable (finite numbers only): {exc}") from exc
    if not isinstance(loaded, dict):
        raise StoreError(f"{what} must be a JSON object, got {type(value).__name__}")
    return loaded


def _json_dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


# --- reading rows back ------------------------------------------------------------------------------------


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _action(value: Any) -> ActionRef | None:
    if value is None:
        return None
    return ActionRef(method=value["method"], path=str(value["path"]), body=dict(value.get("body") or {}))


def _alert_state(row: sa.Row[Any]) -> AlertState:
    return AlertState(
        fingerprint=str(row.fingerprint),
        cluster=str(row.cluster),
        rule=int(row.rule),
        subject=str(row.subject),
        severity=cast(Severity, row.severity),
        state=cast(AlertStateName, row.state),
        summary=str(row.summary),
        evidence=dict(row.evidence),
        action=_action(row.action),
        hits=int(row.hits),
        clean=int(row.clean),
        first_seen=float(row.first_seen),
        last_seen=float(row.last_seen),
        opened_at=_opt_float(row.opened_at),
        resolved_at=_opt_float(row.resolved_at),
        last_window_end=float(row.last_window_end),
        event_sequence=int(row.event_sequence),
    )


def _alert_event(row: sa.Row[Any]) -> AlertEvent:
    return AlertEvent(
        fingerprint=str(row.fingerprint),
        sequence=int(row.sequence),
        kind=cast(EventKind, row.kind),
        at=float(row.at),
        severity=cast(Severity, row.severity),
        summary=str(row.summary),
        evidence=dict(row.evidence),
    )


def _select_webhook(webhook_id: int) -> sa.Select[Any]:
    return sa.select(webhooks_table).where(webhooks_table.c.id == webhook_id)


def _webhook(row: sa.Row[Any]) -> Webhook:
    return Webhook(
        id=int(row.id),
        name=str(row.name),
        url=str(row.url),
        format=cast(WebhookFormat, row.format),
        rules=None if row.rules is None else tuple(int(r) for r in row.rules),
        severities=None if row.severities is None else tuple(cast(Severity, s) for s in row.severities),
        secret=None if row.secret is None else str(row.secret),
        enabled=bool(row.enabled),
        created_at=float(row.created_at),
        created_by=str(row.created_by),
        updated_at=float(row.updated_at),
    )


def _delivery(row: sa.Row[Any]) -> WebhookDelivery:
    return WebhookDelivery(
        id=int(row.id),
        webhook_id=int(row.webhook_id),
        fingerprint=str(row.fingerprint),
        sequence=int(row.sequence),
        idempotency_key=str(row.idempotency_key),
        kind=cast(EventKind, row.kind),
        event_at=float(row.event_at),
        payload=None if row.payload is None else str(row.payload),
        state=cast(DeliveryState, row.state),
        attempts=int(row.attempts),
        next_attempt_at=_opt_float(row.next_attempt_at),
        last_attempt_at=_opt_float(row.last_attempt_at),
        last_status=_opt_int(row.last_status),
        last_error=None if row.last_error is None else str(row.last_error),
        created_at=float(row.created_at),
        delivered_at=_opt_float(row.delivered_at),
    )


def _webhook_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Checked column values of the webhook fields in ``values`` (lists sorted, duplicates dropped)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        where = f"webhook {name}"
        if name in ("name", "url"):
            if not isinstance(value, str) or not value.strip():
                raise StoreError(f"{where} must be a non-empty string, got {value!r}")
            out[name] = value.strip()
        elif name == "format":
            if value not in WEBHOOK_FORMATS:
                raise StoreError(f"{where} must be one of {', '.join(WEBHOOK_FORMATS)}, got {value!r}")
            out[name] = value
        elif name == "rules":
            if value is not None and (
                isinstance(value, str)
                or not value
                or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in value)
            ):
                raise StoreError(f"{where} must be None (every rule) or positive rule numbers, got {value!r}")
            out[name] = None if value is None else sorted(set(value))
        elif name == "severities":
            if value is not None and (
                isinstance(value, str) or not value or any(s not in SEVERITY_ORDER for s in value)
            ):
                raise StoreError(
                    f"{where} must be None (every severity) or some of critical, warning, info, got {value!r}"
                )
            out[name] = None if value is None else sorted(set(value), key=lambda s: -SEVERITY_ORDER[s])
        elif name == "secret":
            if value is not None and (not isinstance(value, str) or not value):
                raise StoreError("webhook secret must be None (unsigned) or a non-empty string")
            out[name] = value
        elif name == "enabled":
            if not isinstance(value, bool):
                raise StoreError(f"{where} must be a boolean, got {value!r}")
            out[name] = value
    return out


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 3] + "..."


def _broker_load(row: sa.Row[Any]) -> BrokerLoad:
    return BrokerLoad(
        broker=int(row.broker),
        metrics={str(k): float(v) for k, v in row.metrics.items()},
        shares={str(k): float(v) for k, v in row.shares.items()},
        weighted_load=float(row.weighted_load),
        normalized_load=float(row.normalized_load),
        deviation_rate=float(row.deviation_rate),
    )


def _cluster_window(row: sa.Row[Any]) -> ClusterWindowRow:
    return ClusterWindowRow(
        window=Window(str(row.cluster), float(row.window_start), float(row.window_end)),
        brokers=_opt_int(row.brokers),
        stddev=_opt_float(row.stddev),
        stddev_threshold=_opt_float(row.stddev_threshold),
        rated_deviation=_opt_float(row.rated_deviation),
        imbalanced=None if row.imbalanced is None else bool(row.imbalanced),
        controller_id=_opt_int(row.controller_id),
        controller_epoch=_opt_int(row.controller_epoch),
        health=row.health,
        evaluated=bool(row.evaluated),
    )


def _one_or_many(value: str | Collection[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _check_page(limit: int, offset: int) -> None:
    if limit < 0 or offset < 0:
        raise StoreError(f"limit and offset must not be negative, got limit={limit}, offset={offset}")


def _detail(exc: BaseException) -> str:
    """The driver's message (not SQLAlchemy's, which repeats the statement and up to 1,000 parameters)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if isinstance(orig, BaseException) else exc).strip()
    text = f"{type(orig if isinstance(orig, BaseException) else exc).__name__}: {text}"
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


# --- URLs and engines ------------------------------------------------------------------------------------

_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@/]*@")


def _parse_url(url: str) -> URL:
    if not isinstance(url, str) or not url.strip():
        raise StoreError(f"the store URL is empty; use {_URL_FORMS}")
    shown = _PASSWORD_IN_URL.sub(r"\1***@", url)
    try:
        parsed = make_url(url.strip())
    except ArgumentError as exc:
        raise StoreError(f"invalid store URL {shown!r}: use {_URL_FORMS}") from exc
    backend, driver = parsed.get_backend_name(), parsed.drivername.partition("+")[2]
    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise StoreError(f"unsupported SQLite driver {driver!r} in {shown!r}: use sqlite:///PATH")
        if parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory":
            raise StoreError(
                f"the store needs an SQLite file, not an in-memory database: {shown!r}; use sqlite:///PATH"
            )
        return parsed
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise StoreError(
                f"unsupported PostgreSQL driver {driver!r} in {shown!r}: "
                "use postgresql+psycopg:// (psycopg 3)"
            )
        return parsed.set(drivername="postgresql+psycopg")
    raise StoreError(f"unsupported store URL scheme {parsed.drivername!r} in {shown!r}: use {_URL_FORMS}")


def _sqlite_engine(url: URL, shown: str, busy_timeout: float) -> Engine:
    database = url.database or ""
    if not url.query.get("uri"):
        parent = Path(database).expanduser().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot open the store at {shown}: cannot create directory {parent}: {exc}"
            ) from exc
    engine = sa.create_engine(url, json_serializer=_json_dumps, connect_args={"timeout": busy_timeout})

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, begin transactions (see on_begin), so that SELECTs and DDL
        # are transactional too; then set the per-connection pragmas (outside any transaction).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={max(0, round(busy_timeout * 1000))}")
        finally:
            cursor.close()

    def on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    return engine


# --- migrating -------------------------------------------------------------------------------------------


def _migrate(engine: Engine, migrations: Sequence[Migration], shown: str) -> int:
    """Bring the database to the last of ``migrations``; returns that version."""
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise StoreError(
                f"migration list out of order: version {migration.version} at position {expected}"
            )
    target = migrations[-1].version if migrations else 0
    try:
        with engine.connect() as conn:
            version = _current_version(conn)
    except (SQLAlchemyError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the store at {shown}: {_detail(exc)}") from exc
    _refuse_newer(version, target, shown)
    if version == target:
        return version
    step_name = "creating the schema_version table"
    try:
        with engine.connect() as conn:
            conn.execution_options(**{_WRITE: True})
            with conn.begin():
                if engine.dialect.name == "postgresql":  # serialise concurrent start-ups
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK_KEY)))
                conn.exec_driver_sql(_SCHEMA_VERSION_DDL)
                version = _current_version(conn)  # again, under the lock
                _refuse_newer(version, target, shown)
                for migration in migrations[version:]:
                    step_name = f"migration {migration.version} ({migration.description})"
                    for step in migration.steps:
                        if isinstance(step, str):
                            conn.exec_driver_sql(step)
                        else:
                            step(conn)
                    conn.execute(
                        sa.insert(schema_version_table).values(
                            version=migration.version,
                            description=migration.description,
                            applied_at=time.time(),
                        )
                    )
    except StoreError:
        raise
    except (SQLAlchemyError, sqlite3.Error) as exc:
        raise StoreError(
            f"cannot upgrade the store at {shown} from schema version {version} to {target}: "
            f"{step_name} failed (nothing was changed): {_detail(exc)}"
        ) from exc
    return target


def _current_version(conn: Connection) -> int:
    if not sa.inspect(conn).has_table("schema_version"):
        return 0
    value = conn.execute(sa.select(sa.func.max(schema_version_table.c.version))).scalar()
    return 0 if value is None else int(value)


def _refuse_newer(version: int, target: int, shown: str) -> None:
    if version > target:
        raise StoreError(
            f"the store at {shown} has schema version {version}, newer than this kafka-health knows "
            f"({target}): upgrade kafka-health, or point it at another database"
        )
