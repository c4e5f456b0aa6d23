"""The rolling-restart conductor's core with fakes behind its own interfaces: a simulated cluster whose
snapshot the fake restarter changes as a real restart would (the broker's registration ends, comes back
with a new epoch, then the broker rejoins the ISRs), and a fake service that records what it was asked.
The integration tests against the reference cluster are in tests/app/cli/test_rolling_restart.py."""

from __future__ import annotations

import dataclasses
import io
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from app.maintenance import rolling_restart
from app.maintenance.journal import DONE, PAUSED, STOPPED, Journal, Options, RunRecord
from app.maintenance.rolling_restart import (
    Conductor,
    Event,
    Outcome,
    RestartFailedError,
    ServiceConflictError,
    not_rejoined,
    plan_order,
    unexplained,
)
from collectors.kafka.model import ClusterSnapshot, ControllerInfo
from tests.support import snapshots

pytestmark = pytest.mark.unit

BROKERS = (1, 2, 3, 4)


class FakeCluster:
    """Four brokers, one partition per pair of brokers' combination (RF 3), min ISR 2; broker 1 the
    controller. ``down``/``up``/``rejoin`` change it as a restart does."""

    def __init__(self) -> None:
        self.changed = threading.Event()
        self.lock = threading.Lock()
        self.registered: dict[int, int] = {b: 100 + b for b in BROKERS}  # broker -> epoch (czxid)
        self.replicas = {
            ("t", i): tuple(BROKERS[(i + k) % len(BROKERS)] for k in range(3)) for i in range(len(BROKERS))
        }
        self.isr = {tp: list(r) for tp, r in self.replicas.items()}
        self.controller = 1
        self.next_epoch = 1000

    @property
    def snapshot(self) -> ClusterSnapshot:
        with self.lock:
            partitions = []
            for (topic, index), replicas in self.replicas.items():
                isr = [b for b in self.isr[topic, index] if b in self.registered]
                partitions.append(
                    snapshots.partition(topic, index, list(replicas), isr=isr, leader=isr[0] if isr else -1)
                )
            snapshot = snapshots.cluster(
                *partitions,
                brokers=sorted(self.registered),
                topic_configs={"t": {"min.insync.replicas": "2"}},
                controller=ControllerInfo(self.controller, 5),
            )
            brokers = {
                b: dataclasses.replace(snapshot.brokers[b], broker_epoch=epoch)
                for b, epoch in self.registered.items()
            }
            return dataclasses.replace(snapshot, brokers=brokers)

    def _changed(self) -> None:
        self.changed.set()

    def down(self, broker: int) -> None:
        with self.lock:
            self.registered.pop(broker, None)
            for isr in self.isr.values():
                if broker in isr:
                    isr.remove(broker)
        self._changed()

    def up(self, broker: int) -> None:
        with self.lock:
            self.next_epoch += 1
            self.registered[broker] = self.next_epoch
        self._changed()

    def rejoin(self, broker: int) -> None:
        with self.lock:
            for tp, replicas in self.replicas.items():
                if broker in replicas and broker not in self.isr[tp]:
                    self.isr[tp].append(broker)
        self._changed()


class FakeRestarter:
    def __init__(self, cluster: FakeCluster, rejoin_after_s: float | None = 0.02) -> None:
        self.cluster = cluster
        self.calls: list[int] = []
        self.rejoin_after_s = rejoin_after_s
        self.fail: int | None = None
        self.hook: Callable[[int], None] | None = None

    def restart(self, broker: int, host: str | None) -> None:
        assert host == f"b{broker}"
        self.calls.append(broker)
        if broker == self.fail:
            raise RestartFailedError(f"restart-broker {broker} exited with 1")
        self.cluster.down(broker)
        self.cluster.up(broker)
        if self.hook is not None:
            self.hook(broker)
        if self.rejoin_after_s is not None:
            threading.Timer(self.rejoin_after_s, self.cluster.rejoin, (broker,)).start()


