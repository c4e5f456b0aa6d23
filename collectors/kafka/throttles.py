"""Replication throttles as Kafka keeps them in ZooKeeper, and the inventory of the ones a cluster has.

Kafka's replication quotas come in two halves, both dynamic configs under ``/config``
(docs/kafka-reference.md):

- **rates** on brokers: ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
  (bytes/s), on ``/config/brokers/<id>`` or on the cluster-wide ``/config/brokers/<default>``, which
  applies to every broker without a rate of its own;
- **replica lists** on topics: ``leader.replication.throttled.replicas`` and
  ``follower.replication.throttled.replicas``, either ``*`` (every replica of the topic) or
  ``partition:broker`` pairs joined by commas.

A throttle limits traffic only where both halves meet: a broker caps the leader-side (follower-side)
replication of the replicas on it that some topic lists in its leader (follower) list, and only while such
a replica is out of the ISR, catching up. Half a throttle is inert, until someone sets the other half.

``kafka-reassign-partitions --throttle`` sets both halves and removes them only when someone runs
``--verify`` after the reassignment is complete; a throttle nobody removed caps the next catch-up (a
restarted broker, a new replica) for months, unnoticed. :func:`throttle_inventory` lists every throttle
a snapshot shows, who uses it, whether it limits anything, and what is odd about it (a broker that is not
registered, a partition that does not exist, half a throttle, a value Kafka would refuse). It is pure: the
callers say which of their actions are still running (:class:`ThrottleUser`); the cleanup is the
service's (``app.actions.throttle_removal``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal

from collectors.kafka.model import ClusterSnapshot, PartitionInfo, TopicPartition
from collectors.kafka.zkdata import DEFAULT_BROKER_CONFIG_ENTITY

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
BROKER_THROTTLE_KEYS = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)
TOPIC_THROTTLE_KEYS = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)
ALL_REPLICAS = "*"

Direction = Literal["leader", "follower"]
DIRECTIONS: tuple[Direction, ...] = ("leader", "follower")
RATE_KEY: Mapping[Direction, str] = {"leader": LEADER_THROTTLED_RATE, "follower": FOLLOWER_THROTTLED_RATE}
REPLICAS_KEY: Mapping[Direction, str] = {
    "leader": LEADER_THROTTLED_REPLICAS,
    "follower": FOLLOWER_THROTTLED_REPLICAS,
}

# Problem codes
UNKNOWN_BROKER = "unknown_broker"
UNKNOWN_PARTITION = "unknown_partition"
NOT_A_REPLICA = "not_a_replica"
NO_RATE = "no_rate"
"""A replica list whose brokers have no rate in that direction: it limits nothing."""
NO_LIST = "no_list"
"""A rate no topic lists a replica for in that direction: it limits nothing."""
EMPTY_LIST = "empty_list"
ZERO_RATE = "zero_rate"
INVALID_VALUE = "invalid_value"

_MAX_NAMED = 10


class EntityType(StrEnum):
    BROKER = "broker"
    TOPIC = "topic"

    @property
    def zk_type(self) -> str:
        """The entity type in ZooKeeper's paths (``/config/brokers``, ``/config/topics``)."""
        return f"{self.value}s"

    @property
    def keys(self) -> tuple[str, ...]:
        """The throttle keys an entity of this type may hold."""
        return BROKER_THROTTLE_KEYS if self is EntityType.BROKER else TOPIC_THROTTLE_KEYS


class ThrottleState(StrEnum):
    IN_USE = "in_use"
    """An unfinished action of ours set it, or a reassignment running in ZooKeeper moves what it names."""
    LEFTOVER = "leftover"
    """Nobody needs it any more: it only slows the next catch-up."""


@dataclass(frozen=True, slots=True)
class ThrottleUser:
    """Something unfinished that set throttles and will remove them (an action of the service): its id and
    the entities it set them on; ``all_brokers`` when it is not known which brokers (claims them all,
    but never ``<default>``, which no action sets)."""

    id: str
    brokers: frozenset[int] = frozenset()
    topics: frozenset[str] = frozenset()
    all_brokers: bool = False

    def uses(self, entity_type: EntityType, entity: str) -> bool:
        if entity_type is EntityType.TOPIC:
            return entity in self.topics
        if not entity.isdecimal():
            return False
        return self.all_brokers or int(entity) in self.brokers


