"""Plans with goals (issue 27): hard goals never broken, soft goals never made worse, limits kept, every
goal explained; then properties over random clusters with racks, disks and sizes.

Disk figures are given as the service builds them (:class:`DiskInput`: per broker its log dirs' size and
used bytes, per partition its size).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from app.actions.rebalance import (
    GOALS,
    DiskInput,
    GoalOptions,
    GoalReport,
    RebalancePlan,
    plan_drain,
    plan_rebalance,
    search,
)
from app.actions.rebalance.balancer import Balancer
from app.actions.rebalance.goals import HARD_GOALS, GoalState
from app.actions.rebalance.model import build_model
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from tests.app.actions.test_rebalance import applied, assert_valid
from tests.support import snapshots
from tests.support.snapshots import partition

pytestmark = pytest.mark.unit

cluster = functools.partial(snapshots.cluster, brokers=(1, 2, 3, 4))
GIB = 1024**3


def goal(plan: RebalancePlan, name: str) -> GoalReport:
    return next(g for g in plan.goals if g.goal == name)


def disks_of(
    snapshot: ClusterSnapshot,
    sizes: Mapping[TopicPartition, int],
    capacity: Mapping[int, float],
    other: Mapping[int, float],
) -> DiskInput:
    """Used bytes = the replicas' sizes plus ``other`` files, per broker."""
    used = {b: float(other.get(b, 0.0)) for b in capacity}
    for tp, info in snapshot.partitions.items():
        for b in info.replicas:
            used[b] += sizes.get(tp, 0)
    return DiskInput(capacity_bytes=dict(capacity), used_bytes=used, sizes=dict(sizes))


def crowded_on_broker_1() -> tuple[ClusterSnapshot, DiskInput]:
    """Broker 1 leads and holds most partitions; broker 4 holds few but its disk is 90 % full of other
    files; every partition is 1 GiB on 100 GiB disks."""
    layout = [[1, 2], [1, 3], [1, 2], [1, 3], [1, 2], [1, 3], [2, 3], [1, 4]]
    snapshot = cluster(*(partition("t", i, r) for i, r in enumerate(layout)))
    sizes = dict.fromkeys(snapshot.partitions, GIB)
    capacity = dict.fromkeys((1, 2, 3, 4), 100.0 * GIB)
    return snapshot, disks_of(snapshot, sizes, capacity, {4: 89.0 * GIB})


# --- the request -----------------------------------------------------------------------------------------


def test_unknown_repeated_or_no_goals_are_clear_errors() -> None:
    snapshot, _ = crowded_on_broker_1()
    with pytest.raises(ValueError, match="unknown goal\\(s\\) 'rack_awareness'"):
        plan_rebalance(snapshot, goals=["rack", "rack_awareness"])
    with pytest.raises(ValueError, match="load listed more than once"):
        plan_rebalance(snapshot, goals=["load", "load"])
    with pytest.raises(ValueError, match="the goal list is empty"):
        plan_drain(snapshot, 4, goals=[])
    with pytest.raises(ValueError, match="disk_max_ratio"):
        GoalOptions(disk_max_ratio=1.5)


def test_every_goal_listed_is_reported_in_order_with_its_figures() -> None:
    snapshot, disks = crowded_on_broker_1()

    plan = plan_rebalance(snapshot, goals=list(GOALS), disks=disks)

    assert [g.goal for g in plan.goals] == list(GOALS)
    assert [g.hard for g in plan.goals] == [g in HARD_GOALS for g in GOALS]
    for report in plan.goals:
        assert report.measure
        assert report.satisfied is None or report.satisfied == (report.after == pytest.approx(0.0, abs=1e-9))
        assert (report.why_not is None) or report.satisfied is not True or "no " in report.why_not
    assert sum(g.moves for g in plan.goals) == plan.replica_moves
    assert goal(plan, "leader_bytes_in").satisfied is None  # counts only: no nwBytesIn to judge it by
    assert "no nwBytesIn" in (goal(plan, "leader_bytes_in").why_not or "")


# --- hard goals ------------------------------------------------------------------------------------------


