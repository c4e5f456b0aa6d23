"""``/maintenance/rolling-restarts``: a rolling restart's request and its progress (docs/api.md,
"Rolling restarts")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.maintenance.journal import STEPS
from app.maintenance.rolling_restart import next_step
from app.maintenance.store import RestartRow
from app.service.schemas.common import BrokerId, Flag

MAX_BROKERS = 10_000
MAX_WAIT_S = 86_400.0


class RollingRestartIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    brokers: Annotated[list[BrokerId], Field(min_length=1, max_length=MAX_BROKERS)] | Literal["all"] = Field(
        default="all",
        description='the brokers to restart, in this order (the controller is moved last), or "all" (the '
        "registered ones)",
    )
    demote: Flag = Field(default=True, description="move its leaderships away first and back after")
    silence: Flag = Field(default=True, description="silence what its absence raises while it restarts")
    restart: Literal["external"] = Field(
        default="external",
        description="the automation that stops the brokers follows `next` (the only mode in the service)",
    )
    wait_rejoined_s: Annotated[float, Field(gt=0, le=MAX_WAIT_S)] = Field(
        default=600.0, description="a broker's window, from its silence to its rejoining every ISR"
    )
    max_unsafe_wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S)] = Field(
        default=600.0, description="how long to wait for a broker to become safe to stop"
    )


class NextOut(BaseModel):
    broker: int
    may_stop: bool
    """True: stop it and start it again now (the run waits for its new session)."""
    reason: str


class StepOut(BaseModel):
    started_at: float | None
    ended_at: float | None
    detail: dict[str, Any]


class BrokerProgressOut(BaseModel):
    broker: int
    done: bool
    window_ends_at: float | None
    steps: dict[str, StepOut]


class EventOut(BaseModel):
    at: float
    event: str
    broker: int | None
    step: str | None
    message: str


class RollingRestartOut(BaseModel):
    id: str
    state: str
    """running, paused, stopped, done or cancelled."""
    requested_by: str
    requested_at: float
    updated_at: float
    ended_at: float | None
    cancel_requested: bool
    owner: str | None
    """The service instance conducting it (its leader)."""
    options: dict[str, Any]
    order: list[int]
    """The brokers in the order they are restarted (the controller last)."""
    stopped: dict[str, Any] | None
    """Where and why it stopped or paused: ``{"broker", "step", "reason"}``."""
    next: NextOut | None
    """What the automation does next; null once every broker is done."""
    brokers: list[BrokerProgressOut]
    events: list[EventOut] = []
    """The latest events, when the instance answering conducts it."""

    @classmethod
    def of(cls, row: RestartRow, events: list[dict[str, Any]] | None = None) -> RollingRestartOut:
        record = row.record
        following = next_step(record)
        brokers = []
        for broker in record.order:
            progress = record.brokers.get(broker)
            steps = {} if progress is None else progress.steps
            brokers.append(
                BrokerProgressOut(
                    broker=broker,
                    done=bool(progress and progress.done),
                    window_ends_at=None if progress is None else progress.window_ends_at,
                    steps={
                        name: StepOut(
                            started_at=steps[name].started_at,
                            ended_at=steps[name].ended_at,
                            detail=dict(steps[name].detail),
                        )
                        for name in STEPS
                        if name in steps
                    },
                )
            )
        options = record.options
        return cls(
            id=row.id,
            state=record.state,
            requested_by=row.requested_by,
            requested_at=row.requested_at,
            updated_at=row.updated_at,
            ended_at=record.ended_at,
            cancel_requested=row.cancel_requested,
            owner=row.owner,
            options={
                "demote": options.demote,
                "silence": options.silence,
                "restart": "external",
                "wait_rejoined_s": options.wait_rejoined_s,
                "max_unsafe_wait_s": options.max_unsafe_wait_s,
            },
            order=list(record.order),
            stopped=record.stopped,
            next=None if following is None else NextOut(**following),
            brokers=brokers,
            events=[EventOut(**e) for e in events or []],
        )
