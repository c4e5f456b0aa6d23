"""The read side of the REST API under ``/api/v1`` (viewer role), plus ``/healthz`` and ``/readyz``.

Cluster, broker, topic and partition routes answer from the live snapshot (:class:`ClusterView`, no I/O
per request); load and alert routes read the analytics store.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from analytics.model import AlertEvent, AlertState, LoadWindow
from analytics.store import Acknowledgement, Store
from app.actions.state import AuditEntry
from app.service import schemas
from app.service.auth import Principal, Role
from app.service.deps import require, store_of, view_of
from app.service.state import ClusterState, ClusterView
from collectors.health import PartitionHealth
from collectors.kafka.model import NO_LEADER, PartitionInfo, TopicPartition

root = APIRouter()
api = APIRouter(prefix="/api/v1")

MAX_PAGE = 10_000

Viewer = Annotated[Principal, Depends(require(Role.viewer))]
Operator = Annotated[Principal, Depends(require(Role.operator))]
View = Annotated[ClusterView, Depends(view_of)]
StoreDep = Annotated[Store, Depends(store_of)]


# --- probes ----------------------------------------------------------------------------------------------


@root.get("/healthz", response_model=schemas.Healthz, tags=["probes"])
def healthz() -> schemas.Healthz:
    """The process is up (liveness)."""
    return schemas.Healthz(status="ok")


@root.get(
    "/readyz",
    response_model=schemas.Readyz,
    responses={503: {"model": schemas.Readyz}},
    tags=["probes"],
)
def readyz(view: View, response: Response) -> schemas.Readyz:
    """Ready when the snapshot is in sync with ZooKeeper (or recent); 503 with the reason otherwise."""
    ready, reason = view.readiness()
    if not ready:
        response.status_code = 503
    return schemas.Readyz(ready=ready, reason=reason)


@root.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
    tags=["probes"],
)
def metrics(request: Request, view: View) -> PlainTextResponse:
    """``kafka_health_*`` in Prometheus text format, rendered at scrape time (no token needed)."""
    from app.service.exposition import render

    body = render(view, request.app.state.store, request.app.state.webhooks, request.app.state.actions)
    return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)


# --- cluster ---------------------------------------------------------------------------------------------


MAX_SUSPECTS = 20


@api.get("/cluster", response_model=schemas.ClusterOut, tags=["cluster"])
def cluster(view: View, _: Viewer) -> JSONResponse:
    """The cluster's state and health summary (cached per snapshot version and scrape)."""
    body: dict[str, Any] = view.memo("cluster", lambda state: _cluster(view, state).model_dump(mode="json"))
    state = view.state
    snapshot = dict(body["snapshot"])
    snapshot["last_good_at"] = state.last_good_at
    snapshot["age_s"] = None if state.last_good_at is None else max(0.0, time.time() - state.last_good_at)
    return JSONResponse({**body, "snapshot": snapshot})


def _cluster(view: ClusterView, state: ClusterState) -> schemas.ClusterOut:
    snapshot, report = state.snapshot, state.report
    summary = report.summary
    scan = view.collector.last_scan
    cross = report.urp_cross_check
    return schemas.ClusterOut(
        cluster_id=snapshot.cluster_id,
        snapshot=schemas.SnapshotInfo(
            version=snapshot.version,
            taken_at=snapshot.taken_at,
            last_good_at=state.last_good_at,
            age_s=None if state.last_good_at is None else max(0.0, time.time() - state.last_good_at),
            stale=snapshot.stale,
            scan_seconds=None if scan is None else scan.seconds,
            scan_reads=None if scan is None else scan.reads,
        ),
        controller=schemas.ControllerOut(
            broker_id=snapshot.controller.broker_id,
            epoch=snapshot.controller.epoch,
            active=report.controller.active,
        ),
        summary=schemas.Summary(
            brokers=summary.brokers,
            topics=summary.topics,
            partitions=summary.partitions,
            under_replicated=summary.under_replicated,
            under_min_isr=summary.under_min_isr,
            at_min_isr=summary.at_min_isr,
            offline=summary.offline,
            preferred_replica_imbalance=summary.preferred_replica_imbalance,
            brokers_down=list(summary.brokers_down),
        ),
        suspect_brokers=[
            schemas.SuspectOut(broker_id=s.broker_id, missing_from=s.missing_from, share=s.share)
            for s in sorted(report.suspects, key=lambda s: (-s.share, s.broker_id))[:MAX_SUSPECTS]
        ],
        suspect_brokers_total=len(report.suspects),
        urp_cross_check=None
        if cross is None
        else schemas.UrpCrossCheckOut(
            zookeeper=cross.zookeeper,
            gauges=cross.gauges,
            reporting=list(cross.reporting),
            missing=list(cross.missing),
            agrees=cross.agrees,
            offline_not_counted=cross.offline_not_counted,
        ),
        pending=schemas.PendingOut(
            preferred_election=[
                schemas.PendingPartition(topic=tp.topic, partition=tp.partition)
                for tp in snapshot.pending.preferred_election
            ],
            reassignments=[
                schemas.PendingReassignment(topic=tp.topic, partition=tp.partition, replicas=list(r))
                for tp, r in sorted(snapshot.pending.reassignments.items())
            ],
            deletions=list(snapshot.pending.deletions),
        ),
        errors=[schemas.ZnodeErrorOut(path=e.path, reason=e.reason) for e in snapshot.errors],
    )


