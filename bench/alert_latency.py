"""Benchmark: a fault in the cluster → its signed webhook at a real HTTP receiver, end to end.

    .venv/bin/python bench/alert_latency.py incident [--faults 20] [--kinds crash,min-isr,controller,log-dir]
    .venv/bin/python bench/alert_latency.py incident --scale 200k [--faults 20]
    .venv/bin/python bench/alert_latency.py load [--repeats 3]

Everything is real and separate: an embedded ZooKeeper, the cluster, ``kafka-health serve`` as a child
process on a fresh SQLite store with its default settings (``--env NAME=VALUE`` adds settings), and a
webhook receiver (:class:`~app.embedded.webhook_receiver.WebhookReceiver`, which verifies each request's
signature) subscribed through the service's own API in the generic format. Latency is from the fault to
the moment the receiver got the ``opened`` event of the rule expected for it.

``incident`` (the incident lane, in ``serve``; no collector, no Spark):

* ``--scale small``: the reference cluster (5 brokers, ``replica.lag.time.max.ms`` 2 s) with an RF-1 topic
  ``offline-rf1`` (10 partitions) and an RF-2 topic ``min-isr`` (10 partitions, ``min.insync.replicas`` 2).
  Faults, ``--faults`` of each kind, on the brokers in turn:

  - ``crash``: a broker is killed (its session ends at once); its RF-1 partitions go offline: rule 1.
    Timed from the kill.
  - ``min-isr``: a broker's fetchers stall; after ``replica.lag.time.max.ms`` its leaders shrink the ISRs
    of the ``min-isr`` partitions it follows below ``min.insync.replicas``: rule 3. Timed from the first
    such ISR write (the state znode's ``mtime``, ZooKeeper's clock, same host).
  - ``controller``: the active controller is killed; the others elect a new one (a normal failover is not
    paged) and the controller's RF-1 partitions go offline: rule 1. Timed from the kill; the controller
    failover (until ``/controller`` names another broker) is reported too.
  - ``log-dir`` (not in the default ``--kinds``): one of a broker's two log dirs fails (the reference
    cluster's ``fail_log_dir``, as its control port's ``POST /brokers/{id}/log-dirs/{n}/fail``): the broker
    writes ``/log_dir_event_notification``, its replicas there leave the ISRs: rule 15. Timed from the fail
    request. ``serve`` then scrapes the brokers' metrics too (their offline-log-dir gauges, every
    ``metrics_interval_s``, 10 s by default), as a deployment does. Healed by restarting the broker (a
    new registration, the dir back empty); rule 15 resolves after its resolve delay (30 s by default:
    ``--env KAFKA_HEALTH_ANALYTICS__RULES__RESOLVE_AFTER_S='{"15": 2}'`` shortens the run, not the
    latency).

  After each fault the cluster is healed (restart, resume) and the bench waits for the alert's
  ``resolved`` before the next fault, so each fault opens a new alert run.

* ``--scale 200k``: the bulk cluster of ``bench/bulk_write.py`` (1,000 brokers, 200,000 partitions, RF 3)
  plus an RF-1 topic ``live-rf1`` (10 partitions) on one broker, written into the embedded ZooKeeper. A
  broker failure is what Kafka's controller would write: the broker's registration goes (its session ended),
  then its partitions' state znodes are rewritten (offline elections where it led, the ISRs without it
  elsewhere: about 600 writes, the RF-1 ones go offline): rule 1, timed from the registration's deletion.
  The broker then comes back (registration, states restored) and the bench waits for ``resolved``.

``load`` (the load lane: the reference cluster, ``kafka-health collect`` and ``kafka-health analytics``
with default settings, and ``serve`` for the webhooks): load is skewed onto one broker (its partitions'
produce rate ×4) and the time until rule 8 or 9's ``opened`` is measured, then the skew is reset and the
bench waits for ``resolved``; ``--repeats`` times. With the default 30 s windows this takes minutes each.

Prints, per fault kind, every latency and p50 / p95 / max. Exit status 1 when a fault was not announced
within ``--timeout``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
from kazoo.client import KazooClient

from app.embedded.reference_cluster.bulk import BulkClusterSpec, write_bulk_cluster
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TopicSpec
from app.embedded.webhook_receiver import ReceivedRequest, WebhookReceiver
from app.embedded.zookeeper import EmbeddedZooKeeper, pick_free_port
from collectors.kafka import zkdata
from collectors.kafka.election import elect_offline, remove_replica_from_isr
from collectors.kafka.model import LeaderAndIsr, ReplicaAssignment, TopicPartition

TOKEN = "bench-admin-" + secrets.token_hex(8)
SECRET = "bench-webhook-secret-" + secrets.token_hex(8)
RF1_TOPIC = "offline-rf1"
MIN_ISR_TOPIC = "min-isr"
LIVE_TOPIC = "live-rf1"
TARGETS_S = {"small": 1.0, "200k": 2.0}
BULK_CHROOT = "/bench"
REPO = Path(__file__).resolve().parents[1]


class BenchError(Exception):
    """The run went wrong (reported, exit status 1)."""


# --- the service and the receiver ------------------------------------------------------------------------


def kafka_health() -> list[str]:
    """The command as a user runs it (the venv's script, else ``python -m app.cli``)."""
    script = Path(sys.executable).with_name("kafka-health")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


@dataclass
class Process:
    """A child process with its output in a file (shown when it fails)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def start_process(name: str, argv: Sequence[str], workdir: Path, env: dict[str, str]) -> Process:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=workdir
        )
    return Process(name, popen, log)


@dataclass
class Service:
    process: Process
    url: str

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)


def start_service(
    zookeeper: str, workdir: Path, extra_env: dict[str, str], start_timeout: float = 600.0
) -> Service:
    port = pick_free_port()
    env = {
        "KAFKA_HEALTH_SERVICE__TOKENS": f"bench:admin:{TOKEN}",
        # the receiver is on loopback, which the webhook egress policy refuses unless allowed
        "KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS": "127.0.0.1/32",
        **extra_env,
    }
    argv = [
        *kafka_health(),
        "serve",
        "--zookeeper",
        zookeeper,
        "--store-url",
        f"sqlite:///{workdir / 'kafka-health.db'}",
        "--port",
        str(port),
    ]
    process = start_process("serve", argv, workdir, env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + start_timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise BenchError(f"kafka-health serve exited with {process.popen.returncode}:\n{process.tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return Service(process, url)
        time.sleep(0.2)
    process.stop()
    raise BenchError(f"kafka-health serve was not ready within {start_timeout:g} s:\n{process.tail()}")


def subscribe(service: Service, receiver: WebhookReceiver) -> None:
    with service.client() as client:
        response = client.post(
            "/api/v1/webhooks",
            json={"name": "bench", "url": receiver.url, "format": "generic", "secret": SECRET},
        )
    if response.status_code != 201:
        raise BenchError(f"subscribing the receiver failed: {response.status_code} {response.text}")


@dataclass(frozen=True)
class Event:
    """One accepted webhook: what it says and when it arrived."""

    kind: str
    rule: int
    fingerprint: str
    sequence: int
    subject: str
    received_at: float


def events(receiver: WebhookReceiver) -> list[Event]:
    found = []
    for request in receiver.accepted_requests():
        body = request.json()
        found.append(
            Event(
                kind=str(body["kind"]),
                rule=int(body["rule"]),
                fingerprint=str(body["fingerprint"]),
                sequence=int(body["sequence"]),
                subject=str(body["subject"]),
                received_at=request.received_at,
            )
        )
    return found


def wait_for(
    receiver: WebhookReceiver,
    match: Callable[[Event], bool],
    timeout: float,
    what: str,
    seen: int = 0,
) -> Event:
    """The first accepted event after the first ``seen`` ones that ``match``es."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in events(receiver)[seen:]:
            if match(event):
                return event
        time.sleep(0.01)
    raise BenchError(f"no webhook for {what} within {timeout:g} s")


def bad_signatures(receiver: WebhookReceiver) -> list[ReceivedRequest]:
    return [r for r in receiver.requests() if r.signature_error is not None]


# --- results ---------------------------------------------------------------------------------------------


@dataclass
class Results:
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, latency: float, note: str = "") -> None:
        self.by_kind.setdefault(kind, []).append(latency)
        if note:
            self.notes.setdefault(kind, []).append(note)
        print(f"  {kind} #{len(self.by_kind[kind])}: {latency * 1000:.0f} ms {note}".rstrip(), flush=True)

    def report(self, target_s: float | None) -> None:
        print("\nfault -> signed webhook at the receiver")
        print(f"{'fault':<14} {'n':>3} {'p50':>9} {'p95':>9} {'max':>9}")
        for kind, values in self.by_kind.items():
            print(
                f"{kind:<14} {len(values):>3} {percentile(values, 50) * 1000:>7.0f}ms "
                f"{percentile(values, 95) * 1000:>7.0f}ms {max(values) * 1000:>7.0f}ms"
            )
        if target_s is not None:
            worst = max(percentile(v, 95) for v in self.by_kind.values())
            verdict = "met" if worst <= target_s else f"MISSED by {(worst - target_s) * 1000:.0f} ms"
            print(f"target p95 <= {target_s * 1000:.0f} ms: {verdict}")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p95 of 20 values is the 19th)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.4999)))
    return ordered[rank - 1]


