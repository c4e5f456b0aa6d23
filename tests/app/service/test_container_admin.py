"""The container's guard on the runbook actions' ZooKeeper writes: nothing is written into a chroot that
holds no Kafka cluster (an admin znode's ``makepath`` would create the chroot of a wrong connect string)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from app.service.container import KafkaOnlyAdmin, NoKafkaClusterError
from collectors.kafka.admin import KazooAdmin

pytestmark = pytest.mark.integration


def test_the_actions_write_nothing_while_no_kafka_cluster_is_there(
    zk_connect: str, zk_client: KazooClient
) -> None:
    present = False
    kazoo = KazooAdmin(zk_connect + "/nope")
    admin = KafkaOnlyAdmin(kazoo, lambda: present, zk_connect + "/nope")
    try:
        with pytest.raises(NoKafkaClusterError, match="no Kafka cluster there; nothing is written"):
            admin.create("/admin/preferred_replica_election", b"{}")
        with pytest.raises(NoKafkaClusterError):
            admin.set_config("brokers", "1", {"leader.replication.throttled.rate": "1000"})
        assert zk_client.exists("/nope") is None

        zk_client.create("/nope/cluster/id", b'{"version":"1","id":"x"}', makepath=True)
        present = True
        admin.set_config("brokers", "1", {"leader.replication.throttled.rate": "1000"})
        assert admin.get_config("brokers", "1") == {"leader.replication.throttled.rate": "1000"}
    finally:
        kazoo.close()