def test_disk_capacity_first_never_places_a_replica_on_a_full_broker() -> None:
    snapshot, disks = crowded_on_broker_1()

    load_only = plan_rebalance(snapshot, goals=["load"], disks=disks)
    plan = plan_rebalance(snapshot, goals=["disk_capacity", "load"], disks=disks)

    assert any(4 in m.added for m in load_only.moves), "the load alone would fill broker 4"
    assert plan.moves
    assert all(4 not in m.added for m in plan.moves)
    assert all(m.new_leader != 4 or m.old_leader == 4 for m in plan.leader_moves)
    assert goal(plan, "disk_capacity").satisfied is False  # broker 4 stays above 80 %: no bytes leave it
    load = goal(plan, "load")
    assert load.after is not None
    assert load.before is not None
    assert load.after <= load.before
    assert_valid(snapshot, plan)


def test_disk_capacity_named_moves_replicas_off_a_broker_above_the_ratio() -> None:
    snapshot, disks = crowded_on_broker_1()
    used = dict(disks.used_bytes)
    used[4] = 79.0 * GIB + 3 * GIB  # 82 %: 2 GiB above 80 %, its one partition cannot cover it
    used[1] = 85.0 * GIB
    disks = DiskInput(disks.capacity_bytes, used, disks.sizes)

    plan = plan_rebalance(
        snapshot, goals=["disk_capacity"], disks=disks, options=GoalOptions(disk_max_ratio=0.8)
    )

    report = goal(plan, "disk_capacity")
    assert report.before == pytest.approx(7.0 * GIB)
    assert report.lower_bound == 5 + 1  # broker 1 sheds 5 of its 1 GiB partitions, broker 4 its only one
    assert {b for m in plan.moves for b in m.removed} <= {1, 4}
    assert report.after is not None
    assert report.before is not None
    assert report.after < report.before
    assert report.moves == plan.replica_moves


def test_without_disk_figures_the_disk_goals_say_so() -> None:
    snapshot, disks = crowded_on_broker_1()
    partial = DiskInput({b: c for b, c in disks.capacity_bytes.items() if b != 3}, disks.used_bytes, {})

    plan = plan_rebalance(snapshot, goals=["disk_capacity", "disk_usage", "load"], disks=partial)
    nothing = plan_rebalance(snapshot, goals=["disk_capacity", "load"])

    assert "no disk figures for broker(s) 3" in (goal(plan, "disk_capacity").why_not or "")
    assert "8 partition(s) of unknown size" in (goal(plan, "disk_usage").why_not or "")
    assert goal(nothing, "disk_capacity").satisfied is None
    assert "no disk figures for broker(s) 1, 2, 3, 4" in (goal(nothing, "disk_capacity").why_not or "")


def test_replica_capacity_caps_every_broker() -> None:
    snapshot, _ = crowded_on_broker_1()

    plan = plan_rebalance(
        snapshot, goals=["replica_capacity", "replica_count"], options=GoalOptions(max_replicas_per_broker=4)
    )

    after = Counter(b for replicas, _ in applied(snapshot, plan).values() for b in replicas)
    assert max(after.values()) <= 4
    report = goal(plan, "replica_capacity")
    assert (report.before, report.after, report.satisfied, report.lower_bound) == (3.0, 0.0, True, 3)


def test_named_rack_goal_fixes_a_partition_on_one_rack_and_the_default_only_reports_it() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "c"}
    snapshot = cluster(partition("t", 0, [1, 2]), partition("t", 1, [3, 4]), racks=racks)

    default = plan_rebalance(snapshot)
    named = plan_rebalance(snapshot, goals=["rack"])

    assert "not fixed" in (goal(default, "rack").why_not or "")
    assert goal(default, "rack").before == 1.0
    assert [m.tp for m in named.moves] == [TopicPartition("t", 0)]
    assert {racks[b] for b in named.moves[0].new_replicas} == {"a", racks[named.moves[0].added[0]]}
    assert (goal(named, "rack").after, goal(named, "rack").moves, goal(named, "rack").lower_bound) == (
        0.0,
        1,
        1,
    )


# --- limits ----------------------------------------------------------------------------------------------


def test_only_over_moves_replicas_off_the_brokers_over_the_threshold_only() -> None:
    snapshot, disks = crowded_on_broker_1()
    used = dict(disks.used_bytes)
    used[1] = 96.0 * GIB

    plan = plan_rebalance(
        snapshot,
        goals=["disk_capacity", "load"],
        disks=DiskInput(disks.capacity_bytes, used, disks.sizes),
        options=GoalOptions(only_over_disk_used_ratio=0.95),
    )

    assert plan.moves
    assert all(m.removed == (1,) for m in plan.moves)
    assert all(m.old_leader == 1 for m in plan.leader_moves)