# --- brokers ---------------------------------------------------------------------------------------------


def _brokers(state: ClusterState) -> list[schemas.BrokerOut]:
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
        out.append(
            schemas.BrokerOut(
                id=broker_id,
                registered=registration is not None,
                host=None if registration is None else registration.host,
                port=None if registration is None else registration.port,
                rack=None if registration is None else registration.rack,
                endpoints=[]
                if registration is None
                else [e.connection_string() for e in registration.endpoints],
                replicas=replicas[broker_id],
                leaders=leaders[broker_id],
                preferred_partitions=0 if imbalance is None else imbalance.preferred_partitions,
                led_by_others=0 if imbalance is None else imbalance.led_by_others,
                imbalance_ratio=0.0 if imbalance is None else imbalance.ratio,
                controller=snapshot.controller.broker_id == broker_id,
                scrape=None
                if scrape is None
                else schemas.BrokerScrapeOut(
                    url=scrape.url,
                    ok=scrape.ok,
                    error=scrape.error,
                    scraped_at=scrape.scraped_at,
                    metrics=dict(scrape.values),
                ),
            )
        )
    return out


@api.get("/brokers", response_model=list[schemas.BrokerOut], tags=["cluster"])
def brokers(view: View, _: Viewer) -> list[schemas.BrokerOut]:
    """Registered brokers and brokers that hold replicas but are not registered (``registered: false``)."""
    return _brokers(view.state)


@api.get(
    "/brokers/{broker_id}",
    response_model=schemas.BrokerOut,
    responses={404: {"model": schemas.Problem}},
    tags=["cluster"],
)
def broker(broker_id: int, view: View, _: Viewer) -> schemas.BrokerOut:
    for item in _brokers(view.state):
        if item.id == broker_id:
            return item
    raise HTTPException(404, f"broker {broker_id} is neither registered nor assigned any replica")


# --- topics and partitions -------------------------------------------------------------------------------


def partition_out(info: PartitionInfo, health: PartitionHealth) -> schemas.PartitionOut:
    state = info.state
    return schemas.PartitionOut(
        topic=info.tp.topic,
        partition=info.tp.partition,
        replicas=list(info.assignment.replicas),
        isr=list(info.isr),
        leader=info.leader,
        leader_epoch=None if state is None else state.leader_epoch,
        controller_epoch=None if state is None else state.controller_epoch,
        leader_recovery_state=None if state is None else state.leader_recovery_state,
        adding_replicas=list(info.assignment.adding_replicas),
        removing_replicas=list(info.assignment.removing_replicas),
        under_replicated=health.under_replicated,
        under_min_isr=health.under_min_isr,
        at_min_isr=health.at_min_isr,
        offline=health.offline,
        preferred_leader=health.preferred_leader,
        min_isr=health.min_isr,
    )


def _topic_partitions(state: ClusterState, topic: str) -> list[TopicPartition]:
    return sorted(tp for tp in state.snapshot.partitions if tp.topic == topic)


def _topic_out(state: ClusterState, name: str, tps: list[TopicPartition]) -> schemas.TopicOut:
    snapshot, report = state.snapshot, state.report
    info = snapshot.topics.get(name)
    healths = [report.partitions[tp] for tp in tps]
    rf = len(snapshot.partitions[tps[0]].assignment.target_replicas) if tps else 0
    return schemas.TopicOut(
        name=name,
        topic_id=None if info is None else info.topic_id,
        partitions=len(tps),
        replication_factor=rf,
        config={} if info is None else dict(info.config),
        marked_for_deletion=False if info is None else info.marked_for_deletion,
        under_replicated=sum(h.under_replicated for h in healths),
        under_min_isr=sum(h.under_min_isr for h in healths),
        offline=sum(h.offline for h in healths),
    )


