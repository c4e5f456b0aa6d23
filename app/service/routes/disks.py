"""The brokers' log dirs and the standing risks (viewer role): ``/api/v1/brokers/{id}/disks`` and
``/api/v1/risks``.

Answers come from the live view: the disk model the periodic scrape feeds (:mod:`collectors.disks`) and
the standing risks computed once per snapshot version and scrape (:mod:`collectors.risks`).
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from app.service.deps import View, Viewer
from app.service.schemas.common import Problem
from app.service.schemas.disks import BrokerDisksOut, LogDirDiskOut, RiskOut, RisksOut
from app.service.schemas.params import BrokerIdPath
from app.service.state import ClusterView
from collectors.disks import MIN_SAMPLES
from collectors.risks import risk_counts

router = APIRouter(prefix="/api/v1", tags=["cluster"])


@router.get(
    "/brokers/{broker_id}/disks",
    response_model=BrokerDisksOut,
    responses={404: {"model": Problem}},
)
def broker_disks(broker_id: BrokerIdPath, _: Viewer, view: View) -> BrokerDisksOut:
    """The broker's log dirs as last scraped (node_exporter's filesystems), each with its growth over the
    disk fit window, the time until it is full (null when not growing) and the broker's topics growing
    fastest. An empty list with a ``note`` when none is known."""
    disks = view.disks(broker_id)
    if not disks and not _known(view, broker_id):
        raise HTTPException(404, f"broker {broker_id} is neither registered nor assigned any replica")
    return BrokerDisksOut(
        broker=broker_id,
        disks=[LogDirDiskOut.of(d) for d in disks],
        note=_note(view, broker_id, bool(disks), any(d.growth_bytes_per_s is not None for d in disks)),
        fit_window_s=view.disk_fit_window_s,
    )


def _known(view: ClusterView, broker_id: int) -> bool:
    state = view.state
    if broker_id in state.snapshot.brokers or broker_id in state.report.brokers_down:
        return True
    return any(broker_id in p.assignment.replicas for p in state.snapshot.partitions.values())


def _note(view: ClusterView, broker_id: int, any_disk: bool, any_growth: bool) -> str | None:
    if any_disk:
        if any_growth:
            return None
        return (
            f"growth not known yet: it needs {MIN_SAMPLES} scrapes within the {view.disk_fit_window_s:g} s "
            "fit window"
        )
    if not view.metrics_enabled:
        return "the brokers' metrics are not scraped (no metrics URL template): no log dir is known"
    scrape = view.state.scrape
    broker = None if scrape is None else scrape.scrapes.get(broker_id)
    if broker is None:
        return f"broker {broker_id} has not been scraped (it is not registered, or no scrape ran yet)"
    if not broker.ok:
        return f"broker {broker_id}'s last metrics scrape failed: {broker.error}"
    return (
        f"broker {broker_id} serves no node_filesystem_size_bytes/node_filesystem_avail_bytes for a log "
        "dir's mount point (metrics.log_dir_mountpoints, else mount points containing 'kafka' or 'data')"
    )


@router.get("/risks", response_model=RisksOut)
def risks(_: Viewer, view: View) -> RisksOut:
    """Standing risks that make the next broker stop or full disk an outage (RF 1 topics,
    ``min.insync.replicas`` at or above the replication factor, RF above the registered brokers, every
    replica in one rack, unclean leader election enabled, log dirs full within 7 days): each with its
    subject, detail and the command or route that fixes it. One entry per topic, with its partitions
    counted. No alert is raised for these."""
    found = view.risks()
    return RisksOut(
        risks=[RiskOut.of(r) for r in found],
        counts=risk_counts(found),
        disks_known=bool(view.all_disks()),
        snapshot_version=view.state.snapshot.version,
    )
