"""A builder of :class:`analytics.model.HealthState` for tests: a healthy cluster, as a collector reports it.

Pure, no pytest. A test takes the healthy state and says what is wrong with :func:`dataclasses.replace`::

    state = replace(healthy_state("prod", 100.0), brokers_down=(3,), offline=PartitionSet(1, {"t": 1}))
"""

from __future__ import annotations

from analytics.model import (
    AlertEvent,
    AlertState,
    EventKind,
    HealthState,
    PartitionSet,
    Severity,
    fingerprint,
)

BROKERS: tuple[int, ...] = (1, 2, 3, 4)
"""The brokers registered in :func:`healthy_state`'s cluster."""

COLLECTOR_ID = "collector-1"


def healthy_state(
    cluster: str,
    timestamp: float,
    *,
    snapshot_version: int = 1,
    taken_at: float = 0.0,
    controller_epoch: int = 1,
) -> HealthState:
    """Cluster ``cluster`` as :data:`COLLECTOR_ID` sampled it at ``timestamp``, in sync then (last good at
    ``timestamp``, not stale), from snapshot ``snapshot_version`` taken at ``taken_at``.

    Healthy: brokers :data:`BROKERS` all registered, broker 1 the controller (``controller_epoch``) and the
    only one whose ActiveControllerCount gauge is 1, 100 partitions none offline, under-replicated or at or
    under min ISR, no suspect broker nor leader imbalance, every gauge scraped and no URP anywhere.
    """
    return HealthState(
        cluster=cluster,
        collector_id=COLLECTOR_ID,
        timestamp=timestamp,
        snapshot_version=snapshot_version,
        taken_at=taken_at,
        last_good_at=timestamp,
        stale=False,
        controller_id=1,
        controller_epoch=controller_epoch,
        active_controller_gauges=1.0,
        brokers=BROKERS,
        brokers_down=(),
        partitions=100,
        offline=PartitionSet(),
        under_replicated=PartitionSet(),
        under_min_isr=PartitionSet(),
        at_min_isr=PartitionSet(),
        suspects=(),
        imbalance=(),
        urp_gauges=0.0,
        urp_zookeeper=0,
        urp_gauges_missing=(),
        scrape_errors={},
    )


def alert_row(
    cluster: str, rule: int, subject: str, kind: EventKind, severity: Severity, sequence: int, at: float
) -> tuple[AlertState, AlertEvent]:
    """The alert row and its event as the analytics job commits them for event ``sequence`` of
    ``(cluster, rule, subject)`` (summary ``rule N on SUBJECT``, evidence ``{"n": sequence}``)."""
    fp = fingerprint(cluster, rule, subject)
    state = AlertState(
        fingerprint=fp,
        cluster=cluster,
        rule=rule,
        subject=subject,
        severity=severity,
        state="resolved" if kind == "resolved" else "open",
        summary=f"rule {rule} on {subject}",
        evidence={"n": sequence},
        action=None,
        hits=1,
        clean=0,
        first_seen=at,
        last_seen=at,
        opened_at=at,
        resolved_at=at if kind == "resolved" else None,
        last_window_end=at,
        event_sequence=sequence,
    )
    return state, AlertEvent(fp, sequence, kind, at, severity, state.summary, {"n": sequence})
