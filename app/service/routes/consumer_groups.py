"""``/api/v1/consumer-groups``: the consumer groups of the cluster's latest consumer-lag round (viewer),
and one group's partitions. 503 while consumer lag is not collected (``kafka.enabled`` false) or no round
has succeeded yet (the brokers do not answer over Kafka's protocol: the body says why); 404 for a group
the latest round does not have."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path

from app.service.consumers import ConsumerLag
from app.service.deps import ClusterDep, Viewer
from app.service.schemas.common import Problem
from app.service.schemas.consumer_groups import ConsumerGroupDetailOut, ConsumerGroupsOut
from collectors.consumers.collector import ConsumerRound

router = APIRouter(prefix="/api/v1", tags=["consumer groups"])

NOT_COLLECTED = (
    "consumer lag is not collected for this cluster (KAFKA_HEALTH_KAFKA__ENABLED=false, or the service "
    "was started without its kafka settings)"
)


def consumers_of(cluster: ClusterDep) -> ConsumerLag:
    """The cluster's consumer-lag collector; 503 when consumer lag is not collected."""
    consumers = cluster.consumers
    if consumers is None:
        raise HTTPException(503, NOT_COLLECTED)
    return consumers


Consumers = Annotated[ConsumerLag, Depends(consumers_of)]

GroupPath = Annotated[
    str, Path(min_length=1, max_length=1000, description="a consumer group's id (group.id)")
]


def latest_round(consumers: ConsumerLag) -> ConsumerRound:
    """The latest round; 503 before the first one succeeded, saying why."""
    latest = consumers.latest
    if latest is None:
        error = consumers.error
        why = f": {error}" if error else " (the first round is under way)"
        raise HTTPException(
            503,
            f"no consumer-lag round has succeeded yet{why}; tried every {consumers.settings.interval_s:g} s",
        )
    return latest


@router.get("/consumer-groups", response_model=ConsumerGroupsOut, responses={503: {"model": Problem}})
def consumer_groups(_: Viewer, consumers: Consumers) -> ConsumerGroupsOut:
    """Every consumer group of the latest round (ListGroups on every broker, filtered by
    ``kafka.include``/``kafka.exclude``): its state, members, lag in records, how far behind in seconds
    and its verdict (rule 19)."""
    return ConsumerGroupsOut.of(latest_round(consumers), consumers.error)


@router.get(
    "/consumer-groups/{group}",
    response_model=ConsumerGroupDetailOut,
    responses={404: {"model": Problem}, 503: {"model": Problem}},
)
def consumer_group(group: GroupPath, _: Viewer, consumers: Consumers) -> ConsumerGroupDetailOut:
    """One group of the latest round with each of its partitions: committed offset, log-start and log-end
    offsets, lag in records and in seconds (``lag_seconds_at_least``: a lower bound) and its member."""
    latest = latest_round(consumers)
    report = latest.groups.get(group)
    if report is None:
        if group in latest.errors:
            raise HTTPException(503, f"consumer group {group}: {latest.errors[group]}")
        raise HTTPException(
            404,
            f"no consumer group {group} in the latest round ({len(latest.groups)} groups; "
            "kafka.include/kafka.exclude apply)",
        )
    return ConsumerGroupDetailOut.of(report, latest.at)
