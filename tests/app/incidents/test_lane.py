"""The incident lane (:class:`app.incidents.lane.IncidentLane`) on a real store (an SQLite file; the
compare-and-set race on PostgreSQL too), with a small fake of the live view behind its protocol
(:class:`app.incidents.observe.LiveView`: snapshots built with tests.support.snapshots, health from the
real :func:`collectors.health.assess`), a leadership whose standing the test sets, and a clock it moves.
The real view, collector and leadership are the end-to-end tests' (test_end_to_end.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from analytics.model import AlertEvent, AlertState, fingerprint
from analytics.rules import LOAD_LANE_SUBJECT, VIEW_SUBJECT, RuleSettings
from app.incidents.config import IncidentSettings
from app.incidents.lane import IncidentLane
from app.leadership import Standing
from app.storage import Storage
from app.webhooks.model import AlertNotice, Webhook
from collectors.disks import LogDirDisk
from collectors.health import HealthReport, assess
from collectors.kafka.model import ClusterSnapshot, ControllerInfo
from collectors.metrics import MetricsScrape
from tests.support.snapshots import cluster, partition
from tests.support.store import BACKENDS, database_url, load_window

pytestmark = pytest.mark.integration

T0 = 1_800_000_000.0
CLUSTER = "c"


def healthy(version: int = 1, **changes: Any) -> ClusterSnapshot:
    """Brokers 1-3; ``orders`` RF 3 on every broker, ``singles`` RF 1 on broker 3."""
    snapshot = cluster(
        partition("orders", 0, [1, 2, 3]),
        partition("orders", 1, [2, 3, 1]),
        partition("singles", 0, [3]),
        version=version,
        last_good_at=T0,
    )
    return replace(snapshot, **changes)


def broker_3_down(version: int = 2) -> ClusterSnapshot:
    return cluster(
        partition("orders", 0, [1, 2, 3], isr=[1, 2]),
        partition("orders", 1, [2, 3, 1], isr=[2, 1]),
        partition("singles", 0, [3], isr=[3], leader=-1),
        brokers=(1, 2),
        version=version,
        last_good_at=T0,
    )


@dataclass(frozen=True)
class State:
    snapshot: ClusterSnapshot
    report: HealthReport
    scrape: MetricsScrape | None
    last_good_at: float | None


class View:
    """The live view's protocol over a snapshot the test sets (in sync unless stale)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.snapshot = healthy()
        self.scrape: MetricsScrape | None = None
        self.disks: dict[int, tuple[LogDirDisk, ...]] = {}

    def all_disks(self) -> dict[int, tuple[LogDirDisk, ...]]:
        return self.disks

    @property
    def state(self) -> State:
        snapshot = self.snapshot
        good = snapshot.last_good_at if snapshot.stale else self.clock()
        return State(snapshot, assess(snapshot), self.scrape, good)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Leadership:
    def __init__(self, standing: Standing = "leader") -> None:
        self.now: Standing = standing

    def start(self) -> None:
        pass

    def is_leader(self) -> bool:
        return self.now == "leader"

    def standing(self) -> Standing:
        return self.now

    def stop(self) -> None:
        pass


def render(webhook: Webhook, notice: AlertNotice) -> str:
    return json.dumps({"key": notice.idempotency_key, "kind": notice.event.kind, "rule": notice.rule})


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def storage(url: str) -> Iterator[Storage]:
    with Storage.open(url) as opened:
        yield opened


