"""The live cluster: ``/cluster``, ``/brokers``, ``/topics``, ``/partitions``."""

from __future__ import annotations

from pydantic import BaseModel

from app.service.schemas.migration import MigrationOut


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
    kraft: bool = False
    """A KRaft controller holds ``/controller`` (ZK→KRaft migration): ``broker_id`` is its node id."""
    kraft_controller_epoch: int | None = None


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
    migration: MigrationOut
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
