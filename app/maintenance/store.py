"""The service's rolling restarts in its database (:mod:`app.maintenance.tables`): :class:`RestartStore`
keeps each run's journal in its row, and :class:`StoreJournal` is the conductor's journal on one row.

Thread-safe: every call is one transaction. Errors are :class:`~analytics.store.StoreError`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from analytics.store import Database, StoreError
from analytics.store.database import check_page
from app.maintenance.journal import CANCELLED, DONE, PAUSED, RUNNING, STOPPED, RunRecord
from app.maintenance.tables import rolling_restarts_table

__all__ = ["UNFINISHED", "RestartRow", "RestartStore", "StoreJournal"]

UNFINISHED = (RUNNING, PAUSED)
"""The states a leader resumes a run from (a run paused by a shutdown or a lost leadership goes on; one
cancelled does not)."""
FINISHED = (DONE, STOPPED, CANCELLED)

_t = rolling_restarts_table.c


@dataclass(frozen=True, slots=True)
class RestartRow:
    id: str
    cluster: str | None
    requested_by: str
    requested_at: float
    updated_at: float
    cancel_requested: bool
    owner: str | None
    record: RunRecord

    @property
    def state(self) -> str:
        return self.record.state


def _row(row: Any) -> RestartRow:
    return RestartRow(
        id=str(row.id),
        cluster=row.cluster,
        requested_by=str(row.requested_by),
        requested_at=float(row.requested_at),
        updated_at=float(row.updated_at),
        cancel_requested=bool(row.cancel_requested),
        owner=row.owner,
        record=RunRecord.from_json(dict(row.record)),
    )


class RestartStore:
    """One cluster's rolling restarts (``cluster`` None: the single unnamed cluster)."""

    def __init__(self, database: Database, cluster: str | None = None) -> None:
        self._db = database
        self.cluster = cluster

    def _mine(self) -> sa.ColumnElement[bool]:
        return _t.cluster.is_(None) if self.cluster is None else _t.cluster == self.cluster

    def create(self, record: RunRecord, *, requested_by: str) -> RestartRow:
        """Record a new run; :class:`RunInProgressError` (naming it) while another one is unfinished."""
        now = time.time()
        with self._db.errors("create rolling restart"), self._db.write() as conn:
            busy = conn.execute(
                sa.select(_t.id).where(self._mine(), _t.state.in_(UNFINISHED)).limit(1)
            ).scalar()
            if busy is not None:
                raise RunInProgressError(str(busy))
            run_id = uuid.uuid4().hex[:12]
            conn.execute(
                sa.insert(rolling_restarts_table).values(
                    id=run_id,
                    cluster=self.cluster,
                    state=record.state,
                    requested_by=requested_by,
                    requested_at=now,
                    updated_at=now,
                    cancel_requested=False,
                    owner=None,
                    record=record.to_json(),
                )
            )
            return _row(conn.execute(sa.select(rolling_restarts_table).where(_t.id == run_id)).one())

    def get(self, run_id: str) -> RestartRow | None:
        with self._db.errors(f"read rolling restart {run_id}"), self._db.read() as conn:
            row = conn.execute(sa.select(rolling_restarts_table).where(_t.id == run_id, self._mine())).first()
        return None if row is None else _row(row)

    def runs(self, *, limit: int = 100, offset: int = 0) -> tuple[list[RestartRow], int]:
        """The runs, newest first, and how many there are."""
        check_page(limit, offset)
        query = (
            sa.select(rolling_restarts_table)
            .where(self._mine())
            .order_by(_t.requested_at.desc(), _t.id)
            .limit(limit)
            .offset(offset)
        )
        count = sa.select(sa.func.count()).select_from(rolling_restarts_table).where(self._mine())
        with self._db.errors("read rolling restarts"), self._db.read() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(query).all()
        return [_row(r) for r in rows], total

    def unfinished(self) -> list[RestartRow]:
        """The runs a leader conducts: running or paused, not cancelled; oldest first."""
        query = (
            sa.select(rolling_restarts_table)
            .where(self._mine(), _t.state.in_(UNFINISHED), _t.cancel_requested.is_(False))
            .order_by(_t.requested_at)
        )
        with self._db.errors("read rolling restarts"), self._db.read() as conn:
            return [_row(r) for r in conn.execute(query).all()]

    def claim(self, run_id: str, owner: str) -> bool:
        """Take the run over (the leader, which alone conducts); False when it is finished or cancelled."""
        with self._db.errors(f"claim rolling restart {run_id}"), self._db.write() as conn:
            updated = conn.execute(
                sa.update(rolling_restarts_table)
                .where(_t.id == run_id, _t.state.in_(UNFINISHED), _t.cancel_requested.is_(False))
                .values(owner=owner, updated_at=time.time())
            ).rowcount
        return updated == 1

    def save(self, run_id: str, record: RunRecord) -> None:
        with self._db.errors(f"save rolling restart {run_id}"), self._db.write() as conn:
            conn.execute(
                sa.update(rolling_restarts_table)
                .where(_t.id == run_id)
                .values(record=record.to_json(), state=record.state, updated_at=time.time())
            )

    def request_cancel(self, run_id: str) -> RestartRow | None:
        """Ask the run to stop (the conductor pauses at its next wait, then it is ``cancelled``); a run
        that is not conducted now (paused) is cancelled at once. None when there is no such run."""
        with self._db.errors(f"cancel rolling restart {run_id}"), self._db.write() as conn:
            row = conn.execute(sa.select(rolling_restarts_table).where(_t.id == run_id, self._mine())).first()
            if row is None:
                return None
            current = _row(row)
            values: dict[str, Any] = {"cancel_requested": True, "updated_at": time.time()}
            if current.state == PAUSED:
                record = current.record
                record.state = CANCELLED
                record.ended_at = time.time()
                values |= {"state": CANCELLED, "record": record.to_json()}
            conn.execute(sa.update(rolling_restarts_table).where(_t.id == run_id).values(**values))
            return _row(conn.execute(sa.select(rolling_restarts_table).where(_t.id == run_id)).one())

    def cancel_requested(self, run_id: str) -> bool:
        with self._db.errors(f"read rolling restart {run_id}"), self._db.read() as conn:
            return bool(conn.execute(sa.select(_t.cancel_requested).where(_t.id == run_id)).scalar() or False)


class RunInProgressError(StoreError):
    """Another rolling restart of the cluster is unfinished (its id is the message)."""


class StoreJournal:
    """The conductor's journal on one row of :class:`RestartStore`."""

    def __init__(self, store: RestartStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    def save(self, run: RunRecord) -> None:
        self.store.save(self.run_id, run)
