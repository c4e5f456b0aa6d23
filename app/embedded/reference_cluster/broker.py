"""A simulated broker's own state: its logs, its view of each partition, its faults and its counters.

A broker knows only what a real broker knows: the LeaderAndIsr state the controller last sent it for each
partition it hosts, and, as a leader, what its followers' fetches told it. ZooKeeper I/O and the
simulation loop live in :mod:`app.embedded.reference_cluster.cluster`; nothing here touches a socket.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from collectors.kafka.model import (
    NO_LEADER,
    BrokerEndpoint,
    BrokerRegistration,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicPartition,
)

if TYPE_CHECKING:
    from kazoo.client import KazooClient


@functools.lru_cache(maxsize=1 << 20)
def series_labels(topic: str, partition: int) -> str:
    """The labels of a replica's ``kafka_log_log_size`` series as the text format writes them (names in
    order), made once per partition and shared by its replicas: a scrape only joins strings. Topic names
    are ``[a-zA-Z0-9._-]``, so nothing needs escaping."""
    return f'partition="{partition}",topic="{topic}"'


@dataclass(slots=True)
class ReplicaLog:
    """A replica's log, in messages: offsets [log_start, leo)."""

    log_start: float
    leo: float
    log_dir: int
    labels: str = ""
    """:func:`series_labels` of its partition."""


@dataclass(slots=True)
class LogDirDisk:
    """The filesystem a log dir is mounted on: its size, the bytes other files take (``base_bytes``,
    growing at ``growth_bytes_per_s``) and, as of the last tick, the bytes the dir's logs take."""

    size_bytes: float
    base_bytes: float
    growth_bytes_per_s: float = 0.0
    log_bytes: float = 0.0

    @property
    def used_bytes(self) -> float:
        return min(self.size_bytes, self.base_bytes + self.log_bytes)

    @property
    def avail_bytes(self) -> float:
        return self.size_bytes - self.used_bytes

    @property
    def full(self) -> bool:
        return self.base_bytes + self.log_bytes >= self.size_bytes


@dataclass(slots=True)
class FollowerState:
    """What a leader knows of one follower (Kafka's ``Replica`` on the leader side)."""

    leo: int = 0
    last_caught_up_ms: float = 0.0
    last_fetch_leader_leo: int = 0
    last_fetch_ms: float = 0.0

    def record_fetch(self, fetch_offset: int, leader_leo: int, now_ms: float) -> None:
        """Kafka's ``Replica.updateFetchState``: caught up if it fetched up to the leader's LEO now, or up to
        the leader's LEO as of its previous fetch (then it was caught up at that previous fetch)."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms


@dataclass(slots=True)
class PartitionView:
    """A broker's view of one partition it hosts, from the controller's last LeaderAndIsr request."""

    state: LeaderAndIsr
    assignment: ReplicaAssignment
    followers: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start_offset: int = 0
    isr_change_in_flight: bool = False

    @property
    def leader(self) -> int:
        return self.state.leader

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr

    @property
    def replication_factor(self) -> int:
        """Kafka counts a reassigning partition's RF without its adding replicas (URP, min-ISR)."""
        return len(self.assignment.replicas) - len(self.assignment.adding_replicas)


REQUEST_TYPES = ("Produce", "FetchConsumer", "FetchFollower")
"""Request meters a broker shows from its start (clients and followers are always there)."""


@dataclass(slots=True)
class BrokerCounters:
    """The broker process's JMX meters (bytes and messages by topic, ISR changes, requests): they start
    from zero at every broker start, as a real broker's do."""

    bytes_in: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    bytes_out: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    messages_in: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    replication_bytes_in: float = 0.0
    replication_bytes_out: float = 0.0
    failed_produce_requests: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    isr_shrinks: int = 0
    isr_expands: int = 0
    unclean_leader_elections: int = 0
    requests: defaultdict[str, float] = field(
        default_factory=lambda: defaultdict(float, dict.fromkeys(REQUEST_TYPES, 0.0))
    )


@dataclass(slots=True)
class HostCounters:
    """node_exporter's counters for the broker's host: they survive a broker restart (the host stays)."""

    cpu_seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("idle", "iowait", "system", "user"), 0.0)
    )
    disk_read_bytes: float = 0.0
    disk_written_bytes: float = 0.0
    disk_io_time_seconds: float = 0.0
    network_receive_bytes: float = 0.0
    network_transmit_bytes: float = 0.0


