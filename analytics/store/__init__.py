"""The analytics store, and the database every store is built on.

- :mod:`~analytics.store.database`: :class:`Database` (opening by URL, SQLite or PostgreSQL, transactions,
  error wrapping, the dialect-aware upsert, the value checks every store shares);
- :mod:`~analytics.store.migrations`: :class:`Migration` and the runner (``schema_version``);
- :mod:`~analytics.store.tables`: the analytics tables and their migration (version 1);
- :mod:`~analytics.store.store`: :class:`Store`, the analytics queries, ``commit_batch`` (the load lane's
  writer) and ``commit_incidents`` (the incident lane's)
  (:mod:`~analytics.store.batch` checks a batch's rows, :mod:`~analytics.store.rows` reads rows back).

The webhooks and the runbook actions own their tables in the app layer, which composes every migration
(``app/storage.py``). See ``docs/store.md``.
"""

from analytics.store.database import DEFAULT_BUSY_TIMEOUT, Database, check_store_url
from analytics.store.errors import StoreConflictError, StoreError
from analytics.store.migrations import Migration, MigrationStep
from analytics.store.rows import Acknowledgement, BrokerRollup, ClusterWindowRow, LoadRollup
from analytics.store.store import ALL_ALERT_STATES, Store
from analytics.store.tables import ANALYTICS_MIGRATIONS

__all__ = [
    "ALL_ALERT_STATES",
    "ANALYTICS_MIGRATIONS",
    "DEFAULT_BUSY_TIMEOUT",
    "Acknowledgement",
    "BrokerRollup",
    "ClusterWindowRow",
    "Database",
    "LoadRollup",
    "Migration",
    "MigrationStep",
    "Store",
    "StoreConflictError",
    "StoreError",
    "check_store_url",
]
