"""What only the store-backed action log (app.actions.store) does: it survives a restart, and every instance
of the service on one database shares it. On an SQLite file and on a real PostgreSQL server; the checks it
shares with the in-memory log are in test_state.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.actions.state import ActionRecord, ActionState, AuditEntry, StaleRecordError
from app.actions.store import StoreActionLog
from app.storage import open_database
from tests.support.store import BACKENDS, database_url

pytestmark = pytest.mark.integration


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return database_url(request, tmp_path / "store.db")


def record(action_id: str = "a1", at: float = 10.0) -> ActionRecord:
    return ActionRecord(action_id, "reassignment", ActionState.PENDING, "oncall", at, {"partitions": []})


def test_the_store_log_survives_a_reopen(url: str) -> None:
    with open_database(url) as database:
        log = StoreActionLog(database)
        log.update(log.create(record()).moved_to(ActionState.RUNNING))
        StoreActionLog(database).audit(AuditEntry(1.0, "root", "admin", "ack", False, "accepted"))
    with open_database(url) as database:
        log = StoreActionLog(database)
        reopened = log.get("a1")
        assert reopened is not None
        assert reopened.state is ActionState.RUNNING
        assert [e.action for e in log.audit_entries()] == ["ack"]


def test_two_services_on_one_database_share_the_log(url: str) -> None:
    with open_database(url) as one, open_database(url) as other:
        first, second = StoreActionLog(one), StoreActionLog(other)
        created = first.create(record("a1", 10.0))
        second.create(record("a2", 20.0))
        first.audit(AuditEntry(1.0, "oncall", "operator", "reassignment", False, "accepted", "a1"))
        second.audit(AuditEntry(2.0, "oncall", "operator", "reassignment", False, "accepted", "a2"))
        for log in (first, second):
            assert [r.id for r in log.records()] == ["a2", "a1"]
            assert [e.action_id for e in log.audit_entries()] == ["a2", "a1"]
        cancelled = second.update(created.moved_to(ActionState.CANCELLED))
        assert first.get("a1") == cancelled
        with pytest.raises(StaleRecordError):
            first.update(created.moved_to(ActionState.RUNNING))  # the other service was first
