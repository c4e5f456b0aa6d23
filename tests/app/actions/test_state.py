"""The action state machine, and the action log's contract: the same checks on the in-memory log (the
fake the unit tests use) and on the store-backed one (app.actions.store, on an SQLite file and on a real
PostgreSQL server). What only the store-backed log does is in test_store.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.actions.state import (
    AUDIT_DETAIL_BYTES,
    AUDIT_LISTED,
    AUDIT_TEXT,
    TERMINAL,
    ActionLog,
    ActionRecord,
    ActionState,
    AuditEntry,
    IllegalTransitionError,
    MemoryActionLog,
    StaleRecordError,
    bounded_detail,
    request_digest,
)
from app.actions.store import StoreActionLog
from app.storage import open_database
from tests.support.store import BACKENDS, database_url


def record(action_id: str = "a1", at: float = 10.0) -> ActionRecord:
    return ActionRecord(action_id, "reassignment", ActionState.PENDING, "oncall", at, {"partitions": []})


@pytest.mark.unit
@pytest.mark.parametrize(
    ("path", "legal"),
    [
        ([ActionState.RUNNING, ActionState.SUCCEEDED], True),
        ([ActionState.RUNNING, ActionState.PARTIAL], True),
        ([ActionState.RUNNING, ActionState.CANCELLED], True),
        ([ActionState.RUNNING, ActionState.STALLED, ActionState.RUNNING, ActionState.SUCCEEDED], True),
        ([ActionState.RUNNING, ActionState.STALLED, ActionState.CANCELLED], True),
        ([ActionState.STALLED], False),
        ([ActionState.RUNNING, ActionState.STALLED, ActionState.PENDING], False),
        ([ActionState.CANCELLED], True),
        ([ActionState.FAILED], True),
        ([ActionState.SUCCEEDED], False),
        ([ActionState.RUNNING, ActionState.PENDING], False),
        ([ActionState.RUNNING, ActionState.SUCCEEDED, ActionState.RUNNING], False),
        ([ActionState.CANCELLED, ActionState.RUNNING], False),
    ],
)
def test_transitions(path: list[ActionState], legal: bool) -> None:
    def walk() -> ActionRecord:
        current = record()
        for state in path:
            current = current.moved_to(state)
        return current

    if not legal:
        with pytest.raises(IllegalTransitionError, match="cannot become"):
            walk()
        return
    current = walk()
    if current.state in TERMINAL:
        assert current.finished_at is not None
    if ActionState.RUNNING in path:
        assert current.started_at is not None


@pytest.fixture(params=["memory", *BACKENDS])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ActionLog]:
    if request.param == "memory":
        yield MemoryActionLog()
        return
    with open_database(database_url(request, tmp_path / "store.db")) as database:
        yield StoreActionLog(database)


@pytest.fixture(params=["memory", *BACKENDS])
def prod_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ActionLog]:
    """The log of the named cluster ``prod``."""
    if request.param == "memory":
        yield MemoryActionLog("prod")
        return
    with open_database(database_url(request, tmp_path / "store.db")) as database:
        yield StoreActionLog(database, "prod")


@pytest.mark.integration
def test_a_cluster_log_writes_its_cluster_on_what_it_keeps(prod_log: ActionLog) -> None:
    created = prod_log.create(replace(record("a1"), cluster="other"))  # the log's cluster wins
    assert created.cluster == "prod"
    running = prod_log.update(replace(created.moved_to(ActionState.RUNNING), cluster=None))
    assert running.cluster == "prod"
    assert prod_log.get("a1") == running
    assert [r.cluster for r in prod_log.records()] == ["prod"]
    prod_log.audit(AuditEntry(1.0, "root", "admin", "ack", False, "accepted", cluster="other"))
    assert [e.cluster for e in prod_log.audit_entries()] == ["prod"]


@pytest.mark.integration
def test_the_unnamed_cluster_log_keeps_no_cluster(log: ActionLog) -> None:
    assert log.create(record("a1")).cluster is None
    log.audit(AuditEntry(1.0, "root", "admin", "ack", False, "accepted"))
    assert [e.cluster for e in log.audit_entries()] == [None]


@pytest.mark.integration
def test_the_log_keeps_actions_and_their_latest_state(log: ActionLog) -> None:
    first = log.create(record("a1", 10.0))
    log.create(record("a2", 20.0))
    assert first.version == 1
    running = log.update(first.moved_to(ActionState.RUNNING, progress={"batches_done": 1}, owner="me"))
    assert running.version == 2
    assert log.get("a1") == running
    assert log.get("nope") is None
    with pytest.raises(ValueError, match="exists already"):
        log.create(record("a1"))
    assert [r.id for r in log.records()] == ["a2", "a1"]
    assert [r.id for r in log.records(state="RUNNING")] == ["a1"]
    assert [r.id for r in log.records(limit=1, offset=1)] == ["a1"]


@pytest.mark.integration
def test_the_audit_trail_is_append_only_newest_first(log: ActionLog) -> None:
    for n in range(3):
        log.audit(
            AuditEntry(float(n), "oncall", "operator", "reassignment", n == 0, "accepted", None, {"n": n})
        )
    entries = log.audit_entries()
    assert [e.detail["n"] for e in entries] == [2, 1, 0]
    assert [e.dry_run for e in entries] == [False, False, True]
    sequences = [e.sequence for e in entries]
    assert sequences == sorted(sequences, reverse=True)
    assert len(set(sequences)) == 3
    assert [e.detail["n"] for e in log.audit_entries(limit=1, offset=2)] == [0]


@pytest.mark.integration
def test_an_audit_entry_of_a_huge_request_is_bounded(log: ActionLog) -> None:
    """A request of 200,000 partitions (issue 13: a 16.3 MB audit row) is kept as its first items, the
    counts and the request's digest, in a few kilobytes, by both logs."""
    request = {
        "partitions": [{"topic": f"t{n}", "partition": n, "replicas": [1, 2, 3]} for n in range(200_000)],
        "dry_run": True,
    }
    problems = [f"partition t{n}-{n}: unknown topic t{n}" for n in range(200_000)]
    detail = {"request": request, "problems": problems, "reason": "x" * 100_000}
    log.audit(AuditEntry(1.0, "oncall", "operator", "reassignment", True, "refused", None, detail))
    (entry,) = log.audit_entries()
    kept = entry.detail
    assert len(json.dumps(kept)) < 64 * 1024
    assert kept["problems_total"] == 200_000
    assert kept["problems"] == problems[:AUDIT_LISTED]
    assert kept["request"]["partitions_total"] == 200_000
    assert kept["request"]["partitions"][0] == {"topic": "t0", "partition": 0, "replicas": [1, 2, 3]}
    assert kept["request"]["dry_run"] is True
    assert kept["reason"].startswith("x" * AUDIT_TEXT)
    assert kept["reason"].endswith("(100,000 characters)")


