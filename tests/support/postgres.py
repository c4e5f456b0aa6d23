"""pytest plugin: one real PostgreSQL server for the run, a fresh database per test.

``postgres_server`` (session) runs ``initdb`` into a temporary directory and starts ``postgres`` on a free
port of 127.0.0.1 (its unix socket in that directory too), tuned for tests (no fsync), and stops it at the
end of the session (fast shutdown, then harder signals; an ``atexit`` hook covers a run that ends without
teardown). ``postgres_url`` (function) creates a database for the test and drops it afterwards, and gives
its SQLAlchemy URL (``postgresql+psycopg://postgres@127.0.0.1:PORT/NAME``).

The binaries (``initdb`` and ``postgres``) are looked up in ``KAFKA_HEALTH_TEST_POSTGRES_BIN``, next to an
``initdb`` on ``PATH``, then in ``/usr/lib/postgresql/*/bin`` (newest first) and ``/usr/local/pgsql/bin``;
without them, tests that need the server are skipped, saying so. PostgreSQL refuses to run as root: under
root the server runs as ``KAFKA_HEALTH_TEST_POSTGRES_USER``, else the ``postgres`` user, else ``nobody``.

Set ``KAFKA_HEALTH_TEST_POSTGRES`` to the URL of an existing server (a role that may create databases,
e.g. ``postgresql://postgres@127.0.0.1:5432/postgres``) to use it instead of starting one.

Enable it in ``tests/conftest.py``: ``pytest_plugins = [..., "tests.support.postgres"]``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

EXTERNAL_SERVER_ENV = "KAFKA_HEALTH_TEST_POSTGRES"
BIN_DIR_ENV = "KAFKA_HEALTH_TEST_POSTGRES_BIN"
RUN_AS_ENV = "KAFKA_HEALTH_TEST_POSTGRES_USER"
SUPERUSER = "postgres"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
_SEARCH_DIRS = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin")
_UNSAFE_NAME_CHARS = re.compile(r"[^a-z0-9_]+")
_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
    "timezone": "UTC",
}


class PostgresError(RuntimeError):
    """The test server could not be set up or started; the message includes its log's tail."""


class PostgresEndpoint(Protocol):
    """What the fixtures need of a server: an admin URL whose role may create databases."""

    @property
    def admin_url(self) -> URL: ...


@dataclass(frozen=True)
class ExternalPostgres:
    """A server someone else runs, named by ``KAFKA_HEALTH_TEST_POSTGRES``."""

    admin_url: URL


@dataclass(frozen=True)
class PostgresBinaries:
    initdb: Path
    postgres: Path

    @property
    def version(self) -> str:
        result = subprocess.run([self.postgres, "--version"], capture_output=True, text=True, check=False)
        return result.stdout.strip() or result.stderr.strip()


