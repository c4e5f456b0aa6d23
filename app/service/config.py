"""``kafka-health serve``'s section of the settings tree (``KAFKA_HEALTH_SERVICE__*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from app.actions.config import ActionSettings
from app.incidents.config import IncidentSettings
from app.retention.config import RetentionSettings
from app.service.limits import DEFAULT_BODY_BYTES, MAX_BODY_BYTES, MIN_BODY_BYTES
from app.service.state import ViewSettings
from app.webhooks.notifier import NotifierSettings


class ServiceSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    tls_cert: Path | None = None
    """PEM certificate (chain) to serve HTTPS with (``kafka-health serve --tls-cert``); with ``tls_key``.
    Without both the service speaks plain HTTP: keep it on loopback, or put a TLS proxy in front."""
    tls_key: Path | None = None
    """PEM private key of ``tls_cert``, unencrypted (readable by the service's user only)."""
    tokens: SecretStr = SecretStr("")
    """``name:role:token,...`` in clear (scripts, tests, the demo)."""
    max_body_bytes: Annotated[int, Field(ge=MIN_BODY_BYTES, le=MAX_BODY_BYTES)] = DEFAULT_BODY_BYTES
    """The largest request body (``KAFKA_HEALTH_SERVICE__MAX_BODY_BYTES``): a larger one is a 413 before it
    is read (:mod:`app.service.limits`). 1 MiB is ZooKeeper's default ``jute.maxbuffer``, the most one
    reassignment znode may hold when Kafka's own tool writes it; raise it to send more at once."""
    tokens_file: Path | None = None
    """Lines ``name:role:sha256:<hex>`` (production): ``kafka-health serve --hash-token`` prints one."""
    wait_for_cluster: bool = False
    """``serve --wait-for-cluster``: start although the connect string's chroot holds no Kafka cluster yet
    (not ready, ``/readyz`` 503 saying so, nothing written into ZooKeeper), and become ready once one
    appears there. Off: such a chroot (most often a typo) fails the start-up (exit 1), as ``describe``."""
    view: ViewSettings = Field(default_factory=ViewSettings)
    webhooks: NotifierSettings = Field(default_factory=NotifierSettings)
    """The webhook notifier (``KAFKA_HEALTH_SERVICE__WEBHOOKS__*``): polling, retries, leader election."""
    actions: ActionSettings = Field(default_factory=ActionSettings)
    """The runbook actions' executors (``KAFKA_HEALTH_SERVICE__ACTIONS__*``): stall detection, progress,
    adoption of unfinished actions."""
    incidents: IncidentSettings = Field(default_factory=IncidentSettings)
    """The incident lane (``KAFKA_HEALTH_SERVICE__INCIDENTS__*``): coalescing, timer, the load lane's
    silence; its rules' settings are ``analytics.rules``."""
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    """How long the store keeps each table's rows (``KAFKA_HEALTH_SERVICE__RETENTION__*``, e.g.
    ``..._LOAD_WINDOWS=7d``), pruned in the background by the leader."""

    @model_validator(mode="after")
    def _tls_pair(self) -> ServiceSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both tls_cert and tls_key (--tls-cert and --tls-key)")
        return self

    @model_validator(mode="after")
    def _outbox_outlives_horizon(self) -> ServiceSettings:
        kept, horizon = self.retention.webhook_deliveries, self.webhooks.horizon_s
        if kept and kept < horizon + 3600:
            raise ValueError(
                f"retention.webhook_deliveries ({kept:g} s) must exceed webhooks.horizon_s ({horizon:g} s) "
                "by an hour, else a pruned event still inside the horizon would be sent again"
            )
        return self

    @property
    def scheme(self) -> str:
        """``https`` with a certificate, else ``http``."""
        return "http" if self.tls_cert is None else "https"
