"""``kafka-health reference-cluster``: run the simulated cluster in the foreground until SIGINT/SIGTERM.

Exit codes: 0 stopped, 1 the cluster could not start (its ZooKeeper failed or did not answer in time),
2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.common import (
    ExitCode,
    ListenError,
    listen_socket,
    settings_or_error,
    stop_signals,
    tcp_port,
)
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import (
    ConsumerGroupSpec,
    ReferenceClusterSettings,
    TopicSpec,
    load_reference_cluster_settings,
)
from app.embedded.reference_cluster.control import ControlServer
from app.embedded.zookeeper import EmbeddedZooKeeper, ZooKeeperServerError
from collectors.kafka.zkdata import parse_connect_string
from collectors.metrics.names import DIALECTS

HELP = "run simulated ZK-mode Kafka brokers (with an embedded ZooKeeper unless --zookeeper)"
DESCRIPTION = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="use this ZooKeeper")
    parser.add_argument(
        "--brokers",
        type=int,
        default=None,
        help="number of brokers, ids 0..N-1 (default 3, or KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERS)",
    )
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS:RF",
        help="a topic to create at start-up (repeatable)",
    )
    parser.add_argument(
        "--consumer-group",
        action="append",
        default=[],
        metavar="NAME:TOPIC[,TOPIC...]:MEMBERS",
        help="a simulated consumer group of start-up topics, committing every 5 s (repeatable)",
    )
    parser.add_argument(
        "--listener-port-base",
        type=int,
        default=None,
        help="broker i speaks Kafka's protocol on this port + i (default 19092; 0: free ports)",
    )
    parser.add_argument(
        "--control-port", type=tcp_port, help="control port on 127.0.0.1 (default: a free one)"
    )
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
    parser.add_argument("--metrics-port", type=tcp_port, default=None, help="with --address-per-broker")
    parser.add_argument(
        "--metrics-dialect",
        choices=DIALECTS,
        default=None,
        help="the jmx_exporter rule file whose names /metrics serves (default: jmx-exporter-example)",
    )


def settings_from_args(args: argparse.Namespace) -> ReferenceClusterSettings:
    """Flags over ``KAFKA_HEALTH_REFERENCE_CLUSTER__*`` over defaults; raises ValueError with a message."""
    if args.zookeeper is not None:
        parse_connect_string(args.zookeeper)
    base = load_reference_cluster_settings().model_dump()
    overrides: dict[str, Any] = {}
    if args.brokers is not None:
        overrides["brokers"] = args.brokers
    if args.topic:
        overrides["topics"] = [TopicSpec.parse(t).model_dump() for t in args.topic]
    if args.consumer_group:
        overrides["consumer_groups"] = [ConsumerGroupSpec.parse(g).model_dump() for g in args.consumer_group]
    if args.listener_port_base is not None:
        overrides["listener_port_base"] = args.listener_port_base
    if args.rack:
        overrides["racks"] = args.rack
    if args.inter_broker_protocol_version:
        overrides["inter_broker_protocol_version"] = args.inter_broker_protocol_version
    if args.replica_lag_time_max_ms is not None:
        overrides["replica_lag_time_max_ms"] = args.replica_lag_time_max_ms
    if args.auto_leader_rebalance is not None:
        overrides["auto_leader_rebalance_enable"] = args.auto_leader_rebalance == "true"
    if args.placement_seed is not None:
        overrides["placement_seed"] = args.placement_seed
    if args.address_per_broker:
        overrides["address_per_broker"] = True
    if args.metrics_port is not None:
        overrides["metrics_port"] = args.metrics_port
    if args.metrics_dialect is not None:
        overrides["metrics_dialect"] = args.metrics_dialect
    return ReferenceClusterSettings.model_validate(base | overrides)


def run(args: argparse.Namespace) -> int:
    settings = settings_or_error(lambda: settings_from_args(args), sys.stderr)
    if settings is None:
        return ExitCode.BAD_INPUT
    if args.control_port:
        try:  # before a ZooKeeper and brokers are started for nothing
            listen_socket("127.0.0.1", args.control_port).close()
        except ListenError as exc:
            print(f"error: control {exc}", file=sys.stderr)
            return ExitCode.FAILED
    with stop_signals() as stop:
        zookeeper: EmbeddedZooKeeper | None = None
        cluster: ReferenceCluster | None = None
        control: ControlServer | None = None
        try:
            connect = args.zookeeper
            if connect is None:
                zookeeper = EmbeddedZooKeeper()
                zookeeper.start()
                connect = zookeeper.connect_string
            cluster = ReferenceCluster(settings, connect)
            cluster.start()
            control = ControlServer(cluster, port=args.control_port or 0)
            control.start()
            print_banner(cluster, control)
            stop.wait()
            print("stopping...", flush=True)
        except ZooKeeperServerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.FAILED
        except TimeoutError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.FAILED
        finally:
            if control is not None:
                control.close()
            if cluster is not None:
                cluster.stop()
            if zookeeper is not None:
                zookeeper.stop()
    return ExitCode.OK


def print_banner(cluster: ReferenceCluster, control: ControlServer) -> None:
    state = cluster.describe()
    print(f"ZooKeeper: {cluster.zookeeper}")
    print(f"control:   {control.url}/")
    controller = state["controller"]
    if controller:
        print(f"controller: broker {controller['broker_id']} (epoch {controller['epoch']})")
    for broker in state["brokers"]:
        print(f"broker {broker['id']}: metrics {broker['metrics_url']}")
        print(f"broker {broker['id']}: kafka {broker['kafka_listener']}")
    print(f"bootstrap: {cluster.kafka_bootstrap()}")
    for topic in state["topics"]:
        print(f"topic {topic['name']}: {len(topic['partitions'])} partitions")
    for group in state["consumer_groups"]:
        print(f"consumer group {group['name']}: {', '.join(group['topics'])} ({group['members']} members)")
    print("ready (Ctrl-C to stop)", flush=True)
