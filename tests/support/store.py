"""Helpers for tests of the stores (:mod:`analytics.store`, :mod:`app.webhooks.store`,
:mod:`app.actions.store`) on every database they support. Not a pytest plugin: no fixture, no hook; a test
module builds its own fixtures with them::

    @pytest.fixture(params=BACKENDS)
    def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
        return database_url(request, tmp_path / "store.db")

The PostgreSQL side needs the ``postgres_url`` fixture of :mod:`tests.support.postgres` (a fresh database per
test), registered in ``tests/conftest.py``.

Also here: a plain engine to look under the stores (:func:`raw_engine`, :func:`dump`, :func:`counts`, ...),
and builders of the analytics store's rows (:func:`load_window`, :func:`alert_state`, :func:`full_batch`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import pytest
import sqlalchemy as sa

from analytics.model import (
    ActionRef,
    AlertEvent,
    AlertState,
    AlertStateName,
    BrokerLoad,
    EventKind,
    LoadWindow,
    Window,
    fingerprint,
)
from analytics.rules import lane_of
from analytics.store import DEFAULT_BUSY_TIMEOUT, ClusterWindowRow, Store
from app.storage import MIGRATIONS

SQLITE: Final = "sqlite"
POSTGRESQL: Final = "postgresql"
BACKENDS: Final = (SQLITE, POSTGRESQL)
"""The parameters of a fixture that runs its tests on an SQLite file and on a real PostgreSQL server."""

TABLES: Final = (
    "schema_version",
    "cluster_windows",
    "load_windows",
    "alerts",
    "alert_events",
    "processed_batches",
    "webhooks",
    "webhook_deliveries",
    "actions",
    "audit_log",
    "load_rollups",
    "cluster_rollups",
    "silences",
    "rolling_restarts",
)
"""Every table of the application's database (:data:`app.storage.MIGRATIONS`)."""
DATA_TABLES: Final = TABLES[1:5]
"""The analytics tables a batch writes its results to."""


def sqlite_url(path: Path) -> str:
    """The store URL of the SQLite database file ``path``."""
    return f"sqlite:///{path}"


