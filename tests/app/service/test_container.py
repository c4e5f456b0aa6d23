"""The audit trail of several clusters (:func:`app.service.container.audit_trail`): the clusters' logs merged
newest first and paged over them all, on the store's logs of two clusters sharing one database, up to the
largest offset the API takes (2^63-1: the merge's ``offset + limit`` made SQLite raise OverflowError)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.actions.state import ActionLog, AuditEntry
from app.service.container import audit_trail
from app.service.schemas.common import MAX_ID
from app.storage import Storage
from tests.support.store import BACKENDS, database_url

pytestmark = pytest.mark.integration


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return database_url(request, tmp_path / "store.db")


def _entry(at: float, action_id: str) -> AuditEntry:
    return AuditEntry(at, "root", "admin", "ack", False, "accepted", action_id)


def _ids(entries: list[AuditEntry]) -> list[str | None]:
    return [e.action_id for e in entries]


def test_the_trail_of_two_clusters_is_merged_newest_first_and_paged_over_both(url: str) -> None:
    with Storage.open(url) as storage:
        a, b = storage.actions_for("a"), storage.actions_for("b")
        for at, log, action_id in ((1.0, a, "a1"), (2.0, b, "b2"), (3.0, a, "a3"), (4.0, b, "b4")):
            log.audit(_entry(at, action_id))
        logs: list[ActionLog] = [a, b]
        assert _ids(audit_trail(logs, limit=100, offset=0)) == ["b4", "a3", "b2", "a1"]
        assert _ids(audit_trail(logs, limit=2, offset=1)) == ["a3", "b2"]
        assert _ids(audit_trail(logs, limit=1000, offset=3)) == ["a1"]
        assert _ids(audit_trail([a], limit=1, offset=1)) == ["a1"]


def test_an_offset_up_to_the_largest_is_an_empty_page_not_an_overflow(url: str) -> None:
    with Storage.open(url) as storage:
        a, b = storage.actions_for("a"), storage.actions_for("b")
        a.audit(_entry(1.0, "a1"))
        b.audit(_entry(2.0, "b2"))
        for offset in (MAX_ID, MAX_ID - 1, MAX_ID - 1000, 2**62):
            for limit in (1, 100, 1000):
                assert audit_trail([a, b], limit=limit, offset=offset) == [], (offset, limit)
                assert audit_trail([a], limit=limit, offset=offset) == [], (offset, limit)
