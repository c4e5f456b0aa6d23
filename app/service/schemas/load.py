"""``/load``: the analytics job's load windows.

No ``from __future__ import annotations`` here: :class:`LoadOut` declares its published module (see
:mod:`app.service.schemas.common`).
"""

from typing import Literal

from pydantic import BaseModel

from app.service.schemas.common import PUBLISHED_SCHEMAS


class BrokerLoadOut(BaseModel):
    broker: int
    normalized_load: float
    """Db; in an hourly rollup, its average over the hour's windows."""
    deviation_rate: float
    weighted_load: float
    shares: dict[str, float]
    """D per metric (empty in an hourly rollup)."""
    metrics: dict[str, float]
    """The raw metrics' window averages (empty in an hourly rollup)."""
    max_normalized_load: float | None = None
    """Hourly rollups only: the highest Db of the hour's windows."""
    min_deviation_rate: float | None = None
    """Hourly rollups only: the lowest r_n of the hour's windows."""
    max_deviation_rate: float | None = None
    """Hourly rollups only: the highest r_n of the hour's windows."""


class LoadWindowOut(BaseModel):
    cluster: str
    window_start: float
    window_end: float
    stddev: float
    """σ; in an hourly rollup, its average over the hour's windows."""
    stddev_threshold: float
    rated_deviation: float
    imbalanced: bool
    """In an hourly rollup: any of the hour's windows was imbalanced."""
    brokers: list[BrokerLoadOut]
    resolution: Literal["window", "hour"] = "window"
    """``window``: one load window as the job wrote it; ``hour``: an hourly rollup, what the store keeps
    of windows older than their retention (``service.retention.load_windows``)."""
    windows: int = 1
    """Load windows this entry summarises."""
    max_stddev: float | None = None
    """Hourly rollups only: the highest σ of the hour's windows."""


class LoadOut(BaseModel):
    __module__ = PUBLISHED_SCHEMAS

    latest: LoadWindowOut | None
    history: list[LoadWindowOut]
