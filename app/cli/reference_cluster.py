"""``kafka-health reference-cluster``: run the simulated cluster in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TopicSpec
from app.embedded.reference_cluster.control import ControlServer
from app.embedded.zookeeper import EmbeddedZooKeeper, ZooKeeperServerError
from app.settings import load_settings
from app.validation import format_validation_error
from collectors.kafka.zkdata import parse_connect_string


def settings_from_args(args: argparse.Namespace) -> ReferenceClusterSettings:
    """Flags over ``KAFKA_HEALTH_REFERENCE_CLUSTER__*`` over defaults; raises ValueError with a message."""
    if args.zookeeper is not None:
        parse_connect_string(args.zookeeper)
    base = load_settings().reference_cluster.model_dump()
    overrides: dict[str, Any] = {"brokers": args.brokers}
    if args.topic:
        overrides["topics"] = [TopicSpec.parse(t).model_dump() for t in args.topic]
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
    return ReferenceClusterSettings.model_validate(base | overrides)


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM; the previous handlers come back afterwards."""
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_reference_cluster(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        print(f"error: {format_validation_error(exc)}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
            return 1
        except TimeoutError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        finally:
            if control is not None:
                control.close()
            if cluster is not None:
                cluster.stop()
            if zookeeper is not None:
                zookeeper.stop()
    return 0


def print_banner(cluster: ReferenceCluster, control: ControlServer) -> None:
    state = cluster.describe()
    print(f"ZooKeeper: {cluster.zookeeper}")
    print(f"control:   {control.url}/")
    controller = state["controller"]
    if controller:
        print(f"controller: broker {controller['broker_id']} (epoch {controller['epoch']})")
    for broker in state["brokers"]:
        print(f"broker {broker['id']}: metrics {broker['metrics_url']}")
    for topic in state["topics"]:
        print(f"topic {topic['name']}: {len(topic['partitions'])} partitions")
    print("ready (Ctrl-C to stop)", flush=True)
