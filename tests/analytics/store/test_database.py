"""The database every store is built on (:class:`analytics.store.Database`): opening by URL, the errors
that name the store, closing, and SQLite's WAL (readers and the writer never block each other)."""

from __future__ import annotations

import socket
import sqlite3
import threading
from pathlib import Path

import pytest

from analytics.store import ANALYTICS_MIGRATIONS, Database, Store, StoreError
from tests.support.store import BACKENDS, alert_event, alert_state, database_url, load_window

pytestmark = pytest.mark.integration


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database (its SQLite parent directory does not exist yet)."""
    return database_url(request, tmp_path / "data" / "store.db")


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


def test_a_closed_store_says_so(url: str) -> None:
    store = Store.open(url)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        store.alerts()
    with pytest.raises(StoreError, match="is closed"):
        store.commit_batch("q", 1)


def test_stores_on_a_callers_database_leave_closing_it_to_the_caller(url: str) -> None:
    database = Database.open(url, ANALYTICS_MIGRATIONS)
    first, second = Store(database), Store(database)
    assert first.commit_batch("q", 1, load_windows=[load_window()])
    first.close()  # not its database to close
    assert second.latest_load() == load_window()
    assert repr(second) == f"Store({database.url!r}, schema version 5)"
    database.close()
    database.close()
    assert repr(second) == f"Store({database.url!r}, closed)"
    with pytest.raises(StoreError, match="is closed"):
        second.alerts()


# --- opening -----------------------------------------------------------------------------------------------


def test_postgres_urls_without_the_driver_mean_psycopg(postgres_url: str) -> None:
    plain = postgres_url.replace("postgresql+psycopg://", "postgres://")
    with Database.open(plain, ANALYTICS_MIGRATIONS) as database:
        assert database.dialect == "postgresql"
        assert database.url.startswith("postgresql+psycopg://")


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
        Database.open(url, ANALYTICS_MIGRATIONS)


def test_unopenable_databases_are_reported(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot create directory"):
        Database.open(f"sqlite:///{tmp_path / 'file' / 'sub' / 'store.db'}", ANALYTICS_MIGRATIONS)
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(
        StoreError, match=r"cannot open the store at .*dir\.db: .*unable to open database file"
    ):
        Database.open(f"sqlite:///{tmp_path / 'dir.db'}", ANALYTICS_MIGRATIONS)
    (tmp_path / "garbage.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"cannot open the store at .*garbage\.db: .*not a database"):
        Database.open(f"sqlite:///{tmp_path / 'garbage.db'}", ANALYTICS_MIGRATIONS)

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(
        StoreError, match=rf"cannot open the store at postgresql\+psycopg://u:\*\*\*@127.0.0.1:{port}"
    ):
        Database.open(
            f"postgresql+psycopg://u:secret@127.0.0.1:{port}/db", ANALYTICS_MIGRATIONS, busy_timeout=2
        )


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
            assert store.commit_batch("q", 2, load_windows=[load_window(seed=2.0)])
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
