"""The health model: the signals an on-call engineer acts on, derived from a :class:`ClusterSnapshot`.

Pure functions, no I/O: a snapshot (and optionally the brokers' ``UnderReplicatedPartitions``
gauges and the previous snapshot) in, values out. Definitions follow Kafka's own (docs/kafka-reference.md
§2-§3):

- under-replicated: |ISR| < |AR| − |adding| (Kafka's ``Partition.isUnderReplicated``), so a reassignment that
  is still copying to its new replicas does not page anyone;
- under/at min ISR: |ISR| against min(``min.insync.replicas``, |AR|) (Kafka's ``effectiveMinIsr``): below
  it ``acks=all`` producers fail, at it one more lost replica makes them fail;
- offline: no leader a client can reach;
- state unknown: the partition's state znode exists but cannot be read or parsed. Nothing is known of its
  leader or ISR, so it is none of the above (an unreadable znode must not page anyone for an outage that
  may not exist); it is counted on its own and the znode is in the snapshot's ``errors``;
- preferred-leader imbalance per broker as the controller's auto leader rebalance computes it;
- suspect brokers (docs/kafka-reference.md §3) and the cross-check of the brokers' URP gauges against
ZooKeeper.

``assess`` walks the partitions once; ``min.insync.replicas`` is resolved once per topic (and per leader
where a broker has its own value), by ``collectors.kafka.effective``, which also says where each value came
from.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from collectors.kafka.effective import (
    ConfigSource,
    MinIsrTable,
    PartitionSettings,
    StaticDefaults,
    TopicSettings,
    parse_min_insync_replicas,
)
from collectors.kafka.model import (
    NO_LEADER,
    ClusterSnapshot,
    LeaderRecoveryState,
    PartitionInfo,
    ReplicaAssignment,
    TopicPartition,
)
from collectors.kafka.zkdata import DEFAULT_BROKER_CONFIG_ENTITY

MIN_INSYNC_REPLICAS = "min.insync.replicas"
DEFAULT_MIN_INSYNC_REPLICAS = 1
"""Kafka's own default, used when neither the topic nor ``/config/brokers/<default>`` sets a value."""
DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE = 10


# --- values ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    tp: TopicPartition
    min_isr: int
    """The ``min.insync.replicas`` the leader enforces: the topic's, else the leader's dynamic per-broker
    value, else the cluster-wide default, else the static default given, else 1
    (``collectors.kafka.effective``)."""
    under_replicated: bool
    under_min_isr: bool
    at_min_isr: bool
    offline: bool
    preferred_leader: bool
    """The leader is ``replicas[0]``."""
    recovering: bool
    """``leader_recovery_state`` is RECOVERING: an unclean election happened and data may have been lost."""
    state_unknown: bool = False
    """The state znode exists but could not be read or parsed: every other flag is false (not known)."""


@dataclass(frozen=True, slots=True)
class BrokerImbalance:
    """Kafka's auto leader rebalance computation for the partitions whose ``replicas[0]`` is ``broker_id``."""

    broker_id: int
    preferred_partitions: int
    led_by_others: int
    ratio: float
    above_threshold: bool


@dataclass(frozen=True, slots=True)
class SuspectBroker:
    broker_id: int
    missing_from: int
    """Under-replicated partitions whose ISR misses this broker although it is one of their replicas."""
    share: float
    """``missing_from`` / all under-replicated partitions: 1.0 means every URP waits for this broker."""


@dataclass(frozen=True, slots=True)
class ControllerHealth:
    broker_id: int | None
    epoch: int | None
    active: bool
    changed: bool
    kraft: bool = False
    """A KRaft controller holds ``/controller`` (ZK→KRaft migration): ``broker_id`` is its node id, which is
    not in ``/brokers/ids``, and it is active all the same."""


@dataclass(frozen=True, slots=True)
class UrpCrossCheck:
    """The brokers' ``UnderReplicatedPartitions`` gauges against the count derived from ZooKeeper."""

    zookeeper: int
    gauges: int
    reporting: tuple[int, ...]
    missing: tuple[int, ...]
    agrees: bool
    offline_not_counted: int


