"""analytics.store against real databases: every test taking ``url`` (or ``store``) runs on an SQLite file
and on a real PostgreSQL server (tests.support.postgres: a fresh database per test)."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from analytics import store as store_module
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
from analytics.store import MIGRATIONS, ClusterWindowRow, Migration, Store, StoreError
from tests.support.store import BACKENDS, database_url

pytestmark = pytest.mark.integration

TABLES = (
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
)
DATA_TABLES = TABLES[1:5]
LATEST = MIGRATIONS[-1].version


# --- fixtures and builders -------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database (its SQLite parent directory does not exist yet)."""
    return database_url(request, tmp_path / "data" / "store.db")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with Store.open(url) as opened:
        yield opened


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


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


def counts(url: str) -> dict[str, int]:
    with raw_engine(url) as engine, engine.connect() as conn:
        return {
            name: int(conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()) for name in TABLES
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
    rule: int = 1,
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
    a1 = alert_state("c1", 1, "cluster")
    a2 = alert_state("c2", 4, "broker:3", state="pending", opened_at=None, hits=1, event_sequence=0)
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


# --- schema and migrations -------------------------------------------------------------------------------


def _kind(column_type: sa.types.TypeEngine[Any]) -> str:
    for kind, types in (
        ("json", (sa.JSON,)),
        ("bool", (sa.Boolean,)),
        ("float", (sa.Float,)),
        ("int", (sa.Integer,)),
        ("text", (sa.String,)),
    ):
        if isinstance(column_type, types):
            return kind
    return repr(column_type)


def test_a_fresh_database_gets_the_declared_schema(url: str) -> None:
    with Store.open(url) as store:
        assert store.schema_version == LATEST
    assert versions(url) == [m.version for m in MIGRATIONS]
    with raw_engine(url) as engine, engine.connect() as conn:
        inspector = sa.inspect(conn)
        assert set(inspector.get_table_names()) == set(TABLES)
        for table in store_module.metadata.sorted_tables:
            columns = {c["name"]: c for c in inspector.get_columns(table.name)}
            assert list(columns) == [c.name for c in table.columns], table.name
            for column in table.columns:
                reflected = columns[column.name]
                assert reflected["nullable"] == column.nullable, (table.name, column.name)
                assert _kind(reflected["type"]) == _kind(column.type), (table.name, column.name)
            primary_key = inspector.get_pk_constraint(table.name)["constrained_columns"]
            assert primary_key == [c.name for c in table.primary_key.columns], table.name
            indexes = {i["name"]: list(i["column_names"]) for i in inspector.get_indexes(table.name)}
            declared = {str(i.name): [c.name for c in i.columns] for i in table.indexes}
            assert {n: c for n, c in indexes.items() if n in declared} == declared, table.name
            foreign = {
                (tuple(f["constrained_columns"]), f["referred_table"])
                for f in inspector.get_foreign_keys(table.name)
            }
            assert foreign == {
                (tuple(c.name for c in fk.columns), fk.referred_table.name)
                for fk in table.foreign_key_constraints
            }, table.name


def test_reopening_an_up_to_date_store_changes_nothing(url: str) -> None:
    with Store.open(url) as store:
        store.commit_batch("q", 1, **full_batch())
    before = dump(url, TABLES)
    with Store.open(url) as store:
        assert store.schema_version == LATEST
    assert dump(url, TABLES) == before


def test_a_version_0_database_is_brought_up_to_date(url: str) -> None:
    with raw_engine(url) as engine, engine.begin() as conn:  # a schema_version table, no version applied
        conn.execute(sa.text(store_module._SCHEMA_VERSION_DDL))
    with Store.open(url) as store:
        assert store.schema_version == LATEST
        assert store.commit_batch("q", 1, **full_batch())
    assert table_names(url) == set(TABLES)
    assert versions(url) == [m.version for m in MIGRATIONS]


def test_an_older_database_gets_only_the_missing_steps(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(url) as store:
        store.commit_batch("q", 1, **full_batch())
    calls: list[int] = []

    def fill_notes(conn: sa.Connection) -> None:
        calls.append(1)
        conn.execute(sa.text("UPDATE alerts SET note = 'from v1'"))

    upgraded = Migration(
        LATEST + 1, "test: alert notes", ("ALTER TABLE alerts ADD COLUMN note TEXT", fill_notes)
    )
    monkeypatch.setattr(store_module, "MIGRATIONS", (*MIGRATIONS, upgraded))
    with Store.open(url) as store:
        assert store.schema_version == LATEST + 1
        assert {a.fingerprint for a in store.alerts()} == {
            s.fingerprint for s in full_batch()["alert_states"]
        }
    with Store.open(url) as store:  # nothing left to do
        assert store.schema_version == LATEST + 1
    assert calls == [1]
    assert versions(url) == [*(m.version for m in MIGRATIONS), LATEST + 1]
    with raw_engine(url) as engine, engine.connect() as conn:
        assert set(conn.execute(sa.text("SELECT note FROM alerts")).scalars()) == {"from v1"}


def test_a_failing_migration_changes_nothing(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Migration(
        LATEST + 1,
        "broken",
        ("CREATE TABLE extra (x INTEGER)", "ALTER TABLE no_such_table ADD COLUMN y INTEGER"),
    )
    monkeypatch.setattr(store_module, "MIGRATIONS", (*MIGRATIONS, broken))
    with pytest.raises(
        StoreError, match=rf"from schema version 0 to {LATEST + 1}: migration {LATEST + 1} \(broken\)"
    ):
        Store.open(url)
    assert table_names(url) == set()  # not even schema_version: all steps run in one transaction

    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS)
    with Store.open(url) as store:
        store.commit_batch("q", 1, **full_batch())
    before = dump(url, TABLES)
    monkeypatch.setattr(store_module, "MIGRATIONS", (*MIGRATIONS, broken))
    with pytest.raises(StoreError, match="nothing was changed"):
        Store.open(url)
    assert table_names(url) == set(TABLES)
    assert dump(url, TABLES) == before


def test_a_newer_database_is_refused(url: str) -> None:
    Store.open(url).close()
    with raw_engine(url) as engine, engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO schema_version VALUES (99, 'from the future', 0)"))
    with pytest.raises(
        StoreError, match=rf"schema version 99, newer than this kafka-health knows \({LATEST}\)"
    ):
        Store.open(url)


# --- exactly-once writes -------------------------------------------------------------------------------


def test_a_batch_is_committed_exactly_once(store: Store, url: str) -> None:
    batch = full_batch()
    assert not store.batch_committed("job", 7)
    assert store.commit_batch("job", 7, **batch)
    assert store.batch_committed("job", 7)
    written = dump(url)
    assert counts(url) == {
        "schema_version": len(MIGRATIONS),
        "cluster_windows": 3,
        "load_windows": 8,
        "alerts": 2,
        "alert_events": 1,
        "processed_batches": 1,
        "webhooks": 0,
        "webhook_deliveries": 0,
        "actions": 0,
        "audit_log": 0,
    }

    other = alert_state("c1", 1, "cluster", state="resolved", resolved_at=240.0)
    replay = {**batch, "load_windows": [load_window("c1", 0.0, seed=9.0)], "alert_states": [other]}
    assert not store.commit_batch("job", 7, **replay)  # the same batch id: nothing happens
    assert dump(url) == written

    assert store.commit_batch("job", 8, **batch)  # the same rows under a new id change nothing either
    assert dump(url) == written
    assert store.commit_batch("other-job", 7)  # batch ids are per query
    assert counts(url)["processed_batches"] == 3
    assert not store.batch_committed("job", 9)


def test_concurrent_commits_of_one_batch_apply_it_once(url: str) -> None:
    stores = [Store.open(url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    results: list[bool] = []
    errors: list[BaseException] = []

    def commit(store: Store) -> None:
        try:
            barrier.wait()
            results.append(store.commit_batch("job", 1, **full_batch()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(s,)) for s in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for s in stores:
            s.close()
    assert not errors
    assert sorted(results) == [False, False, False, True]
    assert counts(url)["alert_events"] == 1


def test_events_are_append_only(store: Store) -> None:
    state = alert_state()
    first = alert_event(state, 1, summary="first")
    assert store.commit_batch("q", 1, alert_states=[state], events=[first])
    second = replace(state, event_sequence=2, state="resolved")
    assert store.commit_batch(
        "q",
        2,
        alert_states=[second],
        events=[alert_event(state, 1, summary="rewritten"), alert_event(state, 2, "resolved")],
    )
    events = store.alert_events(state.fingerprint)
    assert [(e.sequence, e.kind, e.summary) for e in events] == [
        (1, "opened", "first"),
        (2, "resolved", state.summary),
    ]
    assert events[0] == first


def test_an_alert_upsert_overwrites_the_state_and_keeps_the_acknowledgement(store: Store) -> None:
    pending = alert_state(state="pending", opened_at=None, hits=1, event_sequence=0, severity="info")
    assert store.commit_batch("q", 1, alert_states=[pending])
    assert store.alert(pending.fingerprint) == pending
    assert not store.acknowledge("0000000000000000", "ops", 1.0)

    opened = replace(
        pending, state="open", severity="critical", hits=3, opened_at=180.0, event_sequence=1, action=None
    )
    assert store.commit_batch("q", 2, alert_states=[opened], events=[alert_event(opened, 1)])
    assert store.alert(opened.fingerprint) == opened
    assert store.acknowledge(opened.fingerprint, "alice", 200.0)
    assert store.acknowledgements([opened.fingerprint, "0000000000000000"]) == {
        opened.fingerprint: store_module.Acknowledgement("alice", 200.0)
    }

    still_open = replace(opened, hits=4, last_seen=240.0, last_window_end=240.0, evidence={"value": 4})
    assert store.commit_batch("q", 3, alert_states=[still_open])
    assert store.alert(opened.fingerprint) == still_open
    assert store.acknowledgements([opened.fingerprint])[opened.fingerprint].by == "alice"

    resolved = replace(still_open, state="resolved", resolved_at=300.0, hits=0, clean=2, event_sequence=2)
    reopened = replace(resolved, state="open", opened_at=600.0, resolved_at=None, event_sequence=3)
    assert store.commit_batch("q", 4, alert_states=[resolved])
    assert store.acknowledgements([opened.fingerprint]) != {}  # same opening: still acknowledged
    assert store.commit_batch("q", 5, alert_states=[reopened])
    assert store.alert(opened.fingerprint) == reopened
    assert store.acknowledgements([opened.fingerprint]) == {}  # a new opening needs a new acknowledgement


def test_floats_and_json_round_trip_exactly(store: Store) -> None:
    tricky = [0.1 + 0.2, 1 / 3, 1e-300, 5e-324, 1.7976931348623157e308, -2.5e-7, 1718000000.123456]
    window = Window("exact", 1718000000.1234567, 1718000060.1234567)
    brokers = tuple(
        BrokerLoad(
            broker=i,
            metrics={"x": value, "y": -value},
            shares={"x": value / 7},
            weighted_load=value,
            normalized_load=value / 3,
            deviation_rate=-value,
        )
        for i, value in enumerate(tricky)
    )
    load = LoadWindow(
        window, brokers, stddev=tricky[0], stddev_threshold=tricky[1], rated_deviation=tricky[4]
    )
    health = {
        "floats": tricky,
        "nested": {"list": [1, 2.5, None, True, "ü ✓"], "empty": {}},
        "big_int": 2**53 + 1,
        "text": 'quote " backslash \\ newline \n',
    }
    state = alert_state(
        "exact",
        first_seen=window.start,
        last_seen=window.end,
        opened_at=window.end,
        last_window_end=window.end,
        evidence={"ratio": tricky[0], "values": tricky, "by_topic": {"orders": 3}},
    )
    row = ClusterWindowRow(window, controller_id=3, controller_epoch=2**40, health=health, evaluated=True)
    assert store.commit_batch("q", 1, load_windows=[load], cluster_windows=[row], alert_states=[state])

    assert store.latest_load("exact") == load
    assert store.alert(state.fingerprint) == state
    [stored] = store.cluster_windows("exact")
    assert stored == replace(row, brokers=len(tricky), stddev=tricky[0], stddev_threshold=tricky[1],
                             rated_deviation=tricky[4], imbalanced=tricky[0] > tricky[1])  # fmt: skip
    assert stored.health == health
    assert store.last_evaluated_window("exact") == window.end


def test_non_finite_numbers_are_refused_before_anything_is_written(store: Store, url: str) -> None:
    nan = float("nan")
    broken_load = load_window()
    broken_load = replace(broken_load, brokers=(replace(broken_load.brokers[0], metrics={"cpu": nan}),))
    with pytest.raises(StoreError, match=r"broker 1: metrics\['cpu'\] must be a finite number"):
        store.commit_batch("q", 1, load_windows=[broken_load], alert_states=[alert_state()])
    with pytest.raises(StoreError, match="evidence is not JSON-serialisable"):
        store.commit_batch("q", 1, alert_states=[alert_state(evidence={"ratio": float("inf")})])
    with pytest.raises(StoreError, match="stddev must be a finite number"):
        store.commit_batch("q", 1, load_windows=[replace(load_window(), stddev=nan)])
    assert not store.batch_committed("q", 1)
    assert all(rows == [] for rows in dump(url).values())


@pytest.mark.parametrize(
    "break_batch",
    [
        pytest.param(
            lambda b: {**b, "events": [*b["events"], alert_event(alert_state(subject="gone"), 1)]}, id="fk"
        ),
        pytest.param(
            lambda b: {**b, "alert_states": [*b["alert_states"], alert_state(subject="x", severity="fatal")]},
            id="check",
        ),
        pytest.param(
            lambda b: {**b, "cluster_windows": [ClusterWindowRow(Window("c9", 60.0, 0.0))]}, id="window-check"
        ),
    ],
)
def test_a_failing_batch_leaves_nothing_half_applied(
    store: Store, url: str, break_batch: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    assert store.commit_batch("q", 1, alert_states=[alert_state("c0")])
    before = dump(url, TABLES)
    with pytest.raises(StoreError, match="commit batch 2 of query 'q' failed on"):
        store.commit_batch("q", 2, **break_batch(full_batch()))
    assert dump(url, TABLES) == before
    assert not store.batch_committed("q", 2)
    assert store.commit_batch("q", 2, **full_batch())  # the fixed batch goes through under the same id


# --- reads -----------------------------------------------------------------------------------------------


def test_reads_and_their_filters(store: Store) -> None:
    a_open = alert_state("a", 1, "cluster", severity="critical", last_seen=300.0)
    a_pending = alert_state(
        "a", 2, "broker:1", state="pending", opened_at=None, last_seen=200.0, event_sequence=0
    )
    a_resolved = alert_state("a", 2, "broker:2", state="resolved", resolved_at=400.0, last_seen=100.0)
    b_open = alert_state("b", 1, "cluster", last_seen=250.0)
    assert store.commit_batch(
        "q",
        1,
        load_windows=[
            load_window("a", 0.0),
            load_window("a", 60.0, seed=2.0),
            load_window("b", 30.0, brokers=2),
        ],
        cluster_windows=[
            ClusterWindowRow(Window("a", 0.0, 60.0), controller_id=1, controller_epoch=5, evaluated=True),
            ClusterWindowRow(
                Window("a", 60.0, 120.0), controller_id=1, controller_epoch=5, health={"u": 1}, evaluated=True
            ),
            ClusterWindowRow(Window("a", 120.0, 180.0), controller_id=2, controller_epoch=6, health={"u": 0}),
        ],
        alert_states=[a_open, a_pending, a_resolved, b_open],
        events=[
            alert_event(a_open, 1),
            alert_event(a_resolved, 1, at=30.0),
            alert_event(a_resolved, 2, "resolved"),
        ],
    )
    assert store.clusters() == ["a", "b"]

    assert store.latest_load("a") == load_window("a", 60.0, seed=2.0)
    assert store.latest_load() == load_window("a", 60.0, seed=2.0)  # ends at 120, b's at 90
    assert store.latest_load("b") == load_window("b", 30.0, brokers=2)
    assert store.latest_load("nope") is None
    assert store.load_history("a", since=0.0) == [load_window("a", 0.0), load_window("a", 60.0, seed=2.0)]
    assert store.load_history("a", since=0.0, until=60.0) == [load_window("a", 0.0)]
    assert store.load_history("a", since=0.0, limit=1) == [load_window("a", 0.0)]
    assert store.load_history("a", since=61.0) == []

    windows = store.cluster_windows("a")
    assert [w.window.start for w in windows] == [0.0, 60.0, 120.0]
    assert (windows[1].stddev, windows[1].health) == (load_window("a", 60.0, seed=2.0).stddev, {"u": 1})
    assert (windows[2].stddev, windows[2].brokers) == (None, None)
    assert [w.window.start for w in store.cluster_windows("a", since=60.0, limit=1)] == [60.0]
    assert store.last_evaluated_window("a") == 120.0
    assert store.last_evaluated_window("b") is None
    common = {"cluster": "a", "controller_id": 1, "controller_epoch": 5}
    assert store.health_history("a", since=60.0) == [
        {**common, "window_start": 60.0, "window_end": 120.0, "health": {"u": 1}, "evaluated": True},
        {**common, "window_start": 120.0, "window_end": 180.0, "health": {"u": 0}, "evaluated": False,
         "controller_id": 2, "controller_epoch": 6},
    ]  # fmt: skip

    def fps(states: Sequence[AlertState]) -> list[str]:
        return [s.fingerprint for s in states]

    assert fps(store.alerts()) == fps([a_open, b_open, a_pending, a_resolved])  # last seen first
    assert fps(store.alerts(cluster="a")) == fps([a_open, a_pending, a_resolved])
    assert fps(store.alerts(state="open")) == fps([a_open, b_open])
    assert fps(store.alerts(state=["open", "pending"], cluster="a")) == fps([a_open, a_pending])
    assert fps(store.alerts(rule=2)) == fps([a_pending, a_resolved])
    assert fps(store.alerts(severity="critical")) == fps([a_open])
    assert fps(store.alerts(limit=2, offset=1)) == fps([b_open, a_pending])
    assert store.alerts(cluster="nope") == []
    assert store.alert_states("a") == {s.fingerprint: s for s in (a_open, a_pending, a_resolved)}
    assert store.alert_states("a", states=("open", "pending")) == {
        s.fingerprint: s for s in (a_open, a_pending)
    }
    assert store.alert("missing") is None

    assert [(e.fingerprint, e.sequence) for e in store.alert_events()] == [
        (a_resolved.fingerprint, 1),
        (a_open.fingerprint, 1),
        (a_resolved.fingerprint, 2),
    ]
    assert [e.sequence for e in store.alert_events(a_resolved.fingerprint)] == [1, 2]
    assert [e.sequence for e in store.alert_events(a_resolved.fingerprint, since_sequence=1)] == [2]
    assert [e.sequence for e in store.alert_events(since=60.0)] == [1, 2]
    assert len(store.alert_events(limit=1)) == 1
    with pytest.raises(StoreError, match="must not be negative"):
        store.alerts(limit=-1)


def test_window_rows_merge_load_and_health(store: Store) -> None:
    window = Window("c1", 0.0, 60.0)
    assert store.commit_batch("q", 1, load_windows=[load_window(brokers=3)])
    assert store.commit_batch(
        "q", 2, cluster_windows=[ClusterWindowRow(window, controller_id=1, evaluated=True)]
    )
    [row] = store.cluster_windows("c1")
    assert (row.brokers, row.stddev, row.controller_id, row.evaluated) == (3, load_window().stddev, 1, True)

    # the window recomputed with fewer brokers: its broker rows are replaced, the health facts kept, and
    # ``evaluated`` stays set
    assert store.commit_batch("q", 3, load_windows=[load_window(brokers=2, seed=3.0)])
    assert store.commit_batch(
        "q", 4, cluster_windows=[ClusterWindowRow(window, controller_id=None, health={"x": 1})]
    )
    latest = store.latest_load("c1")
    assert latest == load_window(brokers=2, seed=3.0)
    [row] = store.cluster_windows("c1")
    assert (row.brokers, row.stddev, row.controller_id, row.health, row.evaluated) == (
        2,
        load_window(seed=3.0).stddev,
        None,
        {"x": 1},
        True,
    )


def test_a_closed_store_says_so(url: str) -> None:
    store = Store.open(url)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        store.alerts()
    with pytest.raises(StoreError, match="is closed"):
        store.commit_batch("q", 1)


# --- opening -----------------------------------------------------------------------------------------------


def test_postgres_urls_without_the_driver_mean_psycopg(postgres_url: str) -> None:
    plain = postgres_url.replace("postgresql+psycopg://", "postgres://")
    with Store.open(plain) as store:
        assert store.dialect == "postgresql"
        assert store.url.startswith("postgresql+psycopg://")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "the store URL is empty"),
        ("not a url", "invalid store URL 'not a url'"),
        (
            "mysql://user:secret@host/db",
            r"unsupported store URL scheme 'mysql' in 'mysql://user:\*\*\*@host/db'",
        ),
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite+aiosqlite:///x.db", "unsupported SQLite driver 'aiosqlite'"),
        ("postgresql+psycopg2://u:secret@h/db", r"unsupported PostgreSQL driver 'psycopg2'.*u:\*\*\*@h"),
    ],
)
def test_bad_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        Store.open(url)


def test_unopenable_databases_are_reported(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot create directory"):
        Store.open(f"sqlite:///{tmp_path / 'file' / 'sub' / 'store.db'}")
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(
        StoreError, match=r"cannot open the store at .*dir\.db: .*unable to open database file"
    ):
        Store.open(f"sqlite:///{tmp_path / 'dir.db'}")
    (tmp_path / "garbage.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"cannot open the store at .*garbage\.db: .*not a database"):
        Store.open(f"sqlite:///{tmp_path / 'garbage.db'}")

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(
        StoreError, match=rf"cannot open the store at postgresql\+psycopg://u:\*\*\*@127.0.0.1:{port}"
    ):
        Store.open(f"postgresql+psycopg://u:secret@127.0.0.1:{port}/db", busy_timeout=2)


def test_the_sqlite_parent_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.db"
    with Store.open(f"sqlite:///{path}") as store:
        assert store.dialect == "sqlite"
    assert path.is_file()


# --- SQLite: WAL -----------------------------------------------------------------------------------------


def test_sqlite_uses_wal_and_readers_do_not_block_the_writer(sqlite_path: Path) -> None:
    with Store.open(f"sqlite:///{sqlite_path}", busy_timeout=0.5) as store:
        assert store.commit_batch("q", 1, load_windows=[load_window(seed=1.0)])
        reader = sqlite3.connect(sqlite_path, isolation_level=None)
        try:
            assert reader.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            reader.execute("BEGIN")
            assert reader.execute("SELECT stddev FROM cluster_windows").fetchall() == [(0.2,)]
            # with a rollback journal, this commit would wait for the reader and fail after 0.5 s
            started = time.monotonic()
            assert store.commit_batch("q", 2, load_windows=[load_window(seed=2.0)])
            assert time.monotonic() - started < 0.5
            assert reader.execute("SELECT stddev FROM cluster_windows").fetchall() == [(0.2,)]  # its snapshot
            reader.execute("COMMIT")
            assert reader.execute("SELECT stddev FROM cluster_windows").fetchall() == [(0.4,)]
        finally:
            reader.close()


def test_sqlite_readers_see_whole_batches_while_a_writer_commits(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    brokers, batches = 300, 40
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def write(store: Store) -> None:
        try:
            for n in range(1, batches + 1):
                state = alert_state(hits=n, event_sequence=n, last_window_end=60.0 * n)
                load = load_window(start=0.0, brokers=brokers, seed=n)
                assert store.commit_batch(
                    "q", n, load_windows=[load], alert_states=[state], events=[alert_event(state, n)]
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    def read(store: Store) -> None:
        try:
            while not stop.is_set():
                latest = store.latest_load("c1")
                if latest is not None:  # one window, rewritten by every batch: all of one batch or none
                    seed = round(latest.stddev / 0.2)
                    assert len(latest.brokers) == brokers
                    assert all(b.metrics["bytes_in"] == 1000.0 * b.broker * seed for b in latest.brokers)
                    seen.append(seed)
                for state in store.alerts(cluster="c1"):
                    assert state.hits == state.event_sequence
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    with Store.open(url) as writer, Store.open(url) as reader_store:
        readers = [threading.Thread(target=read, args=(reader_store,)) for _ in range(3)]
        for thread in readers:
            thread.start()
        write(writer)
        for thread in readers:
            thread.join(60)
        assert not errors, errors
        assert writer.latest_load("c1") == load_window(start=0.0, brokers=brokers, seed=batches)
        assert len(writer.alert_events()) == batches
    assert seen, "the readers never saw a committed batch"
