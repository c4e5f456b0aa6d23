"""The retention pruner on real SQLite and PostgreSQL: a store with old rows in every growing table is
pruned to its limits (never an unfinished action, a pending delivery, an open alert, a batch id the job
could replay, a cluster's latest window), the hourly rollups hold the right values and are read back, a
second pass has nothing to do, a writer is not blocked while a pass runs, and only the leader prunes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import sqlalchemy as sa

from analytics.model import AlertEvent, BrokerLoad, LoadWindow, Window
from analytics.store import Database, Store
from analytics.store.tables import (
    alert_events_table,
    alerts_table,
    cluster_windows_table,
    load_windows_table,
    processed_batches_table,
)
from app.actions.state import ActionRecord, ActionState, AuditEntry
from app.actions.store import StoreActionLog, actions_table, audit_log_table
from app.retention.config import DAY, RetentionSettings
from app.retention.plan import KEEP_LAST_BATCHES, hour_of
from app.retention.pruner import RetentionPruner
from app.storage import open_database
from app.webhooks.tables import webhook_deliveries_table, webhooks_table
from tests.support.store import BACKENDS, alert_state, database_url

pytestmark = pytest.mark.integration

NOW: Final = 1_760_000_000.0 + 1800.0
STEP: Final = 600.0
"""The test's load windows: ten minutes (six an hour), 4 brokers, over ten days."""
BROKERS: Final = 4
SETTINGS: Final = RetentionSettings.model_validate(
    {
        "load_windows": "3d",
        "cluster_windows": "5d",
        "load_rollups": "8d",
        "processed_batches": "3d",
        "alert_events": "100d",
        "alerts": "100d",
        "actions": "365d",
        "audit_log": "365d",
        "webhook_deliveries": "30d",
        "batch_rows": 100,
        "pause_s": 0,
    }
)


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    with open_database(database_url(request, tmp_path / "store.db")) as db:
        yield db


def window(cluster: str, start: float, brokers: int = BROKERS) -> LoadWindow:
    """A load window whose values vary with its start and broker (so that averages and extremes differ)."""
    k = (start / STEP) % 7
    return LoadWindow(
        Window(cluster, start, start + STEP),
        tuple(
            BrokerLoad(
                b,
                {"bytes_in": 100.0 * b + k},
                {"bytes_in": 0.25},
                10.0 * b + k,
                0.2 + 0.01 * k * b,
                k / 10 - b / 4,
            )
            for b in range(brokers)
        ),
        stddev=0.01 * k,
        stddev_threshold=0.05,
        rated_deviation=0.2,
    )


