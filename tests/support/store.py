"""Helpers for tests of :mod:`analytics.store` on every database it supports. Not a pytest plugin: no
fixture, no hook; a test module builds its own fixtures with them::

    @pytest.fixture(params=BACKENDS)
    def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
        return database_url(request, tmp_path / "store.db")

The PostgreSQL side needs the ``postgres_url`` fixture of :mod:`tests.support.postgres` (a fresh database per
test), registered in ``tests/conftest.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

SQLITE: Final = "sqlite"
POSTGRESQL: Final = "postgresql"
BACKENDS: Final = (SQLITE, POSTGRESQL)
"""The parameters of a fixture that runs its tests on an SQLite file and on a real PostgreSQL server."""


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