@api.get("/topics", response_model=list[schemas.TopicOut], tags=["cluster"])
def topics(view: View, _: Viewer) -> list[schemas.TopicOut]:
    state = view.state
    by_topic: dict[str, list[TopicPartition]] = {name: [] for name in state.snapshot.topics}
    for tp in state.snapshot.partitions:
        by_topic.setdefault(tp.topic, []).append(tp)
    return [_topic_out(state, name, sorted(tps)) for name, tps in sorted(by_topic.items())]


@api.get(
    "/topics/{name}",
    response_model=schemas.TopicDetail,
    responses={404: {"model": schemas.Problem}},
    tags=["cluster"],
)
def topic(name: str, view: View, _: Viewer) -> schemas.TopicDetail:
    state = view.state
    tps = _topic_partitions(state, name)
    if not tps and name not in state.snapshot.topics:
        raise HTTPException(404, f"unknown topic {name!r}")
    summary = _topic_out(state, name, tps)
    details = [partition_out(state.snapshot.partitions[tp], state.report.partitions[tp]) for tp in tps]
    return schemas.TopicDetail(**summary.model_dump(), partition_details=details)


@api.get(
    "/partitions",
    response_model=schemas.Page[schemas.PartitionOut],
    responses={404: {"model": schemas.Problem}},
    tags=["cluster"],
)
def partitions(
    view: View,
    _: Viewer,
    under_replicated: bool | None = None,
    under_min_isr: bool | None = None,
    at_min_isr: bool | None = None,
    offline: bool | None = None,
    non_preferred: bool | None = None,
    topic: str | None = None,
    broker: int | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 500,
) -> schemas.Page[schemas.PartitionOut]:
    """Partitions in (topic, partition) order; every filter given must hold (``broker``: a replica on it)."""
    state = view.state
    snapshot, report = state.snapshot, state.report
    if topic is not None and topic not in snapshot.topics and not _topic_partitions(state, topic):
        raise HTTPException(404, f"unknown topic {topic!r}")
    flags = {
        "under_replicated": under_replicated,
        "under_min_isr": under_min_isr,
        "at_min_isr": at_min_isr,
        "offline": offline,
    }
    wanted = {k: v for k, v in flags.items() if v is not None}
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
            and (not health.preferred_leader and not health.offline) != non_preferred
        ):
            continue
        matched.append(tp)
    page = matched[offset : offset + limit]
    return schemas.Page[schemas.PartitionOut](
        items=[partition_out(snapshot.partitions[tp], report.partitions[tp]) for tp in page],
        total=len(matched),
        offset=offset,
        limit=limit,
    )


# --- load ------------------------------------------------------------------------------------------------


def _load_out(window: LoadWindow) -> schemas.LoadWindowOut:
    return schemas.LoadWindowOut(
        cluster=window.window.cluster,
        window_start=window.window.start,
        window_end=window.window.end,
        stddev=window.stddev,
        stddev_threshold=window.stddev_threshold,
        rated_deviation=window.rated_deviation,
        imbalanced=window.imbalanced,
        brokers=[
            schemas.BrokerLoadOut(
                broker=b.broker,
                normalized_load=b.normalized_load,
                deviation_rate=b.deviation_rate,
                weighted_load=b.weighted_load,
                shares=dict(b.shares),
                metrics=dict(b.metrics),
            )
            for b in window.brokers
        ],
    )


def _cluster_key(view: ClusterView, store: Store, cluster: str | None) -> str | None:
    """The store's name for the cluster: the given one, this snapshot's cluster id, or the only one."""
    if cluster is not None:
        return cluster
    known = store.clusters()
    own = view.state.snapshot.cluster_id
    if own is not None and own in known:
        return own
    return known[0] if len(known) == 1 else own


@api.get("/load", response_model=schemas.LoadOut, tags=["load"])
def load(
    view: View,
    store: StoreDep,
    _: Viewer,
    since: float | None = None,
    cluster: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
) -> schemas.LoadOut:
    """The latest load window (Db, r_n and D per metric per broker, σ and its threshold) and, with
    ``since`` (epoch seconds), the windows from then on."""
    key = _cluster_key(view, store, cluster)
    if key is None:
        return schemas.LoadOut(latest=None, history=[])
    latest = store.latest_load(key)
    history = [] if since is None else store.load_history(key, since=since, limit=limit)
    return schemas.LoadOut(
        latest=None if latest is None else _load_out(latest), history=[_load_out(w) for w in history]
    )


# --- alerts ----------------------------------------------------------------------------------------------


