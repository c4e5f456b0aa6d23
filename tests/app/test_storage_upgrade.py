"""Databases written by the previous main (commit 75789e8, before the stores were split by subsystem) open
with the full migration list and keep every row: an SQLite file, and a PostgreSQL database loaded from a
plain-SQL dump. Both were written through that code's public API by
tests/app/fixtures/store_75789e8/generate.py, which also dumped their rows and that code's reads to JSON
(its docstring says how to regenerate them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Final

import pytest
import sqlalchemy as sa

from analytics.store import Store
from app.actions.state import ActionRecord, ActionState, AuditEntry
from app.storage import MIGRATIONS, Storage, open_database
from tests.app.fixtures.store_75789e8.generate import NOW, plain, table_rows
from tests.support.store import (
    BACKENDS,
    POSTGRESQL,
    SQLITE,
    TABLES,
    full_batch,
    raw_engine,
    schema,
    sqlite_url,
)

pytestmark = pytest.mark.integration

FIXTURES: Final = Path(__file__).parent / "fixtures" / "store_75789e8"


def expected(backend: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / f"store.{backend}.json").read_text(encoding="utf-8"))
    return document


def load_dump(url: str, dump: Path) -> None:
    """Run pg_dump's plain SQL on the empty database at ``url`` (without its psql meta-commands, such as
    ``\\restrict``: they are psql's, not SQL)."""
    script = "\n".join(
        line for line in dump.read_text(encoding="utf-8").splitlines() if not line.startswith("\\")
    )
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        conn = engine.raw_connection()
        try:
            conn.cursor().execute(script)
            conn.commit()
        finally:
            conn.close()
    finally:
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """The URL of a copy of the previous main's database, and what its JSON dump says."""
    if request.param == SQLITE:
        copy = tmp_path / "kafka-health.db"
        shutil.copyfile(FIXTURES / "store.sqlite", copy)
        return sqlite_url(copy), expected(SQLITE)
    url = str(request.getfixturevalue("postgres_url"))
    load_dump(url, FIXTURES / "store.postgresql.sql")
    return url, expected(POSTGRESQL)


NEW_TABLES: Final = ("load_rollups", "cluster_rollups", "silences", "rolling_restarts")
"""Tables created after the fixtures were written (migration 5: the retention's hourly rollups; 9: the
silences; 10: the service's rolling restarts)."""
OLD_TABLES: Final = tuple(name for name in TABLES if name not in NEW_TABLES)


def test_the_fixtures_have_rows_in_every_table() -> None:
    for backend in BACKENDS:
        tables = expected(backend)["tables"]
        assert set(tables) == set(OLD_TABLES), backend
        assert all(tables[name] for name in OLD_TABLES), backend


ACTION_COLUMNS_SINCE: Final = {"version": 1, "owner": None, "parent": None, "cluster": None}
"""What migrations 4 and 6 give the actions written before them: a first version, no owner, no rollback
link, no cluster name (they are the single unnamed cluster's)."""
AUDIT_COLUMNS_SINCE: Final = {"cluster": None}
"""What migration 6 gives the audit entries written before it: the single unnamed cluster's."""
WEBHOOK_COLUMNS_SINCE: Final = {"clusters": None}
"""What migration 7 gives the webhooks created before it: every cluster's events."""
DELIVERY_COLUMNS_SINCE: Final = {"silenced_by": None}
"""What migration 9 gives the outbox rows written before it: none was held by a silence."""


