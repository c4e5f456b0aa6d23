"""Replica placement at topic creation, after ``kafka.admin.AdminUtils.assignReplicasToBrokers``.

Kafka starts at a random broker and shifts the second replica by a random amount so that topics spread
differently; ``fixed_start_index`` pins both (Kafka's ``fixedStartIndex``), and ``rng`` makes them
reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


class InvalidReplicationFactorError(ValueError):
    """More replicas asked for than there are brokers (Kafka's ``InvalidReplicationFactorException``)."""


class InvalidPartitionsError(ValueError):
    """A partition count below one (Kafka's ``InvalidPartitionsException``)."""


class AdminOperationError(ValueError):
    """Racks given for some brokers but not all (Kafka's ``AdminOperationException``)."""


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, n: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (n - 1)
    return (first_replica_index + shift) % n


def rack_alternated_brokers(broker_racks: Mapping[int, str]) -> list[int]:
    """One broker per rack in turn: racks sorted by name, brokers of a rack by id.

    ``{0: r1, 1: r3, 2: r3, 3: r2, 4: r2, 5: r1}`` gives ``[0, 3, 1, 5, 4, 2]`` (Kafka's own example).
    """
    by_rack: dict[str, list[int]] = {}
    for broker, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker)
    iterators = {rack: iter(sorted(brokers)) for rack, brokers in by_rack.items()}
    racks = sorted(iterators)
    result: list[int] = []
    rack_index = 0
    while len(result) < len(broker_racks):
        candidate: int | None = next(iterators[racks[rack_index]], None)
        if candidate is not None:
            result.append(candidate)
        rack_index = (rack_index + 1) % len(racks)
    return result


def assign_replicas(
    n_partitions: int,
    replication_factor: int,
    brokers: Sequence[int] | Mapping[int, str | None],
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replica lists per partition id, rack-aware when every broker has a rack.

    ``brokers`` is a list of ids, or a map id -> rack (None for no rack). As Kafka's
    ``RackAwareMode.Enforced``, racks on some brokers but not all is an error.
    """
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    racks: dict[int, str] = {}
    if isinstance(brokers, Mapping):
        ids = sorted(brokers)
        racks = {b: r for b, r in brokers.items() if r is not None}
    else:
        ids = sorted(brokers)
    if replication_factor > len(ids):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(ids)}."
        )
    if racks and len(racks) != len(ids):
        raise AdminOperationError("Not all brokers have rack information for replica rack aware assignment.")
    rng = rng or random.Random()
    if racks:
        return _assign_rack_aware(
            n_partitions, replication_factor, racks, fixed_start_index, start_partition_id, rng
        )
    return _assign_rack_unaware(
        n_partitions, replication_factor, ids, fixed_start_index, start_partition_id, rng
    )


def _start_and_shift(n: int, fixed_start_index: int, rng: random.Random) -> tuple[int, int]:
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    return rng.randrange(n), rng.randrange(n)


def _assign_rack_unaware(
    n_partitions: int,
    replication_factor: int,
    brokers: list[int],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    n = len(brokers)
    start_index, shift = _start_and_shift(n, fixed_start_index, rng)
    assignment: dict[int, list[int]] = {}
    partition_id = max(0, start_partition_id)
    for _ in range(n_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        replicas = [brokers[first]]
        replicas += [brokers[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        assignment[partition_id] = replicas
        partition_id += 1
    return assignment


def _assign_rack_aware(
    n_partitions: int,
    replication_factor: int,
    broker_racks: dict[int, str],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(broker_racks)
    n = len(arranged)
    n_racks = len(set(broker_racks.values()))
    start_index, shift = _start_and_shift(n, fixed_start_index, rng)
    assignment: dict[int, list[int]] = {}
    partition_id = max(0, start_partition_id)
    for _ in range(n_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {broker_racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                rack = broker_racks[broker]
                k += 1
                # Skip a broker whose rack already has a replica while some rack has none, and a broker
                # that already has one while some broker has none.
                if (rack not in racks_used or len(racks_used) == n_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        assignment[partition_id] = replicas
        partition_id += 1
    return assignment