@dataclass(frozen=True, slots=True)
class HealthSummary:
    brokers: int
    topics: int
    partitions: int
    under_replicated: int
    under_min_isr: int
    at_min_isr: int
    offline: int
    preferred_replica_imbalance: int
    brokers_down: tuple[int, ...]
    unknown: int = 0
    """Partitions whose state znode could not be read or parsed (in none of the other counts)."""


@dataclass(frozen=True, slots=True)
class HealthReport:
    partitions: Mapping[TopicPartition, PartitionHealth]
    summary: HealthSummary
    brokers_down: tuple[int, ...]
    imbalance: Mapping[int, BrokerImbalance]
    suspects: tuple[SuspectBroker, ...]
    controller: ControllerHealth
    urp_cross_check: UrpCrossCheck | None
    settings: TopicSettings | None = field(default=None, compare=False)
    """The effective topic settings with their sources (``collectors.kafka.effective``), as ``partitions``
    used them; :func:`partition_settings` reads them."""


# --- configuration -----------------------------------------------------------------------------------


def min_insync_replicas(
    snapshot: ClusterSnapshot, topic: str, default: int | None = DEFAULT_MIN_INSYNC_REPLICAS
) -> int:
    """The ``min.insync.replicas`` a topic runs with: its own config, else ``/config/brokers/<default>``,
    else ``default`` (the brokers' static setting, which ZooKeeper does not show; None: Kafka's 1).

    It decides when ``acks=all`` producers start failing, so getting it wrong hides or invents outages. (The
    per-leader level and the sources are :class:`collectors.kafka.effective.TopicSettings`'s.)
    """
    topic_info = snapshot.topics.get(topic)
    if topic_info is not None:
        value = parse_min_insync_replicas(topic_info.config.get(MIN_INSYNC_REPLICAS))
        if value is not None:
            return value
    return _broker_default_min_isr(snapshot, default)


def _broker_default_min_isr(snapshot: ClusterSnapshot, default: int | None) -> int:
    config = snapshot.broker_configs.get(DEFAULT_BROKER_CONFIG_ENTITY, {})
    value = parse_min_insync_replicas(config.get(MIN_INSYNC_REPLICAS))
    if value is not None:
        return value
    return DEFAULT_MIN_INSYNC_REPLICAS if default is None else default


def broker_default_min_insync_replicas(
    snapshot: ClusterSnapshot, default: int | None = DEFAULT_MIN_INSYNC_REPLICAS
) -> int:
    """The ``min.insync.replicas`` of a topic that sets none: ``/config/brokers/<default>``, else ``default``
    (None: Kafka's 1)."""
    return _broker_default_min_isr(snapshot, default)


def effective_min_isr(min_isr: int, assigned_replicas: int) -> int:
    """Kafka's ``effectiveMinIsr``: min(``min.insync.replicas``, the assigned replicas, adding ones too).

    A topic with ``min.insync.replicas`` above its replication factor does not refuse every write: the
    floor is the replicas it has. (``assess``'s hot loop inlines this comparison.)
    """
    return min_isr if min_isr < assigned_replicas else assigned_replicas


# --- per partition -----------------------------------------------------------------------------------

# One bit per signal: ``assess`` keeps an int per partition and builds PartitionHealth objects only when read
# (a frozen dataclass costs about 2 µs to build: 0.4 s at 200k partitions, most of an assessment).
_UNDER_REPLICATED = 1
_UNDER_MIN_ISR = 2
_AT_MIN_ISR = 4
_OFFLINE = 8
_PREFERRED_LEADER = 16
_RECOVERING = 32
_NO_STATE = 64
_STATE_UNKNOWN = 128


def expected_isr_size(assignment: ReplicaAssignment) -> int:
    """|AR| − |adding|: the replicas that must be in sync (Kafka's replication factor during a reassignment).

    New replicas of a running reassignment are still copying; counting them would report every
    reassignment as an under-replicated partition and bury real ones.
    """
    replicas, adding = assignment.replicas, assignment.adding_replicas
    if not adding:
        return len(replicas)
    return len(replicas) - sum(1 for r in set(adding) if r in replicas)


