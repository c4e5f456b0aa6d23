"""The live cluster (viewer role): ``/api/v1/cluster``, ``/brokers``, ``/topics``, ``/partitions``.

Answers come from the live snapshot (:class:`~app.service.state.ClusterView`, no I/O per request).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse

from app.service.deps import View, Viewer
from app.service.schemas.cluster import (
    BrokerAddress,
    BrokerOut,
    BrokerScrapeOut,
    ClusterOut,
    ControllerOut,
    EffectiveSettingsOut,
    PartitionOut,
    PendingOut,
    PendingPartition,
    PendingReassignment,
    SnapshotInfo,
    StaticDefaultsOut,
    Summary,
    SuspectOut,
    TopicDetail,
    TopicOut,
    UrpCrossCheckOut,
    ZnodeErrorOut,
)
from app.service.schemas.common import MAX_PAGE, Page, Problem
from app.service.schemas.migration import MigrationOut
from app.service.schemas.params import BrokerIdPath, BrokerIdQuery, Offset, QueryBool
from app.service.state import ClusterState, ClusterView
from collectors.health import PartitionHealth, partition_json, partition_settings
from collectors.kafka.effective import PartitionSettings
from collectors.kafka.model import NO_LEADER, PartitionInfo, TopicPartition
from collectors.migration import migration_view

router = APIRouter(prefix="/api/v1", tags=["cluster"])


MAX_SUSPECTS = 20


@router.get("/cluster", response_model=ClusterOut)
def cluster(_: Viewer, view: View) -> JSONResponse:
    """The cluster's state and health summary (cached per snapshot version and scrape)."""
    body: dict[str, Any] = view.memo("cluster", lambda state: _cluster(view, state).model_dump(mode="json"))
    state = view.state
    snapshot = dict(body["snapshot"])
    snapshot["last_good_at"] = state.last_good_at
    snapshot["age_s"] = None if state.last_good_at is None else max(0.0, time.time() - state.last_good_at)
    return JSONResponse({**body, "snapshot": snapshot})


def _cluster(view: ClusterView, state: ClusterState) -> ClusterOut:
    snapshot, report = state.snapshot, state.report
    summary = report.summary
    scan = view.collector.last_scan
    cross = report.urp_cross_check
    return ClusterOut(
        cluster_id=snapshot.cluster_id,
        snapshot=SnapshotInfo(
            version=snapshot.version,
            taken_at=snapshot.taken_at,
            last_good_at=state.last_good_at,
            age_s=None if state.last_good_at is None else max(0.0, time.time() - state.last_good_at),
            stale=snapshot.stale,
            scan_seconds=None if scan is None else scan.seconds,
            scan_reads=None if scan is None else scan.reads,
        ),
        controller=ControllerOut(
            broker_id=snapshot.controller.broker_id,
            epoch=snapshot.controller.epoch,
            active=report.controller.active,
            kraft=report.controller.kraft,
            kraft_controller_epoch=snapshot.controller.kraft_controller_epoch,
        ),
        migration=MigrationOut(**migration_view(snapshot).to_json()),
        summary=Summary.of(summary),
        suspect_brokers=[
            SuspectOut(broker_id=s.broker_id, missing_from=s.missing_from, share=s.share)
            for s in sorted(report.suspects, key=lambda s: (-s.share, s.broker_id))[:MAX_SUSPECTS]
        ],
        suspect_brokers_total=len(report.suspects),
        urp_cross_check=None
        if cross is None
        else UrpCrossCheckOut(
            zookeeper=cross.zookeeper,
            gauges=cross.gauges,
            reporting=list(cross.reporting),
            missing=list(cross.missing),
            agrees=cross.agrees,
            offline_not_counted=cross.offline_not_counted,
        ),
        pending=PendingOut(
            preferred_election=[
                PendingPartition(topic=tp.topic, partition=tp.partition)
                for tp in snapshot.pending.preferred_election
            ],
            reassignments=[
                PendingReassignment(topic=tp.topic, partition=tp.partition, replicas=list(r))
                for tp, r in sorted(snapshot.pending.reassignments.items())
            ],
            deletions=list(snapshot.pending.deletions),
        ),
        errors=[ZnodeErrorOut(path=e.path, reason=e.reason) for e in snapshot.errors],
        effective_settings=_effective_settings(state),
    )


