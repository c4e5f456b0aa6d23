"""Schema migrations: numbered steps, the ``schema_version`` table that records the ones applied, and the
runner that applies the missing ones when a :class:`~analytics.store.database.Database` is opened.

Each subsystem owns its tables (SQLAlchemy :class:`~sqlalchemy.Table` definitions, the one description of
their schema) and the migrations that bring them about (the analytics tables' are versions 1 and 5, in
:mod:`analytics.store.tables`); the app layer composes the full ordered list (``app/storage.py``). Versions
are one sequence for the whole database, since ``schema_version`` records them by number: a new migration,
whichever subsystem it belongs to, takes the next free number.

A migration **creates** tables from their definitions (the DDL is compiled for the database's dialect) and
**changes** tables an earlier migration created (:class:`TableChange`: a column, an index, a rebuild). A
table created in an upgrade already has every change its definition holds, so the changes of that table
are skipped in the same upgrade: a database created today and one created by an older kafka-health and
upgraded end with the same schema, the definitions'.
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
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable

from analytics.store.errors import StoreError, error_detail

if TYPE_CHECKING:
    from analytics.store.database import Database

__all__ = [
    "SCHEMA_VERSION_DDL",
    "Migration",
    "MigrationStep",
    "TableChange",
    "add_column",
    "add_index",
    "create_table",
    "metadata",
    "migrate",
    "schema_version_table",
]

MigrationStep = str | Callable[[Connection], None]
"""A DDL statement (portable between SQLite and PostgreSQL) or a function run on the migrating connection."""


@dataclass(frozen=True, slots=True)
class TableChange:
    """Steps that change ``table``, which an earlier migration created: run on a database that has the
    table, skipped when the same upgrade creates it from its definition (which has the change)."""

    table: str
    steps: tuple[MigrationStep, ...]


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: the tables it creates (from their definitions), the changes it makes to tables
    of earlier versions, and any other steps (run in that order).

    Never edit a released migration's version or description (databases record them): add a new one.
    """

    version: int
    description: str
    steps: tuple[MigrationStep, ...] = ()
    creates: tuple[sa.Table, ...] = ()
    changes: tuple[TableChange, ...] = ()


def create_table(conn: Connection, table: sa.Table) -> None:
    """Create ``table`` and its indexes as defined, in the connection's dialect."""
    conn.execute(CreateTable(table))
    for index in sorted(table.indexes, key=lambda i: str(i.name)):
        conn.execute(CreateIndex(index))


def add_column(table: sa.Table, name: str) -> TableChange:
    """The change that adds ``table``'s column ``name`` as defined (nullable, or with a server default)."""
    column = table.c[name]

    def add(conn: Connection) -> None:
        spec = CreateColumn(column).compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {spec}")

    return TableChange(table.name, (add,))


def add_index(table: sa.Table, name: str) -> TableChange:
    """The change that creates ``table``'s index ``name`` as defined."""
    (index,) = (i for i in table.indexes if i.name == name)

    def create(conn: Connection) -> None:
        conn.execute(CreateIndex(index))

    return TableChange(table.name, (create,))


metadata = sa.MetaData()
"""The runner's own table, ``schema_version``."""

schema_version_table = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("applied_at", sa.DOUBLE_PRECISION, nullable=False),
)

SCHEMA_VERSION_DDL: Final = CreateTable(schema_version_table, if_not_exists=True)
"""Creates ``schema_version`` unless it exists (executable on any connection)."""

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
            conn.execute(SCHEMA_VERSION_DDL)
            recorded = _recorded_versions(conn)  # again, under the lock
            version = max(recorded, default=0)
            _refuse_newer(version, target, shown)
            created: set[str] = set()
            for migration in migrations:
                if migration.version in recorded:
                    continue
                step_name = f"migration {migration.version} ({migration.description})"
                _apply(conn, migration, created)
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


def _apply(conn: Connection, migration: Migration, created: set[str]) -> None:
    """Run ``migration``; ``created`` is the names of the tables this upgrade created so far (their
    changes are skipped), to which it adds its own."""
    for table in migration.creates:
        create_table(conn, table)
        created.add(table.name)
    for change in migration.changes:
        if change.table not in created:
            _run(conn, change.steps)
    _run(conn, migration.steps)
    conn.execute(
        sa.insert(schema_version_table).values(
            version=migration.version, description=migration.description, applied_at=time.time()
        )
    )


def _run(conn: Connection, steps: Sequence[MigrationStep]) -> None:
    for step in steps:
        if isinstance(step, str):
            conn.exec_driver_sql(step)
        else:
            step(conn)


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
