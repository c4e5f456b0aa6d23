"""Runbook actions that survive the service, end to end: the reference cluster, real ``kafka-health serve``
processes on one SQLite store, requests over HTTP, and ZooKeeper read back with a kazoo session of the
test's own.

- a throttled reassignment of three batches: ``serve`` SIGKILLed (a crash) or SIGTERMed (a rolling restart
  of the service) while batch 1 is in flight, started again: the new process adopts the action, writes
  batches 2 and 3, ends SUCCEEDED at the target assignment, and no throttle config is left anywhere;
- a cancel during batch 1 of 3: no further batch is written, CANCELLED, no throttle left;
- a destination broker down: the action reports STALLED within the set time, with the reason;
- a rollback returns the partitions to their original replicas;
- a chunked election: ``serve`` SIGKILLed between chunks, and the next start writes each remaining chunk
  once;
- progress (bytes from the brokers' log sizes) and the ETA move as a reassignment runs;
- an adaptive throttle rises and falls with the brokers' load, within its bounds;
- a throttle below the produce rate: the copy falls behind, and the action goes STALLED saying so with the
  figures (an adaptive throttle is raised first, and STALLED only at its maximum); ``progress.throttles``
  says ``removed`` once the action removed them (completed, cancelled, cancelled while STALLED).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.bulk import BulkClusterSpec, write_bulk_cluster
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec, TrafficSettings
from collectors.kafka import zkdata
from collectors.kafka.admin import read_entity_config
from collectors.kafka.model import TopicPartition
from collectors.kafka.throttles import BROKER_THROTTLE_KEYS, TOPIC_THROTTLE_KEYS
from collectors.zookeeper.collector import scan
from tests.support.controller_stand_in import ControllerStandIn
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.serve_process import START_TIMEOUT_S, Serve

pytestmark = pytest.mark.integration

TOPIC = "moves"
THROTTLE = 1024 * 1024
"""Bytes/s: each partition's 3 MiB log takes about 3 s to copy, so batches are in flight long enough to
interrupt, and the test stays short."""
REASSIGNMENTS = "/api/v1/actions/reassignments"


@pytest.fixture
def cluster(make_cluster: ClusterFactory) -> ReferenceCluster:
    return make_cluster(
        brokers=4,
        topics=[TopicSpec(name=TOPIC, partitions=3, replication_factor=2)],
        traffic=TrafficSettings(initial_log_bytes=3 * 1024 * 1024, produce_bytes_per_sec=16 * 1024),
    )


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


FAST = {
    "KAFKA_HEALTH_SERVICE__ACTIONS__PROGRESS_INTERVAL_S": "0.5",
    # a killed leader's leadership goes with its session: ZooKeeper's shortest (2 ticks) keeps tests short
    "KAFKA_HEALTH_SERVICE__WEBHOOKS__SESSION_TIMEOUT_S": "4",
}


def start(serves: Callable[..., Serve], zk_connect: str, store_url: str, **env: str) -> Serve:
    serve = serves(zk_connect, store_url, **(FAST | env))
    wait_for(serve.ready, timeout=START_TIMEOUT_S, message="serve ready")
    return serve


def targets(zk_connect: str, exclude: int | None = None) -> list[dict[str, Any]]:
    """Each partition of the topic keeps its first replica and gets, as its second, a broker it does not
    have (one new replica per partition: with ``max_concurrent_moves`` 1, three batches)."""
    snapshot = scan(zk_connect)
    brokers = sorted(b for b in snapshot.brokers if b != exclude)
    moves = []
    for tp, info in sorted(snapshot.partitions.items()):
        if tp.topic != TOPIC:
            continue
        replicas = info.assignment.replicas
        new = next(b for b in brokers if b not in replicas)
        moves.append({"topic": TOPIC, "partition": tp.partition, "replicas": [replicas[0], new]})
    return moves


def reassign(serve: Serve, moves: list[dict[str, Any]], **options: Any) -> str:
    body = {"partitions": moves, "max_concurrent_moves": 1, "dry_run": False, **options}
    accepted = serve.post(REASSIGNMENTS, body)
    assert accepted.status_code == 202, accepted.text
    action_id: str = accepted.json()["action_id"]
    return action_id


def action(serve: Serve, action_id: str) -> dict[str, Any]:
    response = serve.get(f"/api/v1/actions/{action_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def step(serve: Serve, action_id: str) -> dict[str, Any] | None:
    step: dict[str, Any] | None = action(serve, action_id)["progress"].get("step")
    return step


def finished(serve: Serve, action_id: str, timeout: float = 90) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        body = action(serve, action_id)
        return body if body["state"] in ("SUCCEEDED", "PARTIAL", "FAILED", "CANCELLED") else None

    return wait_for(ended, timeout=timeout, message=f"action {action_id} finished")


def throttles_left(zk: KazooClient) -> dict[str, dict[str, str]]:
    """Every throttle key in any broker or topic config."""
    found = {}
    for entity_type, keys in (("brokers", BROKER_THROTTLE_KEYS), ("topics", TOPIC_THROTTLE_KEYS)):
        path = f"{zkdata.CONFIG_PATH}/{entity_type}"
        for entity in zk.get_children(path) if zk.exists(path) else []:
            config = read_entity_config(zk, entity_type, entity)
            kept = {k: v for k, v in config.items() if k in keys}
            if kept:
                found[f"{entity_type}/{entity}"] = kept
    return found


def assignment(zk_connect: str) -> dict[int, list[int]]:
    snapshot = scan(zk_connect)
    return {
        tp.partition: list(info.assignment.replicas)
        for tp, info in sorted(snapshot.partitions.items())
        if tp.topic == TOPIC
    }


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_serve_stopped_mid_reassignment_the_next_start_completes_it_and_removes_the_throttles(
    how: str,
    cluster: ReferenceCluster,
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    first = start(serves, zk_connect, store_url)
    moves = targets(zk_connect)
    action_id = reassign(first, moves, throttle_bytes_per_sec=THROTTLE)
    wait_for(
        lambda: step(first, action_id) == {"done": 0, "state": "written"},
        timeout=30,
        message="batch 1 written",
    )
    stopped_at = time.monotonic()
    if how == "SIGKILL":
        first.kill()
    else:
        assert first.terminate() == 0, first.output()
    stop_s = time.monotonic() - stopped_at
    assert throttles_left(zk), "the stopped service left its throttles (for the next one to remove)"

    second = start(serves, zk_connect, store_url)
    done = finished(second, action_id)
    assert done["state"] == "SUCCEEDED", json.dumps(done)[:3000]
    assert done["progress"]["adoptions"] >= 1
    assert done["result"]["throttles_removed"] is True
    assert assignment(zk_connect) == {m["partition"]: m["replicas"] for m in moves}
    assert throttles_left(zk) == {}
    print(f"\n{how}: serve stopped in {stop_s:.2f} s; the next start finished the action")


def test_a_cancel_during_batch_1_of_3_writes_no_further_batch_and_leaves_no_throttle(
    cluster: ReferenceCluster,
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    serve = start(serves, zk_connect, store_url)
    before = assignment(zk_connect)
    moves = targets(zk_connect)
    action_id = reassign(serve, moves, throttle_bytes_per_sec=THROTTLE)
    wait_for(lambda: step(serve, action_id) == {"done": 0, "state": "written"}, timeout=30, message="batch 1")
    cancelled = serve.post(f"/api/v1/actions/{action_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["cancel_requested"] is True
    done = finished(serve, action_id, timeout=30)
    assert done["state"] == "CANCELLED", done
    assert done["progress"]["step"]["done"] == 0, "no batch after the first"
    assert done["result"]["throttles_removed"] is True
    assert done["progress"]["throttles"] == "removed"
    assert throttles_left(zk) == {}
    time.sleep(2 * 0.5)  # two progress intervals: an executor still running would write batch 2 by now
    now = assignment(zk_connect)
    for partition in (moves[1]["partition"], moves[2]["partition"]):
        assert now[partition] == before[partition], f"partition {partition} was moved after the cancel"
    assert not zk.exists(zkdata.REASSIGN_PARTITIONS_PATH) or now[moves[0]["partition"]] != before[0]
    audit = serve.get("/api/v1/audit").json()
    assert any(e["action"] == "cancel" and e["outcome"] == "accepted" for e in audit)


def test_a_destination_broker_down_makes_the_reassignment_stalled_after_the_set_time(
    cluster: ReferenceCluster,
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    stall_after_s = 3.0
    serve = start(
        serves, zk_connect, store_url, KAFKA_HEALTH_SERVICE__ACTIONS__STALL_AFTER_S=str(stall_after_s)
    )
    moves = targets(zk_connect)
    destination = moves[0]["replicas"][1]
    action_id = reassign(serve, moves[:1], throttle_bytes_per_sec=THROTTLE // 8)
    wait_for(lambda: step(serve, action_id) == {"done": 0, "state": "written"}, timeout=30, message="written")
    cluster.stop_broker(destination)

    def is_stalled() -> dict[str, Any] | None:
        body = action(serve, action_id)
        return body if body["state"] == "STALLED" else None

    stalled = wait_for(is_stalled, timeout=60, message="STALLED")
    reason = stalled["progress"]["stalled"]["reason"]
    assert f"broker(s) {destination}" in reason, reason
    # not before its time, as the executor counts it (how soon after: bench/actions.py stall): the broker
    # down for stall_after_s, unless the batch had made no progress for that long already (its clock may
    # start before the stop, and then both reasons are given)
    down_for = re.search(r"not registered \(down\) for (\d+) s", reason)
    assert down_for, reason
    assert int(down_for[1]) >= stall_after_s or "no progress for" in reason, reason
    metrics = serve.get("/metrics").text
    stalled_series = (
        rf'kafka_health_action_stalled{{action="{action_id}",cluster="[^"]+",kind="reassignment"}} 1.0'
    )
    assert re.search(stalled_series, metrics), metrics

    def paged() -> dict[str, Any] | None:
        alerts: list[dict[str, Any]] = serve.get("/api/v1/alerts", rule=12).json()["items"]
        return next((a for a in alerts if a["subject"] == f"action:{action_id}"), None)

    alert = wait_for(paged, timeout=60, message="rule 12 opened by the incident lane")
    assert alert["severity"] == "warning"
    assert "down" in alert["summary"]
    assert serve.post(f"/api/v1/actions/{action_id}/cancel").status_code == 200
    done = finished(serve, action_id, timeout=30)
    assert done["state"] == "CANCELLED"
    assert throttles_left(zk) == {}
    cluster.start_broker(destination)
    print(f"\ndestination broker down -> STALLED: {reason} (stall_after_s {stall_after_s:g})")


def test_a_rollback_returns_the_partitions_to_their_original_replicas(
    cluster: ReferenceCluster,
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    serve = start(serves, zk_connect, store_url)
    original = assignment(zk_connect)
    moves = targets(zk_connect)
    action_id = reassign(serve, moves, max_concurrent_moves=10)
    done = finished(serve, action_id)
    assert done["state"] == "SUCCEEDED", json.dumps(done)[:3000]
    assert assignment(zk_connect) != original

    dry = serve.post(f"/api/v1/actions/{action_id}/rollback")
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["dry_run"] is True
    assert plan["action_id"] is None
    assert plan["rollback_of"] == action_id
    planned = {i["partition"]: i["replicas"] for batch in plan["batches"] for i in batch}
    assert planned == original

    run = serve.post(f"/api/v1/actions/{action_id}/rollback", {"dry_run": False})
    assert run.status_code == 202, run.text
    rollback_id = run.json()["action_id"]
    done = finished(serve, rollback_id)
    assert done["state"] == "SUCCEEDED", json.dumps(done)[:3000]
    assert done["rollback_of"] == action_id
    assert assignment(zk_connect) == original
    again = serve.post(f"/api/v1/actions/{action_id}/rollback")
    assert again.status_code == 422
    assert "nothing to roll back" in again.json()["detail"]
    assert serve.post("/api/v1/actions/nope/rollback").status_code == 404


def test_serve_killed_mid_election_the_next_start_writes_the_remaining_chunks_once(
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    """A chunked election over a bulk cluster (no simulated brokers: the controller's part is a stand-in
    the test holds between chunks): ``serve`` is SIGKILLed with chunk 2 written and not yet taken; the
    next start waits for chunk 2 (it does not write it again) and writes the rest."""
    spec = BulkClusterSpec(
        brokers=5, topics=10, partitions_per_topic=30, replication_factor=3, non_preferred_fraction=1.0
    )
    write_bulk_cluster(zk_connect, spec)
    controller = ControllerStandIn(zk, zk_connect, held=True)
    controller.start()
    try:
        first = start(serves, zk_connect, store_url)
        accepted = first.post(
            "/api/v1/actions/preferred-replica-election",
            {"scope": "all", "dry_run": False, "budget_bytes": 1024},
        )
        assert accepted.status_code == 202, accepted.text
        action_id = accepted.json()["action_id"]
        chunks = accepted.json()["chunks"]
        assert chunks >= 5
        controller.allow(1)
        wait_for(
            lambda: step(first, action_id) == {"done": 1, "state": "written"}, timeout=30, message="chunk 2"
        )
        first.kill()
        assert zk.exists(zkdata.PREFERRED_REPLICA_ELECTION_PATH), "chunk 2 is written, not taken"

        second = start(serves, zk_connect, store_url)
        controller.release()
        done = finished(second, action_id, timeout=120)
    finally:
        controller.stop()
    assert done["state"] == "SUCCEEDED", json.dumps(done)[:3000]
    assert done["result"]["elected"] == spec.partitions
    assert len(controller.payloads) == chunks, "every chunk written once"
    elected = [tp for p in controller.payloads for tp in zkdata.decode_partition_list("/x", p)]
    assert len(elected) == len(set(elected)) == spec.partitions
    assert controller.failures == []


def metrics_env(cluster: ReferenceCluster, interval_s: float = 0.5) -> dict[str, str]:
    """``serve``'s settings to scrape the reference cluster's brokers every ``interval_s``."""
    urls = {str(b): url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    return {
        "KAFKA_HEALTH_METRICS__URLS": json.dumps(urls),
        "KAFKA_HEALTH_SERVICE__VIEW__METRICS_INTERVAL_S": str(interval_s),
    }


def test_the_dry_run_warns_of_a_throttle_below_the_produce_rate_and_progress_and_eta_move(
    cluster: ReferenceCluster,
    zk_connect: str,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    serve = start(serves, zk_connect, store_url, **metrics_env(cluster))
    moves = targets(zk_connect)[:1]
    too_low = serve.post(REASSIGNMENTS, {"partitions": moves, "throttle_bytes_per_sec": 1000})
    assert too_low.status_code == 200, too_low.text
    (warning,) = too_low.json()["warnings"][:1]
    assert "would never catch up" in warning, too_low.json()["warnings"]  # produced at 16 KiB/s
    fine = serve.post(REASSIGNMENTS, {"partitions": moves, "throttle_bytes_per_sec": THROTTLE})
    assert fine.json()["warnings"] == []
    action_id = reassign(serve, moves, throttle_bytes_per_sec=THROTTLE // 2)
    seen: list[tuple[float, float | None]] = []
    exported: list[str] = []

    def observe() -> dict[str, Any] | None:
        body = action(serve, action_id)
        progress = body["progress"]
        if progress.get("bytes_remaining") is not None:
            point = (float(progress["bytes_remaining"]), progress.get("eta_s"))
            if not seen or seen[-1] != point:
                seen.append(point)
            if progress.get("eta_s") and body["state"] == "RUNNING" and not exported:
                text = serve.get("/metrics").text
                exported.extend(
                    name
                    for name in ("kafka_health_action_bytes_remaining", "kafka_health_action_eta_seconds")
                    if re.search(rf'{name}{{action="{action_id}",[^}}]*}} [0-9.e+]+', text)
                )
        return body if body["state"] not in ("PENDING", "RUNNING", "STALLED") else None

    done = wait_for(observe, timeout=60, message="the reassignment done")
    assert done["state"] == "SUCCEEDED", json.dumps(done)[:3000]
    remaining = [r for r, _ in seen]
    assert len(remaining) >= 3, seen
    assert remaining == sorted(remaining, reverse=True), f"bytes remaining only go down: {seen}"
    assert remaining[0] > 1024 * 1024, seen
    assert remaining[-1] < remaining[0] / 2, seen
    etas = [eta for _, eta in seen if eta is not None]
    assert etas, f"an ETA once the rate is measured: {seen}"
    assert done["progress"]["bytes_source"] == "log sizes"
    assert exported == ["kafka_health_action_bytes_remaining", "kafka_health_action_eta_seconds"], exported
    assert done["progress"]["partitions_remaining"] == 0
    assert done["progress"]["throttles"] == "removed"
    print(f"\nprogress observed {len(seen)} times: {[(round(r / 1024), e and round(e, 1)) for r, e in seen]}")


def test_the_adaptive_throttle_rises_and_falls_with_the_load_within_its_bounds(
    make_cluster: ClusterFactory,
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    """The executor's adaptive throttle through ``serve``: it climbs while the brokers are idle, until its
    own copy makes them busy; producers loading the destination take it to the floor; it climbs again once
    they stop. Each change is audited, and it never leaves its bounds."""
    mib = 1024 * 1024
    cluster = make_cluster(
        topics=[TopicSpec.parse("big:1:1"), TopicSpec.parse("orders:6:1")],
        traffic={
            "initial_log_bytes": 64 * 1024 * mib,  # the copy outlasts the test at any rate
            "produce_bytes_per_sec": mib,
            "signal_smoothing_s": 0.5,
        },
    )
    snapshot = scan(zk_connect)
    source = snapshot.partitions[TopicPartition("big", 0)].leader
    destination = next(b for b in sorted(cluster.brokers) if b != source)
    serve = start(serves, zk_connect, store_url, **metrics_env(cluster, 0.25))
    bounds = {"min_bytes_per_s": 4 * mib, "max_bytes_per_s": 120 * mib}
    throttle = {"mode": "adaptive", **bounds, "interval_s": 1.0}
    moves = [{"topic": "big", "partition": 0, "replicas": [source, destination]}]
    action_id = reassign(serve, moves, throttle=throttle, allow_replication_factor_change=True)

    def history() -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = action(serve, action_id)["progress"].get("throttle_history", [])
        return entries

    def lowered_after(count: int) -> list[dict[str, Any]] | None:
        entries = history()
        return entries if any(e["to"] < e["from"] for e in entries[count:]) else None

    climbed = wait_for(lambda: lowered_after(0), timeout=60, message="raised, then lowered by its own load")
    peak = max(e["to"] for e in climbed)
    assert peak >= 40 * mib, climbed
    assert climbed[0]["to"] > climbed[0]["from"], "it starts by raising"

    cluster.skew({"brokers": {str(destination): 20}})
    wait_for(
        lambda: history()[-1]["to"] == bounds["min_bytes_per_s"] or None, timeout=30, message="the floor"
    )
    floored = len(history())
    cluster.skew({"reset": True})
    recovered = wait_for(
        lambda: (h := history())[-1]["to"] > bounds["min_bytes_per_s"] and h,
        timeout=30,
        message="raised again",
    )
    assert len(recovered) > floored
    for entry in recovered:
        assert bounds["min_bytes_per_s"] <= entry["to"] <= bounds["max_bytes_per_s"], entry
    audited = [e for e in serve.get("/api/v1/audit", limit=1000).json() if e["action"] == "adaptive-throttle"]
    assert len(audited) == len(history())
    assert serve.post(f"/api/v1/actions/{action_id}/cancel").status_code == 200
    assert finished(serve, action_id, timeout=30)["state"] == "CANCELLED"
    assert throttles_left(zk) == {}
    print(
        f"\nadaptive throttle: peak {peak / mib:.0f} MiB/s, floor under load, {len(recovered)} changes, "
        f"up again to {recovered[-1]['to'] / mib:.0f} MiB/s after the load stopped"
    )


KIB = 1024


def stalled_behind(serve: Serve, action_id: str) -> dict[str, Any] | None:
    body = action(serve, action_id)
    stalled = body["progress"].get("stalled") or {}
    return body if body["state"] == "STALLED" and "falling behind" in stalled.get("reason", "") else None


def test_a_throttle_below_the_produce_rate_falls_behind_stalled_with_the_figures_then_removed(
    cluster: ReferenceCluster,
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    """Produced at 256 KiB/s, copied at 64 KiB/s: the bytes remaining grow, and after ``stall_after_s`` of
    that the action is STALLED, falling behind (though bytes are copied all along: not 'no progress')."""
    stall_after_s = 3.0
    serve = start(
        serves,
        zk_connect,
        store_url,
        KAFKA_HEALTH_SERVICE__ACTIONS__STALL_AFTER_S=str(stall_after_s),
        **metrics_env(cluster),
    )
    cluster.skew({"topics": {TOPIC: 16}})  # 16 KiB/s x 16 per partition
    action_id = reassign(serve, targets(zk_connect)[:1], throttle_bytes_per_sec=64 * KIB)
    assert action(serve, action_id)["progress"].get("throttles") in (None, "set")
    stalled = wait_for(
        lambda: stalled_behind(serve, action_id), timeout=90, message="STALLED, falling behind"
    )
    reason = stalled["progress"]["stalled"]["reason"]
    assert re.search(r"falling behind: bytes remaining grew from [0-9.]+ MiB to [0-9.]+ MiB in \d+ s", reason)
    assert re.search(r"\(\+[0-9.]+ KiB/s\) at a throttle of 64\.0 KiB/s", reason), reason
    assert "no progress" not in reason, reason
    assert stalled["progress"]["throttles"] == "set"
    assert throttles_left(zk), "STALLED, the action still runs with its throttles"
    assert serve.post(f"/api/v1/actions/{action_id}/cancel").status_code == 200
    done = finished(serve, action_id, timeout=60)
    assert done["state"] == "CANCELLED", json.dumps(done)[:3000]
    assert done["progress"]["throttles"] == "removed"
    assert done["progress"]["stalled"] is None
    assert throttles_left(zk) == {}
    cluster.skew({"reset": True})
    print(f"\n{reason}")


def test_an_adaptive_throttle_falling_behind_is_raised_first_and_stalled_only_at_its_maximum(
    cluster: ReferenceCluster,
    zk_connect: str,
    zk: KazooClient,
    store_url: str,
    serves: Callable[..., Serve],
) -> None:
    stall_after_s = 3.0
    serve = start(
        serves,
        zk_connect,
        store_url,
        KAFKA_HEALTH_SERVICE__ACTIONS__STALL_AFTER_S=str(stall_after_s),
        **metrics_env(cluster),
    )
    cluster.skew({"topics": {TOPIC: 16}})
    bounds = {"min_bytes_per_s": 32 * KIB, "max_bytes_per_s": 64 * KIB}
    # one change an hour on health alone: the raise to the ceiling is the falling-behind one
    throttle = {"mode": "adaptive", **bounds, "interval_s": 3600, "increase_step_bytes_per_s": 1024}
    action_id = reassign(serve, targets(zk_connect)[:1], throttle=throttle)
    stalled = wait_for(
        lambda: stalled_behind(serve, action_id), timeout=90, message="STALLED, falling behind"
    )
    reason = stalled["progress"]["stalled"]["reason"]
    assert "at a throttle of 64.0 KiB/s" in reason, reason
    assert "the adaptive throttle is at its maximum" in reason, reason
    history = stalled["progress"]["throttle_history"]
    raised = [e for e in history if "falling behind" in e["reason"]]
    assert raised, history
    assert raised[-1]["to"] == bounds["max_bytes_per_s"], history
    assert all(e["to"] > e["from"] for e in history), history
    assert stalled["progress"]["throttle_bytes_per_s"] == bounds["max_bytes_per_s"]
    audited = [e for e in serve.get("/api/v1/audit", limit=1000).json() if e["action"] == "adaptive-throttle"]
    assert any("falling behind" in e["detail"]["reason"] for e in audited), audited
    assert serve.post(f"/api/v1/actions/{action_id}/cancel").status_code == 200
    done = finished(serve, action_id, timeout=60)
    assert done["state"] == "CANCELLED"
    assert done["progress"]["throttles"] == "removed"
    assert throttles_left(zk) == {}
    cluster.skew({"reset": True})
