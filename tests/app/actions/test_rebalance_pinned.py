"""Plans pinned before goals came in (issue 27): the planners without ``goals`` must return exactly the
moves they returned then, for the same input.

The stored case (``data/rebalance_pinned.json``): 12 brokers on 3 racks, 320 partitions of 16 topics
(replication factor 2 or 3, some followers out of sync), four hot brokers; the brokers' window averages, the
partitions' sizes and the log dirs' capacities (for the disk goals; the pinned plans do not read them), and
the moves each planner returned on the commit before goals. The case was written once by
``python -m tests.app.actions.test_rebalance_pinned --write``; writing it again pins whatever the planner
does now, so only do that for a change of behaviour on purpose (and say so in the commit).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from app.actions.rebalance import RebalancePlan, plan_drain, plan_rebalance
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from tests.support import snapshots
from tests.support.snapshots import partition

pytestmark = pytest.mark.unit

CASE = Path(__file__).parent / "data" / "rebalance_pinned.json"


def generate_cluster(seed: int = 27) -> dict[str, Any]:
    """The synthetic cluster of the stored case (the generator is kept for reference; the JSON is the
    truth)."""
    rng = random.Random(seed)
    brokers = list(range(1, 13))
    racks = {b: f"rack-{b % 3}" for b in brokers}
    hot = {1, 2, 5, 9}
    weight = {b: 4.0 if b in hot else 1.0 for b in brokers}
    partitions: list[dict[str, Any]] = []
    rates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for t in range(16):
        topic = f"topic-{t:02d}"
        rf = 3 if t % 4 else 2
        topic_rate = rng.lognormvariate(0.0, 0.5)
        for p in range(20):
            chosen: list[int] = []
            while len(chosen) < rf:
                taken = {racks[b] for b in chosen}
                pool = [b for b in brokers if b not in chosen and racks[b] not in taken]
                chosen.append(rng.choices(pool, weights=[weight[b] for b in pool])[0])
            isr = list(chosen) if rng.random() > 0.1 else chosen[:-1]
            partitions.append({"topic": topic, "partition": p, "replicas": chosen, "isr": isr})
            rate = topic_rate * rng.lognormvariate(0.0, 1.0)
            rates[f"{topic}-{p}"] = rate
            sizes[f"{topic}-{p}"] = int(rate * 3.6e9)
    load: dict[str, dict[str, float]] = {
        str(b): {"nwBytesIn": 0.0, "nwBytesOut": 0.0, "cpuUsed": 0.0, "ioWrite": 0.0} for b in brokers
    }
    for part in partitions:
        rate = rates[f"{part['topic']}-{part['partition']}"]
        lead = load[str(part["replicas"][0])]
        lead["nwBytesIn"] += rate
        lead["nwBytesOut"] += 2 * rate
        lead["cpuUsed"] += rate
        for b in part["replicas"]:
            load[str(b)]["ioWrite"] += rate
        for b in part["replicas"][1:]:
            load[str(b)]["cpuUsed"] += 0.3 * rate
    used = {str(b): 0 for b in brokers}
    for part in partitions:
        for b in part["replicas"]:
            used[str(b)] += sizes[f"{part['topic']}-{part['partition']}"]
    capacity = {str(b): int(max(used.values()) / 0.7) for b in brokers}
    return {
        "brokers": {str(b): racks[b] for b in brokers},
        "partitions": partitions,
        "load": load,
        "sizes": sizes,
        "log_dir_capacity_bytes": capacity,
    }


def snapshot_of(case: dict[str, Any]) -> ClusterSnapshot:
    brokers = [int(b) for b in case["brokers"]]
    return snapshots.cluster(
        *(partition(p["topic"], p["partition"], p["replicas"], isr=p["isr"]) for p in case["partitions"]),
        brokers=brokers,
        racks={b: case["brokers"][str(b)] for b in brokers},
    )


def load_of(case: dict[str, Any]) -> dict[int, dict[str, float]]:
    return {int(b): metrics for b, metrics in case["load"].items()}


def moves_of(plan: RebalancePlan) -> dict[str, Any]:
    return {
        "moves": [
            [str(m.tp), list(m.old_replicas), list(m.new_replicas), m.old_leader, m.new_leader]
            for m in plan.moves
        ],
        "leader_moves": [
            [str(m.tp), list(m.replicas), m.old_leader, m.new_leader] for m in plan.leader_moves
        ],
        "replica_moves": plan.replica_moves,
        "lower_bound_moves": plan.lower_bound_moves,
    }


def pinned_plans(case: dict[str, Any]) -> dict[str, RebalancePlan]:
    snapshot, load = snapshot_of(case), load_of(case)
    return {
        "rebalance": plan_rebalance(snapshot, load),
        "rebalance_counts": plan_rebalance(snapshot),
        "rebalance_no_leader_moves": plan_rebalance(snapshot, load, leader_moves=False),
        "drain_1": plan_drain(snapshot, 1, load),
    }


@pytest.fixture(scope="module")
def case() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CASE.read_text())
    return data


@pytest.mark.parametrize("name", ["rebalance", "rebalance_counts", "rebalance_no_leader_moves", "drain_1"])
def test_without_goals_the_planners_return_the_pinned_moves(case: dict[str, Any], name: str) -> None:
    plan = pinned_plans(case)[name]

    assert moves_of(plan) == case["expected"][name]
    assert plan.moves or plan.leader_moves


def test_the_stored_cluster_is_the_generators() -> None:
    stored = json.loads(CASE.read_text())
    stored.pop("expected")

    assert stored == json.loads(json.dumps(generate_cluster()))
    assert len(stored["partitions"]) == 320
    assert TopicPartition("topic-00", 0) in snapshot_of(stored).partitions


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.app.actions.test_rebalance_pinned --write (pins today's plans)")
    generated = generate_cluster()
    generated["expected"] = {name: moves_of(plan) for name, plan in pinned_plans(generated).items()}
    CASE.write_text(json.dumps(generated, indent=1, sort_keys=True) + "\n")
