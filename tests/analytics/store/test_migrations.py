"""The migration runner (:mod:`analytics.store.migrations`) with lists of its own: it applies the migrations
a database has not recorded, in version order, and refuses a database that records a version beyond the
list. On an SQLite file and on a real PostgreSQL server (tests.support.postgres). The full list the
application composes is tested in tests/app/test_storage.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.store import ANALYTICS_MIGRATIONS, Database, Migration, Store, StoreError
from analytics.store.tables import metadata
from tests.support.store import BACKENDS, counts, database_url, full_batch, sqlite_url, table_names, versions

pytestmark = pytest.mark.integration

ANALYTICS_TABLES = {"schema_version", *metadata.tables}
INITIAL = ANALYTICS_MIGRATIONS[:1]
"""Migration 1 alone, for the runner's own lists (the analytics tables' are 1 and 5)."""


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return database_url(request, tmp_path / "store.db")


def marker(version: int, table: str) -> Migration:
    """A migration that creates an empty table ``table``."""
    return Migration(version, f"test: {table}", (f"CREATE TABLE {table} (x INTEGER)",))


def test_the_analytics_store_alone_creates_only_its_tables(url: str) -> None:
    with Store.open(url) as store:
        assert store.schema_version == 5
        assert store.commit_batch("q", 1, **full_batch())
    assert table_names(url) == ANALYTICS_TABLES
    assert versions(url) == [1, 5]
    assert counts(url, ["alerts", "alert_events"]) == {"alerts": 2, "alert_events": 1}


def test_the_versions_a_database_has_not_recorded_run_in_version_order(url: str) -> None:
    with Database.open(url, (*INITIAL, marker(5, "five"))) as database:
        assert database.schema_version == 5
    assert versions(url) == [1, 5]
    with Database.open(url, (*INITIAL, marker(3, "three"), marker(5, "five"))) as database:
        assert database.schema_version == 5
    assert versions(url) == [1, 3, 5]
    assert table_names(url) == {*ANALYTICS_TABLES, "three", "five"} - {"load_rollups", "cluster_rollups"}
    with Database.open(url, (*INITIAL, marker(5, "five"))) as database:  # 3 is not its business
        assert database.schema_version == 5
    assert versions(url) == [1, 3, 5]


def test_a_database_beyond_the_list_is_refused_and_left_as_it_is(url: str) -> None:
    Database.open(url, (*ANALYTICS_MIGRATIONS, marker(6, "six"))).close()
    with pytest.raises(
        StoreError, match=r"has schema version 6, newer than this kafka-health knows \(5\): upgrade"
    ):
        Store.open(url)
    assert versions(url) == [1, 5, 6]
    assert table_names(url) == {*ANALYTICS_TABLES, "six"}


@pytest.mark.parametrize(
    ("migrations", "message"),
    [
        ((marker(2, "b"), marker(1, "a")), "version 1 after version 2"),
        ((marker(1, "a"), marker(1, "b")), "version 1 after version 1"),
        ((marker(0, "a"),), "version 0 after version 0"),
    ],
)
def test_a_list_out_of_order_is_refused_before_the_database_is_touched(
    tmp_path: Path, migrations: tuple[Migration, ...], message: str
) -> None:
    path = tmp_path / "store.db"
    with pytest.raises(StoreError, match=f"migration list out of order: {message}"):
        Database.open(sqlite_url(path), migrations)
    assert not path.exists()
