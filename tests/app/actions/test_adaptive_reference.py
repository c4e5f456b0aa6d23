"""The adaptive throttle's controller in a closed loop with the reference cluster: a reassignment copies a
large partition under a replication throttle that :func:`next_rate` moves, from the brokers' request
signals scraped over HTTP, written to ZooKeeper as Kafka's tool writes throttles. The rate climbs while the
brokers are idle, falls when its own replication takes them past the threshold, drops to the floor while
producers load the destination broker, and climbs again once they stop; never outside its bounds.

This drives the controller directly (not the executor), to check what the controller and the brokers'
signals do together, with the default thresholds, against brokers whose replication honours throttles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from kazoo.client import KazooClient

from app.actions.adaptive import AdaptiveThrottle, ThrottleDecision, next_rate, signals_from_scrape
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from collectors.kafka import zkdata
from collectors.kafka.admin import write_entity_config
from collectors.kafka.model import BrokerRegistration, TopicPartition
from collectors.metrics import MetricsCollector
from tests.support.reference_cluster import ClusterFactory, wait_for, zk_partitions

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
BIG = TopicPartition("big", 0)
THROTTLE = AdaptiveThrottle(
    mode="adaptive", min_bytes_per_s=4 * MIB, max_bytes_per_s=120 * MIB, interval_s=1.0
)
"""The request's default thresholds and step (11.6 MiB/s), a 1 s interval: the cluster's signals are
smoothed over 0.5 s here, not a minute."""


@dataclass
class ThrottleLoop:
    """The executor's part, reduced to the throttle: scrape, decide, write the brokers' rates."""

    zk: KazooClient
    collector: MetricsCollector
    brokers: dict[int, BrokerRegistration]
    involved: tuple[int, ...]
    rate: int = THROTTLE.initial_rate
    last_change_at: float | None = None
    decisions: list[ThrottleDecision] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def write(self) -> None:
        rate = str(self.rate)
        for broker in self.involved:
            write_entity_config(
                self.zk,
                "brokers",
                str(broker),
                {"leader.replication.throttled.rate": rate, "follower.replication.throttled.rate": rate},
            )

    def run_until(self, done: Callable[[ThrottleDecision | None], bool], timeout: float, what: str) -> float:
        """Step every 0.2 s until ``done`` (given each step's decision); returns the seconds it took."""
        began = time.monotonic()
        while time.monotonic() < began + timeout:
            signals = signals_from_scrape(self.collector.scrape(self.brokers))
            now = time.monotonic()
            decision = next_rate(self.rate, signals, self.involved, (), now, self.last_change_at, THROTTLE)
            if decision is not None:
                assert THROTTLE.min_bytes_per_s <= decision.rate <= THROTTLE.max_bytes_per_s
                self.rate, self.last_change_at = decision.rate, decision.at
                self.decisions.append(decision)
                self.write()
            if done(decision):
                return time.monotonic() - began
            time.sleep(0.2)
        reasons = "\n".join(f"{d.at - self.started:6.1f} s {d.reason}" for d in self.decisions)
        raise AssertionError(f"not {what} within {timeout:g} s; the decisions:\n{reasons}")


def test_the_rate_follows_the_brokers_load_within_its_bounds(
    make_cluster: ClusterFactory, zk_client: KazooClient
) -> None:
    cluster: ReferenceCluster = make_cluster(
        topics=[TopicSpec.parse("big:1:1"), TopicSpec.parse("orders:6:1")],
        traffic={
            "initial_log_bytes": 64 * 1024 * MIB,  # 64 GiB: the copy outlasts the test at any rate
            "produce_bytes_per_sec": MIB,
            "signal_smoothing_s": 0.5,
        },
    )
    partitions = zk_partitions(zk_client)
    source = partitions[("big", 0)].leader
    assert source is not None
    destination = next(b for b in sorted(cluster.brokers) if b != source)
    assert any(p.leader == destination for (t, _), p in partitions.items() if t == "orders")
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    with MetricsCollector(urls=urls, timeout_s=2.0) as collector:
        loop = ThrottleLoop(
            zk_client, collector, {b: BrokerRegistration(b, ()) for b in urls}, (source, destination)
        )
        loop.write()
        write_entity_config(
            zk_client,
            "topics",
            "big",
            {
                "leader.replication.throttled.replicas": f"0:{source}",
                "follower.replication.throttled.replicas": f"0:{destination}",
            },
        )
        zk_client.create(
            zkdata.REASSIGN_PARTITIONS_PATH, zkdata.encode_reassignment({BIG: (source, destination)})
        )
        wait_for(
            lambda: destination in zk_partitions(zk_client)[("big", 0)].replicas, message="the new replica"
        )

        # 1. idle brokers: the rate climbs by the step until the copy itself takes them past the threshold
        climbed = loop.run_until(
            lambda d: d is not None and d.direction == "lower", 30, "lowered by its own load"
        )
        peak = max(d.previous for d in loop.decisions)
        first_lower = loop.decisions[-1]
        assert peak >= 60 * MIB, f"the rate should climb well above its floor before it hurts: {peak}"
        assert all(d.direction == "raise" for d in loop.decisions[:-1])
        assert "idle" in first_lower.reason, first_lower.reason
        assert any(f.broker in (source, destination) for f in first_lower.findings)

        # 2. producers load the destination: the rate goes to the floor and stays there
        cluster.skew({"brokers": {str(destination): 20}})
        floored = loop.run_until(lambda _: loop.rate == THROTTLE.min_bytes_per_s, 20, "at the floor")
        held_since = len(loop.decisions)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            loop.run_until(lambda _: True, 1, "a step")
            assert loop.rate == THROTTLE.min_bytes_per_s, "still loaded: the rate stays at the floor"
        assert len(loop.decisions) == held_since

        # 3. the producers stop: the rate climbs again
        cluster.skew({"reset": True})
        recovered = loop.run_until(
            lambda _: loop.rate >= THROTTLE.min_bytes_per_s + 3 * THROTTLE.step, 20, "climbing again"
        )

    print(  # the figures for the notes (pytest -s)
        f"\nclimbed to {peak / MIB:.1f} MiB/s and lowered in {climbed:.1f} s; floored in {floored:.1f} s "
        f"under load; {(THROTTLE.min_bytes_per_s + 3 * THROTTLE.step) / MIB:.1f} MiB/s again "
        f"{recovered:.1f} s after the load stopped; {len(loop.decisions)} decisions"
    )