def old_windows() -> list[LoadWindow]:
    first = hour_of(NOW - 10 * DAY)
    return [window("c1", first + i * STEP) for i in range(int((NOW - first) // STEP))]


def fill(database: Database) -> dict[str, Any]:
    """Ten days of load windows of c1 and three 20-day-old ones of c2 (through the load lane's writer),
    old and recent processed batches, alerts, events, outbox rows, actions and audit entries."""
    store = Store(database)
    windows = old_windows()
    for n, start in enumerate(range(0, len(windows), 400)):
        assert store.commit_batch("job", n, load_windows=windows[start : start + 400])
    stale = [window("c2", hour_of(NOW - 20 * DAY) + i * STEP) for i in range(3)]
    assert store.commit_batch("job", 99, load_windows=stale)

    old_resolved = alert_state(
        "c1", 9, "cluster", state="resolved", resolved_at=NOW - 200 * DAY, event_sequence=2
    )
    held = alert_state("c1", 8, "broker:1", state="resolved", resolved_at=NOW - 200 * DAY, event_sequence=1)
    still_open = alert_state("c1", 8, "broker:2", state="open", event_sequence=1)
    recent = alert_state("c1", 8, "broker:3", state="resolved", resolved_at=NOW - DAY, event_sequence=1)
    events = [
        AlertEvent(old_resolved.fingerprint, 1, "opened", NOW - 201 * DAY, "warning", "s", {}),
        AlertEvent(old_resolved.fingerprint, 2, "resolved", NOW - 200 * DAY, "warning", "s", {}),
        AlertEvent(held.fingerprint, 1, "opened", NOW - 201 * DAY, "warning", "s", {}),
        AlertEvent(still_open.fingerprint, 1, "opened", NOW - 150 * DAY, "warning", "s", {}),
        AlertEvent(recent.fingerprint, 1, "opened", NOW - 2 * DAY, "warning", "s", {}),
    ]
    assert store.commit_batch(
        "job", 100, alert_states=[old_resolved, held, still_open, recent], events=events
    )
    with database.write() as conn:
        conn.execute(
            sa.insert(processed_batches_table),
            [{"query_name": "old", "batch_id": i, "committed_at": NOW - 10 * DAY + i} for i in range(300)],
        )
        hook = conn.execute(
            sa.insert(webhooks_table)
            .values(
                name="h",
                url="http://x",
                format="generic",
                enabled=True,
                created_at=0,
                created_by="t",
                updated_at=0,
            )
            .returning(webhooks_table.c.id)
        ).scalar_one()
        rows = [
            (old_resolved.fingerprint, 2, "delivered", NOW - 200 * DAY),
            (old_resolved.fingerprint, 1, "dead", NOW - 201 * DAY),
            (still_open.fingerprint, 1, "skipped", NOW - 150 * DAY),
            (held.fingerprint, 1, "pending", NOW - 201 * DAY),
            (recent.fingerprint, 1, "delivered", NOW - 2 * DAY),
        ]
        conn.execute(
            sa.insert(webhook_deliveries_table),
            [
                {
                    "webhook_id": hook,
                    "fingerprint": fp,
                    "sequence": seq,
                    "idempotency_key": f"{fp}:{seq}",
                    "kind": "opened",
                    "event_at": at,
                    "state": state,
                    "attempts": 1,
                    "created_at": at,
                }
                for fp, seq, state, at in rows
            ],
        )
    actions = StoreActionLog(database)
    old = NOW - 400 * DAY
    for name, state, finished in (
        ("done", ActionState.SUCCEEDED, old + 60),
        ("failed", ActionState.FAILED, old + 60),
        ("pending", ActionState.PENDING, None),
        ("running", ActionState.RUNNING, None),
        ("stalled", ActionState.STALLED, None),
        ("recent", ActionState.CANCELLED, NOW - DAY),
    ):
        requested = old if name != "recent" else NOW - 2 * DAY
        actions.create(
            ActionRecord(
                name, "reassignment", state, "t", requested, {}, finished_at=finished, started_at=requested
            )
        )
    for at in (old, old + 1, NOW - DAY):
        actions.audit(AuditEntry(at, "t", "operator", "reassignment", False, "accepted"))
    return {"windows": windows, "fingerprints": (old_resolved, held, still_open, recent)}


def column(database: Database, col: sa.ColumnElement[Any], *where: sa.ColumnElement[bool]) -> list[Any]:
    with database.read() as conn:
        return sorted(conn.execute(sa.select(col).where(*where)).scalars())


def test_a_store_with_old_rows_is_pruned_to_its_limits(database: Database) -> None:
    filled = fill(database)
    _, held, still_open, recent = filled["fingerprints"]
    report = RetentionPruner(database, SETTINGS).prune(now=NOW)
    assert report.finished
    cut = hour_of(NOW - 3 * DAY)
    windows: list[LoadWindow] = filled["windows"]
    rolled = [w for w in windows if w.window.start < cut]
    assert report.rolled_up_windows == len(rolled) + 2  # and c2's but its latest window
    assert report.pruned["load_windows"] == (len(rolled) + 2) * BROKERS
    assert report.transactions > 50  # bounded chunks, not one transaction

    lw = load_windows_table.c
    assert min(column(database, lw.window_start, lw.cluster == "c1")) == cut
    assert set(column(database, lw.window_start, lw.cluster == "c2")) == {hour_of(NOW - 20 * DAY) + 2 * STEP}
    cw = cluster_windows_table.c
    c1_windows = column(database, cw.window_start, cw.cluster == "c1")
    assert min(c1_windows) >= NOW - 5 * DAY
    assert (
        column(database, cw.window_start, cw.cluster == "c1", cw.window_start < cut, cw.stddev.is_not(None))
        == []
    )

    store = Store(database)
    hours = store.load_rollups("c1", since=0)
    assert [h.hour_start for h in hours] == [
        h for h in sorted({hour_of(w.window.start) for w in rolled}) if h >= NOW - 8 * DAY
    ]
    assert store.load_history("c1", since=0, until=cut) == []
    for hour in hours:
        own = [w for w in rolled if hour_of(w.window.start) == hour.hour_start]
        assert hour.windows == len(own) == 6
        assert hour.stddev_avg == pytest.approx(sum(w.stddev for w in own) / len(own))
        assert hour.stddev_max == max(w.stddev for w in own)
        assert hour.imbalanced_windows == sum(w.imbalanced for w in own)
        assert [b.broker for b in hour.brokers] == list(range(BROKERS))
        for b in hour.brokers:
            loads = [w.brokers[b.broker] for w in own]
            assert b.windows == 6
            assert b.normalized_load_avg == pytest.approx(sum(x.normalized_load for x in loads) / 6)
            assert b.normalized_load_max == max(x.normalized_load for x in loads)
            assert b.weighted_load_avg == pytest.approx(sum(x.weighted_load for x in loads) / 6)
            assert b.deviation_rate_min == min(x.deviation_rate for x in loads)
            assert b.deviation_rate_max == max(x.deviation_rate for x in loads)

    pb = processed_batches_table.c
    assert column(database, pb.batch_id, pb.query_name == "old") == list(range(300 - KEEP_LAST_BATCHES, 300))
    assert len(column(database, pb.batch_id, pb.query_name == "job")) == 6  # committed just now

    a = alerts_table.c
    assert column(database, a.fingerprint) == sorted(
        [held.fingerprint, still_open.fingerprint, recent.fingerprint]
    )
    e = alert_events_table.c
    assert column(database, e.fingerprint) == sorted([held.fingerprint, recent.fingerprint])  # pending kept
    d = webhook_deliveries_table.c
    assert column(database, d.state) == ["delivered", "pending"]
    assert column(database, actions_table.c.id) == ["pending", "recent", "running", "stalled"]
    assert column(database, audit_log_table.c.at) == [NOW - DAY]

    again = RetentionPruner(database, SETTINGS).prune(now=NOW)
    assert sum(again.pruned.values()) == 0
    assert again.rolled_up_windows == 0


def test_forever_keeps_and_a_follower_never_prunes(database: Database) -> None:
    store = Store(database)
    assert store.commit_batch(
        "job", 0, load_windows=[window("c1", NOW - 30 * DAY), window("c1", NOW - 29 * DAY)]
    )
    keep = RetentionSettings.model_validate(
        {"load_windows": "forever", "load_rollups": "forever", "cluster_windows": "forever", "pause_s": 0}
    )
    assert RetentionPruner(database, keep).prune(now=NOW).pruned["load_windows"] == 0

    class Standing:
        leader = False

        def start(self) -> None: ...

        def stop(self) -> None: ...

        def standing(self) -> str:
            return "leader" if self.leader else "follower"

        def is_leader(self) -> bool:
            return self.leader

    standing = Standing()
    fast = SETTINGS.model_copy(update={"interval_s": 0.2})
    pruner = RetentionPruner(database, fast, standing, clock=lambda: NOW)  # type: ignore[arg-type]
    pruner.start()
    try:
        time.sleep(0.6)
        assert pruner.stats().passes == 0
        standing.leader = True
        deadline = time.monotonic() + 10
        while pruner.stats().passes == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        pruner.stop()
    stats = pruner.stats()
    assert stats.passes >= 1
    assert stats.pruned_total["load_windows"] == BROKERS  # the older one; the latest is kept
    assert stats.last_pass_at == NOW


def test_a_writer_is_not_blocked_while_a_pass_runs(database: Database) -> None:
    brokers = 20
    first = hour_of(NOW - 5 * DAY)
    starts = [first + i * 60.0 for i in range(int(DAY // 60))]  # a day of 60 s windows, 28,800 rows
    with database.write() as conn:
        conn.execute(
            sa.insert(cluster_windows_table),
            [
                {
                    "cluster": "c1",
                    "window_start": s,
                    "window_end": s + 60,
                    "brokers": brokers,
                    "stddev": 0.01,
                    "stddev_threshold": 0.05,
                    "rated_deviation": 0.2,
                    "imbalanced": False,
                    "evaluated": True,
                }
                for s in starts
            ],
        )
        conn.execute(
            sa.insert(load_windows_table),
            [
                {
                    "cluster": "c1",
                    "window_start": s,
                    "window_end": s + 60,
                    "broker": b,
                    "metrics": {"cpu": 0.5},
                    "shares": {"cpu": 0.02},
                    "weighted_load": 1.0,
                    "normalized_load": 0.02,
                    "deviation_rate": 0.0,
                }
                for s in starts
                for b in range(brokers)
            ],
        )
    store = Store(database)
    latencies: list[float] = []
    done = threading.Event()

    def write() -> None:
        batch = 1
        while not done.is_set():
            started = time.monotonic()
            store.commit_batch("live", batch, load_windows=[window("c1", NOW + batch * 60.0, brokers)])
            latencies.append(time.monotonic() - started)
            batch += 1
            time.sleep(0.01)

    writer = threading.Thread(target=write)
    writer.start()
    while not latencies:  # the writer's first window is the cluster's latest, which a pass keeps
        time.sleep(0.01)
    try:
        settings = RetentionSettings.model_validate(
            {"load_windows": "1d", "batch_rows": 1000, "pause_s": 0.02}
        )
        report = RetentionPruner(database, settings).prune(now=NOW)
    finally:
        done.set()
        writer.join()
    assert report.pruned["load_windows"] == len(starts) * brokers
    assert report.transactions >= 29  # 50 windows of 20 brokers a transaction
    assert len(latencies) > 10  # the writer got in between them (not how long: the machine may be loaded)
