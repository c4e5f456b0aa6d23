"""Planning a rebalance: the fewest replica moves (after free leader moves) that bring every broker's load
deviation |r_n| under the rated deviation r, and draining a broker. Pure: a snapshot and load samples in,
a plan out; the reassignment executor carries it out.

The package, along its seams:

- :mod:`~app.actions.rebalance.plan`: the plan types (:class:`RebalancePlan`, :class:`ReplicaMove`,
  :class:`LeaderMove`, :class:`LoadSummary`) and why a partition is skipped.
- :mod:`~app.actions.rebalance.model`: the model built from the snapshot and the load (load attribution
  to replicas and leaderships), and the load predicted after a plan.
- :mod:`~app.actions.rebalance.balancer`: the greedy (leader moves, then replica moves) and the lower bound.
- :mod:`~app.actions.rebalance.goals`: the goals a plan works to in priority order (racks, disks, counts,
  topics, load), the guard every move passes, and each goal's report (why it was not met).
- :mod:`~app.actions.rebalance.search`: the searches of the goals other than ``load``.
- :mod:`~app.actions.rebalance.walk`: ``disk_usage``'s and ``replica_count``'s sheds judged as arrays (the
  guard's answers for a broker's first replicas at a receiver at once).
- :mod:`~app.actions.rebalance.planners`: :func:`plan_rebalance` and :func:`plan_drain`.
- :mod:`~app.actions.rebalance.generate`: Kafka's ``--generate`` comparison, :func:`kafka_generate_moves`.
"""

from app.actions.rebalance.generate import kafka_generate_moves
from app.actions.rebalance.goals import DEFAULT_GOALS, GOALS, DiskInput, GoalOptions, GoalReport
from app.actions.rebalance.model import (
    COLLINEAR_CONDITION,
    COUNT_METRICS,
    LEADER_ONLY_PRIOR,
    LEADERS,
    PARTITIONS,
    LoadInput,
)
from app.actions.rebalance.plan import (
    SKIP_DEAD_REPLICA,
    SKIP_DELETING,
    SKIP_NO_STATE,
    SKIP_OFFLINE,
    SKIP_REASSIGNING,
    LeaderMove,
    LoadSummary,
    RebalancePlan,
    ReplicaMove,
)
from app.actions.rebalance.planners import DEFAULT_RATED_DEVIATION, plan_drain, plan_rebalance

__all__ = [
    "COLLINEAR_CONDITION",
    "COUNT_METRICS",
    "DEFAULT_GOALS",
    "DEFAULT_RATED_DEVIATION",
    "GOALS",
    "LEADERS",
    "LEADER_ONLY_PRIOR",
    "PARTITIONS",
    "SKIP_DEAD_REPLICA",
    "SKIP_DELETING",
    "SKIP_NO_STATE",
    "SKIP_OFFLINE",
    "SKIP_REASSIGNING",
    "DiskInput",
    "GoalOptions",
    "GoalReport",
    "LeaderMove",
    "LoadInput",
    "LoadSummary",
    "RebalancePlan",
    "ReplicaMove",
    "kafka_generate_moves",
    "plan_drain",
    "plan_rebalance",
]
