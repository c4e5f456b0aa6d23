"""ZooKeeper data layout: encoders, decoders and the shared types of ``collectors.kafka.model``.

Samples are what Kafka writes (``kafka.zk.ZkData``: ``BrokerIdZNode``, ``TopicZNode``,
``TopicPartitionStateZNode``, ``ControllerZNode``, ``ConfigEntityChangeNotificationSequenceZNode``,
``ClusterIdZNode``; docs/kafka-reference.md §1). Key order is not fixed in Kafka's JSON, so encoders are
checked by parsing their output, never by comparing strings.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable
from typing import Any, NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.kafka import zkdata
from collectors.kafka.model import (
    NO_LEADER,
    BrokerEndpoint,
    BrokerRegistration,
    LeaderAndIsr,
    LeaderRecoveryState,
    MigrationState,
    ReplicaAssignment,
    TopicPartition,
)
from collectors.kafka.zkdata import ZnodeFormatError

pytestmark = pytest.mark.unit

BROKER_PATH = "/brokers/ids/1"
TOPIC_PATH = "/brokers/topics/orders"
STATE_PATH = "/brokers/topics/orders/partitions/0/state"


def as_json(data: bytes) -> Any:
    return json.loads(data)


# --- paths -------------------------------------------------------------------------------------------


def test_paths_follow_kafka_layout() -> None:
    tp = TopicPartition("orders", 3)

    assert zkdata.broker_path(1) == "/brokers/ids/1"
    assert zkdata.topic_path("orders") == "/brokers/topics/orders"
    assert zkdata.partition_state_path(tp) == "/brokers/topics/orders/partitions/3/state"
    assert zkdata.topic_config_path("orders") == "/config/topics/orders"
    assert zkdata.broker_config_path(2) == "/config/brokers/2"
    assert zkdata.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert str(tp) == "orders-3"


# --- /brokers/ids/<id> -------------------------------------------------------------------------------


def test_decode_broker_v1() -> None:
    data = b'{"jmx_port":-1,"timestamp":"1700000000000","host":"b1","version":1,"port":9092}'

    broker = zkdata.decode_broker_registration(BROKER_PATH, 1, data, czxid=4242)

    assert broker.id == 1
    assert broker.version == 1
    assert broker.endpoints == (BrokerEndpoint("PLAINTEXT", "b1", 9092, "PLAINTEXT"),)
    assert broker.timestamp_ms == 1_700_000_000_000
    assert broker.jmx_port == -1
    assert broker.rack is None
    assert broker.broker_epoch == 4242
    assert (broker.host, broker.port) == ("b1", 9092)


def test_decode_broker_v2_reads_endpoints() -> None:
    data = (
        b'{"jmx_port":9999,"timestamp":"1700000000000","endpoints":["PLAINTEXT://b1:9092","SSL://b1:9093"],'
        b'"host":"b1","version":2,"port":9092}'
    )

    broker = zkdata.decode_broker_registration(BROKER_PATH, 1, data)

    assert broker.endpoints == (
        BrokerEndpoint("PLAINTEXT", "b1", 9092, "PLAINTEXT"),
        BrokerEndpoint("SSL", "b1", 9093, "SSL"),
    )
    assert broker.jmx_port == 9999


def test_decode_broker_v3_rack_absent_null_or_set() -> None:
    base = '{"jmx_port":-1,"timestamp":"1","endpoints":["PLAINTEXT://b1:9092"],"host":"b1","version":3,"port":9092'

    assert zkdata.decode_broker_registration(BROKER_PATH, 1, (base + "}").encode()).rack is None
    assert zkdata.decode_broker_registration(BROKER_PATH, 1, (base + ',"rack":null}').encode()).rack is None
    assert zkdata.decode_broker_registration(BROKER_PATH, 1, (base + ',"rack":"r1"}').encode()).rack == "r1"


def test_decode_broker_v4_ssl_only_takes_host_and_port_from_endpoints() -> None:
    """Without a PLAINTEXT listener Kafka writes ``"host":null,"port":-1``: the address is in endpoints."""
    data = (
        b'{"listener_security_protocol_map":{"EXTERNAL":"SSL"},"endpoints":["EXTERNAL://b1.example.com:9093"],'
        b'"rack":"r1","jmx_port":-1,"host":null,"timestamp":"1700000000000","port":-1,"version":4}'
    )

    broker = zkdata.decode_broker_registration(BROKER_PATH, 1, data)

    assert broker.endpoints == (BrokerEndpoint("EXTERNAL", "b1.example.com", 9093, "SSL"),)
    assert broker.host is None
    assert broker.port == -1


def test_decode_broker_v4_plaintext_protocol_under_another_listener_name() -> None:
    data = (
        b'{"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","EXTERNAL":"SASL_SSL"},'
        b'"endpoints":["EXTERNAL://public:9094","INTERNAL://10.0.0.1:9092"],"jmx_port":-1,'
        b'"host":"10.0.0.1","timestamp":"1","port":9092,"version":4}'
    )

    broker = zkdata.decode_broker_registration(BROKER_PATH, 1, data)

    assert [e.security_protocol for e in broker.endpoints] == ["SASL_SSL", "PLAINTEXT"]
    assert (broker.host, broker.port) == ("10.0.0.1", 9092)


# Registrations as Kafka writes them (BrokerIdZNode.encode, Kafka 2.0-3.9) for brokers without a PLAINTEXT
# listener: the top-level host is null and the port -1 in every version from 2 on. v2 and v3 predate named
# listeners (KIP-103, IBP 0.10.2) and the protocol map: their listener names are security protocols.
NO_PLAINTEXT_REGISTRATIONS = {
    "v2 SSL only": (
        b'{"version":2,"host":null,"port":-1,"jmx_port":-1,"timestamp":"1700000000000",'
        b'"endpoints":["SSL://kafka-2.example:9093"]}',
        (BrokerEndpoint("SSL", "kafka-2.example", 9093, "SSL"),),
    ),
    "v3 SASL_SSL only, rack": (
        b'{"version":3,"host":null,"port":-1,"jmx_port":9999,"timestamp":"1700000000000",'
        b'"endpoints":["SASL_SSL://kafka-2.example:9094"],"rack":"eu-west-1a"}',
        (BrokerEndpoint("SASL_SSL", "kafka-2.example", 9094, "SASL_SSL"),),
    ),
    "v4 INTERNAL only": (
        b'{"listener_security_protocol_map":{"INTERNAL":"SASL_SSL"},"endpoints":["INTERNAL://kafka-2.example:9094"],'
        b'"rack":"r1","jmx_port":-1,"host":null,"timestamp":"1700000000000","port":-1,"version":4}',
        (BrokerEndpoint("INTERNAL", "kafka-2.example", 9094, "SASL_SSL"),),
    ),
    "v5 EXTERNAL and INTERNAL, TLS both, features": (
        b'{"features":{},"listener_security_protocol_map":{"EXTERNAL":"SSL","INTERNAL":"SSL"},'
        b'"endpoints":["EXTERNAL://kafka-2.example.com:9093","INTERNAL://10.0.0.2:9094"],"jmx_port":-1,'
        b'"host":null,"timestamp":"1700000000000","port":-1,"version":5}',
        (
            BrokerEndpoint("EXTERNAL", "kafka-2.example.com", 9093, "SSL"),
            BrokerEndpoint("INTERNAL", "10.0.0.2", 9094, "SSL"),
        ),
    ),
}


@pytest.mark.parametrize("name", NO_PLAINTEXT_REGISTRATIONS)
def test_a_broker_without_plaintext_has_its_address_in_its_endpoints_in_every_version(name: str) -> None:
    data, endpoints = NO_PLAINTEXT_REGISTRATIONS[name]

    broker = zkdata.decode_broker_registration(BROKER_PATH, 2, data)

    assert broker.endpoints == endpoints
    assert (broker.host, broker.port) == (None, -1), "Kafka's top-level fields, kept as written"
    assert broker.endpoint() == endpoints[0], "no PLAINTEXT listener: the first endpoint"
    for endpoint in endpoints:
        assert broker.endpoint(endpoint.listener) == endpoint
    assert broker.endpoint("REPLICATION") is None
    # and what we write reads back the same, top-level host null and port -1 included
    again = zkdata.encode_broker_registration(broker)
    assert (as_json(again)["host"], as_json(again)["port"]) == (None, -1)
    assert zkdata.decode_broker_registration(BROKER_PATH, 2, again).endpoints == endpoints


def test_the_default_endpoint_is_the_listener_named_plaintext_else_the_first() -> None:
    """Kafka's inter-broker listener when ``inter.broker.listener.name`` is unset is the one named after
    ``security.inter.broker.protocol`` (PLAINTEXT); no znode says more."""
    external = BrokerEndpoint("EXTERNAL", "public", 9094, "SASL_SSL")
    plaintext = BrokerEndpoint("PLAINTEXT", "10.0.0.1", 9092)
    renamed = BrokerEndpoint("CLIENT", "10.0.0.1", 9095, "PLAINTEXT")
    assert BrokerRegistration(1, (external, plaintext)).endpoint() == plaintext
    assert BrokerRegistration(1, (external, renamed)).endpoint() == external
    assert BrokerRegistration(1, ()).endpoint() is None
    assert BrokerRegistration(1, ()).endpoint("PLAINTEXT") is None


def test_decode_broker_v5_with_features_and_unknown_fields() -> None:
    data = (
        b'{"features":{"metadata.version":{"min_version":1,"max_version":7}},'
        b'"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://b1:9092"],'
        b'"rack":"r1","jmx_port":-1,"host":"b1","timestamp":"1700000000000","port":9092,"version":5,'
        b'"some_future_field":{"x":[1,2]},"another":null}'
    )

    broker = zkdata.decode_broker_registration(BROKER_PATH, 1, data)

    assert broker.version == 5
    assert broker.features == {"metadata.version": {"min_version": 1, "max_version": 7}}
    assert broker.rack == "r1"
    assert broker.endpoints == (BrokerEndpoint("PLAINTEXT", "b1", 9092),)


def test_decode_broker_ipv6_endpoint() -> None:
    data = b'{"endpoints":["PLAINTEXT://[::1]:9092"],"host":"::1","port":9092,"version":2,"jmx_port":-1}'

    broker = zkdata.decode_broker_registration(BROKER_PATH, 1, data)

    assert broker.endpoints == (BrokerEndpoint("PLAINTEXT", "::1", 9092),)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_broker_registration_round_trip(version: int) -> None:
    endpoints: tuple[BrokerEndpoint, ...] = (BrokerEndpoint("PLAINTEXT", "b1", 9092),)
    if version >= 2:
        endpoints += (BrokerEndpoint("SSL", "b1", 9093, "SSL"),)
    broker = BrokerRegistration(
        id=1,
        endpoints=endpoints,
        rack="r1" if version >= 3 else None,
        jmx_port=9999,
        timestamp_ms=1_700_000_000_000,
        features={"metadata.version": {"min_version": 1, "max_version": 7}} if version >= 5 else {},
        version=version,
    )

    decoded = zkdata.decode_broker_registration(BROKER_PATH, 1, zkdata.encode_broker_registration(broker), 77)

    assert decoded == BrokerRegistration(
        id=1,
        endpoints=endpoints,
        rack=broker.rack,
        jmx_port=9999,
        timestamp_ms=1_700_000_000_000,
        features=broker.features,
        version=version,
        broker_epoch=77,
    )


def test_encode_broker_v5_as_kafka_writes_it() -> None:
    broker = BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "b1", 9092),), rack="r1", timestamp_ms=5)

    obj = as_json(zkdata.encode_broker_registration(broker))

    assert obj == {
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["PLAINTEXT://b1:9092"],
        "rack": "r1",
        "jmx_port": -1,
        "features": {},
        "host": "b1",
        "timestamp": "5",
        "port": 9092,
        "version": 5,
    }


def test_encode_broker_without_plaintext_endpoint_writes_null_host_and_port_minus_one() -> None:
    broker = BrokerRegistration(1, (BrokerEndpoint("EXTERNAL", "b1", 9093, "SSL"),), version=4)

    obj = as_json(zkdata.encode_broker_registration(broker))

    assert obj["host"] is None
    assert obj["port"] == -1
    assert obj["endpoints"] == ["EXTERNAL://b1:9093"]
    assert obj["listener_security_protocol_map"] == {"EXTERNAL": "SSL"}


def test_encode_broker_v1_and_v2_leave_out_later_fields() -> None:
    broker = BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "b1", 9092),), rack="r1", version=1)

    v1 = as_json(zkdata.encode_broker_registration(broker))
    v2 = as_json(zkdata.encode_broker_registration(BrokerRegistration(**{**_fields(broker), "version": 2})))

    assert set(v1) == {"version", "host", "port", "jmx_port", "timestamp"}
    assert set(v2) == {"version", "host", "port", "jmx_port", "timestamp", "endpoints"}


def _fields(broker: BrokerRegistration) -> dict[str, Any]:
    return {name: getattr(broker, name) for name in BrokerRegistration.__slots__}


def test_encode_broker_ipv6_endpoint_is_bracketed() -> None:
    """Kafka's ``EndPoint.connectionString`` uses ``Utils.formatAddress``: ``[::1]:9092`` for IPv6
    (``UtilsTest.testFormatAddress``), so that the port can be told from the address."""
    broker = BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "::1", 9092),), version=5)

    obj = as_json(zkdata.encode_broker_registration(broker))

    assert obj["endpoints"] == ["PLAINTEXT://[::1]:9092"]


def test_encode_broker_unsupported_version() -> None:
    broker = BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "b1", 9092),), version=6)

    with pytest.raises(ValueError, match="unsupported broker registration version 6"):
        zkdata.encode_broker_registration(broker)


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":1,"jmx_port":-1}',  # neither endpoints nor host/port
        b'{"version":2,"endpoints":"PLAINTEXT://b1:9092"}',  # endpoints not a list
        b'{"version":2,"endpoints":["b1:9092"]}',  # no listener
        b'{"version":2,"endpoints":["PLAINTEXT://b1"]}',  # no port
        b'{"version":4,"endpoints":[],"listener_security_protocol_map":["PLAINTEXT"]}',
        b'{"version":"five","endpoints":[]}',
    ],
)
def test_decode_broker_malformed(data: bytes) -> None:
    with pytest.raises(ZnodeFormatError) as info:
        zkdata.decode_broker_registration(BROKER_PATH, 1, data)

    assert info.value.path == BROKER_PATH


# --- /brokers/topics/<T> -----------------------------------------------------------------------------


def test_decode_topic_v1() -> None:
    assignment, topic_id = zkdata.decode_topic(
        TOPIC_PATH, b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1]}}'
    )

    assert assignment == {0: ReplicaAssignment((1, 2, 3)), 1: ReplicaAssignment((2, 3, 1))}
    assert topic_id is None


def test_decode_topic_v2_during_reassignment() -> None:
    data = (
        b'{"version":2,"partitions":{"0":[4,5,6,1,2,3],"1":[2,3,1]},'
        b'"adding_replicas":{"0":[4,5,6]},"removing_replicas":{"0":[1,2,3]}}'
    )

    assignment, topic_id = zkdata.decode_topic(TOPIC_PATH, data)

    assert assignment[0] == ReplicaAssignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert assignment[0].is_being_reassigned
    assert assignment[0].target_replicas == (4, 5, 6)
    assert assignment[0].origin_replicas == (1, 2, 3)
    assert assignment[1] == ReplicaAssignment((2, 3, 1))
    assert not assignment[1].is_being_reassigned
    assert topic_id is None


def test_decode_topic_v3_with_topic_id() -> None:
    data = (
        b'{"removing_replicas":{},"partitions":{"0":[1]},"topic_id":"8GhOhqZ0QYyQRw5RG8OxSg",'
        b'"adding_replicas":{},"version":3}'
    )

    assignment, topic_id = zkdata.decode_topic(TOPIC_PATH, data)

    assert assignment == {0: ReplicaAssignment((1,))}
    assert topic_id == "8GhOhqZ0QYyQRw5RG8OxSg"


def test_decode_topic_every_key_optional() -> None:
    assert zkdata.decode_topic(TOPIC_PATH, b"{}") == ({}, None)


@pytest.mark.parametrize(
    ("version", "topic_id"),
    [(1, None), (2, None), (3, "8GhOhqZ0QYyQRw5RG8OxSg"), (None, None), (None, "abc")],
)
def test_topic_round_trip(version: int | None, topic_id: str | None) -> None:
    assignment = {
        0: ReplicaAssignment.for_reassignment((1, 2, 3), (4, 5, 6)),
        1: ReplicaAssignment((2, 3, 1)),
    }
    if version == 1:
        assignment[0] = ReplicaAssignment((1, 2, 3))

    data = zkdata.encode_topic(assignment, topic_id=topic_id, version=version)

    assert zkdata.decode_topic(TOPIC_PATH, data) == (assignment, topic_id)


def test_encode_topic_versions() -> None:
    assignment = {0: ReplicaAssignment((1, 2))}

    v1 = as_json(zkdata.encode_topic(assignment, version=1))
    v2 = as_json(zkdata.encode_topic(assignment))
    v3 = as_json(zkdata.encode_topic(assignment, topic_id="8GhOhqZ0QYyQRw5RG8OxSg"))

    assert v1 == {"version": 1, "partitions": {"0": [1, 2]}}
    assert v2 == {"version": 2, "partitions": {"0": [1, 2]}, "adding_replicas": {}, "removing_replicas": {}}
    assert v3 == {**v2, "version": 3, "topic_id": "8GhOhqZ0QYyQRw5RG8OxSg"}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"version":1,"partitions":{"x":[1]}}', "is not a number"),
        (b'{"version":1,"partitions":{"-1":[1]}}', "is not a number"),
        (b'{"version":1,"partitions":[[1,2]]}', "must be objects"),
        (b'{"version":1,"partitions":{"0":"1,2"}}', "list of broker ids"),
        (b'{"version":1,"partitions":{"0":[1,"2"]}}', "list of broker ids"),
        (b'{"version":1,"partitions":{"0":[true]}}', "list of broker ids"),
        (b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{"0":3}}', "adding_replicas"),
    ],
)
def test_decode_topic_malformed(data: bytes, reason: str) -> None:
    with pytest.raises(ZnodeFormatError) as info:
        zkdata.decode_topic(TOPIC_PATH, data)

    assert info.value.path == TOPIC_PATH
    assert reason in info.value.reason
    assert str(info.value) == f"{TOPIC_PATH}: {info.value.reason}"


# --- partition state ---------------------------------------------------------------------------------


def test_decode_partition_state() -> None:
    data = b'{"controller_epoch":5,"leader":1,"version":1,"leader_epoch":7,"isr":[1,2,3]}'

    state = zkdata.decode_partition_state(STATE_PATH, data, zk_version=12)

    assert state == LeaderAndIsr(
        leader=1, leader_epoch=7, isr=(1, 2, 3), controller_epoch=5, leader_recovery_state=0, zk_version=12
    )
    assert state.has_leader


def test_decode_partition_state_recovering_and_offline() -> None:
    data = (
        b'{"controller_epoch":5,"leader":-1,"version":1,"leader_epoch":8,"isr":[3],"leader_recovery_state":1}'
    )

    state = zkdata.decode_partition_state(STATE_PATH, data)

    assert state.leader == NO_LEADER
    assert not state.has_leader
    assert state.leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert state.zk_version == -1


@pytest.mark.parametrize("recovery", [LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING])
def test_partition_state_round_trip(recovery: int) -> None:
    state = LeaderAndIsr(2, 9, (2, 3), 4, recovery, zk_version=6)

    data = zkdata.encode_partition_state(state)

    assert zkdata.decode_partition_state(STATE_PATH, data, zk_version=6) == state
    assert ("leader_recovery_state" in as_json(data)) is (recovery == LeaderRecoveryState.RECOVERING)


def test_encode_partition_state_as_kafka_writes_it() -> None:
    obj = as_json(zkdata.encode_partition_state(LeaderAndIsr(1, 7, (1, 2, 3), 5)))

    assert obj == {"controller_epoch": 5, "leader": 1, "version": 1, "leader_epoch": 7, "isr": [1, 2, 3]}


# --- the fast decoders of the state and topic znodes -------------------------------------------------
#
# decode_partition_state and decode_topic first try a typed msgspec decoder and fall through to the
# general decoder for anything else; whatever the data, the answer (value, or error and reason) must be the
# general decoder's.

_INTS = st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from([0, 1, -1, 2**31 - 1, 2**63])
_ODD = st.none() | st.booleans() | st.floats(allow_infinity=True, allow_nan=True) | st.text(max_size=3)
_NUMBERS_IN_TEXT = st.sampled_from(["1", "-3", "007", "\u00b2", "\u0661", " 1"])
_FIELD = _INTS | _ODD | _NUMBERS_IN_TEXT | st.lists(_INTS, max_size=2)
_BROKER_LIST = st.lists(_INTS | st.booleans() | _NUMBERS_IN_TEXT, max_size=4) | _FIELD
_PARTITION_KEYS = st.sampled_from(["0", "1", "17", "007", "-1", "x", "", "\u00b2", "\u0661"])
_BY_PARTITION = st.dictionaries(_PARTITION_KEYS, _BROKER_LIST, max_size=4) | _FIELD
_STATE_DOCS = st.fixed_dictionaries(
    {},
    optional={
        "controller_epoch": _FIELD,
        "leader": _FIELD,
        "version": _FIELD,
        "leader_epoch": _FIELD,
        "isr": _BROKER_LIST,
        "leader_recovery_state": _FIELD,
        "zk_version": _FIELD,
    },
)
_TOPIC_DOCS = st.fixed_dictionaries(
    {},
    optional={
        "version": _FIELD,
        "partitions": _BY_PARTITION,
        "adding_replicas": _BY_PARTITION,
        "removing_replicas": _BY_PARTITION,
        "topic_id": _FIELD,
    },
)
_VALID_STATES = st.fixed_dictionaries(
    {"controller_epoch": _INTS, "leader": _INTS, "leader_epoch": _INTS, "isr": st.lists(_INTS, max_size=4)},
    optional={"version": _INTS, "leader_recovery_state": st.sampled_from([0, 1])},
)
_VALID_LISTS = st.dictionaries(
    st.from_regex(r"\A(0|[1-9][0-9]{0,3})\Z"), st.lists(_INTS, max_size=5), max_size=5
)
_VALID_TOPICS = st.fixed_dictionaries(
    {"version": st.sampled_from([1, 2, 3]), "partitions": _VALID_LISTS},
    optional={
        "adding_replicas": _VALID_LISTS,
        "removing_replicas": _VALID_LISTS,
        "topic_id": st.text(max_size=22),
    },
)
_RAW = [
    b'{"controller_epoch":1,"leader":1,"leader":2,"version":1,"leader_epoch":0,"isr":[1]}',
    b'{"partitions":{"0":[1]},"partitions":{"1":[2]},"topic_id":"a","topic_id":7}',
    b'\xef\xbb\xbf{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}',
    b'{"controller_epoch":1,"leader":NaN,"version":1,"leader_epoch":0,"isr":[1]}',
    b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1],"x":"\\ud800"}',
    b'{"partitions":{"0":[1]},"x":"\\udc00"}',
    b' {"controller_epoch":1,"leader":1,"leader_epoch":0,"isr":[1]}\n',
    b'{"controller_epoch":1,"leader":1,"leader_epoch":0,"isr":[1]} {}',
    b'{"partitions":{"0":[1]}}x',
    b"",
    b"null",
    b"[]",
    b'{"partitions":[]}',
    b'{"partitions":{"0":[1]},"adding_replicas":{"5":"junk"}}',
]


def _outcome(decode: Callable[[], object]) -> object:
    try:
        return decode()
    except ZnodeFormatError as exc:
        return ("ZnodeFormatError", exc.path, exc.reason)


def _state_outcomes(data: bytes) -> tuple[object, object]:
    fast = _outcome(lambda: zkdata.decode_partition_state(STATE_PATH, data, 4))
    general = _outcome(lambda: zkdata._decode_partition_state(STATE_PATH, data, 4))
    return fast, general


def _topic_outcomes(data: bytes) -> tuple[object, object]:
    return (
        _outcome(lambda: zkdata.decode_topic(TOPIC_PATH, data)),
        _outcome(lambda: zkdata._decode_topic(TOPIC_PATH, data)),
    )


@given(doc=_STATE_DOCS | _VALID_STATES)
@settings(max_examples=250, deadline=None)
def test_the_fast_state_decoder_answers_as_the_general_one(doc: dict[str, Any]) -> None:
    fast, general = _state_outcomes(json.dumps(doc).encode())
    assert fast == general


@given(doc=_TOPIC_DOCS | _VALID_TOPICS)
@settings(max_examples=250, deadline=None)
def test_the_fast_topic_decoder_answers_as_the_general_one(doc: dict[str, Any]) -> None:
    fast, general = _topic_outcomes(json.dumps(doc).encode())
    assert fast == general


@pytest.mark.parametrize("data", _RAW)
def test_the_fast_decoders_answer_as_the_general_ones_on_odd_json(data: bytes) -> None:
    """Duplicate keys, a byte-order mark, NaN, lone surrogates, whitespace, trailing data, wrong types."""
    fast, general = _state_outcomes(data)
    assert fast == general
    fast, general = _topic_outcomes(data)
    assert fast == general


def test_what_kafka_writes_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed is the point: Kafka's own output never reaches the general decoder."""

    def general(*args: object) -> NoReturn:
        raise AssertionError("the general decoder was used")

    monkeypatch.setattr(zkdata, "_decode_partition_state", general)
    monkeypatch.setattr(zkdata, "_decode_topic", general)
    state = LeaderAndIsr(2, 9, (2, 3), 4, LeaderRecoveryState.RECOVERING)
    assert zkdata.decode_partition_state(STATE_PATH, zkdata.encode_partition_state(state), 6) == LeaderAndIsr(
        2, 9, (2, 3), 4, LeaderRecoveryState.RECOVERING, 6
    )
    assignment = {
        0: ReplicaAssignment.for_reassignment((1, 2, 3), (4, 5, 6)),
        1: ReplicaAssignment((2, 3, 1)),
    }
    for version, topic_id in [(2, None), (3, "8GhOhqZ0QYyQRw5RG8OxSg")]:
        data = zkdata.encode_topic(assignment, topic_id=topic_id, version=version)
        assert zkdata.decode_topic(TOPIC_PATH, data) == (assignment, topic_id)
    v1 = zkdata.encode_topic({0: ReplicaAssignment((1, 2))}, version=1)
    assert zkdata.decode_topic(TOPIC_PATH, v1) == ({0: ReplicaAssignment((1, 2))}, None)


