"""Kafka's ZooKeeper data layout in ZK mode, after ``kafka.zk.ZkData``: paths and each znode's JSON.

Encoders write exactly what Kafka writes (the reference cluster and the runbook executors use them);
decoders read every format version Kafka 2.0-3.9 writes and raise :class:`ZnodeFormatError` for data that
is not what the path promises, so that callers can record the path and reason and skip the znode.
JSON key order is not fixed in Kafka's output, so nothing here compares strings.

The two decoders a full scan calls 200k times (partition state, topic) first try a typed msgspec decoder
that parses and checks the shape Kafka writes in C (measured: 4-5 times faster than ``json`` plus the
checks in Python); data of any other shape (a number in a string, a bool, a bad key) falls through to the
general decoder, which accepts or rejects it with its reason exactly as before.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from collectors.kafka.model import (
    BrokerEndpoint,
    BrokerRegistration,
    LeaderAndIsr,
    LeaderRecoveryState,
    MigrationState,
    ReplicaAssignment,
    TopicPartition,
)

# --- paths -------------------------------------------------------------------------------------------

BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
BROKER_SEQUENCE_ID_PATH = "/brokers/seqid"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CLUSTER_ID_PATH = "/cluster/id"
CONSUMERS_PATH = "/consumers"
LATEST_PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
FEATURE_PATH = "/feature"
MIGRATION_PATH = "/migration"

CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
DEFAULT_BROKER_CONFIG_ENTITY = "<default>"

PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQUENCE_ID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LATEST_PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{entity_type}" for entity_type in CONFIG_ENTITY_TYPES),
)
"""The paths a Kafka broker makes sure exist at start-up (``ZkData.PersistentZkPaths``)."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}/partitions"


def partition_path(tp: TopicPartition) -> str:
    return f"{topic_partitions_path(tp.topic)}/{tp.partition}"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{partition_path(tp)}/state"


def entity_config_path(entity_type: str, entity: str) -> str:
    return f"{CONFIG_PATH}/{entity_type}/{entity}"


def topic_config_path(topic: str) -> str:
    return entity_config_path("topics", topic)


def broker_config_path(broker: int | str) -> str:
    return entity_config_path("brokers", str(broker))


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def parse_connect_string(text: str) -> tuple[list[tuple[str, int]], str]:
    """``host:port[,host:port...][/chroot]`` -> ([(host, port)], chroot or ''); ValueError with a message.

    IPv6 hosts are written in brackets (``[::1]:2181``); the chroot, if any, must not end with ``/``.
    """
    hosts_part, slash, chroot = text.strip().partition("/")
    chroot = "/" + chroot if slash else ""
    if not hosts_part:
        raise ValueError(f"ZooKeeper connect string {text!r} names no server (expected host:port[/chroot])")
    if chroot and (chroot.endswith("/") or "//" in chroot):
        raise ValueError(f"ZooKeeper chroot {chroot!r} must not be empty or end with '/'")
    servers = []
    for server in hosts_part.split(","):
        host, sep, port = server.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdecimal() or not 0 < int(port) < 65536:
            raise ValueError(f"ZooKeeper server {server!r} in {text!r} is not host:port (e.g. zk1:2181)")
        servers.append((host, int(port)))
    return servers, chroot


# --- errors ------------------------------------------------------------------------------------------


class ZnodeFormatError(ValueError):
    """A znode's data is not what Kafka writes at that path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


# --- helpers -----------------------------------------------------------------------------------------


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _load_object(path: str, data: bytes | None) -> dict[str, Any]:
    if data is None or not data.strip():
        raise ZnodeFormatError(path, "empty data where a JSON object was expected")
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZnodeFormatError(path, f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ZnodeFormatError(path, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _int(path: str, obj: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdecimal():
            return int(value)
        raise ZnodeFormatError(path, f"field {key!r} must be an integer, got {value!r}")
    return value


def _broker_list(path: str, value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in value):
        raise ZnodeFormatError(path, f"{what} must be a list of broker ids, got {value!r}")
    return tuple(value)


def new_kafka_uuid() -> str:
    """A random id as Kafka prints ``Uuid``: 22 characters of URL-safe base64, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- /brokers/ids/<id> -------------------------------------------------------------------------------

