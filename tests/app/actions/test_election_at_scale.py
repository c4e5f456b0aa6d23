"""An election over 50,000 partitions goes in chunks each under the byte budget, and all complete.

The cluster (50 brokers, 250 topics x 200 partitions, RF 3, every partition led by its second replica) is
written into a real ZooKeeper by the bulk writer; the ZooKeeper collector keeps the snapshot the executor
verifies against. The controller's part is played by a small stand-in that does what Kafka's ZK-mode
controller does with ``/admin/preferred_replica_election``: read it, move each listed partition's
leadership to ``replicas[0]`` (leader epoch + 1, compare-and-set on the state znode), delete the znode. The
reference cluster's own controller does the same on small clusters (tests/app/service/test_actions.py).
"""

from __future__ import annotations

import threading
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
from collectors.kafka.model import LeaderAndIsr, TopicPartition
from collectors.zookeeper.collector import ZooKeeperCollector, scan
from tests.support.reference_cluster import wait_for

pytestmark = pytest.mark.integration

BUDGET = 512 * 1024
PARTITIONS = 50_000


class ControllerStandIn:
    """Processes preferred replica elections as Kafka's controller does (state cached from one read of the
    cluster, writes compare-and-set on the state znodes' versions, in transactions), recording every
    payload it was given."""

    def __init__(self, zk: KazooClient, connect: str) -> None:
        self.zk = zk
        self.context = dict(scan(connect).partitions.items())
        self.payloads: list[bytes] = []
        self.elected: list[TopicPartition] = []
        self.failures: list[str] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-stand-in", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            stat = self.zk.exists(zkdata.PREFERRED_REPLICA_ELECTION_PATH, watch=lambda _: self._wake.set())
            if stat is None:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            try:
                self._elect()
            except Exception as exc:  # recorded, and the znode goes as the controller's would
                self.failures.append(repr(exc))
            self.zk.delete(zkdata.PREFERRED_REPLICA_ELECTION_PATH)

    def _elect(self) -> None:
        data, _ = self.zk.get(zkdata.PREFERRED_REPLICA_ELECTION_PATH)
        self.payloads.append(data)
        chosen = []
        for tp in zkdata.decode_partition_list(zkdata.PREFERRED_REPLICA_ELECTION_PATH, data):
            info = self.context[tp]
            state, preferred = info.state, info.assignment.replicas[0]
            if state is None or state.leader == preferred or preferred not in state.isr:
                continue
            chosen.append(
                (tp, LeaderAndIsr(preferred, state.leader_epoch + 1, state.isr, state.controller_epoch))
            )
        pending = []
        for start in range(0, len(chosen), 500):
            transaction = self.zk.transaction()
            for tp, new in chosen[start : start + 500]:
                version = self.context[tp].state.zk_version  # type: ignore[union-attr]
                transaction.set_data(
                    zkdata.partition_state_path(tp), zkdata.encode_partition_state(new), version
                )
            pending.append((chosen[start : start + 500], transaction.commit_async()))
        for batch, result in pending:
            outcomes = result.get(timeout=60)
            failed = [o for o in outcomes if isinstance(o, Exception)]
            if failed:
                raise failed[0]
            self.elected.extend(tp for tp, _ in batch)


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