# --- controller, controller epoch --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":1,"brokerid":3,"timestamp":"1700000000000"}',
        b'{"version":2,"brokerid":3,"timestamp":"1700000000000","kraftControllerEpoch":-1}',
        b'{"brokerid":3}',
    ],
)
def test_decode_controller(data: bytes) -> None:
    assert zkdata.decode_controller("/controller", data) == 3


@pytest.mark.parametrize("version", [1, 2])
def test_controller_round_trip(version: int) -> None:
    data = zkdata.encode_controller(3, version=version, timestamp_ms=1_700_000_000_000)

    obj = as_json(data)
    assert zkdata.decode_controller("/controller", data) == 3
    assert obj["version"] == version
    assert obj["timestamp"] == "1700000000000"
    assert ("kraftControllerEpoch" in obj) is (version == 2)


def test_encode_controller_unsupported_version() -> None:
    with pytest.raises(ValueError, match="unsupported controller znode version 3"):
        zkdata.encode_controller(1, version=3)


def test_decode_controller_without_brokerid() -> None:
    with pytest.raises(ZnodeFormatError) as info:
        zkdata.decode_controller("/controller", b'{"version":1}')

    assert "brokerid" in info.value.reason


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Kafka up to 3.3 (ControllerZNode v1): no kraftControllerEpoch
        (b'{"version":1,"brokerid":3,"timestamp":"1700000000000"}', (3, None)),
        # Kafka 3.4-3.9, a ZK-mode controller: kraftControllerEpoch -1
        (b'{"version":2,"brokerid":3,"timestamp":"1700000000000","kraftControllerEpoch":-1}', (3, -1)),
        # Kafka 3.4-3.9, a KRaft controller during a migration (tryRegisterKRaftControllerAsActiveController)
        (b'{"kraftControllerEpoch":7,"timestamp":"1700000000000","brokerid":3000,"version":2}', (3000, 7)),
    ],
)
def test_decode_controller_registration_every_version(data: bytes, expected: tuple[int, int | None]) -> None:
    assert zkdata.decode_controller_registration("/controller", data) == expected
    assert zkdata.decode_controller("/controller", data) == expected[0]


