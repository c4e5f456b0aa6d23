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