def partition_health(info: PartitionInfo, min_isr: int, live_brokers: Set[int]) -> PartitionHealth:
    """Every per-partition signal at once.

    Under-replicated partitions have lost redundancy; under-min-ISR ones reject ``acks=all`` writes;
    at-min-ISR ones will on the next failure; offline ones accept nothing; a non-preferred leader skews load;
    a recovering one had an unclean election and may have lost data. Without a state znode (no controller
    has initialised the partition) only ``offline`` is known, so the ISR-based flags stay false. With a
    state znode that cannot be read, only ``state_unknown`` is set.
    """
    return _from_flags(info.tp, min_isr, _flags(info, min_isr, live_brokers))


def _flags(info: PartitionInfo, min_isr: int, live_brokers: Set[int]) -> int:
    state = info.state
    if state is None:
        return _STATE_UNKNOWN | _NO_STATE if info.state_error is not None else _OFFLINE | _NO_STATE
    assignment = info.assignment
    replicas = assignment.replicas
    expected = expected_isr_size(assignment) if assignment.adding_replicas else len(replicas)
    isr_size = len(state.isr)
    # Kafka's effectiveMinIsr: min(min.insync.replicas, every assigned replica, adding ones included).
    floor = min_isr if min_isr < len(replicas) else len(replicas)
    leader = state.leader
    flags = _UNDER_REPLICATED if isr_size < expected else 0
    if isr_size < floor:
        flags |= _UNDER_MIN_ISR
    elif isr_size == floor and floor > 0:
        flags |= _AT_MIN_ISR
    if leader == NO_LEADER or leader not in live_brokers:
        flags |= _OFFLINE
    if replicas and leader == replicas[0]:
        flags |= _PREFERRED_LEADER
    if state.leader_recovery_state == LeaderRecoveryState.RECOVERING:
        flags |= _RECOVERING
    return flags


def _from_flags(tp: TopicPartition, min_isr: int, flags: int) -> PartitionHealth:
    return PartitionHealth(
        tp=tp,
        min_isr=min_isr,
        under_replicated=flags & _UNDER_REPLICATED != 0,
        under_min_isr=flags & _UNDER_MIN_ISR != 0,
        at_min_isr=flags & _AT_MIN_ISR != 0,
        offline=flags & _OFFLINE != 0,
        preferred_leader=flags & _PREFERRED_LEADER != 0,
        recovering=flags & _RECOVERING != 0,
        state_unknown=flags & _STATE_UNKNOWN != 0,
    )


class PartitionHealthMap(Mapping[TopicPartition, PartitionHealth]):
    """The report's per-partition health, in the snapshot's order; each entry is built on first read.

    Reading a few partitions (alerts, one topic) stays cheap on a 200k-partition cluster; reading all of them
    costs what building them costs, once.
    """

    __slots__ = ("_cache", "_live", "_min_isr", "_partitions")

    def __init__(
        self,
        partitions: Mapping[TopicPartition, PartitionInfo],
        live_brokers: Set[int],
        min_isr_by_topic: Mapping[str, int],
        default_min_isr: int,
        min_isr_by_leader: Mapping[int, int] | None = None,
    ) -> None:
        self._partitions = partitions
        self._live = live_brokers
        self._min_isr = MinIsrTable(min_isr_by_topic, min_isr_by_leader or {}, default_min_isr)
        self._cache: dict[TopicPartition, PartitionHealth] = {}

    def __getitem__(self, tp: TopicPartition) -> PartitionHealth:
        health = self._cache.get(tp)
        if health is None:
            info = self._partitions[tp]
            min_isr = self._min_isr.of(tp.topic, info.leader)
            health = self._cache[tp] = partition_health(info, min_isr, self._live)
        return health

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._partitions)

    def __len__(self) -> int:
        return len(self._partitions)

    def __contains__(self, tp: object) -> bool:
        return tp in self._partitions

    def __repr__(self) -> str:
        return f"PartitionHealthMap({len(self)} partitions)"

    def problems(self) -> dict[str, list[TopicPartition]]:
        """The partitions with each problem (``under_replicated``, ``under_min_isr``, ``at_min_isr``,
        ``offline``, ``unknown``), in one pass without building a PartitionHealth per partition."""
        found: dict[str, list[TopicPartition]] = {name: [] for name, _ in _PROBLEMS}
        lists = [(found[name], bit) for name, bit in _PROBLEMS]
        live, min_isr_of = self._live, self._min_isr.of
        for tp, info in self._partitions.items():
            flags = _flags(info, min_isr_of(tp.topic, info.leader), live)
            if flags & _ANY_PROBLEM:
                for target, bit in lists:
                    if flags & bit:
                        target.append(tp)
        return found


