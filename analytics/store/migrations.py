"""Schema migrations: numbered steps, the ``schema_version`` table that records the ones applied, and the
runner that applies the missing ones when a :class:`~analytics.store.database.Database` is opened.

Each subsystem owns the migrations of its tables (the analytics tables are version 1, in
:mod:`analytics.store.tables`); the app layer composes the full ordered list (``app/storage.py``). Versions
are one sequence for the whole database, since ``schema_version`` records them by number: a new migration,
whichever subsystem it belongs to, takes the next free number.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from analytics.store.errors import StoreError, error_detail

if TYPE_CHECKING:
    from analytics.store.database import Database

__all__ = [
    "SCHEMA_VERSION_DDL",
    "Migration",
    "MigrationStep",
    "metadata",
    "migrate",
    "schema_version_table",
]

MigrationStep = str | Callable[[Connection], None]
"""A DDL statement (portable between SQLite and PostgreSQL) or a function run on the migrating connection."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: the steps that create or change the tables it is about.

    Never edit a released migration (databases record its version and description): add a new one.
    """

    version: int
    description: str
    steps: tuple[MigrationStep, ...]


metadata = sa.MetaData()
"""The runner's own table, ``schema_version`` (for building queries, not for creating it)."""

schema_version_table = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("applied_at", sa.Double, nullable=False),
)

SCHEMA_VERSION_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS schema_version ("
    " version INTEGER NOT NULL PRIMARY KEY,"
    " description TEXT NOT NULL,"
    " applied_at DOUBLE PRECISION NOT NULL)"
)

_MIGRATION_LOCK_KEY: Final = 0x6B68_5F73_746F_7265  # "kh_store": PostgreSQL advisory lock for migrations


def migrate(database: Database, migrations: Sequence[Migration]) -> int:
    """Apply every one of ``migrations`` whose version the database has not recorded, in version order, in
    one transaction; returns the last version of ``migrations``.

    A database that records a version higher than the last of ``migrations`` is refused: it was written by
    a newer kafka-health, whose tables this code must not write to. If a step fails, nothing is changed
    (both databases have transactional DDL) and the error names the migration.
    """
    _check_order(migrations)
    target = migrations[-1].version if migrations else 0
    shown = database.url
    try:
        with database.read() as conn:
            recorded = _recorded_versions(conn)
    except (SQLAlchemyError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the store at {shown}: {error_detail(exc)}") from exc
    version = max(recorded, default=0)
    _refuse_newer(version, target, shown)
    if all(m.version in recorded for m in migrations):
        return target
    step_name = "creating the schema_version table"
    try:
        with database.write() as conn:
            if database.dialect == "postgresql":  # serialise concurrent start-ups
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK_KEY)))
            conn.exec_driver_sql(SCHEMA_VERSION_DDL)
            recorded = _recorded_versions(conn)  # again, under the lock
            version = max(recorded, default=0)
            _refuse_newer(version, target, shown)
            for migration in migrations:
                if migration.version in recorded:
                    continue
                step_name = f"migration {migration.version} ({migration.description})"
                _apply(conn, migration)
    except StoreError:
        raise
    except (SQLAlchemyError, sqlite3.Error) as exc:
        raise StoreError(
            f"cannot upgrade the store at {shown} from schema version {version} to {target}: "
            f"{step_name} failed (nothing was changed): {error_detail(exc)}"
        ) from exc
    return target


def _check_order(migrations: Sequence[Migration]) -> None:
    previous = 0
    for migration in migrations:
        if migration.version <= previous:
            raise StoreError(
                f"migration list out of order: version {migration.version} after version {previous}"
            )
        previous = migration.version


def _apply(conn: Connection, migration: Migration) -> None:
    for step in migration.steps:
        if isinstance(step, str):
            conn.exec_driver_sql(step)
        else:
            step(conn)
    conn.execute(
        sa.insert(schema_version_table).values(
            version=migration.version, description=migration.description, applied_at=time.time()
        )
    )


def _recorded_versions(conn: Connection) -> set[int]:
    if not sa.inspect(conn).has_table("schema_version"):
        return set()
    return {int(v) for v in conn.execute(sa.select(schema_version_table.c.version)).scalars()}


def _refuse_newer(version: int, target: int, shown: str) -> None:
    if version > target:
        raise StoreError(
            f"the store at {shown} has schema version {version}, newer than this kafka-health knows "
            f"({target}): upgrade kafka-health, or point it at another database"
        )