@pytest.mark.unit
def test_a_small_detail_is_kept_as_it_is() -> None:
    detail = {"partitions": 3, "problems": ["a", "b"], "nested": {"brokers": [1, 2]}, "reason": None}
    assert bounded_detail(detail) == detail


@pytest.mark.unit
def test_a_detail_still_too_large_keeps_its_size_and_digest() -> None:
    """Many keys of long texts: each bounded, together still too large."""
    detail = {f"k{n}": "y" * AUDIT_TEXT for n in range(AUDIT_LISTED)}
    kept = bounded_detail(detail)
    assert kept["truncated"] is True
    assert kept["bytes"] > AUDIT_DETAIL_BYTES
    assert len(kept["sha256"]) == 64


@pytest.mark.unit
def test_a_mapping_keyed_by_the_request_is_cut_too() -> None:
    kept = bounded_detail({"by_partition": {f"t-{n}": [n] for n in range(1000)}})
    assert len(kept["by_partition"]) == AUDIT_LISTED + 1
    assert kept["by_partition"]["keys_total"] == 1000


@pytest.mark.unit
def test_the_request_digest_is_canonical() -> None:
    assert request_digest({"a": 1, "b": [1, 2]}) == request_digest({"b": [1, 2], "a": 1})
    assert request_digest({"a": 1}) != request_digest({"a": 2})


