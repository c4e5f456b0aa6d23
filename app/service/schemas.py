"""Response models of the REST API (every route declares one; they are the OpenAPI schema at ``/docs``)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

T = TypeVar("T")


class Problem(BaseModel):
    """Every 4xx/5xx body: what went wrong, and for validation errors each problem found."""

    detail: str
    problems: list[dict[str, Any]] = Field(default_factory=list)


class Healthz(BaseModel):
    status: str


class Readyz(BaseModel):
    ready: bool
    reason: str


class SnapshotInfo(BaseModel):
    version: int
    taken_at: float
    last_good_at: float | None
    age_s: float | None
    stale: bool
    scan_seconds: float | None
    scan_reads: int | None


class ControllerOut(BaseModel):
    broker_id: int | None
    epoch: int | None
    active: bool


class Summary(BaseModel):
    brokers: int
    topics: int
    partitions: int
    under_replicated: int
    under_min_isr: int
    at_min_isr: int
    offline: int
    preferred_replica_imbalance: int
    brokers_down: list[int]


class SuspectOut(BaseModel):
    broker_id: int
    missing_from: int
    share: float


class UrpCrossCheckOut(BaseModel):
    zookeeper: int
    gauges: int
    reporting: list[int]
    missing: list[int]
    agrees: bool
    offline_not_counted: int


class PendingPartition(BaseModel):
    topic: str
    partition: int


class PendingReassignment(BaseModel):
    topic: str
    partition: int
    replicas: list[int]


class PendingOut(BaseModel):
    preferred_election: list[PendingPartition]
    reassignments: list[PendingReassignment]
    deletions: list[str]


class ZnodeErrorOut(BaseModel):
    path: str
    reason: str


class ClusterOut(BaseModel):
    cluster_id: str | None
    snapshot: SnapshotInfo
    controller: ControllerOut
    summary: Summary
    suspect_brokers: list[SuspectOut]
    """The 20 brokers missing from the most under-replicated partitions' ISRs (docs/kafka-reference.md §3)."""
    suspect_brokers_total: int
    urp_cross_check: UrpCrossCheckOut | None
    pending: PendingOut
    errors: list[ZnodeErrorOut]


class BrokerScrapeOut(BaseModel):
    url: str | None
    ok: bool
    error: str | None
    scraped_at: float
    metrics: dict[str, float]


class BrokerOut(BaseModel):
    id: int
    registered: bool
    """False: the broker holds replicas but is not in ``/brokers/ids`` (down)."""
    host: str | None
    port: int | None
    rack: str | None
    endpoints: list[str]
    replicas: int
    leaders: int
    preferred_partitions: int
    led_by_others: int
    imbalance_ratio: float
    controller: bool
    scrape: BrokerScrapeOut | None


class PartitionOut(BaseModel):
    topic: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int | None
    controller_epoch: int | None
    leader_recovery_state: int | None
    adding_replicas: list[int]
    removing_replicas: list[int]
    under_replicated: bool
    under_min_isr: bool
    at_min_isr: bool
    offline: bool
    preferred_leader: bool
    min_isr: int


class TopicOut(BaseModel):
    name: str
    topic_id: str | None
    partitions: int
    replication_factor: int
    config: dict[str, str]
    marked_for_deletion: bool
    under_replicated: int
    under_min_isr: int
    offline: int


class TopicDetail(TopicOut):
    partition_details: list[PartitionOut]


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


class BrokerLoadOut(BaseModel):
    broker: int
    normalized_load: float
    deviation_rate: float
    weighted_load: float
    shares: dict[str, float]
    metrics: dict[str, float]


class LoadWindowOut(BaseModel):
    cluster: str
    window_start: float
    window_end: float
    stddev: float
    stddev_threshold: float
    rated_deviation: float
    imbalanced: bool
    brokers: list[BrokerLoadOut]


class LoadOut(BaseModel):
    latest: LoadWindowOut | None
    history: list[LoadWindowOut]


class ActionOut(BaseModel):
    method: str
    path: str
    body: dict[str, Any]


class AlertOut(BaseModel):
    fingerprint: str
    cluster: str
    rule: int
    subject: str
    severity: str
    state: str
    summary: str
    evidence: dict[str, Any]
    suggested_action: ActionOut | None
    first_seen: float
    last_seen: float
    opened_at: float | None
    resolved_at: float | None
    acknowledged_by: str | None
    acknowledged_at: float | None


class AlertEventOut(BaseModel):
    sequence: int
    kind: str
    at: float
    severity: str
    summary: str
    evidence: dict[str, Any]


class AlertDetail(AlertOut):
    events: list[AlertEventOut]


class AckIn(BaseModel):
    comment: str | None = Field(default=None, max_length=1000)