class FakeService:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.states: dict[str, str] = {}
        self.count = 0
        self.started: list[tuple[str, str, int]] = []
        self.refusals: dict[str, int] = {}
        """kind -> how many more requests of it are refused (409) before one is accepted"""
        self.held_answers: list[int] = []
        """what held() answers, one per call (0 once used up)"""
        self.crash_after_start: str | None = None
        """the kind whose next start is accepted, then the conductor "crashes" before it learns the id"""

    def _action(self, kind: str, broker: int) -> str:
        if self.refusals.get(kind, 0) > 0:
            self.refusals[kind] -= 1
            self.calls.append((f"{kind} refused", broker))
            raise ServiceConflictError("POST answered 409: a reassignment is already in progress")
        self.count += 1
        action_id = f"a{self.count}"
        self.calls.append((kind, broker))
        self.states[action_id] = "SUCCEEDED"
        self.started.append((action_id, kind, broker))
        if self.crash_after_start == kind:
            self.crash_after_start = None
            raise KeyboardInterrupt("crashed before journaling the action id")
        return action_id

    def find_action(self, kind: str, broker: int, since: float) -> str | None:
        self.calls.append(("find", broker))
        short = kind.removesuffix("-broker")
        found = [a for a, k, b in self.started if k == short and b == broker]
        return found[-1] if found else None

    def held(self, silence_id: str) -> int:
        return self.held_answers.pop(0) if self.held_answers else 0

    def start_demotion(self, broker: int) -> str:
        return self._action("demote", broker)

    def start_promotion(self, broker: int) -> str:
        return self._action("promote", broker)

    def action_state(self, action_id: str) -> tuple[str, str | None]:
        return self.states[action_id], None

    def silence(self, broker: int, duration_s: int, comment: str) -> str:
        assert duration_s >= 1
        self.calls.append(("silence", broker))
        return f"s{broker}"

    def expire(self, silence_id: str) -> None:
        self.calls.append(("expire", silence_id))


def record(*, demote: bool = True, silence: bool = True, wait_rejoined_s: float = 30.0) -> RunRecord:
    options = Options(
        demote=demote,
        silence=silence,
        restart_command="restart-broker {broker}",
        wait_rejoined_s=wait_rejoined_s,
        max_unsafe_wait_s=30.0,
    )
    return RunRecord("zk", plan_order(list(BROKERS), 1), list(BROKERS), options, started_at=0.0)


@dataclasses.dataclass
class Run:
    cluster: FakeCluster
    restarter: FakeRestarter
    service: FakeService
    journal: Journal
    events: list[Event]
    stop: threading.Event

    def __call__(self, run: RunRecord) -> Outcome:
        conductor = Conductor(
            self.cluster,
            self.journal,
            run,
            restarter=self.restarter,
            service=self.service,
            stop=self.stop,
            on_event=self.events.append,
            progress=io.StringIO(),
        )
        return conductor.run()


@pytest.fixture
def conduct(tmp_path: Path) -> Run:
    cluster = FakeCluster()
    return Run(cluster, FakeRestarter(cluster), FakeService(), Journal(tmp_path), [], threading.Event())


# --- pure judgements -------------------------------------------------------------------------------------


def test_the_controller_goes_last_and_the_order_given_is_kept() -> None:
    assert plan_order([3, 1, 2, 4], 1) == [3, 2, 4, 1]
    assert plan_order([3, 2], 1) == [3, 2]
    assert plan_order([3, 2], None) == [3, 2]


def test_unexplained_names_another_broker_down_offline_and_under_min_isr_not_the_restarted_one() -> None:
    cluster = FakeCluster()
    assert unexplained(cluster.snapshot, BROKERS, None) == ()
    cluster.down(2)
    # broker 2 out: explained while 2 restarts, not otherwise
    assert unexplained(cluster.snapshot, BROKERS, 2) == ()
    assert unexplained(cluster.snapshot, BROKERS, None) == (
        "broker 2 is down (not registered in /brokers/ids)",
    )
    cluster.down(3)
    reasons = unexplained(cluster.snapshot, BROKERS, 2)
    assert reasons[0] == "broker 3 is down (not registered in /brokers/ids)"
    # t-0 and t-1 hold 2 and 3: one replica left of three, under min ISR 2, and not only because of 2
    assert (
        reasons[1] == "2 partitions under min ISR with a replica other than broker 2 out of the ISR: t-0, t-1"
    )
    cluster.down(4)  # t-1 has 2, 3, 4: nobody left
    assert "1 partition offline: t-1" in unexplained(cluster.snapshot, BROKERS, 2)


def test_an_untrusted_view_explains_nothing_and_stops_nothing() -> None:
    cluster = FakeCluster()
    cluster.down(2)
    stale = dataclasses.replace(cluster.snapshot, stale=True)
    assert unexplained(stale, BROKERS, None) == ()


def test_not_rejoined_lists_the_partitions_whose_isr_misses_the_broker() -> None:
    cluster = FakeCluster()
    cluster.down(2)
    cluster.up(2)
    assert [str(tp) for tp in not_rejoined(cluster.snapshot, 2)] == ["t-0", "t-1", "t-3"]
    cluster.rejoin(2)
    assert not_rejoined(cluster.snapshot, 2) == ()


# --- runs ---------------------------------------------------------------------------------------------------