@pytest.mark.integration
def test_a_record_reads_back_as_it_was_saved(log: ActionLog) -> None:
    pending = ActionRecord(
        "a1",
        "preferred-replica-election",
        ActionState.PENDING,
        "oncall",
        1718000000.123456,
        {"topics": ["orders"], "dry_run": False},
        plan={"partitions": [{"topic": "orders", "partition": 0, "to": 2}], "ratio": 1 / 3},
    )
    pending = log.create(replace(pending, parent="a0"))
    assert log.get("a1") == pending
    finished = pending.moved_to(ActionState.RUNNING, progress={"done": 1, "of": 3, "note": "ü ✓"}).moved_to(
        ActionState.PARTIAL,
        result={"elected": [["orders", 0]], "failed": {"orders-1": "not in ISR"}},
        error="1 of 3 partitions kept their leader",
        cancel_requested=True,
        owner="host:1:abc",
    )
    finished = log.update(finished)
    assert finished.version == 2
    assert log.get("a1") == finished
    assert log.records() == [finished]
    assert (finished.started_at, finished.finished_at) != (None, None)


@pytest.mark.integration
def test_an_audit_entry_reads_back_as_it_was_appended(log: ActionLog) -> None:
    entries = [
        AuditEntry(
            10.5, "oncall", "operator", "reassignment", False, "accepted", "a1", {"batches": [[1, 2]]}
        ),
        AuditEntry(11.25, "root", "admin", "ack", True, "dry-run"),
    ]
    for entry in entries:
        log.audit(entry)
    newest_first = log.audit_entries()
    assert [replace(e, sequence=0) for e in newest_first] == entries[::-1]
    assert all(e.sequence > 0 for e in newest_first)
    assert log.audit_entries(limit=5, offset=2) == []


@pytest.mark.integration
def test_an_update_from_an_old_copy_is_refused_with_the_stored_record(log: ActionLog) -> None:
    """The compare-and-set that keeps a cancel from being overwritten by an executor's progress."""
    created = log.create(record("a1"))
    running = log.update(created.moved_to(ActionState.RUNNING, owner="executor"))
    cancelled = log.update(replace(running, cancel_requested=True))
    with pytest.raises(StaleRecordError) as refused:
        log.update(replace(running, progress={"batches_done": 1}))  # the executor's stale copy
    assert refused.value.current == cancelled
    stored = log.get("a1")
    assert stored is not None
    assert stored.cancel_requested
    assert stored.progress == {}
    with pytest.raises(StaleRecordError) as missing:
        log.update(replace(record("nope"), version=1))
    assert missing.value.current is None


@pytest.mark.integration
def test_unfinished_lists_pending_running_and_stalled_oldest_first(log: ActionLog) -> None:
    paths = {
        "a0": [ActionState.RUNNING],
        "a1": [ActionState.RUNNING, ActionState.SUCCEEDED],
        "a2": [],
        "a3": [ActionState.RUNNING, ActionState.STALLED],
        "a4": [ActionState.CANCELLED],
    }
    for n, (action_id, path) in enumerate(paths.items()):
        current = log.create(record(action_id, 50.0 - n))
        for state in path:
            current = log.update(current.moved_to(state))
    assert [r.id for r in log.unfinished()] == ["a3", "a2", "a0"]


@pytest.mark.integration
def test_records_filter_by_state_and_page(log: ActionLog) -> None:
    for n in range(5):
        saved = log.create(record(f"a{n}", 10.0 * n))
        if n % 2 == 0:
            log.update(saved.moved_to(ActionState.CANCELLED))
    assert [r.id for r in log.records(state="CANCELLED")] == ["a4", "a2", "a0"]
    assert [r.id for r in log.records(state="CANCELLED", limit=1, offset=1)] == ["a2"]
    assert [r.id for r in log.records(state="PENDING")] == ["a3", "a1"]
    assert log.records(state="RUNNING") == []
    assert log.records(offset=5) == []