def test_a_kraft_controller_registration_round_trips() -> None:
    data = zkdata.encode_controller(3000, version=2, timestamp_ms=1, kraft_controller_epoch=4)

    assert as_json(data) == {"version": 2, "brokerid": 3000, "timestamp": "1", "kraftControllerEpoch": 4}
    assert zkdata.decode_controller_registration("/controller", data) == (3000, 4)
    with pytest.raises(ValueError, match="version 2"):
        zkdata.encode_controller(3000, version=1, kraft_controller_epoch=4)


def test_a_controller_epoch_that_is_not_a_number_is_a_format_error() -> None:
    with pytest.raises(ZnodeFormatError, match="kraftControllerEpoch"):
        zkdata.decode_controller_registration("/controller", b'{"brokerid":1,"kraftControllerEpoch":"x"}')


# --- /migration ------------------------------------------------------------------------------------------

# As MigrationZNode.encode (Kafka 3.4-3.9) writes them: a Scala Map of 5 entries, so in hash order.
MIGRATION_EMPTY = (
    b'{"kraft_metadata_offset":-1,"kraft_controller_epoch":-1,"kraft_metadata_epoch":-1,'
    b'"kraft_controller_id":-1,"version":0}'
)
MIGRATION_MIGRATED = (
    b'{"kraft_metadata_offset":1234,"kraft_controller_epoch":7,"kraft_metadata_epoch":7,'
    b'"kraft_controller_id":3000,"version":0}'
)


