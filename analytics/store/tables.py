"""The analytics tables: load and cluster windows, alerts, their events and the processed batches, with the
migration that creates them (version 1); the hourly load rollups the retention pruner writes before it
deletes raw windows, and the indexes pruning by age reads (version 5).

The migration is the DDL of record. The tables here describe the schema it leaves behind and are what the
queries are built from; a test (tests/app/test_storage.py) checks that the two agree.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from analytics.store.database import JSON_TYPE, TIME_TYPE
from analytics.store.migrations import Migration, MigrationStep

__all__ = [
    "ANALYTICS_MIGRATIONS",
    "ROLLUP_S",
    "alert_events_table",
    "alerts_table",
    "cluster_rollups_table",
    "cluster_windows_table",
    "load_rollups_table",
    "load_windows_table",
    "metadata",
    "processed_batches_table",
]

ROLLUP_S: Final = 3600.0
"""The rollups' period: a row per broker (``load_rollups``) and per cluster (``cluster_rollups``) an hour."""

metadata = sa.MetaData()
"""The analytics tables as :data:`ANALYTICS_MIGRATIONS` create them (for queries, not for creating them)."""

cluster_windows_table = sa.Table(
    "cluster_windows",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("window_start", TIME_TYPE, primary_key=True),
    sa.Column("window_end", TIME_TYPE, nullable=False),
    sa.Column("brokers", sa.Integer),
    sa.Column("stddev", sa.Double),
    sa.Column("stddev_threshold", sa.Double),
    sa.Column("rated_deviation", sa.Double),
    sa.Column("imbalanced", sa.Boolean),
    sa.Column("controller_id", sa.Integer),
    sa.Column("controller_epoch", sa.BigInteger),
    sa.Column("health", JSON_TYPE),
    sa.Column("evaluated", sa.Boolean, nullable=False),
)