def find_binaries() -> PostgresBinaries | None:
    """``initdb`` and ``postgres`` of one installation, or None."""
    candidates: list[Path] = []
    if configured := os.environ.get(BIN_DIR_ENV):
        candidates.append(Path(configured))
    if on_path := shutil.which("initdb"):
        candidates.append(Path(on_path).resolve().parent)
        candidates.append(Path(on_path).parent)
    for pattern in _SEARCH_DIRS:
        candidates.extend(sorted(Path("/").glob(pattern.lstrip("/")), key=_version_key, reverse=True))
    for directory in candidates:
        initdb, postgres = directory / "initdb", directory / "postgres"
        if _executable(initdb) and _executable(postgres):
            return PostgresBinaries(initdb, postgres)
    return None


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", str(path))) or (0,)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _run_as_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run PostgreSQL as (None: run as ourselves, we are not root)."""
    if os.geteuid() != 0:
        return None
    names = [os.environ[RUN_AS_ENV]] if os.environ.get(RUN_AS_ENV) else ["postgres", "nobody"]
    for name in names:
        with contextlib.suppress(KeyError):
            user = pwd.getpwnam(name)
            if user.pw_uid != 0:
                return user
    raise PostgresError(
        f"running as root, and PostgreSQL refuses root: no unprivileged user among {names} to run it as "
        f"(set {RUN_AS_ENV})"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalPostgres:
    """A throw-away PostgreSQL server: ``start()``, ``admin_url``, ``stop()`` (or use it with ``with``)."""

    def __init__(self, binaries: PostgresBinaries) -> None:
        self.binaries = binaries
        self.port = 0
        self._user = _run_as_user()
        self._root: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> URL:
        return URL.create(
            "postgresql+psycopg", username=SUPERUSER, host="127.0.0.1", port=self.port, database="postgres"
        )

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """initdb into a fresh temporary directory, then start the server and wait until it accepts."""
        self._root = Path(tempfile.mkdtemp(prefix="kh-pg-"))
        atexit.register(self.stop)
        try:
            data, sockets = self._root / "data", self._root / "sock"
            sockets.mkdir()
            if self._user is not None:
                for path in (self._root, sockets):
                    os.chown(path, self._user.pw_uid, self._user.pw_gid)
            self._initdb(data)
            for attempt in range(3):  # another process may take the free port before the server binds it
                self.port = _free_port()
                self._launch(data, sockets)
                if self._wait_ready():
                    return
                if attempt == 2 or "could not bind" not in self._log_tail():
                    raise PostgresError(f"PostgreSQL did not start on port {self.port}:\n{self._log_tail()}")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server (fast shutdown; then immediate; then SIGKILL) and remove its directory."""
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        if process is not None:
            _terminate(process)
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    @property
    def _uid(self) -> int | None:
        return None if self._user is None else self._user.pw_uid

    @property
    def _gid(self) -> int | None:
        return None if self._user is None else self._user.pw_gid

    @property
    def _groups(self) -> list[int] | None:
        return None if self._user is None else []

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        if self._user is not None:
            env.update(HOME=str(self._root), USER=self._user.pw_name, LOGNAME=self._user.pw_name)
        return env

    def _initdb(self, data: Path) -> None:
        assert self._root is not None
        command = [
            str(self.binaries.initdb),
            *("--pgdata", str(data)),
            *("--username", SUPERUSER),
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
            "--no-instructions",
        ]
        result = subprocess.run(
            command,
            cwd=self._root,
            env=self._environment(),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
        )
        if result.returncode != 0:
            raise PostgresError(f"initdb failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def _launch(self, data: Path, sockets: Path) -> None:
        assert self._root is not None
        settings = [arg for name, value in _SERVER_SETTINGS.items() for arg in ("-c", f"{name}={value}")]
        command = [
            str(self.binaries.postgres),
            *("-D", str(data)),
            *("-p", str(self.port)),
            *("-h", "127.0.0.1"),
            *("-k", str(sockets)),
            *settings,
        ]
        with open(self._root / "postgres.log", "ab") as log:
            self._process = subprocess.Popen(
                command,
                cwd=self._root,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # our teardown stops it, not a Ctrl-C sent to the terminal's group
                user=self._uid,
                group=self._gid,
                extra_groups=self._groups,
            )

    def _wait_ready(self) -> bool:
        """True once the server accepts connections; False if it exited (e.g. the port was taken)."""
        assert self._process is not None
        engine = sa.create_engine(self.admin_url, poolclass=sa.NullPool, connect_args={"connect_timeout": 2})
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    self._process = None
                    return False
                try:
                    with engine.connect() as conn:
                        conn.execute(sa.text("SELECT 1"))
                    return True
                except sa.exc.OperationalError:
                    time.sleep(0.1)
            raise PostgresError(f"PostgreSQL did not accept connections in {START_TIMEOUT:.0f}s")
        finally:
            engine.dispose()

    def _log_tail(self, lines: int = 30) -> str:
        if self._root is None:
            return ""
        try:
            text = (self._root / "postgres.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGINT (fast shutdown: ends the sessions, checkpoints), SIGQUIT (immediate), then SIGKILL the group."""
    for sig, timeout in ((signal.SIGINT, STOP_TIMEOUT), (signal.SIGQUIT, 10.0)):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)
            return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


# --- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresEndpoint]:
    """One server for the whole run (skips the test when there is neither a server nor binaries)."""
    external = os.environ.get(EXTERNAL_SERVER_ENV)
    if external:
        url = make_url(external)
        if url.get_backend_name() == "postgresql" and "+" not in url.drivername:
            url = url.set(drivername="postgresql+psycopg")
        yield ExternalPostgres(url)
        return
    binaries = find_binaries()
    if binaries is None:
        pytest.skip(
            "PostgreSQL binaries (initdb, postgres) not found on PATH, in $"
            f"{BIN_DIR_ENV} or in {' or '.join(_SEARCH_DIRS)}; install PostgreSQL or set "
            f"{EXTERNAL_SERVER_ENV} to a server's URL"
        )
    with LocalPostgres(binaries) as server:
        yield server


@pytest.fixture(scope="session")
def _postgres_admin(postgres_server: PostgresEndpoint) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_server.admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    yield engine
    engine.dispose()


@pytest.fixture
def postgres_url(
    request: pytest.FixtureRequest, postgres_server: PostgresEndpoint, _postgres_admin: sa.Engine
) -> Iterator[str]:
    """A fresh, empty database for this test (dropped afterwards, open sessions included): its SQLAlchemy
    URL, password shown, ready for ``create_engine`` or ``Store.open``."""
    stem = _UNSAFE_NAME_CHARS.sub("_", request.node.name.lower()).strip("_")[:40]
    name = f"t_{stem}_{uuid.uuid4().hex[:8]}"
    quoted = _postgres_admin.dialect.identifier_preparer.quote_identifier(name)
    with _postgres_admin.connect() as conn:
        # FILE_COPY (PostgreSQL 15+) is several times faster than the default WAL_LOG for a small template
        version = conn.dialect.server_version_info or (0,)
        strategy = " STRATEGY = FILE_COPY" if version >= (15,) else ""
        conn.exec_driver_sql(f"CREATE DATABASE {quoted}{strategy}")
    try:
        yield postgres_server.admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with _postgres_admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
