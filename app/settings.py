"""The one settings tree of kafka-health, validated at start-up.

Values come from (highest first) command-line flags, ``KAFKA_HEALTH_*`` environment variables (nested
with ``__``, e.g. ``KAFKA_HEALTH_ZOOKEEPER__CONNECT=zk1:2181/kafka``), a TOML config file named by
``KAFKA_HEALTH_CONFIG`` (the same tree: ``[zookeeper] connect = "zk1:2181/kafka"``) and defaults. Each
module receives its own section and never reads the environment itself.

The simulator's section (``[reference_cluster]``, ``KAFKA_HEALTH_REFERENCE_CLUSTER__*``) shares the sources
but not the tree: ``kafka-health reference-cluster`` reads it itself
(``app.embedded.reference_cluster.config.ReferenceClusterConfig``, through :func:`config_sources`), and
:class:`Settings` leaves it alone (:data:`NOT_THE_PRODUCTS`), so that the product never imports the
simulator.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, SecretStr, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from analytics.config import AnalyticsSettings
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from collectors.consumers.config import KafkaSettings
from collectors.kafka import zkclient
from collectors.kafka.zkclient import ZooKeeperSecurity
from collectors.kafka.zkdata import parse_connect_string
from collectors.metrics.config import MetricsSettings
from collectors.sampler import SamplerSettings
from collectors.zookeeper.collector import (
    DEFAULT_CONNECTIONS,
    DEFAULT_SESSION_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
)
from collectors.zookeeper.first_scan import CollectorSpec

NO_ZOOKEEPER = (
    "no ZooKeeper: give --zookeeper HOST:PORT[/chroot] or KAFKA_HEALTH_ZOOKEEPER__CONNECT "
    "(or --cluster NAME=HOST:PORT[/chroot] per cluster)"
)
CLUSTER_NAME = re.compile(r"^(?!.*__)[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$")
"""A watched cluster's name: it is a URL path segment, a Prometheus label value and the store's key."""
CLUSTER_NAME_RULE = (
    "1-63 lower-case letters, digits, '-' or '_', starting and ending with a letter or digit, no '__' "
    "(it separates the levels of KAFKA_HEALTH_CLUSTERS__NAME__...)"
)


CLIENT_PROPERTY: Final = "zookeeper client property"
"""Marks a :class:`ZooKeeperSettings` field that is a key of Kafka's ZooKeeper client properties."""


class ZooKeeperSettings(BaseModel):
    """Where the cluster's ZooKeeper is and how the collector talks to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect: str | None = None
    """``HOST:PORT[,HOST:PORT...][/chroot]``; None: the embedded reference cluster (demo) or a flag."""
    connections: Annotated[int, Field(ge=1, le=64)] = DEFAULT_CONNECTIONS
    """Sessions the full scan is spread over (a 200k-partition scan needs several)."""
    session_timeout_s: Annotated[float, Field(gt=0, le=600)] = DEFAULT_SESSION_TIMEOUT_S
    start_timeout_s: Annotated[float, Field(gt=0)] = DEFAULT_START_TIMEOUT_S
    """How long the first full scan may take before start-up fails."""

    # A secured ZooKeeper (collectors/kafka/zkclient.py, docs/collectors.md "Secured ZooKeeper"): a
    # Kafka-style client properties file, and each of its keys as a field of its own (Kafka's name without
    # "zookeeper.", dots as underscores: KAFKA_HEALTH_ZOOKEEPER__SSL_CLIENT_ENABLE=true; marked
    # CLIENT_PROPERTY), which wins over the file.
    client_config: Path | None = None
    """Kafka's ZooKeeper client properties (``--zk-config``; what Kafka's tools take as
    ``--zk-tls-config-file``; a broker's ``server.properties`` works too)."""
    ssl_client_enable: Annotated[bool | None, CLIENT_PROPERTY] = None
    ssl_truststore_location: Annotated[str | None, CLIENT_PROPERTY] = None
    ssl_truststore_type: Annotated[str | None, CLIENT_PROPERTY] = None
    ssl_keystore_location: Annotated[str | None, CLIENT_PROPERTY] = None
    ssl_keystore_type: Annotated[str | None, CLIENT_PROPERTY] = None
    ssl_keystore_password: Annotated[SecretStr | None, CLIENT_PROPERTY] = None
    ssl_endpoint_identification_algorithm: Annotated[str | None, CLIENT_PROPERTY] = None
    sasl_jaas_config: Annotated[str | None, CLIENT_PROPERTY] = None
    """The JAAS file Kafka names with ``-Djava.security.auth.login.config``."""
    sasl_clientconfig: Annotated[str | None, CLIENT_PROPERTY] = None
    set_acl: Annotated[bool | None, CLIENT_PROPERTY] = None
    auth_digest: Annotated[SecretStr | None, CLIENT_PROPERTY] = None
    """``user:password`` for ZooKeeper's digest scheme (``addauth digest``)."""

    @model_validator(mode="after")
    def _security_is_usable(self) -> ZooKeeperSettings:
        self.security()  # a missing file or an unsupported store type is bad input now
        return self

    def security(self) -> ZooKeeperSecurity:
        """The credentials and TLS settings every ZooKeeper session uses; raises ValueError."""
        overrides: dict[str, str] = {}
        for name in _SECURITY_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, bool):
                value = str(value).lower()
            key = (
                zkclient.JAAS_CONFIG if name == "sasl_jaas_config" else "zookeeper." + name.replace("_", ".")
            )
            overrides[key] = str(value)
        if self.client_config is not None:
            return zkclient.security_from_file(self.client_config.expanduser(), overrides)
        return zkclient.security_from_properties(overrides)

    def collector_spec(self) -> CollectorSpec:
        """How a collector (and every other session on this ZooKeeper) connects; needs ``connect``."""
        if self.connect is None:
            raise ValueError(NO_ZOOKEEPER)
        return CollectorSpec(
            self.connect,
            connections=self.connections,
            session_timeout_s=self.session_timeout_s,
            start_timeout_s=self.start_timeout_s,
            security=self.security(),
        )