_PROBLEMS = (
    ("under_replicated", _UNDER_REPLICATED),
    ("under_min_isr", _UNDER_MIN_ISR),
    ("at_min_isr", _AT_MIN_ISR),
    ("offline", _OFFLINE),
    ("unknown", _STATE_UNKNOWN),
)
_ANY_PROBLEM = _UNDER_REPLICATED | _UNDER_MIN_ISR | _AT_MIN_ISR | _OFFLINE | _STATE_UNKNOWN


# --- per broker --------------------------------------------------------------------------------------


def no_kafka_cluster(snapshot: ClusterSnapshot) -> str | None:
    """Why ``snapshot`` shows no Kafka cluster at all (None when it shows one): no ``/cluster/id``, no broker
    registered, no topic, no controller. Kafka writes ``/cluster/id`` when its first broker starts and keeps
    it, and a cluster whose brokers are all down still has its topics, so this is a wrong connect string
    or chroot (``host:port/typo``), never an unhealthy cluster: tools must say so rather than report an
    empty cluster as healthy."""
    if snapshot.cluster_id or snapshot.brokers or snapshot.topics or snapshot.partitions:
        return None
    if snapshot.controller.broker_id is not None:
        return None
    refused = [e.path for e in snapshot.errors if e.reason.startswith("not authorised")]
    if refused:
        return (
            f"not authorised to read {', '.join(refused[:3])}{' ...' if len(refused) > 3 else ''}: the "
            "ZooKeeper ACLs refuse these credentials (check the digest, SASL or TLS settings)"
        )
    return (
        "no Kafka cluster there: no /cluster/id, no broker in /brokers/ids, no topic in /brokers/topics "
        "(is the chroot right? Kafka's is the path after host:port in its zookeeper.connect)"
    )


def brokers_down(snapshot: ClusterSnapshot) -> tuple[int, ...]:
    """Brokers that hold replicas (appear in some AR) but are not registered in ``/brokers/ids``.

    Their replicas are gone from every ISR, so each partition they hold is one failure closer to being
    offline; this is the first thing to look at during an incident.
    """
    assigned: set[int] = set()
    for info in snapshot.partitions.values():
        assigned.update(info.assignment.replicas)
    return tuple(sorted(assigned.difference(snapshot.brokers)))


def broker_imbalance(
    broker_id: int, preferred_partitions: int, led_by_others: int, percentage: int
) -> BrokerImbalance:
    """One broker's preferred-leader imbalance: above the threshold (strictly, like Kafka) the controller's
    auto rebalance moves leadership back, which operators who disabled it have to do by hand
    (docs/kafka-reference.md §2).

    Compared in integers: ``led_by_others / preferred_partitions > percentage / 100`` without rounding.
    """
    ratio = led_by_others / preferred_partitions if preferred_partitions else 0.0
    return BrokerImbalance(
        broker_id=broker_id,
        preferred_partitions=preferred_partitions,
        led_by_others=led_by_others,
        ratio=ratio,
        above_threshold=led_by_others * 100 > percentage * preferred_partitions,
    )


