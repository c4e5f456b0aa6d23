"""``/brokers/{id}/disks`` and ``/risks``: the brokers' log dirs (:mod:`collectors.disks`) and the standing
risks (:mod:`collectors.risks`)."""

from __future__ import annotations

from pydantic import BaseModel

from collectors.disks import LogDirDisk
from collectors.risks import Risk


class TopicGrowthOut(BaseModel):
    topic: str
    bytes_per_s: float


class LogDirDiskOut(BaseModel):
    mountpoint: str
    size_bytes: float
    avail_bytes: float
    used_ratio: float
    """``1 - avail / size``."""
    growth_bytes_per_s: float | None
    """Used bytes per second over the disk fit window (negative: shrinking); null with too few samples."""
    full_in_s: float | None
    """Seconds until the log dir is full at that growth; null when it is not growing (or not known)."""
    top_topics: list[TopicGrowthOut]
    """The broker's topics growing fastest (counted per broker, over all its log dirs), fastest first."""

    @classmethod
    def of(cls, disk: LogDirDisk) -> LogDirDiskOut:
        return cls(
            mountpoint=disk.mountpoint,
            size_bytes=disk.size_bytes,
            avail_bytes=disk.avail_bytes,
            used_ratio=disk.used_ratio,
            growth_bytes_per_s=disk.growth_bytes_per_s,
            full_in_s=disk.full_in_s,
            top_topics=[TopicGrowthOut(topic=t.topic, bytes_per_s=t.bytes_per_s) for t in disk.top_topics],
        )


class BrokerDisksOut(BaseModel):
    broker: int
    disks: list[LogDirDiskOut]
    """The broker's log dirs, in log-dir order; empty when none is known (``note`` says why)."""
    note: str | None = None
    """Why ``disks`` is empty (no metrics scraped, the broker's scrape failed, no log-dir filesystem
    served), or why growth is not known yet; null otherwise."""
    fit_window_s: float
    """The window the growth is fitted over (``metrics.disk_fit_window_s``)."""


class RiskOut(BaseModel):
    kind: str
    subject: str
    """``topic:<name>``, ``broker:<id>``, ``broker:<id>:<mountpoint>`` or ``cluster``."""
    detail: str
    fix: str
    """The command or kafka-health route that removes the risk."""
    partitions: int
    """Partitions at risk (0 for a log dir)."""

    @classmethod
    def of(cls, risk: Risk) -> RiskOut:
        return cls(
            kind=risk.kind,
            subject=risk.subject,
            detail=risk.detail,
            fix=risk.fix,
            partitions=risk.partitions,
        )


class RisksOut(BaseModel):
    risks: list[RiskOut]
    counts: dict[str, int]
    """Entries per kind, every kind listed (0 included)."""
    disks_known: bool
    """False when no broker's log dirs are known (no metrics scraped): ``log_dir_full_soon`` cannot be
    judged."""
    snapshot_version: int
