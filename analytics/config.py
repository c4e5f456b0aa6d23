"""The analytics job's section of the settings tree (``KAFKA_HEALTH_ANALYTICS__*``)."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from analytics.rules import RuleSettings
from analytics.store.database import check_store_directory, check_store_url
from analytics.store.errors import StoreError
from collectors.transport import parse_transport

DEFAULT_WINDOW_S = 30.0
"""The analytics job's window (``window_s``), which the service's load lane judges silence by too."""
DEFAULT_MASTER = "local[2]"
"""The master when neither the settings nor Spark's own configuration name one."""


class AnalyticsSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    master: str | None = None
    """Spark master: ``local[N]`` in one process, or ``spark://host:7077`` for a cluster. Unset: under
    ``spark-submit``, the master it names (its ``--master``, ``spark-defaults.conf``), else ``local[2]``
    (:data:`DEFAULT_MASTER`); set, it wins over Spark's."""
    source: str = "spool:./kafka-health-data/spool"
    """``spool:DIR`` (the collectors' default sink) or ``kafka:BOOTSTRAP/TOPIC``."""
    create_spool: bool = False
    """Create the spool directory when it does not exist. Off: a missing directory is a start-up error (a
    typo would otherwise make the job wait forever on an empty directory nobody writes to)."""
    trigger_s: Annotated[float, Field(gt=0, le=3600)] = 2.0
    """Micro-batch interval."""
    window_s: Annotated[float, Field(gt=0, le=86400)] = DEFAULT_WINDOW_S
    """Event-time window the brokers' samples are averaged over; one load row per broker per window."""
    watermark_s: Annotated[float, Field(ge=0, le=86400)] = 10.0
    """How late a sample may arrive and still count in its window; a window is final (and its alerts
    evaluated) once the watermark passes its end, so alert latency is about window + watermark + trigger."""
    checkpoint: str = "./kafka-health-data/checkpoint"
    """Spark's checkpoint directory (offsets, dedup and window state): keep it to restart exactly once."""
    store_url: str = "sqlite:///./kafka-health-data/kafka-health.db"
    create_store_dir: bool = False
    """Create the SQLite store's directory when it does not exist (``--create-store-dir``). Off: a missing
    directory is a start-up error (exit 2), as a missing spool directory is: a typo in the path would
    otherwise start an empty store in a new directory tree."""
    query_name: str = "kafka_health_load"
    """Names the streaming query in the store's processed-batches table (one name per checkpoint)."""
    weights: dict[str, Annotated[float, Field(ge=0)]] | None = None
    """Load-model weight per metric (default: equal); need not sum to 1."""
    max_files_per_trigger: Annotated[int, Field(ge=1)] = 1000
    shuffle_partitions: Annotated[int, Field(ge=1, le=10000)] = 1
    """Partitions of the dedup and window state. One keeps micro-batches short on one machine (0.8 s
    against 1.1 s with two, measured); raise it on a Spark cluster. Fixed when the checkpoint is created:
    a different value needs a new checkpoint."""
    kafka_options: dict[str, str] = Field(default_factory=dict)
    """Options of the Kafka source, named like Spark's Kafka connector's: ``maxOffsetsPerTrigger``,
    ``startingOffsets``, ``failOnDataLoss``, and ``kafka.*`` client settings (TLS, SASL)."""
    spark_conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration for the session (``spark.*`` keys), set before it starts; it wins over the
    job's own choices, such as the loopback driver addresses of a ``local`` master."""
    rules: RuleSettings = Field(default_factory=RuleSettings)

    @field_validator("source")
    @classmethod
    def _check_source(cls, value: str) -> str:
        parse_transport(value)
        return value

    @field_validator("store_url")
    @classmethod
    def _check_store_url(cls, value: str) -> str:
        try:
            return check_store_url(value)
        except StoreError as exc:
            raise ValueError(str(exc)) from None

    def require_store_directory(self) -> None:
        """What ``serve`` and ``analytics`` check before they start: unless ``create_store_dir``, the SQLite
        store's directory exists. Raises ValueError in one line."""
        if self.create_store_dir:
            return
        try:
            check_store_directory(self.store_url)
        except StoreError as exc:
            raise ValueError(f"{exc} (give --create-store-dir to create it)") from None

    @field_validator("spark_conf")
    @classmethod
    def _check_spark_conf(cls, value: dict[str, str]) -> dict[str, str]:
        bad = sorted(key for key in value if not key.startswith("spark."))
        if bad:
            raise ValueError(f"Spark configuration keys start with 'spark.', got {bad}")
        return value

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None:
            if not all(math.isfinite(w) for w in value.values()):
                raise ValueError("weights must be finite")
            if not any(w > 0 for w in value.values()):
                raise ValueError("at least one weight must be positive")
        return value
