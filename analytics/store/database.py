"""The database every store is built on: one SQLAlchemy 2 Core engine over an SQLite file (the default;
WAL journal, foreign keys on, a busy timeout) or PostgreSQL (``postgresql+psycopg://USER:PASSWORD@HOST:
PORT/DATABASE``), with its schema brought up to date by the migrations it is opened with.

Each subsystem owns its tables and queries (:class:`analytics.store.Store` the analytics tables, the
webhooks and the actions theirs, in the app layer) and builds them on one shared :class:`Database`: the
transaction helpers, the error wrapping, the dialect-aware upsert and the value checks live here, once.
See ``docs/store.md``.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from analytics.store.errors import StoreError, error_detail
from analytics.store.migrations import Migration, migrate

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DOUBLE_TYPE",
    "JSON_TYPE",
    "TIME_TYPE",
    "Database",
    "check_page",
    "finite",
    "json_dumps",
    "json_object",
    "one_or_many",
    "opt_finite",
    "opt_float",
    "opt_int",
]

DEFAULT_BUSY_TIMEOUT: Final = 30.0
"""Seconds an SQLite connection waits for another writer's lock before failing."""

JSON_TYPE: Final = sa.JSON(none_as_null=True)
"""The type of every store's JSON columns (Python's None is SQL NULL, not JSON ``null``)."""
DOUBLE_TYPE: Final = sa.DOUBLE_PRECISION
"""The type of every store's floating-point columns: ``DOUBLE PRECISION`` on both databases."""
TIME_TYPE: Final = DOUBLE_TYPE
"""The type of every store's times: epoch seconds as ``DOUBLE PRECISION``."""

_URL_FORMS: Final = "sqlite:///PATH (a file) or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
_WRITE: Final = "kafka_health_write"
"""Connection execution option: begin the SQLite transaction with BEGIN IMMEDIATE (take the write lock
first, so that a read-then-write transaction never fails to upgrade its lock)."""


class Database:
    """One database, open and at the schema of the migrations it was opened with; open it with
    :meth:`Database.open`, close it with :meth:`close` (or ``with``).

    Thread-safe: every :meth:`read` and :meth:`write` takes a pooled connection for one transaction, so the
    stores built on one database share its pool.
    """

    def __init__(self, engine: Engine, shown_url: str) -> None:
        """Use :meth:`Database.open`."""
        self._engine: Engine | None = engine
        self._shown_url = shown_url
        self._dialect = engine.dialect.name
        self._version = 0

    # -- opening and closing

    @classmethod
    def open(
        cls, url: str, migrations: Sequence[Migration], *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    ) -> Database:
        """Open the database at ``url``, creating or upgrading its schema with ``migrations``.

        ``url``: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` (the parent directory is
        created) or ``postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE`` (``postgresql://`` and
        ``postgres://`` mean the same). ``busy_timeout``: seconds an SQLite connection waits for a lock.
        Raises :class:`StoreError` for a bad or unsupported URL, a database that cannot be opened, a failed
        migration, or a schema newer than ``migrations``.
        """
        parsed = _parse_url(url)
        shown = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite":
            engine = _sqlite_engine(parsed, shown, busy_timeout)
        else:
            engine = sa.create_engine(
                parsed,
                pool_pre_ping=True,
                json_serializer=json_dumps,
                connect_args={"connect_timeout": max(1, math.ceil(busy_timeout))},
            )
        database = cls(engine, shown)
        try:
            database._version = migrate(database, migrations)
        except BaseException:
            database.close()
            raise
        return database

    def close(self) -> None:
        """Close every pooled connection; the database cannot be used afterwards (closing twice is fine)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._engine is None

    @property
    def schema_version(self) -> int:
        """The database's schema version (the last of the migrations it was opened with, once open)."""
        return self._version

    @property
    def url(self) -> str:
        """The database's URL, password hidden."""
        return self._shown_url

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._dialect

    def __repr__(self) -> str:
        state = "closed" if self._engine is None else f"schema version {self._version}"
        return f"Database({self._shown_url!r}, {state})"

    # -- transactions

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection whose statements share one transaction (one snapshot), rolled back at the end."""
        with self._engine_or_fail().connect() as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A connection in a write transaction, committed at the end (rolled back on an exception)."""
        with self._engine_or_fail().connect() as conn:
            conn.execution_options(**{_WRITE: True})
            with conn.begin():
                yield conn

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Turns a database error into a :class:`StoreError` saying what failed, on which store, and why."""
        try:
            yield
        except StoreError:
            raise
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StoreError(f"{action} failed on {self._shown_url}: {error_detail(exc)}") from exc

    def insert(self, table: sa.Table) -> sqlite.Insert | postgresql.Insert:
        """An ``INSERT`` with this dialect's ``ON CONFLICT`` (``on_conflict_do_nothing``/``_do_update``)."""
        return sqlite.insert(table) if self._dialect == "sqlite" else postgresql.insert(table)

    def _engine_or_fail(self) -> Engine:
        if self._engine is None:
            raise StoreError(f"the store at {self._shown_url} is closed")
        return self._engine