def test_every_broker_once_controller_last_demoted_silenced_promoted_unsilenced(conduct: Run) -> None:
    run = record()
    outcome = conduct(run)
    assert outcome.exit_code == 0, outcome
    assert conduct.restarter.calls == [2, 3, 4, 1]
    expected: list[tuple[str, object]] = []
    for b in (2, 3, 4, 1):
        expected += [("demote", b), ("silence", b), ("promote", b), ("expire", f"s{b}")]
    assert conduct.service.calls == expected
    saved = conduct.journal.load()
    assert saved is not None
    assert saved.state == DONE
    assert all(saved.brokers[b].done for b in BROKERS)
    assert saved.brokers[2].steps["restart"].detail["epoch_before"] == 102


def test_without_demotion_and_silence_no_service_is_asked(conduct: Run) -> None:
    outcome = conduct(record(demote=False, silence=False))
    assert outcome.exit_code == 0
    assert conduct.service.calls == []
    assert conduct.restarter.calls == [2, 3, 4, 1]


def test_another_broker_down_while_one_rejoins_stops_with_3_and_lifts_nothing(conduct: Run) -> None:
    conduct.restarter.rejoin_after_s = None

    def also_down(broker: int) -> None:
        if broker == 3:  # broker 3 does not rejoin: broker 4 goes down meanwhile
            threading.Timer(0.02, conduct.cluster.down, (4,)).start()
        else:
            threading.Timer(0.02, conduct.cluster.rejoin, (broker,)).start()

    conduct.restarter.hook = also_down
    outcome = conduct(record())
    assert outcome.exit_code == 3
    assert outcome.result == STOPPED
    assert "at broker 3 (rejoin)" in outcome.message
    assert "broker 4 is down" in outcome.message
    assert conduct.restarter.calls == [2, 3]
    assert ("promote", 3) not in conduct.service.calls
    assert ("expire", "s3") not in conduct.service.calls


def test_a_broker_not_back_in_its_isrs_within_its_window_stops_the_run_and_lifts_nothing(
    conduct: Run,
) -> None:
    conduct.restarter.rejoin_after_s = None
    outcome = conduct(record(wait_rejoined_s=0.3))
    assert outcome.exit_code == 3
    assert "broker 2 is still out of the ISR of 3 partitions (t-0, t-1, t-3)" in outcome.message
    assert "so its alerts page" in outcome.message
    assert conduct.service.calls == [("demote", 2), ("silence", 2)]


def test_a_failing_restart_command_stops_the_run_naming_it(conduct: Run) -> None:
    conduct.restarter.fail = 3
    outcome = conduct(record())
    assert outcome.exit_code == 3
    assert (
        outcome.message
        == "stopped at broker 3 (restart): the restart command failed: restart-broker 3 exited with 1"
    )


def test_a_broker_already_down_before_its_turn_stops_the_run_before_it(conduct: Run) -> None:
    conduct.cluster.down(4)
    outcome = conduct(record())
    assert outcome.exit_code == 3
    assert outcome.message.startswith("stopped at broker 2 (wait_safe): broker 4 is down")
    assert conduct.restarter.calls == []
    assert conduct.service.calls == []


def test_a_stop_signal_pauses_and_resume_finishes_without_restarting_twice(conduct: Run) -> None:
    conduct.restarter.hook = lambda broker: conduct.stop.set() if broker == 3 else None
    run = record()
    outcome = conduct(run)
    assert outcome.result == PAUSED
    assert outcome.exit_code == 3
    assert outcome.message == "paused at broker 3; run again with --resume"
    saved = conduct.journal.load()
    assert saved is not None
    assert saved.state == PAUSED
    conduct.stop.clear()
    conduct.restarter.hook = None
    assert conduct(saved).exit_code == 0
    assert conduct.restarter.calls == [2, 3, 4, 1]
    assert conduct.service.calls.count(("promote", 3)) == 1


def crashed_during_restart_of(conduct: Run, broker: int) -> RunRecord:
    """A journal as a conductor SIGKILLed while restarting ``broker`` leaves it: the restart step started
    (with the epoch before) and not done."""
    run = record(demote=False, silence=False)
    progress = run.progress(broker)
    progress.step("wait_safe").started_at = progress.step("wait_safe").ended_at = 1.0
    progress.step("restart").started_at = 2.0
    progress.step("restart").detail["epoch_before"] = conduct.cluster.registered[broker]
    conduct.journal.save(run)
    loaded = conduct.journal.load()
    assert loaded is not None
    return loaded


def test_resume_after_a_crash_does_not_restart_a_broker_that_has_a_new_session(conduct: Run) -> None:
    run = crashed_during_restart_of(conduct, 2)
    conduct.cluster.down(2)
    conduct.cluster.up(2)  # the restart the dead conductor started went through
    conduct.cluster.rejoin(2)
    assert conduct(run).exit_code == 0
    assert conduct.restarter.calls == [3, 4, 1]


