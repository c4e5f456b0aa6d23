"""The edge to Kafka's protocol: :class:`GroupOffsetsReader`, the narrow interface the collector uses,
and :class:`KafkaPythonReader`, kafka-python's ``KafkaAdminClient`` behind it (ListGroups on every
broker, DescribeGroups and OffsetFetch at each group's coordinator, ListOffsets batched per partition
leader). Also where the bootstrap servers and the client's security come from."""

from __future__ import annotations

import contextlib
import math
import os
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from collectors.consumers.config import KafkaSettings, client_kwargs, parse_properties
from collectors.kafka.model import BrokerRegistration, TopicPartition


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    assignment: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    state: str
    protocol_type: str = "consumer"
    members: tuple[GroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class GroupsOffsets(NamedTuple):
    """The committed offsets of several groups (OffsetFetch): each group's, or the one-line error that
    kept a group's from being read (the others are read all the same)."""

    offsets: dict[str, dict[TopicPartition, CommittedOffset]]
    errors: dict[str, str]


T = TypeVar("T")


class GroupOffsetsReader(Protocol):
    """What the collector asks of the cluster in a round."""

    def list_groups(self) -> list[str]:
        """The consumer groups of every broker (ListGroups)."""
        ...

    def describe_groups(self, groups: Sequence[str]) -> dict[str, GroupDescription]: ...

    def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """OffsetFetch at the group's coordinator: the partitions with a commit."""
        ...

    def committed_offsets_of(self, groups: Sequence[str]) -> GroupsOffsets:
        """:meth:`committed_offsets` of many groups at once (OffsetFetch v8 batches the groups of one
        coordinator in a request); a group that cannot be read is in ``errors``, not an exception."""
        ...

    def log_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) of each partition (ListOffsets at its leader)."""
        ...

    def close(self) -> None: ...


# --- where the brokers are ------------------------------------------------------------------------------


def bootstrap_servers(settings: KafkaSettings, brokers: Mapping[int, BrokerRegistration]) -> list[str]:
    """``bootstrap_servers`` if set, else each registered broker's endpoint of ``listener`` (default: the
    listener named PLAINTEXT, else its first endpoint: :meth:`BrokerRegistration.endpoint`, as for the
    metrics); ValueError when none is left."""
    if settings.bootstrap_servers is not None:
        return settings.bootstrap_servers.split(",")
    servers = []
    for broker_id in sorted(brokers):
        endpoint = brokers[broker_id].endpoint(settings.listener)
        if endpoint is not None:
            host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
            servers.append(f"{host}:{endpoint.port}")
    if not servers:
        seen = sorted({e.listener for b in brokers.values() for e in b.endpoints})
        if settings.listener is not None and brokers:
            raise ValueError(
                f"--kafka-listener: no registered broker has listener {settings.listener!r} "
                f"(their listeners: {', '.join(seen) or 'none'})"
            )
        raise ValueError("no broker registered an endpoint: give --bootstrap-server HOST:PORT")
    return servers


def open_reader(settings: KafkaSettings, brokers: Mapping[int, BrokerRegistration]) -> KafkaPythonReader:
    """The reader the settings describe: bootstrap servers (:func:`bootstrap_servers`), the client's
    security (:func:`read_client_config`); ValueError (one line) for bad settings, kafka-python's errors
    when no broker answers within ``timeout_s``."""
    servers = bootstrap_servers(settings, brokers)
    client = {} if settings.client_config is None else read_client_config(settings.client_config)
    return KafkaPythonReader(servers, settings.timeout_s, **client)


def read_client_config(path: str | Path) -> dict[str, Any]:
    """kafka-python's keyword arguments from a Kafka client properties file (``--command-config``);
    ValueError (one line) when unreadable or unsupported."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--command-config {path}: {exc.strerror or exc}") from None
    kwargs = client_kwargs(parse_properties(text))
    return with_ssl_context(kwargs)


