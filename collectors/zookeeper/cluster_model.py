"""The ZooKeeper collector's model of the cluster: what to read, how each reply changes the cluster, and
the immutable snapshots built from it. No I/O and no threads: the collector thread alone drives it (tests
drive it with a fake reader or none).

How it reads (docs/kafka-reference.md §1): the children of ``/brokers/ids``, ``/brokers/topics``,
``/config/topics``, ``/config/brokers`` and ``/admin/delete_topics`` and the singletons (``/controller``,
``/controller_epoch``, ``/cluster/id``, the two admin znodes, ``/migration``) and the children of
``/log_dir_event_notification`` first (:meth:`ClusterModel.root_reads`);
each reply asks for what it names (a broker, topic or config znode; a topic znode its partitions' state
znodes), so the tree is read level by level (:meth:`ClusterModel.apply`). Every read sets a watch (unless
the model is built with ``watch=False``); :func:`read_for_event` is the read that refreshes what a watch
event is about. A znode that does not exist is watched with ``exists`` where its creation matters
(singletons, state znodes, the parents). A malformed, unreadable or vanished znode is recorded in
``snapshot.errors`` (path + reason) and skipped.

Snapshots: :meth:`ClusterModel.build` hands out immutable views; partitions are kept per topic and a
topic's dict is copied before its first change after a snapshot was built from it (copy-on-write), so
:class:`PartitionMap` (``snapshot.partitions``) never copies all 200k partitions for one change.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, Mapping, ValuesView
from enum import IntEnum
from types import MappingProxyType
from typing import Any

from collectors.kafka import zkdata
from collectors.kafka.model import (
    BrokerRegistration,
    ClusterSnapshot,
    ControllerInfo,
    LogDirEvent,
    MigrationState,
    PartitionInfo,
    PendingOperations,
    ReplicaAssignment,
    TopicInfo,
    TopicPartition,
    ZnodeError,
)
from collectors.zookeeper.wire import Code, Op, Read, Reply, WatchEvent

# --- the partition map -------------------------------------------------------------------------------


class PartitionMap(Mapping[TopicPartition, PartitionInfo]):
    """``snapshot.partitions``: an immutable mapping stored per topic, so that a new snapshot version
    copies only the topics that changed (copy-on-write), never all 200k partitions."""

    __slots__ = ("_by_topic", "_len")

    def __init__(self, by_topic: Mapping[str, Mapping[int, PartitionInfo]], length: int) -> None:
        self._by_topic = by_topic
        self._len = length

    def __getitem__(self, tp: TopicPartition) -> PartitionInfo:
        try:
            return self._by_topic[tp[0]][tp[1]]
        except (KeyError, IndexError, TypeError):
            raise KeyError(tp) from None

    def __iter__(self) -> Iterator[TopicPartition]:
        for partitions in self._by_topic.values():
            for info in partitions.values():
                yield info.tp

    def __len__(self) -> int:
        return self._len

    def values(self) -> ValuesView[PartitionInfo]:
        return _PartitionValues(self)

    def items(self) -> ItemsView[TopicPartition, PartitionInfo]:
        return _PartitionItems(self)

    def of_topic(self, topic: str) -> Mapping[int, PartitionInfo]:
        """The partitions of one topic by partition id (empty if the topic is unknown)."""
        return MappingProxyType(self._by_topic.get(topic, {}))

    def _infos(self) -> Iterator[PartitionInfo]:
        for partitions in self._by_topic.values():
            yield from partitions.values()

    def __repr__(self) -> str:
        return f"PartitionMap({len(self._by_topic)} topics, {self._len} partitions)"


class _PartitionValues(ValuesView[PartitionInfo]):
    _mapping: PartitionMap

    def __iter__(self) -> Iterator[PartitionInfo]:
        return self._mapping._infos()


class _PartitionItems(ItemsView[TopicPartition, PartitionInfo]):
    _mapping: PartitionMap

    def __iter__(self) -> Iterator[tuple[TopicPartition, PartitionInfo]]:
        return ((info.tp, info) for info in self._mapping._infos())


# --- the cluster model (collector thread only; no I/O) -----------------------------------------------


class Kind(IntEnum):
    """What a read is about; decides how its reply is applied."""

    BROKER_IDS = 1
    BROKER = 2
    TOPICS = 3
    TOPIC = 4
    STATE = 5
    CONTROLLER = 6
    CONTROLLER_EPOCH = 7
    CLUSTER_ID = 8
    PREFERRED_ELECTION = 9
    REASSIGNMENT = 10
    DELETIONS = 11
    TOPIC_CONFIGS = 12
    TOPIC_CONFIG = 13
    BROKER_CONFIGS = 14
    BROKER_CONFIG = 15
    MIGRATION = 16
    LOG_DIR_EVENTS = 17
    LOG_DIR_EVENT = 18


_LISTS: Mapping[Kind, str] = MappingProxyType(
    {
        Kind.BROKER_IDS: zkdata.BROKER_IDS_PATH,
        Kind.TOPICS: zkdata.BROKER_TOPICS_PATH,
        Kind.TOPIC_CONFIGS: f"{zkdata.CONFIG_PATH}/topics",
        Kind.BROKER_CONFIGS: f"{zkdata.CONFIG_PATH}/brokers",
        Kind.DELETIONS: zkdata.DELETE_TOPICS_PATH,
        Kind.LOG_DIR_EVENTS: zkdata.LOG_DIR_EVENT_NOTIFICATION_PATH,
    }
)
_SINGLETONS: Mapping[Kind, str] = MappingProxyType(
    {
        Kind.CONTROLLER: zkdata.CONTROLLER_PATH,
        Kind.CONTROLLER_EPOCH: zkdata.CONTROLLER_EPOCH_PATH,
        Kind.CLUSTER_ID: zkdata.CLUSTER_ID_PATH,
        Kind.PREFERRED_ELECTION: zkdata.PREFERRED_REPLICA_ELECTION_PATH,
        Kind.REASSIGNMENT: zkdata.REASSIGN_PARTITIONS_PATH,
        Kind.MIGRATION: zkdata.MIGRATION_PATH,
    }
)
_KIND_OF_PATH: Mapping[str, Kind] = MappingProxyType(
    {path: kind for kind, path in (*_LISTS.items(), *_SINGLETONS.items())}
)
_CHILD_KINDS: Mapping[Kind, Kind] = MappingProxyType(
    {
        Kind.BROKER_IDS: Kind.BROKER,
        Kind.TOPICS: Kind.TOPIC,
        Kind.TOPIC_CONFIGS: Kind.TOPIC_CONFIG,
        Kind.BROKER_CONFIGS: Kind.BROKER_CONFIG,
    }
)
_WATCH_WHEN_ABSENT = frozenset({*_LISTS, *_SINGLETONS})
"""Kinds whose creation no parent's children watch reports: an ``exists`` watch waits for them (state
znodes too, while their partition exists: see ``_on_state``)."""
_GET_DATA, _EXISTS, _STATE = Op.GET_DATA, Op.EXISTS, Kind.STATE
"""Hot-path aliases: an enum member costs a lookup through its class each time (~0.1 us in 3.11)."""
_SESSION_CODES = frozenset({Code.CONNECTION_LOSS, Code.SESSION_EXPIRED})
_READ_CODES = frozenset({Code.OK, Code.NO_NODE})
_EMPTY_CONFIG: Mapping[str, str] = MappingProxyType({})
_EMPTY_REASSIGNMENTS: Mapping[TopicPartition, tuple[int, ...]] = MappingProxyType({})


def _reason(code: int) -> str:
    if code == Code.NO_AUTH:
        return "not authorised: the ZooKeeper ACL refuses this read (NoAuth, -102); see docs/collectors.md"
    return f"ZooKeeper refused the read: {Code.NAMES.get(code, 'error')} ({code})"


def read_for_event(event: WatchEvent) -> Read | None:
    """The read that refreshes what a watch event is about (None for paths the collector never watches)."""
    path = event.path
    kind = _KIND_OF_PATH.get(path)
    if kind is not None:
        return Read(Op.GET_CHILDREN if kind in _LISTS else Op.GET_DATA, path, True, kind)
    parts = path.split("/")
    if len(parts) == 4:
        parent = _KIND_OF_PATH.get(path.rsplit("/", 1)[0])
        child = _CHILD_KINDS.get(parent) if parent is not None else None
        if child is Kind.BROKER:
            return Read(Op.GET_DATA, path, True, child, int(parts[3])) if parts[3].isdecimal() else None
        if child is not None:
            return Read(Op.GET_DATA, path, True, child, parts[3])
    is_state = (
        len(parts) == 7 and parts[1:3] == ["brokers", "topics"] and parts[4:7:2] == ["partitions", "state"]
    )
    if is_state and parts[5].isdecimal():
        return Read(Op.GET_DATA, path, True, Kind.STATE, TopicPartition(parts[3], int(parts[5])))
    return None


class ClusterModel:
    """The collector's working state: applies replies, says what to read next, builds snapshots.

    Pure (no I/O, no threads), so it can be driven by a fake reader. Partitions are kept per topic; a
    topic's dict is copied before its first change after a snapshot was built from it (copy-on-write).
    """

    def __init__(self, watch: bool = True) -> None:
        self.watch = watch
        self.dirty = False
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id: int | None = None
        self.kraft_controller_epoch: int | None = None
        self.migration: MigrationState | None = None
        self.controller_epoch: int | None = None
        self.controller_epoch_version: int | None = None
        self.cluster_id: str | None = None
        self.assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        self.topic_ids: dict[str, str | None] = {}
        self.partitions: dict[str, dict[int, PartitionInfo]] = {}
        self.partition_count = 0
        self.topic_configs: dict[str, Mapping[str, str]] = {}
        self.broker_configs: dict[str, Mapping[str, str]] = {}
        self.deletions: tuple[str, ...] = ()
        self.preferred_election: tuple[TopicPartition, ...] = ()
        self.reassignments: Mapping[TopicPartition, tuple[int, ...]] = _EMPTY_REASSIGNMENTS
        self.log_dir_events: dict[str, LogDirEvent] = {}
        """Child name -> the event it holds (malformed ones are errors)."""
        self._log_dir_event_names: frozenset[str] = frozenset()
        self.log_dir_event_sequence: int | None = None
        """The highest notification number listed so far (see ``ClusterSnapshot.log_dir_event_sequence``)."""
        self.errors: dict[str, ZnodeError] = {}
        self._owned: set[str] = set()
        self._views: dict[str, Any] = {}

    def root_reads(self) -> list[Read]:
        """The first level of a full scan."""
        w = self.watch
        return [Read(Op.GET_CHILDREN, path, w, kind) for kind, path in _LISTS.items()] + [
            Read(Op.GET_DATA, path, w, kind) for kind, path in _SINGLETONS.items()
        ]

    def apply(self, reply: Reply) -> list[Read] | None:
        """Apply one reply; return the reads it calls for (None if none)."""
        read, code = reply.read, reply.code
        if code in _SESSION_CODES:
            return None  # the session event that comes with it triggers the resync
        if read.op == _EXISTS:
            if code == Code.OK:  # created between our read and the exists: read it now
                op = Op.GET_CHILDREN if read.kind in _LISTS else Op.GET_DATA
                return [read._replace(op=op)]
            if code != Code.NO_NODE:
                self._error(read.path, _reason(code))
            return None
        if code not in _READ_CODES:
            self._error(read.path, _reason(code))
            if read.kind == _STATE:
                self._state_unreadable(read.key, _reason(code))
            return None
        follow = _HANDLERS[read.kind](self, reply)
        if code == Code.NO_NODE and self.watch and read.kind in _WATCH_WHEN_ABSENT:
            return [*(follow or ()), read._replace(op=Op.EXISTS)]
        return follow

    # --- handlers ---

    def _on_children(self, reply: Reply) -> list[Read] | None:
        read = reply.read
        kind = Kind(read.kind)
        child_kind = _CHILD_KINDS[kind]
        known: Mapping[Any, Any]
        if kind is Kind.BROKER_IDS:
            known = self.brokers
        elif kind is Kind.TOPICS:
            known = self.assignments
        else:
            known = self.topic_configs if kind is Kind.TOPIC_CONFIGS else self.broker_configs
        listed: dict[Any, str] = {}
        for name in reply.children or ():
            if kind is Kind.BROKER_IDS and not name.isdecimal():
                self._error(f"{read.path}/{name}", f"{name!r} is not a broker id")
                continue
            listed[int(name) if kind is Kind.BROKER_IDS else name] = name
        for key in [k for k in known if k not in listed]:
            self._remove(child_kind, key)
        self._forget_errors_under(read.path, set(reply.children or ()))
        return [
            Read(Op.GET_DATA, f"{read.path}/{name}", self.watch, child_kind, key)
            for key, name in listed.items()
            if key not in known
        ] or None

    def _remove(self, kind: Kind, key: Any) -> None:
        if kind is Kind.BROKER:
            del self.brokers[key]
            self._views.pop("brokers", None)
        elif kind is Kind.TOPIC:
            self._drop_topic(key)
        elif kind is Kind.TOPIC_CONFIG:
            del self.topic_configs[key]
            self._views.pop("topics", None)
        else:
            del self.broker_configs[key]
            self._views.pop("broker_configs", None)
        self.dirty = True

    def _on_broker(self, reply: Reply) -> None:
        broker_id: int = reply.read.key
        path = reply.read.path
        registration = None
        if reply.code == Code.OK:
            try:
                registration = zkdata.decode_broker_registration(path, broker_id, reply.data, reply.czxid)
            except zkdata.ZnodeFormatError as exc:
                self._format_error(exc)
            else:
                self._clear_error(path)
        else:
            self._clear_error(path)
        if registration is not None:
            self.brokers[broker_id] = registration
        elif broker_id not in self.brokers:
            return
        else:
            del self.brokers[broker_id]
        self._views.pop("brokers", None)
        self.dirty = True

    def _on_topic(self, reply: Reply) -> list[Read] | None:
        topic: str = reply.read.key
        path = reply.read.path
        if reply.code == Code.NO_NODE:
            self._clear_error(path)
            self._drop_topic(topic)
            return None
        try:
            assignment, topic_id = zkdata.decode_topic(path, reply.data)
        except zkdata.ZnodeFormatError as exc:
            self._format_error(exc)
            self._drop_topic(topic)
            return None
        self._clear_error(path)
        old = self.assignments.get(topic, {})
        self.assignments[topic] = assignment
        if topic not in self.topic_ids or self.topic_ids[topic] != topic_id:
            self.topic_ids[topic] = topic_id
            self._views.pop("topics", None)
        self.dirty = True
        return self._reassign_partitions(topic, old, assignment)

    def _reassign_partitions(
        self, topic: str, old: Mapping[int, ReplicaAssignment], new: Mapping[int, ReplicaAssignment]
    ) -> list[Read] | None:
        """Bring the topic's partitions in line with its topic znode; read the states of new ones."""
        parts = self._writable(topic)
        reads = []
        prefix = zkdata.topic_partitions_path(topic)
        watch = self.watch
        for partition, assignment in new.items():
            info = parts.get(partition)
            if info is None:
                tp = TopicPartition(topic, partition)
                parts[partition] = PartitionInfo(tp, assignment)
                reads.append(Read(_GET_DATA, f"{prefix}/{partition}/state", watch, _STATE, tp))
            elif info.assignment != assignment:
                parts[partition] = PartitionInfo(info.tp, assignment, info.state, info.state_error)
        for partition in old.keys() - new.keys():
            if parts.pop(partition, None) is not None:
                self._clear_error(zkdata.partition_state_path(TopicPartition(topic, partition)))
        self.partition_count += len(new) - len(old)
        return reads or None

    def _drop_topic(self, topic: str) -> None:
        if self.assignments.pop(topic, None) is None:
            return
        self.topic_ids.pop(topic, None)
        self.partition_count -= len(self.partitions.pop(topic, ()))
        self._owned.discard(topic)
        self._forget_errors_under(zkdata.topic_path(topic), set())
        self._views.pop("topics", None)
        self.dirty = True

    def _writable(self, topic: str) -> dict[int, PartitionInfo]:
        parts = self.partitions.get(topic)
        if parts is None:
            parts = self.partitions[topic] = {}
            self._owned.add(topic)
        elif topic not in self._owned:
            parts = self.partitions[topic] = dict(parts)
            self._owned.add(topic)
        return parts

    def _on_state(self, reply: Reply) -> list[Read] | None:
        tp: TopicPartition = reply.read.key
        parts = self.partitions.get(tp.topic)
        info = parts.get(tp.partition) if parts is not None else None
        if info is None:
            return None  # the topic or partition is gone (or not read yet: its topic reply asks again)
        state = None
        follow = None
        if reply.code == Code.OK:
            try:
                state = zkdata.decode_partition_state(reply.read.path, reply.data, reply.version)
            except zkdata.ZnodeFormatError as exc:
                self._format_error(exc)
                self._state_unreadable(tp, exc.reason)
                return None
            else:
                if self.errors:
                    self._clear_error(reply.read.path)
        else:
            if self.errors:
                self._clear_error(reply.read.path)
            if self.watch:  # no state yet (a new partition): wait for the controller to write it
                follow = [reply.read._replace(op=Op.EXISTS)]
        if state != info.state or info.state_error is not None:
            self._writable(tp.topic)[tp.partition] = PartitionInfo(info.tp, info.assignment, state)
            self.dirty = True
        return follow

    def _state_unreadable(self, tp: TopicPartition, reason: str) -> None:
        """The state znode exists but cannot be read: the partition's state is unknown (not offline)."""
        parts = self.partitions.get(tp.topic)
        info = parts.get(tp.partition) if parts is not None else None
        if info is None or (info.state is None and info.state_error == reason):
            return
        self._writable(tp.topic)[tp.partition] = PartitionInfo(info.tp, info.assignment, None, reason)
        self.dirty = True

    def _on_config(self, reply: Reply) -> None:
        read = reply.read
        configs = self.topic_configs if read.kind == Kind.TOPIC_CONFIG else self.broker_configs
        config = None
        if reply.code == Code.OK:
            try:
                config = MappingProxyType(zkdata.decode_config(read.path, reply.data))
            except zkdata.ZnodeFormatError as exc:
                self._format_error(exc)
            else:
                self._clear_error(read.path)
        else:
            self._clear_error(read.path)
        if config is None:
            if configs.pop(read.key, None) is None:
                return
        else:
            configs[read.key] = config
        self._views.pop("topics" if read.kind == Kind.TOPIC_CONFIG else "broker_configs", None)
        self.dirty = True

    def _on_deletions(self, reply: Reply) -> None:
        deletions = tuple(sorted(reply.children or ()))
        if deletions != self.deletions:
            self.deletions = deletions
            self._views.pop("topics", None)
            self.dirty = True

    def _on_log_dir_events(self, reply: Reply) -> list[Read] | None:
        """The children of ``/log_dir_event_notification``: each new one is read once (without a watch: it
        never changes, and its deletion shows in this list, which is watched)."""
        path = reply.read.path
        listed = frozenset(reply.children or ())
        self._log_dir_event_names = listed
        for name in [n for n in self.log_dir_events if n not in listed]:
            del self.log_dir_events[name]
            self.dirty = True
        self._forget_errors_under(path, set(listed))
        reads = []
        for name in sorted(listed - self.log_dir_events.keys()):
            suffix = name.removeprefix(zkdata.LOG_DIR_EVENT_PREFIX)
            if suffix == name or not (suffix.isdecimal() and suffix.isascii()):
                self._error(f"{path}/{name}", f"{name!r} is not a log_dir_event_<sequence> notification")
            else:
                # listed: an event happened, whether or not its data is still there when it is read
                sequence = int(suffix)
                if self.log_dir_event_sequence is None or sequence > self.log_dir_event_sequence:
                    self.log_dir_event_sequence = sequence
                    self.dirty = True
                if f"{path}/{name}" not in self.errors:
                    reads.append(Read(Op.GET_DATA, f"{path}/{name}", False, Kind.LOG_DIR_EVENT, name))
        return reads or None

    def _on_log_dir_event(self, reply: Reply) -> None:
        name: str = reply.read.key
        path = reply.read.path
        if reply.code != Code.OK or name not in self._log_dir_event_names:
            self._clear_error(path)  # handled (deleted by the controller) since it was listed
            return
        try:
            broker, event = zkdata.decode_log_dir_event(path, reply.data)
            if event != zkdata.LOG_DIR_FAILURE_EVENT:
                raise zkdata.ZnodeFormatError(
                    path, f"unknown log dir event {event} (Kafka writes 1, failure)"
                )
        except zkdata.ZnodeFormatError as exc:
            self._format_error(exc)
            return
        self._clear_error(path)
        self.log_dir_events[name] = LogDirEvent(broker, int(name.removeprefix(zkdata.LOG_DIR_EVENT_PREFIX)))
        self.dirty = True

    def _on_controller(self, reply: Reply) -> None:
        registration = self._decode(reply, zkdata.decode_controller_registration)
        controller_id, kraft_epoch = registration if registration is not None else (None, None)
        self._set("controller_id", controller_id)
        self._set("kraft_controller_epoch", kraft_epoch)

    def _on_migration(self, reply: Reply) -> None:
        self._set(
            "migration",
            self._decode(reply, lambda path, data: zkdata.decode_migration(path, data, reply.version)),
        )

    def _on_controller_epoch(self, reply: Reply) -> None:
        epoch = self._decode(reply, zkdata.decode_controller_epoch)
        self._set("controller_epoch", epoch)
        self._set("controller_epoch_version", None if epoch is None else reply.version)

    def _on_cluster_id(self, reply: Reply) -> None:
        self._set("cluster_id", self._decode(reply, zkdata.decode_cluster_id))

    def _on_preferred_election(self, reply: Reply) -> None:
        partitions = self._decode(reply, zkdata.decode_partition_list)
        self._set("preferred_election", tuple(partitions or ()))

    def _on_reassignment(self, reply: Reply) -> None:
        targets = self._decode(reply, zkdata.decode_reassignment)
        self._set("reassignments", MappingProxyType(targets) if targets else _EMPTY_REASSIGNMENTS)

    def _decode(self, reply: Reply, decoder: Callable[[str, bytes | None], Any]) -> Any:
        """Decoded data of a singleton znode; None when it is absent or malformed (then recorded)."""
        path = reply.read.path
        if reply.code != Code.OK:
            self._clear_error(path)
            return None
        try:
            value = decoder(path, reply.data)
        except zkdata.ZnodeFormatError as exc:
            self._format_error(exc)
            return None
        self._clear_error(path)
        return value

    def _set(self, attribute: str, value: Any) -> None:
        if getattr(self, attribute) != value:
            setattr(self, attribute, value)
            self.dirty = True

    # --- errors ---

    def _format_error(self, exc: zkdata.ZnodeFormatError) -> None:
        self._error(exc.path, exc.reason)

    def _error(self, path: str, reason: str) -> None:
        if self.errors.get(path) != ZnodeError(path, reason):
            self.errors[path] = ZnodeError(path, reason)
            self._views.pop("errors", None)
            self.dirty = True

    def _clear_error(self, path: str) -> None:
        if self.errors.pop(path, None) is not None:
            self._views.pop("errors", None)
            self.dirty = True

    def _forget_errors_under(self, parent: str, keep: set[str]) -> None:
        prefix = parent + "/"
        for path in [p for p in self.errors if p.startswith(prefix)]:
            if path[len(prefix) :].split("/", 1)[0] not in keep:
                self._clear_error(path)

    # --- snapshots ---

    def build(
        self, version: int, taken_at: float, last_good_at: float | None, stale: bool
    ) -> ClusterSnapshot:
        """A snapshot of the current state; later changes copy what they touch, so it stays immutable."""
        self._owned.clear()
        self.dirty = False
        return ClusterSnapshot(
            version=version,
            taken_at=taken_at,
            last_good_at=last_good_at,
            stale=stale,
            cluster_id=self.cluster_id,
            brokers=self._view("brokers", lambda: MappingProxyType(dict(sorted(self.brokers.items())))),
            controller=ControllerInfo(
                self.controller_id,
                self.controller_epoch,
                self.controller_epoch_version,
                self.kraft_controller_epoch,
            ),
            topics=self._view("topics", self._topic_infos),
            partitions=PartitionMap(dict(self.partitions), self.partition_count),
            broker_configs=self._view("broker_configs", lambda: MappingProxyType(dict(self.broker_configs))),
            pending=PendingOperations(self.preferred_election, self.reassignments, self.deletions),
            errors=self._view("errors", lambda: tuple(sorted(self.errors.values(), key=lambda e: e.path))),
            migration=self.migration,
            log_dir_events=tuple(sorted(self.log_dir_events.values(), key=lambda e: e.sequence)),
            log_dir_event_sequence=self.log_dir_event_sequence,
        )

    def _view(self, name: str, make: Callable[[], Any]) -> Any:
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = make()
        return view

    def _topic_infos(self) -> Mapping[str, TopicInfo]:
        deletions = set(self.deletions)
        return MappingProxyType(
            {
                name: TopicInfo(
                    name,
                    self.topic_ids.get(name),
                    self.topic_configs.get(name, _EMPTY_CONFIG),
                    name in deletions,
                )
                for name in sorted(self.assignments)
            }
        )