def test_max_moves_and_max_bytes_bound_the_plan_and_say_so() -> None:
    snapshot, disks = crowded_on_broker_1()
    unbounded = plan_rebalance(snapshot, goals=["load"], leader_moves=False)

    by_moves = plan_rebalance(snapshot, goals=["load"], leader_moves=False, options=GoalOptions(max_moves=1))
    by_bytes = plan_rebalance(
        snapshot, goals=["load"], leader_moves=False, disks=disks, options=GoalOptions(max_bytes=GIB)
    )

    assert unbounded.replica_moves > 1
    assert by_moves.replica_moves == by_bytes.replica_moves == 1
    assert by_moves.moves[0] == unbounded.moves[0] or by_moves.moves[0].removed == (1,)
    assert "the move budget (max_moves 1)" in (goal(by_moves, "load").why_not or "")
    assert "the move budget (max_bytes 1073741824)" in (goal(by_bytes, "load").why_not or "")


# --- soft goals ------------------------------------------------------------------------------------------


def test_topic_leaders_spreads_each_topics_leaders() -> None:
    layout = [[1, 2], [1, 3], [1, 4], [1, 2], [2, 1], [3, 1], [4, 1], [2, 3]]
    snapshot = cluster(*(partition("t", i, r) for i, r in enumerate(layout)))

    plan = plan_rebalance(snapshot, goals=["topic_leaders"])

    leaders = Counter(leader for _, leader in applied(snapshot, plan).values())
    assert max(leaders.values()) - min(leaders[b] for b in (1, 2, 3, 4)) <= 2
    report = goal(plan, "topic_leaders")
    assert report.satisfied is True
    assert report.before == 1.0  # broker 1 leads 4: one above avg 2 + 1
    assert report.leader_moves == report.lower_bound == 1
    assert report.ratio == 1.0
    assert plan.moves == ()


def test_a_plan_that_cannot_meet_topic_leaders_says_why() -> None:
    layout = [[1, 2], [1, 2], [1, 2], [1, 2], [3, 4]]
    snapshot = cluster(*(partition("t", i, r) for i, r in enumerate(layout)))

    budget = plan_rebalance(
        snapshot, goals=["topic_leaders"], leader_moves=False, options=GoalOptions(max_moves=0)
    )
    cool = DiskInput(dict.fromkeys((1, 2, 3, 4), 100.0), dict.fromkeys((1, 2, 3, 4), 10.0), {})
    excluded = plan_rebalance(
        snapshot, goals=["topic_leaders"], disks=cool, options=GoalOptions(only_over_disk_used_ratio=0.95)
    )
    rack_bound = plan_rebalance(
        cluster(
            *(partition("t", i, r) for i, r in enumerate(layout)), racks={1: "a", 2: "b", 3: "b", 4: "b"}
        ),
        goals=["topic_leaders"],
        leader_moves=False,
    )

    for plan, blocker in (
        (budget, "the move budget"),
        (excluded, "excluded brokers"),
        (rack_bound, "rack spread"),
    ):
        report = goal(plan, "topic_leaders")
        assert report.satisfied is False, blocker
        assert blocker in (report.why_not or ""), report.why_not
        assert "topic t on broker 1" in (report.why_not or "")


def test_a_soft_goal_is_never_met_by_making_a_higher_one_worse() -> None:
    snapshot, disks = crowded_on_broker_1()

    plan = plan_rebalance(snapshot, goals=["load", "topic_replicas", "leader_count"], disks=disks)

    for report in plan.goals:
        assert report.after is not None
        assert report.before is not None
        assert report.after <= report.before + 1e-12


def test_drain_keeps_the_hard_goals_and_says_which_capacity_stops_it() -> None:
    snapshot, disks = crowded_on_broker_1()

    plan = plan_drain(snapshot, 2, goals=["disk_capacity", "load"], disks=disks)
    assert all(4 not in m.added for m in plan.moves)
    assert plan_drain(snapshot, 2).moves != plan.moves or all(
        4 not in m.added for m in plan_drain(snapshot, 2).moves
    )

    full = DiskInput(disks.capacity_bytes, dict.fromkeys((1, 2, 3, 4), 95.0 * GIB), disks.sizes)
    with pytest.raises(ValueError, match=r"capacity \(disk_max_ratio 0.8.*broker\(s\) 1, 4"):
        plan_drain(snapshot, 2, goals=["disk_capacity"], disks=full)


