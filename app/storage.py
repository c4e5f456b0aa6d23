"""The application's database: every subsystem's migrations in one ordered list, and the stores built on
one :class:`~analytics.store.Database`.

Each subsystem owns its tables, queries and migration: the analytics tables are versions 1 and 5
(:mod:`analytics.store.tables`), the webhooks' versions 2, 7, 8 and 9 (:mod:`app.webhooks.tables`; 9 also
creates the silences' table, :mod:`app.silences.tables`), the runbook actions' versions 3, 4 and 6
(:mod:`app.actions.store`), the service's rolling restarts' version 10 (:mod:`app.maintenance.tables`). A
database records the versions applied (``schema_version``), so the numbers
and descriptions never change; a new migration takes the next number, whichever subsystem it belongs to,
and :data:`MIGRATIONS` sorts them by version. The composition roots (the service,
``kafka-health analytics``, the demo) open the database with this list, so that whichever starts first
creates every table.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Final, Self

import sqlalchemy as sa

from analytics.store import ANALYTICS_MIGRATIONS, DEFAULT_BUSY_TIMEOUT, Database, Migration, Store
from analytics.store.migrations import metadata as schema_version_metadata
from analytics.store.tables import metadata as analytics_metadata
from app.actions.store import ACTION_MIGRATIONS, StoreActionLog
from app.actions.store import metadata as action_metadata
from app.maintenance.tables import MAINTENANCE_MIGRATIONS
from app.maintenance.tables import metadata as maintenance_metadata
from app.silences.tables import metadata as silence_metadata
from app.webhooks.store import WebhookStore
from app.webhooks.tables import WEBHOOK_MIGRATIONS
from app.webhooks.tables import metadata as webhook_metadata

__all__ = ["METADATA", "MIGRATIONS", "Storage", "open_database"]

MIGRATIONS: Final[tuple[Migration, ...]] = tuple(
    sorted(
        (*ANALYTICS_MIGRATIONS, *WEBHOOK_MIGRATIONS, *ACTION_MIGRATIONS, *MAINTENANCE_MIGRATIONS),
        key=lambda m: m.version,
    )
)
"""Every schema version, in order: 1 the analytics tables, 2 the webhooks, 3 and 4 the actions and audit
log, 5 the analytics' hourly rollups and the retention indexes, 6 the actions' and audit entries'
cluster, 7 the webhooks' clusters, 8 the webhooks' ``alertmanager-api`` format, 9 the silences (and the
outbox rows they held), 10 the service's rolling restarts."""

METADATA: Final[tuple[sa.MetaData, ...]] = (
    schema_version_metadata,
    analytics_metadata,
    webhook_metadata,
    action_metadata,
    silence_metadata,
    maintenance_metadata,
)
"""The table definitions the queries are built from, per owner (the same schema as :data:`MIGRATIONS`)."""


def open_database(url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Database:
    """Open the database at ``url`` with every migration (see :meth:`Database.open` for the arguments and
    the errors)."""
    return Database.open(url, MIGRATIONS, busy_timeout=busy_timeout)


@dataclass(frozen=True, slots=True)
class Storage:
    """One open database and each subsystem's store on it; :meth:`close` (or ``with``) closes the database.

    ``actions`` is the action log of the single unnamed cluster (a deployment without named clusters);
    :meth:`actions_for` gives each named cluster's.
    """

    database: Database
    analytics: Store
    webhooks: WebhookStore
    actions: StoreActionLog

    def actions_for(self, cluster: str | None) -> StoreActionLog:
        """The action log of one cluster: its actions and audit entries only (:class:`StoreActionLog`).
        ``cluster`` is a named cluster's name (``[clusters.NAME]``), or None for the single unnamed cluster
        (the rows written before clusters had names). ValueError for an empty name or one with
        whitespace."""
        return self.actions if cluster is None else StoreActionLog(self.database, cluster)

    @classmethod
    def open(cls, url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Storage:
        """:func:`open_database`, and the stores on it."""
        database = open_database(url, busy_timeout=busy_timeout)
        return cls(database, Store(database), WebhookStore(database), StoreActionLog(database))

    def close(self) -> None:
        self.database.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