BROKER_REGISTRATION_VERSIONS = (1, 2, 3, 4, 5)


def encode_broker_registration(broker: BrokerRegistration) -> bytes:
    """``BrokerIdZNode.encode``: host/port are the first PLAINTEXT endpoint's, else null and -1."""
    version = broker.version
    if version not in BROKER_REGISTRATION_VERSIONS:
        raise ValueError(f"unsupported broker registration version {version}")
    obj: dict[str, Any] = {
        "version": version,
        "host": broker.host,
        "port": broker.port,
        "jmx_port": broker.jmx_port,
        "timestamp": str(broker.timestamp_ms),
    }
    if version >= 2:
        obj["endpoints"] = [e.connection_string() for e in broker.endpoints]
    if version >= 3 and broker.rack is not None:
        obj["rack"] = broker.rack
    if version >= 4:
        obj["listener_security_protocol_map"] = {e.listener: e.security_protocol for e in broker.endpoints}
    if version >= 5:
        obj["features"] = broker.features
    return _dumps(obj)


def _parse_endpoint(path: str, text: Any, protocol_map: Mapping[str, str]) -> BrokerEndpoint:
    if not isinstance(text, str) or "://" not in text:
        raise ZnodeFormatError(path, f"endpoint {text!r} is not LISTENER://host:port")
    listener, _, address = text.partition("://")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdecimal():
        raise ZnodeFormatError(path, f"endpoint {text!r} has no port")
    host = host.strip("[]")  # IPv6 literals are bracketed
    return BrokerEndpoint(listener, host, int(port), protocol_map.get(listener, listener))


def decode_broker_registration(
    path: str, broker_id: int, data: bytes | None, czxid: int = -1
) -> BrokerRegistration:
    obj = _load_object(path, data)
    version = _int(path, obj, "version", 1)
    protocol_map = obj.get("listener_security_protocol_map") or {}
    if not isinstance(protocol_map, dict):
        raise ZnodeFormatError(path, "listener_security_protocol_map must be an object")
    raw_endpoints = obj.get("endpoints")
    if raw_endpoints is not None:
        if not isinstance(raw_endpoints, list):
            raise ZnodeFormatError(path, "endpoints must be a list")
        endpoints = tuple(_parse_endpoint(path, e, protocol_map) for e in raw_endpoints)
    else:
        host, port = obj.get("host"), obj.get("port")
        if not isinstance(host, str) or not isinstance(port, int):
            raise ZnodeFormatError(path, "neither endpoints nor host/port are present")
        endpoints = (BrokerEndpoint("PLAINTEXT", host, port),)
    rack = obj.get("rack")
    features = obj.get("features") or {}
    return BrokerRegistration(
        id=broker_id,
        endpoints=endpoints,
        rack=rack if isinstance(rack, str) else None,
        jmx_port=_int(path, obj, "jmx_port", -1),
        timestamp_ms=_int(path, obj, "timestamp", 0),
        features=features if isinstance(features, dict) else {},
        version=version,
        broker_epoch=czxid,
    )


# --- /controller, /controller_epoch ------------------------------------------------------------------


def encode_controller(
    broker_id: int,
    version: int = 1,
    timestamp_ms: int | None = None,
    kraft_controller_epoch: int = -1,
) -> bytes:
    """``ControllerZNode.encode``: v1 up to Kafka 3.3; v2 (3.4+) adds ``kraftControllerEpoch``, -1 when a
    ZK-mode broker is the controller and the KRaft leader epoch when a KRaft controller in a ZK→KRaft
    migration (KIP-866) holds ``/controller`` (``brokerid`` is then its node id)."""
    if version not in (1, 2):
        raise ValueError(f"unsupported controller znode version {version}")
    if version == 1 and kraft_controller_epoch != -1:
        raise ValueError("a KRaft controller writes /controller in version 2")
    obj: dict[str, Any] = {
        "version": version,
        "brokerid": broker_id,
        "timestamp": str(now_ms() if timestamp_ms is None else timestamp_ms),
    }
    if version == 2:
        obj["kraftControllerEpoch"] = kraft_controller_epoch
    return _dumps(obj)


