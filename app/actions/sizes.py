"""How many bytes a reassignment copies, and how long that takes under a throttle: from the partitions'
log sizes the brokers' metrics serve (``kafka.log:type=Log,name=Size``, the service's periodic scrape).
Pure (no I/O).

A partition's size (:func:`partition_sizes`) is its **leader's** log size, what a new replica copies
(followers hold at most that); without the leader's figure (not scraped, no leader) the largest of its
other replicas'; absent when no broker holding it served one. A move copies that size once per replica it
adds (:func:`copy_bytes`).

The time a reassignment takes at a throttle (:func:`copy_seconds`): Kafka's replication throttle is a rate
per broker and direction (``leader.replication.throttled.rate`` caps what a broker sends,
``follower.replication.throttled.rate`` what it receives), so a batch takes as long as its busiest broker
needs, sending or receiving, at the rate; the batches run one after the other. A lower bound: produce
traffic into the moving partitions adds to what is copied, and the copy never beats the disks or network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from app.actions.reassignment import ReassignmentRequest, added_replicas
from collectors.kafka.model import NO_LEADER, ClusterSnapshot, TopicPartition
from collectors.metrics import MetricsScrape


def partition_sizes(
    snapshot: ClusterSnapshot, scrape: MetricsScrape | None, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """``partitions``' sizes in bytes (see the module note); a partition no broker gave a size for is left
    out."""
    if scrape is None:
        return {}
    by_broker = {b: s.log_sizes for b, s in scrape.scrapes.items() if s.ok and s.log_sizes}
    if not by_broker:
        return {}
    sizes: dict[TopicPartition, int] = {}
    for tp in partitions:
        info = snapshot.partitions.get(tp)
        if info is None:
            continue
        leader = info.leader if info.state is not None else NO_LEADER
        size = by_broker.get(leader, {}).get(tp)
        if size is None:
            known = [s for b in info.assignment.replicas if (s := by_broker.get(b, {}).get(tp)) is not None]
            size = max(known) if known else None
        if size is not None:
            sizes[tp] = size
    return sizes


def copy_bytes(size: int | None, added: int) -> int | None:
    """Bytes a move adding ``added`` replicas copies (0 when it adds none); None when the size is not
    known."""
    if added == 0:
        return 0
    return None if size is None else size * added


def copy_seconds(
    batches: Sequence[Sequence[ReassignmentRequest]],
    snapshot: ClusterSnapshot,
    sizes: Mapping[TopicPartition, int],
    rate_bytes_per_s: int | None,
) -> float | None:
    """The seconds the batches take at the throttle ``rate_bytes_per_s`` (module note); None without a
    rate or when a moving partition's size is not known."""
    if rate_bytes_per_s is None or rate_bytes_per_s <= 0:
        return None
    total = 0.0
    for batch in batches:
        received: dict[int, int] = {}
        sent: dict[int, int] = {}
        for item in batch:
            added = added_replicas(item, snapshot)
            if not added:
                continue
            size = sizes.get(item.tp)
            if size is None:
                return None
            info = snapshot.partitions.get(item.tp)
            source = info.leader if info is not None and info.state is not None else NO_LEADER
            sent[source] = sent.get(source, 0) + size * len(added)
            for broker in added:
                received[broker] = received.get(broker, 0) + size
        busiest = max([*received.values(), *sent.values()], default=0)
        total += busiest / rate_bytes_per_s
    return total