def imbalance(
    partitions: Iterable[PartitionInfo],
    *,
    percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
    brokers: Iterable[int] = (),
    excluded_topics: Set[str] = frozenset(),
) -> dict[int, BrokerImbalance]:
    """Per preferred broker B = ``replicas[0]``: partitions (with a state) whose leader is not B.

    This is ``KafkaController.checkAndTriggerAutoLeaderRebalance``; a broker above the threshold serves less
    than its share of leaders, so others carry its load. Topics being deleted are left out, as Kafka does.
    ``brokers`` get an entry even when they are no partition's preferred leader.
    """
    preferred: Counter[int] = Counter()
    led_by_others: Counter[int] = Counter()
    for info in partitions:
        _count_preference(info, preferred, led_by_others, excluded_topics)
    return _imbalance_from_counts(preferred, led_by_others, percentage, brokers)


def _count_preference(
    info: PartitionInfo, preferred: Counter[int], led_by_others: Counter[int], excluded_topics: Set[str]
) -> None:
    state, replicas = info.state, info.assignment.replicas
    if state is None or not replicas or info.tp.topic in excluded_topics:
        return
    broker = replicas[0]
    preferred[broker] += 1
    if state.leader != broker:
        led_by_others[broker] += 1


def _imbalance_from_counts(
    preferred: Counter[int], led_by_others: Counter[int], percentage: int, brokers: Iterable[int]
) -> dict[int, BrokerImbalance]:
    ids = sorted(set(preferred).union(brokers))
    return {b: broker_imbalance(b, preferred[b], led_by_others[b], percentage) for b in ids}


def suspect_brokers(under_replicated: Iterable[PartitionInfo]) -> tuple[SuspectBroker, ...]:
    """For each broker, how many under-replicated partitions' ISRs miss it, most first
    (docs/kafka-reference.md §3).

    When one broker is missing from (nearly) every URP, it is that broker (dead, stuck or slow), not the
    network or the cluster: look at it first. Replicas being added by a reassignment are not blamed, as they
    do not count towards under-replication either. Every broker missing from at least one URP is listed;
    ``share`` says how strong the case is.
    """
    missing: dict[int, int] = {}
    total = 0
    for info in under_replicated:  # every partition during a wide outage: tuples, no sets
        total += 1
        isr, adding = info.isr, info.assignment.adding_replicas
        for r in info.assignment.replicas:  # distinct: Kafka refuses duplicate replicas
            if r not in isr and r not in adding:
                missing[r] = missing.get(r, 0) + 1
    ranked = sorted(missing.items(), key=lambda item: (-item[1], item[0]))
    return tuple(SuspectBroker(b, count, count / total) for b, count in ranked)


# --- cluster -----------------------------------------------------------------------------------------


def controller_health(snapshot: ClusterSnapshot, previous: ClusterSnapshot | None = None) -> ControllerHealth:
    """Who holds ``/controller`` and whether that changed since ``previous``.

    Without an active controller no leader is elected and no broker failure is handled; a change (new broker
    or new epoch) means a failover happened, which often explains a burst of leader moves. During a
    ZK→KRaft migration a KRaft controller holds ``/controller`` (``kraftControllerEpoch`` >= 0) with a node
    id that is no broker's: it is the active controller, not a missing one.
    """
    current = snapshot.controller
    changed = previous is not None and (previous.controller.broker_id, previous.controller.epoch) != (
        current.broker_id,
        current.epoch,
    )
    return ControllerHealth(
        broker_id=current.broker_id,
        epoch=current.epoch,
        active=current.broker_id is not None and (current.is_kraft or current.broker_id in snapshot.brokers),
        changed=changed,
        kraft=current.is_kraft,
    )


def urp_cross_check(
    led_urps: int, leaderless_urps: int, registered: Iterable[int], gauges: Mapping[int, float]
) -> UrpCrossCheck:
    """Compares the brokers' ``UnderReplicatedPartitions`` gauges with what ZooKeeper says.

    Only a partition's leader counts it, so the gauges add up to the URPs that have a live leader; a scrape
    that failed (``missing``) or a gauge that is NaN hides URPs, and a disagreement means the dashboard and
    ZooKeeper tell different stories. URPs without a live leader are reported by nobody
    (docs/kafka-reference.md §3: the offline broker's partition count then equals the other brokers' URP sum).
    A gauge from a broker that is not registered still counts: a broker that lost its ZooKeeper session may
    still act as a leader.
    """
    finite = {b: v for b, v in gauges.items() if math.isfinite(v)}
    reporting = tuple(sorted(finite))
    missing = tuple(sorted(set(registered).difference(finite)))
    total = round(sum(finite.values()))
    return UrpCrossCheck(
        zookeeper=led_urps,
        gauges=total,
        reporting=reporting,
        missing=missing,
        agrees=total == led_urps and not missing,
        offline_not_counted=leaderless_urps,
    )


