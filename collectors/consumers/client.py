"""The edge to Kafka's protocol: :class:`GroupOffsetsReader`, the narrow interface the collector uses,
and :class:`KafkaPythonReader`, kafka-python's ``KafkaAdminClient`` behind it (ListGroups on every
broker, DescribeGroups and OffsetFetch at each group's coordinator, ListOffsets batched per partition
leader). Also where the bootstrap servers and the client's security come from."""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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


class GroupOffsetsReader(Protocol):
    """What the collector asks of the cluster in a round."""

    def list_groups(self) -> list[str]:
        """The consumer groups of every broker (ListGroups)."""
        ...

    def describe_groups(self, groups: Sequence[str]) -> dict[str, GroupDescription]: ...

    def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """OffsetFetch at the group's coordinator: the partitions with a commit."""
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


class KafkaPythonReader:
    """kafka-python's ``KafkaAdminClient`` as a :class:`GroupOffsetsReader`."""

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

    def list_groups(self) -> list[str]:
        groups = self._admin.list_groups()
        return sorted(
            {g["group_id"] for g in groups if g.get("protocol_type", "consumer") in ("consumer", "")}
        )

    def describe_groups(self, groups: Sequence[str]) -> dict[str, GroupDescription]:
        if not groups:
            return {}
        described = self._admin.describe_groups(list(groups))
        return {
            group: GroupDescription(
                group,
                str(d.get("group_state", "")),
                str(d.get("protocol_type", "")),
                members_of(d.get("members")),
            )
            for group, d in described.items()
        }

    def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        fetched = self._admin.list_group_offsets({group: None}).get(group, {})
        return {
            TopicPartition(tp.topic, tp.partition): CommittedOffset(
                int(o.offset),
                o.metadata or "",
                None if o.leader_epoch is None or o.leader_epoch < 0 else int(o.leader_epoch),
            )
            for tp, o in fetched.items()
            if o.offset is not None and o.offset >= 0
        }

    def log_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """Two ListOffsets per partition leader (EARLIEST, LATEST), kafka-python batching them per
        leader. kafka-python fails the whole call for one bad partition (e.g. a deleted topic whose
        commits the group still holds): then each topic is asked alone, and a topic that fails again is
        left out (its partitions get no log offsets this round)."""
        if not partitions:
            return {}
        try:
            return self._log_offsets(partitions)
        except Exception:
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp)
            found: dict[TopicPartition, tuple[int, int]] = {}
            for tps in by_topic.values():
                with contextlib.suppress(Exception):
                    found.update(self._log_offsets(tps))
            return found

    def _log_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        from kafka import TopicPartition as KafkaTopicPartition
        from kafka.protocol.consumer import OffsetSpec

        tps = [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions]
        starts = self._admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.EARLIEST))
        ends = self._admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
        return {
            TopicPartition(tp.topic, tp.partition): (int(starts[tp].offset), int(ends[tp].offset))
            for tp in tps
            if tp in starts and tp in ends
        }

    def close(self) -> None:
        self._admin.close()