# --- properties ------------------------------------------------------------------------------------------


@st.composite
def clusters_with_disks(draw: st.DrawFn) -> tuple[ClusterSnapshot, DiskInput]:
    n = draw(st.integers(3, 6))
    brokers = list(range(1, n + 1))
    racks = {b: f"r{draw(st.integers(0, 2))}" for b in brokers} if draw(st.booleans()) else {}
    partitions = []
    sizes: dict[TopicPartition, int] = {}
    for i in range(draw(st.integers(2, 20))):
        rf = draw(st.integers(1, min(3, n)))
        replicas = draw(st.permutations(brokers))[:rf]
        isr = [b for b in replicas if draw(st.integers(0, 4)) > 0] or [replicas[0]]
        info = partition(f"t{i % 3}", i, replicas, isr=isr, leader=draw(st.sampled_from(isr)))
        partitions.append(info)
        sizes[info.tp] = draw(st.integers(0, 10)) * GIB
    snapshot = snapshots.cluster(*partitions, brokers=brokers, racks=racks)
    capacity = dict.fromkeys(brokers, 100.0 * GIB)
    other = {b: draw(st.integers(0, 70)) * GIB * 1.0 for b in brokers}
    return snapshot, disks_of(snapshot, sizes, capacity, other)


def goal_state(
    snapshot: ClusterSnapshot,
    disks: DiskInput,
    goals: Sequence[str],
    options: GoalOptions,
    without: int | None = None,
) -> GoalState:
    """The goals' state of ``snapshot`` built afresh over every broker but ``without`` (count-based
    goals: no load)."""
    model, report, _ = build_model(snapshot, None, None, 0.1, None)
    eligible = [i for i, b in enumerate(model.broker_ids[: model.n_model]) if b != without]
    balancer = Balancer(model, eligible, report.rated_deviation)
    return GoalState(model, balancer, goals, options, disks, eligible=eligible, sources=None)


def evaluate(
    snapshot: ClusterSnapshot,
    disks: DiskInput,
    goals: Sequence[str],
    options: GoalOptions,
    without: int | None = None,
) -> dict[str, float | None]:
    """The goals' violations of ``snapshot`` measured afresh, over every broker but ``without``."""
    state = goal_state(snapshot, disks, goals, options, without)
    return {g: state.violation(g) for g in goals}


def disks_after(snapshot: ClusterSnapshot, plan: RebalancePlan, disks: DiskInput) -> DiskInput:
    used = dict(disks.used_bytes)
    for move in plan.moves:
        size = disks.sizes.get(move.tp, 0)
        for b in move.added:
            used[b] += size
        for b in move.removed:
            used[b] -= size
    return DiskInput(disks.capacity_bytes, used, disks.sizes)


def after_snapshot(snapshot: ClusterSnapshot, plan: RebalancePlan) -> ClusterSnapshot:
    layout = applied(snapshot, plan)
    racks = {b: r.rack for b, r in snapshot.brokers.items() if r.rack is not None}
    return snapshots.cluster(
        *(
            partition(tp.topic, tp.partition, replicas, isr=replicas, leader=leader)
            for tp, (replicas, leader) in sorted(layout.items())
        ),
        brokers=sorted(snapshot.brokers),
        racks=racks,
    )


COUNTED = [g for g in GOALS if g not in ("load", "leader_bytes_in")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clusters_with_disks(),
    st.lists(st.sampled_from(GOALS), min_size=1, max_size=5, unique=True),
    st.sampled_from([None, 3, 6]),
    st.booleans(),
)
def test_plans_keep_the_hard_goals_never_worsen_a_soft_goal_and_predict_the_assignment(
    case: tuple[ClusterSnapshot, DiskInput], goals: list[str], cap: int | None, leader_moves: bool
) -> None:
    snapshot, disks = case
    options = GoalOptions(max_replicas_per_broker=cap)

    plan = plan_rebalance(snapshot, goals=goals, options=options, disks=disks, leader_moves=leader_moves)

    assert_valid(snapshot, plan)
    reports = {g.goal: g for g in plan.goals}
    hard_held = all(reports[g].before == 0 for g in goals if g in HARD_GOALS)
    for name, report in reports.items():
        if report.before is None:
            continue
        assert report.after is not None
        if name in HARD_GOALS and report.before == 0:
            assert report.after == 0, name
        if name not in HARD_GOALS and hard_held:
            assert report.after <= report.before + 1e-9 * max(1.0, report.before), name
    # the plan carried out is what the plan predicts
    measured = evaluate(
        after_snapshot(snapshot, plan),
        disks_after(snapshot, plan, disks),
        [g for g in goals if g in COUNTED],
        options,
    )
    for name, value in measured.items():
        assert value == pytest.approx(reports[name].after, abs=1e-6), name


