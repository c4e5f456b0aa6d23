"""The silences' queries: :class:`SilenceStore`, on the ``silences`` table (:mod:`app.silences.tables`).

Silences are kept when they end (the events they silenced name them: ``silenced_by``); expiring one by
hand sets its end to that moment. What a silence does to the webhook outbox is
:meth:`app.webhooks.store.WebhookStore.enqueue_deliveries`' and ``release_silenced``'s.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analytics.store import Database, StoreError
from analytics.store.database import check_page, finite
from app.silences.model import (
    SILENCE_STATES,
    Maintenance,
    Matcher,
    Silence,
    SilenceDraft,
    SilenceState,
)
from app.silences.tables import silences_table

__all__ = ["SilenceStore", "silences_ending_after"]


class SilenceStore:
    """The silences, on a :class:`Database` opened with the app's migrations (the caller closes it).
    Thread-safe: every call is one transaction. Errors are :class:`StoreError`."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def create(self, draft: SilenceDraft, *, created_by: str, now: float) -> Silence:
        """Store a checked silence (:func:`app.silences.model.check_draft`)."""
        if not created_by:
            raise StoreError("create silence: created_by must not be empty")
        now = finite(now, "create silence: now")
        values = {
            "matchers": [m.to_json() for m in draft.matchers],
            "maintenance": None if draft.maintenance is None else draft.maintenance.to_json(),
            "starts_at": finite(draft.starts_at, "silence starts_at"),
            "ends_at": finite(draft.ends_at, "silence ends_at"),
            "comment": draft.comment,
            "created_by": created_by,
            "created_at": now,
        }
        with self._db.errors("create silence"), self._db.write() as conn:
            silence_id = int(
                conn.execute(
                    sa.insert(silences_table).values(**values).returning(silences_table.c.id)
                ).scalar_one()
            )
            return _silence(conn.execute(_select(silence_id)).one())

    def silence(self, silence_id: int) -> Silence | None:
        with self._db.errors(f"read silence {silence_id}"), self._db.read() as conn:
            row = conn.execute(_select(silence_id)).first()
        return None if row is None else _silence(row)

    def silences(
        self,
        now: float,
        *,
        state: Collection[SilenceState] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[Silence], int]:
        """The silences in ``state`` (at ``now``; None: every state), newest first, and how many there are."""
        check_page(limit, offset)
        query = sa.select(silences_table).where(_in_states(state, now)).order_by(silences_table.c.id.desc())
        count = sa.select(sa.func.count()).select_from(silences_table).where(_in_states(state, now))
        with self._db.errors("read silences"), self._db.read() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(query.limit(limit).offset(offset)).all()
        return [_silence(r) for r in rows], total

    def expire(self, silence_id: int, *, by: str, now: float) -> tuple[Silence | None, bool]:
        """End the silence now; (the silence, whether this call ended it): False when it had ended already
        (None when there is no such silence)."""
        s = silences_table.c
        now = finite(now, "expire silence: now")
        with self._db.errors(f"expire silence {silence_id}"), self._db.write() as conn:
            ended = conn.execute(
                sa.update(silences_table)
                .where(s.id == silence_id, s.ends_at > now)
                .values(ends_at=now, expired_by=by, expired_at=now)
            ).rowcount
            row = conn.execute(_select(silence_id)).first()
        return (None if row is None else _silence(row)), ended == 1

    def ending_after(self, since: float) -> list[Silence]:
        """The silences that end after ``since`` (:func:`silences_ending_after`), by id."""
        with self._db.errors("read silences"), self._db.read() as conn:
            return silences_ending_after(conn, since)

    def counts(self, now: float) -> dict[SilenceState, int]:
        """How many silences are in each state at ``now`` (every state present)."""
        s = silences_table.c
        counts = dict.fromkeys(SILENCE_STATES, 0)
        state = sa.case((s.ends_at <= now, "expired"), (s.starts_at > now, "pending"), else_="active")
        query = sa.select(state, sa.func.count()).group_by(state)
        with self._db.errors("count silences"), self._db.read() as conn:
            for name, n in conn.execute(query):
                counts[name] = int(n)
        return counts


def silences_ending_after(conn: Connection, since: float) -> list[Silence]:
    """The silences that end after ``since`` (those that may silence an event from then on), in the
    caller's transaction."""
    query = sa.select(silences_table).where(silences_table.c.ends_at > since).order_by(silences_table.c.id)
    return [_silence(r) for r in conn.execute(query)]


def _in_states(states: Collection[SilenceState] | None, now: float) -> sa.ColumnElement[bool]:
    s = silences_table.c
    if states is None:
        return sa.true()
    conditions = {
        "expired": s.ends_at <= now,
        "pending": sa.and_(s.ends_at > now, s.starts_at > now),
        "active": sa.and_(s.ends_at > now, s.starts_at <= now),
    }
    return sa.or_(sa.false(), *(conditions[state] for state in sorted(set(states))))


def _select(silence_id: int) -> sa.Select[Any]:
    return sa.select(silences_table).where(silences_table.c.id == silence_id)


def _silence(row: sa.Row[Any]) -> Silence:
    maintenance = row.maintenance
    return Silence(
        id=int(row.id),
        matchers=tuple(
            Matcher(str(m["name"]), str(m["value"]), bool(m.get("regex", False))) for m in row.matchers
        ),
        maintenance=None if maintenance is None else Maintenance(int(maintenance["broker"])),
        starts_at=float(row.starts_at),
        ends_at=float(row.ends_at),
        comment=str(row.comment),
        created_by=str(row.created_by),
        created_at=float(row.created_at),
        expired_by=None if row.expired_by is None else str(row.expired_by),
        expired_at=None if row.expired_at is None else float(row.expired_at),
    )
