"""What Kafka's own tool would do instead: ``kafka-reassign-partitions --generate`` lays the topics out from
scratch, and every plan reports how many replicas that would move, for comparison."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.placement import AdminOperationError, InvalidReplicationFactorError, assign_replicas


def kafka_generate_moves(
    snapshot: ClusterSnapshot, topics: Iterable[str], brokers: Sequence[int], *, seed: int = 0
) -> int | None:
    """Replicas added if ``kafka-reassign-partitions --generate`` laid ``topics`` out from scratch over
    ``brokers`` (``calculateAssignment``: per topic, ``assignReplicasToBrokers`` with the partition count
    and the replication factor of one of its partitions), rack-aware when every broker has a rack (as
    with ``--disable-rack-aware`` otherwise). None when Kafka would refuse (more replicas than brokers)."""
    by_topic: dict[str, dict[int, tuple[int, ...]]] = {}
    wanted = set(topics)
    for tp, info in snapshot.partitions.items():
        if tp.topic in wanted:
            by_topic.setdefault(tp.topic, {})[tp.partition] = info.assignment.replicas
    racks = {b: snapshot.brokers[b].rack if b in snapshot.brokers else None for b in brokers}
    layout: Sequence[int] | Mapping[int, str | None] = (
        racks if racks and all(r is not None for r in racks.values()) else sorted(brokers)
    )
    rng = random.Random(seed)
    moves = 0
    for topic in sorted(by_topic):
        current = by_topic[topic]
        rf = len(current[min(current)])
        try:
            proposed = assign_replicas(len(current), rf, layout, rng=rng)
        except (InvalidReplicationFactorError, AdminOperationError):
            return None
        for partition, replicas in proposed.items():
            moves += len(set(replicas).difference(current.get(partition, ())))
    return moves
