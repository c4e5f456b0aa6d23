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

    describe = sub.add_parser(
        "describe",
        help="read a cluster once and print its state and health (text or JSON)",
        description="Exit codes: 0 read (even with problems), 1 cannot read the cluster, 2 bad input, "
        "3 unhealthy with --fail-on-unhealthy.",
    )
    add_describe_arguments(describe)

    collect = sub.add_parser(
        "collect",
        help="run the collectors and write samples (spool directory or Kafka topic) for the analytics job",
        description="Exit codes: 0 stopped (or --once done), 1 cannot reach the cluster or the sink, "
        "2 bad input.",
    )
    from app.cli.collect import add_collect_arguments

    add_collect_arguments(collect)

    analytics = sub.add_parser(
        "analytics",
        help="run the PySpark streaming job: samples -> load model -> alert rules -> store",
        description="Exit codes: 0 stopped, 1 the job failed, 2 bad input.",
    )
    from app.cli.analytics import add_analytics_arguments

    add_analytics_arguments(analytics)

    serve = sub.add_parser(
        "serve",
        help="the REST service: cluster state, load, alerts, /metrics and runbook actions",
        description="Exit codes: 0 stopped, 1 cannot start, 2 bad input.",
    )
    from app.cli.serve import add_serve_arguments

    add_serve_arguments(serve)

    demo = sub.add_parser(
        "demo",
        help="everything on the embedded default (ZooKeeper, brokers, collectors, Spark, service), a story",
    )
    demo.add_argument("--brokers", type=int, default=5, help="number of brokers (default 5)")
    demo.add_argument("--port", type=_port, help="the service's port (default: a free one)")
    demo.add_argument(
        "--once", action="store_true", help="play the story once and exit (instead of running until Ctrl-C)"
    )
    return parser


def add_describe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zookeeper", required=True, metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper"
    )
    parser.add_argument(
        "--metrics-url-template",
        metavar="T",
        help="brokers' metrics, e.g. http://{host}:7071/metrics: adds the URP gauge cross-check",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--under-replicated", action="store_true", help="only under-replicated partitions")
    parser.add_argument("--under-min-isr", action="store_true", help="only partitions under min ISR")
    parser.add_argument("--unavailable", action="store_true", help="only offline partitions")
    parser.add_argument("--non-preferred", action="store_true", help="only partitions not led by replicas[0]")
    parser.add_argument("--fail-on-unhealthy", action="store_true", help="exit 3 when anything is unhealthy")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to read the cluster (default 30)"
    )


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
    parser.add_argument(
        "--address-per-broker",
        action="store_true",
        help="broker i on 127.0.0.(i+1) with one common metrics port, so http://{host}:PORT/metrics works",
    )
    parser.add_argument("--metrics-port", type=_port, default=None, help="with --address-per-broker")


def configure_logging() -> None:
    """Warnings and errors to stderr; kazoo's connection retries are expected noise, so only its errors."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging()
    if args.command == "zookeeper":
        from app.embedded.zookeeper import run_zookeeper_cli

        return run_zookeeper_cli(args.port, args.data_dir)
    if args.command == "reference-cluster":
        from app.cli.reference_cluster import run_reference_cluster

        return run_reference_cluster(args)
    if args.command == "describe":
        from app.cli.describe import run_describe

        return run_describe(args)
    if args.command == "collect":
        from app.cli.collect import run_collect

        return run_collect(args)
    if args.command == "analytics":
        from app.cli.analytics import run_analytics

        return run_analytics(args)
    if args.command == "serve":
        from app.cli.serve import run_serve

        return run_serve(args)
    if args.command == "demo":
        from app.cli.demo import run_demo

        return run_demo(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