@dataclass(frozen=True, slots=True)
class ThrottleProblem:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """One ``*.replication.throttled.replicas`` value: ``*`` (every replica of the topic) or the
    ``(partition, broker)`` pairs it lists; ``malformed`` holds the entries Kafka's validator refuses."""

    value: str
    all_replicas: bool
    pairs: tuple[tuple[int, int], ...] = ()
    malformed: tuple[str, ...] = ()


def parse_throttled_replicas(value: str) -> ThrottledReplicas:
    """As Kafka's ``ThrottledReplicaListValidator`` reads it: ``*`` alone, or comma-separated
    ``partition:broker`` entries with blanks around them allowed and empty entries ignored."""
    stripped = value.strip()
    if stripped == ALL_REPLICAS:
        return ThrottledReplicas(value, True)
    pairs: set[tuple[int, int]] = set()
    malformed: list[str] = []
    for raw in stripped.split(","):
        entry = raw.strip()
        if not entry:
            continue
        partition, sep, broker = entry.partition(":")
        if sep and partition.isdecimal() and broker.isdecimal() and partition.isascii() and broker.isascii():
            pairs.add((int(partition), int(broker)))
        else:
            malformed.append(entry)
    return ThrottledReplicas(value, False, tuple(sorted(pairs)), tuple(malformed))


def parse_rate(value: str) -> int | None:
    """A rate as Kafka reads it (a non-negative long, bytes/s); None when Kafka would refuse it."""
    stripped = value.strip()
    if stripped.isdecimal() and stripped.isascii():
        return int(stripped)
    return None


@dataclass(frozen=True, slots=True)
class BrokerThrottle:
    """A broker entity's throttle rates: a broker id, or ``<default>`` (``broker`` None)."""

    entity_type: ClassVar[EntityType] = EntityType.BROKER
    entity: str
    broker: int | None
    registered: bool
    """The broker is in ``/brokers/ids`` (False for ``<default>``)."""
    config: Mapping[str, str]
    """The throttle keys the entity's config holds, as written."""
    leader_rate: int | None
    follower_rate: int | None
    limits: tuple[Direction, ...]
    """The directions in which the rate caps some listed replica now (an empty tuple: inert)."""
    state: ThrottleState
    used_by: tuple[str, ...] = ()
    """The unfinished actions that set it."""
    reassignment_running: bool = False
    """A reassignment running in ZooKeeper has a replica on the broker (Kafka's tool's, or ours)."""
    problems: tuple[ThrottleProblem, ...] = ()

    def rate(self, direction: Direction) -> int | None:
        return self.leader_rate if direction == "leader" else self.follower_rate


@dataclass(frozen=True, slots=True)
class TopicThrottle:
    """A topic's throttled replica lists."""

    entity_type: ClassVar[EntityType] = EntityType.TOPIC
    entity: str
    config: Mapping[str, str]
    leader: ThrottledReplicas | None
    follower: ThrottledReplicas | None
    limits: tuple[Direction, ...]
    """The directions in which some listed replica's broker has a rate (an empty tuple: inert)."""
    state: ThrottleState
    used_by: tuple[str, ...] = ()
    reassignment_running: bool = False
    """A partition of the topic is being reassigned (Kafka's tool's reassignment, or ours)."""
    problems: tuple[ThrottleProblem, ...] = ()

    @property
    def topic(self) -> str:
        return self.entity

    def replicas(self, direction: Direction) -> ThrottledReplicas | None:
        return self.leader if direction == "leader" else self.follower


ThrottleEntry = BrokerThrottle | TopicThrottle


