"""The metrics collector's section of the settings tree."""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from collectors.metrics.endpoints import normalise_listener, validate_url, validate_url_template
from collectors.metrics.names import DIALECT_TABLES, Dialect, DialectSetting, MetricRule, resolve_dialect

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_DISK_FIT_WINDOW_S = 1800.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class MetricsSettings(BaseModel):
    """The metrics collector's section of the settings tree, validated when built (no I/O)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url_template: str | None = None
    """E.g. ``http://{host}:7071/metrics``; placeholders ``{host}``, ``{port}``, ``{id}``, ``{rack}``."""
    urls: dict[int, str] = Field(default_factory=dict)
    """Broker id -> URL; wins over the template."""
    listener: str | None = None
    """The listener whose host and port fill ``{host}`` and ``{port}`` (``KAFKA_HEALTH_METRICS__LISTENER``,
    ``--metrics-listener``); default: the listener named PLAINTEXT (Kafka's default inter-broker listener),
    else each broker's first endpoint."""
    timeout_s: Annotated[float, Field(gt=0, le=600)] = DEFAULT_TIMEOUT_S
    max_workers: Annotated[int, Field(ge=1, le=1024)] = 32
    max_response_bytes: Annotated[int, Field(ge=1024)] = DEFAULT_MAX_RESPONSE_BYTES
    names: dict[str, MetricRule | None] = Field(default_factory=dict)
    """Changes to every dialect's table (:data:`DIALECT_TABLES`): a rule replaces or adds a metric, None
    removes one."""
    dialect: DialectSetting = "auto"
    """The exporter rule file the brokers' names come from; ``auto`` detects it per broker at each scrape
    from the names it serves (:func:`detect_dialect`)."""
    dialects: dict[int, DialectSetting] = Field(default_factory=dict)
    """Broker id -> its dialect, for a fleet whose brokers differ; wins over ``dialect``."""
    log_dir_mountpoints: Annotated[tuple[str, ...], NoDecode] = ()
    """The mount points that hold the brokers' log dirs, in ``log.dirs`` order, the same on every broker
    (``KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS``: a JSON list or ``/data-0,/data-1``). Empty: every mount
    point whose name contains ``kafka`` or ``data`` (:func:`collectors.disks.log_dir_filesystems`)."""
    disk_fit_window_s: Annotated[float, Field(ge=60, le=7 * 86400)] = DEFAULT_DISK_FIT_WINDOW_S
    """How far back the disks' growth is fitted (``KAFKA_HEALTH_METRICS__DISK_FIT_WINDOW_S``)."""

    @field_validator("log_dir_mountpoints", mode="before")
    @classmethod
    def _split_mountpoints(cls, value: object) -> object:
        if isinstance(value, str):  # an environment variable: a,b,c or a JSON list
            if value.strip().startswith("["):
                try:
                    return tuple(json.loads(value))
                except (ValueError, TypeError):
                    raise ValueError(f"not a JSON list of mount points: {value!r}") from None
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("log_dir_mountpoints")
    @classmethod
    def _check_mountpoints(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for mountpoint in value:
            if not mountpoint.startswith("/"):
                raise ValueError(f"log_dir_mountpoints: {mountpoint!r} is not an absolute mount point")
        if len(set(value)) != len(value):
            raise ValueError(f"log_dir_mountpoints: a mount point is given twice in {list(value)}")
        return value

    @field_validator("url_template")
    @classmethod
    def _check_template(cls, value: str | None) -> str | None:
        return None if value is None else validate_url_template(value)

    @field_validator("listener")
    @classmethod
    def _check_listener(cls, value: str | None) -> str | None:
        return None if value is None else normalise_listener(value)

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, value: dict[int, str]) -> dict[int, str]:
        for broker_id, url in value.items():
            validate_url(url, f"metrics URL of broker {broker_id}")
        return value

    @model_validator(mode="after")
    def _check_some_endpoint(self) -> MetricsSettings:
        if self.url_template is None and not self.urls:
            raise ValueError(
                "the metrics collector needs url_template (e.g. http://{host}:7071/metrics) "
                "or urls (broker id -> URL)"
            )
        return self

    @property
    def name_table(self) -> dict[str, MetricRule]:
        """jmx_exporter's example table with ``names`` applied."""
        return self.table_for("jmx-exporter-example")

    def table_for(self, dialect: Dialect) -> dict[str, MetricRule]:
        """The dialect's table with ``names`` applied."""
        table = {**DIALECT_TABLES[dialect], **self.names}
        return {name: rule for name, rule in table.items() if rule is not None}

    def dialect_of(self, broker_id: int) -> Dialect | None:
        """The dialect set for the broker, None when it is to be detected."""
        return resolve_dialect(self.dialects.get(broker_id, self.dialect))