def decode_controller(path: str, data: bytes | None) -> int:
    """The active controller's id (only ``brokerid`` is required): a broker id, or a KRaft controller's
    node id during a migration (see :func:`decode_controller_registration`)."""
    return _int(path, _load_object(path, data), "brokerid")


def decode_controller_registration(path: str, data: bytes | None) -> tuple[int, int | None]:
    """(``brokerid``, ``kraftControllerEpoch`` or None), as ``ControllerZNode.decodeController`` (3.4+).

    A v1 znode (Kafka up to 3.3) has no ``kraftControllerEpoch``; a ZK-mode controller of 3.4+ writes -1;
    a KRaft controller that took over ``/controller`` during a migration writes its epoch (>= 0).
    """
    obj = _load_object(path, data)
    broker_id = _int(path, obj, "brokerid")
    if "kraftControllerEpoch" not in obj:
        return broker_id, None
    return broker_id, _int(path, obj, "kraftControllerEpoch")


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(path: str, data: bytes | None) -> int:
    text = (data or b"").decode(errors="replace").strip()
    if not text.lstrip("-").isdecimal():
        raise ZnodeFormatError(path, f"controller epoch must be a plain integer, got {text!r}")
    return int(text)


# --- /migration (ZK→KRaft migration, KIP-866; Kafka 3.4-3.9) ---------------------------------------

MIGRATION_ZNODE_VERSIONS = (0,)


def encode_migration(migration: MigrationState) -> bytes:
    """``MigrationZNode.encode``: the KRaft controller's id and epoch and the offset and epoch of the last
    KRaft metadata it wrote to ZooKeeper (-1 before the metadata has been migrated)."""
    if migration.version not in MIGRATION_ZNODE_VERSIONS:
        raise ValueError(f"unsupported migration znode version {migration.version}")
    return _dumps(
        {
            "version": migration.version,
            "kraft_controller_id": migration.kraft_controller_id,
            "kraft_controller_epoch": migration.kraft_controller_epoch,
            "kraft_metadata_offset": migration.kraft_metadata_offset,
            "kraft_metadata_epoch": migration.kraft_metadata_epoch,
        }
    )


def decode_migration(path: str, data: bytes | None, zk_version: int = -1) -> MigrationState:
    """``MigrationZNode.decode``: version 0 is the only one Kafka writes; any other is rejected, as Kafka
    rejects it (a newer format would be misread)."""
    obj = _load_object(path, data)
    version = _int(path, obj, "version")
    if version not in MIGRATION_ZNODE_VERSIONS:
        raise ZnodeFormatError(path, f"unknown migration znode version {version} (Kafka 3.4-3.9 write 0)")
    return MigrationState(
        kraft_controller_id=_int(path, obj, "kraft_controller_id"),
        kraft_controller_epoch=_int(path, obj, "kraft_controller_epoch"),
        kraft_metadata_offset=_int(path, obj, "kraft_metadata_offset"),
        kraft_metadata_epoch=_int(path, obj, "kraft_metadata_epoch"),
        version=version,
        zk_version=zk_version,
    )


# --- /brokers/topics/<T> -----------------------------------------------------------------------------


def encode_topic(
    assignment: Mapping[int, ReplicaAssignment], topic_id: str | None = None, version: int | None = None
) -> bytes:
    """``TopicZNode.encode``: v3 with a topic id, v2 without; v1 (pre-2.4) has no adding/removing."""
    if version is None:
        version = 3 if topic_id is not None else 2
    obj: dict[str, Any] = {
        "version": version,
        "partitions": {str(p): list(a.replicas) for p, a in sorted(assignment.items())},
    }
    if version >= 2:
        obj["adding_replicas"] = {
            str(p): list(a.adding_replicas) for p, a in sorted(assignment.items()) if a.adding_replicas
        }
        obj["removing_replicas"] = {
            str(p): list(a.removing_replicas) for p, a in sorted(assignment.items()) if a.removing_replicas
        }
    if version >= 3 and topic_id is not None:
        obj["topic_id"] = topic_id
    return _dumps(obj)


