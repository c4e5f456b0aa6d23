"""``kafka-health serve``'s retention section of the settings tree (``KAFKA_HEALTH_SERVICE__RETENTION__*``).

A period is a number of seconds or a string with a unit, ``"90s"``, ``"30m"``, ``"36h"``, ``"7d"``,
``"2w"``; ``0``, ``"0"`` or ``"forever"`` keeps a table's rows for ever. Checked at start-up.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

__all__ = ["DAY", "FOREVER", "Period", "RetentionSettings", "parse_period"]

DAY: Final = 86400.0
FOREVER: Final = 0.0
"""A period of 0 keeps rows for ever."""
MIN_PERIOD_S: Final = 3600.0
"""The shortest period (but 0): an hour, the rollups' period."""

_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
_PERIOD: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_period(value: Any) -> float:
    """Seconds of a period (``7d``, ``36h``, ``3600``, ``forever``); 0.0 for for ever; ValueError saying
    what is accepted for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"a retention period is a duration like '7d', '36h' or 'forever', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip().lower() in ("forever", "never", "keep"):
        return FOREVER
    elif isinstance(value, str) and (match := _PERIOD.match(value.lower())):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(
            f"a retention period is a duration like '7d', '36h', '90m' or seconds, or 'forever' (0), "
            f"got {value!r}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a retention period must be finite and not negative, got {value!r}")
    if 0 < seconds < MIN_PERIOD_S:
        raise ValueError(f"a retention period is at least an hour (or 0 for ever), got {value!r}")
    return seconds


Period = Annotated[float, BeforeValidator(parse_period)]
"""Seconds; 0 for ever."""


class RetentionSettings(BaseModel):
    """How long each growing table keeps its rows (by age), and how the pruner runs.

    Defaults: raw load windows for a week, their hourly rollups for half a year, the health windows for a
    month, processed batches for three days, alert events and resolved alerts for half a year, finished
    actions and the audit log for a year, finished outbox rows for a month.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """False: nothing is pruned (every table grows, as before retention existed)."""
    load_windows: Period = 7 * DAY
    """Raw per-broker load windows (``load_windows``, and the load columns of ``cluster_windows``); older
    hours are rolled up (``load_rollups``, ``cluster_rollups``) in the transactions that delete them."""
    load_rollups: Period = 180 * DAY
    """The hourly rollups (per broker and per cluster)."""
    cluster_windows: Period = 30 * DAY
    """The per-window health facts (``cluster_windows``); the latest window of each cluster is always kept."""
    processed_batches: Period = 3 * DAY
    """The Spark job's exactly-once bookkeeping; the latest ``KEEP_LAST_BATCHES`` ids of each query are
    always kept, whatever their age (a restarted query replays only its last batches)."""
    alert_events: Period = 180 * DAY
    """Alert events (never one with a pending webhook delivery)."""
    alerts: Period = 180 * DAY
    """Resolved alerts, by resolution time (with their remaining events); pending and open ones are kept."""
    actions: Period = 365 * DAY
    """Finished runbook actions (succeeded, partial, failed, cancelled), by finish time; unfinished ones
    (pending, running, stalled) are never pruned."""
    audit_log: Period = 365 * DAY
    webhook_deliveries: Period = 30 * DAY
    """The webhook outbox's delivered, dead and skipped rows, by event time; pending ones are kept. Must
    exceed the notifier's ``horizon_s`` (by an hour), else a pruned event inside it would be sent again."""
    interval_s: Annotated[float, Field(gt=0, le=86400)] = 600.0
    """Time between two pruning passes (the first one starts ``interval_s / 10`` after start-up)."""
    batch_rows: Annotated[int, Field(ge=1, le=100_000)] = 5000
    """Rows one delete transaction removes at most (load windows: whole windows up to this many rows)."""
    pause_s: Annotated[float, Field(ge=0, le=60)] = 0.05
    """Pause between two transactions of a pass, so that writers are not starved of the write lock."""

    @model_validator(mode="after")
    def _consistent(self) -> RetentionSettings:
        def shorter(a: float, b: float) -> bool:  # a keeps less than b (0 keeps for ever)
            if a == FOREVER:
                return False
            return b == FOREVER or a < b

        if shorter(self.load_rollups, self.load_windows):
            raise ValueError(
                "retention: load_rollups must be at least load_windows (rollups outlive windows)"
            )
        if shorter(self.cluster_windows, self.load_windows):
            raise ValueError(
                "retention: cluster_windows must be at least load_windows (load rows need theirs)"
            )
        return self

    def periods(self) -> dict[str, float]:
        """Each table's period in seconds (0: for ever), by table name."""
        return {name: float(getattr(self, name)) for name in TABLES}


TABLES: Final = (
    "load_windows",
    "load_rollups",
    "cluster_windows",
    "processed_batches",
    "webhook_deliveries",
    "alert_events",
    "alerts",
    "actions",
    "audit_log",
)
"""The tables with a period, in the order a pass prunes them (children before parents, rollups after the
windows they are made of)."""
