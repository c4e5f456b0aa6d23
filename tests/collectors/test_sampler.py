"""The sampler: rounds of samples from the live snapshot and the brokers' metrics to the transport.

Unit tests drive it with a hand-built snapshot behind the SnapshotSource interface and a sink that fails
on demand (the transport's own interface); the integration tests run it on the reference cluster with the
real ZooKeeper collector, real HTTP scrapes and a spool directory, and read the samples back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from analytics.model import HealthState
from collectors.kafka.model import ClusterSnapshot, ControllerInfo
from collectors.metrics import MetricsCollector
from collectors.sampler import Sampler, SamplerSettings
from collectors.samples import Sample, SampleNumbering
from collectors.transport import SpoolDirectorySink, TransportError
from collectors.zookeeper.collector import ZooKeeperCollector
from tests.support import snapshots
from tests.support.reference_cluster import ClusterFactory, wait_for


def snapshot(isr: tuple[int, ...] = (0, 1, 2), registered: tuple[int, ...] = (0, 1, 2)) -> ClusterSnapshot:
    """Version 3 of cluster c1 (taken and good at 100 s, no topic znode read): brokers ``registered``,
    controller 0 (epoch 7) and orders-0 on 0, 1, 2, led by 0 with ISR ``isr``."""
    return snapshots.cluster(
        snapshots.partition("orders", 0, (0, 1, 2), isr, leader=0, controller_epoch=7),
        brokers=registered,
        topics={},
        controller=ControllerInfo(0, 7),
        cluster_id="c1",
        version=3,
        taken_at=100.0,
        last_good_at=100.0,
    )


@dataclass
class Source:
    snapshot: ClusterSnapshot
    in_sync: bool = True


class FlakySink:
    def __init__(self) -> None:
        self.failing = False
        self.batches: list[list[Sample]] = []

    def write(self, samples: Sequence[Sample]) -> None:
        if self.failing:
            raise TransportError("disk full")
        self.batches.append(list(samples))

    def close(self) -> None:
        pass


def sampler(source: Source, sink: FlakySink, clock: list[float], **settings: float) -> Sampler:
    return Sampler(
        source,
        sink,
        SampleNumbering("c-1"),
        settings=SamplerSettings(**settings),  # type: ignore[arg-type]
        clock=lambda: clock[0],
    )


@pytest.mark.unit
def test_a_round_is_one_sample_per_registered_broker_and_one_cluster_sample() -> None:
    sink = FlakySink()
    result = sampler(Source(snapshot(isr=(0, 1))), sink, [200.0]).sample_once()
    assert result.samples == 4
    assert result.error is None
    (batch,) = sink.batches
    assert [(s.kind, s.broker, s.sequence) for s in batch] == [
        ("broker", 0, 0),
        ("broker", 1, 1),
        ("broker", 2, 2),
        ("cluster", None, 3),
    ]
    assert {s.timestamp for s in batch} == {200.0}
    cluster = batch[-1]
    assert cluster.metrics["under_replicated"] == 1.0
    state = HealthState.from_json(cluster.health, cluster="c1", collector_id="c-1", timestamp=200.0)
    assert state.under_replicated.by_topic == {"orders": 1}
    assert state.under_replicated.examples == {"orders": (0,)}
    assert [s.broker_id for s in state.suspects] == [2]
    assert state.controller_epoch == 7


@pytest.mark.unit
def test_a_named_cluster_s_samples_carry_its_name_and_an_unnamed_one_its_id() -> None:
    named, unnamed = FlakySink(), FlakySink()
    Sampler(Source(snapshot()), named, SampleNumbering("p"), cluster="prod").sample_once()
    Sampler(Source(snapshot()), unnamed, SampleNumbering("u")).sample_once()
    assert {s.cluster for s in named.batches[0]} == {"prod"}
    assert {s.cluster for s in unnamed.batches[0]} == {"c1"}  # the snapshot's /cluster/id
    nameless = replace(snapshot(), cluster_id=None)
    Sampler(Source(nameless), unnamed, SampleNumbering("n")).sample_once()
    assert {s.cluster for s in unnamed.batches[1]} == {"unknown"}


@pytest.mark.unit
def test_a_snapshot_in_sync_is_good_as_of_the_round_and_a_stale_one_is_not() -> None:
    sink = FlakySink()
    clock = [500.0]
    source = Source(snapshot())
    s = sampler(source, sink, clock)
    s.sample_once()
    source.in_sync = False
    source.snapshot = replace(source.snapshot, stale=True)
    clock[0] = 520.0
    s.sample_once()
    docs = [b[-1].health for b in sink.batches]
    assert [d["snapshot"]["last_good_at"] for d in docs if d] == [500.0, 100.0]
    assert [d["snapshot"]["stale"] for d in docs if d] == [False, True]


@pytest.mark.unit
def test_failed_batches_are_kept_and_written_in_order_before_new_ones() -> None:
    sink = FlakySink()
    clock = [0.0]
    s = sampler(Source(snapshot()), sink, clock)
    sink.failing = True
    first = s.sample_once()
    clock[0] = 10.0
    second = s.sample_once()
    assert (first.error, second.backlog) == ("disk full", 2)
    sink.failing = False
    clock[0] = 20.0
    third = s.sample_once()
    assert (third.written, third.backlog, third.error) == (3, 0, None)
    assert [b[0].timestamp for b in sink.batches] == [0.0, 10.0, 20.0]
    sequences = [x.sequence for b in sink.batches for x in b]
    assert sequences == list(range(12))


@pytest.mark.unit
def test_a_full_backlog_drops_the_oldest_batch_and_counts_it() -> None:
    sink = FlakySink()
    clock = [0.0]
    s = sampler(Source(snapshot()), sink, clock, max_backlog=2)
    sink.failing = True
    for t in (0.0, 10.0, 20.0):
        clock[0] = t
        s.sample_once()
    assert (s.backlog, s.dropped_batches) == (2, 1)
    sink.failing = False
    s.sample_once()
    assert [b[0].timestamp for b in sink.batches] == [10.0, 20.0, 20.0]


@pytest.mark.unit
def test_run_keeps_a_fixed_rate_and_stops() -> None:
    sink = FlakySink()
    s = Sampler(Source(snapshot()), sink, SampleNumbering("c"), settings=SamplerSettings(interval_s=0.05))
    stop = threading.Event()
    thread = threading.Thread(target=s.run, args=(stop,))
    started = time.monotonic()
    thread.start()
    deadline = started + 60
    while s.rounds < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=60)
    ran_s = time.monotonic() - started
    assert not thread.is_alive()
    assert s.rounds >= 5
    # never faster than its rate (a busy machine only makes rounds late, never early)
    assert s.rounds <= ran_s / 0.05 + 2, (s.rounds, ran_s)


# --- on the reference cluster ----------------------------------------------------------------------------


def read_spool(directory: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("*.ndjson"))
        for line in path.read_text().splitlines()
    ]


@pytest.mark.integration
def test_samples_from_the_reference_cluster_follow_a_stopped_broker(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    cluster = make_cluster()
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    spool = tmp_path / "spool"
    with (
        ZooKeeperCollector(zk_connect, connections=2) as collector,
        MetricsCollector(urls=urls, timeout_s=2.0) as metrics,
    ):
        s = Sampler(collector, SpoolDirectorySink(spool), SampleNumbering("it"), metrics=metrics)
        s.sample_once()
        time.sleep(0.3)
        healthy = s.sample_once()
        assert healthy.scrape_failures == {}
        cluster.stop_broker(2)

        def shrunk() -> bool:
            """Broker 2 is gone and the controller has taken it out of an ISR (the registration goes
            first: a sample in between sees its partitions lagging, none under-replicated yet)."""
            snapshot = collector.snapshot
            return 2 not in snapshot.brokers and any(
                2 in p.replicas and 2 not in p.isr for p in snapshot.partitions.values()
            )

        wait_for(shrunk, message="broker 2 gone from the snapshot and out of an ISR")
        down = s.sample_once()
    assert down.scrape_failures.keys() <= {2}
    rows = read_spool(spool)
    assert [r["sequence"] for r in rows] == list(range(len(rows)))
    broker_rows = [r for r in rows if r["kind"] == "broker"]
    second_round = [r for r in broker_rows if r["timestamp"] == healthy.started_at]
    assert sorted(r["broker"] for r in second_round) == sorted(cluster.brokers)  # type: ignore[type-var]
    assert all("cpuUsed" in r["metrics"] for r in second_round)  # type: ignore[operator]
    last = rows[-1]
    assert last["kind"] == "cluster"
    state = HealthState.from_json(
        last["health"], cluster=str(last["cluster"]), collector_id="it", timestamp=0.0
    )
    assert 2 not in state.brokers
    assert state.under_replicated.count > 0
    assert state.urp_zookeeper is not None
