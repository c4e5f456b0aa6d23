"""An election over 50,000 partitions goes in chunks each under the byte budget, and all complete.

The cluster (50 brokers, 250 topics x 200 partitions, RF 3, every partition led by its second replica) is
written into a real ZooKeeper by the bulk writer; the ZooKeeper collector keeps the snapshot the executor
verifies against. The controller's part is played by a small stand-in that does what Kafka's ZK-mode
controller does with ``/admin/preferred_replica_election``: read it, move each listed partition's
leadership to ``replicas[0]`` (leader epoch + 1, compare-and-set on the state znode), delete the znode. The
reference cluster's own controller does the same on small clusters (tests/app/service/test_actions.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from app.actions.config import ActionSettings
from app.actions.election import ElectionScope, plan_preferred_election
from app.actions.executor import ElectionExecutor
from app.actions.handle import ActionHandle, Gate
from app.actions.journal import ElectionJournal
from app.actions.state import ActionRecord, ActionState, MemoryActionLog
from app.embedded.reference_cluster.bulk import BulkClusterSpec, write_bulk_cluster
from app.embedded.reference_cluster.bulk.writer import KAFKA_ROOT_PATHS, delete_trees
from collectors.kafka import zkdata
from collectors.kafka.admin import KazooAdmin
from collectors.zookeeper.collector import ZooKeeperCollector
from tests.support.controller_stand_in import ControllerStandIn
from tests.support.reference_cluster import wait_for

pytestmark = pytest.mark.integration

BUDGET = 512 * 1024
PARTITIONS = 50_000


@pytest.fixture
def big_cluster(zk_connect: str, zk_client: KazooClient) -> Iterator[str]:
    spec = BulkClusterSpec(
        brokers=50, topics=250, partitions_per_topic=200, replication_factor=3, non_preferred_fraction=1.0
    )
    assert spec.partitions == PARTITIONS
    write_bulk_cluster(zk_connect, spec)
    yield zk_connect
    # kazoo's recursive delete of the chroot would take minutes for these 100k znodes; pipelined: seconds
    delete_trees([zk_client], list(KAFKA_ROOT_PATHS), batch_ops=500, in_flight=32)


def test_an_election_of_50k_partitions_goes_in_chunks_under_the_budget_and_completes(
    big_cluster: str, zk_client: KazooClient
) -> None:
    stand_in = ControllerStandIn(zk_client, big_cluster)
    stand_in.start()
    admin = KazooAdmin(big_cluster)
    try:
        with ZooKeeperCollector(big_cluster) as collector:
            plan = plan_preferred_election(collector.snapshot, ElectionScope.all_partitions())
            assert len(plan.to_elect) == PARTITIONS
            log = MemoryActionLog()
            journal = ElectionJournal(plan.to_elect, BUDGET)
            record = ActionRecord(
                "big", "preferred-replica-election", ActionState.PENDING, "test", 0.0, {}, journal.plan_json()
            )
            handle = ActionHandle(log, log.create(replace(record, owner="test")), "test")
            executor = ElectionExecutor(
                admin, lambda: collector.snapshot, Gate(), ActionSettings(verify_timeout_s=120)
            )
            done = executor.run(handle)
            wait_for(
                lambda: len(stand_in.elected) == PARTITIONS, timeout=60, message="every partition elected"
            )
    finally:
        stand_in.stop()
        admin.close()
    assert stand_in.failures == []
    assert done.state is ActionState.SUCCEEDED, (done.error, done.result)
    assert done.result["elected"] == PARTITIONS
    sizes = [len(p) for p in stand_in.payloads]
    assert len(sizes) >= 4, sizes
    assert max(sizes) <= BUDGET, sizes
    chunked = [tp for p in stand_in.payloads for tp in zkdata.decode_partition_list("/x", p)]
    assert len(chunked) == PARTITIONS
    assert set(chunked) == set(plan.to_elect)
    assert done.progress["chunks_written"] == done.progress["chunks"] == len(sizes)
    assert done.progress["step"] == {"done": len(sizes), "state": "pending"}
