"""What Kafka's own tool would do instead: ``kafka-reassign-partitions --generate`` lays the topics out from
scratch, and every plan reports how many replicas that would move, for comparison.

Only the count is wanted, so the layouts are not built list by list: Kafka's ``assignReplicasToBrokers``
places partition ``p`` of a topic by its first broker ``(p + start) % n`` and its shift
``shift + p // n`` alone, so the count is computed for every partition at once with numpy (the rack-aware
follower lists, which depend on the rack skips, are computed once per distinct first broker and shift).
The random draws are Kafka's (two per topic, topics in name order), so the count is the one the layouts
from :func:`collectors.kafka.placement.assign_replicas` give for the same seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from itertools import chain, compress
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.kafka.placement import rack_alternated_brokers

IntArray = npt.NDArray[np.int64]


def kafka_generate_moves(
    snapshot: ClusterSnapshot,
    topics: Iterable[str],
    brokers: Sequence[int],
    *,
    seed: int = 0,
    replicas: tuple[Sequence[TopicPartition], IntArray, IntArray] | None = None,
) -> int | None:
    """Replicas added if ``kafka-reassign-partitions --generate`` laid ``topics`` out from scratch over
    ``brokers`` (``calculateAssignment``: per topic, ``assignReplicasToBrokers`` with the partition count
    and the replication factor of one of its partitions), rack-aware when every broker has a rack (as
    with ``--disable-rack-aware`` otherwise). None when Kafka would refuse (more replicas than brokers).

    ``replicas``: the snapshot's partitions, their replicas (broker ids, all in a row) and their replica
    counts, in any partition order, when the caller has them already (the planners' model does): the
    count is the same, without walking the snapshot's partitions again."""
    wanted = set(topics)
    if replicas is None:
        tps = list(snapshot.partitions)
        current = list(map(attrgetter("assignment.replicas"), snapshot.partitions.values()))
        lengths = np.fromiter(map(len, current), dtype=np.int64, count=len(current))
        flat = np.fromiter(chain.from_iterable(current), dtype=np.int64, count=int(lengths.sum()))
        del current
    else:
        tps, flat, lengths = list(replicas[0]), replicas[1], replicas[2]
    names = list(map(attrgetter("topic"), tps))
    keep = list(map(wanted.__contains__, names))
    if not all(keep):
        kept = np.fromiter(keep, dtype=bool, count=len(keep))
        flat = flat[np.repeat(kept, lengths)]
        lengths = lengths[kept]
        tps = list(compress(tps, keep))
        names = list(compress(names, keep))
    if not tps:
        return 0
    racks = {b: snapshot.brokers[b].rack if b in snapshot.brokers else None for b in brokers}
    rack_aware = bool(racks) and all(r is not None for r in racks.values())
    arranged = (
        rack_alternated_brokers({b: str(r) for b, r in racks.items()}) if rack_aware else sorted(brokers)
    )
    n = len(arranged)

    ordered = sorted(dict.fromkeys(names))  # topics in name order, as Kafka's tool draws for them
    code = {name: i for i, name in enumerate(ordered)}
    topic_of = np.fromiter(map(code.__getitem__, names), dtype=np.int64, count=len(names))
    pid = np.fromiter(map(attrgetter("partition"), tps), dtype=np.int64, count=len(tps))
    del tps, names
    n_topics = len(ordered)
    n_partitions = np.bincount(topic_of, minlength=n_topics)
    # The replication factor of a topic is that of its lowest partition id.
    order = np.lexsort((pid, topic_of))
    firsts = order[np.r_[0, np.flatnonzero(np.diff(topic_of[order])) + 1]]
    rf = lengths[firsts]
    if int(rf.min()) <= 0 or int(rf.max()) > n:
        return None
    rng = random.Random(seed)
    draws = np.array([(rng.randrange(n), rng.randrange(n)) for _ in range(n_topics)], dtype=np.int64)

    width = int(lengths.max())
    if int(lengths.min()) == width:
        held = flat.reshape(len(lengths), width)
    else:
        held = np.full((len(lengths), width), -1, dtype=np.int64)
        ends = np.cumsum(lengths)
        held[
            np.repeat(np.arange(len(lengths)), lengths),
            np.arange(len(flat)) - np.repeat(ends - lengths, lengths),
        ] = flat

    placed = pid < n_partitions[topic_of]  # partitions --generate lays out; the others are all new
    rows = np.flatnonzero(placed)
    p = pid[rows]
    t = topic_of[rows]
    first = (p + draws[t, 0]) % n
    shift = draws[t, 1] + p // n
    proposed = _layouts(arranged, racks if rack_aware else None, first, shift, int(rf.max()))
    overlap = np.zeros(len(rows), dtype=np.int64)
    replica_rf = rf[t]
    placed_held = held if len(rows) == len(held) else held[rows]  # rows are every row, or a copy once
    for j in range(proposed.shape[1]):
        hit = (placed_held == proposed[:, j : j + 1]).any(axis=1)
        overlap += hit & (j < replica_rf)
    return int((n_partitions * rf).sum() - overlap.sum())


def _layouts(
    arranged: list[int], racks: dict[int, str | None] | None, first: IntArray, shift: IntArray, rf: int
) -> IntArray:
    """The first ``rf`` replicas Kafka places for each (first broker index, shift) pair."""
    n = len(arranged)
    ring = np.array(arranged, dtype=np.int64)
    out = np.empty((len(first), rf), dtype=np.int64)
    out[:, 0] = ring[first]
    if rf == 1:
        return out
    span = n - 1  # rf > 1 means n > 1
    if racks is None:
        for j in range(rf - 1):
            out[:, j + 1] = ring[(first + 1 + (shift + j) % span) % n]
        return out
    rack_names = sorted({str(r) for r in racks.values()})
    rack_of = np.array([rack_names.index(str(racks[b])) for b in arranged], dtype=np.int64)
    key = first * span + (shift * len(rack_names)) % span
    unique, inverse = np.unique(key, return_inverse=True)
    table = _rack_aware_followers(rack_of, len(rack_names), unique // span, unique % span, rf)
    out[:, 1:] = ring[table[inverse.reshape(-1)]]
    return out


def _rack_aware_followers(
    rack_of: IntArray, n_racks: int, first: IntArray, shifted: IntArray, rf: int
) -> IntArray:
    """Kafka's rack-aware followers (ring indices) of partitions led by ring index ``first``, all at once:
    as :func:`collectors.kafka.placement.assign_replicas`, the k-th candidate is ring index
    ``(first + 1 + (shifted + k) % (n - 1)) % n`` (``shifted`` being the shift times the racks, modulo
    ``n - 1``), skipped while its rack already has a replica and some rack has none, or while its broker
    already has one and some broker has none."""
    n = len(rack_of)
    rows = len(first)
    chosen = np.full((rows, rf), -1, dtype=np.int64)
    chosen[:, 0] = first
    found = np.ones(rows, dtype=np.int64)  # replicas placed so far, the leader included
    rack_seen = np.zeros((rows, n_racks), dtype=bool)
    rack_seen[np.arange(rows), rack_of[first]] = True
    racks_used = np.ones(rows, dtype=np.int64)
    k = 0
    active = found < rf
    while active.any():
        idx = np.flatnonzero(active)
        cand = (first[idx] + 1 + (shifted[idx] + k) % (n - 1)) % n
        rack = rack_of[cand]
        rack_ok = ~rack_seen[idx, rack] | (racks_used[idx] == n_racks)
        broker_ok = ~(chosen[idx] == cand[:, None]).any(axis=1) | (found[idx] == n)
        take = idx[rack_ok & broker_ok]
        taken = cand[rack_ok & broker_ok]
        chosen[take, found[take]] = taken
        racks_used[take] += ~rack_seen[take, rack_of[taken]]
        rack_seen[take, rack_of[taken]] = True
        found[take] += 1
        active[take] = found[take] < rf
        k += 1
    return chosen[:, 1:]
