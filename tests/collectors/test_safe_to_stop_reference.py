"""Safe to stop against the reference cluster: for every broker, the answer (one scan, the cluster-wide
pass, and ``kafka-health safe-to-stop --format json`` per broker) agrees with an independent computation
made here from raw ZooKeeper reads with kazoo: the state znodes, ``/config/topics/<T>`` and
``/config/brokers/<default>``, parsed as JSON without the collectors' code.

The cluster has an RF-1 topic, a topic with ``min.insync.replicas=2`` and an ordinary one; the answers are
compared healthy, then with a stalled broker out of the ISRs it follows, then with a broker down.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from app.cli.main import main
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from collectors.safe_to_stop import ClusterSafeToStop, assess_safe_to_stop
from collectors.zookeeper.collector import scan
from tests.support.reference_cluster import ClusterFactory, live_broker_ids, wait_for, zk_partitions

pytestmark = pytest.mark.integration

Verdicts = dict[int, tuple[frozenset[str], frozenset[str]]]
"""broker -> (partitions that would go offline, partitions that would go under min ISR), as "topic-p"."""


def independent(zk: KazooClient) -> Verdicts:
    """The rule computed from ZooKeeper alone: a partition with b in its ISR goes offline when the ISR is
    [b], under min ISR when |ISR| - 1 < min(min.insync.replicas, |replicas|); min.insync.replicas from the
    topic's config, else the dynamic broker default, else 1 (the reference brokers' static value)."""
    default = _min_isr(_config(zk, "/config/brokers/<default>")) or 1
    partitions = zk_partitions(zk)
    min_isr = {topic: _min_isr(_config(zk, f"/config/topics/{topic}")) or default for topic, _ in partitions}
    verdicts: Verdicts = {}
    for broker in live_broker_ids(zk):
        offline, under = set(), set()
        for (topic, index), p in partitions.items():
            if p.leader is None or broker not in p.isr:
                continue
            name = f"{topic}-{index}"
            if len(p.isr) == 1:
                offline.add(name)
            elif len(p.isr) - 1 < min(min_isr[topic], len(p.replicas)):
                under.add(name)
        verdicts[broker] = (frozenset(offline), frozenset(under))
    return verdicts


def _config(zk: KazooClient, path: str) -> dict[str, str]:
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return {}
    config: dict[str, str] = json.loads(data).get("config", {})
    return config


def _min_isr(config: dict[str, str]) -> int | None:
    value = config.get("min.insync.replicas")
    return int(value) if value is not None else None


def of_answers(view: ClusterSafeToStop) -> Verdicts:
    return {
        b: (
            frozenset(str(tp) for tp in a.would_go_offline),
            frozenset(str(tp) for tp in a.would_go_under_min_isr),
        )
        for b, a in view.brokers.items()
        if a.registered
    }


def cli_answer(
    capsys: pytest.CaptureFixture[str], zk_connect: str, broker: int
) -> tuple[int, dict[str, Any]]:
    code = main(["safe-to-stop", "--zookeeper", zk_connect, "--broker", str(broker), "--format", "json"])
    body: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, body


def agree(zk: KazooClient, zk_connect: str, capsys: pytest.CaptureFixture[str]) -> Verdicts:
    """Compares while the cluster holds still: the independent reads before and after the product's
    reads must be equal (an ISR change in between would make the comparison meaningless, so it is
    retried)."""

    def stable() -> tuple[Verdicts, ClusterSafeToStop, dict[int, tuple[int, dict[str, Any]]]] | None:
        before = independent(zk)
        view = assess_safe_to_stop(scan(zk_connect))
        cli = {b: cli_answer(capsys, zk_connect, b) for b in before}
        return (before, view, cli) if independent(zk) == before else None

    expected, view, cli = wait_for(stable, timeout=30, message="a quiet cluster to compare on")
    assert of_answers(view) == expected
    for broker, (code, body) in cli.items():
        offline, under = expected[broker]
        assert {f"{p['topic']}-{p['partition']}" for p in body["would_go_offline"]} == offline
        assert {f"{p['topic']}-{p['partition']}" for p in body["would_go_under_min_isr"]} == under
        assert body["safe"] is (not offline and not under)
        assert code == (0 if body["safe"] else 3)
    return expected


def start(make_cluster: ClusterFactory) -> ReferenceCluster:
    return make_cluster(
        brokers=4,
        topics=[
            TopicSpec(name="orders", partitions=4, replication_factor=3),
            TopicSpec(
                name="payments", partitions=4, replication_factor=3, config={"min.insync.replicas": "2"}
            ),
            TopicSpec(name="scratch", partitions=2, replication_factor=1),
        ],
    )


def test_every_broker_agrees_with_zookeeper_healthy_stalled_and_down(
    make_cluster: ClusterFactory,
    zk_connect: str,
    zk_client: KazooClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = start(make_cluster)

    healthy = agree(zk_client, zk_connect, capsys)
    single = {f"{t}-{i}": p.replicas[0] for (t, i), p in zk_partitions(zk_client).items() if t == "scratch"}
    for broker, (offline, under) in healthy.items():
        assert offline == {name for name, owner in single.items() if owner == broker}, "only RF-1 ones"
        assert under == set()

    # a stalled broker leaves the ISR of every partition it follows; where it leads, it stays
    controller = cluster.controller.broker_id if cluster.controller is not None else None
    stalled = min(b for b in cluster.brokers if b != controller)
    cluster.stall_follower(stalled)

    def out_of_follower_isrs() -> bool:
        return all(
            stalled not in p.isr
            for p in zk_partitions(zk_client).values()
            if stalled in p.replicas and p.leader != stalled
        )

    wait_for(out_of_follower_isrs, timeout=60, message=f"broker {stalled} out of the ISRs")
    with_stall = agree(zk_client, zk_connect, capsys)
    followed = [
        f"{t}-{i}"
        for (t, i), p in zk_partitions(zk_client).items()
        if t == "payments" and stalled in p.replicas and p.leader != stalled
    ]
    assert followed, "the placement gives the stalled broker a payments partition it follows"
    partners = {b for b in with_stall if b != stalled}
    assert any(set(followed) & with_stall[b][1] for b in partners), "min ISR 2: the others are needed now"

    # a broker down: its registration is gone, the others' answers follow
    cluster.resume_follower(stalled)
    down = max(partners)
    cluster.stop_broker(down)
    wait_for(lambda: down not in live_broker_ids(zk_client), message=f"broker {down} deregistered")
    with_down = agree(zk_client, zk_connect, capsys)
    assert down not in with_down
    view = assess_safe_to_stop(scan(zk_connect))
    assert view.brokers[down].registered is False
    assert view.brokers[down].safe is True
