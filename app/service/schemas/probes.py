"""``/healthz`` and ``/readyz``."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Healthz(BaseModel):
    status: str


class ClusterReadiness(BaseModel):
    name: str | None
    """The cluster's name (null: the one cluster of a single-cluster service)."""
    key: str
    """Its key (its name, else its cluster id)."""
    ready: bool
    reason: str


class Readyz(BaseModel):
    ready: bool
    """At least one watched cluster is ready."""
    reason: str
    """``ok``, or why not (each cluster's reason)."""
    clusters: list[ClusterReadiness] = Field(default_factory=list)
    """Each watched cluster's readiness."""
    warnings: list[str] = Field(default_factory=list)
    """What is wrong in the configuration though the service may be ready, one line each: e.g. no API
    token configured (every ``/api/v1`` route answers 401). Empty when nothing is."""
