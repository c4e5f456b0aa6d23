"""disk_usage's and replica_count's sheds judged as arrays (app/actions/rebalance/walk.py) against their tries
one by one."""

from __future__ import annotations

import random

import pytest

from app.actions.rebalance import GOALS, DiskInput, GoalOptions
from app.actions.rebalance.walk import Walk
from collectors.kafka.model import ClusterSnapshot
from tests.app.actions.test_rebalance_goals import (
    GIB,
    BlockRecorder,
    disks_of,
    leaders_bytes_in,
    skewed_cluster,
)

pytestmark = pytest.mark.unit

SOFT = ["disk_usage", "topic_replicas", "leader_bytes_in", "topic_leaders", "load", "leader_count"]
CAPPED = ["rack", "disk_capacity", "replica_capacity", "disk_usage", "replica_count", "load"]
COUNTED = ["rack", "replica_count", "leader_count", "topic_replicas", "load", "leader_bytes_in"]


def crowded_disks(seed: int) -> tuple[ClusterSnapshot, DiskInput]:
    """18 brokers on 3 racks, 40 topics of 8 partitions (RF 2-3) drawn mostly onto brokers 1-3; sizes
    log-normal, every disk 1,000 GiB with up to 300 GiB of other files."""
    rng = random.Random(seed)
    snapshot = skewed_cluster(rng, brokers=18, hot=3, weight=6.0, topics=40)
    brokers = sorted(snapshot.brokers)
    sizes = {tp: int(rng.lognormvariate(0.0, 1.0) * 4 * GIB) for tp in snapshot.partitions}
    capacity = dict.fromkeys(brokers, 1000.0 * GIB)
    other = {b: rng.uniform(0, 300) * GIB for b in brokers}
    return snapshot, disks_of(snapshot, sizes, capacity, other)


@pytest.mark.parametrize(
    ("seed", "goals", "loaded", "options"),
    [
        *((seed, SOFT, loaded, None) for seed in (0, 1, 2) for loaded in (False, True)),
        (0, list(GOALS), True, None),
        (1, list(GOALS), False, None),
        (0, CAPPED, False, GoalOptions(disk_max_ratio=0.45, max_replicas_per_broker=70)),
        (0, CAPPED, True, GoalOptions(disk_max_ratio=0.45, max_replicas_per_broker=70)),
        *((seed, COUNTED, True, None) for seed in (0, 1)),
    ],
)
def test_disk_usage_sheds_judged_as_arrays_count_as_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    goals: list[str],
    loaded: bool,
    options: GoalOptions | None,
) -> None:
    """Where disk_usage's or replica_count's shed judges a receiver's walk over the source's items as
    arrays and tries only the move that will be accepted, the plan, each goal's figures and why_not, and
    every block counted per goal, reason and broker are those of trying every item through can_host and
    the guard. ``loaded``: with the leaders' bytes in (the load and leader_bytes_in goals judge each item);
    ``options``: with capacities that refuse moves."""
    snapshot, disks = crowded_disks(seed)
    load = leaders_bytes_in(snapshot, seed) if loaded else None
    blocks = BlockRecorder(monkeypatch)
    judged = blocks.plan(snapshot, load, goals=goals, disks=disks, options=options)
    if "replica_count" in goals:  # its sheds are judged too
        assert blocks.by_goal["replica_count"]
    if "disk_usage" in goals:
        assert blocks.by_reason["disk_usage", "rack spread"]  # the walk counted refusals in bulk
        if options is not None:
            assert blocks.by_reason["disk_usage", "capacity"]
        else:
            assert blocks.by_reason["disk_usage", "another listed goal"]
            assert judged[0].goals[goals.index("disk_usage")].moves
    monkeypatch.setattr(Walk, "fits", lambda self, s: False)
    blocks.assert_same(judged, blocks.plan(snapshot, load, goals=goals, disks=disks, options=options))
