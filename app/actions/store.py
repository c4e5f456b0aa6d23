"""The runbook actions' data: the ``actions`` table (one row per action: its request, plan, progress, result
and state) and the append-only ``audit_log``, their migrations (versions 3, 4 and 6), and
:class:`StoreActionLog`, the :class:`~app.actions.state.ActionLog` the service keeps them in, so that they
survive restarts and every instance of the service on one database shares them.

Both tables are per cluster (migration 6): a row's ``cluster`` is the named cluster it belongs to, NULL for
the single unnamed cluster of a deployment without named clusters (every row written before migration 6).
A :class:`StoreActionLog` is one cluster's and sees only that cluster's rows.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analytics.store import Database, Migration
from analytics.store.database import JSON_TYPE, TIME_TYPE, check_page, opt_float
from analytics.store.migrations import TableChange, add_column, add_index
from app.actions.state import (
    UNFINISHED,
    ActionRecord,
    ActionState,
    AuditEntry,
    StaleRecordError,
    bounded_detail,
)

__all__ = [
    "ACTION_MIGRATIONS",
    "MAX_CLUSTER",
    "StoreActionLog",
    "actions_table",
    "audit_log_table",
    "metadata",
]

MAX_CLUSTER: Final = 255
"""The longest cluster name an action log is scoped to."""


# --- the tables ------------------------------------------------------------------------------------------
#
# The schema: migrations 3, 4 and 6 below create these tables from these definitions (and bring a table of
# an older database to them), and the queries are built from them.

_STATES: Final = "(" + ", ".join(f"'{state.value}'" for state in ActionState) + ")"

metadata = sa.MetaData()
"""The action tables."""

actions_table = sa.Table(
    "actions",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("requested_by", sa.Text, nullable=False),
    sa.Column("requested_at", TIME_TYPE, nullable=False),
    sa.Column("request", JSON_TYPE, nullable=False),
    sa.Column("plan", JSON_TYPE, nullable=False),
    sa.Column("progress", JSON_TYPE, nullable=False),
    sa.Column("result", JSON_TYPE, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("started_at", TIME_TYPE),
    sa.Column("finished_at", TIME_TYPE),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.text("FALSE")),
    sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("1")),
    sa.Column("owner", sa.Text),
    sa.Column("parent", sa.Text),
    sa.Column("cluster", sa.Text),
    sa.CheckConstraint(f"state IN {_STATES}", name="ck_actions_state"),
    sa.Index("ix_actions_requested_at", "requested_at"),
    sa.Index("ix_actions_state", "state"),
    sa.Index("ix_actions_cluster_state", "cluster", "state"),
)

audit_log_table = sa.Table(
    "audit_log",
    metadata,
    # append-only, ordered by ``sequence`` (SQLite: AUTOINCREMENT, never reused)
    sa.Column(
        "sequence", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), sa.Identity(), primary_key=True
    ),
    sa.Column("at", TIME_TYPE, nullable=False),
    sa.Column("who", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("action_id", sa.Text),
    sa.Column("detail", JSON_TYPE, nullable=False),
    sa.Column("cluster", sa.Text),
    sa.Index("ix_audit_log_at", "at"),
    sa.Index("ix_audit_log_cluster", "cluster", "sequence"),
    sqlite_autoincrement=True,
)


# --- migration 4, on a database of version 3 ---------------------------------------------------------------
#
# The STALLED state, a version for compare-and-set updates, the executing instance (``owner``) and a
# rollback's link to the action it undoes (``parent``). SQLite cannot change a CHECK constraint in place:
# the table is rebuilt into the shape of version 4, ``actions_v4``, and its rows copied.

_V4_STATES: Final = "('PENDING', 'RUNNING', 'STALLED', 'SUCCEEDED', 'PARTIAL', 'FAILED', 'CANCELLED')"

_V4_ACTIONS_SQLITE: Final = (
    f"""CREATE TABLE actions_v4 (
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
        version BIGINT NOT NULL DEFAULT 1,
        owner TEXT,
        parent TEXT,
        CONSTRAINT ck_actions_state CHECK (state IN {_V4_STATES})
    )""",
    """INSERT INTO actions_v4 (id, kind, state, requested_by, requested_at, request, plan, progress, result,
        error, started_at, finished_at, cancel_requested)
        SELECT id, kind, state, requested_by, requested_at, request, plan, progress, result, error,
        started_at, finished_at, cancel_requested FROM actions""",
    "DROP TABLE actions",
    "ALTER TABLE actions_v4 RENAME TO actions",
    "CREATE INDEX ix_actions_requested_at ON actions (requested_at)",
)
_V4_ACTIONS_POSTGRESQL: Final = (
    "ALTER TABLE actions ADD COLUMN version BIGINT NOT NULL DEFAULT 1",
    "ALTER TABLE actions ADD COLUMN owner TEXT",
    "ALTER TABLE actions ADD COLUMN parent TEXT",
    "ALTER TABLE actions DROP CONSTRAINT ck_actions_state",
    f"ALTER TABLE actions ADD CONSTRAINT ck_actions_state CHECK (state IN {_V4_STATES})",
)


def _resumable_actions(conn: Connection) -> None:
    statements = _V4_ACTIONS_POSTGRESQL if conn.dialect.name == "postgresql" else _V4_ACTIONS_SQLITE
    for statement in statements:
        conn.exec_driver_sql(statement)


ACTION_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(3, "runbook actions and the audit log", creates=(actions_table, audit_log_table)),
    Migration(
        4,
        "resumable actions: STALLED, versions, owners, rollbacks",
        changes=(TableChange("actions", (_resumable_actions,)), add_index(actions_table, "ix_actions_state")),
    ),
    Migration(
        6,
        "actions and audit entries per cluster",
        changes=(
            add_column(actions_table, "cluster"),
            add_index(actions_table, "ix_actions_cluster_state"),
            add_column(audit_log_table, "cluster"),
            add_index(audit_log_table, "ix_audit_log_cluster"),
        ),
    ),
)
"""The action tables' migrations (versions 3, 4 and 6). Migration 6 gives each action and audit entry its
named cluster: NULL, the single unnamed cluster, for the rows written before it."""


# --- the log ---------------------------------------------------------------------------------------------


class StoreActionLog:
    """An :class:`~app.actions.state.ActionLog` in the ``actions`` and ``audit_log`` tables, on a
    :class:`Database` the caller opened with :data:`ACTION_MIGRATIONS` (and closes).

    The log of one cluster, ``cluster`` (its name; None: the single unnamed cluster, whose rows have a NULL
    ``cluster``): it reads, lists, adopts and updates only that cluster's actions and audit entries, and
    writes its cluster on those it creates. Two logs of different clusters on one database never see each
    other's rows.

    Thread-safe, like the database: every call is one transaction. Errors are
    :class:`~analytics.store.StoreError`.
    """

    def __init__(self, database: Database, cluster: str | None = None) -> None:
        if cluster is not None and (
            not isinstance(cluster, str)
            or not 0 < len(cluster) <= MAX_CLUSTER
            or any(c.isspace() for c in cluster)
        ):
            raise ValueError(
                f"an action log's cluster must be None or a cluster name (1-{MAX_CLUSTER} characters,"
                f" no whitespace), got {cluster!r}"
            )
        self._db = database
        self.cluster = cluster

    def _actions_of_cluster(self) -> sa.ColumnElement[bool]:
        column = actions_table.c.cluster
        return column.is_(None) if self.cluster is None else column == self.cluster

    def _audit_of_cluster(self) -> sa.ColumnElement[bool]:
        column = audit_log_table.c.cluster
        return column.is_(None) if self.cluster is None else column == self.cluster

    def create(self, record: ActionRecord) -> ActionRecord:
        """Insert a new action of the log's cluster (version 1); ValueError if the id exists (in any
        cluster: ids are unique in the database)."""
        stored = replace(record, version=1, cluster=self.cluster)
        exists = sa.select(actions_table.c.id).where(actions_table.c.id == record.id)
        with self._db.errors(f"create action {record.id}"), self._db.write() as conn:
            if conn.execute(exists).first() is not None:
                raise ValueError(f"action {record.id} exists already")
            conn.execute(sa.insert(actions_table).values(_action_values(stored)))
        return stored

    def update(self, record: ActionRecord) -> ActionRecord:
        """Compare-and-set on ``version``: :class:`StaleRecordError` with the stored record when another
        writer updated it since ``record`` was read."""
        stored = replace(record, version=record.version + 1, cluster=self.cluster)
        values = {k: v for k, v in _action_values(stored).items() if k not in ("id", "cluster")}
        statement = (
            sa.update(actions_table)
            .where(
                actions_table.c.id == record.id,
                actions_table.c.version == record.version,
                self._actions_of_cluster(),
            )
            .values(values)
        )
        with self._db.errors(f"update action {record.id}"), self._db.write() as conn:
            updated = conn.execute(statement).rowcount
        if updated != 1:
            raise StaleRecordError(record.id, self.get(record.id))
        return stored

    def unfinished(self) -> list[ActionRecord]:
        """The cluster's PENDING, RUNNING and STALLED actions, oldest first."""
        query = (
            sa.select(actions_table)
            .where(actions_table.c.state.in_([s.value for s in UNFINISHED]), self._actions_of_cluster())
            .order_by(actions_table.c.requested_at, actions_table.c.id)
        )
        with self._db.errors("read the unfinished actions"), self._db.read() as conn:
            return [_action_record(row) for row in conn.execute(query)]

    def get(self, action_id: str) -> ActionRecord | None:
        """The cluster's action ``action_id``, or None (also when it is another cluster's)."""
        query = sa.select(actions_table).where(actions_table.c.id == action_id, self._actions_of_cluster())
        with self._db.errors(f"read action {action_id}"), self._db.read() as conn:
            row = conn.execute(query).first()
        return None if row is None else _action_record(row)

    def records(
        self,
        state: str | None = None,
        limit: int = 100,
        offset: int = 0,
        kinds: Collection[str] | None = None,
    ) -> list[ActionRecord]:
        """The cluster's actions, newest first; ``state`` and ``kinds`` filter them."""
        check_page(limit, offset)
        query = sa.select(actions_table).where(self._actions_of_cluster())
        if state is not None:
            query = query.where(actions_table.c.state == state)
        if kinds is not None:
            query = query.where(actions_table.c.kind.in_(list(kinds)))
        query = (
            query.order_by(actions_table.c.requested_at.desc(), actions_table.c.id)
            .limit(limit)
            .offset(offset)
        )
        with self._db.errors("read actions"), self._db.read() as conn:
            return [_action_record(row) for row in conn.execute(query)]

    def audit(self, entry: AuditEntry) -> None:
        """Append the entry to the cluster's trail, its detail bounded
        (:func:`~app.actions.state.bounded_detail`); the database numbers it (``sequence``, ignoring the
        entry's), the log sets its ``cluster``."""
        bounded = replace(entry, detail=bounded_detail(entry.detail), cluster=self.cluster)
        statement = sa.insert(audit_log_table).values(_audit_values(bounded))
        with self._db.errors("append to the audit log"), self._db.write() as conn:
            conn.execute(statement)

    def audit_entries(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
        """The cluster's audit entries, newest first."""
        check_page(limit, offset)
        query = (
            sa.select(audit_log_table)
            .where(self._audit_of_cluster())
            .order_by(audit_log_table.c.sequence.desc())
            .limit(limit)
            .offset(offset)
        )
        with self._db.errors("read the audit log"), self._db.read() as conn:
            return [_audit_entry(row) for row in conn.execute(query)]


# --- rows ------------------------------------------------------------------------------------------------


def _action_values(record: ActionRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "kind": record.kind,
        "state": record.state.value,
        "requested_by": record.requested_by,
        "requested_at": record.requested_at,
        "request": dict(record.request),
        "plan": dict(record.plan),
        "progress": dict(record.progress),
        "result": dict(record.result),
        "error": record.error,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "cancel_requested": record.cancel_requested,
        "version": record.version,
        "owner": record.owner,
        "parent": record.parent,
        "cluster": record.cluster,
    }


def _action_record(row: sa.Row[Any]) -> ActionRecord:
    return ActionRecord(
        id=str(row.id),
        kind=str(row.kind),
        state=ActionState(row.state),
        requested_by=str(row.requested_by),
        requested_at=float(row.requested_at),
        request=row.request or {},
        plan=row.plan or {},
        progress=row.progress or {},
        result=row.result or {},
        error=None if row.error is None else str(row.error),
        started_at=opt_float(row.started_at),
        finished_at=opt_float(row.finished_at),
        cancel_requested=bool(row.cancel_requested),
        version=int(row.version),
        owner=None if row.owner is None else str(row.owner),
        parent=None if row.parent is None else str(row.parent),
        cluster=None if row.cluster is None else str(row.cluster),
    )


def _audit_values(entry: AuditEntry) -> dict[str, Any]:
    return {
        "at": entry.at,
        "who": entry.who,
        "role": entry.role,
        "action": entry.action,
        "dry_run": entry.dry_run,
        "outcome": entry.outcome,
        "action_id": entry.action_id,
        "detail": dict(entry.detail),
        "cluster": entry.cluster,
    }


def _audit_entry(row: sa.Row[Any]) -> AuditEntry:
    return AuditEntry(
        at=float(row.at),
        who=str(row.who),
        role=str(row.role),
        action=str(row.action),
        dry_run=bool(row.dry_run),
        outcome=str(row.outcome),
        action_id=None if row.action_id is None else str(row.action_id),
        detail=row.detail or {},
        sequence=int(row.sequence),
        cluster=None if row.cluster is None else str(row.cluster),
    )
