"""What the Spark job does with each micro-batch once Spark has done the heavy part: evaluate the load lane's
alert rules (8 and 9, :data:`analytics.rules.LOAD_RULES`) window by window, advance the windowed alert
lifecycle, and write everything to the store exactly once.

The job is the load lane: the incident rules (1-7, 10, 11) belong to ``kafka-health serve``'s incident lane,
which evaluates them on its live view within a second of a change. The job still keeps every window's
health document in ``cluster_windows`` (the record of what the collector saw), but never evaluates it,
and the store refuses an incident rule's alert from ``commit_batch``.

Spark hands over, per cluster and final event-time window, the load model's result (computed by a grouped
pandas UDF on the executors) and the window's latest health document. That is small (one row per broker and
window), so this part runs on the driver, in window order per cluster, with the alert states read from the
store, and commits the whole micro-batch in one transaction keyed by ``(query_name, batch_id)``:

* a batch Spark re-runs after a crash (same id, same data, from its checkpoint) finds its id committed and
  changes nothing;
* a window at or before the last one evaluated for its cluster is skipped, and every row is an upsert keyed
  by cluster and window (alerts by fingerprint, events by fingerprint and sequence), so even a replay under
  another batch id writes the same rows again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from analytics.lifecycle import advance
from analytics.model import (
    AlertEvent,
    AlertState,
    HealthState,
    LoadWindow,
    MalformedSampleError,
    Window,
)
from analytics.rules import LOAD_RULES, RuleContext, RuleSettings, evaluate
from analytics.store import ClusterWindowRow, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HealthSample:
    """A window's latest ``cluster`` sample: who sent it, when, and its health document."""

    collector_id: str
    timestamp: float
    doc: Any


@dataclass(frozen=True, slots=True)
class WindowInput:
    """Everything Spark produced for one cluster and window."""

    window: Window
    load: LoadWindow | None = None
    load_error: str | None = None
    """Why the load model could not run on this window (e.g. no usable metric)."""
    health: HealthSample | None = None
    malformed: int = 0
    """Samples of this window that were reported and skipped."""


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    committed: bool
    """False when the batch had been committed before (a replay): nothing was written."""
    windows: int = 0
    skipped_windows: int = 0
    """Windows at or before the last one evaluated for their cluster."""
    events: tuple[AlertEvent, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)
    """Malformed health documents and load-model errors, reported and skipped."""


def health_json(sample: HealthSample) -> dict[str, Any]:
    """How a window's health sample is kept in ``cluster_windows.health`` (enough to rebuild it)."""
    return {"collector_id": sample.collector_id, "timestamp": sample.timestamp, "doc": sample.doc}


def parse_health(window: Window, sample: HealthSample) -> HealthState:
    return HealthState.from_json(
        sample.doc, cluster=window.cluster, collector_id=sample.collector_id, timestamp=sample.timestamp
    )


def process_batch(
    store: Store,
    query_name: str,
    batch_id: int,
    inputs: Sequence[WindowInput],
    rules: RuleSettings,
) -> BatchOutcome:
    """Evaluate and store one micro-batch's windows (see the module docstring)."""
    if store.batch_committed(query_name, batch_id):
        return BatchOutcome(committed=False)
    by_cluster: dict[str, list[WindowInput]] = defaultdict(list)
    for item in inputs:
        by_cluster[item.window.cluster].append(item)
    loads: list[LoadWindow] = []
    rows: list[ClusterWindowRow] = []
    changed: dict[str, AlertState] = {}
    events: list[AlertEvent] = []
    problems: list[str] = []
    evaluated = skipped = 0
    for cluster, windows in sorted(by_cluster.items()):
        windows.sort(key=lambda w: w.window.start)
        last = store.last_evaluated_window(cluster)
        alerts: dict[str, AlertState] = dict(store.alert_states(cluster, rules=LOAD_RULES))
        for item in windows:
            window = item.window
            if last is not None and window.end <= last:
                skipped += 1
                continue
            where = f"cluster {cluster} window {window.start:.0f}"
            health = None
            if item.health is not None:
                try:
                    health = parse_health(window, item.health)
                except MalformedSampleError as exc:
                    problems.append(f"{where}: health: {exc}")
            if item.load_error is not None:
                problems.append(f"{where}: load model: {item.load_error}")
            if item.malformed:
                problems.append(f"{where}: {item.malformed} malformed samples or values")
            context = RuleContext(
                window=window, now=window.end, health=health, history=(), load=item.load, settings=rules
            )
            transition = advance(cluster, window, evaluate(context, "load"), alerts, rules)
            for state in transition.states:
                alerts[state.fingerprint] = changed[state.fingerprint] = state
            events.extend(transition.events)
            if item.load is not None:
                loads.append(item.load)
            rows.append(_cluster_row(item, health, rules))
            evaluated += 1
    for problem in problems:
        log.warning("skipped: %s", problem)
    committed = store.commit_batch(
        query_name,
        batch_id,
        load_windows=loads,
        cluster_windows=rows,
        alert_states=list(changed.values()),
        events=events,
    )
    if not committed:
        return BatchOutcome(committed=False)
    return BatchOutcome(
        committed=True,
        windows=evaluated,
        skipped_windows=skipped,
        events=tuple(events),
        problems=tuple(problems),
    )


def _cluster_row(item: WindowInput, health: HealthState | None, rules: RuleSettings) -> ClusterWindowRow:
    load = item.load
    return ClusterWindowRow(
        window=item.window,
        brokers=None if load is None else len(load.brokers),
        stddev=None if load is None else load.stddev,
        stddev_threshold=None if load is None else load.stddev_threshold,
        rated_deviation=rules.rated_deviation if load is None else load.rated_deviation,
        imbalanced=None if load is None else load.imbalanced,
        controller_id=None if health is None else health.controller_id,
        controller_epoch=None if health is None else health.controller_epoch,
        health=None if item.health is None or health is None else health_json(item.health),
        evaluated=True,
    )
