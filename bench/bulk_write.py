"""Benchmark: write a large ZK-mode Kafka cluster into ZooKeeper with the reference cluster's bulk mode.

    .venv/bin/python bench/bulk_write.py [--brokers 1000 --topics 1000 --partitions-per-topic 200 --rf 3]
                                         [--connections N --batch-ops N --in-flight N]
                                         [--zookeeper HOST:PORT[/CHROOT] [--overwrite]]

Without ``--zookeeper`` it starts an embedded ZooKeeper (``--heap``, 2g by default: 200k partitions take
about 400k znodes) and stops it at the end. After the write it re-reads a random sample of the state
znodes (``--sample``, 1% by default) with their topic znodes and a sample of the brokers, and checks that
they decode with the collectors' decoders and agree with each other.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from app.embedded.reference_cluster.bulk import (
    DEFAULT_BATCH_OPS,
    DEFAULT_CONNECTIONS,
    DEFAULT_IN_FLIGHT,
    BulkClusterSpec,
    BulkWriteError,
    BulkWriteReport,
    write_bulk_cluster,
)
from app.embedded.zookeeper import EmbeddedZooKeeper, ZooKeeperServerError
from collectors.kafka import zkdata
from collectors.kafka.model import NO_LEADER, ReplicaAssignment, TopicPartition

READ_WINDOW = 512


class SampleCheckError(Exception):
    """A re-read znode does not decode or disagrees with the spec."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--brokers", type=int, default=1000)
    cluster.add_argument("--topics", type=int, default=1000)
    cluster.add_argument("--partitions-per-topic", type=int, default=200)
    cluster.add_argument("--rf", type=int, default=3, help="replication factor")
    cluster.add_argument("--racks", type=int, default=0, help="0 = no racks")
    cluster.add_argument("--under-replicated", type=float, default=0.0, metavar="FRACTION")
    cluster.add_argument("--offline", type=float, default=0.0, metavar="FRACTION")
    cluster.add_argument("--non-preferred", type=float, default=0.0, metavar="FRACTION")
    cluster.add_argument("--seed", type=int, default=0)
    writer = parser.add_argument_group("writer")
    writer.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    writer.add_argument("--batch-ops", type=int, default=DEFAULT_BATCH_OPS)
    writer.add_argument("--in-flight", type=int, default=DEFAULT_IN_FLIGHT)
    writer.add_argument("--overwrite", action="store_true", help="delete a cluster already in the target")
    target = parser.add_argument_group("target")
    target.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="default: an embedded ZooKeeper")
    target.add_argument("--heap", default="2g", help="heap of the embedded ZooKeeper (default 2g)")
    parser.add_argument("--sample", type=float, default=0.01, help="share of state znodes re-read (0.01)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser.parse_args(argv)


def spec_from(args: argparse.Namespace) -> BulkClusterSpec:
    return BulkClusterSpec(
        brokers=args.brokers,
        topics=args.topics,
        partitions_per_topic=args.partitions_per_topic,
        replication_factor=args.rf,
        racks=args.racks,
        under_replicated_fraction=args.under_replicated,
        offline_fraction=args.offline,
        non_preferred_fraction=args.non_preferred,
        seed=args.seed,
    )


@contextmanager
def zookeeper(args: argparse.Namespace) -> Iterator[str]:
    """The connect string: the user's, or an embedded server's, stopped on the way out."""
    if args.zookeeper:
        yield args.zookeeper
        return
    started = time.monotonic()
    with EmbeddedZooKeeper(heap=args.heap) as server:
        print(
            f"embedded ZooKeeper at {server.connect_string} (heap {args.heap}, "
            f"started in {time.monotonic() - started:.1f}s)",
            flush=True,
        )
        yield server.connect_string


def print_report(report: BulkWriteReport) -> None:
    if report.deleted_znodes:
        print(f"deleted   {report.deleted_znodes:,} znodes first, in {report.delete_seconds:.2f}s")
    print(f"cluster   {report.brokers:,} brokers, {report.topics:,} topics, {report.partitions:,} partitions")
    print(
        f"faults    {report.under_replicated:,} under-replicated, {report.offline:,} offline, "
        f"{report.non_preferred:,} non-preferred"
    )
    print(f"znodes    {report.znodes:,}")
    print(f"seconds   {report.seconds:.2f}")
    print(f"znodes/s  {report.znodes_per_second:,.0f}")
    print(f"partitions/s {report.partitions_per_second:,.0f}", flush=True)


def _get_all(client: KazooClient, paths: Sequence[str]) -> Iterator[tuple[str, bytes | None]]:
    """(path, data) for each path, ``READ_WINDOW`` gets in flight."""
    for start in range(0, len(paths), READ_WINDOW):
        chunk = paths[start : start + READ_WINDOW]
        for path, result in zip(chunk, [client.get_async(p) for p in chunk], strict=True):
            yield path, result.get(timeout=60)[0]


def check_sample(connect: str, spec: BulkClusterSpec, fraction: float) -> dict[str, int]:
    """Re-read a random sample of state, topic and broker znodes; raise SampleCheckError on a mismatch."""
    rng = random.Random()
    n_states = max(1, round(spec.partitions * fraction))
    picks = rng.sample(range(spec.partitions), n_states)
    tps = [
        TopicPartition(spec.topic_name(i // spec.partitions_per_topic), i % spec.partitions_per_topic)
        for i in picks
    ]
    topics = sorted({tp.topic for tp in tps})
    brokers = rng.sample(range(spec.brokers), max(1, round(spec.brokers * fraction)))
    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    try:
        assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        for path, data in _get_all(client, [zkdata.topic_path(t) for t in topics]):
            assignments[path.rsplit("/", 1)[1]] = zkdata.decode_topic(path, data)[0]
        for path, data in _get_all(client, [zkdata.partition_state_path(tp) for tp in tps]):
            _check_state(path, data, assignments)
        for path, data in _get_all(client, [zkdata.broker_path(b) for b in brokers]):
            zkdata.decode_broker_registration(path, int(path.rsplit("/", 1)[1]), data)
    except zkdata.ZnodeFormatError as exc:
        raise SampleCheckError(str(exc)) from exc
    finally:
        client.stop()
        client.close()
    return {"state": len(tps), "topic": len(topics), "broker": len(brokers)}


def _check_state(path: str, data: bytes | None, assignments: dict[str, dict[int, ReplicaAssignment]]) -> None:
    parts = path.split("/")  # /brokers/topics/<T>/partitions/<P>/state
    topic, partition = parts[-4], int(parts[-2])
    state = zkdata.decode_partition_state(path, data)
    assignment = assignments[topic].get(partition)
    if assignment is None:
        raise SampleCheckError(f"{path}: partition {partition} is missing from the topic znode")
    replicas = assignment.replicas
    if (state.leader != NO_LEADER and state.leader not in replicas) or not set(state.isr) <= set(replicas):
        raise SampleCheckError(f"{path}: leader {state.leader} / isr {state.isr} not within {replicas}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its connection retries; our error says it all
    try:
        spec = spec_from(args)
        if not 0 < args.sample <= 1:
            raise ValueError(f"--sample must be a fraction in (0, 1], got {args.sample}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress = None if args.quiet else (lambda message: print(f"  {message}", flush=True))
    try:
        with zookeeper(args) as connect:
            report = write_bulk_cluster(
                connect,
                spec,
                connections=args.connections,
                batch_ops=args.batch_ops,
                in_flight=args.in_flight,
                overwrite=args.overwrite,
                progress=progress,
            )
            print_report(report)
            checked = check_sample(connect, spec, args.sample)
            print(
                f"checked   {checked['state']:,} state, {checked['topic']:,} topic and "
                f"{checked['broker']:,} broker znodes: all decode and agree"
            )
    except (BulkWriteError, SampleCheckError, ZooKeeperServerError, KazooException, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
