"""``GET /api/v1/clusters``: the clusters the service watches."""

from __future__ import annotations

from pydantic import BaseModel

from app.service.schemas.cluster import Summary


class WatchedClusterOut(BaseModel):
    name: str | None
    """Its name (``--cluster NAME=...``); null for the one cluster of a single-cluster service."""
    key: str
    """How the API, the store and ``/metrics`` know it: its name, else its cluster id (``unknown`` before
    the first read): the ``{cluster}`` of ``/api/v1/clusters/{cluster}/...``."""
    cluster_id: str | None
    """``/cluster/id`` (null until its ZooKeeper was read, or when the znode is missing)."""
    zookeeper: str
    """Its ZooKeeper's connect string (credentials are never shown)."""
    reachable: bool
    """Its ZooKeeper was read and the session is live (the snapshot is not stale)."""
    ready: bool
    """What ``/readyz`` judges for it: in sync with ZooKeeper (or recent) and a Kafka cluster there."""
    reason: str
    """Why not ready (``ok`` when ready)."""
    brokers: int | None
    """Registered brokers (null until read)."""
    controller: int | None
    """The active controller's broker id (null: none, or not read yet)."""
    summary: Summary | None
    """The health summary (null until read)."""
