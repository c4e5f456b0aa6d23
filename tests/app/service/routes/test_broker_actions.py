"""Demoting, promoting and decommissioning a broker through the API, on one 4-broker reference cluster for
the module (with a consumer group, so that ``__consumer_offsets`` exists as Kafka creates it), ZooKeeper
read back with a kazoo session of the test's own.

- demote: the broker leads nothing, and every replica set is what it was (a reorder copies nothing);
- promote: exactly the recorded order back, the broker leads its preferred partitions again; a second
  promotion is a 409; the refusals (unknown broker 422, no demotion 409);
- decommission (the module's last test: it empties a broker): the dry run lists the internal partitions
  and the checks; run, it ends ``removable: true`` with no replica of any topic, ``__consumer_offsets``
  included, and no throttle or dynamic config of the broker left.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ConsumerGroupSpec, TopicSpec
from app.embedded.reference_cluster.groups import OFFSETS_TOPIC
from collectors.kafka import zkdata
from collectors.kafka.admin import read_entity_config
from tests.support.reference_cluster import ZkPartition, small_settings, wait_for, zk_partitions
from tests.support.service import Service, serving
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = pytest.mark.integration

DEMOTE = "/api/v1/actions/demote-broker"
PROMOTE = "/api/v1/actions/promote-broker"
DECOMMISSION = "/api/v1/actions/decommission-broker"
BROKER = 1
"""The broker demoted and promoted."""
DRAINED = 3
"""The broker decommissioned."""


@pytest.fixture(scope="module")
def service(
    zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    store: Path = tmp_path_factory.mktemp("broker-actions") / "store.db"
    with own_chroot(zookeeper_server, "broker-actions") as zk_connect:
        settings = small_settings(
            brokers=4,
            topics=[TopicSpec(name="orders", partitions=8, replication_factor=3)],
            traffic={"initial_log_bytes": 256 * 1024, "produce_bytes_per_sec": 4 * 1024},
        )
        cluster = ReferenceCluster(settings, zk_connect)
        cluster.start()
        try:
            cluster.add_consumer_group(ConsumerGroupSpec(name="billing", topics=["orders"]))
            with serving(cluster, zk_connect, f"sqlite:///{store}", reference=False) as served:
                yield served
        finally:
            cluster.stop()
        assert not cluster.errors, cluster.errors


@pytest.fixture(scope="module")
def zk(service: Service) -> Iterator[KazooClient]:
    client = KazooClient(hosts=service.zk_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def partitions(zk: KazooClient) -> dict[tuple[str, int], ZkPartition]:
    return zk_partitions(zk)


def done(service: Service, action_id: str, timeout: float = 90) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = service.get(f"/api/v1/actions/{action_id}").json()
        return body if body["state"] in ("SUCCEEDED", "PARTIAL", "FAILED", "CANCELLED") else None

    return wait_for(ended, timeout=timeout, message=f"action {action_id} finished")


def settled(zk: KazooClient) -> dict[tuple[str, int], ZkPartition]:
    """The partitions once every one is fully in sync (the reference cluster's followers caught up)."""

    def in_sync() -> dict[tuple[str, int], ZkPartition] | None:
        now = partitions(zk)
        return now if all(len(p.isr) == len(p.replicas) and p.leader != -1 for p in now.values()) else None

    return wait_for(in_sync, timeout=60, message="every partition in sync")


def test_demote_leads_nothing_without_copying_and_promote_restores_the_recorded_order(
    service: Service, zk: KazooClient
) -> None:
    before = settled(zk)
    assert any(key[0] == OFFSETS_TOPIC for key in before), "the consumer group created __consumer_offsets"
    preferred = sorted(key for key, p in before.items() if p.replicas[0] == BROKER)
    assert preferred

    dry = service.post(DEMOTE, json={"broker": BROKER})
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert (plan["dry_run"], plan["action_id"], plan["left"]) == (True, None, [])
    assert sorted((r["topic"], r["partition"]) for r in plan["reorders"]) == preferred
    for reorder in plan["reorders"]:
        assert reorder["replicas_after"][-1] == BROKER
        assert sorted(reorder["replicas_after"]) == sorted(reorder["replicas_before"])
    assert partitions(zk) == before, "a dry run changes nothing"

    run = service.post(DEMOTE, json={"broker": BROKER, "dry_run": False})
    assert run.status_code == 202, run.text
    demotion = done(service, run.json()["action_id"])
    assert demotion["state"] == "SUCCEEDED", demotion
    assert demotion["result"]["leads"] == 0
    demoted = partitions(zk)
    assert [key for key, p in demoted.items() if p.leader == BROKER] == [], "the broker leads nothing"
    for key, p in demoted.items():
        assert sorted(p.replicas) == sorted(before[key].replicas), f"{key}: the replica set is unchanged"
        assert p.adding_replicas == (), f"{key}: nothing is copied"
        if key in preferred:
            assert p.replicas == (*before[key].replicas[1:], BROKER), key

    assert service.post(PROMOTE, json={"broker": 2}).status_code == 409
    refused = service.post(DEMOTE, json={"broker": 42})
    assert refused.status_code == 422
    assert "broker 42 is not registered" in refused.json()["detail"]

    dry = service.post(PROMOTE, json={"broker": BROKER})
    assert dry.status_code == 200, dry.text
    assert dry.json()["demotion"] == demotion["id"]
    run = service.post(PROMOTE, json={"broker": BROKER, "dry_run": False})
    assert run.status_code == 202, run.text
    promotion = done(service, run.json()["action_id"])
    assert promotion["state"] == "SUCCEEDED", promotion
    promoted = partitions(zk)
    assert {k: p.replicas for k, p in promoted.items()} == {k: p.replicas for k, p in before.items()}
    assert [k for k in preferred if promoted[k].leader != BROKER] == [], "it leads its preferred partitions"
    again = service.post(PROMOTE, json={"broker": BROKER})
    assert again.status_code == 409
    assert "no recorded demotion" in again.json()["detail"]


def test_a_decommission_moves_every_replica_internal_topics_included_and_ends_removable(
    service: Service, zk: KazooClient
) -> None:
    settled(zk)
    offsets_on_it = [k for k, p in partitions(zk).items() if k[0] == OFFSETS_TOPIC and DRAINED in p.replicas]
    assert offsets_on_it, "the broker holds __consumer_offsets partitions"

    dry = service.post(DECOMMISSION, json={"broker": DRAINED, "throttle_bytes_per_sec": 64 * 1024 * 1024})
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["dry_run"] is True
    assert plan["internal_partitions"] == len(offsets_on_it)
    assert plan["would_be_left"] == []
    assert any("__consumer_offsets" in check for check in plan["verify"])
    assert plan["reassignment"]["throttle_brokers"], "the throttle it would set"

    body = {"broker": DRAINED, "throttle_bytes_per_sec": 64 * 1024 * 1024, "max_concurrent_moves": 100}
    run = service.post(DECOMMISSION, json={**body, "dry_run": False})
    assert run.status_code == 202, run.text
    action = done(service, run.json()["action_id"], timeout=180)
    assert action["state"] == "SUCCEEDED", action
    assert action["result"]["removable"] is True, action["result"]
    assert action["result"]["left"] == []
    assert action["result"]["throttles_removed"] is True
    left = [k for k, p in partitions(zk).items() if DRAINED in p.replicas]
    assert left == [], "no replica of any topic on the broker"
    assert read_entity_config(zk, "brokers", str(DRAINED)) == {}
    for topic in zk.get_children(f"{zkdata.CONFIG_PATH}/topics"):
        config = read_entity_config(zk, "topics", topic)
        assert not any(k.endswith("throttled.replicas") for k in config), (topic, config)
