"""The ``silences`` table (created by migration 9, with the webhook outbox's ``silenced_by``:
:data:`app.webhooks.tables.WEBHOOK_MIGRATIONS`). The table below is the schema: the migration creates it
from this definition, and the queries are built from it."""

from __future__ import annotations

import sqlalchemy as sa

from analytics.store.database import JSON_TYPE, TIME_TYPE

__all__ = ["metadata", "silences_table"]

metadata = sa.MetaData()
"""The silences' table."""

silences_table = sa.Table(
    "silences",
    metadata,
    # SQLite: AUTOINCREMENT, so that an id is never reused
    sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
    # a JSON array of {"name", "value", "regex"}
    sa.Column("matchers", JSON_TYPE, nullable=False),
    # {"broker": N}, or NULL
    sa.Column("maintenance", JSON_TYPE),
    sa.Column("starts_at", TIME_TYPE, nullable=False),
    sa.Column("ends_at", TIME_TYPE, nullable=False),
    sa.Column("comment", sa.Text, nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("created_at", TIME_TYPE, nullable=False),
    sa.Column("expired_by", sa.Text),
    sa.Column("expired_at", TIME_TYPE),
    sa.CheckConstraint("ends_at > starts_at OR expired_at IS NOT NULL", name="ck_silences_window"),
    sa.Index("ix_silences_ends_at", "ends_at"),
    sqlite_autoincrement=True,
)