_SECURITY_FIELDS: Final = tuple(
    name for name, field in ZooKeeperSettings.model_fields.items() if CLIENT_PROPERTY in field.metadata
)


class _ZooKeeperOverlay(BaseModel):
    """What :class:`ClusterZooKeeperSettings` adds to its fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def over(self, shared: ZooKeeperSettings) -> ZooKeeperSettings:
        """The cluster's fields over ``shared``'s (whose ``connect`` is never inherited); raises
        ValueError (a missing file, a bad store type)."""
        own = {name: value for name, value in self if value is not None}
        return ZooKeeperSettings.model_validate(shared.model_dump(exclude={"connect"}) | own)


def _overlay_of(shared: type[BaseModel]) -> type[_ZooKeeperOverlay]:
    """A model with every field of ``shared`` (type, constraints), each optional and None until set."""
    fields: dict[str, Any] = {}
    for name, field in shared.model_fields.items():
        annotation: Any = field.annotation
        fields[name] = (annotation | None, FieldInfo.merge_field_infos(field, default=None))
    return create_model(
        "ClusterZooKeeperSettings",
        __base__=_ZooKeeperOverlay,
        __module__=__name__,
        __doc__=(
            "A watched cluster's ZooKeeper section: ZooKeeperSettings' fields, each None until set, so "
            "that what a cluster leaves out comes from the shared [zookeeper] section (a dump of the "
            "settings validated again keeps it that way: there are no defaults here to win over the "
            "shared values)."
        ),
        **fields,
    )


if TYPE_CHECKING:
    ClusterZooKeeperSettings = _ZooKeeperOverlay
else:
    ClusterZooKeeperSettings = _overlay_of(ZooKeeperSettings)


class ClusterSettings(BaseModel):
    """One cluster of a deployment that watches several (``[clusters.NAME]``,
    ``KAFKA_HEALTH_CLUSTERS__NAME__ZOOKEEPER__CONNECT``, ``--cluster NAME=ZK[,TEMPLATE]``). Its ZooKeeper
    fields override the top-level ``[zookeeper]`` section's (credentials, timeouts), and its ``metrics``
    replaces the top-level ``[metrics]`` when given."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    zookeeper: ClusterZooKeeperSettings = Field(default_factory=ClusterZooKeeperSettings)
    metrics: MetricsSettings | None = None
    kafka: KafkaSettings | None = None
    """Its Kafka clients' section (consumer lag); replaces the top-level ``[kafka]`` when given."""


