"""What Kafka's ZooKeeper-mode admin tools write (``kafka-topics``, ``kafka-configs``,
``kafka-preferred-replica-election``, ``kafka-reassign-partitions``), through their own session.

The reference cluster uses it to create its topics and tests use it to act on the cluster from outside,
exactly as an operator's tool would: the brokers only ever see the znodes. The entity configs are written
by :func:`collectors.kafka.admin.write_entity_config`, the writer the runbook actions use too; topic
creation, partitions, deletion and the election and reassignment requests as the tools refuse them are
the simulator's own.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from app.embedded.reference_cluster.config import validate_topic_name
from collectors.kafka import zkdata
from collectors.kafka.admin import write_entity_config
from collectors.kafka.model import ReplicaAssignment, TopicPartition
from collectors.kafka.placement import assign_replicas


class AdminError(Exception):
    """A request an admin tool refuses, with Kafka's message."""


class TopicExistsError(AdminError):
    pass


class OperationInProgressError(AdminError):
    pass


class ZkAdmin:
    def __init__(
        self, client: KazooClient, topic_znode_version: int = 3, rng: random.Random | None = None
    ) -> None:
        self.zk = client
        self.topic_znode_version = topic_znode_version
        self.rng = rng or random.Random()

    def registered_brokers(self) -> dict[int, str | None]:
        """Broker id -> rack of every registered broker (``AdminZkClient.getBrokerMetadatas``)."""
        brokers: dict[int, str | None] = {}
        for child in self.zk.get_children(zkdata.BROKER_IDS_PATH):
            path = zkdata.broker_path(int(child))
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue
            brokers[int(child)] = zkdata.decode_broker_registration(path, int(child), data, stat.czxid).rack
        return brokers

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, str] | None = None,
        assignment: Mapping[int, list[int]] | None = None,
    ) -> dict[int, list[int]]:
        """``AdminZkClient.createTopic``: the config znode first, then the topic znode."""
        validate_topic_name(name)
        if self.zk.exists(zkdata.topic_path(name)):
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if assignment is None:
            brokers = self.registered_brokers()
            racks = brokers if all(r is not None for r in brokers.values()) else list(brokers)
            assignment = assign_replicas(partitions, replication_factor, racks, rng=self.rng)
        write_entity_config(self.zk, "topics", name, dict(config or {}), notify=False)
        topic_id = zkdata.new_kafka_uuid() if self.topic_znode_version >= 3 else None
        data = zkdata.encode_topic(
            {p: ReplicaAssignment(tuple(r)) for p, r in assignment.items()},
            topic_id,
            self.topic_znode_version,
        )
        try:
            self.zk.create(zkdata.topic_path(name), data, makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{name}' already exists.") from None
        return {p: list(r) for p, r in assignment.items()}

    def add_partitions(self, name: str, total: int) -> dict[int, list[int]]:
        """``AdminZkClient.addPartitions``: new partitions placed as Kafka places them, continuing from the
        existing partition count, written into the topic znode (topic id kept)."""
        path = zkdata.topic_path(name)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            raise AdminError(f"Topic '{name}' does not exist.") from None
        assignment, topic_id = zkdata.decode_topic(path, data)
        if total <= len(assignment):
            raise AdminError(
                f"The number of partitions for a topic can only be increased. Topic {name} currently has "
                f"{len(assignment)} partitions, {total} would not be an increase."
            )
        brokers = self.registered_brokers()
        first = assignment[0].replicas
        ids = sorted(brokers)
        start = next((i for i, b in enumerate(ids) if b >= first[0]), 0)
        racks = brokers if all(r is not None for r in brokers.values()) else ids
        added = assign_replicas(
            total - len(assignment),
            len(first),
            racks,
            fixed_start_index=start,
            start_partition_id=len(assignment),
            rng=self.rng,
        )
        assignment.update({p: ReplicaAssignment(tuple(r)) for p, r in added.items()})
        version = 3 if topic_id is not None else self.topic_znode_version
        self.zk.set(path, zkdata.encode_topic(assignment, topic_id, version), stat.version)
        return added

    def delete_topic(self, name: str) -> None:
        if not self.zk.exists(zkdata.topic_path(name)):
            raise AdminError(f"Topic '{name}' does not exist.")
        try:
            self.zk.create(zkdata.delete_topic_path(name), b"", makepath=True)
        except NodeExistsError:
            raise AdminError(f"Topic '{name}' is already marked for deletion.") from None

    def set_config(self, entity_type: str, entity: str, config: Mapping[str, str]) -> None:
        """``kafka-configs --alter``: replace the entity's config and notify the brokers."""
        write_entity_config(self.zk, entity_type, entity, config)

    def elect_preferred(self, partitions: Iterable[TopicPartition]) -> None:
        """``kafka-preferred-replica-election``: refuses while an election is pending."""
        try:
            self.zk.create(
                zkdata.PREFERRED_REPLICA_ELECTION_PATH,
                zkdata.encode_partition_list(partitions),
                makepath=True,
            )
        except NodeExistsError:
            raise OperationInProgressError(
                "Preferred replica leader election currently in progress"
            ) from None

    def reassign(self, targets: Mapping[TopicPartition, tuple[int, ...]]) -> None:
        """``kafka-reassign-partitions --execute`` in ZooKeeper mode (the caller validates the plan)."""
        try:
            self.zk.create(
                zkdata.REASSIGN_PARTITIONS_PATH, zkdata.encode_reassignment(targets), makepath=True
            )
        except NodeExistsError:
            raise OperationInProgressError("There is an existing assignment running.") from None

    def all_partitions(self) -> dict[TopicPartition, ReplicaAssignment]:
        result: dict[TopicPartition, ReplicaAssignment] = {}
        for topic in self.zk.get_children(zkdata.BROKER_TOPICS_PATH):
            path = zkdata.topic_path(topic)
            try:
                data, _ = self.zk.get(path)
            except NoNodeError:
                continue
            assignment, _ = zkdata.decode_topic(path, data)
            result.update({TopicPartition(topic, p): a for p, a in assignment.items()})
        return result
