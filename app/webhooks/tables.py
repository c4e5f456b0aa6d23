"""The webhook tables: ``webhooks`` (the subscriptions) and ``webhook_deliveries`` (the outbox), with the
migration that creates them (version 2) and the one that gives a webhook its clusters (version 7).

The outbox references the analytics tables' alert events (an outbox row is one alert event for one webhook,
and goes when its event is deleted), so migration 2 comes after the analytics tables' migration 1 in the
full list (``app/storage.py``).
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analytics.store import Migration
from analytics.store.database import JSON_TYPE, TIME_TYPE
from analytics.store.tables import alert_events_table

__all__ = ["WEBHOOK_MIGRATIONS", "metadata", "webhook_deliveries_table", "webhooks_table"]


# --- the tables ------------------------------------------------------------------------------------------
#
# Migrations 2 and 7 below are the DDL of record; these tables describe the schema they leave behind and
# are what the queries are built from (tests/app/test_storage.py checks that the two agree).

metadata = sa.MetaData()
"""The webhook tables, as :data:`WEBHOOK_MIGRATIONS` create them (for queries, not for creating them)."""

webhooks_table = sa.Table(
    "webhooks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("format", sa.Text, nullable=False),
    sa.Column("rules", JSON_TYPE),
    sa.Column("severities", JSON_TYPE),
    sa.Column("secret", sa.Text),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("created_at", TIME_TYPE, nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("updated_at", TIME_TYPE, nullable=False),
    sa.Column("clusters", JSON_TYPE),
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
    sa.Column("event_at", TIME_TYPE, nullable=False),
    sa.Column("payload", sa.Text),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", TIME_TYPE),
    sa.Column("last_attempt_at", TIME_TYPE),
    sa.Column("last_status", sa.Integer),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", TIME_TYPE, nullable=False),
    sa.Column("delivered_at", TIME_TYPE),
    sa.ForeignKeyConstraint(
        ["fingerprint", "sequence"], [alert_events_table.c.fingerprint, alert_events_table.c.sequence]
    ),
    sa.UniqueConstraint("webhook_id", "fingerprint", "sequence", name="uq_webhook_deliveries_event"),
    sa.UniqueConstraint("webhook_id", "idempotency_key", name="uq_webhook_deliveries_key"),
    sa.Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
    sa.Index("ix_webhook_deliveries_event_at", "event_at"),
)

# --- migration 2 --------------------------------------------------------------------------------------

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


# --- migration 7 --------------------------------------------------------------------------------------

_V7_CLUSTERS: Final = ("ALTER TABLE webhooks ADD COLUMN clusters JSON",)
"""Migration 7: the clusters a webhook gets the events of (a JSON array of cluster keys; NULL: every cluster,
which is what the webhooks created before it keep)."""


WEBHOOK_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(2, "webhooks and their delivery outbox", (_create_webhook_tables,)),
    Migration(7, "webhooks per cluster", _V7_CLUSTERS),
)
"""The webhook tables' migrations (version 2: after the analytics tables', whose events it references; 7:
a webhook's clusters)."""
