"""The incident lane's section of the settings tree (``KAFKA_HEALTH_SERVICE__INCIDENTS__*``).

The rules' thresholds and the time-based hysteresis (``for_s``, ``resolve_after_s``) are the rules'
settings (``analytics.rules``, ``KAFKA_HEALTH_ANALYTICS__RULES__*``), which the service reads too, so that
both lanes and every replica judge alike.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

LoadSilence = Literal["auto", "require", "off"]


class IncidentSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """Evaluate and write the incident alerts (with a store). Off: this replica never writes them."""
    coalesce_s: Annotated[float, Field(ge=0, le=1)] = 0.02
    """After a change of the snapshot, wait this long for more before evaluating, so that a broker crash
    whose partitions change over a few milliseconds is one evaluation."""
    interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    """Evaluate at least this often without a change: the ``for`` and resolve durations, the age of the
    view and the load lane's silence depend on time (and the brokers' scrape changes without one)."""
    load_silence: LoadSilence = "auto"
    """Rule 11's check of the load lane: ``auto`` arms once the store holds a load window for the cluster
    (a deployment without Spark never pages), ``require`` pages also before the first window, ``off``
    never checks."""
    load_silence_windows: Annotated[float, Field(ge=1, le=1000)] = 4.0
    """The load lane is silent when no new load window was written for this many ``analytics.window_s``
    (the Spark job writes one about every window; watched from when this replica leads)."""
