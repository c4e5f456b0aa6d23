"""What only the store-backed action log (app.actions.store) does: it survives a restart, and every instance
of the service on one database shares it. On an SQLite file and on a real PostgreSQL server; the checks it
shares with the in-memory log are in test_state.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.actions.state import ActionRecord, ActionState, AuditEntry, StaleRecordError
from app.actions.store import StoreActionLog
from app.storage import Storage, open_database
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


def test_the_logs_of_two_clusters_on_one_database_never_see_each_other(url: str) -> None:
    with Storage.open(url) as storage:
        logs = {"a": storage.actions_for("a"), "b": storage.actions_for("b"), None: storage.actions}
        assert storage.actions_for(None) is storage.actions
        for n, (cluster, log) in enumerate(logs.items()):
            created = log.create(record(f"{cluster}-1", 10.0 + n))
            log.create(record(f"{cluster}-2", 20.0 + n))
            log.update(created.moved_to(ActionState.RUNNING))
            log.audit(
                AuditEntry(1.0 + n, "oncall", "operator", "reassignment", False, "accepted", created.id)
            )
        for cluster, log in logs.items():
            assert [r.id for r in log.records()] == [f"{cluster}-2", f"{cluster}-1"]
            assert {r.cluster for r in log.records()} == {cluster}
            assert [r.id for r in log.unfinished()] == [f"{cluster}-1", f"{cluster}-2"]  # what it adopts
            assert [r.id for r in log.records(state="RUNNING")] == [f"{cluster}-1"]  # its conflicts
            assert [e.action_id for e in log.audit_entries()] == [f"{cluster}-1"]
            for other in logs:
                if other != cluster:
                    assert log.get(f"{other}-1") is None
        theirs = logs["b"].get("b-2")
        assert theirs is not None
        with pytest.raises(StaleRecordError) as stale:  # another cluster's action: not this log's to change
            logs["a"].update(theirs.moved_to(ActionState.CANCELLED))
        assert stale.value.current is None
        assert logs["b"].get("b-2") == theirs
        with pytest.raises(ValueError, match="exists already"):  # ids are unique across the clusters
            logs["a"].create(record("b-1"))
        reopened = StoreActionLog(storage.database, "a")  # another instance of the service, same cluster
        assert [r.id for r in reopened.unfinished()] == ["a-1", "a-2"]


@pytest.mark.parametrize("cluster", ["", "two words", "x" * 256])
def test_a_cluster_log_needs_a_cluster_name(url: str, cluster: str) -> None:
    with Storage.open(url) as storage, pytest.raises(ValueError, match="cluster name"):
        storage.actions_for(cluster)