_Handler = Callable[[ClusterModel, Reply], "list[Read] | None"]
_HANDLERS: Mapping[int, _Handler] = MappingProxyType(
    {
        # A table of plain functions, not of bound methods: those would make every model a reference cycle
        # that only the cyclic GC frees, holding a replaced model's 200k partitions until it runs.
        Kind.BROKER_IDS: ClusterModel._on_children,
        Kind.TOPICS: ClusterModel._on_children,
        Kind.TOPIC_CONFIGS: ClusterModel._on_children,
        Kind.BROKER_CONFIGS: ClusterModel._on_children,
        Kind.BROKER: ClusterModel._on_broker,
        Kind.TOPIC: ClusterModel._on_topic,
        Kind.STATE: ClusterModel._on_state,
        Kind.TOPIC_CONFIG: ClusterModel._on_config,
        Kind.BROKER_CONFIG: ClusterModel._on_config,
        Kind.DELETIONS: ClusterModel._on_deletions,
        Kind.CONTROLLER: ClusterModel._on_controller,
        Kind.CONTROLLER_EPOCH: ClusterModel._on_controller_epoch,
        Kind.CLUSTER_ID: ClusterModel._on_cluster_id,
        Kind.PREFERRED_ELECTION: ClusterModel._on_preferred_election,
        Kind.REASSIGNMENT: ClusterModel._on_reassignment,
        Kind.MIGRATION: ClusterModel._on_migration,
        Kind.LOG_DIR_EVENTS: ClusterModel._on_log_dir_events,
        Kind.LOG_DIR_EVENT: ClusterModel._on_log_dir_event,
    }
)
