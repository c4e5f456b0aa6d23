"""Models every area uses: the error body and the page of a paginated list.

Two pairs of models share a class name (``ActionOut``: an alert's suggested action and a runbook action;
``LoadOut``: the load windows and a plan's load summary). OpenAPI names such components after their module
(``app__service__schemas__ActionOut``, ``app__service__actions_api__ActionOut``, ...), and clients generated
from ``/openapi.json`` use those names, so the four models declare the module they were published from
(:data:`PUBLISHED_SCHEMAS`, :data:`PUBLISHED_ACTIONS`) whatever file they live in. Their modules do not use
``from __future__ import annotations``: pydantic resolves string annotations in the declared module.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

T = TypeVar("T")

MAX_PAGE = 10_000
"""The largest ``limit`` of the cluster and load lists."""

PUBLISHED_SCHEMAS = "app.service.schemas"
PUBLISHED_ACTIONS = "app.service.actions_api"


class Problem(BaseModel):
    """Every 4xx/5xx body: what went wrong, and for validation errors each problem found."""

    detail: str
    problems: list[dict[str, Any]] = Field(default_factory=list)


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int