def unpairable() -> ClusterSnapshot:
    """Topic t0 over 5 brokers (avg 1.2 leaders, band [0.2, 2.2]): broker 3, alone on rack r1, leads 3 and
    brokers 4 and 5 lead none. Broker 3's replicas may not leave its rack and only t0-0 has another in-sync
    replica (on broker 2), so 3 moves are needed (a leadership 3 -> 2 and two leaders' replicas onto 4 and
    5) where the items outside the band say 2."""
    layout = {0: ([1, 3, 2], [3, 2]), 3: ([3, 2], [3]), 9: ([1, 3], [3]), 6: ([2], [2]), 12: ([1], [1])}
    layout[15] = ([1], [1])
    return snapshots.cluster(
        *(partition("t0", i, r, isr=isr, leader=isr[0]) for i, (r, isr) in sorted(layout.items())),
        brokers=[1, 2, 3, 4, 5],
        racks={1: "r0", 2: "r0", 3: "r1", 4: "r0", 5: "r0"},
    )


def test_a_count_goal_whose_units_cannot_pair_has_no_lower_bound_and_says_why() -> None:
    plan = plan_rebalance(unpairable(), goals=["topic_leaders"])

    report = goal(plan, "topic_leaders")
    assert report.satisfied is True
    assert report.moves + report.leader_moves == 3
    assert (report.lower_bound, report.ratio) == (None, None)
    assert "no lower bound on topic_leaders's moves" in (report.why_not or "")
    assert "rack spread" in (report.why_not or "")


def one_item_two_receivers() -> ClusterSnapshot:
    """15 leaders over 5 brokers (mean 3, band [2, 4]): broker 1 leads 6, 2 above the band, brokers 4 and 5
    lead one each, 1 below it. Of broker 1's partitions only t0-0 (one replica) may move: the others are
    on every broker. Each of 4 and 5 could take t0-0, but it is one item: one hand-off, not two."""
    leads = {1: 5, 2: 4, 3: 3, 4: 1, 5: 1}
    spread = [b for b, n in leads.items() for _ in range(n)]
    everywhere = [1, 2, 3, 4, 5]
    parts = [partition("t0", 0, [1])]
    parts += [
        partition("t1", i, [b] + [x for x in everywhere if x != b], leader=b) for i, b in enumerate(spread)
    ]
    return snapshots.cluster(*parts, brokers=everywhere)


def test_an_item_several_units_below_could_take_counts_once_toward_the_bound() -> None:
    """Counted for each receiver, broker 1's one movable item would make the flow 2 and publish a bound
    of 2 that no plan reaches."""
    plan = plan_rebalance(one_item_two_receivers(), goals=["leader_count"], leader_moves=False)

    report = goal(plan, "leader_count")
    assert (report.satisfied, report.moves) == (False, 1)
    assert report.lower_bound is None
    assert "no lower bound on leader_count's moves" in (report.why_not or "")


