"""The analytics tables: load and cluster windows, alerts, their events and the processed batches
(migration 1); the hourly load rollups the retention pruner writes before it deletes raw windows, and the
indexes pruning by age reads (migration 5).

The tables below are the schema: the migrations create them from these definitions (and add to a table of
an older database what a later version defined), and the queries are built from them.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from analytics.store.database import DOUBLE_TYPE, JSON_TYPE, TIME_TYPE
from analytics.store.migrations import Migration, add_index

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

_SEVERITIES: Final = "('critical', 'warning', 'info')"

metadata = sa.MetaData()
"""The analytics tables."""

cluster_windows_table = sa.Table(
    "cluster_windows",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("window_start", TIME_TYPE, primary_key=True),
    sa.Column("window_end", TIME_TYPE, nullable=False),
    sa.Column("brokers", sa.Integer),
    sa.Column("stddev", DOUBLE_TYPE),
    sa.Column("stddev_threshold", DOUBLE_TYPE),
    sa.Column("rated_deviation", DOUBLE_TYPE),
    sa.Column("imbalanced", sa.Boolean),
    sa.Column("controller_id", sa.Integer),
    sa.Column("controller_epoch", sa.BigInteger),
    sa.Column("health", JSON_TYPE),
    sa.Column("evaluated", sa.Boolean, nullable=False, server_default=sa.text("FALSE")),
    sa.PrimaryKeyConstraint("cluster", "window_start", name="pk_cluster_windows"),
    sa.CheckConstraint("window_end >= window_start", name="ck_cluster_windows_window"),
    sa.CheckConstraint("brokers >= 0", name="ck_cluster_windows_brokers"),
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
    sa.Column("weighted_load", DOUBLE_TYPE, nullable=False),
    sa.Column("normalized_load", DOUBLE_TYPE, nullable=False),
    sa.Column("deviation_rate", DOUBLE_TYPE, nullable=False),
    sa.PrimaryKeyConstraint("cluster", "window_start", "broker", name="pk_load_windows"),
    sa.ForeignKeyConstraint(
        ["cluster", "window_start"],
        ["cluster_windows.cluster", "cluster_windows.window_start"],
        name="fk_load_windows_window",
        ondelete="CASCADE",
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
    sa.PrimaryKeyConstraint("fingerprint", name="pk_alerts"),
    sa.CheckConstraint(f"severity IN {_SEVERITIES}", name="ck_alerts_severity"),
    sa.CheckConstraint("state IN ('pending', 'open', 'resolved')", name="ck_alerts_state"),
    sa.CheckConstraint("hits >= 0 AND clean >= 0 AND event_sequence >= 0", name="ck_alerts_counters"),
    sa.Index("ix_alerts_cluster_state", "cluster", "state"),
    sa.Index("ix_alerts_rule", "rule"),
    sa.Index("ix_alerts_state_resolved_at", "state", "resolved_at"),
)

alert_events_table = sa.Table(
    "alert_events",
    metadata,
    sa.Column("fingerprint", sa.Text, primary_key=True),
    sa.Column("sequence", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("at", TIME_TYPE, nullable=False),
    sa.Column("severity", sa.Text, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("evidence", JSON_TYPE, nullable=False),
    sa.PrimaryKeyConstraint("fingerprint", "sequence", name="pk_alert_events"),
    sa.ForeignKeyConstraint(
        ["fingerprint"], ["alerts.fingerprint"], name="fk_alert_events_alert", ondelete="CASCADE"
    ),
    sa.CheckConstraint("kind IN ('opened', 'updated', 'resolved')", name="ck_alert_events_kind"),
    sa.CheckConstraint(f"severity IN {_SEVERITIES}", name="ck_alert_events_severity"),
    sa.CheckConstraint("sequence > 0", name="ck_alert_events_sequence"),
    sa.Index("ix_alert_events_at", "at"),
)

processed_batches_table = sa.Table(
    "processed_batches",
    metadata,
    sa.Column("query_name", sa.Text, primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("committed_at", TIME_TYPE, nullable=False),
    sa.PrimaryKeyConstraint("query_name", "batch_id", name="pk_processed_batches"),
    sa.Index("ix_processed_batches_committed_at", "committed_at"),
)

load_rollups_table = sa.Table(
    "load_rollups",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("hour_start", TIME_TYPE, primary_key=True),
    sa.Column("broker", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("windows", sa.Integer, nullable=False),
    sa.Column("weighted_load_avg", DOUBLE_TYPE, nullable=False),
    sa.Column("weighted_load_max", DOUBLE_TYPE, nullable=False),
    sa.Column("normalized_load_avg", DOUBLE_TYPE, nullable=False),
    sa.Column("normalized_load_max", DOUBLE_TYPE, nullable=False),
    sa.Column("deviation_rate_avg", DOUBLE_TYPE, nullable=False),
    sa.Column("deviation_rate_min", DOUBLE_TYPE, nullable=False),
    sa.Column("deviation_rate_max", DOUBLE_TYPE, nullable=False),
    sa.PrimaryKeyConstraint("cluster", "hour_start", "broker", name="pk_load_rollups"),
    sa.CheckConstraint("windows > 0", name="ck_load_rollups_windows"),
)

cluster_rollups_table = sa.Table(
    "cluster_rollups",
    metadata,
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("hour_start", TIME_TYPE, primary_key=True),
    sa.Column("windows", sa.Integer, nullable=False),
    sa.Column("brokers_max", sa.Integer, nullable=False),
    sa.Column("stddev_avg", DOUBLE_TYPE, nullable=False),
    sa.Column("stddev_max", DOUBLE_TYPE, nullable=False),
    sa.Column("stddev_threshold_avg", DOUBLE_TYPE, nullable=False),
    sa.Column("rated_deviation_avg", DOUBLE_TYPE, nullable=False),
    sa.Column("imbalanced_windows", sa.Integer, nullable=False),
    sa.PrimaryKeyConstraint("cluster", "hour_start", name="pk_cluster_rollups"),
    sa.CheckConstraint("windows > 0 AND imbalanced_windows >= 0", name="ck_cluster_rollups_windows"),
)


ANALYTICS_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        1,
        "initial schema: load and cluster windows, alerts, alert events, processed batches",
        creates=(
            cluster_windows_table,
            load_windows_table,
            alerts_table,
            alert_events_table,
            processed_batches_table,
        ),
    ),
    Migration(
        5,
        "retention: hourly load rollups, indexes for pruning by age",
        creates=(load_rollups_table, cluster_rollups_table),
        # what the retention pruner's age predicates read (the windows' primary keys start with
        # (cluster, window_start); alert events, actions, the audit log and the outbox have their indexes)
        changes=(
            add_index(alerts_table, "ix_alerts_state_resolved_at"),
            add_index(processed_batches_table, "ix_processed_batches_committed_at"),
        ),
    ),
)
"""The analytics tables' migrations (versions 1 and 5). The webhooks' (2, 7) and the actions' (3, 4, 6)
come between and after them in the full list the app layer composes in version order
(``app/storage.py``); an analytics-only database (the Spark job's own) records 1 and 5, and takes the
others when the service opens it."""
