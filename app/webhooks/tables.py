"""The webhook tables: ``webhooks`` (the subscriptions) and ``webhook_deliveries`` (the outbox), with the
migration that creates them (version 2), the one that gives a webhook its clusters (version 7) and the
one that adds the silences and the outbox's ``silenced_by`` (version 8).

The outbox references the analytics tables' alert events (an outbox row is one alert event for one webhook,
and goes when its event is deleted), so migration 2 comes after the analytics tables' migration 1 in the
full list (``app/storage.py``). The tables below are the schema: the migrations create them from these
definitions, and the queries are built from them.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from analytics.store import Migration
from analytics.store.database import JSON_TYPE, TIME_TYPE
from analytics.store.migrations import add_column
from analytics.store.tables import alert_events_table
from app.silences.tables import silences_table

__all__ = ["WEBHOOK_MIGRATIONS", "metadata", "webhook_deliveries_table", "webhooks_table"]

_EVENT_KINDS: Final = "('opened', 'updated', 'resolved')"

metadata = sa.MetaData()
"""The webhook tables."""

webhooks_table = sa.Table(
    "webhooks",
    metadata,
    # SQLite: AUTOINCREMENT, so that an id is never reused after a delete
    sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("format", sa.Text, nullable=False),
    sa.Column("rules", JSON_TYPE),
    sa.Column("severities", JSON_TYPE),
    sa.Column("secret", sa.Text),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.text("TRUE")),
    sa.Column("created_at", TIME_TYPE, nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("updated_at", TIME_TYPE, nullable=False),
    # the clusters a webhook gets the events of (a JSON array of cluster keys); NULL: every cluster
    sa.Column("clusters", JSON_TYPE),
    sa.CheckConstraint("format IN ('generic', 'alertmanager', 'slack')", name="ck_webhooks_format"),
    sqlite_autoincrement=True,
)

webhook_deliveries_table = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), sa.Identity(), primary_key=True),
    sa.Column("webhook_id", sa.Integer, nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("sequence", sa.Integer, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("event_at", TIME_TYPE, nullable=False),
    sa.Column("payload", sa.Text),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("next_attempt_at", TIME_TYPE),
    sa.Column("last_attempt_at", TIME_TYPE),
    sa.Column("last_status", sa.Integer),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", TIME_TYPE, nullable=False),
    sa.Column("delivered_at", TIME_TYPE),
    # a skipped row's silences (a JSON array of ids): the event was silenced, and its alert pages when they
    # end if it is still open (WebhookStore.release_silenced); NULL for every other row
    sa.Column("silenced_by", JSON_TYPE),
    sa.ForeignKeyConstraint(
        ["webhook_id"], ["webhooks.id"], name="fk_webhook_deliveries_webhook", ondelete="CASCADE"
    ),
    sa.ForeignKeyConstraint(
        ["fingerprint", "sequence"],
        [alert_events_table.c.fingerprint, alert_events_table.c.sequence],
        name="fk_webhook_deliveries_event",
        ondelete="CASCADE",
    ),
    sa.UniqueConstraint("webhook_id", "fingerprint", "sequence", name="uq_webhook_deliveries_event"),
    sa.UniqueConstraint("webhook_id", "idempotency_key", name="uq_webhook_deliveries_key"),
    sa.CheckConstraint(
        "state IN ('pending', 'delivered', 'dead', 'skipped')", name="ck_webhook_deliveries_state"
    ),
    sa.CheckConstraint(f"kind IN {_EVENT_KINDS}", name="ck_webhook_deliveries_kind"),
    sa.CheckConstraint("attempts >= 0 AND sequence > 0", name="ck_webhook_deliveries_counters"),
    sa.Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
    sa.Index("ix_webhook_deliveries_event_at", "event_at"),
    sqlite_autoincrement=True,
)


WEBHOOK_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(2, "webhooks and their delivery outbox", creates=(webhooks_table, webhook_deliveries_table)),
    Migration(7, "webhooks per cluster", changes=(add_column(webhooks_table, "clusters"),)),
    Migration(
        8,
        "silences, and the outbox rows a silence held",
        creates=(silences_table,),
        changes=(add_column(webhook_deliveries_table, "silenced_by"),),
    ),
)
"""The webhook tables' migrations (version 2: after the analytics tables', whose events it references; 7:
a webhook's clusters, NULL for the webhooks created before it, which get every cluster's events; 8: the
silences (:mod:`app.silences.tables`) and the outbox rows they held)."""
