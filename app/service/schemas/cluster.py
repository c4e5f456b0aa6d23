"""The live cluster: ``/cluster``, ``/brokers``, ``/topics``, ``/partitions``."""

from __future__ import annotations

from pydantic import BaseModel

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