@dataclass(frozen=True, slots=True)
class WatchedCluster:
    """A cluster the deployment watches, with its settings resolved."""

    name: str | None
    """Its name (``--cluster NAME=...``); None: the one cluster of a single-cluster deployment, which is
    known by its cluster id (``/cluster/id``)."""
    zookeeper: ZooKeeperSettings
    metrics: MetricsSettings | None
    kafka: KafkaSettings | None = None
    """How its brokers are reached over Kafka's protocol (consumer lag); None or disabled: not at all."""

    @property
    def connect(self) -> str:
        assert self.zookeeper.connect is not None
        return self.zookeeper.connect

    def label(self) -> str:
        """How messages name it: its name, else its connect string."""
        return self.name if self.name is not None else self.connect

    def spec(self) -> ClusterSpec:
        """The cluster as the service watches it."""
        kafka = self.kafka if self.kafka is not None and self.kafka.enabled else None
        return ClusterSpec(self.zookeeper.collector_spec(), name=self.name, metrics=self.metrics, kafka=kafka)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="KAFKA_HEALTH_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    zookeeper: ZooKeeperSettings = Field(default_factory=ZooKeeperSettings)
    metrics: MetricsSettings | None = None
    """Where the brokers' metrics are (a URL template or a map); None: ZooKeeper only."""
    sampler: SamplerSettings = Field(default_factory=SamplerSettings)
    analytics: AnalyticsSettings = Field(default_factory=AnalyticsSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    """The brokers over Kafka's protocol: the consumer-lag collector (``KAFKA_HEALTH_KAFKA__*``)."""
    clusters: dict[str, ClusterSettings] = Field(default_factory=dict)
    """Several clusters watched by one deployment, by name; empty: the one cluster of ``zookeeper``."""

    @model_validator(mode="after")
    def _clusters_are_usable(self) -> Settings:
        if not self.clusters:
            return self
        if self.zookeeper.connect is not None:
            raise ValueError(
                "zookeeper.connect and clusters are both set: give one cluster's ZooKeeper "
                "(--zookeeper) or several named clusters (--cluster NAME=ZK), not both"
            )
        for name in self.clusters:
            if not CLUSTER_NAME.match(name):
                raise ValueError(f"clusters.{name}: not a cluster name ({CLUSTER_NAME_RULE})")
        self.watched()  # each cluster's merged ZooKeeper section is valid
        return self

    def watched(self) -> list[WatchedCluster]:
        """The clusters this deployment watches: each named one (sorted by name), else the one of
        ``zookeeper`` (whose ``connect`` may still be None: the command checks it). Raises ValueError."""
        if not self.clusters:
            return [WatchedCluster(None, self.zookeeper, self.metrics, self.kafka)]
        watched = []
        for name, cluster in sorted(self.clusters.items()):
            try:
                zookeeper = cluster.zookeeper.over(self.zookeeper)
            except ValueError as exc:
                raise ValueError(f"clusters.{name}.zookeeper: {exc}") from None
            if zookeeper.connect is None:
                raise ValueError(
                    f"clusters.{name}: no ZooKeeper (--cluster {name}=HOST:PORT[/chroot] or "
                    f"KAFKA_HEALTH_CLUSTERS__{name.upper()}__ZOOKEEPER__CONNECT)"
                )
            metrics = cluster.metrics if cluster.metrics is not None else self.metrics
            kafka = cluster.kafka if cluster.kafka is not None else self.kafka
            watched.append(WatchedCluster(name, zookeeper, metrics, kafka))
        return watched

    def require_watched(self) -> list[WatchedCluster]:
        """:meth:`watched`, each with a ZooKeeper connect string that parses: what ``serve`` and
        ``collect`` need before they start. Raises ValueError naming the cluster."""
        watched = self.watched()
        for cluster in watched:
            if cluster.zookeeper.connect is None:
                raise ValueError(NO_ZOOKEEPER)
            try:
                parse_connect_string(cluster.connect)
            except ValueError as exc:
                if cluster.name is None:
                    raise
                raise ValueError(f"cluster {cluster.name}: {str(exc).splitlines()[0]}") from None
        return watched

    def service_spec(self) -> ServiceSpec:
        """The service these settings describe (``serve``): its settings, each watched cluster, the store
        and the analytics rules its incident lanes judge with. Raises ValueError."""
        return ServiceSpec(
            self.service,
            [cluster.spec() for cluster in self.require_watched()],
            store_url=self.analytics.store_url,
            rules=self.analytics.rules,
            load_window_s=self.analytics.window_s,
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return config_sources(settings_cls, init_settings, env_settings, leave=NOT_THE_PRODUCTS)


CONFIG_ENV = "KAFKA_HEALTH_CONFIG"
NOT_THE_PRODUCTS: Final = frozenset({"reference_cluster"})
"""Sections of the config file that are not the product's: the reference cluster's, which
``kafka-health reference-cluster`` reads itself. :class:`Settings` leaves them alone (its variables,
``KAFKA_HEALTH_REFERENCE_CLUSTER__*``, name no field of the tree, so the environment source passes them
by); any other section it does not know is an error."""


class ConfigFileSource(TomlConfigSettingsSource):
    """The config file's sections but those in ``leave``: the sections another settings class reads."""

    def __init__(self, settings_cls: type[BaseSettings], file: Path, leave: Collection[str]) -> None:
        super().__init__(settings_cls, toml_file=file)
        self._leave = frozenset(leave)

    def __call__(self) -> dict[str, Any]:
        return {name: value for name, value in super().__call__().items() if name not in self._leave}


def config_sources(
    settings_cls: type[BaseSettings],
    init_settings: PydanticBaseSettingsSource,
    env_settings: PydanticBaseSettingsSource,
    *,
    leave: Collection[str],
) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources of a settings class read from ``KAFKA_HEALTH_*`` (highest first): its arguments (the
    flags), the environment and the TOML file ``KAFKA_HEALTH_CONFIG`` names, without the file's sections in
    ``leave`` (another class's). Raises ValueError when that file is missing or not TOML."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return init_settings, env_settings
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"{CONFIG_ENV}={path}: no such file")
    try:
        tomllib.loads(file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{CONFIG_ENV}={path}: not a readable TOML file: {exc}") from None
    return init_settings, env_settings, ConfigFileSource(settings_cls, file, leave)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment with ``overrides`` (from flags) on top; raises pydantic's
    ValidationError, whose message names each bad field."""
    return Settings(**overrides)