def assess(
    snapshot: ClusterSnapshot,
    *,
    previous: ClusterSnapshot | None = None,
    urp_gauges: Mapping[int, float] | None = None,
    default_min_insync_replicas: int | None = None,
    default_unclean_leader_election_enable: bool | None = None,
    leader_imbalance_per_broker_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
) -> HealthReport:
    """The cluster's health, from one pass over its partitions.

    ``urp_gauges`` are the brokers' ``UnderReplicatedPartitions`` values by broker id (leave out a broker
    whose scrape failed); ``default_min_insync_replicas`` and ``default_unclean_leader_election_enable`` are
    the brokers' static settings (``server.properties``), which ZooKeeper does not hold: None when the user
    did not give them (Kafka's defaults apply, and the sources say so).
    """
    live = frozenset(snapshot.brokers)
    settings = TopicSettings(
        snapshot, StaticDefaults(default_min_insync_replicas, default_unclean_leader_election_enable)
    )
    table = settings.min_isr_table()
    walk = _walk(snapshot, live, table)
    down = tuple(sorted(walk.assigned.difference(live)))
    leaderless_urps = walk.count(_UNDER_REPLICATED | _OFFLINE)
    cross_check = None
    if urp_gauges is not None:
        led_urps = len(walk.urps) - leaderless_urps
        cross_check = urp_cross_check(led_urps, leaderless_urps, live, urp_gauges)
    return HealthReport(
        partitions=PartitionHealthMap(
            snapshot.partitions, live, table.by_topic, table.default, table.by_leader
        ),
        summary=_summary(snapshot, walk, down),
        brokers_down=down,
        imbalance=_imbalance_from_counts(
            walk.preferred, walk.led_by_others, leader_imbalance_per_broker_percentage, live
        ),
        suspects=suspect_brokers(walk.urps),
        controller=controller_health(snapshot, previous),
        urp_cross_check=cross_check,
        settings=settings,
    )


def partition_settings(
    report: HealthReport, snapshot: ClusterSnapshot, info: PartitionInfo
) -> PartitionSettings:
    """A partition's effective ``min.insync.replicas`` and ``unclean.leader.election.enable`` with their
    sources (the same resolution ``report.partitions`` used for its flags)."""
    settings = report.settings if report.settings is not None else TopicSettings(snapshot)
    return settings.of_partition(info.tp.topic, info.leader)


def partition_json(
    info: PartitionInfo, health: PartitionHealth, settings: PartitionSettings
) -> dict[str, Any]:
    """One partition as JSON: its assignment and state, its health flags and its effective
    ``min.insync.replicas`` and ``unclean.leader.election.enable`` with their sources
    (:func:`partition_settings`). ``kafka-health describe --format json`` prints it; the API's
    ``PartitionOut`` is the same without ``zk_version`` (the state znode's version)."""
    state = info.state
    min_isr, unclean = settings.min_insync_replicas, settings.unclean_leader_election_enable
    return {
        "topic": info.tp.topic,
        "partition": info.tp.partition,
        "replicas": list(info.assignment.replicas),
        "isr": list(info.isr),
        "leader": info.leader,
        "leader_epoch": None if state is None else state.leader_epoch,
        "controller_epoch": None if state is None else state.controller_epoch,
        "leader_recovery_state": None if state is None else state.leader_recovery_state,
        "zk_version": None if state is None else state.zk_version,
        "adding_replicas": list(info.assignment.adding_replicas),
        "removing_replicas": list(info.assignment.removing_replicas),
        "under_replicated": health.under_replicated,
        "under_min_isr": health.under_min_isr,
        "at_min_isr": health.at_min_isr,
        "offline": health.offline,
        "preferred_leader": health.preferred_leader,
        "min_isr": health.min_isr,
        "min_isr_source": min_isr.source.value,
        "min_isr_assumed_from": _source_json(min_isr.assumed_from),
        "min_isr_unknown_reason": min_isr.reason,
        "unclean_leader_election": unclean.value,
        "unclean_leader_election_source": unclean.source.value,
        "unclean_leader_election_assumed_from": _source_json(unclean.assumed_from),
        "unclean_leader_election_unknown_reason": unclean.reason,
        "state_unknown": health.state_unknown,
    }