def _effective_settings(state: ClusterState) -> EffectiveSettingsOut:
    snapshot, settings = state.snapshot, state.report.settings
    unknown = (0, 0) if settings is None else settings.unknown_counts(snapshot.partitions.values())
    return EffectiveSettingsOut(
        static_defaults=StaticDefaultsOut(
            min_insync_replicas=None if settings is None else settings.static.min_insync_replicas,
            unclean_leader_election_enable=None
            if settings is None
            else settings.static.unclean_leader_election_enable,
        ),
        unreadable=[]
        if settings is None
        else [ZnodeErrorOut(path=e.path, reason=e.reason) for e in settings.unreadable],
        partitions_with_unknown_min_isr=unknown[0],
        partitions_with_unknown_unclean_leader_election=unknown[1],
    )


def _brokers(state: ClusterState, listener: str | None = None) -> list[BrokerOut]:
    snapshot, report = state.snapshot, state.report
    replicas: Counter[int] = Counter()
    leaders: Counter[int] = Counter()
    for info in snapshot.partitions.values():
        replicas.update(info.assignment.replicas)
        if info.state is not None and info.state.leader != NO_LEADER:
            leaders[info.state.leader] += 1
    ids = sorted(set(snapshot.brokers) | set(report.brokers_down))
    out = []
    for broker_id in ids:
        registration = snapshot.brokers.get(broker_id)
        imbalance = report.imbalance.get(broker_id)
        scrape = None if state.scrape is None else state.scrape.scrapes.get(broker_id)
        address = None if registration is None else BrokerAddress.of(registration, listener)
        out.append(
            BrokerOut(
                id=broker_id,
                registered=registration is not None,
                host=None if address is None else address.host,
                port=None if address is None else address.port,
                listener=None if address is None else address.listener,
                listener_note=None if address is None else address.listener_note,
                rack=None if registration is None else registration.rack,
                endpoints=[] if address is None else address.endpoints,
                replicas=replicas[broker_id],
                leaders=leaders[broker_id],
                preferred_partitions=0 if imbalance is None else imbalance.preferred_partitions,
                led_by_others=0 if imbalance is None else imbalance.led_by_others,
                imbalance_ratio=0.0 if imbalance is None else imbalance.ratio,
                controller=snapshot.controller.broker_id == broker_id,
                scrape=None
                if scrape is None
                else BrokerScrapeOut(
                    url=scrape.url,
                    ok=scrape.ok,
                    error=scrape.error,
                    scraped_at=scrape.scraped_at,
                    metrics=dict(scrape.values),
                ),
            )
        )
    return out


@router.get("/brokers", response_model=list[BrokerOut])
def brokers(_: Viewer, view: View) -> list[BrokerOut]:
    """Registered brokers and brokers that hold replicas but are not registered (``registered: false``)."""
    return _brokers(view.state, view.listener)


@router.get(
    "/brokers/{broker_id}",
    response_model=BrokerOut,
    responses={404: {"model": Problem}},
)
def broker(broker_id: BrokerIdPath, _: Viewer, view: View) -> BrokerOut:
    for item in _brokers(view.state, view.listener):
        if item.id == broker_id:
            return item
    raise HTTPException(404, f"broker {broker_id} is neither registered nor assigned any replica")


def partition_out(info: PartitionInfo, health: PartitionHealth, settings: PartitionSettings) -> PartitionOut:
    """:func:`collectors.health.partition_json`, the JSON ``describe`` prints too, in the API's model
    (which leaves out ``zk_version``)."""
    return PartitionOut.model_validate(partition_json(info, health, settings))


def _partition_out(state: ClusterState, tp: TopicPartition) -> PartitionOut:
    info = state.snapshot.partitions[tp]
    return partition_out(
        info, state.report.partitions[tp], partition_settings(state.report, state.snapshot, info)
    )


def _topic_partitions(state: ClusterState, topic: str) -> list[TopicPartition]:
    return sorted(tp for tp in state.snapshot.partitions if tp.topic == topic)


