"""``kafka-health serve``'s section of the settings tree (``KAFKA_HEALTH_SERVICE__*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from app.actions.config import ActionSettings
from app.incidents.config import IncidentSettings
from app.service.state import ViewSettings
from app.webhooks.notifier import NotifierSettings


class ServiceSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    tokens: SecretStr = SecretStr("")
    """``name:role:token,...`` in clear (scripts, tests, the demo)."""
    tokens_file: Path | None = None
    """Lines ``name:role:sha256:<hex>`` (production): ``kafka-health serve --hash-token`` prints one."""
    view: ViewSettings = Field(default_factory=ViewSettings)
    webhooks: NotifierSettings = Field(default_factory=NotifierSettings)
    """The webhook notifier (``KAFKA_HEALTH_SERVICE__WEBHOOKS__*``): polling, retries, leader election."""
    actions: ActionSettings = Field(default_factory=ActionSettings)
    """The runbook actions' executors (``KAFKA_HEALTH_SERVICE__ACTIONS__*``): stall detection, progress,
    adoption of unfinished actions."""
    incidents: IncidentSettings = Field(default_factory=IncidentSettings)
    """The incident lane (``KAFKA_HEALTH_SERVICE__INCIDENTS__*``): coalescing, timer, the load lane's
    silence; its rules' settings are ``analytics.rules``."""
