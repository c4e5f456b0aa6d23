"""The one settings tree of kafka-health, validated at start-up.

Values come from (highest first) command-line flags, ``KAFKA_HEALTH_*`` environment variables (nested
with ``__``, e.g. ``KAFKA_HEALTH_REFERENCE_CLUSTER__BROKERS=5``) and defaults. Each module receives its
own section and never reads the environment itself.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.reference_cluster.config import ReferenceClusterSettings
from collectors.metrics import MetricsSettings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="KAFKA_HEALTH_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    reference_cluster: ReferenceClusterSettings = Field(default_factory=ReferenceClusterSettings)
    metrics: MetricsSettings | None = None
    """Where the brokers' metrics are (a URL template or a map); None: ZooKeeper only."""


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment with ``overrides`` (from flags) on top; raises pydantic's
    ValidationError, whose message names each bad field."""
    return Settings(**overrides)
