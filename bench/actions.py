"""Benchmark: on-call operations, end to end and at scale.

    .venv/bin/python -m bench.actions cancel [--repeats 5]
    .venv/bin/python -m bench.actions resume [--signal kill|term] [--repeats 3]
    .venv/bin/python -m bench.actions stall [--stall-after 5] [--repeats 3]
    .venv/bin/python -m bench.actions safe-to-stop [--brokers 1000 --partitions 200000] [--repeats 5]

``cancel``, ``resume`` and ``stall`` run an embedded ZooKeeper, the reference cluster (4 brokers, a topic
``moves`` of 3 partitions, RF 2, 3 MiB logs) and ``kafka-health serve`` as a child process on a fresh
SQLite store; each round reassigns the three partitions (one new replica each, ``max_concurrent_moves``
1: three batches) under a 1 MiB/s throttle through the API, then:

* ``cancel``: cancels once batch 1 is written; times the cancel call to the action's CANCELLED and to the
  last throttle key gone from ZooKeeper.
* ``resume``: stops ``serve`` (SIGKILL or SIGTERM) once batch 1 is written, starts a new one on the same
  store and times: the old process's exit, the new one's start until ready, until it adopted the action
  (its leadership waits out the killed session: ``service.webhooks`` election), and until SUCCEEDED;
  checks that no throttle is left.
* ``stall``: stops the destination broker of a one-batch reassignment once it is written and times until
  the action is STALLED (``KAFKA_HEALTH_SERVICE__ACTIONS__STALL_AFTER_S``).

``safe-to-stop`` builds a bulk cluster's snapshot in memory (RF 3, some partitions under-replicated, as the
bulk writer plans them) and times the cluster-wide answer (every broker, one pass) and one broker's.

Prints every figure and p50 / max per measure; exit status 1 when a round fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from kazoo.client import KazooClient

from app.embedded.reference_cluster.bulk import BulkClusterSpec
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TopicSpec, TrafficSettings
from app.embedded.zookeeper import EmbeddedZooKeeper
from bench.alert_latency import BenchError, Service, start_service
from bench.service import build_snapshot
from collectors.kafka import zkdata
from collectors.kafka.admin import read_entity_config
from collectors.kafka.throttles import BROKER_THROTTLE_KEYS, TOPIC_THROTTLE_KEYS
from collectors.safe_to_stop import assess_safe_to_stop, safe_to_stop
from collectors.zookeeper.collector import scan

TOPIC = "moves"
THROTTLE = 1024 * 1024
TERMINAL = ("SUCCEEDED", "PARTIAL", "FAILED", "CANCELLED")


class Figures:
    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add(self, name: str, seconds: float) -> None:
        self.values.setdefault(name, []).append(seconds)
        print(f"  {name}: {seconds * 1000:.0f} ms", flush=True)

    def report(self) -> None:
        print(f"\n{'measure':<44} {'n':>3} {'p50':>9} {'max':>9}")
        for name, values in self.values.items():
            print(
                f"{name:<44} {len(values):>3} {statistics.median(values) * 1000:>7.0f}ms "
                f"{max(values) * 1000:>7.0f}ms"
            )


def wait(check: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(step)
    raise BenchError(f"timed out after {timeout:g} s waiting for {what}")


def cluster_settings() -> ReferenceClusterSettings:
    return ReferenceClusterSettings(
        brokers=4,
        replica_lag_time_max_ms=1500,
        auto_leader_rebalance_enable=False,
        placement_seed=7,
        topics=[TopicSpec(name=TOPIC, partitions=3, replication_factor=2)],
        traffic=TrafficSettings(initial_log_bytes=3 * 1024 * 1024, produce_bytes_per_sec=16 * 1024),
    )


def moves(zookeeper: str) -> list[dict[str, Any]]:
    """Each partition keeps its first replica and gets a broker it does not have."""
    snapshot = scan(zookeeper)
    brokers = sorted(snapshot.brokers)
    found = []
    for tp, info in sorted(snapshot.partitions.items()):
        if tp.topic == TOPIC:
            replicas = info.assignment.replicas
            new = next(b for b in brokers if b not in replicas)
            found.append({"topic": TOPIC, "partition": tp.partition, "replicas": [replicas[0], new]})
    return found


def reassign(service: Service, items: list[dict[str, Any]]) -> str:
    body = {
        "partitions": items,
        "max_concurrent_moves": 1,
        "throttle_bytes_per_sec": THROTTLE,
        "dry_run": False,
    }
    with service.client() as client:
        response = client.post("/api/v1/actions/reassignments", json=body)
    if response.status_code != 202:
        raise BenchError(f"the reassignment was refused: {response.status_code} {response.text}")
    action_id: str = response.json()["action_id"]
    return action_id


def action(service: Service, action_id: str) -> dict[str, Any]:
    with service.client() as client:
        body: dict[str, Any] = client.get(f"/api/v1/actions/{action_id}").json()
    return body


def written(service: Service, action_id: str) -> bool:
    step: object = action(service, action_id)["progress"].get("step")
    return step == {"done": 0, "state": "written"}


def throttled(zk: KazooClient) -> bool:
    for entity_type, keys in (("brokers", BROKER_THROTTLE_KEYS), ("topics", TOPIC_THROTTLE_KEYS)):
        path = f"{zkdata.CONFIG_PATH}/{entity_type}"
        for entity in zk.get_children(path) if zk.exists(path) else []:
            if any(k in keys for k in read_entity_config(zk, entity_type, entity)):
                return True
    return False


def back_to_original(
    zk: KazooClient, service: Service, zookeeper: str, original: dict[int, list[int]]
) -> None:
    """Undo the round (a rollback through the API), so that the next round moves the same partitions."""
    wait(lambda: not zk.exists(zkdata.REASSIGN_PARTITIONS_PATH), 120, "the controller idle")
    snapshot = scan(zookeeper)
    now = {
        tp.partition: list(i.assignment.replicas)
        for tp, i in snapshot.partitions.items()
        if tp.topic == TOPIC
    }
    if now == original:
        return
    items = [{"topic": TOPIC, "partition": p, "replicas": r} for p, r in original.items() if now.get(p) != r]
    with service.client() as client:
        body = {"partitions": items, "dry_run": False, "max_concurrent_moves": 10}
        response = client.post("/api/v1/actions/reassignments", json=body)
    if response.status_code != 202:
        raise BenchError(f"could not move the partitions back: {response.text}")
    back = response.json()["action_id"]
    wait(lambda: action(service, back)["state"] in TERMINAL, 120, "the partitions back")


def run_rounds(args: argparse.Namespace, workdir: Path, figures: Figures) -> None:
    env = {"KAFKA_HEALTH_SERVICE__ACTIONS__STALL_AFTER_S": str(args.stall_after)}
    with (
        EmbeddedZooKeeper() as zookeeper,
        ReferenceCluster(cluster_settings(), zookeeper.connect_string) as cluster,
    ):
        connect = zookeeper.connect_string
        zk = KazooClient(hosts=connect)
        zk.start(timeout=30)
        service = start_service(connect, workdir, env)
        try:
            snapshot = scan(connect)
            original = {
                tp.partition: list(i.assignment.replicas)
                for tp, i in snapshot.partitions.items()
                if tp.topic == TOPIC
            }
            for n in range(args.repeats):
                print(f"round {n + 1}", flush=True)
                if args.kind == "cancel":
                    cancel_round(service, zk, connect, figures)
                elif args.kind == "resume":
                    service = resume_round(service, zk, connect, workdir, env, args.signal, figures)
                else:
                    stall_round(service, cluster, connect, figures)
                back_to_original(zk, service, connect, original)
        finally:
            service.process.stop()
            zk.stop()
            zk.close()


def cancel_round(service: Service, zk: KazooClient, connect: str, figures: Figures) -> None:
    action_id = reassign(service, moves(connect))
    wait(lambda: written(service, action_id), 60, "batch 1 written")
    started = time.monotonic()
    with service.client() as client:
        if client.post(f"/api/v1/actions/{action_id}/cancel").status_code != 200:
            raise BenchError("the cancel was refused")
    figures.add("cancel: call answered", time.monotonic() - started)
    state = wait(lambda: (s := action(service, action_id)["state"]) in TERMINAL and s, 60, "CANCELLED")
    figures.add("cancel: -> CANCELLED", time.monotonic() - started)
    wait(lambda: not throttled(zk), 60, "no throttle left")
    figures.add("cancel: -> no throttle key in ZooKeeper", time.monotonic() - started)
    if state != "CANCELLED":
        raise BenchError(f"the action ended {state}")
    step = action(service, action_id)["progress"]["step"]
    if step["done"] != 0:
        raise BenchError(f"a batch was written after the cancel: {step}")


def resume_round(
    service: Service,
    zk: KazooClient,
    connect: str,
    workdir: Path,
    env: dict[str, str],
    how: str,
    figures: Figures,
) -> Service:
    action_id = reassign(service, moves(connect))
    wait(lambda: written(service, action_id), 60, "batch 1 written")
    started = time.monotonic()
    if how == "kill":
        service.process.popen.kill()
    else:
        service.process.popen.terminate()
    service.process.popen.wait(60)
    figures.add(f"{how}: the old serve exited", time.monotonic() - started)
    if not throttled(zk):
        raise BenchError("no throttle left by the stopped service: nothing to test")
    restarted = time.monotonic()
    service = start_service(connect, workdir, env)
    figures.add(f"{how}: new serve ready", time.monotonic() - restarted)
    wait(lambda: action(service, action_id)["progress"].get("adoptions", 0) >= 1, 120, "adopted")
    figures.add(f"{how}: adopted (after the restart)", time.monotonic() - restarted)
    state = wait(lambda: (s := action(service, action_id)["state"]) in TERMINAL and s, 120, "the end")
    figures.add(f"{how}: SUCCEEDED (after the restart)", time.monotonic() - restarted)
    if state != "SUCCEEDED" or throttled(zk):
        raise BenchError(f"the adopted action ended {state}, throttles left: {throttled(zk)}")
    return service


def stall_round(service: Service, cluster: ReferenceCluster, connect: str, figures: Figures) -> None:
    items = moves(connect)[:1]
    destination = items[0]["replicas"][1]
    action_id = reassign(service, items)
    wait(lambda: written(service, action_id), 60, "batch 1 written")
    cluster.stop_broker(destination)
    started = time.monotonic()
    wait(lambda: action(service, action_id)["state"] == "STALLED", 120, "STALLED")
    figures.add("destination down -> STALLED", time.monotonic() - started)
    with service.client() as client:
        client.post(f"/api/v1/actions/{action_id}/cancel")
    wait(lambda: action(service, action_id)["state"] in TERMINAL, 60, "cancelled")
    cluster.start_broker(destination)
    wait(lambda: destination in scan(connect).brokers, 60, "the broker back")


def run_safe_to_stop(args: argparse.Namespace, figures: Figures) -> None:
    spec = BulkClusterSpec(
        brokers=args.brokers,
        topics=args.partitions // 100,
        partitions_per_topic=100,
        replication_factor=3,
    )
    built = time.monotonic()
    snapshot = build_snapshot(spec)
    print(
        f"snapshot of {len(snapshot.partitions):,} partitions, {len(snapshot.brokers):,} brokers built in "
        f"{time.monotonic() - built:.1f} s",
        flush=True,
    )
    broker = min(snapshot.brokers)
    for _ in range(args.repeats):
        started = time.monotonic()
        answers = assess_safe_to_stop(snapshot)
        figures.add("safe-to-stop: every broker (one pass)", time.monotonic() - started)
        started = time.monotonic()
        safe_to_stop(snapshot, broker)
        figures.add("safe-to-stop: one broker", time.monotonic() - started)
    unsafe = sum(1 for a in answers.brokers.values() if not a.safe)
    print(f"{unsafe} of {len(answers.brokers)} brokers unsafe to stop now", flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", choices=("cancel", "resume", "stall", "safe-to-stop"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--signal", choices=("kill", "term"), default="kill")
    parser.add_argument("--stall-after", type=float, default=5.0, help="stall_after_s of the service (s)")
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=200_000)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.brokers < 3 or args.partitions < 100:
        parser.error("--repeats >= 1, --brokers >= 3, --partitions >= 100")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    figures = Figures()
    workdir = Path(tempfile.mkdtemp(prefix="kh-actions-"))
    try:
        if args.kind == "safe-to-stop":
            run_safe_to_stop(args, figures)
        else:
            run_rounds(args, workdir, figures)
    except (BenchError, httpx.HTTPError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        figures.report()
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    figures.report()
    print(json.dumps({k: [round(v, 4) for v in vs] for k, vs in figures.values.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
