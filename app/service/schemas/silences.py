"""``/silences``: a silence's request and its answer (docs/api.md, "Silences")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from app.silences.model import MATCHER_NAMES, MAX_DURATION_S, MAX_MATCHERS, Silence, SilenceState

MAX_EPOCH = 253_402_300_799
"""9999-12-31T23:59:59Z, the latest time a silence takes."""
EpochOrTime = Annotated[StrictInt, Field(ge=0, le=MAX_EPOCH)] | Annotated[StrictStr, Field(max_length=64)]
"""A time: whole seconds since the epoch, or an RFC 3339 timestamp with its offset (a string)."""
Seconds = Annotated[StrictInt, Field(ge=1, le=int(MAX_DURATION_S))]
"""Whole seconds."""


class MatcherIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: StrictStr = Field(max_length=64, description=f"the label: one of {', '.join(MATCHER_NAMES)}")
    value: Annotated[StrictStr, Field(max_length=1000)]
    regex: StrictBool = Field(
        default=False, description="value is a regular expression that must match the whole label"
    )


class MaintenanceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    broker: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] = Field(
        description="silence what this broker's planned stop explains: rule 5 and rule 7 for broker:N, "
        "rule 6 for broker:N, rule 2 for a topic whose only broker missing from its ISRs is N; nothing else"
    )


class SilenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    matchers: Annotated[list[MatcherIn], Field(max_length=MAX_MATCHERS)] = Field(
        default_factory=list,
        description="every matcher must match the alert; at least one, unless maintenance is given",
    )
    maintenance: MaintenanceIn | None = Field(
        default=None, description="a broker's maintenance window (with the matchers, if any: both must match)"
    )
    duration_s: Seconds | None = Field(
        default=None, description="how long it lasts from its start (exactly one of duration_s, ends_at)"
    )
    ends_at: EpochOrTime | None = None
    starts_at: EpochOrTime | None = Field(default=None, description="default (and at the earliest): now")
    comment: Annotated[StrictStr, Field(max_length=1000)] = ""


class MatcherOut(BaseModel):
    name: str
    value: str
    regex: bool


class MaintenanceOut(BaseModel):
    broker: int


class SilenceOut(BaseModel):
    id: int
    state: Literal["active", "pending", "expired"]
    matchers: list[MatcherOut]
    maintenance: MaintenanceOut | None
    starts_at: float
    ends_at: float
    comment: str
    created_by: str
    created_at: float
    expired_by: str | None = Field(description="who expired it by hand (None: it ran its course)")
    expired_at: float | None

    @classmethod
    def of(cls, silence: Silence, now: float) -> SilenceOut:
        state: SilenceState = silence.state(now)
        body: dict[str, Any] = {
            "id": silence.id,
            "state": state,
            "matchers": [m.to_json() for m in silence.matchers],
            "maintenance": None if silence.maintenance is None else silence.maintenance.to_json(),
            "starts_at": silence.starts_at,
            "ends_at": silence.ends_at,
            "comment": silence.comment,
            "created_by": silence.created_by,
            "created_at": silence.created_at,
            "expired_by": silence.expired_by,
            "expired_at": silence.expired_at,
        }
        return cls.model_validate(body)
