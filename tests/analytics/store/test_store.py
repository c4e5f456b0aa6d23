"""The analytics store (:class:`analytics.store.Store`) against real databases: every test taking ``url`` (or
``store``) runs on an SQLite file and on a real PostgreSQL server (tests.support.postgres: a fresh database
per test), opened with every subsystem's migrations as the service and the job share it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from analytics.model import AlertState, BrokerLoad, LoadWindow, Window
from analytics.store import Acknowledgement, ClusterWindowRow, Store, StoreConflictError, StoreError
from app.storage import MIGRATIONS
from tests.support.store import (
    BACKENDS,
    TABLES,
    alert_event,
    alert_state,
    counts,
    database_url,
    dump,
    full_batch,
    load_window,
    open_store,
)

pytestmark = pytest.mark.integration


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database (its SQLite parent directory does not exist yet)."""
    return database_url(request, tmp_path / "data" / "store.db")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as opened:
        yield opened


# --- exactly-once writes -------------------------------------------------------------------------------


def test_a_batch_is_committed_exactly_once(store: Store, url: str) -> None:
    batch = full_batch()
    assert not store.batch_committed("job", 7)
    assert store.commit_batch("job", 7, **batch)
    assert store.batch_committed("job", 7)
    written = dump(url)
    assert counts(url) == {
        "schema_version": len(MIGRATIONS),
        "cluster_windows": 3,
        "load_windows": 8,
        "alerts": 2,
        "alert_events": 1,
        "processed_batches": 1,
        "webhooks": 0,
        "webhook_deliveries": 0,
        "actions": 0,
        "audit_log": 0,
        "load_rollups": 0,
        "cluster_rollups": 0,
        "silences": 0,
        "rolling_restarts": 0,
    }

    other = alert_state("c1", 9, "cluster", state="resolved", resolved_at=240.0)
    replay = {**batch, "load_windows": [load_window("c1", 0.0, seed=9.0)], "alert_states": [other]}
    assert not store.commit_batch("job", 7, **replay)  # the same batch id: nothing happens
    assert dump(url) == written

    assert store.commit_batch("job", 8, **batch)  # the same rows under a new id change nothing either
    assert dump(url) == written
    assert store.commit_batch("other-job", 7)  # batch ids are per query
    assert counts(url)["processed_batches"] == 3
    assert not store.batch_committed("job", 9)