def test_decode_migration_as_kafka_writes_it() -> None:
    empty = zkdata.decode_migration("/migration", MIGRATION_EMPTY, zk_version=0)
    migrated = zkdata.decode_migration("/migration", MIGRATION_MIGRATED, zk_version=3)

    assert empty == MigrationState(-1, -1, -1, -1, version=0, zk_version=0)
    assert not empty.metadata_migrated
    assert migrated == MigrationState(3000, 7, 1234, 7, version=0, zk_version=3)
    assert migrated.metadata_migrated


def test_migration_round_trip() -> None:
    state = MigrationState(3000, 2, 99, 2)
    data = zkdata.encode_migration(state)

    assert as_json(data) == {
        "version": 0,
        "kraft_controller_id": 3000,
        "kraft_controller_epoch": 2,
        "kraft_metadata_offset": 99,
        "kraft_metadata_epoch": 2,
    }
    assert zkdata.decode_migration("/migration", data) == state


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (MIGRATION_MIGRATED.replace(b'"version":0', b'"version":1'), "unknown migration znode version 1"),
        (b'{"version":0,"kraft_controller_id":1}', "kraft_controller_epoch"),
        (b"", "empty data"),
    ],
)
def test_a_migration_znode_kafka_would_reject_is_a_format_error(data: bytes, reason: str) -> None:
    with pytest.raises(ZnodeFormatError, match=reason):
        zkdata.decode_migration("/migration", data)