# --- the small cluster -----------------------------------------------------------------------------------


def small_settings(brokers: int) -> ReferenceClusterSettings:
    return ReferenceClusterSettings(
        brokers=brokers,
        replica_lag_time_max_ms=2000,
        auto_leader_rebalance_enable=False,
        placement_seed=7,
        topics=[
            TopicSpec(name=RF1_TOPIC, partitions=10, replication_factor=1),
            TopicSpec(
                name=MIN_ISR_TOPIC,
                partitions=10,
                replication_factor=2,
                config={"min.insync.replicas": "2"},
            ),
        ],
    )


def rf1_brokers(zk: KazooClient, topic: str) -> list[int]:
    data, _ = zk.get(zkdata.topic_path(topic))
    assignment, _ = zkdata.decode_topic(zkdata.topic_path(topic), data)
    return sorted({a.replicas[0] for a in assignment.values()})


def controller(zk: KazooClient) -> int | None:
    try:
        data, _ = zk.get(zkdata.CONTROLLER_PATH)
    except Exception:
        return None
    return zkdata.decode_controller(zkdata.CONTROLLER_PATH, data)


def wait_until(check: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(step)
    raise BenchError(f"{what} not within {timeout:g} s")


def healthy(zk: KazooClient, topics: Sequence[str], brokers: int) -> bool:
    """Every broker registered and every partition of ``topics`` led, with its full ISR."""
    if len(zk.get_children(zkdata.BROKER_IDS_PATH)) != brokers:
        return False
    for topic in topics:
        data, _ = zk.get(zkdata.topic_path(topic))
        assignment, _ = zkdata.decode_topic(zkdata.topic_path(topic), data)
        for p, a in assignment.items():
            tp = TopicPartition(topic, p)
            raw, _ = zk.get(zkdata.partition_state_path(tp))
            state = zkdata.decode_partition_state(zkdata.partition_state_path(tp), raw)
            if not state.has_leader or len(state.isr) < len(a.replicas):
                return False
    return True


def min_isr_followers(zk: KazooClient, topic: str) -> list[int]:
    """The brokers that follow (in the ISR, not leading) a partition of ``topic`` now: stalling one of them
    shrinks an ISR. Leaderships move with every crash and restart (auto rebalance is off), so a broker that
    followed one before may lead all its partitions of the topic now."""
    followers: set[int] = set()
    for p in zk.get_children(zkdata.topic_partitions_path(topic)):
        tp = TopicPartition(topic, int(p))
        raw, _ = zk.get(zkdata.partition_state_path(tp))
        state = zkdata.decode_partition_state(zkdata.partition_state_path(tp), raw)
        followers.update(r for r in state.isr if r != state.leader)
    if not followers:
        raise BenchError(f"no broker follows a {topic} partition")
    return sorted(followers)


def offline_since(zk: KazooClient, topic: str) -> float | None:
    """When (ZooKeeper's mtime, epoch seconds) the first leaderless partition of ``topic`` was written."""
    times: list[float] = []
    for p in zk.get_children(zkdata.topic_partitions_path(topic)):
        tp = TopicPartition(topic, int(p))
        raw, stat = zk.get(zkdata.partition_state_path(tp))
        if not zkdata.decode_partition_state(zkdata.partition_state_path(tp), raw).has_leader:
            times.append(float(stat.mtime) / 1000.0)
    return min(times, default=None)


def after_write(zk: KazooClient, topic: str, received_at: float) -> str:
    """How long after the controller's write of the first offline state the webhook arrived: the service's
    own part of the latency (the rest is the cluster's: the broker's session ending, the election)."""
    written = offline_since(zk, topic)
    return "" if written is None else f", {(received_at - written) * 1000:.0f} ms after the offline state"


def first_shrink_below(zk: KazooClient, topic: str, minimum: int, timeout: float) -> float:
    """When (ZooKeeper's mtime, epoch seconds) the first partition of ``topic`` went below ``minimum`` ISR."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        times: list[float] = []
        for p in zk.get_children(zkdata.topic_partitions_path(topic)):
            tp = TopicPartition(topic, int(p))
            raw, stat = zk.get(zkdata.partition_state_path(tp))
            if len(zkdata.decode_partition_state(zkdata.partition_state_path(tp), raw).isr) < minimum:
                times.append(float(stat.mtime) / 1000.0)
        if times:
            return min(times)
        time.sleep(0.02)
    raise BenchError(f"no {topic} partition went below {minimum} in-sync replicas within {timeout:g} s")


def run_small(args: argparse.Namespace, workdir: Path, results: Results) -> None:
    brokers = 5
    with (
        EmbeddedZooKeeper() as zookeeper,
        ReferenceCluster(small_settings(brokers), zookeeper.connect_string) as cluster,
        WebhookReceiver(secret=SECRET) as receiver,
    ):
        zk = KazooClient(hosts=zookeeper.connect_string)
        zk.start(timeout=30)
        env = dict(args.env)
        if "log-dir" in args.kinds.split(","):  # the offline-log-dir gauges, as a deployment scrapes them
            urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
            env.setdefault("KAFKA_HEALTH_METRICS__URLS", _json_urls(urls))
        service = start_service(zookeeper.connect_string, workdir, env)
        try:
            subscribe(service, receiver)
            topics = [RF1_TOPIC, MIN_ISR_TOPIC]
            wait_until(lambda: healthy(zk, topics, brokers), 60, "a healthy cluster")
            rf1 = rf1_brokers(zk, RF1_TOPIC)
            kinds = args.kinds.split(",")
            for kind in kinds:
                print(f"{kind}: {args.faults} faults", flush=True)
                for i in range(args.faults):
                    broker = rf1[i % len(rf1)]
                    if kind == "crash":
                        fault_crash(cluster, zk, receiver, results, broker, args.timeout)
                    elif kind == "min-isr":
                        followers = min_isr_followers(zk, MIN_ISR_TOPIC)
                        stalled = followers[i % len(followers)]
                        fault_min_isr(cluster, zk, receiver, results, stalled, args.timeout)
                    elif kind == "controller":
                        fault_controller(cluster, zk, receiver, results, rf1, args.timeout)
                    elif kind == "log-dir":
                        fault_log_dir(cluster, receiver, results, i % brokers, i % 2, args.timeout)
                    else:
                        raise BenchError(f"unknown fault kind {kind!r}")
                    wait_until(lambda: healthy(zk, topics, brokers), 120, "the cluster healed")
            check_signatures(receiver)
        finally:
            service.process.stop()
            zk.stop()
            zk.close()


def opened(rule: int, subject: str | None = None) -> Callable[[Event], bool]:
    return lambda e: e.kind == "opened" and e.rule == rule and (subject is None or e.subject == subject)


def resolved(fingerprint: str) -> Callable[[Event], bool]:
    return lambda e: e.kind == "resolved" and e.fingerprint == fingerprint


def fault_crash(
    cluster: ReferenceCluster,
    zk: KazooClient,
    receiver: WebhookReceiver,
    results: Results,
    broker: int,
    timeout: float,
) -> None:
    seen = len(events(receiver))
    t0 = time.time()
    cluster.stop_broker(broker)
    event = wait_for(receiver, opened(1, f"topic:{RF1_TOPIC}"), timeout, f"broker {broker}'s crash", seen)
    note = f"(broker {broker}{after_write(zk, RF1_TOPIC, event.received_at)})"
    results.add("crash", event.received_at - t0, note)
    seen = len(events(receiver))
    cluster.start_broker(broker)
    wait_for(receiver, resolved(event.fingerprint), args_resolve_timeout(timeout), "rule 1's resolve", seen)


def fault_min_isr(
    cluster: ReferenceCluster,
    zk: KazooClient,
    receiver: WebhookReceiver,
    results: Results,
    broker: int,
    timeout: float,
) -> None:
    seen = len(events(receiver))
    cluster.stall_follower(broker)
    t0 = first_shrink_below(zk, MIN_ISR_TOPIC, 2, timeout + 10)
    event = wait_for(
        receiver, opened(3, f"topic:{MIN_ISR_TOPIC}"), timeout + 10, f"broker {broker}'s stall", seen
    )
    results.add("min-isr", event.received_at - t0, f"(broker {broker} stalled)")
    seen = len(events(receiver))
    cluster.resume_follower(broker)
    wait_for(receiver, resolved(event.fingerprint), args_resolve_timeout(timeout), "rule 3's resolve", seen)


def fault_controller(
    cluster: ReferenceCluster,
    zk: KazooClient,
    receiver: WebhookReceiver,
    results: Results,
    rf1: Sequence[int],
    timeout: float,
) -> None:
    active = controller(zk)
    if active is None:
        raise BenchError("no active controller to stop")
    seen = len(events(receiver))
    t0 = time.time()
    cluster.stop_broker(active)
    wait_until(lambda: controller(zk) not in (None, active), 30, "a new controller")
    failover = time.time() - t0
    if active not in rf1:
        raise BenchError(f"controller {active} holds no {RF1_TOPIC} partition: nothing would page")
    event = wait_for(receiver, opened(1, f"topic:{RF1_TOPIC}"), timeout, f"controller {active}'s loss", seen)
    written = after_write(zk, RF1_TOPIC, event.received_at)
    note = f"(broker {active}, failover {failover * 1000:.0f} ms{written})"
    results.add("controller", event.received_at - t0, note)
    seen = len(events(receiver))
    cluster.start_broker(active)
    wait_for(receiver, resolved(event.fingerprint), args_resolve_timeout(timeout), "rule 1's resolve", seen)


def fault_log_dir(
    cluster: ReferenceCluster,
    receiver: WebhookReceiver,
    results: Results,
    broker: int,
    log_dir: int,
    timeout: float,
) -> None:
    seen = len(events(receiver))
    t0 = time.time()
    lost = cluster.fail_log_dir(broker, log_dir)
    event = wait_for(receiver, opened(15, f"broker:{broker}"), timeout, f"broker {broker}'s log dir", seen)
    results.add(
        "log-dir", event.received_at - t0, f"(broker {broker} log dir {log_dir}, {len(lost)} replicas)"
    )
    seen = len(events(receiver))
    cluster.stop_broker(broker)  # a restart brings the log dir back (empty): the broker registers anew
    cluster.start_broker(broker)
    wait_for(receiver, resolved(event.fingerprint), args_resolve_timeout(timeout), "rule 15's resolve", seen)


RESOLVE_TIMEOUT_S = 600.0


def args_resolve_timeout(timeout: float) -> float:
    return max(RESOLVE_TIMEOUT_S, timeout)


def check_signatures(receiver: WebhookReceiver) -> None:
    bad = bad_signatures(receiver)
    if bad:
        raise BenchError(f"{len(bad)} webhook requests did not verify: {bad[0].signature_error}")


# --- the 200k-partition cluster --------------------------------------------------------------------------


@dataclass
class StandInController:
    """Writes what Kafka's controller writes when a broker's session ends, and when it comes back."""

    zk: KazooClient
    controller_epoch: int
    saved: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    registration: bytes = b""

    def partitions_of(self, broker: int) -> dict[TopicPartition, ReplicaAssignment]:
        found: dict[TopicPartition, ReplicaAssignment] = {}
        for topic in self.zk.get_children(zkdata.BROKER_TOPICS_PATH):
            data, _ = self.zk.get(zkdata.topic_path(topic))
            assignment, _ = zkdata.decode_topic(zkdata.topic_path(topic), data)
            for p, a in assignment.items():
                if broker in a.replicas:
                    found[TopicPartition(topic, p)] = a
        return found

    def states(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, LeaderAndIsr]:
        futures = [(tp, self.zk.get_async(zkdata.partition_state_path(tp))) for tp in tps]
        states = {}
        for tp, future in futures:
            raw, stat = future.get(timeout=30)
            path = zkdata.partition_state_path(tp)
            states[tp] = zkdata.decode_partition_state(path, raw, zk_version=stat.version)
        return states

    def fail(self, broker: int, assignments: dict[TopicPartition, ReplicaAssignment]) -> float:
        """The broker's registration goes, then the state writes; returns when the registration went."""
        current = self.states(list(assignments))
        self.saved = current
        self.registration, _ = self.zk.get(zkdata.broker_path(broker))
        live = {int(b) for b in self.zk.get_children(zkdata.BROKER_IDS_PATH)} - {broker}
        t0 = time.time()
        self.zk.delete(zkdata.broker_path(broker))
        writes = []
        for tp, state in current.items():
            replicas = assignments[tp].replicas
            new: LeaderAndIsr | None
            if state.leader == broker:
                elected = elect_offline(state, replicas, live, self.controller_epoch)
                new = (
                    elected[0]
                    if elected is not None
                    else remove_replica_from_isr(state, broker, self.controller_epoch)
                )
            else:
                new = remove_replica_from_isr(state, broker, self.controller_epoch)
            if new is not None:
                path = zkdata.partition_state_path(tp)
                writes.append(
                    self.zk.set_async(path, zkdata.encode_partition_state(new), version=state.zk_version)
                )
        for write in writes:
            write.get(timeout=60)
        return t0

    def recover(self, broker: int) -> None:
        """The broker registers again and its partitions get their leaders and ISRs back (as after it caught
        up and a preferred election ran)."""
        self.zk.create(zkdata.broker_path(broker), self.registration)
        current = self.states(list(self.saved))
        writes = []
        for tp, before in self.saved.items():
            now = current[tp]
            restored = replace(
                before, leader_epoch=now.leader_epoch + 1, controller_epoch=self.controller_epoch
            )
            writes.append(
                self.zk.set_async(
                    zkdata.partition_state_path(tp),
                    zkdata.encode_partition_state(restored),
                    version=now.zk_version,
                )
            )
        for write in writes:
            write.get(timeout=60)


def write_live_topic(zk: KazooClient, broker: int, partitions: int, controller_epoch: int) -> None:
    """An RF-1 topic on ``broker`` (what a topic creation would have written)."""
    assignment = {p: ReplicaAssignment((broker,)) for p in range(partitions)}
    zk.create(zkdata.topic_path(LIVE_TOPIC), zkdata.encode_topic(assignment, zkdata.new_kafka_uuid()))
    for p in range(partitions):
        state = LeaderAndIsr(broker, 0, (broker,), controller_epoch)
        zk.create(
            zkdata.partition_state_path(TopicPartition(LIVE_TOPIC, p)),
            zkdata.encode_partition_state(state),
            makepath=True,
        )


def run_bulk(args: argparse.Namespace, workdir: Path, results: Results) -> None:
    spec = BulkClusterSpec()
    with (
        EmbeddedZooKeeper(heap=args.heap) as zookeeper,
        WebhookReceiver(secret=SECRET) as receiver,
    ):
        connect = zookeeper.connect_string + BULK_CHROOT
        print("writing the bulk cluster (1,000 brokers, 200,000 partitions)...", flush=True)
        write_bulk_cluster(connect, spec)
        zk = KazooClient(hosts=connect)
        zk.start(timeout=30)
        broker = 7
        write_live_topic(zk, broker, 10, spec.controller_epoch)
        stand_in = StandInController(zk, spec.controller_epoch)
        assignments = stand_in.partitions_of(broker)
        print(f"broker {broker} holds {len(assignments)} replicas; starting serve...", flush=True)
        started = time.monotonic()
        service = start_service(connect, workdir, dict(args.env))
        print(f"serve ready in {time.monotonic() - started:.1f} s", flush=True)
        try:
            subscribe(service, receiver)
            print(f"broker failure: {args.faults} faults", flush=True)
            for _ in range(args.faults):
                seen = len(events(receiver))
                t0 = stand_in.fail(broker, assignments)
                event = wait_for(
                    receiver, opened(1, f"topic:{LIVE_TOPIC}"), args.timeout, "the failure", seen
                )
                results.add("broker-200k", event.received_at - t0, f"({len(assignments)} state writes)")
                seen = len(events(receiver))
                stand_in.recover(broker)
                wait_for(
                    receiver, resolved(event.fingerprint), args_resolve_timeout(args.timeout), "resolve", seen
                )
            check_signatures(receiver)
        finally:
            service.process.stop()
            zk.stop()
            zk.close()


# --- the load lane ---------------------------------------------------------------------------------------


def run_load(args: argparse.Namespace, workdir: Path, results: Results) -> None:
    brokers = 4
    settings = ReferenceClusterSettings(
        brokers=brokers,
        placement_seed=3,
        topics=[TopicSpec(name="traffic", partitions=24, replication_factor=2)],
    )
    with (
        EmbeddedZooKeeper() as zookeeper,
        ReferenceCluster(settings, zookeeper.connect_string) as cluster,
        WebhookReceiver(secret=SECRET) as receiver,
    ):
        metrics = {b["id"]: b["metrics_url"] for b in cluster.describe()["brokers"]}
        env = {**dict(args.env), "KAFKA_HEALTH_METRICS__URLS": _json_urls(metrics)}
        spool, store = workdir / "spool", workdir / "kafka-health.db"
        collect = start_process(
            "collect",
            [
                *kafka_health(),
                "collect",
                "--zookeeper",
                zookeeper.connect_string,
                "--sink",
                f"spool:{spool}",
                "--create-spool",
            ],
            workdir,
            env,
        )
        analytics = start_process(
            "analytics",
            [
                *kafka_health(),
                "analytics",
                "--source",
                f"spool:{spool}",
                "--create-spool",
                "--checkpoint",
                str(workdir / "checkpoint"),
                "--store-url",
                f"sqlite:///{store}",
            ],
            workdir,
            env,
        )
        service = start_service(zookeeper.connect_string, workdir, env)
        try:
            subscribe(service, receiver)
            print("waiting for the first load window (Spark's start and a first window)...", flush=True)
            with service.client() as client:
                wait_until(lambda: client.get("/api/v1/load").status_code == 200, 600, "a load window", 2.0)
            for i in range(args.repeats):
                skewed = i % brokers
                seen = len(events(receiver))
                t0 = time.time()
                cluster.skew({"brokers": {str(skewed): 4.0}})
                event = wait_for(
                    receiver,
                    lambda e: e.kind == "opened" and e.rule in (8, 9),
                    args.timeout,
                    "the skew",
                    seen,
                )
                results.add("load-skew", event.received_at - t0, f"(broker {skewed}, rule {event.rule})")
                seen = len(events(receiver))
                cluster.skew({"reset": True})
                wait_for(
                    receiver, resolved(event.fingerprint), args_resolve_timeout(args.timeout), "resolve", seen
                )
            check_signatures(receiver)
        finally:
            for process in (service.process, analytics, collect):
                process.stop()


def _json_urls(urls: dict[int, str]) -> str:
    import json

    return json.dumps({str(b): u for b, u in urls.items()})


# --- main ------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("lane", choices=["incident", "load"])
    parser.add_argument("--scale", choices=["small", "200k"], default="small")
    parser.add_argument("--faults", type=int, default=20, help="faults of each kind (20)")
    parser.add_argument(
        "--kinds",
        default="crash,min-isr,controller",
        help="small scale's fault kinds (crash, min-isr, controller, log-dir)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="load skews (3)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a fault may take to be announced (incident: 60, load: 600, as windows take minutes)",
    )
    parser.add_argument("--heap", default="3g", help="the embedded ZooKeeper's heap at 200k (3g)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        type=lambda text: tuple(text.split("=", 1)),
        metavar="NAME=VALUE",
        help="a setting for the kafka-health processes (repeatable), e.g. KAFKA_HEALTH_...=...",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, store)")
    args = parser.parse_args(argv)
    if args.timeout is None:
        args.timeout = 600.0 if args.lane == "load" else 60.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = Results()
    workdir = Path(tempfile.mkdtemp(prefix="kh-alert-latency-"))
    print(f"work directory: {workdir}", flush=True)
    try:
        if args.lane == "load":
            run_load(args, workdir, results)
        elif args.scale == "200k":
            run_bulk(args, workdir, results)
        else:
            run_small(args, workdir, results)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if results.by_kind:
            results.report(None)
        return 1
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    results.report(TARGETS_S[args.scale] if args.lane == "incident" else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
