"""ISR churn between two snapshots, per follower broker: the partitions whose ISR it left and those whose ISR
it rejoined. Pure; exact for the two snapshots given (the service compares each snapshot version with the
one before, so a leave and rejoin between two versions it never saw are not counted: the brokers'
``IsrShrinksPerSec``/``IsrExpandsPerSec`` rates, ``isr_shrinks_per_s``/``isr_expands_per_s`` of the
metrics scrape, count those).

Only a replica's own transitions count: a broker that leaves an ISR because a reassignment removed it from
the partition, or that joins one for the first time as a replica being added, is not churn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from collectors.kafka.model import ClusterSnapshot, TopicPartition


@dataclass(frozen=True, slots=True)
class IsrChurn:
    """Follower broker id -> the partitions, sorted, whose ISR it left / rejoined between two snapshots."""

    left: Mapping[int, tuple[TopicPartition, ...]] = field(default_factory=dict)
    rejoined: Mapping[int, tuple[TopicPartition, ...]] = field(default_factory=dict)

    @property
    def brokers(self) -> tuple[int, ...]:
        """The brokers with at least one transition, sorted."""
        return tuple(sorted({*self.left, *self.rejoined}))

    def transitions(self, broker_id: int) -> int:
        """How many ISRs the broker left or rejoined."""
        return len(self.left.get(broker_id, ())) + len(self.rejoined.get(broker_id, ()))


def isr_churn(previous: ClusterSnapshot, snapshot: ClusterSnapshot) -> IsrChurn:
    """Each broker's ISR leaves and rejoins from ``previous`` to ``snapshot`` (partitions in both, with a
    readable state in both)."""
    left: dict[int, list[TopicPartition]] = {}
    rejoined: dict[int, list[TopicPartition]] = {}
    before = previous.partitions
    for tp, now in snapshot.partitions.items():
        was = before.get(tp)
        if was is None or was is now or was.state is None or now.state is None:
            continue
        old_isr, new_isr = was.state.isr, now.state.isr
        if old_isr == new_isr:
            continue
        replicas = set(now.assignment.replicas)
        for broker in set(old_isr) - set(new_isr):
            if broker in replicas:
                left.setdefault(broker, []).append(tp)
        first_time = set(was.assignment.adding_replicas)
        former = set(was.assignment.replicas) - first_time
        for broker in set(new_isr) - set(old_isr):
            if broker in former:
                rejoined.setdefault(broker, []).append(tp)
    return IsrChurn(
        {b: tuple(sorted(tps)) for b, tps in sorted(left.items())},
        {b: tuple(sorted(tps)) for b, tps in sorted(rejoined.items())},
    )
