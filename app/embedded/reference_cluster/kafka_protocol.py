"""Each simulated broker's Kafka listener: the wire protocol for what a monitoring client asks.

The broker answers ApiVersions, Metadata, ListOffsets, FindCoordinator, ListGroups, DescribeGroups,
OffsetFetch and OffsetCommit (from outside a group only: a consumer with partitions assigned by hand, a
``--reset-offsets``; the simulated groups' members commit on the cluster's loop, not over the wire) on the
port of its registered endpoint. Requests are decoded and responses encoded with
kafka-python's own protocol classes (``kafka.protocol``), so the bytes are the client library's: the
request header and body with the request class of the frame's (api_key, api_version), the response with
the response class of the same version. Answers are computed on the cluster's loop from the brokers'
state (:class:`BrokerProtocol`), so a request sees one consistent moment; the sockets live on their own
threads. Any other API, or a version outside the ranges :data:`SUPPORTED_VERSIONS` advertises (fewer before
Kafka 3.0: :data:`BEFORE_3_0`), closes the connection, as a Kafka broker does.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import socket
import socketserver
import struct
import threading
import uuid
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.embedded.reference_cluster.groups import OFFSETS_TOPIC, GroupError, offsets_partition
from app.embedded.reference_cluster.loop import LoopStoppedError
from collectors.kafka.model import TopicPartition

with warnings.catch_warnings():
    # kafka-python loads its schemas with importlib.resources.read_text, deprecated on Python 3.11-3.12
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import (
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        ListGroupsRequest,
        ListGroupsResponse,
    )
    from kafka.protocol.consumer import (
        ConsumerProtocolAssignment,
        ConsumerProtocolSubscription,
        ListOffsetsRequest,
        ListOffsetsResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
    )
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        MetadataRequest,
        MetadataResponse,
    )

if TYPE_CHECKING:
    from app.embedded.reference_cluster.cluster import ReferenceCluster

log = logging.getLogger(__name__)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35

REQUESTS: dict[int, Any] = {
    18: ApiVersionsRequest,
    3: MetadataRequest,
    2: ListOffsetsRequest,
    10: FindCoordinatorRequest,
    16: ListGroupsRequest,
    15: DescribeGroupsRequest,
    9: OffsetFetchRequest,
    8: OffsetCommitRequest,
}
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    18: (0, 3),  # ApiVersions
    3: (0, 12),  # Metadata
    2: (0, 8),  # ListOffsets
    10: (0, 4),  # FindCoordinator
    16: (0, 4),  # ListGroups
    15: (0, 5),  # DescribeGroups
    9: (0, 8),  # OffsetFetch
    8: (2, 8),  # OffsetCommit (Kafka 3.6: 0-8; kafka-python has no schema for v0-1, ZooKeeper-era commits)
}
"""The versions a Kafka 3.6 broker supports for these APIs (``kafka-broker-api-versions``)."""
BEFORE_3_0: dict[int, tuple[int, int]] = {
    10: (0, 3),  # FindCoordinator v4 (KIP-699, a batch of keys) came with Kafka 3.0
    9: (0, 7),  # OffsetFetch v8 (KIP-709, a batch of groups) too
}
"""What a broker before Kafka 3.0 (an ``inter_broker_protocol_version`` below 3.0) lacks of those."""


def supported_versions(ibp: tuple[int, int, int]) -> dict[int, tuple[int, int]]:
    """The API versions a broker of inter-broker protocol ``ibp`` (major, minor, IV) advertises."""
    return SUPPORTED_VERSIONS | BEFORE_3_0 if ibp < (3, 0, 0) else dict(SUPPORTED_VERSIONS)


MAX_FRAME_BYTES = 100 * 1024 * 1024


def topic_uuid(text: str | None) -> uuid.UUID:
    """A topic id as the topic znode holds it (Kafka's base64 ``Uuid``) as a UUID; zero when absent."""
    if not text:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


class ProtocolError(Exception):
    """A request the broker does not answer: the connection is closed."""


def decode_request(
    payload: bytes, versions: dict[int, tuple[int, int]] = SUPPORTED_VERSIONS
) -> tuple[int, int, Any, Any]:
    """(api_key, api_version, request, header) of one frame's payload; the request is None for an
    ApiVersions request of a version above the broker's (answered with v0's body). Raises ProtocolError
    for an API or a version outside ``versions``."""
    if len(payload) < 4:
        raise ProtocolError("a request shorter than its header")
    api_key, api_version = struct.unpack_from(">hh", payload)
    request_class = REQUESTS.get(api_key)
    if request_class is None:
        raise ProtocolError(f"api key {api_key} is not served here")
    if api_key == 18 and api_version > versions[18][1]:
        # KIP-511: the header of an ApiVersions request of any version decodes as v0's
        header = ApiVersionsRequest.parse_header(io.BytesIO(payload), version=0)
        return api_key, api_version, None, header
    low, high = versions[api_key]
    if not low <= api_version <= high:
        raise ProtocolError(f"api key {api_key} v{api_version} is outside [{low}, {high}]")
    try:
        request = request_class.decode(payload, version=api_version, header=True)
    except (ValueError, struct.error, IndexError) as exc:
        raise ProtocolError(f"undecodable api key {api_key} v{api_version}: {exc}") from None
    return api_key, api_version, request, request.header


def encode_response(response: Any, correlation_id: int) -> bytes:
    response.with_header(correlation_id=correlation_id)
    data: bytes = response.encode(header=True, framed=True)
    return data


class BrokerProtocol:
    """The answers of one broker, computed on the cluster's loop."""

    def __init__(self, cluster: ReferenceCluster, broker_id: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.versions = supported_versions(cluster.settings.ibp)

    def handle(self, payload: bytes) -> bytes:
        """One request frame's payload -> the response frame; raises ProtocolError to close."""
        api_key, version, request, header = decode_request(payload, self.versions)
        if request is None:
            return encode_response(self.api_versions_unsupported(), header.correlation_id)
        build: Callable[[Any, int], Any] = {
            18: self.api_versions,
            3: self.metadata,
            2: self.list_offsets,
            10: self.find_coordinator,
            16: self.list_groups,
            15: self.describe_groups,
            9: self.offset_fetch,
            8: self.offset_commit,
        }[api_key]
        response = self.cluster.loop.call(lambda: self._on_loop(build, request, version), timeout=30)
        return encode_response(response, header.correlation_id)

    def _on_loop(self, build: Callable[[Any, int], Any], request: Any, version: int) -> Any:
        broker = self.cluster.brokers[self.broker_id]
        if not broker.alive:
            raise ProtocolError(f"broker {self.broker_id} is stopped")
        return build(request, version)

    # --- ApiVersions ---------------------------------------------------------------------------

    def _api_keys(self, version: int) -> list[Any]:
        key_class = ApiVersionsResponse.ApiVersion
        return [
            key_class(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(self.versions.items())
        ]

    def api_versions(self, request: Any, version: int) -> Any:
        return ApiVersionsResponse(
            version=version, error_code=NONE, api_keys=self._api_keys(version), throttle_time_ms=0
        )

    def api_versions_unsupported(self) -> Any:
        """KIP-511: a version the broker does not know gets v0's body with the supported ranges."""
        return ApiVersionsResponse(version=0, error_code=UNSUPPORTED_VERSION, api_keys=self._api_keys(0))

    # --- Metadata ------------------------------------------------------------------------------

    def metadata(self, request: Any, version: int) -> Any:
        cluster = self.cluster
        view = cluster.metadata_view()
        r = MetadataResponse
        brokers = [
            r.MetadataResponseBroker(node_id=b.id, host=b.endpoint.host, port=b.endpoint.port, rack=b.rack)
            for b in cluster.brokers.values()
            if b.alive and b.registered
        ]
        requested = request.topics
        if requested is None or (version == 0 and not requested):
            names = sorted(view.topic_ids)
        else:
            names = [t.name for t in requested]
        topics = []
        for name in names:
            count = view.partition_count(name)
            if not count:
                topics.append(
                    r.MetadataResponseTopic(
                        error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=uuid.UUID(int=0),
                        is_internal=False, partitions=[], authorized_operations=None,
                    )
                )  # fmt: skip
                continue
            partitions = []
            for p in range(count):
                tp = TopicPartition(name, p)
                state = cluster.partition_state(tp)
                replicas = list(view.assignments[tp].replicas)
                offline = [b for b in replicas if not cluster.replica_online(b, tp)]
                leader = state.leader if state is not None else -1
                partitions.append(
                    r.MetadataResponseTopic.MetadataResponsePartition(
                        error_code=NONE if leader >= 0 else LEADER_NOT_AVAILABLE,
                        partition_index=p,
                        leader_id=leader,
                        leader_epoch=state.leader_epoch if state is not None else -1,
                        replica_nodes=replicas,
                        isr_nodes=list(state.isr) if state is not None else [],
                        offline_replicas=offline,
                    )
                )
            topics.append(
                r.MetadataResponseTopic(
                    error_code=NONE, name=name, topic_id=topic_uuid(view.topic_ids.get(name)),
                    is_internal=name == OFFSETS_TOPIC, partitions=partitions,
                    authorized_operations=None,
                )
            )  # fmt: skip
        controller = cluster.controller
        controller_id = controller.broker_id if controller is not None else -1
        return r(
            version=version,
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=cluster.cluster_id(),
            controller_id=controller_id,
            topics=topics,
            authorized_operations=None,
        )

    # --- ListOffsets ---------------------------------------------------------------------------

    def list_offsets(self, request: Any, version: int) -> Any:
        cluster = self.cluster
        broker = cluster.brokers[self.broker_id]
        r = ListOffsetsResponse
        part_class = r.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
        topics = []
        views, leads, log_offsets = broker.partitions, broker.leads, cluster.log_offsets
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                error, offset, epoch = NONE, -1, -1
                if not leads(tp):
                    known = cluster.metadata_view().assignments.get(tp) is not None
                    error = NOT_LEADER_OR_FOLLOWER if known else UNKNOWN_TOPIC_OR_PARTITION
                else:
                    epoch = views[tp].state.leader_epoch
                    start, end = log_offsets(broker, tp)
                    if p.timestamp == -2:
                        offset = start
                    elif p.timestamp == -1:
                        offset = end
                    elif p.timestamp == -3:
                        offset = end - 1 if end > start else -1
                    # a timestamp: the simulation keeps no record timestamps, so no offset is found (-1)
                partitions.append(
                    part_class(
                        partition_index=p.partition_index, error_code=error,
                        old_style_offsets=[offset] if offset >= 0 else [], timestamp=-1, offset=offset,
                        leader_epoch=epoch,
                    )
                )  # fmt: skip
            topics.append(r.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
        return r(version=version, throttle_time_ms=0, topics=topics)

    # --- groups ----------------------------------------------------------------------------------

    def _coordinates(self, group: str) -> bool:
        return self.cluster.brokers[self.broker_id].leads(
            TopicPartition(OFFSETS_TOPIC, offsets_partition(group))
        )

    def find_coordinator(self, request: Any, version: int) -> Any:
        cluster = self.cluster
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        answers = []
        for key in keys:
            error, node, host, port = NONE, -1, "", -1
            if request.key_type != 0:
                error = COORDINATOR_NOT_AVAILABLE  # transactions are not simulated
            else:
                coordinator = cluster.group_coordinator(key)
                if coordinator is None:
                    error = COORDINATOR_NOT_AVAILABLE
                else:
                    node, host, port = coordinator.id, coordinator.endpoint.host, coordinator.endpoint.port
            answers.append((key, error, node, host, port))
        r = FindCoordinatorResponse
        if version >= 4:
            return r(
                version=version,
                throttle_time_ms=0,
                coordinators=[
                    r.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e, error_message=None)
                    for k, e, n, h, p in answers
                ],
            )
        _, error, node, host, port = answers[0]
        return r(
            version=version, throttle_time_ms=0, error_code=error, error_message=None, node_id=node,
            host=host, port=port,
        )  # fmt: skip

    def list_groups(self, request: Any, version: int) -> Any:
        wanted = {s.lower() for s in (request.states_filter or [])} if version >= 4 else set()
        r = ListGroupsResponse
        groups = [
            r.ListedGroup(
                group_id=g.name, protocol_type="consumer", group_state=g.state, group_type="classic"
            )
            for g in self.cluster.consumer_groups.groups.values()
            if self._coordinates(g.name) and (not wanted or g.state.lower() in wanted)
        ]
        groups += [  # offsets only: Empty, no protocol type (no consumer ever joined)
            r.ListedGroup(group_id=name, protocol_type="", group_state="Empty", group_type="classic")
            for name in self.cluster.consumer_groups.standalone
            if self._coordinates(name) and (not wanted or "empty" in wanted)
        ]
        return r(version=version, throttle_time_ms=0, error_code=NONE, groups=groups)

    def describe_groups(self, request: Any, version: int) -> Any:
        r = DescribeGroupsResponse
        member_class = r.DescribedGroup.DescribedGroupMember
        described = []
        for name in request.groups:
            group = self.cluster.consumer_groups.groups.get(name)
            if not self._coordinates(name):
                described.append(
                    r.DescribedGroup(
                        error_code=NOT_COORDINATOR, group_id=name, group_state="", protocol_type="",
                        protocol_data="", members=[], authorized_operations=None,
                    )
                )  # fmt: skip
                continue
            if group is None:
                standalone = name in self.cluster.consumer_groups.standalone
                described.append(
                    r.DescribedGroup(
                        error_code=NONE, group_id=name, group_state="Empty" if standalone else "Dead",
                        protocol_type="",
                        protocol_data="", members=[], authorized_operations=None,
                    )
                )  # fmt: skip
                continue
            subscription = ConsumerProtocolSubscription(version=0, topics=list(group.spec.topics)).encode()
            members = [
                member_class(
                    member_id=m.member_id,
                    group_instance_id=None,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=subscription,
                    member_assignment=ConsumerProtocolAssignment(
                        version=0,
                        assigned_partitions=[
                            ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=list(ps))
                            for t, ps in m.assignment
                        ],
                        user_data=None,
                    ).encode(),
                )
                for m in group.members
            ]
            described.append(
                r.DescribedGroup(
                    error_code=NONE, group_id=name, group_state=group.state, protocol_type="consumer",
                    protocol_data="range" if members else "", members=members,
                    authorized_operations=None,
                )
            )  # fmt: skip
        return r(version=version, throttle_time_ms=0, groups=described)

    def _group_offsets(
        self, name: str, topics: list[tuple[str, list[int]]] | None
    ) -> list[tuple[str, list[tuple[int, int, str]]]]:
        """(topic, [(partition, committed offset, metadata)]) of the group; -1 and "" where none."""
        groups = self.cluster.consumer_groups
        group = groups.groups.get(name)
        committed: dict[TopicPartition, tuple[int, str]] = (
            {tp: (o, "") for tp, o in group.committed.items()}
            if group is not None
            else groups.standalone.get(name, {})
        )
        if topics is None:
            by_topic: dict[str, list[tuple[int, int, str]]] = {}
            for tp, (offset, metadata) in sorted(committed.items()):
                by_topic.setdefault(tp.topic, []).append((tp.partition, offset, metadata))
            return list(by_topic.items())
        return [(t, [(p, *committed.get(TopicPartition(t, p), (-1, ""))) for p in ps]) for t, ps in topics]

    def offset_fetch(self, request: Any, version: int) -> Any:
        r = OffsetFetchResponse
        if version >= 8:
            groups = []
            gr = r.OffsetFetchResponseGroup
            for g in request.groups:
                asked = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
                if not self._coordinates(g.group_id):
                    groups.append(gr(group_id=g.group_id, topics=[], error_code=NOT_COORDINATOR))
                    continue
                groups.append(
                    gr(
                        group_id=g.group_id,
                        error_code=NONE,
                        topics=[
                            gr.OffsetFetchResponseTopics(
                                name=t,
                                partitions=[
                                    gr.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(
                                        partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                        metadata=m, error_code=NONE,
                                    )
                                    for p, o, m in parts
                                ],
                            )
                            for t, parts in self._group_offsets(g.group_id, asked)
                        ],
                    )
                )  # fmt: skip
            return r(version=version, throttle_time_ms=0, groups=groups)
        asked = (
            None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
        )
        coordinator = self._coordinates(request.group_id)
        if not coordinator and version >= 2:
            return r(version=version, throttle_time_ms=0, topics=[], error_code=NOT_COORDINATOR)
        if coordinator:
            found, error = self._group_offsets(request.group_id, asked), NONE
        else:  # v0-1 have no group-level error: every partition carries it
            found, error = [(t, [(p, -1, "") for p in ps]) for t, ps in asked or []], NOT_COORDINATOR
        topic_class = r.OffsetFetchResponseTopic
        topics = [
            topic_class(
                name=t,
                partitions=[
                    topic_class.OffsetFetchResponsePartition(
                        partition_index=p, committed_offset=o, committed_leader_epoch=-1, metadata=m,
                        error_code=error,
                    )
                    for p, o, m in parts
                ],
            )
            for t, parts in found
        ]  # fmt: skip
        return r(version=version, throttle_time_ms=0, topics=topics, error_code=NONE)

    def offset_commit(self, request: Any, version: int) -> Any:
        """A commit from outside the group (generation -1, no member id), as Kafka's coordinator takes it
        (:meth:`~app.embedded.reference_cluster.groups.ConsumerGroups.commit`): per partition
        ``UNKNOWN_TOPIC_OR_PARTITION`` for one that does not exist, ``UNKNOWN_MEMBER_ID`` for a group with
        members or a commit that claims membership (joining a group over the wire is not simulated)."""
        name = request.group_id
        view = self.cluster.metadata_view()
        error = NONE
        if not name:
            error = INVALID_GROUP_ID
        elif not self._coordinates(name):
            error = NOT_COORDINATOR
        elif request.generation_id_or_member_epoch >= 0 or request.member_id:
            error = UNKNOWN_MEMBER_ID
        answers: list[tuple[str, list[tuple[int, int]]]] = []
        offsets: dict[TopicPartition, tuple[int, str]] = {}
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                code = error
                if code == NONE and tp not in view.assignments:
                    code = UNKNOWN_TOPIC_OR_PARTITION
                if code == NONE:
                    offsets[tp] = (p.committed_offset, p.committed_metadata or "")
                parts.append((p.partition_index, code))
            answers.append((topic.name, parts))
        if offsets:
            try:
                self.cluster.consumer_groups.commit(name, offsets)
            except GroupError:
                answers = [
                    (t, [(p, UNKNOWN_MEMBER_ID if TopicPartition(t, p) in offsets else c) for p, c in parts])
                    for t, parts in answers
                ]
        r = OffsetCommitResponse
        topic_class = r.OffsetCommitResponseTopic
        return r(
            version=version,
            throttle_time_ms=0,
            topics=[
                topic_class(
                    name=t,
                    partitions=[
                        topic_class.OffsetCommitResponsePartition(partition_index=p, error_code=c)
                        for p, c in parts
                    ],
                )
                for t, parts in answers
            ],
        )


class KafkaListener:
    """A broker's listener socket: a thread per connection, bound while the broker runs, on the same port
    across restarts; closing it refuses new connections and drops the open ones."""

    def __init__(self, host: str, port: int, protocol: BrokerProtocol) -> None:
        self.host = host
        self.port = port
        self.protocol = protocol
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def listening(self) -> bool:
        return self._server is not None

    def open(self) -> int:
        """Bind (the configured port; a free one if that is taken, with a warning) and serve; the port."""
        if self._server is not None:
            return self.port
        listener = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                listener._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        try:
            server = Server((self.host, self.port), Handler)
        except OSError as exc:
            if not self.port:
                raise
            log.warning(
                "Kafka listener %s:%d: %s; listening on a free port instead", self.host, self.port, exc
            )
            server = Server((self.host, 0), Handler)
        self.port = int(server.server_address[1])
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=f"kafka-{self.port}", daemon=True)
        self._thread.start()
        return self.port

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            connections, self._connections = self._connections, set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            if self._server is None:
                return
            self._connections.add(conn)
        try:
            while True:
                head = _read_exactly(conn, 4)
                if head is None:
                    return
                (size,) = struct.unpack(">i", head)
                if not 0 < size <= MAX_FRAME_BYTES:
                    return
                payload = _read_exactly(conn, size)
                if payload is None:
                    return
                try:
                    conn.sendall(self.protocol.handle(payload))
                except ProtocolError as exc:
                    log.info("Kafka listener %s:%d closes a connection: %s", self.host, self.port, exc)
                    return
                except LoopStoppedError:
                    return  # the cluster is stopping
        except OSError:
            return
        except Exception:
            log.exception("Kafka listener %s:%d: error answering a request", self.host, self.port)
            return
        finally:
            with self._lock:
                self._connections.discard(conn)


def _read_exactly(conn: socket.socket, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = conn.recv(n - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)
