"""The live cluster: ``/cluster``, ``/brokers``, ``/topics``, ``/partitions``."""

from __future__ import annotations

from pydantic import BaseModel

from app.service.schemas.migration import MigrationOut
from collectors.health import HealthSummary
from collectors.kafka.effective import ConfigSource
from collectors.kafka.model import BrokerEndpoint, BrokerRegistration


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
    unknown: int = 0
    """Partitions whose state znode could not be read or parsed (counted in none of the above)."""

    @classmethod
    def of(cls, summary: HealthSummary) -> Summary:
        return cls(
            brokers=summary.brokers,
            topics=summary.topics,
            partitions=summary.partitions,
            under_replicated=summary.under_replicated,
            under_min_isr=summary.under_min_isr,
            at_min_isr=summary.at_min_isr,
            offline=summary.offline,
            preferred_replica_imbalance=summary.preferred_replica_imbalance,
            brokers_down=list(summary.brokers_down),
            unknown=summary.unknown,
        )


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


class StaticDefaultsOut(BaseModel):
    min_insync_replicas: int | None
    unclean_leader_election_enable: bool | None


class EffectiveSettingsOut(BaseModel):
    """How the partitions' ``min_isr`` and ``unclean_leader_election`` were resolved (docs/collectors.md)."""

    static_defaults: StaticDefaultsOut
    """What the service was told ``server.properties`` says (``service.view.default_*``); null: not given."""
    unreadable: list[ZnodeErrorOut]
    """Config znodes that could not be read: the values that depend on them have the source ``unknown``."""
    partitions_with_unknown_min_isr: int
    partitions_with_unknown_unclean_leader_election: int


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
    effective_settings: EffectiveSettingsOut


class BrokerScrapeOut(BaseModel):
    url: str | None
    ok: bool
    error: str | None
    scraped_at: float
    metrics: dict[str, float]


class EndpointOut(BaseModel):
    """One advertised listener of a broker registration (``endpoints`` and
    ``listener_security_protocol_map`` of ``/brokers/ids/<id>``)."""

    listener: str
    security_protocol: str
    host: str
    port: int

    @staticmethod
    def of(endpoint: BrokerEndpoint) -> EndpointOut:
        return EndpointOut(
            listener=endpoint.listener,
            security_protocol=endpoint.security_protocol,
            host=endpoint.host,
            port=endpoint.port,
        )


class BrokerAddress(BaseModel):
    """The address shown for a broker and put in the metrics URL template's ``{host}``/``{port}``: the
    chosen listener's endpoint (``metrics.listener``), else the listener named PLAINTEXT, else the first."""

    host: str | None
    port: int | None
    listener: str | None
    """The listener the host and port come from; None when the broker has none to offer."""
    listener_note: str | None
    """Why ``host`` is null: the chosen listener is not one of this broker's."""
    endpoints: list[EndpointOut]

    @staticmethod
    def of(registration: BrokerRegistration, listener: str | None) -> BrokerAddress:
        endpoint = registration.endpoint(listener)
        note = None
        if endpoint is None and listener is not None:
            has = ", ".join(e.listener for e in registration.endpoints) or "none"
            note = f"broker {registration.id} has no listener {listener} (it has {has})"
        return BrokerAddress(
            host=None if endpoint is None else endpoint.host,
            port=None if endpoint is None else endpoint.port,
            listener=None if endpoint is None else endpoint.listener,
            listener_note=note,
            endpoints=[EndpointOut.of(e) for e in registration.endpoints],
        )


class BrokerOut(BaseModel):
    id: int
    registered: bool
    """False: the broker holds replicas but is not in ``/brokers/ids`` (down)."""
    host: str | None
    """The chosen listener's host (see ``listener``): not the registration's top-level ``host``, which is
    null on a broker without a PLAINTEXT listener."""
    port: int | None
    listener: str | None = None
    """The listener ``host`` and ``port`` come from (``metrics.listener``, else PLAINTEXT, else the first)."""
    listener_note: str | None = None
    """Set when the chosen listener is not one of this broker's (``host`` and ``port`` are then null)."""
    rack: str | None
    endpoints: list[EndpointOut]
    """Every advertised listener: name, security protocol, host and port."""
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
    """The ``min.insync.replicas`` the leader enforces (the value the flags above used)."""
    min_isr_source: ConfigSource
    """Where ``min_isr`` came from: ``topic``, ``broker`` (the leader's), ``cluster_default``,
    ``static_default``, ``kafka_default``; ``unknown`` when a level above it could not be read."""
    min_isr_assumed_from: ConfigSource | None
    """With ``unknown``: the level the value was taken from."""
    min_isr_unknown_reason: str | None
    """With ``unknown``: the znodes that could not be read, and why."""
    unclean_leader_election: bool
    """The ``unclean.leader.election.enable`` the controller applies to this partition."""
    unclean_leader_election_source: ConfigSource
    """Likewise (``broker``: the active controller's own config)."""
    unclean_leader_election_assumed_from: ConfigSource | None
    unclean_leader_election_unknown_reason: str | None
    state_unknown: bool = False
    """The state znode could not be read or parsed (listed in the cluster's ``errors``): leader, ISR and
    every health flag above are not known, not false."""


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
    unknown: int = 0
    """Partitions whose state znode could not be read or parsed."""


class TopicDetail(TopicOut):
    partition_details: list[PartitionOut]
