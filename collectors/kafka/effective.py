"""Effective topic settings: the ``min.insync.replicas`` and ``unclean.leader.election.enable`` a partition
runs with, resolved as Kafka resolves them, and the level each value came from.

Why it matters: ``min.insync.replicas`` decides when ``acks=all`` producers start failing (under-min-ISR),
and ``unclean.leader.election.enable`` whether an offline partition may come back by losing data. A value
read from the wrong level hides or invents outages, and a level we could not read (on a secured cluster
Kafka makes ``/config/brokers`` a sensitive path, not world-readable) must be said, not silently replaced
by Kafka's default.

Kafka's order (read in Kafka's ZooKeeper-mode source, 2.x-3.x: ``DynamicBrokerConfig``'s precedence,
``KafkaConfig.originals`` answering from the current config with its dynamic values, the leader's
``Partition.appendRecordsToLeader`` checking ``leaderLog.config.minInSyncReplicas``, and the controller's
``PartitionStateMachine`` calling ``zkClient.getLogConfigs(topics, config.originals())``; the names are
the same at topic and broker level):

1. ``topic``: the topic's override, ``/config/topics/<topic>``;
2. ``broker``: the dynamic per-broker config, ``/config/brokers/<id>``. Both settings are broker-level
   log configs a broker applies to its own logs (``DynamicLogConfig``), so the broker that counts is the
   one that acts: the partition's **leader** enforces ``min.insync.replicas`` on an ``acks=all`` produce,
   and the **active controller** decides an unclean election with its own config. Without a leader (or a
   controller) this level is skipped;
3. ``cluster_default``: the dynamic cluster-wide default, ``/config/brokers/<default>``;
4. ``static_default``: ``server.properties``, which never reaches ZooKeeper: only the user can tell us
   (``--default-min-isr``, ``--default-unclean-leader-election``, the ``default_*`` settings);
5. ``kafka_default``: Kafka's own default (1, false).

A level whose znode could not be read (ZooKeeper refused it, NoAuth; or it is malformed) is not skipped
silently: the value still comes from the next level that answers (what the health flags use), but its
source is ``unknown``, with ``assumed_from`` (the level the value came from) and ``reason`` (the znodes and
why). A readable level above the unreadable one decides as usual: a topic override is known even when
``/config/brokers`` is not readable. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from collectors.kafka.model import NO_LEADER, ClusterSnapshot, PartitionInfo, ZnodeError
from collectors.kafka.zkdata import (
    CONFIG_PATH,
    DEFAULT_BROKER_CONFIG_ENTITY,
    broker_config_path,
    topic_config_path,
)

MIN_INSYNC_REPLICAS = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
KAFKA_DEFAULT_MIN_INSYNC_REPLICAS = 1
KAFKA_DEFAULT_UNCLEAN_LEADER_ELECTION_ENABLE = False

TOPIC_CONFIGS_PATH = f"{CONFIG_PATH}/topics"
BROKER_CONFIGS_PATH = f"{CONFIG_PATH}/brokers"

_INT32_MAX = 2**31 - 1
_JAVA_INT = re.compile(r"\+?[0-9]+", re.ASCII)

T = TypeVar("T", int, bool)


class ConfigSource(StrEnum):
    """Where an effective value came from (the names the describe output and the API use)."""

    TOPIC = "topic"
    BROKER = "broker"
    CLUSTER_DEFAULT = "cluster_default"
    STATIC_DEFAULT = "static_default"
    KAFKA_DEFAULT = "kafka_default"
    UNKNOWN = "unknown"
    """A level above the one that gave the value could not be read: the value is a fallback."""


@dataclass(frozen=True, slots=True)
class Level:
    """One dynamic level as read from ZooKeeper: its raw value (None: not set), or why it was unreadable."""

    source: ConfigSource
    raw: str | None = None
    unreadable: str | None = None


@dataclass(frozen=True, slots=True)
class EffectiveSetting(Generic[T]):
    value: T
    source: ConfigSource
    assumed_from: ConfigSource | None = None
    """When ``source`` is ``unknown``: the level the fallback value came from."""
    reason: str | None = None
    """When ``source`` is ``unknown``: the znodes that could not be read, and why."""


@dataclass(frozen=True, slots=True)
class StaticDefaults:
    """What only ``server.properties`` knows, as the user gives it (None: not given, Kafka's default)."""

    min_insync_replicas: int | None = None
    unclean_leader_election_enable: bool | None = None


def parse_min_insync_replicas(value: str | None) -> int | None:
    """A ``min.insync.replicas`` value as the broker accepts it (a Java int ≥ 1, blanks trimmed), else None.

    Kafka validates a value before it writes the znode, so a bad one is someone's hand edit; the broker would
    not have applied it, so the next level is what it runs with.
    """
    if value is None:
        return None
    text = value.strip()
    if _JAVA_INT.fullmatch(text) is None:
        return None
    parsed = int(text)
    return parsed if 1 <= parsed <= _INT32_MAX else None


def parse_boolean(value: str | None) -> bool | None:
    """A boolean config as Kafka's ``ConfigDef`` parses it: ``true``/``false``, any case; else None."""
    if value is None:
        return None
    text = value.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    return None


def resolve(
    levels: Iterable[Level],
    parse: Callable[[str | None], T | None],
    static_default: T | None,
    kafka_default: T,
) -> EffectiveSetting[T]:
    """The resolution order: the dynamic ``levels`` in precedence order, then ``static_default`` (if the user
    gave one), then ``kafka_default``. An unreadable level on the way makes the source ``unknown``."""
    reasons: list[str] = []
    for level in levels:
        if level.unreadable is not None:
            if level.unreadable not in reasons:
                reasons.append(level.unreadable)
            continue
        value = parse(level.raw)
        if value is not None:
            return _setting(value, level.source, reasons)
    if static_default is not None:
        return _setting(static_default, ConfigSource.STATIC_DEFAULT, reasons)
    return _setting(kafka_default, ConfigSource.KAFKA_DEFAULT, reasons)


_READ = "read"
"""The topic level was read and sets nothing: the levels below decide."""


def _setting(value: T, source: ConfigSource, reasons: list[str]) -> EffectiveSetting[T]:
    if not reasons:
        return EffectiveSetting(value, source)
    return EffectiveSetting(value, ConfigSource.UNKNOWN, source, "; ".join(reasons))


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    """A partition's effective settings."""

    min_insync_replicas: EffectiveSetting[int]
    unclean_leader_election_enable: EffectiveSetting[bool]


@dataclass(frozen=True, slots=True)
class MinIsrTable:
    """``min.insync.replicas`` values only, for a hot loop over 200k partitions: ``by_topic`` where the topic
    decides alone, else ``by_leader`` (brokers with their own value), else ``default``."""

    by_topic: Mapping[str, int]
    by_leader: Mapping[int, int]
    default: int

    def of(self, topic: str, leader: int) -> int:
        value = self.by_topic.get(topic)
        if value is None:
            by_leader = self.by_leader
            return by_leader.get(leader, self.default) if by_leader else self.default
        return value


class TopicSettings:
    """Resolves the two settings for one snapshot (cached per topic and broker): a snapshot is immutable."""

    def __init__(self, snapshot: ClusterSnapshot, static: StaticDefaults | None = None) -> None:
        self._snapshot = snapshot
        self.static = static or StaticDefaults()
        self._errors: dict[str, ZnodeError] = {
            e.path: e for e in snapshot.errors if e.path.startswith(CONFIG_PATH + "/")
        }
        # the topic level per topic, the levels below it per leader (min ISR) or once (the controller's)
        self._topic_min_isr: dict[str, EffectiveSetting[Any] | str] = {}
        self._topic_unclean: dict[str, EffectiveSetting[Any] | str] = {}
        self._below_min_isr: dict[int, EffectiveSetting[int]] = {}
        self._below_unclean: EffectiveSetting[bool] | None = None
        self._combined: dict[tuple[str, EffectiveSetting[Any]], EffectiveSetting[Any]] = {}

    # --- what could not be read ---

    @property
    def unreadable(self) -> tuple[ZnodeError, ...]:
        """The config znodes (and lists) that could not be read, by path: each makes some values unknown."""
        return tuple(sorted(self._errors.values(), key=lambda e: e.path))

    def _unreadable(self, path: str, parent: str) -> str | None:
        error = self._errors.get(path) or self._errors.get(parent)
        return None if error is None else f"{error.path}: {error.reason}"

    # --- the levels ---

    def _topic_level(self, topic: str, key: str) -> Level:
        info = self._snapshot.topics.get(topic)
        raw = None if info is None else info.config.get(key)
        return Level(ConfigSource.TOPIC, raw, self._unreadable(topic_config_path(topic), TOPIC_CONFIGS_PATH))

    def _broker_level(self, broker: int, key: str) -> Level:
        config = self._snapshot.broker_configs.get(str(broker), {})
        return Level(
            ConfigSource.BROKER,
            config.get(key),
            self._unreadable(broker_config_path(broker), BROKER_CONFIGS_PATH),
        )

    def _cluster_level(self, key: str) -> Level:
        config = self._snapshot.broker_configs.get(DEFAULT_BROKER_CONFIG_ENTITY, {})
        return Level(
            ConfigSource.CLUSTER_DEFAULT,
            config.get(key),
            self._unreadable(broker_config_path(DEFAULT_BROKER_CONFIG_ENTITY), BROKER_CONFIGS_PATH),
        )

    # --- the settings ---

    def min_insync_replicas(self, topic: str, leader: int | None) -> EffectiveSetting[int]:
        """What the partition's leader enforces on ``acks=all`` produces (no leader: the per-broker level is
        skipped, as no broker enforces anything)."""
        broker = NO_LEADER if leader is None or leader < 0 else leader
        above = self._topic_min_isr.get(topic)
        if above is None:
            above = self._topic_min_isr[topic] = self._topic_setting(
                topic, MIN_INSYNC_REPLICAS, parse_min_insync_replicas
            )
        if isinstance(above, EffectiveSetting):
            return above
        below = self._below_min_isr.get(broker)
        if below is None:
            levels = [] if broker == NO_LEADER else [self._broker_level(broker, MIN_INSYNC_REPLICAS)]
            levels.append(self._cluster_level(MIN_INSYNC_REPLICAS))
            below = self._below_min_isr[broker] = resolve(
                levels,
                parse_min_insync_replicas,
                self.static.min_insync_replicas,
                KAFKA_DEFAULT_MIN_INSYNC_REPLICAS,
            )
        return below if above is _READ else self._after_unreadable(above, below)

    def unclean_leader_election_enable(self, topic: str) -> EffectiveSetting[bool]:
        """What the active controller applies when no ISR member is alive (its own per-broker config
        counts)."""
        above = self._topic_unclean.get(topic)
        if above is None:
            above = self._topic_unclean[topic] = self._topic_setting(
                topic, UNCLEAN_LEADER_ELECTION_ENABLE, parse_boolean
            )
        if isinstance(above, EffectiveSetting):
            return above
        below = self._below_unclean
        if below is None:
            controller = self._snapshot.controller.broker_id
            levels = []
            if controller is not None and controller >= 0:
                levels.append(self._broker_level(controller, UNCLEAN_LEADER_ELECTION_ENABLE))
            levels.append(self._cluster_level(UNCLEAN_LEADER_ELECTION_ENABLE))
            below = self._below_unclean = resolve(
                levels,
                parse_boolean,
                self.static.unclean_leader_election_enable,
                KAFKA_DEFAULT_UNCLEAN_LEADER_ELECTION_ENABLE,
            )
        return below if above is _READ else self._after_unreadable(above, below)

    def _topic_setting(
        self, topic: str, key: str, parse: Callable[[str | None], Any]
    ) -> EffectiveSetting[Any] | str:
        """The topic level alone: the setting when the topic decides, :data:`_READ` when it sets nothing,
        else why it could not be read."""
        level = self._topic_level(topic, key)
        if level.unreadable is not None:
            return level.unreadable
        value = parse(level.raw)
        return _READ if value is None else EffectiveSetting(value, ConfigSource.TOPIC)

    def _after_unreadable(self, reason: str, below: EffectiveSetting[T]) -> EffectiveSetting[T]:
        """``below`` (the levels under an unreadable topic config) with that reason first: the cache keeps
        one object per distinct pair, so 200k partitions do not build 200k settings."""
        key = (reason, below)
        found = self._combined.get(key)
        if found is None:
            reasons = [reason]
            if below.reason is not None and below.reason != reason:
                reasons.append(below.reason)
            source = below.source if below.assumed_from is None else below.assumed_from
            found = self._combined[key] = EffectiveSetting(
                below.value, ConfigSource.UNKNOWN, source, "; ".join(reasons)
            )
        return found

    def unknown_counts(self, partitions: Iterable[PartitionInfo]) -> tuple[int, int]:
        """How many of ``partitions`` have an unknown ``min.insync.replicas`` and an unknown
        ``unclean.leader.election.enable`` (zero without a walk when every config znode was read)."""
        if not self._errors:
            return 0, 0
        unknown = ConfigSource.UNKNOWN
        min_isr = unclean = 0
        for info in partitions:
            topic = info.tp.topic
            min_isr += self.min_insync_replicas(topic, info.leader).source is unknown
            unclean += self.unclean_leader_election_enable(topic).source is unknown
        return min_isr, unclean

    def of_partition(self, topic: str, leader: int | None) -> PartitionSettings:
        return PartitionSettings(
            self.min_insync_replicas(topic, leader), self.unclean_leader_election_enable(topic)
        )

    def min_isr_table(self) -> MinIsrTable:
        """The values only, for :func:`collectors.health.assess`'s one pass: the per-broker level is looked
        up per partition only when some broker has its own ``min.insync.replicas``."""
        per_broker = {
            int(entity): value
            for entity, config in self._snapshot.broker_configs.items()
            if entity.isdecimal()
            and (value := parse_min_insync_replicas(config.get(MIN_INSYNC_REPLICAS))) is not None
        }
        # Below the topic level a value does not depend on the topic: resolve it for a name no topic has.
        default = self.min_insync_replicas("", None).value
        topics = self._snapshot.topics
        if not per_broker:
            return MinIsrTable(
                {name: self.min_insync_replicas(name, None).value for name in topics}, {}, default
            )
        by_topic = {
            name: value
            for name, info in topics.items()
            if (value := parse_min_insync_replicas(info.config.get(MIN_INSYNC_REPLICAS))) is not None
            and self._topic_level(name, MIN_INSYNC_REPLICAS).unreadable is None
        }
        by_leader = {b: self.min_insync_replicas("", b).value for b in per_broker}
        return MinIsrTable(by_topic, by_leader, default)