def _topic_out(state: ClusterState, name: str, tps: list[TopicPartition]) -> TopicOut:
    snapshot, report = state.snapshot, state.report
    info = snapshot.topics.get(name)
    healths = [report.partitions[tp] for tp in tps]
    rf = len(snapshot.partitions[tps[0]].assignment.target_replicas) if tps else 0
    return TopicOut(
        name=name,
        topic_id=None if info is None else info.topic_id,
        partitions=len(tps),
        replication_factor=rf,
        config={} if info is None else dict(info.config),
        marked_for_deletion=False if info is None else info.marked_for_deletion,
        under_replicated=sum(h.under_replicated for h in healths),
        under_min_isr=sum(h.under_min_isr for h in healths),
        offline=sum(h.offline for h in healths),
        unknown=sum(h.state_unknown for h in healths),
    )


@router.get("/topics", response_model=list[TopicOut])
def topics(_: Viewer, view: View) -> list[TopicOut]:
    state = view.state
    by_topic: dict[str, list[TopicPartition]] = {name: [] for name in state.snapshot.topics}
    for tp in state.snapshot.partitions:
        by_topic.setdefault(tp.topic, []).append(tp)
    return [_topic_out(state, name, sorted(tps)) for name, tps in sorted(by_topic.items())]


@router.get(
    "/topics/{name}",
    response_model=TopicDetail,
    responses={404: {"model": Problem}},
)
def topic(name: str, _: Viewer, view: View) -> TopicDetail:
    state = view.state
    tps = _topic_partitions(state, name)
    if not tps and name not in state.snapshot.topics:
        raise HTTPException(404, f"unknown topic {name!r}")
    summary = _topic_out(state, name, tps)
    details = [_partition_out(state, tp) for tp in tps]
    return TopicDetail(**summary.model_dump(), partition_details=details)


@router.get(
    "/partitions",
    response_model=Page[PartitionOut],
    responses={404: {"model": Problem}},
)
def partitions(
    _: Viewer,
    view: View,
    under_replicated: QueryBool = None,
    under_min_isr: QueryBool = None,
    at_min_isr: QueryBool = None,
    offline: QueryBool = None,
    state_unknown: QueryBool = None,
    non_preferred: QueryBool = None,
    topic: str | None = None,
    broker: BrokerIdQuery = None,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 500,
) -> Page[PartitionOut]:
    """Partitions in (topic, partition) order; every filter given must hold (``broker``: a replica on it)."""
    state = view.state
    if topic is not None and topic not in state.snapshot.topics and not _topic_partitions(state, topic):
        raise HTTPException(404, f"unknown topic {topic!r}")
    flags = {
        "under_replicated": under_replicated,
        "under_min_isr": under_min_isr,
        "at_min_isr": at_min_isr,
        "offline": offline,
        "state_unknown": state_unknown,
    }
    wanted = {k: v for k, v in flags.items() if v is not None}
    matched = _matching(state, wanted, non_preferred, topic, broker)
    page = matched[offset : offset + limit]
    return Page[PartitionOut](
        items=[_partition_out(state, tp) for tp in page],
        total=len(matched),
        offset=offset,
        limit=limit,
    )


def _matching(
    state: ClusterState,
    wanted: dict[str, bool],
    non_preferred: bool | None,
    topic: str | None,
    broker: int | None,
) -> list[TopicPartition]:
    """The partitions (sorted) whose health has every ``wanted`` flag, of ``topic``, with a replica on
    ``broker``, and led (``non_preferred=False``) or not (``True``) by their preferred replica."""
    snapshot, report = state.snapshot, state.report
    candidates: Iterable[TopicPartition] = snapshot.partitions
    if topic is not None:
        candidates = _topic_partitions(state, topic)
    matched = []
    for tp in sorted(candidates):
        info = snapshot.partitions[tp]
        if broker is not None and broker not in info.assignment.replicas:
            continue
        health = report.partitions[tp]
        if any(getattr(health, k) != v for k, v in wanted.items()):
            continue
        if (
            non_preferred is not None
            and (not health.preferred_leader and not health.offline and not health.state_unknown)
            != non_preferred
        ):
            continue
        matched.append(tp)
    return matched
