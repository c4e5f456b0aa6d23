"""The application's database (:mod:`app.storage`): every subsystem's migrations composed in one list, on
an SQLite file and on a real PostgreSQL server (tests.support.postgres: a fresh database per test). The
migrated schema must agree with the table definitions every store builds its queries from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from analytics.store import Migration, Store, StoreError
from analytics.store.migrations import SCHEMA_VERSION_DDL
from app.storage import METADATA, MIGRATIONS, open_database
from tests.support.store import (
    BACKENDS,
    TABLES,
    database_url,
    dump,
    full_batch,
    open_store,
    raw_engine,
    schema,
    table_names,
    versions,
)

pytestmark = pytest.mark.integration

LATEST = MIGRATIONS[-1].version


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database (its SQLite parent directory does not exist yet)."""
    return database_url(request, tmp_path / "data" / "store.db")


def declared(table: sa.Table, dialect: sa.Dialect) -> dict[str, Any]:
    """What :func:`tests.support.store.schema` should report of ``table`` on ``dialect`` if the database
    has the table as defined (check constraints by name: the databases rewrite their text)."""
    postgresql = dialect.name == "postgresql"
    pk_name = table.primary_key.name or (f"{table.name}_pkey" if postgresql else None)
    return {
        "columns": [
            (
                c.name,
                c.type.compile(dialect=dialect),
                c.nullable,
                None if c.server_default is None else _words(getattr(c.server_default, "arg", None)),
                postgresql and c.identity is not None,
            )
            for c in table.columns
        ],
        "primary_key": (str(pk_name), tuple(c.name for c in table.primary_key.columns)),
        "foreign_keys": sorted(
            (
                str(fk.name),
                tuple(c.name for c in fk.columns),
                fk.referred_table.name,
                tuple(e.column.name for e in fk.elements),
                str(fk.ondelete or "").upper(),
            )
            for fk in table.foreign_key_constraints
        ),
        "unique": sorted(
            (str(u.name), tuple(c.name for c in u.columns))
            for u in table.constraints
            if isinstance(u, sa.UniqueConstraint)
        ),
        "checks": sorted(str(c.name) for c in table.constraints if isinstance(c, sa.CheckConstraint)),
        "indexes": sorted(
            (str(i.name), tuple(c.name for c in i.columns), bool(i.unique)) for i in table.indexes
        ),
        "autoincrement": not postgresql and bool(table.dialect_options["sqlite"]["autoincrement"]),
    }


def _words(text: Any) -> str | None:
    return None if text is None else " ".join(str(getattr(text, "text", text)).split()).lower()


def test_every_table_is_declared_once_by_its_owner() -> None:
    declared = [table.name for metadata in METADATA for table in metadata.sorted_tables]
    assert sorted(declared) == sorted(TABLES)


def test_a_fresh_database_gets_the_declared_schema(url: str) -> None:
    """Every column (declared type, nullability, server default, identity), key, constraint and index of a
    fresh database is its table definition's, as SQLAlchemy's inspector reports them."""
    with open_database(url) as database:
        assert database.schema_version == LATEST
    with raw_engine(url) as engine:
        dialect = engine.dialect
    assert versions(url) == [m.version for m in MIGRATIONS]
    tables = schema(url)
    assert set(tables) == set(TABLES)
    for table in (table for metadata in METADATA for table in metadata.sorted_tables):
        reflected = tables[table.name] | {"checks": sorted(name for name, _ in tables[table.name]["checks"])}
        assert reflected == declared(table, dialect), table.name


def test_reopening_an_up_to_date_store_changes_nothing(url: str) -> None:
    with open_store(url) as store:
        store.commit_batch("q", 1, **full_batch())
    before = dump(url, TABLES)
    with open_store(url) as store:
        assert store.schema_version == LATEST
    assert dump(url, TABLES) == before


def test_a_version_0_database_is_brought_up_to_date(url: str) -> None:
    with raw_engine(url) as engine, engine.begin() as conn:  # a schema_version table, no version applied
        conn.execute(SCHEMA_VERSION_DDL)
    with open_store(url) as store:
        assert store.schema_version == LATEST
        assert store.commit_batch("q", 1, **full_batch())
    assert table_names(url) == set(TABLES)
    assert versions(url) == [m.version for m in MIGRATIONS]


def test_an_older_database_gets_only_the_missing_steps(url: str) -> None:
    with open_store(url) as store:
        store.commit_batch("q", 1, **full_batch())
    calls: list[int] = []

    def fill_notes(conn: sa.Connection) -> None:
        calls.append(1)
        conn.execute(sa.text("UPDATE alerts SET note = 'from v1'"))

    upgraded = Migration(
        LATEST + 1, "test: alert notes", ("ALTER TABLE alerts ADD COLUMN note TEXT", fill_notes)
    )
    with Store.open(url, migrations=(*MIGRATIONS, upgraded)) as store:
        assert store.schema_version == LATEST + 1
        assert {a.fingerprint for a in store.alerts()} == {
            s.fingerprint for s in full_batch()["alert_states"]
        }
    with Store.open(url, migrations=(*MIGRATIONS, upgraded)) as store:  # nothing left to do
        assert store.schema_version == LATEST + 1
    assert calls == [1]
    assert versions(url) == [*(m.version for m in MIGRATIONS), LATEST + 1]
    with raw_engine(url) as engine, engine.connect() as conn:
        assert set(conn.execute(sa.text("SELECT note FROM alerts")).scalars()) == {"from v1"}


def test_a_failing_migration_changes_nothing(url: str) -> None:
    broken = Migration(
        LATEST + 1,
        "broken",
        ("CREATE TABLE extra (x INTEGER)", "ALTER TABLE no_such_table ADD COLUMN y INTEGER"),
    )
    with pytest.raises(
        StoreError, match=rf"from schema version 0 to {LATEST + 1}: migration {LATEST + 1} \(broken\)"
    ):
        Store.open(url, migrations=(*MIGRATIONS, broken))
    assert table_names(url) == set()  # not even schema_version: all steps run in one transaction

    with open_store(url) as store:
        store.commit_batch("q", 1, **full_batch())
    before = dump(url, TABLES)
    with pytest.raises(StoreError, match="nothing was changed"):
        Store.open(url, migrations=(*MIGRATIONS, broken))
    assert table_names(url) == set(TABLES)
    assert dump(url, TABLES) == before


def test_a_newer_database_is_refused(url: str) -> None:
    open_database(url).close()
    with raw_engine(url) as engine, engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO schema_version VALUES (99, 'from the future', 0)"))
    with pytest.raises(
        StoreError, match=rf"schema version 99, newer than this kafka-health knows \({LATEST}\)"
    ):
        open_database(url)
