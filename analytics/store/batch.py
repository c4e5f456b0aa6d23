"""One micro-batch's rows, checked and keyed before any SQL runs (:meth:`analytics.store.Store.commit_batch`
writes them): a non-finite number or a value that is not JSON fails here, naming its field, and nothing is
written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analytics.model import AlertEvent, AlertState, LoadWindow, Window
from analytics.store.database import finite, json_object, opt_finite
from analytics.store.rows import ClusterWindowRow

__all__ = ["BatchRows", "alert_rows", "event_rows"]


@dataclass
class BatchRows:
    """The rows of one batch, table by table (see :meth:`build`)."""

    health_windows: list[dict[str, Any]]
    load_aggregates: list[dict[str, Any]]
    window_brokers: dict[tuple[str, float], list[int]]
    broker_loads: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    events: list[dict[str, Any]]

    @staticmethod
    def build(
        load: Sequence[LoadWindow],
        windows: Sequence[ClusterWindowRow],
        states: Sequence[AlertState],
        events: Sequence[AlertEvent],
    ) -> BatchRows:
        """Rows keyed by primary key (a later duplicate replaces an earlier one; for events the first
        stays, as the database would keep it)."""
        health: dict[tuple[str, float], dict[str, Any]] = {}
        for row in windows:
            where = f"cluster window {_window_name(row.window)}"
            health[row.window.cluster, row.window.start] = {
                **_window_key(row.window, where),
                "brokers": row.brokers,
                "stddev": opt_finite(row.stddev, f"{where}: stddev"),
                "stddev_threshold": opt_finite(row.stddev_threshold, f"{where}: stddev_threshold"),
                "rated_deviation": opt_finite(row.rated_deviation, f"{where}: rated_deviation"),
                "imbalanced": row.imbalanced,
                "controller_id": row.controller_id,
                "controller_epoch": row.controller_epoch,
                "health": None if row.health is None else json_object(row.health, f"{where}: health"),
                "evaluated": bool(row.evaluated),
            }
        aggregates: dict[tuple[str, float], dict[str, Any]] = {}
        window_brokers: dict[tuple[str, float], list[int]] = {}
        brokers: dict[tuple[str, float], dict[int, dict[str, Any]]] = {}
        for lw in load:
            where = f"load window {_window_name(lw.window)}"
            key = (lw.window.cluster, lw.window.start)
            stddev = finite(lw.stddev, f"{where}: stddev")
            threshold = finite(lw.stddev_threshold, f"{where}: stddev_threshold")
            aggregates[key] = {
                **_window_key(lw.window, where),
                "brokers": len(lw.brokers),
                "stddev": stddev,
                "stddev_threshold": threshold,
                "rated_deviation": finite(lw.rated_deviation, f"{where}: rated_deviation"),
                "imbalanced": stddev > threshold,
                "controller_id": None,
                "controller_epoch": None,
                "health": None,
                "evaluated": False,
            }
            window_rows: dict[int, dict[str, Any]] = {}
            for b in lw.brokers:
                at = f"{where}, broker {b.broker}"
                window_rows[b.broker] = {
                    **_window_key(lw.window, where),
                    "broker": b.broker,
                    "metrics": _float_map(b.metrics, f"{at}: metrics"),
                    "shares": _float_map(b.shares, f"{at}: shares"),
                    "weighted_load": finite(b.weighted_load, f"{at}: weighted_load"),
                    "normalized_load": finite(b.normalized_load, f"{at}: normalized_load"),
                    "deviation_rate": finite(b.deviation_rate, f"{at}: deviation_rate"),
                }
            brokers[key] = window_rows
            window_brokers[key] = sorted(window_rows)
        return BatchRows(
            health_windows=list(health.values()),
            load_aggregates=list(aggregates.values()),
            window_brokers=window_brokers,
            broker_loads=[row for rows in brokers.values() for row in rows.values()],
            alerts=alert_rows(states),
            events=event_rows(events),
        )


def alert_rows(states: Sequence[AlertState]) -> list[dict[str, Any]]:
    """The ``alerts`` rows of ``states``, checked, one per fingerprint (a later state replaces an earlier)."""
    rows: dict[str, dict[str, Any]] = {}
    for s in states:
        where = f"alert {s.fingerprint}"
        rows[s.fingerprint] = {
            "fingerprint": s.fingerprint,
            "cluster": s.cluster,
            "rule": s.rule,
            "subject": s.subject,
            "severity": s.severity,
            "state": s.state,
            "summary": s.summary,
            "first_seen": finite(s.first_seen, f"{where}: first_seen"),
            "last_seen": finite(s.last_seen, f"{where}: last_seen"),
            "opened_at": opt_finite(s.opened_at, f"{where}: opened_at"),
            "resolved_at": opt_finite(s.resolved_at, f"{where}: resolved_at"),
            "evidence": json_object(s.evidence, f"{where}: evidence"),
            "action": None if s.action is None else s.action.to_json(),
            "hits": s.hits,
            "clean": s.clean,
            "last_window_end": finite(s.last_window_end, f"{where}: last_window_end"),
            "event_sequence": s.event_sequence,
            "acknowledged_by": None,
            "acknowledged_at": None,
        }
    return list(rows.values())


def event_rows(events: Sequence[AlertEvent]) -> list[dict[str, Any]]:
    """The ``alert_events`` rows of ``events``, checked, one per ``(fingerprint, sequence)`` (the first
    stays, as the database would keep it)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for e in events:
        where = f"event {e.fingerprint}#{e.sequence}"
        rows.setdefault(
            (e.fingerprint, e.sequence),
            {
                "fingerprint": e.fingerprint,
                "sequence": e.sequence,
                "kind": e.kind,
                "at": finite(e.at, f"{where}: at"),
                "severity": e.severity,
                "summary": e.summary,
                "evidence": json_object(e.evidence, f"{where}: evidence"),
            },
        )
    return list(rows.values())


def _window_name(window: Window) -> str:
    return f"{window.cluster}@[{window.start!r}, {window.end!r})"


def _window_key(window: Window, where: str) -> dict[str, Any]:
    return {
        "cluster": window.cluster,
        "window_start": finite(window.start, f"{where}: start"),
        "window_end": finite(window.end, f"{where}: end"),
    }


def _float_map(values: Mapping[str, float], what: str) -> dict[str, float]:
    return {str(name): finite(v, f"{what}[{name!r}]") for name, v in values.items()}