def test_resume_waits_for_a_broker_that_is_down_without_restarting_it(conduct: Run) -> None:
    run = crashed_during_restart_of(conduct, 2)
    conduct.cluster.down(2)  # the restart is under way

    def back() -> None:
        conduct.cluster.up(2)
        conduct.cluster.rejoin(2)

    threading.Timer(0.2, back).start()
    assert conduct(run).exit_code == 0
    assert conduct.restarter.calls == [3, 4, 1]
    assert any("the command is not run twice" in e.message for e in conduct.events)


def test_resume_restarts_a_broker_still_in_its_old_session(conduct: Run) -> None:
    run = crashed_during_restart_of(conduct, 2)  # killed before the command ran
    assert conduct(run).exit_code == 0
    assert conduct.restarter.calls == [2, 3, 4, 1]


def test_the_controller_moving_is_followed(conduct: Run) -> None:
    def move(broker: int) -> None:
        if broker == 2:
            conduct.cluster.controller = 3

    conduct.restarter.hook = move
    assert conduct(record(demote=False, silence=False)).exit_code == 0
    assert conduct.restarter.calls == [2, 4, 1, 3]


def test_a_failed_demotion_stops_before_the_broker_is_touched(conduct: Run) -> None:
    start = conduct.service.start_demotion

    def failing(broker: int) -> str:
        action_id = start(broker)
        conduct.service.states[action_id] = "FAILED"
        return action_id

    conduct.service.start_demotion = failing  # type: ignore[method-assign]
    outcome = conduct(record())
    assert outcome.exit_code == 3
    assert (
        outcome.message
        == "stopped at broker 2 (demote): demote-broker action a1 ended FAILED: no error given"
    )
    assert conduct.restarter.calls == []


def test_a_demotion_refused_for_now_is_asked_again_until_accepted(
    conduct: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rolling_restart, "RETRY_S", 0.01)
    conduct.service.refusals["demote"] = 2
    outcome = conduct(record())
    assert outcome.exit_code == 0, outcome
    assert conduct.service.calls[:3] == [("demote refused", 2), ("demote refused", 2), ("demote", 2)]
    waiting = [e.message for e in conduct.events if e.kind == "waiting" and e.step == "demote"]
    assert waiting == [
        "demote-broker refused for now, asking again: POST answered 409: a reassignment is already in "
        "progress"
    ]


def test_a_demotion_refused_beyond_max_unsafe_wait_stops_before_the_broker_is_touched(conduct: Run) -> None:
    conduct.service.refusals["demote"] = 10**6
    run = record()
    run.options.max_unsafe_wait_s = 0.0
    outcome = conduct(run)
    assert outcome.exit_code == 3
    assert outcome.message.startswith(
        "stopped at broker 2 (demote): the service still refuses demote-broker after 0 s "
        "(--max-unsafe-wait): POST answered 409"
    ), outcome.message
    assert conduct.restarter.calls == []


def test_a_crash_between_starting_a_demotion_and_journaling_it_follows_that_demotion(
    conduct: Run,
) -> None:
    conduct.service.crash_after_start = "demote"
    run = record()
    with pytest.raises(KeyboardInterrupt):
        conduct(run)
    saved = conduct.journal.load()
    assert saved is not None
    demote = saved.brokers[2].steps["demote"]
    assert (demote.started, demote.done, "action_id" in demote.detail) == (True, False, False)
    outcome = conduct(saved)
    assert outcome.exit_code == 0, outcome
    assert [c for c in conduct.service.calls if c[0] == "demote"] == [("demote", b) for b in (2, 3, 4, 1)]
    assert ("find", 2) in conduct.service.calls
    assert any("following demote-broker action a1" in e.message for e in conduct.events)
    resumed = conduct.journal.load()
    assert resumed is not None
    assert resumed.brokers[2].steps["demote"].detail["action_id"] == "a1"


def test_the_silence_is_lifted_once_the_alerts_it_holds_have_resolved(conduct: Run) -> None:
    conduct.service.held_answers = [2, 1, 0]
    outcome = conduct(record())
    assert outcome.exit_code == 0, outcome
    waiting = [e.message for e in conduct.events if e.kind == "waiting" and e.step == "unsilence"]
    assert waiting == ["silence s2 still holds 2 open alerts: waiting for them to resolve before lifting it"]
    assert conduct.service.held_answers == []


def test_the_journal_round_trips(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "state")
    run = record()
    run.progress(3).step("restart").detail["epoch_before"] = 7
    journal.save(run)
    assert journal.load() == run
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["rolling-restart.json"]
