"""``/load``: the analytics job's load windows.

No ``from __future__ import annotations`` here: :class:`LoadOut` declares its published module (see
:mod:`app.service.schemas.common`).
"""

from pydantic import BaseModel

from app.service.schemas.common import PUBLISHED_SCHEMAS


class BrokerLoadOut(BaseModel):
    broker: int
    normalized_load: float
    deviation_rate: float
    weighted_load: float
    shares: dict[str, float]
    metrics: dict[str, float]


class LoadWindowOut(BaseModel):
    cluster: str
    window_start: float
    window_end: float
    stddev: float
    stddev_threshold: float
    rated_deviation: float
    imbalanced: bool
    brokers: list[BrokerLoadOut]


class LoadOut(BaseModel):
    __module__ = PUBLISHED_SCHEMAS

    latest: LoadWindowOut | None
    history: list[LoadWindowOut]