@dataclass(frozen=True, slots=True)
class ThrottleInventory:
    """Every throttle of a snapshot: broker entities (ids in order, ``<default>`` last), then topics."""

    brokers: tuple[BrokerThrottle, ...] = ()
    topics: tuple[TopicThrottle, ...] = ()
    rates: Mapping[int, Mapping[Direction, int]] = field(default_factory=dict)
    """The rates in force on each registered broker (its own, else ``<default>``'s); brokers without any
    rate are left out."""

    @property
    def entries(self) -> tuple[ThrottleEntry, ...]:
        return (*self.brokers, *self.topics)

    def count(self, state: ThrottleState, entity_type: EntityType | None = None) -> int:
        return sum(
            1
            for e in self.entries
            if e.state is state and (entity_type is None or e.entity_type is entity_type)
        )

    def find(self, entity_type: EntityType, entity: str) -> ThrottleEntry | None:
        entries: Sequence[ThrottleEntry] = self.brokers if entity_type is EntityType.BROKER else self.topics
        return next((e for e in entries if e.entity == entity), None)


# --- the inventory -----------------------------------------------------------------------------------------


def throttle_inventory(snapshot: ClusterSnapshot, users: Iterable[ThrottleUser] = ()) -> ThrottleInventory:
    """Every throttle key in the snapshot's broker and topic configs, with its state (in use by one of
    ``users``, or by a reassignment running in ZooKeeper; else leftover), whether it limits anything, and
    its problems. Reads each throttled topic's partitions, nothing else per partition."""
    broker_configs = _throttle_keys(snapshot.broker_configs, BROKER_THROTTLE_KEYS)
    topic_configs = _throttle_keys(
        {name: info.config for name, info in snapshot.topics.items()}, TOPIC_THROTTLE_KEYS
    )
    if not broker_configs and not topic_configs:
        return ThrottleInventory()
    users = tuple(users)
    registered = set(snapshot.brokers)
    own = {
        d: {
            int(entity): rate
            for entity, config in broker_configs.items()
            if entity.isdecimal() and (rate := _rate(config, d)) is not None
        }
        for d in DIRECTIONS
    }
    default_config = broker_configs.get(DEFAULT_BROKER_CONFIG_ENTITY, {})
    default = {d: _rate(default_config, d) for d in DIRECTIONS}
    in_force: dict[Direction, dict[int, int]] = {d: {} for d in DIRECTIONS}
    for d in DIRECTIONS:
        for b in sorted(registered):
            rate = own[d].get(b, default[d])
            if rate is not None:
                in_force[d][b] = rate

    partitions = _partitions_of(snapshot, set(topic_configs))
    moving = _reassigning(snapshot, partitions)
    moving_topics = {tp.topic for tp in moving}
    moving_brokers = {b for replicas in moving.values() for b in replicas}

    topics: list[TopicThrottle] = []
    listed: dict[Direction, set[int]] = {d: set() for d in DIRECTIONS}
    for name in sorted(topic_configs):
        entry, brokers = _topic_throttle(
            name,
            topic_configs[name],
            partitions.get(name, {}),
            registered,
            in_force,
            users,
            name in moving_topics,
        )
        topics.append(entry)
        for d in DIRECTIONS:
            listed[d] |= brokers[d]

    entities = sorted(broker_configs, key=lambda e: (not e.isdecimal(), int(e) if e.isdecimal() else 0, e))
    brokers_out = [
        _broker_throttle(entity, broker_configs[entity], registered, own, listed, users, moving_brokers)
        for entity in entities
    ]
    rates: dict[int, dict[Direction, int]] = {}
    for d in DIRECTIONS:
        for b, rate in in_force[d].items():
            rates.setdefault(b, {})[d] = rate
    return ThrottleInventory(tuple(brokers_out), tuple(topics), dict(sorted(rates.items())))


def _throttle_keys(
    configs: Mapping[str, Mapping[str, str]], keys: tuple[str, ...]
) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for entity, config in configs.items():
        values = {k: config[k] for k in keys if k in config}
        if values:
            found[entity] = values
    return found


def _rate(config: Mapping[str, str], direction: Direction) -> int | None:
    value = config.get(RATE_KEY[direction])
    return None if value is None else parse_rate(value)


def _partitions_of(snapshot: ClusterSnapshot, topics: set[str]) -> dict[str, dict[int, PartitionInfo]]:
    """The partitions of ``topics``, by topic and partition id. The collector's snapshots keep their
    partitions per topic (``of_topic``), so a 200k-partition cluster is not walked for a few topics."""
    of_topic = getattr(snapshot.partitions, "of_topic", None)
    if of_topic is not None:
        return {t: dict(of_topic(t)) for t in topics}
    found: dict[str, dict[int, PartitionInfo]] = {t: {} for t in topics}
    for tp, info in snapshot.partitions.items():
        if tp.topic in found:
            found[tp.topic][tp.partition] = info
    return found