def test_controller_epoch_is_plain_integer_text() -> None:
    assert zkdata.encode_controller_epoch(5) == b"5"
    assert zkdata.decode_controller_epoch("/controller_epoch", b"5") == 5
    assert zkdata.decode_controller_epoch("/controller_epoch", zkdata.encode_controller_epoch(123)) == 123


@pytest.mark.parametrize("data", [b"", None, b"five", b'{"epoch":5}', b"5.0"])
def test_decode_controller_epoch_malformed(data: bytes | None) -> None:
    with pytest.raises(ZnodeFormatError) as info:
        zkdata.decode_controller_epoch("/controller_epoch", data)

    assert info.value.path == "/controller_epoch"


# --- admin znodes ------------------------------------------------------------------------------------


def test_decode_preferred_replica_election() -> None:
    data = b'{"version":1,"partitions":[{"topic":"foo","partition":1},{"partition":0,"topic":"bar"}]}'

    assert zkdata.decode_partition_list(zkdata.PREFERRED_REPLICA_ELECTION_PATH, data) == [
        TopicPartition("foo", 1),
        TopicPartition("bar", 0),
    ]


def test_partition_list_round_trip() -> None:
    partitions = [TopicPartition("foo", 1), TopicPartition("bar", 0)]

    data = zkdata.encode_partition_list(partitions)

    assert zkdata.decode_partition_list(zkdata.ISR_CHANGE_NOTIFICATION_PATH, data) == partitions
    assert as_json(data)["version"] == 1


