"""What every broker's ``DynamicConfigManager`` knows: topic and broker configs from ``/config``, kept
current through ``/config/changes/config_change_<seq>`` notifications, as the brokers read them.

All brokers of the simulation read the same znodes, so one reader serves them all. Its methods run on the
cluster's loop; the ZooKeeper watch only posts work there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from app.embedded.reference_cluster.replication import Retention, Throttles, parse_throttled_replicas
from collectors.kafka import zkdata

log = logging.getLogger(__name__)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
RETENTION_BYTES = "retention.bytes"
SEGMENT_BYTES = "segment.bytes"


class DynamicConfigs:
    def __init__(
        self,
        broker_ids: Iterable[int],
        default_min_insync_replicas: int,
        default_retention: Retention | None = None,
    ) -> None:
        self.broker_ids = list(broker_ids)
        self.default_min_insync_replicas = default_min_insync_replicas
        self.default_retention = default_retention or Retention(None, 1024**3)
        self._retention: dict[str, Retention] = {}
        self.topics: dict[str, dict[str, str]] = {}
        self.brokers: dict[str, dict[str, str]] = {}
        self.throttles = Throttles.none()
        self._zk: KazooClient | None = None
        self._last_change = ""

    def start(self, zk: KazooClient, post: Callable[[Callable[[], None]], bool]) -> None:
        """Read every topic and broker config, then follow the change notifications."""
        self._zk = zk
        for entity_type, cache in (("topics", self.topics), ("brokers", self.brokers)):
            try:
                entities = zk.get_children(f"{zkdata.CONFIG_PATH}/{entity_type}")
            except NoNodeError:
                continue
            for entity in entities:
                cache[entity] = self._read(entity_type, entity)
        self._rebuild_throttles()
        zk.ensure_path(zkdata.CONFIG_CHANGES_PATH)
        ChildrenWatch(zk, zkdata.CONFIG_CHANGES_PATH, lambda _children: post(self.on_changes))

    def ensure_topic(self, topic: str) -> None:
        """A broker reads a topic's config when it creates the topic's log."""
        if topic not in self.topics:
            self.topics[topic] = self._read("topics", topic)
            self._rebuild_throttles()

    def min_insync_replicas(self, topic: str) -> int:
        value = self.topics.get(topic, {}).get(MIN_INSYNC_REPLICAS)
        if value is not None and value.strip().isdecimal():
            return int(value)
        return self.default_min_insync_replicas

    def retention(self, topic: str) -> Retention:
        """The topic's ``retention.bytes`` and ``segment.bytes``, the brokers' defaults where not set."""
        known = self._retention.get(topic)
        if known is None:
            config = self.topics.get(topic, {})
            default = self.default_retention
            retention = _integer(config.get(RETENTION_BYTES))
            segment = _integer(config.get(SEGMENT_BYTES))
            retention_bytes = default.retention_bytes
            if retention is not None:
                retention_bytes = None if retention < 0 else float(retention)
            known = self._retention[topic] = Retention(
                retention_bytes,
                default.segment_bytes if segment is None or segment <= 0 else float(segment),
            )
        return known

    def on_changes(self) -> None:
        """Process the notifications newer than the last one seen (Kafka's brokers do the same)."""
        if self._zk is None:
            return
        for child in sorted(self._zk.get_children(zkdata.CONFIG_CHANGES_PATH)):
            if child <= self._last_change:
                continue
            self._last_change = child
            path = f"{zkdata.CONFIG_CHANGES_PATH}/{child}"
            try:
                data, _ = self._zk.get(path)
                entity_type, entity = zkdata.decode_config_change(path, data)
            except (NoNodeError, zkdata.ZnodeFormatError) as exc:
                log.warning("config change notification %s skipped: %s", child, exc)
                continue
            if entity_type == "topics":
                self.topics[entity] = self._read("topics", entity)
            elif entity_type == "brokers":
                self.brokers[entity] = self._read("brokers", entity)
        self._rebuild_throttles()

    def _read(self, entity_type: str, entity: str) -> dict[str, str]:
        assert self._zk is not None
        path = zkdata.entity_config_path(entity_type, entity)
        try:
            data, _ = self._zk.get(path)
            return zkdata.decode_config(path, data)
        except NoNodeError:
            return {}
        except zkdata.ZnodeFormatError as exc:
            log.error("brokers ignore a malformed config: %s", exc)
            return {}

    def _broker_value(self, broker_id: int, key: str) -> str | None:
        value = self.brokers.get(str(broker_id), {}).get(key)
        if value is None:
            value = self.brokers.get(zkdata.DEFAULT_BROKER_CONFIG_ENTITY, {}).get(key)
        return value

    def _rates(self, key: str) -> dict[int, float]:
        rates = {}
        for broker_id in self.broker_ids:
            value = self._broker_value(broker_id, key)
            if value is not None and value.strip().isdecimal():
                rates[broker_id] = float(value)
        return rates

    def _rebuild_throttles(self) -> None:
        self._retention.clear()
        self.throttles = Throttles(
            leader_rate=self._rates(LEADER_RATE),
            follower_rate=self._rates(FOLLOWER_RATE),
            leader_replicas={
                t: parse_throttled_replicas(c[LEADER_REPLICAS])
                for t, c in self.topics.items()
                if LEADER_REPLICAS in c
            },
            follower_replicas={
                t: parse_throttled_replicas(c[FOLLOWER_REPLICAS])
                for t, c in self.topics.items()
                if FOLLOWER_REPLICAS in c
            },
        )


def _integer(value: str | None) -> int | None:
    try:
        return None if value is None else int(value.strip())
    except ValueError:
        return None