def greedy_trap() -> ClusterSnapshot:
    """17 single leaders over 5 brokers (mean 3.4, band [2.4, 4.4]): broker 1 leads 9 partitions that may
    go anywhere, broker 4 leads 6 whose racks let them go to broker 3 (r2) and, for t2-11, to broker 5;
    brokers 3 and 5 lead none, broker 2 leads 2. The bound is 7 (5 + 2 above, 3 + 3 + 1 below) and 7 moves
    do it: broker 4's two go first, to 3 and 5. The greedy serves the farthest unit first, so broker 1 fills
    broker 3 and broker 4's item then costs an eighth move (a Hypothesis find, 2026-11-27)."""
    single = {"t0": [0, 3, 6, 12, 15], "t1": [4, 7, 13, 16], "t2": [2, 5, 11]}
    leaders = {("t0", 0): 2, ("t1", 7): 2, ("t2", 11): 4}
    spread = {("t0", 9): [4, 2, 3], ("t1", 1): [4, 2, 3], ("t1", 10): [4, 2], ("t2", 8): [1, 4, 3]}
    spread[("t2", 14)] = [1, 4]
    parts = [
        partition(t, i, [leaders.get((t, i), 1)], isr=[leaders.get((t, i), 1)])
        for t, indexes in single.items()
        for i in indexes
    ]
    parts += [partition(t, i, r, isr=[4], leader=4) for (t, i), r in spread.items()]
    return snapshots.cluster(
        *parts, brokers=[1, 2, 3, 4, 5], racks={1: "r1", 2: "r1", 3: "r2", 4: "r0", 5: "r1"}
    )


def test_the_count_greedy_meets_the_bound_where_the_farthest_unit_first_order_costs_a_move() -> None:
    plan = plan_rebalance(greedy_trap(), goals=["leader_count"], leader_moves=False)

    report = goal(plan, "leader_count")
    assert (report.satisfied, report.lower_bound) == (True, 7)
    assert report.moves == 7


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clusters_with_disks(),
    st.sampled_from(
        ["replica_count", "leader_count", "topic_replicas", "topic_leaders", "rack", "replica_capacity"]
    ),
    st.booleans(),
)
@example((unpairable(), DiskInput()), "topic_leaders", True)
def test_a_goal_alone_takes_at_most_a_tenth_more_moves_than_its_lower_bound(
    case: tuple[ClusterSnapshot, DiskInput], name: str, leader_moves: bool
) -> None:
    """With racks too: where a count goal's units above the band cannot hand their items straight to
    the units below, the bound is None (no tight bound known) and ``why_not`` says so; wherever one is
    published the plan stays within a tenth of it (and, the goal met, at or above it)."""
    snapshot, disks = case

    plan = plan_rebalance(
        snapshot,
        goals=[name],
        options=GoalOptions(max_replicas_per_broker=4),
        disks=disks,
        leader_moves=leader_moves,
    )

    report = plan.goals[0]
    if report.lower_bound is None:
        assert name in ("replica_count", "leader_count", "topic_replicas", "topic_leaders"), report
        assert "no lower bound" in (report.why_not or ""), report
        return
    made = report.moves + (report.leader_moves if name in ("leader_count", "topic_leaders") else 0)
    if report.satisfied:
        assert made >= report.lower_bound
    assert made <= 1.1 * report.lower_bound + 1e-9, (made, report)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(
    clusters_with_disks(),
    st.lists(st.sampled_from(GOALS), min_size=1, max_size=5, unique=True),
    st.integers(0, 5),
    st.booleans(),
)
def test_drains_keep_the_hard_goals_place_replicas_where_soft_goals_allow_and_predict_the_assignment(
    case: tuple[ClusterSnapshot, DiskInput], goals: list[str], which: int, leader_moves: bool
) -> None:
    """A drain must move every replica of the broker; only where each goes is a choice. So a listed soft
    goal g is judged over the brokers that remain, against the band they will have once the drain is
    done (its mean counts the drained replicas), and the best the forced moves allow is defined as:

    ``B_g``: g's violation of the remaining brokers *before* the drain, against that end band (the drained
    broker's items not yet placed). A drained replica placed on a receiver changes g only there, so if
    every replica goes to a receiver that does not make g worse (one the hard goals allow, the higher
    listed soft goals kept first), g ends at most at ``B_g`` (the soft goals' own leader moves only make
    it better). It may end above only through a replica for which no such receiver existed given the
    replicas placed before it (the drain places them one at a time, heaviest first; it does not search
    placements jointly), and then its ``why_not`` says "the drain made g worse where it had to", naming
    those partitions; with one such replica, no placement at all keeps g (checked by trying them all).

    Also: no hard goal that held is broken, and the plan applied to the snapshot gives the goals' figures
    the plan predicts (measured afresh over the remaining brokers).
    """
    snapshot, disks = case
    broker = sorted(snapshot.brokers)[which % len(snapshot.brokers)]
    options = GoalOptions(max_replicas_per_broker=6)
    try:
        plan = plan_drain(
            snapshot, broker, goals=goals, options=options, disks=disks, leader_moves=leader_moves
        )
    except ValueError as error:  # nowhere to put a replica (racks, capacity, too few brokers): refused
        assume(False)
        raise AssertionError from error

    assert_valid(snapshot, plan)
    after = after_snapshot(snapshot, plan)
    assert all(broker not in replicas for replicas, _ in applied(snapshot, plan).values())
    reports = {g.goal: g for g in plan.goals}
    counted = [g for g in goals if g in COUNTED]
    measured = goal_state(after, disks_after(snapshot, plan, disks), counted, options, without=broker)
    for name in counted:
        assert measured.violation(name) == pytest.approx(reports[name].after, abs=1e-6), name
    for name in HARD_GOALS:
        if name in reports and reports[name].before == 0:
            assert reports[name].after == 0, name
    # B_g: the cluster as it is, against the bands the remaining brokers have after the drain
    start = goal_state(snapshot, disks, counted, options, without=broker)
    start.bands, start.topic_avg = measured.bands, measured.topic_avg
    for name in counted:
        if name in HARD_GOALS:
            continue
        best = start.violation(name)
        value = reports[name].after
        assert best is not None
        assert value is not None
        if value > best + 1e-9 * max(1.0, best):
            assert f"the drain made {name} worse where it had to" in (reports[name].why_not or ""), (
                name,
                value,
                best,
                reports[name],
            )
    first = next((g for g in goals if g in COUNTED and g not in HARD_GOALS), None)
    if (
        first is not None
        and first != "disk_usage"
        and "worse where it had to" in (reports[first].why_not or "")
    ):
        # the first listed soft goal had no choice: no placement of the drained replicas keeps it
        kept = best_placement(start, broker, first, goals, options)
        before = start.violation(first)
        assume(kept is not None)
        assert kept is not None
        assert before is not None
        assert kept > before + 1e-9, (first, kept, reports[first])


