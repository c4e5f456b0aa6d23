"""The ``rolling_restarts`` table (migration 10): the service's rolling restarts, each row one run's journal
(:class:`app.maintenance.journal.RunRecord` as JSON), rewritten before and after every step, so that the
service's leader resumes a run where the last one left it. The table below is the schema: the migration
creates it from this definition, and the queries are built from it."""

from __future__ import annotations

import sqlalchemy as sa

from analytics.store import Migration
from analytics.store.database import JSON_TYPE, TIME_TYPE

__all__ = ["MAINTENANCE_MIGRATIONS", "metadata", "rolling_restarts_table"]

metadata = sa.MetaData()

rolling_restarts_table = sa.Table(
    "rolling_restarts",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    # the named cluster it restarts; NULL: the single unnamed cluster
    sa.Column("cluster", sa.Text),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("requested_by", sa.Text, nullable=False),
    sa.Column("requested_at", TIME_TYPE, nullable=False),
    sa.Column("updated_at", TIME_TYPE, nullable=False),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    # the service instance conducting it now (a new leader takes it over)
    sa.Column("owner", sa.Text),
    # the run's journal: RunRecord.to_json()
    sa.Column("record", JSON_TYPE, nullable=False),
    sa.Index("ix_rolling_restarts_state", "state"),
)

MAINTENANCE_MIGRATIONS = (Migration(10, "the service's rolling restarts", creates=(rolling_restarts_table,)),)
"""Version 10: the service's rolling restarts (after the silences' 9)."""