def test_concurrent_commits_of_one_batch_apply_it_once(url: str) -> None:
    stores = [open_store(url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    results: list[bool] = []
    errors: list[BaseException] = []

    def commit(store: Store) -> None:
        try:
            barrier.wait()
            results.append(store.commit_batch("job", 1, **full_batch()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(s,)) for s in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for s in stores:
            s.close()
    assert not errors
    assert sorted(results) == [False, False, False, True]
    assert counts(url)["alert_events"] == 1


def test_events_are_append_only(store: Store) -> None:
    state = alert_state()
    first = alert_event(state, 1, summary="first")
    assert store.commit_batch("q", 1, alert_states=[state], events=[first])
    second = replace(state, event_sequence=2, state="resolved")
    assert store.commit_batch(
        "q",
        2,
        alert_states=[second],
        events=[alert_event(state, 1, summary="rewritten"), alert_event(state, 2, "resolved")],
    )
    events = store.alert_events(state.fingerprint)
    assert [(e.sequence, e.kind, e.summary) for e in events] == [
        (1, "opened", "first"),
        (2, "resolved", state.summary),
    ]
    assert events[0] == first


def test_an_alert_upsert_overwrites_the_state_and_keeps_the_acknowledgement(store: Store) -> None:
    pending = alert_state(state="pending", opened_at=None, hits=1, event_sequence=0, severity="info")
    assert store.commit_batch("q", 1, alert_states=[pending])
    assert store.alert(pending.fingerprint) == pending
    assert not store.acknowledge("0000000000000000", "ops", 1.0)

    opened = replace(
        pending, state="open", severity="critical", hits=3, opened_at=180.0, event_sequence=1, action=None
    )
    assert store.commit_batch("q", 2, alert_states=[opened], events=[alert_event(opened, 1)])
    assert store.alert(opened.fingerprint) == opened
    assert store.acknowledge(opened.fingerprint, "alice", 200.0)
    assert store.acknowledgements([opened.fingerprint, "0000000000000000"]) == {
        opened.fingerprint: Acknowledgement("alice", 200.0)
    }

    still_open = replace(opened, hits=4, last_seen=240.0, last_window_end=240.0, evidence={"value": 4})
    assert store.commit_batch("q", 3, alert_states=[still_open])
    assert store.alert(opened.fingerprint) == still_open
    assert store.acknowledgements([opened.fingerprint])[opened.fingerprint].by == "alice"

    resolved = replace(still_open, state="resolved", resolved_at=300.0, hits=0, clean=2, event_sequence=2)
    reopened = replace(resolved, state="open", opened_at=600.0, resolved_at=None, event_sequence=3)
    assert store.commit_batch("q", 4, alert_states=[resolved])
    assert store.acknowledgements([opened.fingerprint]) != {}  # same opening: still acknowledged
    assert store.commit_batch("q", 5, alert_states=[reopened])
    assert store.alert(opened.fingerprint) == reopened
    assert store.acknowledgements([opened.fingerprint]) == {}  # a new opening needs a new acknowledgement


def test_floats_and_json_round_trip_exactly(store: Store) -> None:
    tricky = [0.1 + 0.2, 1 / 3, 1e-300, 5e-324, 1.7976931348623157e308, -2.5e-7, 1718000000.123456]
    window = Window("exact", 1718000000.1234567, 1718000060.1234567)
    brokers = tuple(
        BrokerLoad(
            broker=i,
            metrics={"x": value, "y": -value},
            shares={"x": value / 7},
            weighted_load=value,
            normalized_load=value / 3,
            deviation_rate=-value,
        )
        for i, value in enumerate(tricky)
    )
    load = LoadWindow(
        window, brokers, stddev=tricky[0], stddev_threshold=tricky[1], rated_deviation=tricky[4]
    )
    health = {
        "floats": tricky,
        "nested": {"list": [1, 2.5, None, True, "ü ✓"], "empty": {}},
        "big_int": 2**53 + 1,
        "text": 'quote " backslash \\ newline \n',
    }
    state = alert_state(
        "exact",
        first_seen=window.start,
        last_seen=window.end,
        opened_at=window.end,
        last_window_end=window.end,
        evidence={"ratio": tricky[0], "values": tricky, "by_topic": {"orders": 3}},
    )
    row = ClusterWindowRow(window, controller_id=3, controller_epoch=2**40, health=health, evaluated=True)
    assert store.commit_batch("q", 1, load_windows=[load], cluster_windows=[row], alert_states=[state])

    assert store.latest_load("exact") == load
    assert store.alert(state.fingerprint) == state
    [stored] = store.cluster_windows("exact")
    assert stored == replace(row, brokers=len(tricky), stddev=tricky[0], stddev_threshold=tricky[1],
                             rated_deviation=tricky[4], imbalanced=tricky[0] > tricky[1])  # fmt: skip
    assert stored.health == health
    assert store.last_evaluated_window("exact") == window.end


def test_non_finite_numbers_are_refused_before_anything_is_written(store: Store, url: str) -> None:
    nan = float("nan")
    broken_load = load_window()
    broken_load = replace(broken_load, brokers=(replace(broken_load.brokers[0], metrics={"cpu": nan}),))
    with pytest.raises(StoreError, match=r"broker 1: metrics\['cpu'\] must be a finite number"):
        store.commit_batch("q", 1, load_windows=[broken_load], alert_states=[alert_state()])
    with pytest.raises(StoreError, match="evidence is not JSON-serialisable"):
        store.commit_batch("q", 1, alert_states=[alert_state(evidence={"ratio": float("inf")})])
    with pytest.raises(StoreError, match="stddev must be a finite number"):
        store.commit_batch("q", 1, load_windows=[replace(load_window(), stddev=nan)])
    assert not store.batch_committed("q", 1)
    assert all(rows == [] for rows in dump(url).values())


@pytest.mark.parametrize(
    "break_batch",
    [
        pytest.param(
            lambda b: {**b, "events": [*b["events"], alert_event(alert_state(subject="gone"), 1)]}, id="fk"
        ),
        pytest.param(
            lambda b: {**b, "alert_states": [*b["alert_states"], alert_state(subject="x", severity="fatal")]},
            id="check",
        ),
        pytest.param(
            lambda b: {**b, "cluster_windows": [ClusterWindowRow(Window("c9", 60.0, 0.0))]}, id="window-check"
        ),
    ],
)
def test_a_failing_batch_leaves_nothing_half_applied(
    store: Store, url: str, break_batch: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    assert store.commit_batch("q", 1, alert_states=[alert_state("c0")])
    before = dump(url, TABLES)
    with pytest.raises(StoreError, match="commit batch 2 of query 'q' failed on"):
        store.commit_batch("q", 2, **break_batch(full_batch()))
    assert dump(url, TABLES) == before
    assert not store.batch_committed("q", 2)
    assert store.commit_batch("q", 2, **full_batch())  # the fixed batch goes through under the same id


# --- reads -----------------------------------------------------------------------------------------------


def test_reads_and_their_filters(store: Store) -> None:
    a_open = alert_state("a", 9, "cluster", severity="critical", last_seen=300.0)
    a_pending = alert_state(
        "a", 8, "broker:1", state="pending", opened_at=None, last_seen=200.0, event_sequence=0
    )
    a_resolved = alert_state("a", 8, "broker:2", state="resolved", resolved_at=400.0, last_seen=100.0)
    b_open = alert_state("b", 9, "cluster", last_seen=250.0)
    assert store.commit_batch(
        "q",
        1,
        load_windows=[
            load_window("a", 0.0),
            load_window("a", 60.0, seed=2.0),
            load_window("b", 30.0, brokers=2),
        ],
        cluster_windows=[
            ClusterWindowRow(Window("a", 0.0, 60.0), controller_id=1, controller_epoch=5, evaluated=True),
            ClusterWindowRow(
                Window("a", 60.0, 120.0), controller_id=1, controller_epoch=5, health={"u": 1}, evaluated=True
            ),
            ClusterWindowRow(Window("a", 120.0, 180.0), controller_id=2, controller_epoch=6, health={"u": 0}),
        ],
        alert_states=[a_open, a_pending, a_resolved, b_open],
        events=[
            alert_event(a_open, 1),
            alert_event(a_resolved, 1, at=30.0),
            alert_event(a_resolved, 2, "resolved"),
        ],
    )
    assert store.clusters() == ["a", "b"]

    assert store.latest_load("a") == load_window("a", 60.0, seed=2.0)
    assert store.latest_load() == load_window("a", 60.0, seed=2.0)  # ends at 120, b's at 90
    assert store.latest_load("b") == load_window("b", 30.0, brokers=2)
    assert store.latest_load("nope") is None
    assert store.load_history("a", since=0.0) == [load_window("a", 0.0), load_window("a", 60.0, seed=2.0)]
    assert store.load_history("a", since=0.0, until=60.0) == [load_window("a", 0.0)]
    assert store.load_history("a", since=0.0, limit=1) == [load_window("a", 0.0)]
    assert store.load_history("a", since=61.0) == []

    windows = store.cluster_windows("a")
    assert [w.window.start for w in windows] == [0.0, 60.0, 120.0]
    assert (windows[1].stddev, windows[1].health) == (load_window("a", 60.0, seed=2.0).stddev, {"u": 1})
    assert (windows[2].stddev, windows[2].brokers) == (None, None)
    assert [w.window.start for w in store.cluster_windows("a", since=60.0, limit=1)] == [60.0]
    assert store.last_evaluated_window("a") == 120.0
    assert store.last_evaluated_window("b") is None
    common = {"cluster": "a", "controller_id": 1, "controller_epoch": 5}
    assert store.health_history("a", since=60.0) == [
        {**common, "window_start": 60.0, "window_end": 120.0, "health": {"u": 1}, "evaluated": True},
        {**common, "window_start": 120.0, "window_end": 180.0, "health": {"u": 0}, "evaluated": False,
         "controller_id": 2, "controller_epoch": 6},
    ]  # fmt: skip

    def fps(states: Sequence[AlertState]) -> list[str]:
        return [s.fingerprint for s in states]

    assert fps(store.alerts()) == fps([a_open, b_open, a_pending, a_resolved])  # last seen first
    assert fps(store.alerts(cluster="a")) == fps([a_open, a_pending, a_resolved])
    assert fps(store.alerts(state="open")) == fps([a_open, b_open])
    assert fps(store.alerts(state=["open", "pending"], cluster="a")) == fps([a_open, a_pending])
    assert fps(store.alerts(rule=8)) == fps([a_pending, a_resolved])
    assert fps(store.alerts(severity="critical")) == fps([a_open])
    assert fps(store.alerts(limit=2, offset=1)) == fps([b_open, a_pending])
    assert store.alerts(cluster="nope") == []
    assert store.alert_states("a") == {s.fingerprint: s for s in (a_open, a_pending, a_resolved)}
    assert store.alert_states("a", states=("open", "pending")) == {
        s.fingerprint: s for s in (a_open, a_pending)
    }
    assert store.alert("missing") is None

    assert [(e.fingerprint, e.sequence) for e in store.alert_events()] == [
        (a_resolved.fingerprint, 1),
        (a_open.fingerprint, 1),
        (a_resolved.fingerprint, 2),
    ]
    assert [e.sequence for e in store.alert_events(a_resolved.fingerprint)] == [1, 2]
    assert [e.sequence for e in store.alert_events(a_resolved.fingerprint, since_sequence=1)] == [2]
    assert [e.sequence for e in store.alert_events(since=60.0)] == [1, 2]
    assert len(store.alert_events(limit=1)) == 1
    with pytest.raises(StoreError, match="must not be negative"):
        store.alerts(limit=-1)


def test_window_rows_merge_load_and_health(store: Store) -> None:
    window = Window("c1", 0.0, 60.0)
    assert store.commit_batch("q", 1, load_windows=[load_window(brokers=3)])
    assert store.commit_batch(
        "q", 2, cluster_windows=[ClusterWindowRow(window, controller_id=1, evaluated=True)]
    )
    [row] = store.cluster_windows("c1")
    assert (row.brokers, row.stddev, row.controller_id, row.evaluated) == (3, load_window().stddev, 1, True)

    # the window recomputed with fewer brokers: its broker rows are replaced, the health facts kept, and
    # ``evaluated`` stays set
    assert store.commit_batch("q", 3, load_windows=[load_window(brokers=2, seed=3.0)])
    assert store.commit_batch(
        "q", 4, cluster_windows=[ClusterWindowRow(window, controller_id=None, health={"x": 1})]
    )
    latest = store.latest_load("c1")
    assert latest == load_window(brokers=2, seed=3.0)
    [row] = store.cluster_windows("c1")
    assert (row.brokers, row.stddev, row.controller_id, row.health, row.evaluated) == (
        2,
        load_window(seed=3.0).stddev,
        None,
        {"x": 1},
        True,
    )


# --- one writer per lane -----------------------------------------------------------------------------------


def incident(subject: str = "topic:orders", **changes: Any) -> AlertState:
    """Rule 1's alert as the incident lane writes it: opened at 100 (event 1)."""
    values: dict[str, Any] = {
        "severity": "critical",
        "hits": 1,
        "first_seen": 100.0,
        "last_seen": 100.0,
        "opened_at": 100.0,
        "last_window_end": 100.0,
    }
    return alert_state("c1", 1, subject, **(values | changes))


def version(state: AlertState) -> tuple[int, float]:
    return (state.event_sequence, state.last_window_end)


def test_commit_batch_refuses_the_incident_lanes_rules(store: Store, url: str) -> None:
    with pytest.raises(StoreError, match=r"commit_batch is the load lane's writer: alert \w+ is rule 1 "):
        store.commit_batch("q", 1, alert_states=[alert_state(), incident()])
    assert not store.batch_committed("q", 1)
    assert all(rows == [] for rows in dump(url).values())

    opened = incident()  # written by its own lane...
    store.commit_incidents("c1", [opened], [alert_event(opened, 1)], expected={opened.fingerprint: None})
    with pytest.raises(
        StoreError, match=r"an event of alert \w+ is rule 1 \(topic:orders\), which the incident"
    ):
        store.commit_batch("q", 1, events=[alert_event(opened, 2, "resolved")])  # ...not its events either
    assert [e.sequence for e in store.alert_events(opened.fingerprint)] == [1]


def test_commit_incidents_refuses_the_load_lanes_rules_and_bad_batches(store: Store, url: str) -> None:
    load = alert_state()  # rule 9
    with pytest.raises(
        StoreError, match=r"commit_incidents is the incident lane's writer: alert \w+ is rule 9"
    ):
        store.commit_incidents("c1", [load], expected={load.fingerprint: None})
    opened = incident()
    with pytest.raises(StoreError, match="is of cluster 'c1'"):
        store.commit_incidents("c2", [opened], expected={opened.fingerprint: None})
    with pytest.raises(StoreError, match="no expected version"):
        store.commit_incidents("c1", [opened], expected={})
    with pytest.raises(StoreError, match="without its alert's state"):
        store.commit_incidents("c1", [], [alert_event(opened, 1)], expected={})
    with pytest.raises(StoreError, match="no such rule"):
        store.commit_incidents("c1", [replace(opened, rule=20)], expected={opened.fingerprint: None})
    assert all(rows == [] for rows in dump(url).values())


def test_commit_incidents_compares_and_sets_each_alert(store: Store, url: str) -> None:
    opened = incident()
    calls: list[int] = []
    store.commit_incidents(
        "c1",
        [opened],
        [alert_event(opened, 1, at=100.0)],
        expected={opened.fingerprint: None},
        also=lambda conn: calls.append(1),
    )
    assert calls == [1]
    assert store.alert(opened.fingerprint) == opened
    assert store.alert_states("c1", rules=[1]) == {opened.fingerprint: opened}
    assert store.alert_states("c1", rules=[8, 9]) == {}

    # a second writer that read nothing (None) finds the row there: it writes nothing
    with pytest.raises(StoreConflictError, match="another writer was first"):
        store.commit_incidents("c1", [opened], [alert_event(opened, 1)], expected={opened.fingerprint: None})

    # the writer that read event 1 at 100 moves it on...
    still = replace(opened, hits=2, last_seen=105.0, last_window_end=105.0)
    store.commit_incidents("c1", [still], expected={opened.fingerprint: version(opened)})
    assert store.alert(opened.fingerprint) == still

    # ...and one that read it before that (event 1 at 100) loses, even with the same event sequence, and so
    # does one whose event would repeat a sequence: nothing of either is written, ``also`` neither
    before = dump(url, TABLES)
    resolved = replace(opened, state="resolved", resolved_at=110.0, event_sequence=2, last_window_end=110.0)
    with pytest.raises(StoreConflictError, match=r"changed since it was read \(expected event 1 at 100.0\)"):
        store.commit_incidents(
            "c1",
            [resolved],
            [alert_event(resolved, 2, "resolved")],
            expected={opened.fingerprint: version(opened)},
            also=lambda conn: calls.append(2),
        )
    other = incident("topic:other")
    with pytest.raises(StoreConflictError):
        store.commit_incidents(
            "c1",
            [other, still],
            [alert_event(other, 1), alert_event(still, 1)],
            expected={other.fingerprint: None, still.fingerprint: version(still)},
        )
    assert dump(url, TABLES) == before
    assert calls == [1]


def test_two_incident_writers_racing_on_one_alert_write_its_event_once(url: str) -> None:
    stores = [open_store(url) for _ in range(4)]
    opened = incident()
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def write(store: Store) -> None:
        barrier.wait()
        try:
            store.commit_incidents(
                "c1", [opened], [alert_event(opened, 1)], expected={opened.fingerprint: None}
            )
            outcomes.append("written")
        except StoreConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for s in stores:
            s.close()
    assert sorted(outcomes) == ["conflict", "conflict", "conflict", "written"]
    assert counts(url)["alert_events"] == 1


def test_an_incident_alert_that_opens_anew_loses_its_acknowledgement(store: Store) -> None:
    opened = incident()
    store.commit_incidents("c1", [opened], [alert_event(opened, 1)], expected={opened.fingerprint: None})
    assert store.acknowledge(opened.fingerprint, "alice", 101.0)
    still = replace(opened, hits=2, evidence={"count": 2}, last_window_end=102.0)
    store.commit_incidents("c1", [still], expected={opened.fingerprint: version(opened)})
    assert store.acknowledgements([opened.fingerprint])[opened.fingerprint].by == "alice"
    resolved = replace(still, state="resolved", resolved_at=120.0, event_sequence=2, last_window_end=120.0)
    store.commit_incidents(
        "c1",
        [resolved],
        [alert_event(resolved, 2, "resolved")],
        expected={opened.fingerprint: version(still)},
    )
    assert store.acknowledgements([opened.fingerprint]) != {}  # the same opening
    reopened = replace(resolved, state="open", opened_at=130.0, resolved_at=None, event_sequence=3,
                       last_window_end=130.0)  # fmt: skip
    store.commit_incidents(
        "c1", [reopened], [alert_event(reopened, 3)], expected={opened.fingerprint: version(resolved)}
    )
    assert store.acknowledgements([opened.fingerprint]) == {}
    assert [e.sequence for e in store.alert_events(opened.fingerprint)] == [1, 2, 3]


def test_latest_load_end_is_the_load_lanes_heartbeat(store: Store) -> None:
    assert store.latest_load_end("c1") is None
    store.commit_batch(
        "q",
        1,
        load_windows=[load_window("c1", 0.0), load_window("c1", 60.0), load_window("c2", 600.0)],
        cluster_windows=[ClusterWindowRow(Window("c1", 120.0, 180.0), health={"x": 1}, evaluated=True)],
    )
    assert store.latest_load_end("c1") == 120.0  # the window without load does not count
    assert store.latest_load_end("c2") == 660.0