def best_placement(
    state: GoalState, drained: int, name: str, goals: Sequence[str], options: GoalOptions
) -> float | None:
    """The least violation of count goal ``name`` over every placement of the drained broker's replicas
    the hard goals allow. None when more than one of them counts for the goal: the drain places them one
    at a time, so its claim is per replica (no receiver kept the goal given the earlier ones), which only
    with one such replica is the same as "no placement keeps it"."""
    model = state.model
    x = model.broker_ids.index(drained)
    rows = [r for r in range(len(model.rep_part)) if model.rep_broker[r] == x]
    leaders = name in ("leader_count", "topic_leaders")
    topic = name in ("topic_replicas", "topic_leaders")
    choices = []
    for r in rows:
        p = model.rep_part[r]
        others = [model.rack[b] for b in model.members[p] if b != x]
        choices.append(
            [
                c
                for c in state.eligible
                if c not in model.members[p] and not (model.rack[c] in others and model.rack[x] not in others)
            ]
        )
    relevant = [r for r in rows if not leaders or model.leader[model.rep_part[r]] == x]
    if len(relevant) != 1 or math.prod(len(c) for c in choices) > 256:
        return None
    if name in ("replica_count", "leader_count"):
        table = (state.rep_count if name == "replica_count" else state.lead_count)[None, :].astype(float)
        bands = [state.bands[name]]
    else:
        base = state.topic_rep if name == "topic_replicas" else state.topic_lead
        assert base is not None
        table = base.astype(float)
        bands = [(a - 1.0, a + 1.0) for a in state.topic_avg[name]]
    best: float | None = None
    for placement in itertools.product(*choices):
        q = table.copy()
        reps = state.rep_count.copy()
        used = state.used.copy()
        for r, c in zip(rows, placement, strict=True):
            p = model.rep_part[r]
            reps[c] += 1
            used[c] += state.size[p]
            if not leaders or model.leader[p] == x:
                q[int(state.part_topic[p]) if topic else 0, c] += 1
        got = list(set(placement))
        if "replica_capacity" in goals and (reps[got] > (options.max_replicas_per_broker or 0)).any():
            continue
        known = [c for c in got if state.disk_known[c]]
        if "disk_capacity" in goals and (used[known] > state.disk_limit[known]).any():
            continue
        value = sum(
            max(q[t, b] - hi, lo - q[t, b], 0.0) for t, (lo, hi) in enumerate(bands) for b in state.eligible
        )
        best = value if best is None else min(best, value)
    return best


