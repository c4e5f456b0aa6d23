"""The brokers' group coordinator: which broker coordinates a consumer group, ``__consumer_offsets``
created on the first request for one, the groups' offset commits on each tick, and the controls that add,
stop, start, stall, slow or rewind a simulated group.

The groups' own state is :class:`~app.embedded.reference_cluster.groups.ConsumerGroups` (pure); these
functions drive it from the cluster, on its loop thread unless a docstring says "any thread".
:class:`~app.embedded.reference_cluster.cluster.ReferenceCluster` offers each as a method.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.embedded.reference_cluster.admin import TopicExistsError
from app.embedded.reference_cluster.broker import SimBroker
from app.embedded.reference_cluster.config import ConsumerGroupSpec
from app.embedded.reference_cluster.errors import ClusterError
from app.embedded.reference_cluster.groups import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIG,
    OFFSETS_TOPIC_MAX_RF,
    OFFSETS_TOPIC_PARTITIONS,
    GroupError,
    offsets_partition,
)
from collectors.kafka import zkdata
from collectors.kafka.model import TopicPartition

if TYPE_CHECKING:
    from app.embedded.reference_cluster.cluster import ReferenceCluster


def coordinator_of(cluster: ReferenceCluster, group: str) -> SimBroker | None:
    """The leader of the group's ``__consumer_offsets`` partition; None while there is none (the topic
    is created on the first request, as Kafka creates it)."""
    if OFFSETS_TOPIC not in cluster.metadata_view().topic_ids:
        ensure_offsets_topic(cluster)
        return None
    return cluster._leader_of(TopicPartition(OFFSETS_TOPIC, offsets_partition(group)))


def ensure_offsets_topic(cluster: ReferenceCluster) -> None:
    """Create ``__consumer_offsets`` as a broker does on the first FindCoordinator: 50 partitions,
    RF min(3, brokers), compacted, through the admin path (so ZooKeeper shows it like any topic)."""
    if cluster._offsets_topic_requested or cluster.admin is None or cluster._admin_client is None:
        return
    cluster._offsets_topic_requested = True
    if cluster._admin_client.exists(zkdata.topic_path(OFFSETS_TOPIC)):
        return
    brokers = len(cluster.admin.registered_brokers())
    with contextlib.suppress(TopicExistsError):
        cluster.admin.create_topic(
            OFFSETS_TOPIC,
            OFFSETS_TOPIC_PARTITIONS,
            max(1, min(OFFSETS_TOPIC_MAX_RF, brokers)),
            OFFSETS_TOPIC_CONFIG,
        )


def commit_group_offsets(cluster: ReferenceCluster, now: float) -> None:
    """The groups whose commit interval has passed commit their positions (each tick)."""
    if not cluster.consumer_groups.groups:
        return
    view = cluster.metadata_view()
    message_bytes = cluster.settings.traffic.message_bytes
    leaders: dict[TopicPartition, SimBroker | None] = {}  # this tick's, each looked up once

    def leader_of(tp: TopicPartition) -> SimBroker | None:
        try:
            return leaders[tp]
        except KeyError:
            leader = leaders[tp] = cluster._leader_of(tp)
            return leader

    def log_end(tp: TopicPartition) -> int | None:
        leader = leader_of(tp)
        return cluster.log_offsets(leader, tp)[1] if leader is not None else None

    def produce_rate(tp: TopicPartition) -> float:
        leader = leader_of(tp)
        return 0.0 if leader is None else cluster.traffic.produce_bytes_per_sec(tp, leader.id) / message_bytes

    cluster.consumer_groups.commit_due(now, log_end, produce_rate, view.partition_count)


def _topic_partitions(cluster: ReferenceCluster) -> dict[str, int]:
    view = cluster.metadata_view()
    return {t: view.partition_count(t) for t in view.topic_ids}


def add_consumer_group(cluster: ReferenceCluster, spec: ConsumerGroupSpec, timeout: float = 60.0) -> None:
    """Start a simulated group (any thread); its coordinator's topic is created first if needed, and
    the call returns once the group has a coordinator and has committed."""
    add_consumer_groups(cluster, [spec], timeout)


def add_consumer_groups(
    cluster: ReferenceCluster, specs: Sequence[ConsumerGroupSpec], timeout: float = 60.0
) -> None:
    """Start several simulated groups at once (any thread): all are added in one call on the loop (none
    when one is refused), then the call waits once until every one has a coordinator and has committed
    (thousands of groups start in about the time of one)."""
    names = [spec.name for spec in specs]

    def add() -> None:
        groups, partitions, now = cluster.consumer_groups, _topic_partitions(cluster), cluster.now_ms()
        try:
            groups.check_new(specs, partitions)
            for spec in specs:
                groups.add(spec, partitions, now)
        except GroupError as exc:
            raise ClusterError(exc.status, exc.message) from None
        ensure_offsets_topic(cluster)

    def ready() -> bool:
        groups = cluster.consumer_groups.groups
        return all(
            bool(groups[name].committed) and coordinator_of(cluster, name) is not None for name in names
        )

    cluster.loop.call(add)
    what = f"consumer group {names[0]}" if len(names) == 1 else f"{len(names)} consumer groups"
    cluster.wait_until(ready, timeout, f"coordinator and first commit of {what}")


def consumer_group_action(cluster: ReferenceCluster, name: str, action: str, body: Mapping[str, Any]) -> None:
    """``stop``, ``start`` (``{"rate_factor"}`` optional), ``stall``, ``slow`` (``{"rate_factor"}``,
    default 0.5) or ``rewind`` (``{"records": N}``) a simulated group (any thread)."""

    def run() -> None:
        groups, now = cluster.consumer_groups, cluster.now_ms()
        try:
            if action == "stop":
                groups.stop(name)
            elif action == "start":
                groups.start(name, _topic_partitions(cluster), now, _rate_factor(body, None))
            elif action == "stall":
                groups.stall(name, now, cluster.high_watermark)
            elif action == "slow":
                groups.slow(name, _rate_factor(body, 0.5) or 0.0)
            elif action == "rewind":
                records = body.get("records")
                if isinstance(records, bool) or not isinstance(records, int) or records < 1:
                    raise GroupError(422, 'rewind takes {"records": N} with N a positive integer')
                groups.rewind(name, records)
            else:
                raise GroupError(404, f"no consumer group action {action!r}")
        except GroupError as exc:
            raise ClusterError(exc.status, exc.message) from None

    cluster.loop.call(run)


def _rate_factor(body: Mapping[str, Any], default: float | None) -> float | None:
    value = body.get("rate_factor", default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1000:
        raise GroupError(422, f"rate_factor must be a number in [0, 1000], got {value!r}")
    return float(value)