def upgraded(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The old rows as the later migrations leave them (new columns at their defaults), ``schema_version``
    aside (the new migrations' rows carry their own time)."""
    rows = {name: [dict(row) for row in table] for name, table in tables.items() if name != "schema_version"}
    rows["actions"] = [row | ACTION_COLUMNS_SINCE for row in rows["actions"]]
    rows["audit_log"] = [row | AUDIT_COLUMNS_SINCE for row in rows["audit_log"]]
    rows["webhooks"] = [row | WEBHOOK_COLUMNS_SINCE for row in rows["webhooks"]]
    rows["webhook_deliveries"] = [row | DELIVERY_COLUMNS_SINCE for row in rows["webhook_deliveries"]]
    return rows | {name: [] for name in NEW_TABLES}


def test_every_row_is_kept(old_database: tuple[str, dict[str, Any]]) -> None:
    url, dump = old_database
    assert plain(table_rows(url)) == dump["tables"]  # loaded as written
    with open_database(url) as database:
        assert database.schema_version == MIGRATIONS[-1].version
    after = plain(table_rows(url))
    versions = after.pop("schema_version")
    assert after == upgraded(dump["tables"])
    old = dump["tables"]["schema_version"]
    assert versions[: len(old)] == old  # the old migrations' records untouched
    assert [(row["version"], row["description"]) for row in versions] == [
        (m.version, m.description) for m in MIGRATIONS
    ]


def test_the_upgraded_database_has_the_schema_of_a_fresh_one(
    old_database: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The migrations bring the old tables (migration 4 rebuilds SQLite's ``actions``) to the shape a
    fresh database is created in from the table definitions: every column, key, constraint and index."""
    url, _ = old_database
    open_database(url).close()
    upgraded_schema = schema(url)
    if url.startswith("sqlite"):
        fresh = sqlite_url(tmp_path / "fresh.db")
    else:  # the same PostgreSQL database, emptied
        fresh = url
        with raw_engine(url) as engine, engine.begin() as conn:
            for name in sa.inspect(conn).get_table_names():
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name} CASCADE")
    open_database(fresh).close()
    assert upgraded_schema == schema(fresh)


def test_the_new_stores_read_the_old_rows(old_database: tuple[str, dict[str, Any]]) -> None:
    url, dump = old_database
    reads = dump["reads"]
    fingerprints = [alert["fingerprint"] for alert in reads["alerts"]]
    with Storage.open(url) as storage:
        analytics, webhooks, actions = storage.analytics, storage.webhooks, storage.actions
        assert plain(analytics.alerts(limit=1000)) == reads["alerts"]
        assert plain(analytics.alert_events(limit=1000)) == reads["alert_events"]
        assert plain(analytics.acknowledgements(fingerprints)) == reads["acknowledgements"]
        latest = {"any": analytics.latest_load(), "c1": analytics.latest_load("c1")}
        assert plain(latest) == reads["latest_load"]
        assert plain(webhooks.webhooks()) == [w | WEBHOOK_COLUMNS_SINCE for w in reads["webhooks"]]
        assert plain(webhooks.deliveries(limit=1000)) == reads["deliveries"]
        assert plain(actions.records(limit=1000)) == [r | ACTION_COLUMNS_SINCE for r in reads["records"]]
        assert plain(actions.audit_entries(limit=1000)) == [
            e | AUDIT_COLUMNS_SINCE for e in reads["audit_entries"]
        ]
        assert storage.actions_for(None) is actions  # the old rows are the single unnamed cluster's
        named = storage.actions_for("prod")
        assert (named.records(limit=1000), named.audit_entries(limit=1000), named.unfinished()) == (
            [],
            [],
            [],
        )


def test_the_old_database_takes_new_writes(old_database: tuple[str, dict[str, Any]]) -> None:
    url, dump = old_database
    tables = dump["tables"]
    with Storage.open(url) as storage:
        assert not storage.analytics.commit_batch("health-job", 1)  # committed by the old code
        assert storage.analytics.commit_batch("health-job", 2, **full_batch())
        created = storage.webhooks.create_webhook(
            name="new", url="http://127.0.0.1:9/x", format="generic", created_by="root", now=NOW + 500
        )
        assert created.id > max(row["id"] for row in tables["webhooks"])  # ids go on, none reused
        skipped = storage.webhooks.deliveries(created.id, limit=1000)  # the events recorded before it
        assert len(skipped) == len(tables["alert_events"]) + len(full_batch()["events"])
        assert {d.state for d in skipped} == {"skipped"}
        assert min(d.id for d in skipped) > max(row["id"] for row in tables["webhook_deliveries"])
        storage.actions.audit(AuditEntry(NOW + 500, "root", "admin", "ack", False, "accepted"))
        (newest,) = storage.actions.audit_entries(limit=1)
        assert newest.sequence == max(row["sequence"] for row in tables["audit_log"]) + 1
        prod = storage.actions_for("prod")
        prod.create(ActionRecord("prod-1", "reassignment", ActionState.PENDING, "oncall", NOW + 500, {}))
        prod.audit(AuditEntry(NOW + 501, "oncall", "operator", "reassignment", False, "accepted", "prod-1"))
        assert [r.id for r in prod.unfinished()] == ["prod-1"]
        assert "prod-1" not in {r.id for r in storage.actions.records(limit=1000)}  # the old rows' log
        assert storage.actions.audit_entries(limit=1) == [newest]
        only_prod = storage.webhooks.create_webhook(
            name="prod",
            url="http://127.0.0.1:9/x",
            format="generic",
            clusters=["prod"],
            created_by="root",
            now=NOW + 500,
        )
        assert storage.webhooks.deliveries(only_prod.id, limit=1000) == []  # the old events are c1's and c2's
    with Store.open(url, migrations=MIGRATIONS) as store:  # the analytics store alone, on the same file
        fingerprints = {a.fingerprint for a in store.alerts(limit=1000)}
    assert fingerprints == {row["fingerprint"] for row in tables["alerts"]} | {
        a.fingerprint for a in full_batch()["alert_states"]
    }


def test_the_upgraded_webhooks_take_the_alertmanager_api_format_and_no_other(
    old_database: tuple[str, dict[str, Any]],
) -> None:
    """Migration 8 widens the ``webhooks`` format check (on SQLite by changing its text in the schema
    table, since a rebuild would cascade-delete the outbox): the old webhooks and their deliveries stay, a
    webhook in the new format is stored, and a format the check does not list is still refused by the
    database itself."""
    url, dump = old_database
    tables = dump["tables"]
    with Storage.open(url) as storage:
        created = storage.webhooks.create_webhook(
            name="am", url="http://127.0.0.1:9", format="alertmanager-api", created_by="root", now=NOW + 500
        )
        assert storage.webhooks.webhook(created.id) == created
        assert len(storage.webhooks.deliveries(limit=10_000)) >= len(tables["webhook_deliveries"])
    with raw_engine(url) as engine, engine.connect() as conn:
        with pytest.raises(sa.exc.IntegrityError):
            conn.execute(
                sa.text("UPDATE webhooks SET format = 'carrier-pigeon' WHERE id = :id"), {"id": created.id}
            )
        conn.rollback()
        assert (
            conn.execute(sa.text("SELECT count(*) FROM webhooks")).scalar_one() == len(tables["webhooks"]) + 1
        )