def _alert_out(alert: AlertState, ack: Acknowledgement | None) -> dict[str, Any]:
    return {
        "fingerprint": alert.fingerprint,
        "cluster": alert.cluster,
        "rule": alert.rule,
        "subject": alert.subject,
        "severity": alert.severity,
        "state": alert.state,
        "summary": alert.summary,
        "evidence": dict(alert.evidence),
        "suggested_action": None if alert.action is None else alert.action.to_json(),
        "first_seen": alert.first_seen,
        "last_seen": alert.last_seen,
        "opened_at": alert.opened_at,
        "resolved_at": alert.resolved_at,
        "acknowledged_by": None if ack is None else ack.by,
        "acknowledged_at": None if ack is None else ack.at,
    }


def _event_out(event: AlertEvent) -> schemas.AlertEventOut:
    return schemas.AlertEventOut(
        sequence=event.sequence,
        kind=event.kind,
        at=event.at,
        severity=event.severity,
        summary=event.summary,
        evidence=dict(event.evidence),
    )


@api.get("/alerts", response_model=schemas.Page[schemas.AlertOut], tags=["alerts"])
def alerts(
    store: StoreDep,
    _: Viewer,
    state: Annotated[list[str] | None, Query(description="open, resolved")] = None,
    rule: Annotated[int | None, Query(ge=1, le=11)] = None,
    severity: Annotated[list[str] | None, Query(description="critical, warning, info")] = None,
    cluster: str | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> schemas.Page[schemas.AlertOut]:
    """Alerts that opened at least once (pending ones, still inside their hysteresis, are not shown)."""
    for value in state or []:
        if value not in ("open", "resolved"):
            raise HTTPException(422, f"state must be open or resolved, got {value!r}")
    for value in severity or []:
        if value not in ("critical", "warning", "info"):
            raise HTTPException(422, f"severity must be critical, warning or info, got {value!r}")
    found = [
        a
        for a in store.alerts(
            cluster=cluster, state=state or ("open", "resolved"), rule=rule, severity=severity, limit=100_000
        )
        if a.event_sequence > 0
    ]
    page = found[offset : offset + limit]
    acks = store.acknowledgements([a.fingerprint for a in page])
    return schemas.Page[schemas.AlertOut](
        items=[schemas.AlertOut(**_alert_out(a, acks.get(a.fingerprint))) for a in page],
        total=len(found),
        offset=offset,
        limit=limit,
    )


def _alert_or_404(store: Store, fingerprint: str) -> AlertState:
    alert = store.alert(fingerprint)
    if alert is None or alert.event_sequence == 0:
        raise HTTPException(404, f"no alert with fingerprint {fingerprint!r}")
    return alert


@api.get(
    "/alerts/{fingerprint}",
    response_model=schemas.AlertDetail,
    responses={404: {"model": schemas.Problem}},
    tags=["alerts"],
)
def alert(fingerprint: str, store: StoreDep, _: Viewer) -> schemas.AlertDetail:
    found = _alert_or_404(store, fingerprint)
    ack = store.acknowledgements([fingerprint]).get(fingerprint)
    events = [_event_out(e) for e in store.alert_events(fingerprint)]
    return schemas.AlertDetail(**_alert_out(found, ack), events=events)


@api.post(
    "/alerts/{fingerprint}/ack",
    response_model=schemas.AlertOut,
    responses={404: {"model": schemas.Problem}, 409: {"model": schemas.Problem}},
    tags=["alerts"],
)
def acknowledge(
    fingerprint: str, request: Request, store: StoreDep, who: Operator, body: schemas.AckIn | None = None
) -> schemas.AlertOut:
    """Acknowledge an open alert (operator); the acknowledgement lasts until the alert opens anew."""
    found = _alert_or_404(store, fingerprint)
    actions = request.app.state.actions
    if found.state != "open":
        actions.audit(
            AuditEntry(
                time.time(), who.name, who.role.name, "ack", False, "refused", None, {"alert": fingerprint}
            )
        )
        raise HTTPException(
            409, f"alert {fingerprint} is {found.state}, only an open alert can be acknowledged"
        )
    store.acknowledge(fingerprint, who.name, time.time())
    comment = None if body is None else body.comment
    actions.audit(
        AuditEntry(
            time.time(), who.name, who.role.name, "ack", False, "accepted", None,
            {"alert": fingerprint, "comment": comment},
        )
    )  # fmt: skip
    ack = store.acknowledgements([fingerprint]).get(fingerprint)
    return schemas.AlertOut(**_alert_out(found, ack))