class Lanes:
    """Builds lanes on the test's store, each with its own view, clock and leadership."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.wakes = 0

    def make(
        self, rules: RuleSettings | None = None, settings: IncidentSettings | None = None, **options: Any
    ) -> tuple[IncidentLane, View, Clock, Leadership]:
        clock, leadership = Clock(), Leadership()
        view = View(clock)

        def wake() -> None:
            self.wakes += 1

        lane = IncidentLane(
            view,
            self.storage.analytics,
            leadership,
            webhooks=self.storage.webhooks,
            render=render,
            wake=wake,
            settings=settings or IncidentSettings(load_silence="off"),
            rules=rules or RuleSettings(),
            clock=clock,
            **options,
        )
        return lane, view, clock, leadership

    def events(self) -> list[tuple[int, str, str, int]]:
        """(rule, subject, kind, sequence) of every stored event, in time order."""
        alerts = {a.fingerprint: a for a in self.storage.analytics.alerts(limit=10_000)}
        return [
            (alerts[e.fingerprint].rule, alerts[e.fingerprint].subject, e.kind, e.sequence)
            for e in self.storage.analytics.alert_events(limit=10_000)
        ]


@pytest.fixture
def lanes(storage: Storage) -> Lanes:
    return Lanes(storage)


def stored(storage: Storage, rule: int, subject: str) -> AlertState | None:
    return storage.analytics.alert(fingerprint(CLUSTER, rule, subject))


# --- writing ------------------------------------------------------------------------------------------------


def test_an_offline_partition_is_written_with_its_outbox_rows_and_wakes_the_notifier(
    lanes: Lanes, storage: Storage
) -> None:
    hook = storage.webhooks.create_webhook(
        name="oncall", url="http://127.0.0.1:9/", format="generic", rules=[1], created_by="t", now=T0 - 1
    )
    lane, view, clock, _ = lanes.make()
    assert lane.evaluate_now().events == ()
    assert lanes.events() == []

    view.snapshot = broker_3_down()
    clock.now += 1.0
    outcome = lane.evaluate_now()
    assert [(e.kind, e.sequence, e.at) for e in outcome.events] == [("opened", 1, T0 + 1.0)]
    assert lanes.events() == [(1, "topic:singles", "opened", 1)]
    assert lanes.wakes == 1
    alert = stored(storage, 1, "topic:singles")
    assert alert is not None
    assert (alert.state, alert.severity, alert.opened_at) == ("open", "critical", T0 + 1.0)
    assert alert.summary.startswith("singles: 1 partition offline (singles-0), no live leader")
    assert alert.evidence["brokers_down"] == [3]
    # rule 5 (broker 3 down, for 90 s) and rule 2 (URPs, for 60 s) are pending: written, nothing sent
    for rule, subject in ((5, "broker:3"), (2, "topic:orders")):
        pending = stored(storage, rule, subject)
        assert pending is not None
        assert (pending.state, pending.event_sequence, pending.first_seen) == ("pending", 0, T0 + 1.0)

    (delivery,) = storage.webhooks.deliveries(hook.id)  # written with the event, in its transaction
    assert (delivery.state, delivery.idempotency_key) == ("pending", f"{alert.fingerprint}:1")
    assert json.loads(delivery.payload or "") == {
        "key": f"{alert.fingerprint}:1",
        "kind": "opened",
        "rule": 1,
    }
    assert storage.webhooks.enqueue_deliveries(T0 + 2.0, render) == 0

    clock.now += 0.5
    assert lane.evaluate_now().written == 0  # nothing new: nothing written
    stats = lane.stats()
    assert (stats.standing, stats.evaluations, stats.commits, stats.events) == ("leader", 3, 1, 1)


def test_an_unreadable_partition_state_opens_rule_13_not_rule_1(lanes: Lanes, storage: Storage) -> None:
    lane, view, clock, _ = lanes.make()
    view.snapshot = cluster(
        partition("orders", 0, [1, 2, 3]),
        partition("orders", 1, [2, 3, 1], state_error="invalid JSON: Expecting value"),
        partition("singles", 0, [3]),
        version=2,
        last_good_at=T0,
    )
    lane.evaluate_now()
    clock.now += 30.0
    assert [e.kind for e in lane.evaluate_now().events] == ["opened"]
    assert [(rule, subject, kind) for rule, subject, kind, _ in lanes.events()] == [
        (13, "cluster:state", "opened")
    ]
    alert = stored(storage, 13, "cluster:state")
    assert alert is not None
    assert (alert.severity, alert.evidence["count"]) == ("warning", 1)
    assert alert.summary.startswith("cluster state partly unreadable: the state of 1 partition cannot")
    assert stored(storage, 1, "topic:orders") is None

    view.snapshot = healthy(version=3)  # the controller rewrote the state
    clock.now += 1.0
    lane.evaluate_now()
    clock.now += 30.0
    assert [(e.kind, e.sequence) for e in lane.evaluate_now().events] == [("resolved", 2)]


def test_durations_open_and_resolve_alerts_on_time(lanes: Lanes, storage: Storage) -> None:
    lane, view, clock, _ = lanes.make(RuleSettings(for_s={5: 30.0}, resolve_after_s={5: 20.0, 1: 5.0}))
    view.snapshot = broker_3_down()
    lane.evaluate_now()
    clock.now += 29.0
    lane.evaluate_now()
    assert ("opened" in {k for r, _, k, _ in lanes.events() if r == 5}) is False
    clock.now += 1.0
    events = lane.evaluate_now().events
    assert sorted(e.kind for e in events) == ["opened", "updated"]
    assert (5, "broker:3", "opened", 1) in lanes.events()
    # rule 1's page of singles-0 (on broker 3 alone) now names rule 5 as its cause
    offline = stored(storage, 1, "topic:singles")
    assert offline is not None
    assert (
        "1 partition of singles has a replica on broker 3: broker 3's registration is gone" in offline.summary
    )
    assert [c["rule"] for c in offline.evidence["causes"]] == [5]

    view.snapshot = healthy(version=3)  # broker 3 is back
    clock.now += 1.0
    assert lane.evaluate_now().events == ()
    clock.now += 4.0
    assert [(e.kind, e.sequence) for e in lane.evaluate_now().events] == [("resolved", 3)]  # rule 1
    clock.now += 15.0
    assert [(e.kind, e.sequence) for e in lane.evaluate_now().events] == [("resolved", 2)]  # rule 5
    assert stored(storage, 5, "broker:3").state == "resolved"  # type: ignore[union-attr]
    assert stored(storage, 2, "topic:orders").state == "resolved"  # type: ignore[union-attr]  # never opened


def test_open_alerts_of_an_older_spark_job_are_taken_over_as_they_are(lanes: Lanes, storage: Storage) -> None:
    """Rows the windowed lifecycle wrote (event time, counters in windows): an open alert stays open, its
    events go on from its sequence, no second ``opened``."""
    lane, view, clock, _ = lanes.make()
    view.snapshot = broker_3_down()
    summary = (
        "singles: 1 partition offline (singles-0), no live leader: clients can neither produce nor consume"
    )
    fp = fingerprint(CLUSTER, 1, "topic:singles")
    old = AlertState(
        fp, CLUSTER, 1, "topic:singles", "critical", "open", summary, {"old": True}, None,
        hits=4, clean=0, first_seen=T0 - 120.0, last_seen=T0 - 30.0, opened_at=T0 - 90.0, resolved_at=None,
        last_window_end=T0 - 30.0, event_sequence=3,
    )  # fmt: skip
    storage.analytics.commit_incidents(
        CLUSTER, [old], [AlertEvent(fp, 3, "opened", T0 - 90.0, "critical", summary, {})], expected={fp: None}
    )
    clock.now += 1.0
    assert lane.evaluate_now().events == ()
    taken = stored(storage, 1, "topic:singles")
    assert taken is not None
    assert (taken.state, taken.event_sequence, taken.opened_at) == ("open", 3, T0 - 90.0)
    assert taken.evidence["brokers_down"] == [3]  # the lane's evidence replaced the old one
    view.snapshot = healthy(version=3)
    clock.now += 10.0
    assert [(e.kind, e.sequence) for e in lane.evaluate_now().events] == [("resolved", 4)]


# --- one writer, and no duplicates with two -----------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return database_url(request, tmp_path / "race.db")


def test_two_writers_write_each_event_once(any_url: str) -> None:
    """Two lanes that both think they lead: the second one's compare-and-set fails, it reads the states
    again and finds the alert open already; the event is written once."""
    url = any_url
    with Storage.open(url) as one_storage, Storage.open(url) as two_storage:
        one, one_view, one_clock, _ = Lanes(one_storage).make()
        two, two_view, two_clock, _ = Lanes(two_storage).make()
        assert two.evaluate_now().events == ()  # read the (empty) store: its cache says "nothing there"
        for view in (one_view, two_view):
            view.snapshot = broker_3_down()
        one_clock.now = two_clock.now = T0 + 1.0
        assert [e.kind for e in one.evaluate_now().events] == ["opened"]
        outcome = two.evaluate_now()
        assert (outcome.events, outcome.conflicts) == ((), 1)
        assert two.stats().conflicts == 1
        events = Lanes(one_storage).events()
    assert [(rule, kind, seq) for rule, _, kind, seq in events] == [(1, "opened", 1)]


def test_a_follower_writes_nothing_and_reads_the_store_when_it_leads(lanes: Lanes, storage: Storage) -> None:
    one, one_view, _, _ = lanes.make()
    two, two_view, two_clock, two_leadership = lanes.make()
    two_leadership.now = "follower"
    for view in (one_view, two_view):
        view.snapshot = broker_3_down()
    assert two.evaluate_now() == type(two.evaluate_now())("follower")
    assert lanes.events() == []
    one.evaluate_now()
    assert lanes.events() == [(1, "topic:singles", "opened", 1)]

    # the leader goes; the follower takes over from the store: open stays open, no event twice
    two_leadership.now = "leader"
    two_clock.now = T0 + 5.0
    assert two.evaluate_now().events == ()
    two_view.snapshot = healthy(version=3)
    two_clock.now = T0 + 20.0
    assert [e.kind for e in two.evaluate_now().events] == ["resolved"]
    assert [(kind, seq) for rule, _, kind, seq in lanes.events() if rule == 1] == [
        ("opened", 1),
        ("resolved", 2),
    ]


def test_the_last_leader_writes_rule_11_only_until_another_writer_shows(
    lanes: Lanes, storage: Storage
) -> None:
    """Its ZooKeeper session disconnected: rule 11 must still be written (nobody else may be elected while
    ZooKeeper is down), nothing else; the first compare-and-set that fails means another replica writes."""
    rules = RuleSettings(for_s={11: 5.0}, urp_for_s=0.0)
    lane, view, clock, leadership = lanes.make(rules)
    lane.evaluate_now()
    leadership.now = "last-leader"
    stale = replace(healthy(version=2), stale=True)
    view.snapshot = stale
    clock.now += 1.0
    lane.evaluate_now()  # pending: for 5 s
    clock.now += 5.0
    lane.evaluate_now()
    assert lanes.events() == [(11, VIEW_SUBJECT, "opened", 1)]
    # its view is fine but its session is not: rule 2 fires, and is not written by a last leader
    view.snapshot = broker_3_down(version=3)
    clock.now += 1.0
    assert lane.evaluate_now().events == ()
    assert stored(storage, 2, "topic:orders") is None

    # another replica, elected meanwhile, resolves rule 11: the last leader's next write conflicts
    other, other_view, other_clock, _ = lanes.make(rules)
    other_view.snapshot = healthy(version=4)
    other_clock.now = clock.now + 20.0
    assert [e.kind for e in other.evaluate_now().events] == ["resolved"]
    view.snapshot = replace(healthy(version=5), stale=True)
    clock.now += 30.0
    outcome = lane.evaluate_now()
    assert (outcome.events, outcome.conflicts) == ((), 1)
    assert lane.stats().superseded
    clock.now += 10.0
    assert not lane.evaluate_now().evaluated  # it waits to be elected again
    assert [k for r, _, k, _ in lanes.events() if r == 11] == ["opened", "resolved"]
    leadership.now = "leader"
    view.snapshot = healthy(version=6)
    assert lane.evaluate_now().evaluated
    assert not lane.stats().superseded


# --- rule 11: the load lane's silence -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "windows", "expected"),
    [
        ("auto", False, []),  # a deployment without Spark never pages
        ("auto", True, ["opened"]),
        ("require", False, ["opened"]),
        ("off", True, []),
    ],
)
def test_the_load_lanes_silence(
    lanes: Lanes, storage: Storage, mode: str, windows: bool, expected: list[str]
) -> None:
    """Silent: no new load window seen in the store for 3 windows (from the lane's first look)."""
    settings = IncidentSettings(load_silence=mode, load_silence_windows=3)  # type: ignore[arg-type]
    lane, _, clock, _ = lanes.make(RuleSettings(for_s={11: 0.0}), settings, load_window_s=60.0)
    if windows:  # the Spark job wrote a window long ago: its age does not matter, its arrival does
        storage.analytics.commit_batch("job", 1, load_windows=[load_window(CLUSTER, T0 - 6000.0)])
    assert lane.evaluate_now().events == ()
    clock.now = T0 + 180.0
    assert lane.evaluate_now().events == ()  # silent for exactly 3 windows: not more
    clock.now = T0 + 181.0
    assert [e.kind for e in lane.evaluate_now().events] == expected
    if expected:
        alert = stored(storage, 11, LOAD_LANE_SUBJECT)
        assert alert is not None
        assert alert.severity == "warning"
        storage.analytics.commit_batch("job", 2, load_windows=[load_window(CLUSTER, T0 - 5000.0)])
        clock.now = T0 + 200.0  # the new window is seen (the store is read at most every interval_s)
        assert [e.kind for e in lane.evaluate_now().events] == ["resolved"]


# --- the thread ---------------------------------------------------------------------------------------------


def test_a_burst_of_changes_is_one_evaluation_and_the_timer_ticks(storage: Storage) -> None:
    view = View(time.time)  # type: ignore[arg-type]
    view.clock = time.time  # type: ignore[assignment]
    lane = IncidentLane(
        view,
        storage.analytics,
        Leadership(),
        settings=IncidentSettings(coalesce_s=0.1, interval_s=30.0, load_silence="off"),
    )
    lane.start()
    try:
        deadline = time.monotonic() + 60
        while lane.stats().evaluations < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lane.stats().evaluations == 1  # the first, at start
        view.snapshot = broker_3_down()
        for _ in range(50):  # a broker crash: many snapshot versions within milliseconds
            lane.changed(view.snapshot)
        while lane.stats().evaluations < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert lane.stats().evaluations == 2
        assert lane.stats().events == 1
    finally:
        lane.stop()
    assert not lane.running


def test_rule_4_counts_the_elections_the_collector_reported(lanes: Lanes, storage: Storage) -> None:
    lane, view, clock, _ = lanes.make(RuleSettings(for_s={4: 0.0}, controller_flap_changes=3))
    for epoch in (5, 6, 7, 8):  # three elections within the flap window, each a snapshot of its own
        view.snapshot = healthy(version=epoch, controller=ControllerInfo(1, epoch))
        lane.changed(view.snapshot)
        clock.now += 10.0
    (event,) = lane.evaluate_now().events
    alert = stored(storage, 4, "controller")
    assert alert is not None
    assert "controller flapping" in alert.summary
    assert alert.evidence["elections"] == 3
    assert event.severity == "warning"


def test_the_lane_stops_even_while_waiting_a_long_interval(storage: Storage) -> None:
    lane = IncidentLane(
        View(Clock()), storage.analytics, Leadership(), settings=IncidentSettings(interval_s=60.0)
    )
    lane.start()
    stopper = threading.Thread(target=lane.stop)
    stopper.start()
    stopper.join(45)
    assert not stopper.is_alive(), "stop waited for the interval (60 s)"
