"""ZK→KRaft migration: the state in ``/api/v1/cluster`` and ``/api/v1/migration/readiness``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class MigrationOut(BaseModel):
    """Where the cluster stands in a ZK→KRaft migration (``collectors.migration.MigrationView``)."""

    phase: Literal["none", "pre_migration", "hybrid", "dual_write", "zk_controller"]
    kraft_controller_id: int | None
    kraft_controller_epoch: int | None
    metadata_offset: int | None
    """``kraft_metadata_offset`` of ``/migration``: the last KRaft metadata offset written to ZooKeeper."""
    metadata_epoch: int | None
    migration_zk_version: int | None
    zk_brokers: int


class ReadinessCheckOut(BaseModel):
    name: str
    status: Literal["pass", "fail", "unknown"]
    reason: str


class MigrationReadinessOut(BaseModel):
    ready: bool
    """No check failed."""
    migration: MigrationOut
    checks: list[ReadinessCheckOut]