def _reassigning(
    snapshot: ClusterSnapshot, partitions: Mapping[str, Mapping[int, PartitionInfo]]
) -> dict[TopicPartition, set[int]]:
    """Partitions being reassigned, with every broker the move involves: those in
    ``/admin/reassign_partitions`` (Kafka's ZooKeeper path), and the throttled topics' partitions with
    adding or removing replicas (the controller's record of any reassignment, including those started
    through the admin API, which writes no admin znode)."""
    moving: dict[TopicPartition, set[int]] = {}
    for tp, target in snapshot.pending.reassignments.items():
        info = snapshot.partitions.get(tp)
        moving[tp] = set(target) | (set(info.assignment.replicas) if info is not None else set())
    for by_id in partitions.values():
        for info in by_id.values():
            if info.assignment.is_being_reassigned:
                moving.setdefault(info.tp, set()).update(info.assignment.replicas)
    return moving


def _names(items: Iterable[object]) -> str:
    shown = [str(i) for i in items]
    more = len(shown) - _MAX_NAMED
    text = ", ".join(shown[:_MAX_NAMED])
    return f"{text} and {more} more" if more > 0 else text


def _topic_throttle(
    name: str,
    config: Mapping[str, str],
    partitions: Mapping[int, PartitionInfo],
    registered: set[int],
    in_force: Mapping[Direction, Mapping[int, int]],
    users: Sequence[ThrottleUser],
    reassignment_running: bool,
) -> tuple[TopicThrottle, dict[Direction, set[int]]]:
    """The topic's entry and, per direction, the registered brokers its lists name (through a pair that
    names one of the partition's replicas, or ``*``)."""
    problems: list[ThrottleProblem] = []
    lists: dict[Direction, ThrottledReplicas | None] = {}
    brokers: dict[Direction, set[int]] = {d: set() for d in DIRECTIONS}
    limits: list[Direction] = []
    for d in DIRECTIONS:
        key = REPLICAS_KEY[d]
        value = config.get(key)
        parsed = None if value is None else parse_throttled_replicas(value)
        lists[d] = parsed
        if parsed is None:
            continue
        if parsed.malformed:
            problems.append(
                ThrottleProblem(
                    INVALID_VALUE,
                    f"{key} has entries that are not partition:broker: {_names(parsed.malformed)} "
                    "(brokers ignore them)",
                )
            )
        if parsed.all_replicas:
            brokers[d] = {b for info in partitions.values() for b in info.assignment.replicas} & registered
        else:
            brokers[d] = _listed_brokers(name, key, parsed, partitions, registered, problems)
            if not parsed.pairs:
                problems.append(ThrottleProblem(EMPTY_LIST, f"{key} lists no replica: it limits nothing"))
                continue
        rated = {b for b in brokers[d] if b in in_force[d]}
        if rated:
            limits.append(d)
        elif brokers[d]:
            problems.append(
                ThrottleProblem(
                    NO_RATE,
                    f"{key} names replicas on brokers {_names(sorted(brokers[d]))}, none of which has "
                    f"{RATE_KEY[d]} (own or <default>): it limits nothing until a rate is set",
                )
            )
    used_by = tuple(sorted(u.id for u in users if u.uses(EntityType.TOPIC, name)))
    entry = TopicThrottle(
        entity=name,
        config=dict(config),
        leader=lists["leader"],
        follower=lists["follower"],
        limits=tuple(limits),
        state=_state(used_by, reassignment_running),
        used_by=used_by,
        reassignment_running=reassignment_running,
        problems=tuple(problems),
    )
    return entry, brokers