_BrokerLists = dict[str, tuple[int, ...]]


class _TopicJson(msgspec.Struct, gc=False):
    """The topic znode as Kafka writes it (any version), for the fast path of :func:`decode_topic`."""

    partitions: _BrokerLists | None = None
    adding_replicas: _BrokerLists | None = None
    removing_replicas: _BrokerLists | None = None
    topic_id: str | None = None


_TOPIC_JSON = msgspec.json.Decoder(_TopicJson)


def decode_topic(path: str, data: bytes | None) -> tuple[dict[int, ReplicaAssignment], str | None]:
    """Assignment per partition and the topic id (v3), from any topic znode version."""
    if data is not None:
        try:
            topic = _TOPIC_JSON.decode(data)
        except msgspec.MsgspecError:
            pass  # not the usual shape: the general decoder says what is wrong, if anything
        else:
            partitions = topic.partitions or {}
            if all(key.isdecimal() for key in partitions):
                adding, removing = topic.adding_replicas or {}, topic.removing_replicas or {}
                if adding or removing:
                    assignment = {
                        int(key): ReplicaAssignment(replicas, adding.get(key, ()), removing.get(key, ()))
                        for key, replicas in partitions.items()
                    }
                else:
                    assignment = {
                        int(key): ReplicaAssignment(replicas) for key, replicas in partitions.items()
                    }
                return assignment, topic.topic_id
    return _decode_topic(path, data)


def _decode_topic(path: str, data: bytes | None) -> tuple[dict[int, ReplicaAssignment], str | None]:
    obj = _load_object(path, data)
    partitions = obj.get("partitions") or {}
    adding = obj.get("adding_replicas") or {}
    removing = obj.get("removing_replicas") or {}
    if not all(isinstance(x, dict) for x in (partitions, adding, removing)):
        raise ZnodeFormatError(path, "partitions, adding_replicas and removing_replicas must be objects")
    assignment: dict[int, ReplicaAssignment] = {}
    for key, replicas in partitions.items():
        if not key.isdecimal():
            raise ZnodeFormatError(path, f"partition id {key!r} is not a number")
        assignment[int(key)] = ReplicaAssignment(
            replicas=_broker_list(path, replicas, f"partition {key} replicas"),
            adding_replicas=_broker_list(path, adding.get(key, []), f"partition {key} adding_replicas"),
            removing_replicas=_broker_list(path, removing.get(key, []), f"partition {key} removing_replicas"),
        )
    topic_id = obj.get("topic_id")
    return assignment, topic_id if isinstance(topic_id, str) else None


