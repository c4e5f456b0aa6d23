"""``kafka-health safe-to-stop`` against the reference cluster on a real ZooKeeper: every exit code (0 safe,
3 unsafe, 1 unreadable, 2 bad input), ``--wait`` running out and printing what it waits for once, and a
rolling restart of every broker driven by ``safe-to-stop --wait`` in a real subprocess, each broker stopped
(controlled) and started through the reference cluster's control port, while a watcher on every state
znode records that no partition ever went offline or under min ISR. The rolling restart holds each
restarted broker back from catching up for a while (a replication throttle, lifted after HOLD_S), so that
a ``--wait`` that answered before the broker was back in the ISRs would let the next stop take a
partition under min ISR."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from app.cli.main import main
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.control import ControlServer
from app.embedded.zookeeper import pick_free_port
from app.maintenance.watch import wait
from app.settings import NO_ZOOKEEPER
from collectors.kafka.admin import write_entity_config
from collectors.kafka.model import ClusterSnapshot
from collectors.safe_to_stop import SafeToStop as SafeToStopAnswer
from collectors.safe_to_stop import safe_to_stop as answer_for
from tests.support import snapshots
from tests.support.cli import CliFactory
from tests.support.reference_cluster import ClusterFactory, live_broker_ids, wait_for, zk_partitions
from tests.support.state_watcher import StateWatcher

MIN_ISR = {"orders": 1, "payments": 2}
HOLD_S = 1.5
"""How long the rolling restart holds a restarted broker back from catching up."""
FOLLOWER_RATE = "follower.replication.throttled.rate"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
UNTHROTTLED = str(10**9)
TOPICS = [
    TopicSpec(name="orders", partitions=4, replication_factor=3),
    TopicSpec(name="payments", partitions=3, replication_factor=3, config={"min.insync.replicas": "2"}),
]


def safe_to_stop(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["safe-to-stop", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- exit codes ------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_exit_codes_safe_unsafe_unknown_and_bad_flags(
    make_cluster: ClusterFactory,
    zk_connect: str,
    zk_client: KazooClient,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_cluster(topics=[*TOPICS, TopicSpec(name="scratch", partitions=1, replication_factor=1)])
    (owner,) = zk_partitions(zk_client)["scratch", 0].replicas
    other = (owner + 1) % 3

    code, out, _ = safe_to_stop(capsys, "--zookeeper", zk_connect, "--broker", str(owner))
    assert code == 3
    assert out.startswith(f"broker {owner}: NOT safe to stop\n")
    assert (
        f"  - 1 partition would go offline: scratch-0 (its only in-sync replica is broker {owner}; "
        "it has a single replica: replication factor 1)\n" in out
    )

    code, out, _ = safe_to_stop(capsys, "--zookeeper", zk_connect, "--broker", str(other), "--format", "json")
    assert code == 0
    body: dict[str, Any] = json.loads(out)
    assert (body["broker"], body["safe"], body["trusted"], body["reasons"]) == (other, True, True, [])

    code, out, err = safe_to_stop(capsys, "--zookeeper", zk_connect, "--broker", "9")
    assert (code, out) == (2, "")
    assert err == "error: broker 9 is neither registered nor assigned any replica (known brokers: 0, 1, 2)\n"

    with pytest.raises(SystemExit) as exited:
        main(["safe-to-stop", "--zookeeper", zk_connect, "--broker", "x"])
    assert exited.value.code == 2
    assert "argument --broker: 'x' is not a broker id" in capsys.readouterr().err

    monkeypatch.delenv("KAFKA_HEALTH_ZOOKEEPER__CONNECT", raising=False)
    code, _, err = safe_to_stop(capsys, "--broker", "0")
    assert (code, err) == (2, f"error: {NO_ZOOKEEPER}\n")
    code, _, err = safe_to_stop(capsys, "--zookeeper", "no-port/", "--broker", "0")
    assert code == 2
    assert err.startswith("error: ")

    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__CONNECT", zk_connect)  # the settings tree's ZooKeeper
    assert safe_to_stop(capsys, "--broker", str(other))[0] == 0


@pytest.mark.integration
@pytest.mark.parametrize("wait", [[], ["--wait", "5"]])
def test_an_unreachable_zookeeper_exits_1(capsys: pytest.CaptureFixture[str], wait: list[str]) -> None:
    nobody = f"127.0.0.1:{pick_free_port()}"
    started = time.monotonic()
    code, out, err = safe_to_stop(capsys, "--zookeeper", nobody, "--broker", "0", "--timeout", "1", *wait)
    assert code == 1
    assert out == ""
    assert err.startswith(f"error: cannot read the cluster at {nobody}: ")
    assert time.monotonic() - started < 60  # it gave up (after --timeout 1, or --wait 5), rather than hang


@pytest.mark.integration
def test_wait_runs_out_printing_what_it_waits_for_once(
    make_cluster: ClusterFactory,
    zk_connect: str,
    zk_client: KazooClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = make_cluster(topics=TOPICS)
    cluster.stop_broker(2)  # payments' ISRs are down to two: neither of those may go
    # the reasons must not change during the wait (they are printed on change): every ISR shrunk first
    wait_for(
        lambda: all(2 not in p.isr for p in zk_partitions(zk_client).values()),
        timeout=30,
        message="broker 2 out of every ISR",
    )
    started = time.monotonic()
    code, out, _ = safe_to_stop(capsys, "--zookeeper", zk_connect, "--broker", "0", "--wait", "1.5")
    waited = time.monotonic() - started
    assert code == 3
    assert 1.5 <= waited < 60  # the whole --wait, then it gave up
    assert out.count("waiting for broker 0") == 1, out
    assert "would go under min ISR: payments-0, payments-1, payments-2" in out
    assert "broker 0: NOT safe to stop\n" in out
    assert ", waited 1." in out

    code, out, err = safe_to_stop(
        capsys, "--zookeeper", zk_connect, "--broker", "0", "--wait", "0.5", "--format", "json"
    )
    assert code == 3
    assert json.loads(out)["waited_s"] >= 0.5
    assert "waiting for broker 0" in err  # progress stays out of the JSON


# --- the wait, over snapshots the test publishes ----------------------------------------------------------


@dataclass
class Published:
    """Stands in for the watching collector: the test publishes snapshots and tells of each change."""

    snapshot: ClusterSnapshot
    changed: threading.Event = field(default_factory=threading.Event)

    def publish(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.changed.set()


def judge(snapshot: ClusterSnapshot) -> SafeToStopAnswer:
    return answer_for(snapshot, 1, default_min_insync_replicas=2)


@pytest.mark.unit
def test_wait_prints_on_change_only_and_answers_once_safe() -> None:
    under = snapshots.cluster(snapshots.partition("t", 0, [1, 2, 3], isr=[1, 2]), version=1)
    stale = dataclasses.replace(under, version=2, stale=True)
    source = Published(under)
    progress = io.StringIO()

    def story() -> None:
        for version in (3, 4, 5):  # the same reasons in new versions: nothing printed
            time.sleep(0.05)
            source.publish(dataclasses.replace(under, version=version))
        time.sleep(0.05)
        source.publish(stale)
        time.sleep(0.05)
        source.publish(snapshots.cluster(snapshots.partition("t", 0, [1, 2, 3]), version=7))

    teller = threading.Thread(target=story)
    teller.start()
    answer, waited = wait(source, judge, source.changed, threading.Event(), 30, progress)
    teller.join()
    assert answer.safe
    assert answer.snapshot_version == 7
    assert waited < 5
    lines = progress.getvalue().splitlines()
    waiting = [
        line for line in lines if re.fullmatch(r"\d\d:\d\d:\d\d waiting for broker 1 \(\d+ s left\):", line)
    ]
    assert len(waiting) == 2, lines
    assert lines[1].startswith("  - 1 partition would go under min ISR: t-0")
    assert lines[3].startswith("  - the view of the cluster is stale")


@pytest.mark.unit
def test_wait_ends_unsafe_on_a_stop_signal_or_the_deadline() -> None:
    under = snapshots.cluster(snapshots.partition("t", 0, [1, 2, 3], isr=[1, 2]))
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    answer, waited = wait(Published(under), judge, threading.Event(), stop, 30, io.StringIO())
    assert not answer.safe
    assert 0.1 <= waited < 5
    answer, waited = wait(Published(under), judge, threading.Event(), threading.Event(), 0.2, io.StringIO())
    assert not answer.safe
    assert 0.2 <= waited < 5


# --- a rolling restart -------------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_rolling_restart_driven_by_safe_to_stop_wait(
    make_cluster: ClusterFactory,
    zk_connect: str,
    zk_client: KazooClient,
    run_cli: CliFactory,
    record_property: Any,
) -> None:
    # Replicas out of the ISR replicate at 1 byte/s on every broker (in-sync ones are never throttled):
    # a restarted broker stays out of the ISRs until the test lifts its throttle, so that a --wait that
    # answered too early would let the next stop take payments under min ISR.
    throttled = [t.model_copy(update={"config": {**t.config, FOLLOWER_REPLICAS: "*"}}) for t in TOPICS]
    cluster = make_cluster(topics=throttled, start=False)
    write_entity_config(zk_client, "brokers", "<default>", {FOLLOWER_RATE: "1"}, notify=False)
    cluster.start()
    control = ControlServer(cluster)
    control.start()
    partitions = zk_partitions(zk_client)
    replicas = {f"{t}-{p}": len(z.replicas) for (t, p), z in partitions.items()}
    watcher = StateWatcher(zk_client, replicas, MIN_ISR)
    for topic, index in partitions:
        watcher.watch(topic, index)
    assert cluster.controller is not None
    controller = cluster.controller.broker_id
    order = [*sorted(b for b in cluster.brokers if b != controller), controller]  # the controller last

    def post(path: str, body: dict[str, Any] | None = None) -> None:
        response = httpx.post(control.url + path, json=body or {}, timeout=30)
        assert response.status_code == 200, response.text

    lifted: list[int] = []

    def lift_throttle(broker: int) -> None:  # on a timer's thread: checked at the end
        write_entity_config(zk_client, "brokers", str(broker), {FOLLOWER_RATE: UNTHROTTLED})
        lifted.append(broker)

    timers: list[threading.Timer] = []

    try:
        started = time.monotonic()
        waits: list[float] = []
        first = run_cli("safe-to-stop", "--zookeeper", zk_connect, "--broker", str(order[0]), "--wait", "60")
        assert first.wait(60) == 0, first.output()
        for step, broker in enumerate(order):
            post(f"/brokers/{broker}/stop", {"controlled": True})
            assert broker not in live_broker_ids(zk_client)
            after = order[step + 1] if step + 1 < len(order) else None
            cli = None
            if after is not None:
                # the script's next step, while this broker is still down: payments needs it back first
                cli = run_cli(
                    "safe-to-stop", "--zookeeper", zk_connect, "--broker", str(after), "--wait", "60"
                )
                cli.expect(f"waiting for broker {after}")
            asked = time.monotonic()
            post(f"/brokers/{broker}/start")
            # the restarted broker cannot catch up until its follower throttle is lifted, HOLD_S later
            timer = threading.Timer(HOLD_S, lift_throttle, (broker,))
            timer.start()
            timers.append(timer)
            if cli is not None:  # the next broker is stopped as soon as the command says so
                assert cli.wait(60) == 0, cli.output()
                waits.append(time.monotonic() - asked)
                assert f"broker {after}: safe to stop" in cli.stdout
                assert sum("waiting for broker" in line for line in cli.stdout) <= 3, cli.output()
        for timer in timers:
            timer.join()
        assert lifted == order
        assert min(waits) >= HOLD_S, "each next broker stayed unsafe while the restarted one was held back"
        wait_for(
            lambda: all(len(p.isr) == len(p.replicas) for p in zk_partitions(zk_client).values()),
            timeout=30,
            message="every ISR full again",
        )
        elapsed = time.monotonic() - started
        record_property("rolling_restart_s", round(elapsed, 2))
        record_property("waits_s", [round(w, 2) for w in waits])
        print(f"rolling restart of {len(order)} brokers: {elapsed:.1f} s; waits after each start {waits}")

        assert watcher.events >= 2 * len(order), "the watcher saw the restarts' state changes"
        assert watcher.violations == [], watcher.violations

        # the watcher does see a violation: two brokers crash, payments goes under min ISR
        crash = time.monotonic()
        cluster.stop_broker(order[0])
        cluster.stop_broker(order[1])
        wait_for(lambda: watcher.since(crash), timeout=60, message="the watcher seeing under min ISR")
    finally:
        for timer in timers:
            timer.cancel()
        control.close()


@pytest.mark.integration
@pytest.mark.parametrize("wait", [[], ["--wait", "1"]])
def test_a_chroot_with_no_kafka_in_it_exits_1_saying_so(
    capsys: pytest.CaptureFixture[str], zk_connect: str, wait: list[str]
) -> None:
    code, out, err = safe_to_stop(capsys, "--zookeeper", zk_connect + "-typo", "--broker", "1", *wait)
    assert code == 1, err
    assert "no Kafka cluster there" in err
    assert out == ""
