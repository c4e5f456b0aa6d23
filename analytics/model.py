"""The analytics layer's shared types: what the Spark job hands to the alert rules, what the rules find,
and what the store keeps.

Everything here is plain, immutable data. The health document a collector writes into each ``cluster``
sample (see :func:`collectors.samples.health_document`) is parsed into :class:`HealthState` by
:meth:`HealthState.from_json`, which raises :class:`MalformedSampleError` naming the bad field, so the job
can report a bad sample and go on.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["critical", "warning", "info"]
AlertStateName = Literal["pending", "open", "resolved"]
"""``pending``: the rule fired, but not yet for ``open_after`` windows (not shown as an alert)."""
EventKind = Literal["opened", "updated", "resolved"]

SEVERITY_ORDER: Mapping[str, int] = {"info": 0, "warning": 1, "critical": 2}


class MalformedSampleError(ValueError):
    """A sample or health document that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """An event-time window of one cluster's samples: ``[start, end)`` in epoch seconds."""

    cluster: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class PartitionSet:
    """A set of partitions with a health problem, as the collector reported it: the exact count, the
    count per topic, and up to a few partition numbers per topic as examples (lists are capped so that a
    sample stays small when a whole cluster is down)."""

    count: int = 0
    by_topic: Mapping[str, int] = field(default_factory=dict)
    examples: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Suspect:
    broker_id: int
    missing_from: int
    share: float


@dataclass(frozen=True, slots=True)
class LeaderImbalance:
    broker_id: int
    preferred_partitions: int
    led_by_others: int
    ratio: float
    """Kafka's auto-rebalance ratio: led_by_others / preferred_partitions."""


PartitionName = tuple[str, int]
"""(topic, partition): a partition as the rules name it (``orders-3`` in a summary)."""


@dataclass(frozen=True, slots=True)
class LogDirUsage:
    """One log dir of a broker as rule 14 reads it (``collectors.disks.LogDirDisk``)."""

    mountpoint: str
    size_bytes: float
    avail_bytes: float
    used_ratio: float
    growth_bytes_per_s: float | None
    """Used bytes per second over the disk fit window; None with too few samples."""
    full_in_s: float | None
    """Seconds until full at that growth; None when not growing."""
    top_topics: tuple[tuple[str, float], ...] = ()
    """(topic, bytes/s) of the broker's topics growing fastest, fastest first."""


@dataclass(frozen=True, slots=True)
class BrokerResources:
    """One broker's resources and ISR churn, as the incident lane sees them (rules 14-18): its log dirs,
    failed log dirs, saturation gauges, file descriptors and the ISR changes of its replicas. A figure the
    broker does not serve (or a broker not scraped) is None and its rule says nothing about it."""

    broker_id: int
    log_dirs: tuple[LogDirUsage, ...] = ()
    offline_log_dirs: int | None = None
    """Kafka's ``OfflineLogDirectoryCount`` gauge; None when the broker's dialect has none (Bitnami's)."""
    log_dir_failures: int = 0
    """Log dir failures the broker announced in ``/log_dir_event_notification`` since it registered
    (counted by the lane, which sees every snapshot: the controller deletes each notice once handled)."""
    out_of_isr: tuple[PartitionName, ...] = ()
    """Partitions with a replica on this (registered) broker that is not in their ISR, sorted (filled
    for a broker with a failed log dir: its replicas there left the ISRs)."""
    request_handler_idle: float | None = None
    """``RequestHandlerAvgIdlePercent``, a fraction in [0, 1]."""
    network_processor_idle: float | None = None
    """``NetworkProcessorAvgIdlePercent``, a fraction in [0, 1]."""
    open_fds: float | None = None
    max_fds: float | None = None
    isr_changes: tuple[tuple[PartitionName, int], ...] = ()
    """Per partition, how many times this broker's replica left or rejoined its ISR within the flap
    window (seen in the snapshots, exact), most changes first."""
    isr_shrinks_per_s: float | None = None
    """The broker's own ``IsrShrinksPerSec`` (as a leader: ISRs it shrank), evidence for rule 18."""
    isr_expands_per_s: float | None = None

    @property
    def failed_log_dirs(self) -> int:
        """Offline log dirs: the gauge, or the failures announced when it says fewer (it is scraped every
        ``metrics_interval_s``; a notice is seen within a second) or is not served."""
        return max(self.offline_log_dirs or 0, self.log_dir_failures)

    @property
    def flap_changes(self) -> int:
        """The most ISR changes of any one of its replicas within the flap window."""
        return max((n for _, n in self.isr_changes), default=0)


