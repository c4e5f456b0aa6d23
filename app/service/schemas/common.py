"""Models every area uses: the error body, the page of a paginated list, and the bounds of every integer
a route takes (ids, offsets, broker ids, partitions, rates; see docs/api.md, "Bounds of integer inputs")
and the strict booleans (docs/api.md, "Booleans").

Two pairs of models share a class name (``ActionOut``: an alert's suggested action and a runbook action;
``LoadOut``: the load windows and a plan's load summary). OpenAPI names such components after their module
(``app__service__schemas__ActionOut``, ``app__service__actions_api__ActionOut``, ...), and clients generated
from ``/openapi.json`` use those names, so the four models declare the module they were published from
(:data:`PUBLISHED_SCHEMAS`, :data:`PUBLISHED_ACTIONS`) whatever file they live in. Their modules do not use
``from __future__ import annotations``: pydantic resolves string annotations in the declared module.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, Field, StrictBool, StrictInt

from app.actions.adaptive import MAX_RATE

T = TypeVar("T")

MAX_PAGE = 10_000
"""The largest ``limit`` of the cluster and load lists."""

# --- the bounds of every integer a route takes --------------------------------------------------------
# One place for them, so that no id or offset reaches the store or the planners out of what they hold: an
# integer >= 2**63 made SQLite raise OverflowError (a 500) and a broker id beyond a Java int is no broker.
# Bodies use strict ints (``true`` or ``1.0`` is not rule 1); path and query values are text, parsed as
# int (``1e30``, ``true`` and ``1.5`` are refused there too) by the parameters of
# :mod:`app.service.schemas.params`.

MAX_ID = 2**63 - 1
"""The largest id and offset: SQLite's INTEGER and PostgreSQL's BIGINT are signed 64-bit."""
MAX_JAVA_INT = 2**31 - 1
"""The largest Kafka broker id and partition number (Java ints)."""
# MAX_RATE: the largest throttle rate in bytes/s (a Java long), defined where the adaptive throttle's
# bounds are (the actions layer cannot import the service's).

BrokerId = Annotated[StrictInt, Field(ge=0, le=MAX_JAVA_INT)]
"""A broker id in a body."""
JavaInt = Annotated[StrictInt, Field(ge=-(2**31), le=MAX_JAVA_INT)]
"""A broker id in a body whose route judges the id itself (``POST /throttles/clear`` names a negative id
among every bad entry of its 422, and audits the refusal)."""
PartitionNumber = Annotated[StrictInt, Field(ge=0, le=MAX_JAVA_INT)]
"""A partition number in a body."""
Rate = Annotated[StrictInt, Field(ge=1, le=MAX_RATE)]
"""A throttle rate (bytes/s) in a body."""

# --- booleans -----------------------------------------------------------------------------------------
# Strict too: pydantic's lax mode took 0, "0", "no", "off", "f" and "false" for false, so a body that read
# as a dry run (``"dry_run": 0``, ``"dry_run": "no"``) elected leaders and removed throttles for real.
# Bodies take JSON ``true``/``false`` only; query strings the text ``true``/``false`` only
# (:data:`app.service.schemas.params.QueryBool`).

Flag = StrictBool
"""A boolean in a body: JSON ``true`` or ``false``, nothing else (published as ``{"type": "boolean"}``)."""

PUBLISHED_SCHEMAS = "app.service.schemas"
PUBLISHED_ACTIONS = "app.service.actions_api"


class Problem(BaseModel):
    """Every 4xx/5xx body: what went wrong, and for validation errors each problem found."""

    detail: str
    problems: list[dict[str, Any]] = Field(default_factory=list)
    problems_total: int | None = None
    """Present when ``problems`` lists only the first 100: how many problems there are in all."""


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int