def test_decode_reassignment() -> None:
    data = (
        b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3]},'
        b'{"topic":"foo","partition":1,"replicas":[2,3,4]}]}'
    )

    assert zkdata.decode_reassignment(zkdata.REASSIGN_PARTITIONS_PATH, data) == {
        TopicPartition("foo", 0): (1, 2, 3),
        TopicPartition("foo", 1): (2, 3, 4),
    }


def test_reassignment_round_trip() -> None:
    targets = {TopicPartition("foo", 0): (4, 5, 6), TopicPartition("bar", 2): (1,)}

    assert (
        zkdata.decode_reassignment("/admin/reassign_partitions", zkdata.encode_reassignment(targets))
        == targets
    )


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":1,"partitions":{"topic":"foo","partition":0}}',
        b'{"version":1,"partitions":[1,2]}',
        b'{"version":1,"partitions":[{"partition":0,"replicas":[1]}]}',
        b'{"version":1,"partitions":[{"topic":"","partition":0,"replicas":[1]}]}',
        b'{"version":1,"partitions":[{"topic":"foo","partition":"x","replicas":[1]}]}',
        b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":"1,2"}]}',
        b'{"version":1}',
    ],
)
def test_decode_reassignment_malformed(data: bytes) -> None:
    with pytest.raises(ZnodeFormatError):
        zkdata.decode_reassignment(zkdata.REASSIGN_PARTITIONS_PATH, data)


