"""``kafka-health``: one command line, a subcommand per process (see docs/architecture.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-health",
        description="Cluster health for ZooKeeper-mode Apache Kafka.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    zk = sub.add_parser("zookeeper", help="run a real ZooKeeper server from the jars in the pyspark wheel")
    zk.add_argument("--port", type=_port, help="client port (default: a free one)")
    zk.add_argument("--data-dir", type=Path, help="data directory (default: a private temporary one)")

    rc = sub.add_parser(
        "reference-cluster",
        help="run simulated ZK-mode Kafka brokers (with an embedded ZooKeeper unless --zookeeper)",
    )
    add_reference_cluster_arguments(rc)

    demo = sub.add_parser("demo", help="the reference cluster with a scripted fault, narrated")
    demo.add_argument("--brokers", type=int, default=4, help="number of brokers (default 4)")
    demo.add_argument("--control-port", type=_port, help="control port (default: a free one)")
    demo.add_argument(
        "--once", action="store_true", help="run the script once and exit (instead of running until Ctrl-C)"
    )
    return parser


def add_reference_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="use this ZooKeeper")
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers, ids 0..N-1 (default 3)")
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS:RF",
        help="a topic to create at start-up (repeatable)",
    )
    parser.add_argument("--control-port", type=_port, help="control port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--rack", action="append", default=[], help="racks given to brokers in turn")
    parser.add_argument(
        "--inter-broker-protocol-version", default=None, help="what the brokers write, e.g. 2.6 or 3.9"
    )
    parser.add_argument("--replica-lag-time-max-ms", type=int, default=None)
    parser.add_argument(
        "--auto-leader-rebalance", choices=["true", "false"], default=None, help="Kafka's default: true"
    )
    parser.add_argument("--placement-seed", type=int, default=None, help="reproducible replica placement")


def configure_logging() -> None:
    """Warnings and errors to stderr; kazoo's connection retries are expected noise, so only its errors."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging()
    if args.command == "zookeeper":
        from app.zookeeper_server import run_zookeeper_cli

        return run_zookeeper_cli(args.port, args.data_dir)
    if args.command == "reference-cluster":
        from app.reference_cluster.cli import run_reference_cluster

        return run_reference_cluster(args)
    if args.command == "demo":
        from app.reference_cluster.demo import run_demo

        return int(run_demo(args))
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