def database_url(request: pytest.FixtureRequest, sqlite_file: Path) -> str:
    """The URL of an empty database on the backend named by ``request.param`` (one of :data:`BACKENDS`):
    the SQLite file ``sqlite_file`` (not created), or a fresh PostgreSQL database (``postgres_url``)."""
    backend = request.param
    if backend == SQLITE:
        return sqlite_url(sqlite_file)
    if backend == POSTGRESQL:
        return str(request.getfixturevalue("postgres_url"))
    raise ValueError(f"unknown store backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def open_store(url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Store:
    """The analytics store on the application's database at ``url`` (every migration, as the service, the
    command line and the demo open it), with a database of its own."""
    return Store.open(url, busy_timeout=busy_timeout, migrations=MIGRATIONS)


# --- looking under the stores ----------------------------------------------------------------------------


@contextmanager
def raw_engine(url: str) -> Iterator[sa.Engine]:
    """A plain engine on the same database, for looking under the store."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        yield engine
    finally:
        engine.dispose()


def dump(url: str, tables: Sequence[str] = DATA_TABLES) -> dict[str, list[str]]:
    """Every row of ``tables``, as sorted reprs (comparable across reads)."""
    with raw_engine(url) as engine, engine.connect() as conn:
        return {
            name: sorted(repr(tuple(row)) for row in conn.execute(sa.text(f"SELECT * FROM {name}")))
            for name in tables
        }


def counts(url: str, tables: Sequence[str] = TABLES) -> dict[str, int]:
    with raw_engine(url) as engine, engine.connect() as conn:
        return {
            name: int(conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()) for name in tables
        }


def table_names(url: str) -> set[str]:
    with raw_engine(url) as engine, engine.connect() as conn:
        return set(sa.inspect(conn).get_table_names())


def versions(url: str) -> list[int]:
    with raw_engine(url) as engine, engine.connect() as conn:
        return [
            int(v)
            for v in conn.execute(sa.text("SELECT version FROM schema_version ORDER BY version")).scalars()
        ]


def schema(url: str) -> dict[str, dict[str, Any]]:
    """The schema of every table at ``url`` as SQLAlchemy's inspector reports it, by table name: its columns
    (name, declared type, nullability, server default, PostgreSQL identity), primary key, foreign keys
    (with ``ON DELETE``), unique and check constraints, indexes, and whether SQLite's ids are
    ``AUTOINCREMENT``; comparable between two databases of one kind (order and whitespace aside)."""
    with raw_engine(url) as engine, engine.connect() as conn:
        inspector = sa.inspect(conn)
        dialect = conn.dialect
        tables: dict[str, dict[str, Any]] = {}
        for name in sorted(inspector.get_table_names()):
            autoincrement = False
            declared_types: dict[str, str] = {}
            if dialect.name == "sqlite":  # the type as declared: the inspector maps DOUBLE PRECISION to REAL
                sql = conn.execute(
                    sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"),
                    {"name": name},
                ).scalar_one()
                autoincrement = "AUTOINCREMENT" in sql.upper()
                info = conn.exec_driver_sql(f"PRAGMA table_info({name})")
                declared_types = {str(row[1]): str(row[2]).upper() for row in info}
            tables[name] = {
                "columns": [
                    (
                        c["name"],
                        declared_types.get(c["name"]) or c["type"].compile(dialect=dialect),
                        c["nullable"],
                        _words(c.get("default")),
                        bool(c.get("identity")),
                    )
                    for c in inspector.get_columns(name)
                ],
                "primary_key": _named(inspector.get_pk_constraint(name), "constrained_columns"),
                "foreign_keys": sorted(
                    (
                        str(f["name"]),
                        tuple(f["constrained_columns"]),
                        f["referred_table"],
                        tuple(f["referred_columns"]),
                        str(f.get("options", {}).get("ondelete", "")).upper(),
                    )
                    for f in inspector.get_foreign_keys(name)
                ),
                "unique": sorted(_named(u, "column_names") for u in inspector.get_unique_constraints(name)),
                "checks": sorted(
                    (str(c["name"]), _words(c["sqltext"])) for c in inspector.get_check_constraints(name)
                ),
                "indexes": sorted(
                    (str(i["name"]), tuple(str(c) for c in i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(name)
                    if not i.get("duplicates_constraint")  # PostgreSQL's index of a unique constraint
                ),
                "autoincrement": autoincrement,
            }
        return tables


def _named(constraint: Any, columns: str) -> tuple[str, tuple[str, ...]]:
    return str(constraint.get("name")), tuple(constraint[columns])


def _words(text: Any) -> str | None:
    """SQL text with its whitespace and letter case evened out (None stays None)."""
    return None if text is None else " ".join(str(text).split()).lower()


# --- building the analytics store's rows -----------------------------------------------------------------


def load_window(cluster: str = "c1", start: float = 0.0, brokers: int = 3, seed: float = 1.0) -> LoadWindow:
    rows = tuple(
        BrokerLoad(
            broker=b,
            metrics={"bytes_in": 1000.0 * b * seed, "cpu": 0.25 * b},
            shares={"bytes_in": b / 6, "cpu": (b + 0.5) / 7},
            weighted_load=0.1 * b * seed,
            normalized_load=b / 3,
            deviation_rate=(b - 2) / 2,
        )
        for b in range(1, brokers + 1)
    )
    return LoadWindow(
        window=Window(cluster, start, start + 60.0),
        brokers=rows,
        stddev=0.2 * seed,
        stddev_threshold=0.15,
        rated_deviation=0.4 * seed,
    )


def alert_state(
    cluster: str = "c1",
    rule: int = 9,
    subject: str = "cluster",
    state: AlertStateName = "open",
    **changes: Any,
) -> AlertState:
    base = AlertState(
        fingerprint=fingerprint(cluster, rule, subject),
        cluster=cluster,
        rule=rule,
        subject=subject,
        severity="warning",
        state="open",
        summary=f"rule {rule} fired for {subject}",
        evidence={"value": 3, "threshold": 2.5},
        action=ActionRef("POST", "/actions/preferred-election", {"topics": ["orders"], "dry_run": True}),
        hits=3,
        clean=0,
        first_seen=0.0,
        last_seen=180.0,
        opened_at=180.0,
        resolved_at=None,
        last_window_end=180.0,
        event_sequence=1,
    )
    return replace(base, state=state, **changes)


def alert_event(state: AlertState, sequence: int, kind: EventKind = "opened", **changes: Any) -> AlertEvent:
    event = AlertEvent(
        fingerprint=state.fingerprint,
        sequence=sequence,
        kind="opened",
        at=60.0 * sequence,
        severity=state.severity,
        summary=state.summary,
        evidence=dict(state.evidence),
    )
    return replace(event, kind=kind, **changes)


def full_batch() -> dict[str, Any]:
    """One of everything, for two clusters."""
    a1 = alert_state("c1", 9, "cluster")
    a2 = alert_state("c2", 8, "broker:3", state="pending", opened_at=None, hits=1, event_sequence=0)
    return {
        "load_windows": [load_window("c1", 0.0), load_window("c2", 0.0, brokers=5)],
        "cluster_windows": [
            ClusterWindowRow(
                Window("c1", 0.0, 60.0), controller_id=1, controller_epoch=7, health={"ok": True}
            ),
            ClusterWindowRow(Window("c1", 60.0, 120.0), controller_id=2, controller_epoch=8, evaluated=True),
        ],
        "alert_states": [a1, a2],
        "events": [alert_event(a1, 1)],
    }


def write_alert(store: Store, state: AlertState, events: Sequence[AlertEvent], batch_id: int) -> None:
    """Write an alert row and its events as the writer of its rule's lane does: the load lane's through
    ``commit_batch`` (as batch ``batch_id``), the incident lane's through ``commit_incidents``, compared
    against the row as stored now."""
    if lane_of(state.rule) == "load":
        assert store.commit_batch("test", batch_id, alert_states=[state], events=events)
        return
    stored = store.alert(state.fingerprint)
    version = None if stored is None else (stored.event_sequence, stored.last_window_end)
    store.commit_incidents(state.cluster, [state], events, expected={state.fingerprint: version})