def _listed_brokers(
    topic: str,
    key: str,
    parsed: ThrottledReplicas,
    partitions: Mapping[int, PartitionInfo],
    registered: set[int],
    problems: list[ThrottleProblem],
) -> set[int]:
    """The registered brokers the pairs name as a replica of the partition; the others are problems."""
    found: set[int] = set()
    unknown_partition: list[str] = []
    unknown_broker: list[str] = []
    not_replica: list[str] = []
    for partition, broker in parsed.pairs:
        pair = f"{partition}:{broker}"
        info = partitions.get(partition)
        if info is None:
            unknown_partition.append(pair)
        elif broker not in registered:
            unknown_broker.append(pair)
        elif broker not in info.assignment.replicas:
            not_replica.append(pair)
        else:
            found.add(broker)
    if unknown_partition:
        problems.append(
            ThrottleProblem(
                UNKNOWN_PARTITION,
                f"{key} names partitions {topic} does not have ({len(partitions)} partitions): "
                f"{_names(unknown_partition)}",
            )
        )
    if unknown_broker:
        problems.append(
            ThrottleProblem(
                UNKNOWN_BROKER,
                f"{key} names brokers that are not registered: {_names(unknown_broker)} "
                "(they apply if the broker comes back)",
            )
        )
    if not_replica:
        problems.append(
            ThrottleProblem(
                NOT_A_REPLICA,
                f"{key} names brokers that hold no replica of the partition: {_names(not_replica)} "
                "(what a finished reassignment leaves: they limit nothing)",
            )
        )
    return found


def _broker_throttle(
    entity: str,
    config: Mapping[str, str],
    registered: set[int],
    own: Mapping[Direction, Mapping[int, int]],
    listed: Mapping[Direction, set[int]],
    users: Sequence[ThrottleUser],
    moving_brokers: set[int],
) -> BrokerThrottle:
    problems: list[ThrottleProblem] = []
    is_default = entity == DEFAULT_BROKER_CONFIG_ENTITY
    broker = int(entity) if entity.isdecimal() else None
    is_registered = broker is not None and broker in registered
    if broker is None and not is_default:
        problems.append(
            ThrottleProblem(
                UNKNOWN_BROKER, f"{entity!r} is neither a broker id nor <default>: no broker reads it"
            )
        )
    elif broker is not None and not is_registered:
        problems.append(
            ThrottleProblem(
                UNKNOWN_BROKER,
                f"broker {broker} is not registered: its throttle applies again if it comes back",
            )
        )
    rates: dict[Direction, int | None] = {}
    limits: list[Direction] = []
    for d in DIRECTIONS:
        key = RATE_KEY[d]
        value = config.get(key)
        rate = None if value is None else parse_rate(value)
        rates[d] = rate
        if value is None:
            continue
        if rate is None:
            problems.append(
                ThrottleProblem(INVALID_VALUE, f"{key}={value!r} is not a rate in bytes/s: brokers ignore it")
            )
            continue
        if rate == 0:
            problems.append(
                ThrottleProblem(
                    ZERO_RATE, f"{key}=0 stops the replication of every listed replica out of the ISR"
                )
            )
        # the brokers this rate is in force on: the broker itself, or (<default>) those without their own
        applies = (
            {b for b in registered if b not in own[d]}
            if is_default
            else ({broker} if is_registered and broker is not None else set())
        )
        if applies & listed[d]:
            limits.append(d)
        elif applies:
            whom = "a broker without a rate of its own" if is_default else f"broker {broker}"
            problems.append(
                ThrottleProblem(
                    NO_LIST,
                    f"no topic lists a replica on {whom} in {REPLICAS_KEY[d]}: {key} limits nothing "
                    "until one does",
                )
            )
    used_by = tuple(sorted(u.id for u in users if u.uses(EntityType.BROKER, entity)))
    running = broker is not None and broker in moving_brokers
    return BrokerThrottle(
        entity=entity,
        broker=broker,
        registered=is_registered,
        config=dict(config),
        leader_rate=rates["leader"],
        follower_rate=rates["follower"],
        limits=tuple(limits),
        state=_state(used_by, running),
        used_by=used_by,
        reassignment_running=running,
        problems=tuple(problems),
    )


def _state(used_by: tuple[str, ...], reassignment_running: bool) -> ThrottleState:
    return ThrottleState.IN_USE if used_by or reassignment_running else ThrottleState.LEFTOVER