def with_ssl_context(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Replaces the ``ssl_pem_*`` contents (:func:`client_kwargs`) by an ``ssl_context``."""
    cadata = kwargs.pop("ssl_pem_cadata", None)
    chain = kwargs.pop("ssl_pem_certificate_chain", None)
    key = kwargs.pop("ssl_pem_key", None)
    if cadata is None and chain is None:
        return kwargs
    context = ssl.create_default_context(cafile=kwargs.pop("ssl_cafile", None))
    context.check_hostname = bool(kwargs.get("ssl_check_hostname", True))
    try:
        if cadata is not None:
            context.load_verify_locations(cadata=cadata)
    except ssl.SSLError as exc:
        raise ValueError(f"ssl.truststore.certificates: not PEM certificates ({exc.reason})") from None
    if chain is not None:
        # the ssl module loads a key pair from files only: a private file, removed at once
        fd, name = tempfile.mkstemp(prefix="kafka-health-", suffix=".pem")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f"{key}\n{chain}\n")
            context.load_cert_chain(name, password=kwargs.get("ssl_password"))
        except ssl.SSLError as exc:
            raise ValueError(
                f"ssl.keystore.key: cannot load the key and certificate chain ({exc.reason})"
            ) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_password"):
        kwargs.pop(name, None)
    kwargs["ssl_context"] = context
    return kwargs


# --- kafka-python ----------------------------------------------------------------------------------------


def members_of(raw: Any) -> tuple[GroupMember, ...]:
    """The members of a group as ``KafkaAdminClient.describe_groups`` gives them (dicts), each with the
    partitions of its decoded assignment (none when kafka-python could not decode it)."""
    members = []
    for m in raw or ():
        assignment: list[TopicPartition] = []
        decoded = m.get("member_assignment")
        if isinstance(decoded, Mapping):
            for entry in decoded.get("assigned_partitions") or ():
                assignment.extend(TopicPartition(entry["topic"], int(p)) for p in entry["partitions"])
        elif decoded is not None and hasattr(decoded, "partitions"):
            assignment.extend(TopicPartition(tp.topic, tp.partition) for tp in decoded.partitions())
        members.append(
            GroupMember(
                str(m.get("member_id", "")),
                str(m.get("client_id", "")),
                str(m.get("client_host", "")),
                tuple(sorted(assignment)),
            )
        )
    return tuple(members)


def _admin_client(**config: Any) -> Any:
    """kafka-python's ``KafkaAdminClient``, told not to decode the groups' ``authorized_operations``:
    kafka-python 3.0 always asks for them and fails the whole DescribeGroups on a bit it does not know
    (Tansu answers one: "15 is not a valid ACLOperation"); the collector has no use for them."""
    from kafka import KafkaAdminClient

    class AdminClient(KafkaAdminClient):  # type: ignore[misc]
        def _process_acl_operations(self, obj: dict[str, Any]) -> dict[str, Any]:
            obj.pop("authorized_operations", None)
            return obj

    return AdminClient(**config)


OFFSET_FETCH_BATCH_VERSION = 8
"""OffsetFetch v8 (KIP-709, Kafka 3.0) asks for the offsets of many groups in one request."""
LEADERS_MAX_AGE_S = 60.0
"""How long the partitions' leaders are used without asking Metadata again (a moved leader answers
NOT_LEADER_OR_FOLLOWER, and its partitions are asked again at once: this only bounds what a round would
not notice otherwise)."""
_MAX_IN_FLIGHT_PER_NODE = 4
"""Below kafka-python's ``max_in_flight_requests_per_connection`` (5), which fails a request beyond it."""
_RETRIABLE_GROUP_ERRORS = {14, 15, 16}
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the coordinator moved or is
loading; the group's coordinator is looked up again next time."""


def _error_name(code: int) -> str:
    from kafka import errors

    return str(errors.for_code(code).__name__)


