"""A stand-in for Kafka's ZK-mode controller's handling of ``/admin/preferred_replica_election``, for tests
on clusters the bulk writer put in ZooKeeper (no simulated brokers): read the znode, move each listed
partition's leadership to ``replicas[0]`` (leader epoch + 1, compare-and-set on the state znode), delete
the znode. The reference cluster's own controller does the same on small clusters."""

from __future__ import annotations

import threading

from kazoo.client import KazooClient

from collectors.kafka import zkdata
from collectors.kafka.model import LeaderAndIsr, TopicPartition
from collectors.kafka.zkclient import ZooKeeperSecurity
from collectors.zookeeper.collector import scan


class ControllerStandIn:
    """Processes preferred replica elections as Kafka's controller does (state cached from one read of the
    cluster, writes compare-and-set on the state znodes' versions, in transactions), recording every
    payload it was given. ``held``: it takes an election only when the test allows it (:meth:`allow`,
    :meth:`release`), so that a test can stop the service between two chunks."""

    def __init__(
        self, zk: KazooClient, connect: str, *, held: bool = False, security: ZooKeeperSecurity | None = None
    ) -> None:
        self.zk = zk
        self._permits = threading.Semaphore(0)
        self._held = held
        self.context = dict(scan(connect, security=security).partitions.items())
        self.payloads: list[bytes] = []
        self.elected: list[TopicPartition] = []
        self.failures: list[str] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-stand-in", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def allow(self, chunks: int = 1) -> None:
        """Held: take ``chunks`` more elections (then hold again)."""
        for _ in range(chunks):
            self._permits.release()

    def release(self) -> None:
        """Take every election from now on."""
        self._held = False
        self._permits.release()

    def stop(self) -> None:
        self._stop.set()
        self._held = False
        self._permits.release()
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            stat = self.zk.exists(zkdata.PREFERRED_REPLICA_ELECTION_PATH, watch=lambda _: self._wake.set())
            if stat is None:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            if self._held:
                self._permits.acquire()
                if self._stop.is_set():
                    return
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