def test_log_dir_event_round_trip() -> None:
    data = zkdata.encode_log_dir_event(3)

    assert as_json(data) == {"version": 1, "broker": 3, "event": 1}
    assert zkdata.decode_log_dir_event("/log_dir_event_notification/log_dir_event_0000000001", data) == (3, 1)


# --- configs, config changes, cluster id -------------------------------------------------------------


def test_decode_config() -> None:
    data = b'{"version":1,"config":{"min.insync.replicas":"2","retention.ms":"86400000"}}'

    assert zkdata.decode_config("/config/topics/orders", data) == {
        "min.insync.replicas": "2",
        "retention.ms": "86400000",
    }


@pytest.mark.parametrize("data", [None, b"", b'{"version":1}', b'{"version":1,"config":{}}'])
def test_decode_config_missing_means_defaults(data: bytes | None) -> None:
    assert zkdata.decode_config("/config/topics/orders", data) == {}


def test_config_round_trip_values_are_strings() -> None:
    config = {"leader.replication.throttled.rate": "1048576", "follower.replication.throttled.replicas": "*"}

    data = zkdata.encode_config(config)

    assert as_json(data) == {"version": 1, "config": config}
    assert zkdata.decode_config("/config/brokers/1", data) == config


def test_decode_config_not_an_object() -> None:
    with pytest.raises(ZnodeFormatError):
        zkdata.decode_config("/config/topics/orders", b'{"version":1,"config":["a"]}')


def test_decode_config_change_v1() -> None:
    data = b'{"version":1,"entity_type":"topics","entity_name":"t"}'

    assert zkdata.decode_config_change("/config/changes/config_change_0000000001", data) == ("topics", "t")


def test_decode_config_change_v2() -> None:
    assert zkdata.decode_config_change("/c", b'{"version":2,"entity_path":"topics/t"}') == ("topics", "t")
    assert zkdata.decode_config_change("/c", b'{"version":2,"entity_path":"users/alice/clients/app"}') == (
        "users",
        "alice/clients/app",
    )


def test_config_change_round_trip() -> None:
    data = zkdata.encode_config_change("brokers", "<default>")

    assert as_json(data) == {"version": 2, "entity_path": "brokers/<default>"}
    assert zkdata.decode_config_change("/c", data) == ("brokers", "<default>")


@pytest.mark.parametrize(
    "data",
    [b'{"version":2,"entity_path":"topics"}', b'{"version":2}', b'{"version":1,"entity_type":"topics"}'],
)
def test_decode_config_change_without_entity(data: bytes) -> None:
    with pytest.raises(ZnodeFormatError, match="names no entity"):
        zkdata.decode_config_change("/c", data)


def test_decode_cluster_id_with_string_version() -> None:
    assert zkdata.decode_cluster_id("/cluster/id", b'{"version":"1","id":"u7FqXx8oT5q5n0AYf1tDxw"}') == (
        "u7FqXx8oT5q5n0AYf1tDxw"
    )


def test_cluster_id_round_trip() -> None:
    data = zkdata.encode_cluster_id("u7FqXx8oT5q5n0AYf1tDxw")

    assert as_json(data) == {"version": "1", "id": "u7FqXx8oT5q5n0AYf1tDxw"}
    assert zkdata.decode_cluster_id("/cluster/id", data) == "u7FqXx8oT5q5n0AYf1tDxw"


def test_decode_cluster_id_missing() -> None:
    with pytest.raises(ZnodeFormatError, match="no cluster id"):
        zkdata.decode_cluster_id("/cluster/id", b'{"version":"1"}')


# --- malformed data, whatever the path ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "empty data"),
        (b"", "empty data"),
        (b"  \n", "empty data"),
        (b"{", "invalid JSON"),
        (b"\xff\xfe{}", "invalid JSON"),
        (b"[1,2,3]", "expected a JSON object, got list"),
        (b"null", "expected a JSON object, got NoneType"),
        (b"5", "expected a JSON object, got int"),
        (b'{"controller_epoch":5,"version":1,"leader_epoch":7,"isr":[1]}', "'leader'"),
        (b'{"controller_epoch":5,"leader":"one","version":1,"leader_epoch":7,"isr":[1]}', "'leader'"),
        (b'{"controller_epoch":5,"leader":true,"version":1,"leader_epoch":7,"isr":[1]}', "'leader'"),
        (b'{"controller_epoch":5,"leader":1,"version":1,"leader_epoch":7,"isr":"1,2"}', "isr"),
        (b'{"controller_epoch":5,"leader":1,"version":1,"leader_epoch":7}', "isr"),
        (b'{"leader":1,"version":1,"leader_epoch":7,"isr":[1]}', "'controller_epoch'"),
    ],
)
def test_malformed_partition_state(data: bytes | None, reason: str) -> None:
    with pytest.raises(ZnodeFormatError) as info:
        zkdata.decode_partition_state(STATE_PATH, data)

    assert info.value.path == STATE_PATH
    assert reason in info.value.reason