BASE_FDS = 240
"""A broker's open file descriptors before it opens any log (its JVM's jars, sockets, epoll)."""


@dataclass(slots=True)
class HostGauges:
    """Instantaneous host figures the traffic model derives each tick (a started broker has its base
    descriptors open before its first tick)."""

    memory_used_bytes: float = 0.0
    open_fds: int = BASE_FDS


@dataclass(slots=True)
class RequestLoad:
    """How busy the broker's request handler and network threads are, smoothed as Kafka's one-minute
    rates: behind ``RequestHandlerAvgIdlePercent``, ``NetworkProcessorAvgIdlePercent`` and the produce
    latency. Kept by the broker's JVM, so a restart starts it again from idle."""

    busy: float = 0.0
    """Fraction of the threads' time spent working, in [0, 1]."""


SIM_METADATA_VERSION_RANGE = {"min_version": 1, "max_version": 14}
"""The ``metadata.version`` levels a Kafka 3.6 broker supports (``IBP_3_0_IV1`` to ``IBP_3_6_IV2``)."""


class SimBroker:
    """One simulated Kafka broker: identity, ZooKeeper session, logs, partition views, faults."""

    def __init__(
        self,
        broker_id: int,
        rack: str | None,
        endpoint: BrokerEndpoint,
        log_dirs: int,
        log_dir_size_bytes: float = 100 * 1024**3,
        log_dir_base_bytes: float = 0.0,
    ) -> None:
        self.id = broker_id
        self.rack = rack
        self.endpoint = endpoint
        self.log_dirs = log_dirs
        self.log_dir_size_bytes = log_dir_size_bytes
        self.log_dir_base_bytes = log_dir_base_bytes
        self.disks = [LogDirDisk(log_dir_size_bytes, log_dir_base_bytes) for _ in range(log_dirs)]
        """The host's filesystems, one per log dir: they survive a broker restart (a failed one is
        replaced)."""
        self.metric_overrides: dict[str, float] = {}
        """Served series name -> the value every series of that name shows (``POST .../metrics``); kept
        across restarts until reset."""
        self.client: KazooClient | None = None
        self.alive = False
        self.registered = False
        self.broker_epoch = -1
        self.partitions: dict[TopicPartition, PartitionView] = {}
        self.logs: dict[TopicPartition, ReplicaLog] = {}
        self.stalled = False
        self.slow = False
        self.failed_log_dirs: set[int] = set()
        self.counters = BrokerCounters()
        self.host_counters = HostCounters()
        self.host = HostGauges()
        self.request_load = RequestLoad()
        self.next_isr_check_ms = 0.0
        self.session_lost = False
        self.controller_watch_set = False

    def registration(self, version: int, timestamp_ms: int) -> BrokerRegistration:
        """What a Kafka 3.6 broker writes: v5 carries its supported ``metadata.version`` range
        (``BrokerFeatures.defaultSupportedFeatures``)."""
        return BrokerRegistration(
            id=self.id,
            endpoints=(self.endpoint,),
            rack=self.rack,
            timestamp_ms=timestamp_ms,
            features={"metadata.version": dict(SIM_METADATA_VERSION_RANGE)} if version >= 5 else {},
            version=version,
        )

    # --- replica state ---------------------------------------------------------------------------

    def log_dir_for(self, tp: TopicPartition) -> int:
        """Kafka puts a new replica in the log dir with the fewest partitions; round robin is the same
        thing for a simulation that never deletes, and it keeps the choice stable across restarts."""
        existing = self.logs.get(tp)
        if existing is not None:
            return existing.log_dir
        healthy = [d for d in range(self.log_dirs) if d not in self.failed_log_dirs] or [0]
        return healthy[len(self.logs) % len(healthy)]

    def create_log(self, tp: TopicPartition, leo: float) -> ReplicaLog:
        """A replica log that already holds ``leo`` messages (data written before the simulation began)."""
        log = self.logs[tp] = ReplicaLog(
            log_start=0.0, leo=leo, log_dir=self.log_dir_for(tp), labels=series_labels(tp.topic, tp.partition)
        )
        return log

    def is_replica_online(self, tp: TopicPartition) -> bool:
        log = self.logs.get(tp)
        return self.alive and (log is None or log.log_dir not in self.failed_log_dirs)

    def measure_log_dirs(self, message_bytes: int) -> None:
        """Add up the bytes of the logs in each log dir (one pass over the logs)."""
        per_dir = [0.0] * self.log_dirs
        for log in self.logs.values():
            per_dir[log.log_dir] += log.leo - log.log_start
        for disk, messages in zip(self.disks, per_dir, strict=True):
            disk.log_bytes = max(0.0, messages) * message_bytes

    def offline_replicas(self) -> list[TopicPartition]:
        return [tp for tp, log in self.logs.items() if log.log_dir in self.failed_log_dirs]

    def leads(self, tp: TopicPartition) -> bool:
        view = self.partitions.get(tp)
        return view is not None and view.leader == self.id and self.is_replica_online(tp)

    def led_partitions(self) -> list[tuple[TopicPartition, PartitionView]]:
        return [
            (tp, v) for tp, v in self.partitions.items() if v.leader == self.id and self.is_replica_online(tp)
        ]

    def apply_leader_and_isr(
        self,
        tp: TopicPartition,
        state: LeaderAndIsr,
        assignment: ReplicaAssignment,
        leader_leo: float | None,
        log_start: float,
        now_ms: float,
    ) -> bool:
        """``ReplicaManager.becomeLeaderOrFollower`` for one partition; False if the request is stale.

        ``leader_leo`` is the new leader's log end offset when this broker becomes a follower: a follower
        truncates to what the leader has (Kafka truncates to the leader's end offset for its epoch).
        """
        current = self.partitions.get(tp)
        if current is not None and state.leader_epoch < current.state.leader_epoch:
            return False
        log = self.logs.get(tp)
        if log is None:
            start = log_start if state.leader != self.id else 0.0
            log = self.logs[tp] = ReplicaLog(
                log_start=start,
                leo=start,
                log_dir=self.log_dir_for(tp),
                labels=series_labels(tp.topic, tp.partition),
            )
        view = PartitionView(state=state, assignment=assignment)
        if state.leader == self.id:
            self._make_leader(view, current, log, now_ms)
        elif state.leader != NO_LEADER and leader_leo is not None and log.leo > leader_leo:
            log.leo = max(log.log_start, leader_leo)
        self.partitions[tp] = view
        return True

    def _make_leader(
        self, view: PartitionView, previous: PartitionView | None, log: ReplicaLog, now_ms: float
    ) -> None:
        was_leader = previous is not None and previous.leader == self.id
        view.leader_epoch_start_offset = (
            previous.leader_epoch_start_offset
            if was_leader and previous is not None and previous.state.leader_epoch == view.state.leader_epoch
            else int(log.leo)
        )
        for replica in view.assignment.replicas:
            if replica == self.id:
                continue
            old = previous.followers.get(replica) if was_leader and previous is not None else None
            if old is not None:
                view.followers[replica] = old
            else:
                caught_up = now_ms if replica in view.state.isr else 0.0
                view.followers[replica] = FollowerState(last_caught_up_ms=caught_up, last_fetch_ms=now_ms)

    def stop_replica(self, tp: TopicPartition, delete: bool) -> None:
        self.partitions.pop(tp, None)
        if delete:
            self.logs.pop(tp, None)

    def forget_session_state(self) -> None:
        """What a broker loses when its process stops: everything but its logs. A failed log dir is
        taken as replaced by the restart: its logs are gone and the replicas will copy them again."""
        self.partitions.clear()
        self.logs = {tp: log for tp, log in self.logs.items() if log.log_dir not in self.failed_log_dirs}
        for log_dir in self.failed_log_dirs:
            self.disks[log_dir] = LogDirDisk(self.log_dir_size_bytes, self.log_dir_base_bytes)
        self.failed_log_dirs.clear()
        self.session_lost = False
        self.counters = BrokerCounters()
        self.request_load = RequestLoad()
        self.alive = False
        self.registered = False
        self.broker_epoch = -1
        self.stalled = False
        self.slow = False