class KafkaPythonReader:
    """kafka-python's client (its ``KafkaAdminClient``'s connections and I/O thread) as a
    :class:`GroupOffsetsReader`, with the requests of a round sent to all brokers at once: ListGroups to
    every broker (each broker lists the groups it coordinates, so that no FindCoordinator is needed for
    them), one DescribeGroups and one OffsetFetch v8 (every group it coordinates) per coordinator, one
    Metadata for the leaders and two ListOffsets (earliest, latest) per leader, all in flight together and
    decoded with kafka-python's protocol classes. A broker without OffsetFetch v8 is asked one group per
    request (at most four in flight per broker)."""

    def __init__(self, servers: Sequence[str], timeout_s: float = 10.0, **client: Any) -> None:
        timeout_ms = int(timeout_s * 1000)
        self._admin: Any = _admin_client(
            bootstrap_servers=list(servers),
            client_id="kafka-health",
            bootstrap_timeout_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
            reconnect_backoff_max_ms=1000,
            **client,
        )
        self._manager: Any = self._admin._manager
        self._coordinators: dict[str, int] = {}
        """Group -> its coordinator's node id, from the last ListGroups (or FindCoordinator)."""
        self._leaders: dict[str, dict[int, int]] = {}
        """Topic -> partition -> leader id, from Metadata: asked again for a topic not seen yet, after an
        error, and every :data:`LEADERS_MAX_AGE_S`."""
        self._leaders_at = -math.inf

    # --- plumbing ----------------------------------------------------------------------------------

    def _run(self, coroutine: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run on kafka-python's I/O thread, blocking this one until done."""
        result: T = self._manager.run(coroutine, *args)
        return result

    @staticmethod
    async def _settle(futures: Sequence[Any]) -> list[Any]:
        """Each future's value or exception (the requests were all sent before the first is awaited)."""
        results: list[Any] = []
        for future in futures:
            try:
                results.append(await future)
            except Exception as exc:
                results.append(exc)
        return results

    def _send(self, request: Any, node_id: int) -> Any:
        """kafka-python's future of the answer; a failed one for a broker it no longer knows (gone from
        the metadata) rather than an exception, so that the other requests of the call go on."""
        from kafka.future import Future

        try:
            return self._manager.send(request, node_id=node_id)
        except Exception as exc:
            return Future().failure(exc)

    def _spawn(self, coroutine: Awaitable[Any]) -> Any:
        return self._admin._net.call_soon_with_future(coroutine)

    @property
    def batched_offset_fetch(self) -> bool:
        """Whether the brokers answer OffsetFetch v8 (many groups per request)."""
        from kafka.protocol.consumer import OffsetFetchRequest

        try:
            version = self._manager.broker_version_data.api_version(OffsetFetchRequest)
        except Exception:
            return False
        return int(version) >= OFFSET_FETCH_BATCH_VERSION

    async def _coordinators_of(self, groups: Sequence[str]) -> dict[int, list[str]]:
        """Coordinator node id -> its groups (FindCoordinator, batched, for groups no ListGroups named)."""
        unknown = [g for g in groups if g not in self._coordinators]
        if unknown:
            self._coordinators.update(await self._admin._find_coordinator_ids(unknown))
        by_node: dict[int, list[str]] = {}
        for group in groups:
            by_node.setdefault(self._coordinators[group], []).append(group)
        return by_node

    def _forget_coordinator(self, group: str) -> None:
        self._coordinators.pop(group, None)
        with contextlib.suppress(Exception):
            self._manager.cluster._coordinators.pop((_group_key_type(), group), None)

    # --- ListGroups ----------------------------------------------------------------------------------

    def list_groups(self) -> list[str]:
        return self._run(self._list_groups)

    async def _list_groups(self) -> list[str]:
        from kafka.protocol.admin import ListGroupsRequest

        nodes = [broker.node_id for broker in self._manager.cluster.brokers()]
        answers = await self._settle([self._send(ListGroupsRequest(), node) for node in nodes])
        coordinators: dict[str, int] = {}
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, Exception):
                raise answer
            if answer.error_code:
                raise RuntimeError(f"ListGroups at broker {node}: {_error_name(answer.error_code)}")
            for g in answer.groups:
                if g.protocol_type in ("consumer", ""):
                    coordinators[g.group_id] = node
        self._coordinators = coordinators
        return sorted(coordinators)

    # --- DescribeGroups ------------------------------------------------------------------------------

    def describe_groups(self, groups: Sequence[str]) -> dict[str, GroupDescription]:
        if not groups:
            return {}
        return self._run(self._describe_groups, list(groups))

    async def _describe_groups(self, groups: list[str]) -> dict[str, GroupDescription]:
        from kafka.protocol.admin import DescribeGroupsRequest

        by_node = await self._coordinators_of(groups)
        nodes = list(by_node)
        answers = await self._settle(
            [
                self._send(DescribeGroupsRequest(groups=by_node[n], include_authorized_operations=False), n)
                for n in nodes
            ]
        )
        described: dict[str, GroupDescription] = {}
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, Exception):
                for group in by_node[node]:
                    self._forget_coordinator(group)
                continue
            for g in answer.groups:
                if g.error_code:
                    if g.error_code in _RETRIABLE_GROUP_ERRORS:
                        self._forget_coordinator(g.group_id)
                    continue
                described[g.group_id] = GroupDescription(
                    g.group_id,
                    str(g.group_state),
                    str(g.protocol_type),
                    tuple(_member(m) for m in g.members),
                )
        return described

    # --- OffsetFetch ---------------------------------------------------------------------------------

    def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        offsets, errors = self.committed_offsets_of([group])
        if group in errors:
            raise RuntimeError(errors[group])
        return offsets.get(group, {})

    def committed_offsets_of(self, groups: Sequence[str]) -> GroupsOffsets:
        if not groups:
            return GroupsOffsets({}, {})
        return self._run(self._committed_offsets_of, list(groups))

    async def _committed_offsets_of(self, groups: list[str]) -> GroupsOffsets:
        by_node = await self._coordinators_of(groups)
        batched = self.batched_offset_fetch
        tasks = {
            node: self._spawn(
                self._offset_fetch_batched(node, members)
                if batched
                else self._offset_fetch_each(node, members)
            )
            for node, members in by_node.items()
        }
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        errors: dict[str, str] = {}
        for node, answer in zip(tasks, await self._settle(list(tasks.values())), strict=True):
            if isinstance(answer, Exception):
                for group in by_node[node]:
                    errors[group] = f"OffsetFetch: {type(answer).__name__}: {answer}"
                    self._forget_coordinator(group)
                continue
            found, failed = answer
            offsets.update(found)
            errors.update(failed)
        return GroupsOffsets(offsets, errors)

    async def _offset_fetch_batched(self, node: int, groups: list[str]) -> GroupsOffsets:
        from kafka.protocol.consumer import OffsetFetchRequest

        group_class = OffsetFetchRequest.OffsetFetchRequestGroup
        request = OffsetFetchRequest(
            groups=[group_class(group_id=g, topics=None) for g in groups],
            require_stable=False,
            min_version=OFFSET_FETCH_BATCH_VERSION,
        )
        answer = await self._send(request, node)
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        errors: dict[str, str] = {}
        for g in answer.groups:
            self._offsets_of(g.group_id, g.error_code or answer.error_code, g.topics, offsets, errors)
        for group in groups:
            if group not in offsets and group not in errors:
                errors[group] = "OffsetFetch: the coordinator's answer left the group out"
        return GroupsOffsets(offsets, errors)

    async def _offset_fetch_each(self, node: int, groups: list[str]) -> GroupsOffsets:
        """One group per request (OffsetFetch v2-v7), at most a few in flight to the node."""
        from kafka.protocol.consumer import OffsetFetchRequest

        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        errors: dict[str, str] = {}
        step = _MAX_IN_FLIGHT_PER_NODE
        for i in range(0, len(groups), step):
            chunk = groups[i : i + step]
            requests = [
                OffsetFetchRequest(
                    group_id=g, topics=None, min_version=2, max_version=OFFSET_FETCH_BATCH_VERSION - 1
                )
                for g in chunk
            ]
            answers = await self._settle([self._send(r, node) for r in requests])
            for group, answer in zip(chunk, answers, strict=True):
                if isinstance(answer, Exception):
                    errors[group] = f"OffsetFetch: {type(answer).__name__}: {answer}"
                    self._forget_coordinator(group)
                    continue
                self._offsets_of(group, answer.error_code, answer.topics, offsets, errors)
        return GroupsOffsets(offsets, errors)

    def _offsets_of(
        self,
        group: str,
        error_code: int,
        topics: Any,
        offsets: dict[str, dict[TopicPartition, CommittedOffset]],
        errors: dict[str, str],
    ) -> None:
        if error_code:
            errors[group] = f"OffsetFetch: {_error_name(error_code)}"
            if error_code in _RETRIABLE_GROUP_ERRORS:
                self._forget_coordinator(group)
            return
        found: dict[TopicPartition, CommittedOffset] = {}
        for t in topics:
            name = t.name
            for p in t.partitions:
                if p.error_code:
                    errors[group] = f"OffsetFetch: {_error_name(p.error_code)} for {name}-{p.partition_index}"
                    return
                if p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch
                    found[TopicPartition(name, p.partition_index)] = CommittedOffset(
                        p.committed_offset, p.metadata or "", epoch if epoch >= 0 else None
                    )
        offsets[group] = found

    # --- Metadata and ListOffsets ------------------------------------------------------------------

    def log_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) of each partition: two ListOffsets (EARLIEST, LATEST) per leader, all in
        flight at once, the leaders from Metadata (kept, see ``_leaders``). Partitions answered with an
        error are asked again once after a new Metadata; a partition without a leader, of an unknown topic
        (e.g. a deleted topic whose commits the group still holds) or failing twice is left out (no log
        offsets this round)."""
        if not partitions:
            return {}
        return self._run(self._log_offsets, partitions)

    async def _log_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        now = time.monotonic()
        stale = now - self._leaders_at > LEADERS_MAX_AGE_S
        if stale or any(tp.topic not in self._leaders for tp in partitions):
            await self._refresh_leaders({tp.topic for tp in partitions})
        found, failed = await self._list_offsets(partitions)
        if failed:  # a leader moved (NOT_LEADER_OR_FOLLOWER), a topic went: metadata again, then once more
            await self._refresh_leaders({tp.topic for tp in failed})
            again, _ = await self._list_offsets(failed)
            found.update(again)
        return found

    async def _refresh_leaders(self, topics: Collection[str]) -> None:
        """The leader of each partition of ``topics`` (one Metadata request); an unknown topic has none.
        The leaders count as fresh once every topic asked for so far has been in one answer."""
        from kafka.protocol.metadata import MetadataRequest

        names = sorted(topics)
        metadata = await self._send(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=t, topic_id=None) for t in names],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            ),
            self._manager.least_loaded_node(),
        )
        with contextlib.suppress(Exception):
            self._manager.cluster.update_metadata(metadata)  # the brokers ListGroups goes to
        for name in names:
            self._leaders[name] = {}
        for t in metadata.topics:
            if not t.error_code:
                self._leaders[t.name] = {
                    p.partition_index: p.leader_id for p in t.partitions if p.leader_id >= 0
                }
        if set(self._leaders) <= set(names):
            self._leaders_at = time.monotonic()

    async def _list_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> tuple[dict[TopicPartition, tuple[int, int]], list[TopicPartition]]:
        """(log start, log end) of the partitions with a known leader, and the partitions without one or
        whose leader answered with an error or not at all."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        failed: list[TopicPartition] = []
        for tp in partitions:
            leader = self._leaders.get(tp.topic, {}).get(tp.partition)
            if leader is None:
                failed.append(tp)  # no leader, or a topic that is gone
            else:
                by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(tp.partition)
        nodes = list(by_leader)
        sent = []
        for node in nodes:
            for timestamp in (-2, -1):  # EARLIEST, LATEST
                sent.append(self._send(_list_offsets_request(by_leader[node], timestamp), node))
        answers = await self._settle(sent)
        starts: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}
        for i, answer in enumerate(answers):
            latest = i % 2 == 1
            if isinstance(answer, Exception):
                if latest:
                    asked = by_leader[nodes[i // 2]]
                    failed.extend(TopicPartition(t, p) for t, ps in asked.items() for p in ps)
                continue
            into = ends if latest else starts
            for t in answer.topics:
                name = t.name
                for p in t.partitions:
                    if not p.error_code and p.offset >= 0:
                        into[TopicPartition(name, p.partition_index)] = p.offset
                    elif latest:
                        failed.append(TopicPartition(name, p.partition_index))
        return {tp: (starts[tp], end) for tp, end in ends.items() if tp in starts}, failed

    def close(self) -> None:
        self._admin.close()


def _list_offsets_request(partitions: Mapping[str, list[int]], timestamp: int) -> Any:
    from kafka.protocol.consumer import ListOffsetsRequest

    topic_class = ListOffsetsRequest.ListOffsetsTopic
    partition_class = topic_class.ListOffsetsPartition
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            topic_class(
                name=topic,
                partitions=[partition_class(partition_index=p, timestamp=timestamp) for p in ps],
            )
            for topic, ps in partitions.items()
        ],
        min_version=1,
    )


def _member(m: Any) -> GroupMember:
    """A DescribeGroups member with the partitions of its assignment (none when it does not decode as
    the consumer protocol's)."""
    from kafka.protocol.consumer import ConsumerProtocolAssignment

    assignment: list[TopicPartition] = []
    if m.member_assignment:
        with contextlib.suppress(Exception):
            decoded = ConsumerProtocolAssignment.decode(m.member_assignment)
            for entry in decoded.assigned_partitions:
                assignment.extend(TopicPartition(entry.topic, int(p)) for p in entry.partitions)
    return GroupMember(str(m.member_id), str(m.client_id), str(m.client_host), tuple(sorted(assignment)))


def _group_key_type() -> Any:
    from kafka.protocol.metadata import CoordinatorType

    return CoordinatorType.GROUP