def test_znode_format_error_is_a_value_error() -> None:
    error = ZnodeFormatError("/x", "bad")

    assert isinstance(error, ValueError)
    assert (error.path, error.reason, str(error)) == ("/x", "bad", "/x: bad")


NON_DECIMAL_DIGITS: dict[str, tuple[Callable[[bytes], object], bytes]] = {
    "controller_epoch": (lambda d: zkdata.decode_controller_epoch("/controller_epoch", d), "²".encode()),
    "topic_partition_id": (
        lambda d: zkdata.decode_topic(TOPIC_PATH, d),
        '{"version":1,"partitions":{"²":[1]}}'.encode(),
    ),
    "state_field": (
        lambda d: zkdata.decode_partition_state(STATE_PATH, d),
        '{"controller_epoch":"²","leader":1,"version":1,"leader_epoch":7,"isr":[1]}'.encode(),
    ),
    "endpoint_port": (
        lambda d: zkdata.decode_broker_registration(BROKER_PATH, 1, d),
        '{"version":2,"endpoints":["PLAINTEXT://b1:²"]}'.encode(),
    ),
}


@pytest.mark.parametrize("case", sorted(NON_DECIMAL_DIGITS))
def test_non_decimal_digits_are_a_format_error_not_a_crash(case: str) -> None:
    """``str.isdigit`` accepts characters ``int`` refuses (superscripts): a malformed znode must still come
    out as ZnodeFormatError, which callers record and skip (a bad znode is reported and skipped, never fatal),
    not as a bare ValueError."""
    decode, data = NON_DECIMAL_DIGITS[case]

    with pytest.raises(ZnodeFormatError):
        decode(data)


# --- ReplicaAssignment -------------------------------------------------------------------------------


def test_for_reassignment_disjoint_target() -> None:
    assignment = ReplicaAssignment.for_reassignment((1, 2, 3), (4, 5, 6))

    assert assignment.replicas == (4, 5, 6, 1, 2, 3)
    assert assignment.adding_replicas == (4, 5, 6)
    assert assignment.removing_replicas == (1, 2, 3)
    assert assignment.target_replicas == (4, 5, 6)
    assert assignment.origin_replicas == (1, 2, 3)
    assert assignment.preferred_leader == 4


def test_for_reassignment_overlapping_target() -> None:
    assignment = ReplicaAssignment.for_reassignment((1, 2, 3), (3, 4, 2))

    assert assignment.replicas == (3, 4, 2, 1)
    assert assignment.adding_replicas == (4,)
    assert assignment.removing_replicas == (1,)
    assert assignment.target_replicas == (3, 4, 2)
    assert assignment.origin_replicas == (3, 2, 1)


def test_for_reassignment_to_same_replicas_is_not_a_reassignment() -> None:
    assignment = ReplicaAssignment.for_reassignment((1, 2, 3), (1, 2, 3))

    assert assignment == ReplicaAssignment((1, 2, 3))
    assert not assignment.is_being_reassigned


def test_for_reassignment_raising_replication_factor() -> None:
    assignment = ReplicaAssignment.for_reassignment((1, 2), (1, 2, 3))

    assert (assignment.replicas, assignment.adding_replicas, assignment.removing_replicas) == (
        (1, 2, 3),
        (3,),
        (),
    )


def test_preferred_leader_of_empty_assignment() -> None:
    assert ReplicaAssignment(()).preferred_leader == NO_LEADER


# --- Kafka Uuid --------------------------------------------------------------------------------------

UUID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}$")


def test_new_kafka_uuid_is_22_chars_of_url_safe_base64() -> None:
    ids = {zkdata.new_kafka_uuid() for _ in range(200)}

    assert len(ids) == 200
    for text in ids:
        assert UUID_TEXT.match(text)
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_new_kafka_uuid_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's ``Uuid.randomUuid`` draws again when the text starts with '-' (it would read as an option on a
    command line). 0xF8 as first byte encodes to '-' in URL-safe base64."""
    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))
    normal = uuid.UUID(bytes=b"\x10" + bytes(14) + b"\x01")
    draws = iter([dash_first, dash_first, normal])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))

    text = zkdata.new_kafka_uuid()

    assert base64.urlsafe_b64encode(dash_first.bytes).decode().startswith("-")
    assert text == base64.urlsafe_b64encode(normal.bytes).rstrip(b"=").decode()


# --- connect strings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "servers", "chroot"),
    [
        ("zk1:2181", [("zk1", 2181)], ""),
        ("zk1:2181,zk2:2182/kafka", [("zk1", 2181), ("zk2", 2182)], "/kafka"),
        ("[::1]:2181/a/b", [("::1", 2181)], "/a/b"),
    ],
)
def test_parse_connect_string(text: str, servers: list[tuple[str, int]], chroot: str) -> None:
    assert zkdata.parse_connect_string(text) == (servers, chroot)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no server"),
        ("/kafka", "names no server"),
        ("zk1", "is not host:port"),
        ("zk1:abc", "is not host:port"),
        ("zk1:70000", "is not host:port"),
        ("zk1:2181/kafka/", "must not be empty or end with '/'"),
    ],
)
def test_parse_connect_string_refuses_bad_input(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        zkdata.parse_connect_string(text)
