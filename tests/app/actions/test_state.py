"""The action state machine, and the action log's contract: the same checks on the in-memory log (the
fake the unit tests use) and on the store-backed one (SQLite here, the service's default)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.store import Store
from app.actions.state import (
    TERMINAL,
    ActionLog,
    ActionRecord,
    ActionState,
    AuditEntry,
    IllegalTransitionError,
    MemoryActionLog,
    StoreActionLog,
)


def record(action_id: str = "a1", at: float = 10.0) -> ActionRecord:
    return ActionRecord(action_id, "reassignment", ActionState.PENDING, "oncall", at, {"partitions": []})


@pytest.mark.unit
@pytest.mark.parametrize(
    ("path", "legal"),
    [
        ([ActionState.RUNNING, ActionState.SUCCEEDED], True),
        ([ActionState.RUNNING, ActionState.PARTIAL], True),
        ([ActionState.RUNNING, ActionState.CANCELLED], True),
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


@pytest.fixture(params=["memory", "store"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ActionLog]:
    if request.param == "memory":
        yield MemoryActionLog()
        return
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        yield StoreActionLog(store)


@pytest.mark.integration
def test_the_log_keeps_actions_and_their_latest_state(log: ActionLog) -> None:
    first, second = record("a1", 10.0), record("a2", 20.0)
    log.save(first)
    log.save(second)
    running = first.moved_to(ActionState.RUNNING, progress={"batches_done": 1})
    log.save(running)
    assert log.get("a1") == running
    assert log.get("nope") is None
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
def test_the_store_log_survives_a_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        StoreActionLog(store).save(record().moved_to(ActionState.RUNNING))
        StoreActionLog(store).audit(AuditEntry(1.0, "root", "admin", "ack", False, "accepted"))
    with Store.open(url) as store:
        log = StoreActionLog(store)
        assert log.get("a1") is not None
        assert log.get("a1").state is ActionState.RUNNING  # type: ignore[union-attr]
        assert [e.action for e in log.audit_entries()] == ["ack"]


@pytest.mark.integration
def test_actions_a_previous_run_left_running_are_failed_at_start_up(log: ActionLog) -> None:
    from app.actions.runner import interrupted

    log.save(record("a1").moved_to(ActionState.RUNNING))
    log.save(record("a2"))
    log.save(record("a3").moved_to(ActionState.CANCELLED))
    interrupted(log)
    states = {r.id: (r.state, r.error) for r in log.records()}
    assert states["a1"][0] is ActionState.FAILED
    assert "interrupted" in (states["a1"][1] or "")
    assert states["a2"][0] is ActionState.FAILED
    assert states["a3"] == (ActionState.CANCELLED, None)
