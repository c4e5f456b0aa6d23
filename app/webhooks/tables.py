"""The webhook tables: ``webhooks`` (the subscriptions) and ``webhook_deliveries`` (the outbox), with the
migration that creates them (version 2), the one that gives a webhook its clusters (version 7), the one
that lets its format be ``alertmanager-api`` (version 8) and the one that adds the silences and the
outbox's ``silenced_by`` (version 9).

The outbox references the analytics tables' alert events (an outbox row is one alert event for one webhook,
and goes when its event is deleted), so migration 2 comes after the analytics tables' migration 1 in the
full list (``app/storage.py``). The tables below are the schema: the migrations create them from these
definitions, and the queries are built from them.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analytics.store import Migration
from analytics.store.database import JSON_TYPE, TIME_TYPE
from analytics.store.migrations import TableChange, add_column
from analytics.store.tables import alert_events_table
from app.silences.tables import silences_table
from app.webhooks.model import WEBHOOK_FORMATS

__all__ = ["WEBHOOK_MIGRATIONS", "metadata", "webhook_deliveries_table", "webhooks_table"]

_EVENT_KINDS: Final = "('opened', 'updated', 'resolved')"
_FORMATS_CHECK: Final = "format IN ({})".format(", ".join(f"'{f}'" for f in WEBHOOK_FORMATS))
_FORMATS_CHECK_7: Final = "format IN ('generic', 'alertmanager', 'slack')"
"""The formats check of schema versions 2 to 7 (as created then: migration 8 replaces it)."""

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
    sa.CheckConstraint(_FORMATS_CHECK, name="ck_webhooks_format"),
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


def _widen_formats_check(conn: Connection) -> None:
    """Replace ``webhooks``' format check of versions 2-7 by the definition's, which allows more formats.

    PostgreSQL drops the constraint and adds the new one. SQLite cannot alter a constraint, and rebuilding
    the table would cascade-delete its outbox rows (foreign keys are on, and cannot be turned off inside the
    migration's transaction): the constraint's text is changed in the schema table instead, the procedure
    SQLite documents for changing a CHECK constraint (sqlite.org/lang_altertable.html, "making other kinds
    of table schema changes"; every row passes the new check, as it only allows more)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("ALTER TABLE webhooks DROP CONSTRAINT ck_webhooks_format")
        conn.exec_driver_sql(
            f"ALTER TABLE webhooks ADD CONSTRAINT ck_webhooks_format CHECK ({_FORMATS_CHECK})"
        )
        return
    sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'webhooks'")
    old = str(sql.scalar_one())
    if _FORMATS_CHECK_7 not in old:
        raise RuntimeError(f"the webhooks table has no check {_FORMATS_CHECK_7!r}: {old}")
    version = int(conn.exec_driver_sql("PRAGMA schema_version").scalar_one())
    conn.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        conn.exec_driver_sql(
            "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'webhooks'",
            (old.replace(_FORMATS_CHECK_7, _FORMATS_CHECK),),
        )
        conn.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    finally:
        conn.exec_driver_sql("PRAGMA writable_schema = OFF")
    problems = [str(row[0]) for row in conn.exec_driver_sql("PRAGMA integrity_check")]
    if problems != ["ok"]:
        raise RuntimeError(f"the database fails its integrity check after the change: {problems}")


WEBHOOK_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(2, "webhooks and their delivery outbox", creates=(webhooks_table, webhook_deliveries_table)),
    Migration(7, "webhooks per cluster", changes=(add_column(webhooks_table, "clusters"),)),
    Migration(
        8,
        "webhooks in Alertmanager's API format",
        changes=(TableChange(webhooks_table.name, (_widen_formats_check,)),),
    ),
    Migration(
        9,
        "silences, and the outbox rows a silence held",
        creates=(silences_table,),
        changes=(add_column(webhook_deliveries_table, "silenced_by"),),
    ),
)
"""The webhook tables' migrations (version 2: after the analytics tables', whose events it references; 7:
a webhook's clusters, NULL for the webhooks created before it, which get every cluster's events; 8: the
``alertmanager-api`` format; 9: the silences (:mod:`app.silences.tables`) and the outbox rows they
held)."""