@dataclass(frozen=True, slots=True)
class Lagging:
    """Per topic, per broker, how many of the topic's partitions with a problem (offline, under-replicated,
    under min ISR) have a replica on that broker outside their ISR: what links a rule-1/2/3 page to its
    cause on that broker (item 5 of issue 24)."""

    offline: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    under_replicated: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    under_min_isr: Mapping[str, Mapping[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HealthState:
    """One cluster's health as one collector saw it at ``timestamp`` (a window's latest cluster sample)."""

    cluster: str
    collector_id: str
    timestamp: float
    snapshot_version: int
    taken_at: float
    last_good_at: float
    stale: bool
    controller_id: int | None
    controller_epoch: int | None
    active_controller_gauges: float | None
    """Σ of the brokers' ActiveControllerCount gauges; None when no broker was scraped."""
    brokers: tuple[int, ...]
    brokers_down: tuple[int, ...]
    """Brokers that hold replicas but are not registered in ZooKeeper."""
    partitions: int
    offline: PartitionSet
    under_replicated: PartitionSet
    under_min_isr: PartitionSet
    at_min_isr: PartitionSet
    suspects: tuple[Suspect, ...]
    imbalance: tuple[LeaderImbalance, ...]
    urp_gauges: float | None
    """Σ of the brokers' UnderReplicatedPartitions gauges; None when no broker was scraped."""
    urp_zookeeper: int | None
    """The URPs that have a live leader per ZooKeeper: what the gauges should add up to (only a leader
    counts its partition); None when no broker was scraped."""
    urp_gauges_missing: tuple[int, ...]
    """Registered brokers whose gauge could not be read (their share of the sum is unknown)."""
    scrape_errors: Mapping[int, str]
    offline_electable: PartitionSet = field(default_factory=PartitionSet)
    """The offline partitions a registered in-sync replica can lead: the controller is moving or will move
    their leadership (absent from documents written before it existed: none)."""
    controller_kraft_epoch: int | None = None
    """``kraftControllerEpoch`` of ``/controller``: >= 0 while a KRaft controller holds it (ZK→KRaft
    migration); -1 or None (Kafka before 3.4, or documents written before it existed) for a ZK controller."""
    unknown: PartitionSet = field(default_factory=PartitionSet)
    """Partitions whose state znode the collector could not read or parse: neither offline nor healthy
    (rule 13; absent from documents written before it existed: none)."""
    lagging: Lagging = field(default_factory=Lagging)
    """Per topic and broker, the problem partitions missing that broker's replica from their ISR (absent
    from documents written before it existed: none)."""

    @property
    def controller_is_kraft(self) -> bool:
        return self.controller_kraft_epoch is not None and self.controller_kraft_epoch >= 0

    @staticmethod
    def from_json(doc: Any, *, cluster: str, collector_id: str, timestamp: float) -> HealthState:
        """Parse a collector's health document; raises MalformedSampleError naming the bad field."""
        return _parse_health(doc, cluster, collector_id, timestamp)


@dataclass(frozen=True, slots=True)
class ActionRef:
    """The runbook action that would help, as the API call an operator would make (dry run first)."""

    method: Literal["GET", "POST"]
    path: str
    body: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "body": dict(self.body)}


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule firing for one subject in one window."""

    rule: int
    subject: str
    """What the alert is about, e.g. ``topic:orders``, ``broker:3``, ``cluster``, ``controller``."""
    severity: Severity
    summary: str
    evidence: Mapping[str, Any]
    """JSON-serialisable facts behind the finding."""
    action: ActionRef | None = None
    for_s: float | None = None
    """How long this finding's condition must hold before its alert opens, when the rule asks for other
    than its ``for`` (the incident lane's lifecycle; e.g. rule 1 waits for the controller's election)."""


def fingerprint(cluster: str, rule: int, subject: str) -> str:
    """Stable alert identity: 16 hex digits of SHA-256 over (cluster, rule, subject)."""
    return hashlib.sha256(f"{cluster}\x00{rule}\x00{subject}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class AlertState:
    """An alert's lifecycle row (also the hysteresis counters while pending or resolving)."""

    fingerprint: str
    cluster: str
    rule: int
    subject: str
    severity: Severity
    state: AlertStateName
    summary: str
    evidence: Mapping[str, Any]
    action: ActionRef | None
    hits: int
    """Consecutive evaluated windows in which the rule fired for this subject."""
    clean: int
    """Consecutive evaluated windows in which it did not (counts towards ``resolve_after``)."""
    first_seen: float
    """Start of the first window of the current run of hits."""
    last_seen: float
    """End of the last window in which it fired."""
    opened_at: float | None
    resolved_at: float | None
    last_window_end: float
    """End of the last window this alert was evaluated in (replays of older windows change nothing)."""
    event_sequence: int
    """Sequence number of the last event written for this fingerprint (0: none yet)."""


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """Append-only: one row per lifecycle change; ``(fingerprint, sequence)`` is unique."""

    fingerprint: str
    sequence: int
    kind: EventKind
    at: float
    """End of the window that caused it (event time, so replays produce the same row)."""
    severity: Severity
    summary: str
    evidence: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """One broker's row of a load window."""

    broker: int
    metrics: Mapping[str, float]
    """Window averages of the raw metrics."""
    shares: Mapping[str, float]
    """D_m per metric."""
    weighted_load: float
    normalized_load: float
    deviation_rate: float


@dataclass(frozen=True, slots=True)
class LoadWindow:
    """The load model's result for one cluster and window."""

    window: Window
    brokers: tuple[BrokerLoad, ...]
    stddev: float
    stddev_threshold: float
    rated_deviation: float

    @property
    def imbalanced(self) -> bool:
        return self.stddev > self.stddev_threshold


# --- parsing the health document ------------------------------------------------------------------------


def _get(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise MalformedSampleError(f"health document: {where}{key} is missing")
    return doc[key]


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedSampleError(f"health document: {name} must be an integer, got {value!r}")
    return value


def _opt_int(value: Any, name: str) -> int | None:
    return None if value is None else _int(value, name)


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MalformedSampleError(f"health document: {name} must be a finite number, got {value!r}")
    return float(value)


def _opt_float(value: Any, name: str) -> float | None:
    return None if value is None else _float(value, name)


def _ints(value: Any, name: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise MalformedSampleError(f"health document: {name} must be a list, got {value!r}")
    return tuple(_int(v, name) for v in value)


def _partition_set(value: Any, name: str) -> PartitionSet:
    if not isinstance(value, Mapping):
        raise MalformedSampleError(f"health document: {name} must be an object, got {value!r}")
    by_topic = value.get("by_topic", {})
    examples = value.get("examples", {})
    if not isinstance(by_topic, Mapping) or not isinstance(examples, Mapping):
        raise MalformedSampleError(f"health document: {name}.by_topic/examples must be objects")
    return PartitionSet(
        count=_int(_get(value, "count", f"{name}."), f"{name}.count"),
        by_topic={str(t): _int(c, f"{name}.by_topic.{t}") for t, c in by_topic.items()},
        examples={str(t): _ints(p, f"{name}.examples.{t}") for t, p in examples.items()},
    )


def _objects(value: Any, name: str) -> Sequence[Mapping[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise MalformedSampleError(f"health document: {name} must be a list of objects")
    return value


def _broker_id(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise MalformedSampleError(f"health document: {name}: {value!r} is not a broker id") from None


def _lagging(value: Any, name: str) -> Lagging:
    if not isinstance(value, Mapping):
        raise MalformedSampleError(f"health document: {name} must be an object, got {value!r}")
    kinds: dict[str, dict[str, dict[int, int]]] = {}
    for kind in ("offline", "under_replicated", "under_min_isr"):
        topics = value.get(kind, {})
        if not isinstance(topics, Mapping) or not all(isinstance(b, Mapping) for b in topics.values()):
            raise MalformedSampleError(f"health document: {name}.{kind} must map topics to objects")
        kinds[kind] = {
            str(topic): {
                _broker_id(b, f"{name}.{kind}.{topic}"): _int(n, f"{name}.{kind}.{topic}")
                for b, n in brokers.items()
            }
            for topic, brokers in topics.items()
        }
    return Lagging(**kinds)


def _parse_health(doc: Any, cluster: str, collector_id: str, timestamp: float) -> HealthState:
    if not isinstance(doc, Mapping):
        raise MalformedSampleError(f"health document must be a JSON object, got {type(doc).__name__}")
    snapshot = _get(doc, "snapshot", "")
    controller = _get(doc, "controller", "")
    if not isinstance(snapshot, Mapping) or not isinstance(controller, Mapping):
        raise MalformedSampleError("health document: snapshot and controller must be objects")
    urp = doc.get("urp_cross_check")
    if urp is not None and not isinstance(urp, Mapping):
        raise MalformedSampleError("health document: urp_cross_check must be an object or null")
    scrape_errors = doc.get("scrape_errors", {})
    if not isinstance(scrape_errors, Mapping):
        raise MalformedSampleError("health document: scrape_errors must be an object")
    try:
        errors = {int(b): str(reason) for b, reason in scrape_errors.items()}
    except ValueError as exc:
        raise MalformedSampleError(f"health document: scrape_errors keys must be broker ids: {exc}") from exc
    return HealthState(
        cluster=cluster,
        collector_id=collector_id,
        timestamp=timestamp,
        snapshot_version=_int(_get(snapshot, "version", "snapshot."), "snapshot.version"),
        taken_at=_float(_get(snapshot, "taken_at", "snapshot."), "snapshot.taken_at"),
        last_good_at=_float(_get(snapshot, "last_good_at", "snapshot."), "snapshot.last_good_at"),
        stale=bool(_get(snapshot, "stale", "snapshot.")),
        controller_id=_opt_int(controller.get("broker_id"), "controller.broker_id"),
        controller_epoch=_opt_int(controller.get("epoch"), "controller.epoch"),
        active_controller_gauges=_opt_float(
            controller.get("active_controller_gauges"), "controller.active_controller_gauges"
        ),
        brokers=_ints(_get(doc, "brokers", ""), "brokers"),
        brokers_down=_ints(_get(doc, "brokers_down", ""), "brokers_down"),
        partitions=_int(_get(doc, "partitions", ""), "partitions"),
        offline=_partition_set(_get(doc, "offline", ""), "offline"),
        under_replicated=_partition_set(_get(doc, "under_replicated", ""), "under_replicated"),
        under_min_isr=_partition_set(_get(doc, "under_min_isr", ""), "under_min_isr"),
        at_min_isr=_partition_set(_get(doc, "at_min_isr", ""), "at_min_isr"),
        suspects=tuple(
            Suspect(
                _int(s.get("broker_id"), "suspects.broker_id"),
                _int(s.get("missing_from"), "suspects.missing_from"),
                _float(s.get("share"), "suspects.share"),
            )
            for s in _objects(doc.get("suspects", []), "suspects")
        ),
        imbalance=tuple(
            LeaderImbalance(
                _int(i.get("broker_id"), "imbalance.broker_id"),
                _int(i.get("preferred_partitions"), "imbalance.preferred_partitions"),
                _int(i.get("led_by_others"), "imbalance.led_by_others"),
                _float(i.get("ratio"), "imbalance.ratio"),
            )
            for i in _objects(doc.get("imbalance", []), "imbalance")
        ),
        urp_gauges=None if urp is None else _opt_float(urp.get("gauges"), "urp_cross_check.gauges"),
        urp_zookeeper=None if urp is None else _opt_int(urp.get("zookeeper"), "urp_cross_check.zookeeper"),
        urp_gauges_missing=() if urp is None else _ints(urp.get("missing", []), "urp_cross_check.missing"),
        scrape_errors=errors,
        offline_electable=_partition_set(doc.get("offline_electable", {"count": 0}), "offline_electable"),
        controller_kraft_epoch=_opt_int(
            controller.get("kraft_controller_epoch"), "controller.kraft_controller_epoch"
        ),
        unknown=_partition_set(doc.get("unknown", {"count": 0}), "unknown"),
        lagging=_lagging(doc.get("lagging", {}), "lagging"),
    )