def skewed_topics(seed: int) -> tuple[ClusterSnapshot, DiskInput]:
    """12 brokers on 3 racks, 30 topics of 8 partitions (RF 2-3) drawn mostly onto brokers 1-4."""
    rng = random.Random(seed)
    brokers = list(range(1, 13))
    weights = [4.0 if b <= 4 else 1.0 for b in brokers]
    partitions = []
    for t in range(30):
        for i in range(8):
            replicas: list[int] = []
            while len(replicas) < rng.choice((2, 3, 3)):
                b = rng.choices(brokers, weights)[0]
                if b not in replicas:
                    replicas.append(b)
            partitions.append(partition(f"topic-{t:02d}", i, replicas))
    snapshot = snapshots.cluster(*partitions, brokers=brokers, racks={b: f"r{b % 3}" for b in brokers})
    sizes = {tp: rng.randint(1, 10) * GIB for tp in snapshot.partitions}
    capacity = dict.fromkeys(brokers, 2000.0 * GIB)
    return snapshot, disks_of(snapshot, sizes, capacity, {})


def leaders_bytes_in(snapshot: ClusterSnapshot, seed: int) -> dict[int, dict[str, float]]:
    """Per broker the bytes in its leaders take (a random rate per partition) and its replicas write."""
    rng = random.Random(seed)
    load = {b: {"nwBytesIn": 0.0, "ioWrite": 0.0} for b in snapshot.brokers}
    for info in snapshot.partitions.values():
        rate = rng.lognormvariate(0.0, 1.0)
        assert info.state is not None
        load[info.state.leader]["nwBytesIn"] += rate
        for b in info.assignment.replicas:
            load[b]["ioWrite"] += rate
    return load


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "goals",
    [list(GOALS), ["rack", "replica_count", "leader_count", "topic_leaders", "topic_replicas", "load"]],
)
@pytest.mark.parametrize("loaded", [False, True])
def test_the_topic_goals_receivers_turned_down_in_bulk_count_as_one_by_one(
    monkeypatch: pytest.MonkeyPatch, seed: int, goals: list[str], loaded: bool
) -> None:
    """A topic goal's receivers where every item is turned down (by a listed count goal, by
    leader_bytes_in judged on every broker at once, by the partition's brokers or racks) are counted in
    bulk: the plan, each goal's figures and why_not, and every block counted per goal, reason and broker
    are those of trying every item there through the guard. ``loaded``: with the leaders' bytes in."""
    snapshot, disks = skewed_topics(seed)
    load = leaders_bytes_in(snapshot, seed) if loaded else None
    judged = Counter[bool]()
    refusals = GoalState.leader_bytes_in_refusals

    def judge(self: GoalState, p: int, s: int) -> list[bool]:
        shut = refusals(self, p, s)
        judged[any(shut)] += 1
        return shut

    monkeypatch.setattr(GoalState, "leader_bytes_in_refusals", judge)
    states: list[GoalState] = []
    bulk: Counter[str] = Counter()
    init, add_blocks = GoalState.__init__, GoalState.add_blocks

    def keep(self: GoalState, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        states.append(self)

    def counted(self: GoalState, reason: str, at: Counter[int]) -> None:
        bulk[self.current] += 1
        add_blocks(self, reason, at)

    monkeypatch.setattr(GoalState, "__init__", keep)
    monkeypatch.setattr(GoalState, "add_blocks", counted)

    def run() -> tuple[RebalancePlan, dict[tuple[str, str], Counter[int]]]:
        plan = plan_rebalance(snapshot, load, goals=goals, disks=disks)
        return plan, dict(states[-1]._blocked_at)

    plan, blocked = run()
    assert bulk["topic_replicas"]  # the bulk counting was used
    assert bulk["topic_leaders"]
    if loaded and "leader_bytes_in" in goals:
        assert judged[True]  # leader_bytes_in turned some receivers down in bulk
    monkeypatch.setattr(search.Search, "_shut_tests", lambda self, t, items, s: [])
    one_by_one, blocked_one_by_one = run()
    assert plan.reassignment() == one_by_one.reassignment()
    assert plan.leader_moves == one_by_one.leader_moves
    assert plan.goals == one_by_one.goals
    assert list(blocked) == list(blocked_one_by_one)  # the reasons first met in the same order
    assert blocked == blocked_one_by_one
