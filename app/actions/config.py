"""The runbook actions' section of the settings tree (``KAFKA_HEALTH_SERVICE__ACTIONS__*``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class ActionSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    workers: Annotated[int, Field(ge=1, le=64)] = 4
    """Actions executing at once; more wait, PENDING, for a worker."""
    stall_after_s: Annotated[float, Field(gt=0, le=86_400)] = 300.0
    """A running reassignment with no progress (no byte copied, no replica joining an ISR, no partition
    completing), or waiting on a destination broker that is down, or on an unhealthy cluster before its next
    batch, or falling behind (its batch's bytes remaining growing: the throttle below the produce rate;
    an adaptive throttle is raised first), for this long is STALLED: it reports why, pages (rule 12) and
    shows in ``/metrics``; it goes back to RUNNING as soon as no reason holds any more."""
    poll_s: Annotated[float, Field(gt=0, le=10)] = 0.2
    """How often a running action looks at the cluster (the snapshot is in memory: this costs nothing)."""
    progress_interval_s: Annotated[float, Field(gt=0, le=600)] = 2.0
    """How often progress (bytes and partitions, rate, ETA) is measured and written to the action."""
    adopt_interval_s: Annotated[float, Field(gt=0, le=600)] = 1.0
    """How often the leading instance looks for unfinished actions to run: ones accepted by another
    replica, or left by an instance that stopped or crashed."""
    chunk_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    """An election chunk the controller has not taken in this time fails the election (no controller?)."""
    verify_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """How long the end of an action waits for the snapshot to show its outcome."""
