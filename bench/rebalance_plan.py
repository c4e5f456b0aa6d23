"""Benchmark: the rebalance planner at 100k partitions / 50 brokers, and election chunking at 50k partitions.

    .venv/bin/python bench/rebalance_plan.py [--brokers 50 --topics 1000 --partitions-per-topic 100 --rf 3]
                                            [--racks 5 --hot-brokers 5 --skew 1.0 --seed 0]
                                            [--partition-weights] [--no-leader-moves]
                                            [--goals rack,disk_capacity,...|all] [--disks]
                                            [--election-partitions 50000]

The synthetic cluster: every partition has ``--rf`` replicas on distinct racks (``--racks`` racks, brokers
dealt round-robin), drawn at random with ``--hot-brokers`` brokers ``1 + --skew`` times as likely as the
others, so those hold more replicas and carry more load; the first replica leads, the ISR is complete.
Each partition has a produce rate (log-normal, times a log-normal per topic), and each broker's window
averages follow from it: ``nwBytesIn`` = Σ led rate, ``nwBytesOut`` = 2 × that (two consumer groups),
``ioWrite`` = Σ hosted rate, ``cpuUsed`` = Σ led rate + 0.3 × Σ followed rate, ``fd`` = 3 per replica,
``memUsed`` = 1 MB per replica, plus ``partitions`` and ``leaders``: equal weights, r = 10%.

Printed: the plan's wall time, replica moves, the lower bound and the ratio (target ≤ 1.1), leader moves,
Kafka ``--generate``'s replica moves for the same topics from scratch, σ and max |r_n| before and predicted
after (the planner's attribution), and σ / max |r_n| after recomputed from the true per-partition rates (how
far the broker-average attribution is from the truth). ``--partition-weights`` gives the planner the true
rates as partition weights; ``--no-leader-moves`` plans replica moves only. ``--goals`` names the plan's
goals in priority order (``all``: every goal; default: the default goals) and ``--disks`` gives the planner
disk figures (a partition's size is its rate × 1 h, every broker's disk 2.5 × the average broker's bytes,
the first hot broker's filled to 90 %; implied by a disk goal in ``--goals``); each goal's figures are
printed (before and after, met, moves, lower bound and ratio, why not), and the process's peak RSS. Then
the election chunker: 50k partitions into 512 KiB payloads.

Exit status 1 when the plan takes more than its target (20 s with the default goals, 60 s with goals named
by ``--goals``: the issue's figures at Cruise Control's size), moves more than 1.1 × the lower bound, or a
payload is over budget or loses a partition.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from collections.abc import Mapping, Sequence

import pandas as pd

from analytics.load_model import compute_load
from app.actions.election import DEFAULT_BUDGET_BYTES, chunk_payloads
from app.actions.rebalance import GOALS, DiskInput, RebalancePlan, plan_rebalance
from collectors.kafka.model import (
    BrokerEndpoint,
    BrokerRegistration,
    ClusterSnapshot,
    ControllerInfo,
    LeaderAndIsr,
    PartitionInfo,
    ReplicaAssignment,
    TopicInfo,
    TopicPartition,
)

TARGET_SECONDS = 20.0
"""The plan at Cruise Control's size with the default goals (smaller clusters are far below it)."""
TARGET_GOALS_SECONDS = 60.0
"""The plan at Cruise Control's size with every goal listed."""
TARGET_RATIO = 1.1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=50)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--rf", type=int, default=3)
    parser.add_argument("--racks", type=int, default=5)
    parser.add_argument("--hot-brokers", type=int, default=5)
    parser.add_argument("--skew", type=float, default=1.0, help="extra likelihood of a hot broker (1.0)")
    parser.add_argument("--rated-deviation", type=float, default=0.10)
    parser.add_argument("--partition-weights", action="store_true", help="give the planner the true rates")
    parser.add_argument("--no-leader-moves", action="store_true", help="plan replica moves only")
    parser.add_argument("--goals", default=None, help="comma-separated goals in priority order, or 'all'")
    parser.add_argument("--disks", action="store_true", help="give the planner disk figures")
    parser.add_argument("--election-partitions", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


# --- the synthetic cluster ---------------------------------------------------------------------------


def synthetic_cluster(args: argparse.Namespace) -> tuple[ClusterSnapshot, dict[TopicPartition, float]]:
    rng = random.Random(args.seed)
    brokers = list(range(1, args.brokers + 1))
    rack_of = {b: f"rack-{i % args.racks}" for i, b in enumerate(brokers)}
    weight = {b: 1.0 + (args.skew if i < args.hot_brokers else 0.0) for i, b in enumerate(brokers)}
    partitions: dict[TopicPartition, PartitionInfo] = {}
    rates: dict[TopicPartition, float] = {}
    for t in range(args.topics):
        topic = f"topic-{t:05d}"
        topic_rate = rng.lognormvariate(0.0, 0.5)
        for p in range(args.partitions_per_topic):
            replicas = _draw_replicas(rng, brokers, weight, rack_of, args.rf)
            tp = TopicPartition(topic, p)
            state = LeaderAndIsr(replicas[0], 1, replicas, 1)
            partitions[tp] = PartitionInfo(tp, ReplicaAssignment(replicas), state)
            rates[tp] = topic_rate * rng.lognormvariate(0.0, 1.0)
    snapshot = ClusterSnapshot(
        version=1,
        taken_at=0.0,
        last_good_at=0.0,
        stale=False,
        cluster_id="bench",
        brokers={
            b: BrokerRegistration(b, (BrokerEndpoint("PLAINTEXT", f"b{b}", 9092),), rack=rack_of[b])
            for b in brokers
        },
        controller=ControllerInfo(brokers[0], 1),
        topics={name: TopicInfo(name) for name in {tp.topic for tp in partitions}},
        partitions=partitions,
    )
    return snapshot, rates


def _draw_replicas(
    rng: random.Random, brokers: list[int], weight: Mapping[int, float], rack_of: Mapping[int, str], rf: int
) -> tuple[int, ...]:
    chosen: list[int] = []
    racks: set[str] = set()
    n_racks = len(set(rack_of.values()))
    while len(chosen) < rf:
        candidates = [
            b for b in brokers if b not in chosen and (rack_of[b] not in racks or len(racks) == n_racks)
        ]
        b = rng.choices(candidates, weights=[weight[c] for c in candidates])[0]
        chosen.append(b)
        racks.add(rack_of[b])
    return tuple(chosen)


def broker_metrics(
    assignment: Mapping[TopicPartition, tuple[int, ...]],
    rates: Mapping[TopicPartition, float],
    brokers: list[int],
) -> pd.DataFrame:
    """The window averages each broker would report with this assignment (replicas[0] leading)."""
    values = {
        b: dict.fromkeys(("partitions", "leaders", "nwBytesIn", "ioWrite", "cpuUsed", "fd"), 0.0)
        for b in brokers
    }
    for tp, replicas in assignment.items():
        rate = rates[tp]
        lead = values[replicas[0]]
        lead["leaders"] += 1
        lead["nwBytesIn"] += rate
        lead["cpuUsed"] += rate
        for b in replicas:
            values[b]["partitions"] += 1
            values[b]["ioWrite"] += rate
            values[b]["fd"] += 3
        for b in replicas[1:]:
            values[b]["cpuUsed"] += 0.3 * rate
    rows: list[tuple[int, str, float]] = []
    for b, v in values.items():
        v["nwBytesOut"] = 2 * v["nwBytesIn"]
        v["memUsed"] = 1e6 * v["partitions"]
        rows.extend((b, m, x) for m, x in v.items())
    return pd.DataFrame(rows, columns=["broker", "metric", "value"])


# --- runs --------------------------------------------------------------------------------------------


def run_plan(args: argparse.Namespace) -> bool:
    started = time.perf_counter()
    snapshot, rates = synthetic_cluster(args)
    brokers = sorted(snapshot.brokers)
    current = {tp: info.assignment.replicas for tp, info in snapshot.partitions.items()}
    samples = broker_metrics(current, rates, brokers)
    print(
        f"cluster   {len(brokers)} brokers on {args.racks} racks, {len(current):,} partitions, RF {args.rf}, "
        f"{args.hot_brokers} hot brokers (+{args.skew:.0%}) built in {time.perf_counter() - started:.1f}s; "
        f"peak RSS so far {peak_rss_mib():,.0f} MiB"
    )
    goals = None if args.goals is None else (list(GOALS) if args.goals == "all" else args.goals.split(","))
    disks = synthetic_disks(snapshot, rates, args) if args.disks or "disk" in (args.goals or "") else None
    started, cpu = time.perf_counter(), time.process_time()
    plan = plan_rebalance(
        snapshot,
        samples,
        rated_deviation=args.rated_deviation,
        partition_weights=rates if args.partition_weights else None,
        leader_moves=not args.no_leader_moves,
        seed=args.seed,
        goals=goals,
        disks=disks,
    )
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    truth = _true_after(plan, current, rates, brokers, args.rated_deviation)
    target = TARGET_SECONDS if goals is None else TARGET_GOALS_SECONDS
    _report_plan(plan, seconds, truth, target, goals is None)
    print(f"cpu       {cpu:.2f}s of CPU for the plan (wall {seconds:.2f}s: the rest is waiting for a core)")
    _report_goals(plan)
    # the ratio checked is the load goal's own (other goals' moves have bounds of their own)
    load = next((g for g in plan.goals if g.goal == "load"), None)
    ratio = load.ratio if load is not None and load.ratio is not None else float("nan")
    return seconds <= target and (load is None or load.ratio is None or ratio <= TARGET_RATIO)


def synthetic_disks(
    snapshot: ClusterSnapshot, rates: Mapping[TopicPartition, float], args: argparse.Namespace
) -> DiskInput:
    """Sizes: the rate × 3600 (bytes, an hour's retention at the rate in bytes/s); every disk 2.5 × the
    average broker's bytes; the first hot broker's other files fill it to 90 %."""
    sizes = {tp: int(rate * 3600 * 1e6) for tp, rate in rates.items()}
    used: dict[int, float] = dict.fromkeys(snapshot.brokers, 0.0)
    for tp, info in snapshot.partitions.items():
        for b in info.replicas:
            used[b] += sizes[tp]
    capacity = 2.5 * sum(used.values()) / len(used)
    first = min(snapshot.brokers)
    used[first] = max(used[first], 0.9 * capacity)
    return DiskInput(dict.fromkeys(snapshot.brokers, capacity), used, sizes)


def peak_rss_mib() -> float:
    """The process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _true_after(
    plan: RebalancePlan,
    current: Mapping[TopicPartition, tuple[int, ...]],
    rates: Mapping[TopicPartition, float],
    brokers: list[int],
    rated_deviation: float,
) -> tuple[float, float]:
    after = dict(current)
    after.update(plan.reassignment())
    report = compute_load(broker_metrics(after, rates, brokers), rated_deviation=rated_deviation)
    return report.stddev, float(report.brokers["deviation_rate"].abs().max())


def _report_plan(
    plan: RebalancePlan, seconds: float, truth: tuple[float, float], target: float, default_goals: bool
) -> None:
    ratio = plan.replica_moves / plan.lower_bound_moves if plan.lower_bound_moves else float("nan")
    # with goals named, the plan's bound is the load goal's alone: each goal's own ratio is on its line
    checked = (
        f"target <= {TARGET_RATIO}" if default_goals else "every goal's moves: each goal's line has its own"
    )
    before, after = plan.before, plan.after
    print(f"plan      {seconds:.2f}s (target <= {target:.0f}s)")
    print(
        f"moves     {plan.replica_moves:,} replica moves, lower bound {plan.lower_bound_moves:,}, "
        f"ratio {ratio:.3f} ({checked}); {len(plan.leader_moves):,} leader moves"
    )
    generate = "refused" if plan.kafka_generate_moves is None else f"{plan.kafka_generate_moves:,}"
    print(f"kafka     --generate from scratch would move {generate} replicas")
    print(
        f"load      sigma {before.stddev:.5f} -> {after.stddev:.5f} "
        f"(threshold {after.stddev_threshold:.5f}); "
        f"max |r_n| {before.max_abs_deviation:.3f} -> {after.max_abs_deviation:.3f}; "
        f"imbalanced brokers {len(before.imbalanced_brokers)} -> {len(after.imbalanced_brokers)}"
    )
    print(f"truth     with the true partition rates: sigma {truth[0]:.5f}, max |r_n| {truth[1]:.3f}")
    factors = ", ".join(f"{m} {f:.2f}" for m, f in sorted(plan.leader_factors.items()))
    print(f"factors   leader/follower load: {factors}")
    if plan.unresolved:
        print(f"unresolved brokers: {list(plan.unresolved)}")


def _report_goals(plan: RebalancePlan) -> None:
    for g in plan.goals:
        bound = "-" if g.lower_bound is None else f"{g.lower_bound:,}"
        ratio = "-" if g.ratio is None else f"{g.ratio:.3f}"
        before = "-" if g.before is None else f"{g.before:.6g}"
        after = "-" if g.after is None else f"{g.after:.6g}"
        why = "" if g.why_not is None else f"; why not: {g.why_not[:160]}"
        print(
            f"goal      {g.goal:<17} {'hard' if g.hard else 'soft'} {before} -> {after} "
            f"met {g.satisfied}; {g.moves:,} replica / {g.leader_moves:,} leader moves, bound {bound}, "
            f"ratio {ratio}{why}"
        )
    print(f"memory    peak RSS {peak_rss_mib():,.0f} MiB (the whole process)")


def run_chunking(partitions: int) -> bool:
    tps = [TopicPartition(f"orders.events-{i // 100:06d}", i % 100) for i in range(partitions)]
    started = time.perf_counter()
    payloads = chunk_payloads(tps, DEFAULT_BUDGET_BYTES)
    seconds = time.perf_counter() - started
    seen = [
        TopicPartition(e["topic"], e["partition"])
        for payload in payloads
        for e in json.loads(payload)["partitions"]
    ]
    largest = max(len(p) for p in payloads)
    whole = len(json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in tps]}))
    ok = largest <= DEFAULT_BUDGET_BYTES and seen == tps
    print(
        f"election  {len(tps):,} partitions ({whole / 1024:.0f} KiB in one znode) -> "
        f"{len(payloads)} payloads, "
        f"largest {largest:,} bytes (budget {DEFAULT_BUDGET_BYTES:,}), {seconds:.3f}s, "
        f"{'all partitions once' if seen == tps else 'MISMATCH'}"
    )
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ok = run_plan(args)
    ok = run_chunking(args.election_partitions) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