def _source_json(source: ConfigSource | None) -> str | None:
    return None if source is None else source.value


@dataclass(slots=True)
class _Walk:
    """What the one pass over the partitions collects."""

    flag_counts: dict[int, int] = field(default_factory=dict)
    urps: list[PartitionInfo] = field(default_factory=list)
    assigned: set[int] = field(default_factory=set)
    preferred: Counter[int] = field(default_factory=Counter)
    led_by_others: Counter[int] = field(default_factory=Counter)

    def count(self, required: int, absent: int = 0) -> int:
        """Partitions with every bit of ``required`` set and none of ``absent``."""
        return sum(
            n for flags, n in self.flag_counts.items() if flags & required == required and not flags & absent
        )


def _walk(snapshot: ClusterSnapshot, live: Set[int], min_isr: MinIsrTable) -> _Walk:
    """Hot loop (200k iterations on a big cluster): locals only, no per-partition objects."""
    walk = _Walk()
    deleting = frozenset(name for name, topic in snapshot.topics.items() if topic.marked_for_deletion)
    flag_counts, urps, add_assigned = walk.flag_counts, walk.urps, walk.assigned.update
    preferred, led_by_others, min_isr_of = walk.preferred, walk.led_by_others, min_isr.by_topic.get
    by_leader, default_min_isr = min_isr.by_leader, min_isr.default
    for tp, info in snapshot.partitions.items():
        topic_min_isr = min_isr_of(tp.topic)
        if topic_min_isr is None:
            topic_min_isr = by_leader.get(info.leader, default_min_isr) if by_leader else default_min_isr
        flags = _flags(info, topic_min_isr, live)
        flag_counts[flags] = flag_counts.get(flags, 0) + 1
        if flags & _UNDER_REPLICATED:
            urps.append(info)
        replicas = info.assignment.replicas
        add_assigned(replicas)
        # _count_preference's rule, inlined
        if replicas and not flags & _NO_STATE and (not deleting or tp.topic not in deleting):
            broker = replicas[0]
            preferred[broker] += 1
            if not flags & _PREFERRED_LEADER:
                led_by_others[broker] += 1
    return walk


def _summary(snapshot: ClusterSnapshot, walk: _Walk, down: tuple[int, ...]) -> HealthSummary:
    return HealthSummary(
        brokers=len(snapshot.brokers),
        topics=len({tp.topic for tp in snapshot.partitions}.union(snapshot.topics)),
        partitions=len(snapshot.partitions),
        under_replicated=len(walk.urps),
        under_min_isr=walk.count(_UNDER_MIN_ISR),
        at_min_isr=walk.count(_AT_MIN_ISR),
        offline=walk.count(_OFFLINE),
        preferred_replica_imbalance=walk.count(0, absent=_PREFERRED_LEADER | _NO_STATE),
        brokers_down=down,
        unknown=walk.count(_STATE_UNKNOWN),
    )


def problem_partitions(report: HealthReport) -> dict[str, list[TopicPartition]]:
    """The partitions with each problem (``under_replicated``, ``under_min_isr``, ``at_min_isr``,
    ``offline``, ``unknown``: the state znode is unreadable), in the snapshot's order."""
    if isinstance(report.partitions, PartitionHealthMap):
        return report.partitions.problems()
    found: dict[str, list[TopicPartition]] = {name: [] for name, _ in _PROBLEMS}
    for tp, health in report.partitions.items():
        for name, _ in _PROBLEMS:
            if getattr(health, "state_unknown" if name == "unknown" else name):
                found[name].append(tp)
    return found