load_windows_table = sa.Table(
    "load_windows",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("window_start", TIME_TYPE, primary_key=True),
    sa.Column("window_end", TIME_TYPE, nullable=False),
    sa.Column("broker", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("metrics", JSON_TYPE, nullable=False),
    sa.Column("shares", JSON_TYPE, nullable=False),
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
    sa.Column("first_seen", TIME_TYPE, nullable=False),
    sa.Column("last_seen", TIME_TYPE, nullable=False),
    sa.Column("opened_at", TIME_TYPE),
    sa.Column("resolved_at", TIME_TYPE),
    sa.Column("evidence", JSON_TYPE, nullable=False),
    sa.Column("action", JSON_TYPE),
    sa.Column("hits", sa.Integer, nullable=False),
    sa.Column("clean", sa.Integer, nullable=False),
    sa.Column("last_window_end", TIME_TYPE, nullable=False),
    sa.Column("event_sequence", sa.Integer, nullable=False),
    sa.Column("acknowledged_by", sa.Text),
    sa.Column("acknowledged_at", TIME_TYPE),
    sa.Index("ix_alerts_cluster_state", "cluster", "state"),
    sa.Index("ix_alerts_rule", "rule"),
    sa.Index("ix_alerts_state_resolved_at", "state", "resolved_at"),
)

alert_events_table = sa.Table(
    "alert_events",
    metadata,
    sa.Column("fingerprint", sa.Text, sa.ForeignKey("alerts.fingerprint"), primary_key=True),
    sa.Column("sequence", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("at", TIME_TYPE, nullable=False),
    sa.Column("severity", sa.Text, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("evidence", JSON_TYPE, nullable=False),
    sa.Index("ix_alert_events_at", "at"),
)

processed_batches_table = sa.Table(
    "processed_batches",
    metadata,
    sa.Column("query_name", sa.Text, primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("committed_at", TIME_TYPE, nullable=False),
    sa.Index("ix_processed_batches_committed_at", "committed_at"),
)

load_rollups_table = sa.Table(
    "load_rollups",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("hour_start", TIME_TYPE, primary_key=True),
    sa.Column("broker", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("windows", sa.Integer, nullable=False),
    sa.Column("weighted_load_avg", sa.Double, nullable=False),
    sa.Column("weighted_load_max", sa.Double, nullable=False),
    sa.Column("normalized_load_avg", sa.Double, nullable=False),
    sa.Column("normalized_load_max", sa.Double, nullable=False),
    sa.Column("deviation_rate_avg", sa.Double, nullable=False),
    sa.Column("deviation_rate_min", sa.Double, nullable=False),
    sa.Column("deviation_rate_max", sa.Double, nullable=False),
)

cluster_rollups_table = sa.Table(
    "cluster_rollups",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("hour_start", TIME_TYPE, primary_key=True),
    sa.Column("windows", sa.Integer, nullable=False),
    sa.Column("brokers_max", sa.Integer, nullable=False),
    sa.Column("stddev_avg", sa.Double, nullable=False),
    sa.Column("stddev_max", sa.Double, nullable=False),
    sa.Column("stddev_threshold_avg", sa.Double, nullable=False),
    sa.Column("rated_deviation_avg", sa.Double, nullable=False),
    sa.Column("imbalanced_windows", sa.Integer, nullable=False),
)


# --- migration 1 --------------------------------------------------------------------------------------

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


# --- migration 5 --------------------------------------------------------------------------------------

_V5_RETENTION: Final[tuple[MigrationStep, ...]] = (
    """CREATE TABLE load_rollups (
        cluster TEXT NOT NULL,
        hour_start DOUBLE PRECISION NOT NULL,
        broker INTEGER NOT NULL,
        windows INTEGER NOT NULL,
        weighted_load_avg DOUBLE PRECISION NOT NULL,
        weighted_load_max DOUBLE PRECISION NOT NULL,
        normalized_load_avg DOUBLE PRECISION NOT NULL,
        normalized_load_max DOUBLE PRECISION NOT NULL,
        deviation_rate_avg DOUBLE PRECISION NOT NULL,
        deviation_rate_min DOUBLE PRECISION NOT NULL,
        deviation_rate_max DOUBLE PRECISION NOT NULL,
        CONSTRAINT pk_load_rollups PRIMARY KEY (cluster, hour_start, broker),
        CONSTRAINT ck_load_rollups_windows CHECK (windows > 0)
    )""",
    """CREATE TABLE cluster_rollups (
        cluster TEXT NOT NULL,
        hour_start DOUBLE PRECISION NOT NULL,
        windows INTEGER NOT NULL,
        brokers_max INTEGER NOT NULL,
        stddev_avg DOUBLE PRECISION NOT NULL,
        stddev_max DOUBLE PRECISION NOT NULL,
        stddev_threshold_avg DOUBLE PRECISION NOT NULL,
        rated_deviation_avg DOUBLE PRECISION NOT NULL,
        imbalanced_windows INTEGER NOT NULL,
        CONSTRAINT pk_cluster_rollups PRIMARY KEY (cluster, hour_start),
        CONSTRAINT ck_cluster_rollups_windows CHECK (windows > 0 AND imbalanced_windows >= 0)
    )""",
    # what the retention pruner's age predicates read (the windows' primary keys already start with
    # (cluster, window_start); alert events, actions, the audit log and the outbox have theirs)
    "CREATE INDEX ix_alerts_state_resolved_at ON alerts (state, resolved_at)",
    "CREATE INDEX ix_processed_batches_committed_at ON processed_batches (committed_at)",
)


ANALYTICS_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        1, "initial schema: load and cluster windows, alerts, alert events, processed batches", _V1_INITIAL
    ),
    Migration(5, "retention: hourly load rollups, indexes for pruning by age", _V5_RETENTION),
)
"""The analytics tables' migrations (versions 1 and 5). The webhooks' (2) and the actions' (3, 4) come
between them in the full list the app layer composes in version order (``app/storage.py``); an
analytics-only database (the Spark job's own) records 1 and 5, and takes 2-4 when the service opens it."""
