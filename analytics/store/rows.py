"""The analytics store's row types, and the readers that turn its rows back into the model's types
(public: the webhooks' outbox reads alert events and their alerts' suggested actions with them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa

from analytics.model import (
    ActionRef,
    AlertEvent,
    AlertState,
    AlertStateName,
    BrokerLoad,
    EventKind,
    Severity,
    Window,
)
from analytics.store.database import opt_float, opt_int

__all__ = [
    "Acknowledgement",
    "BrokerRollup",
    "ClusterWindowRow",
    "LoadRollup",
    "read_action_ref",
    "read_alert_event",
    "read_alert_state",
    "read_broker_load",
    "read_cluster_window",
]


@dataclass(frozen=True, slots=True)
class ClusterWindowRow:
    """One cluster's facts for one window: the load model's aggregates (when the window has load) and the
    health facts the alert rules need from history after a restart (when it has health)."""

    window: Window
    brokers: int | None = None
    """N: brokers in the load model."""
    stddev: float | None = None
    """σ of the brokers' normalised loads."""
    stddev_threshold: float | None = None
    rated_deviation: float | None = None
    imbalanced: bool | None = None
    controller_id: int | None = None
    controller_epoch: int | None = None
    health: Mapping[str, Any] | None = None
    """The window's health summary (JSON-serialisable); None: the window has no health sample."""
    evaluated: bool = False
    """The alert rules have evaluated this window (sticky: once stored as True it stays True)."""


@dataclass(frozen=True, slots=True)
class BrokerRollup:
    """One broker's load over one hour of windows (``load_rollups``): averages and extremes."""

    broker: int
    windows: int
    weighted_load_avg: float
    weighted_load_max: float
    normalized_load_avg: float
    normalized_load_max: float
    deviation_rate_avg: float
    deviation_rate_min: float
    deviation_rate_max: float

    @classmethod
    def from_row(cls, row: Any) -> BrokerRollup:
        """A ``load_rollups`` row as read by the store's queries and the pruner's merge."""
        return cls(
            broker=int(row.broker),
            windows=int(row.windows),
            weighted_load_avg=float(row.weighted_load_avg),
            weighted_load_max=float(row.weighted_load_max),
            normalized_load_avg=float(row.normalized_load_avg),
            normalized_load_max=float(row.normalized_load_max),
            deviation_rate_avg=float(row.deviation_rate_avg),
            deviation_rate_min=float(row.deviation_rate_min),
            deviation_rate_max=float(row.deviation_rate_max),
        )


@dataclass(frozen=True, slots=True)
class LoadRollup:
    """One cluster's load over one hour (``cluster_rollups`` and its brokers' ``load_rollups``): what the
    store keeps of its load windows once the retention pruner has deleted them."""

    cluster: str
    hour_start: float
    hour_end: float
    windows: int
    """Load windows the hour had (averages are over these)."""
    brokers_max: int
    stddev_avg: float
    stddev_max: float
    stddev_threshold_avg: float
    rated_deviation_avg: float
    imbalanced_windows: int
    brokers: tuple[BrokerRollup, ...]


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """Who acknowledged an alert, and when (epoch seconds)."""

    by: str
    at: float


# --- reading rows back ------------------------------------------------------------------------------------


def read_action_ref(value: Any) -> ActionRef | None:
    if value is None:
        return None
    return ActionRef(method=value["method"], path=str(value["path"]), body=dict(value.get("body") or {}))


def read_alert_state(row: sa.Row[Any]) -> AlertState:
    return AlertState(
        fingerprint=str(row.fingerprint),
        cluster=str(row.cluster),
        rule=int(row.rule),
        subject=str(row.subject),
        severity=cast(Severity, row.severity),
        state=cast(AlertStateName, row.state),
        summary=str(row.summary),
        evidence=dict(row.evidence),
        action=read_action_ref(row.action),
        hits=int(row.hits),
        clean=int(row.clean),
        first_seen=float(row.first_seen),
        last_seen=float(row.last_seen),
        opened_at=opt_float(row.opened_at),
        resolved_at=opt_float(row.resolved_at),
        last_window_end=float(row.last_window_end),
        event_sequence=int(row.event_sequence),
    )


def read_alert_event(row: sa.Row[Any]) -> AlertEvent:
    return AlertEvent(
        fingerprint=str(row.fingerprint),
        sequence=int(row.sequence),
        kind=cast(EventKind, row.kind),
        at=float(row.at),
        severity=cast(Severity, row.severity),
        summary=str(row.summary),
        evidence=dict(row.evidence),
    )


def read_broker_load(row: sa.Row[Any]) -> BrokerLoad:
    return BrokerLoad(
        broker=int(row.broker),
        metrics={str(k): float(v) for k, v in row.metrics.items()},
        shares={str(k): float(v) for k, v in row.shares.items()},
        weighted_load=float(row.weighted_load),
        normalized_load=float(row.normalized_load),
        deviation_rate=float(row.deviation_rate),
    )


def read_cluster_window(row: sa.Row[Any]) -> ClusterWindowRow:
    return ClusterWindowRow(
        window=Window(str(row.cluster), float(row.window_start), float(row.window_end)),
        brokers=opt_int(row.brokers),
        stddev=opt_float(row.stddev),
        stddev_threshold=opt_float(row.stddev_threshold),
        rated_deviation=opt_float(row.rated_deviation),
        imbalanced=None if row.imbalanced is None else bool(row.imbalanced),
        controller_id=opt_int(row.controller_id),
        controller_epoch=opt_int(row.controller_epoch),
        health=row.health,
        evaluated=bool(row.evaluated),
    )