# --- /brokers/topics/<T>/partitions/<P>/state --------------------------------------------------------


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    """``TopicPartitionStateZNode.encode``; ``leader_recovery_state`` only while RECOVERING (3.2+)."""
    obj: dict[str, Any] = {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state != LeaderRecoveryState.RECOVERED:
        obj["leader_recovery_state"] = state.leader_recovery_state
    return _dumps(obj)


class _PartitionStateJson(msgspec.Struct, gc=False):
    """The state znode in the shape Kafka writes it, for the fast path of :func:`decode_partition_state`."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED


_PARTITION_STATE_JSON = msgspec.json.Decoder(_PartitionStateJson)


def decode_partition_state(path: str, data: bytes | None, zk_version: int = -1) -> LeaderAndIsr:
    if data is not None:
        try:
            state = _PARTITION_STATE_JSON.decode(data)
        except msgspec.MsgspecError:
            pass  # not the usual shape: the general decoder says what is wrong, if anything
        else:
            return LeaderAndIsr(
                state.leader,
                state.leader_epoch,
                state.isr,
                state.controller_epoch,
                state.leader_recovery_state,
                zk_version,
            )
    return _decode_partition_state(path, data, zk_version)


def _decode_partition_state(path: str, data: bytes | None, zk_version: int) -> LeaderAndIsr:
    obj = _load_object(path, data)
    return LeaderAndIsr(
        leader=_int(path, obj, "leader"),
        leader_epoch=_int(path, obj, "leader_epoch"),
        isr=_broker_list(path, obj.get("isr"), "isr"),
        controller_epoch=_int(path, obj, "controller_epoch"),
        leader_recovery_state=_int(path, obj, "leader_recovery_state", LeaderRecoveryState.RECOVERED),
        zk_version=zk_version,
    )


# --- admin znodes ------------------------------------------------------------------------------------


def encode_partition_list(partitions: Iterable[TopicPartition]) -> bytes:
    """Payload of ``/admin/preferred_replica_election`` and of ISR change notifications."""
    return _dumps(
        {"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]}
    )


def _partition_entries(path: str, data: bytes | None) -> list[dict[str, Any]]:
    obj = _load_object(path, data)
    entries = obj.get("partitions")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ZnodeFormatError(path, "partitions must be a list of objects")
    return entries


def _entry_partition(path: str, entry: Mapping[str, Any]) -> TopicPartition:
    topic = entry.get("topic")
    if not isinstance(topic, str) or not topic:
        raise ZnodeFormatError(path, f"entry {dict(entry)!r} has no topic")
    return TopicPartition(topic, _int(path, entry, "partition"))


def decode_partition_list(path: str, data: bytes | None) -> list[TopicPartition]:
    return [_entry_partition(path, e) for e in _partition_entries(path, data)]


def encode_reassignment(targets: Mapping[TopicPartition, tuple[int, ...]]) -> bytes:
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
                for tp, replicas in targets.items()
            ],
        }
    )


def decode_reassignment(path: str, data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
    """Target replicas per partition; a later entry for the same partition wins, as in Kafka's map."""
    result: dict[TopicPartition, tuple[int, ...]] = {}
    for entry in _partition_entries(path, data):
        tp = _entry_partition(path, entry)
        result[tp] = _broker_list(path, entry.get("replicas"), f"{tp} replicas")
    return result


# --- notifications, configs, cluster id --------------------------------------------------------------

LOG_DIR_FAILURE_EVENT = 1


def encode_log_dir_event(broker_id: int, event: int = LOG_DIR_FAILURE_EVENT) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "event": event})


def decode_log_dir_event(path: str, data: bytes | None) -> tuple[int, int]:
    obj = _load_object(path, data)
    return _int(path, obj, "broker"), _int(path, obj, "event")


def encode_config(config: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": {k: str(v) for k, v in config.items()}})


def decode_config(path: str, data: bytes | None) -> dict[str, str]:
    if data is None or not data.strip():
        return {}
    obj = _load_object(path, data)
    config = obj.get("config") or {}
    if not isinstance(config, dict):
        raise ZnodeFormatError(path, "config must be an object")
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(entity_type: str, entity: str) -> bytes:
    return _dumps({"version": 2, "entity_path": f"{entity_type}/{entity}"})


def decode_config_change(path: str, data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name) of a ``/config/changes/config_change_<seq>`` notification."""
    obj = _load_object(path, data)
    entity_path = obj.get("entity_path")
    if _int(path, obj, "version", 1) == 1:  # v1: {"version":1,"entity_type":"topics","entity_name":"foo"}
        entity_type, entity = obj.get("entity_type"), obj.get("entity_name")
    elif isinstance(entity_path, str) and "/" in entity_path:
        entity_type, _, entity = entity_path.partition("/")
    else:
        entity_type = entity = None
    if not isinstance(entity_type, str) or not isinstance(entity, str):
        raise ZnodeFormatError(path, "config change notification names no entity")
    return entity_type, entity


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(path: str, data: bytes | None) -> str:
    cluster_id = _load_object(path, data).get("id")
    if not isinstance(cluster_id, str):
        raise ZnodeFormatError(path, "no cluster id")
    return cluster_id