# --- values: checked before any SQL runs, so that a bad one fails naming its field ---------------------


def finite(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StoreError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def opt_finite(value: float | None, what: str) -> float | None:
    return None if value is None else finite(value, what)


def json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON round-trip copy (so that a bad value fails here, naming the field, not halfway into SQL)."""
    try:
        loaded = json.loads(json_dumps(value))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} is not JSON-serialisable (finite numbers only): {exc}") from exc
    if not isinstance(loaded, dict):
        raise StoreError(f"{what} must be a JSON object, got {type(value).__name__}")
    return loaded


def json_dumps(value: Any) -> str:
    """The JSON columns' serializer: compact, floats exact (``repr``), NaN and infinities refused."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"), default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def check_page(limit: int, offset: int) -> None:
    if limit < 0 or offset < 0:
        raise StoreError(f"limit and offset must not be negative, got limit={limit}, offset={offset}")


def one_or_many(value: str | Collection[str]) -> list[str]:
    """A filter's values: one (a string) or several."""
    return [value] if isinstance(value, str) else list(value)


def opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


# --- URLs and engines ------------------------------------------------------------------------------------

_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@/]*@")


def check_store_url(url: str) -> str:
    """``url`` when :meth:`Database.open` would take it (sqlite:///FILE or PostgreSQL with psycopg), without
    opening anything: a settings validator's check, so that a bad URL is bad input before a process starts.
    Raises :class:`StoreError` saying what is wrong and which forms work."""
    _parse_url(url)
    return url


def store_directory(url: str) -> Path | None:
    """The directory of the SQLite file ``url`` names (what :meth:`Database.open` would create), None for
    PostgreSQL or an SQLite ``uri=true`` URL. Raises :class:`StoreError` for a bad URL."""
    parsed = _parse_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.query.get("uri"):
        return None
    return Path(parsed.database or "").expanduser().parent


def check_store_directory(url: str) -> None:
    """Raises :class:`StoreError` naming the directory when ``url`` is an SQLite file whose directory does
    not exist (or is not a directory): without ``create_store_dir`` a typo in the path is bad input, not a
    new empty store in a new directory tree (as a spool directory is)."""
    directory = store_directory(url)
    if directory is None or directory.is_dir():
        return
    what = "is not a directory" if directory.exists() else "does not exist"
    raise StoreError(f"store directory {directory} {what}")


def _parse_url(url: str) -> URL:
    if not isinstance(url, str) or not url.strip():
        raise StoreError(f"the store URL is empty; use {_URL_FORMS}")
    shown = _PASSWORD_IN_URL.sub(r"\1***@", url)
    try:
        parsed = make_url(url.strip())
    except ArgumentError as exc:
        raise StoreError(f"invalid store URL {shown!r}: use {_URL_FORMS}") from exc
    backend, driver = parsed.get_backend_name(), parsed.drivername.partition("+")[2]
    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise StoreError(f"unsupported SQLite driver {driver!r} in {shown!r}: use sqlite:///PATH")
        if parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory":
            raise StoreError(
                f"the store needs an SQLite file, not an in-memory database: {shown!r}; use sqlite:///PATH"
            )
        return parsed
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise StoreError(
                f"unsupported PostgreSQL driver {driver!r} in {shown!r}: "
                "use postgresql+psycopg:// (psycopg 3)"
            )
        return parsed.set(drivername="postgresql+psycopg")
    raise StoreError(f"unsupported store URL scheme {parsed.drivername!r} in {shown!r}: use {_URL_FORMS}")


def _sqlite_engine(url: URL, shown: str, busy_timeout: float) -> Engine:
    database = url.database or ""
    if not url.query.get("uri"):
        parent = Path(database).expanduser().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot open the store at {shown}: cannot create directory {parent}: {exc}"
            ) from exc
    engine = sa.create_engine(url, json_serializer=json_dumps, connect_args={"timeout": busy_timeout})

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, begin transactions (see on_begin), so that SELECTs and DDL
        # are transactional too; then set the per-connection pragmas (outside any transaction).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={max(0, round(busy_timeout * 1000))}")
        finally:
            cursor.close()

    def on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    return engine
