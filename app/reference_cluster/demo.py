"""``kafka-health demo``: the embedded default with a scripted fault, narrated.

Starts a real ZooKeeper and a 4-broker reference cluster, then crashes a broker, brings it back, runs a
preferred replica election and stalls a follower, printing after each step what ZooKeeper and the brokers'
``/metrics`` endpoints show. Later issues put the collectors, analytics and the REST service on top.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request
from collections import Counter
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from app.reference_cluster.cli import stop_signals
from app.reference_cluster.cluster import ReferenceCluster
from app.reference_cluster.config import ReferenceClusterSettings, TopicSpec
from app.reference_cluster.control import ControlServer
from app.zookeeper_server import EmbeddedZooKeeper, ZooKeeperServerError
from collectors.model import TopicPartition

LAG_MS = 4000


def urp_from_metrics(cluster: ReferenceCluster) -> int:
    """Sum of ``kafka_server_replicamanager_underreplicatedpartitions`` over the brokers that answer."""
    total = 0
    for broker in cluster.brokers.values():
        url = cluster.metrics_url(broker.id)
        if url is None or not broker.alive:
            continue
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            if family.name == "kafka_server_replicamanager_underreplicatedpartitions":
                total += int(sum(sample.value for sample in family.samples))
    return total


def summary(cluster: ReferenceCluster) -> str:
    state: dict[str, Any] = cluster.describe()
    partitions = [p for t in state["topics"] for p in t["partitions"]]
    leaders = Counter(p["leader"] for p in partitions)
    non_preferred = sum(1 for p in partitions if p["leader"] != p["replicas"][0])
    offline = sum(1 for p in partitions if p["leader"] is None or p["leader"] < 0)
    under = sum(1 for p in partitions if len(p["isr"]) < len(p["replicas"]))
    controller = state["controller"]
    alive = [b["id"] for b in state["brokers"] if b["state"] == "running"]
    return (
        f"brokers up {alive}, controller {controller['broker_id'] if controller else None} "
        f"(epoch {controller['epoch'] if controller else '-'}); leaders per broker "
        f"{dict(sorted(leaders.items()))}; under-replicated {under} (brokers' URP gauges sum to "
        f"{urp_from_metrics(cluster)}); offline {offline}; non-preferred leaders {non_preferred}"
    )


def say(step: str, cluster: ReferenceCluster) -> None:
    print(f"\n== {step}\n   {summary(cluster)}", flush=True)


def run_script(cluster: ReferenceCluster, pause: float) -> None:
    say("healthy cluster", cluster)
    cluster.stop_broker(2)
    time.sleep(pause)
    say("broker 2 crashed: its partitions elected new leaders from their ISRs", cluster)
    cluster.start_broker(2)
    time.sleep(pause)
    say(
        "broker 2 is back: it rejoined the ISRs but leads nothing (Kafka does not hand leadership back)",
        cluster,
    )
    assert cluster.admin is not None
    partitions = [
        TopicPartition(t["name"], p["partition"])
        for t in cluster.describe()["topics"]
        for p in t["partitions"]
    ]
    cluster.admin.elect_preferred(partitions)
    time.sleep(pause)
    say(
        "preferred replica election via /admin/preferred_replica_election: leadership balanced again", cluster
    )
    cluster.stall_follower(1)
    time.sleep(LAG_MS / 1000 * 1.6)
    say(f"broker 1's fetchers stalled for > replica.lag.time.max.ms ({LAG_MS} ms): it left the ISRs", cluster)
    cluster.resume_follower(1)
    time.sleep(pause)
    say("broker 1 resumed: caught up and back in the ISRs", cluster)


def run_demo(args: argparse.Namespace) -> int:
    settings = ReferenceClusterSettings(
        brokers=args.brokers,
        topics=[
            TopicSpec(name="orders", partitions=12, replication_factor=3),
            TopicSpec(
                name="payments", partitions=6, replication_factor=3, config={"min.insync.replicas": "2"}
            ),
        ],
        replica_lag_time_max_ms=LAG_MS,
        auto_leader_rebalance_enable=False,
        placement_seed=42,
    )
    with stop_signals() as stop:
        zookeeper = EmbeddedZooKeeper()
        cluster: ReferenceCluster | None = None
        control: ControlServer | None = None
        try:
            zookeeper.start()
            cluster = ReferenceCluster(settings, zookeeper.connect_string)
            cluster.start()
            control = ControlServer(cluster, port=args.control_port or 0)
            control.start()
            print(f"ZooKeeper {zookeeper.connect_string}; control port {control.url}/", flush=True)
            for broker in cluster.brokers.values():
                print(f"broker {broker.id} metrics: {cluster.metrics_url(broker.id)}")
            run_script(cluster, pause=2.0)
            if not args.once:
                print(
                    f"\nThe cluster keeps running. Inject faults with e.g.\n"
                    f"  curl -X POST {control.url}/brokers/0/stop\n"
                    f'  curl -X POST {control.url}/load/skew -d \'{{"brokers": {{"1": 3}}}}\'\n'
                    "Ctrl-C stops everything.",
                    flush=True,
                )
                stop.wait()
        except ZooKeeperServerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        finally:
            if control is not None:
                control.close()
            if cluster is not None:
                cluster.stop()
            zookeeper.stop()
    return 0
