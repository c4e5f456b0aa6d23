"""``/healthz`` and ``/readyz``."""

from __future__ import annotations

from pydantic import BaseModel


class Healthz(BaseModel):
    status: str


class Readyz(BaseModel):
    ready: bool
    reason: str
