"""Settings of the reference cluster: its own section (``[reference_cluster]`` of the config file,
``KAFKA_HEALTH_REFERENCE_CLUSTER__*``), read by :class:`ReferenceClusterConfig` from the same sources as the
product's settings tree (``app.settings``), which leaves the section to it."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from collectors.metrics.names import Dialect

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
LATEST_IV = 99


def validate_topic_name(name: str) -> str:
    """Kafka's ``Topic.validate``: 1-249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if name in {".", ".."} or not _TOPIC_NAME.fullmatch(name):
        raise ValueError(
            f"illegal topic name {name!r}: use 1-249 characters of a-z, A-Z, 0-9, '.', '_' and '-'"
        )
    return name


class TopicSpec(BaseModel):
    """A topic the reference cluster creates at start-up."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    partitions: Annotated[int, Field(ge=1, le=100_000)]
    replication_factor: Annotated[int, Field(ge=1, le=32)]
    config: dict[str, str] = Field(default_factory=dict)

    _check_name = field_validator("name")(validate_topic_name)

    @classmethod
    def parse(cls, text: str) -> TopicSpec:
        """``NAME:PARTITIONS:RF`` as given to ``--topic``."""
        parts = text.split(":")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise ValueError(f"topic {text!r} is not NAME:PARTITIONS:RF (e.g. orders:6:3)")
        return cls(name=parts[0], partitions=int(parts[1]), replication_factor=int(parts[2]))


DEFAULT_COMMIT_INTERVAL_MS = 5000
"""``auto.commit.interval.ms``'s default."""
_GROUP_NAME = re.compile(r"[^\s:,]{1,249}")


class ConsumerGroupSpec(BaseModel):
    """A simulated group as ``--consumer-group NAME:TOPIC[,TOPIC...]:MEMBERS`` or ``POST /consumer-groups``
    give it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    topics: list[str] = Field(min_length=1)
    members: int = Field(default=1, ge=1, le=1000)
    commit_interval_ms: int = Field(default=DEFAULT_COMMIT_INTERVAL_MS, ge=10, le=3_600_000)
    rate_factor: float = Field(default=1.0, ge=0, le=1000, allow_inf_nan=False)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _GROUP_NAME.fullmatch(value):
            raise ValueError(f"illegal group name {value!r}: 1-249 characters, no spaces, ':' or ','")
        return value

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, value: list[str]) -> list[str]:
        for topic in value:
            validate_topic_name(topic)
        if len(set(value)) != len(value):
            raise ValueError("a topic is named twice")
        return value

    @classmethod
    def parse(cls, text: str) -> ConsumerGroupSpec:
        """``NAME:TOPIC[,TOPIC...]:MEMBERS`` as given to ``--consumer-group``."""
        parts = text.split(":")
        if len(parts) != 3 or not parts[2].isdigit() or not parts[1]:
            raise ValueError(
                f"consumer group {text!r} is not NAME:TOPIC[,TOPIC...]:MEMBERS "
                "(e.g. billing:orders,payments:3)"
            )
        return cls(name=parts[0], topics=parts[1].split(","), members=int(parts[2]))


class TrafficSettings(BaseModel):
    """Simulated client traffic and host resources; rates are per partition before any skew."""

    model_config = ConfigDict(extra="forbid")

    produce_bytes_per_sec: Annotated[float, Field(ge=0)] = 64 * 1024
    message_bytes: Annotated[int, Field(ge=1)] = 1024
    consumer_fanout: Annotated[float, Field(ge=0)] = 2.0
    producer_acks: Literal["0", "1", "all"] = "all"
    initial_log_bytes: Annotated[int, Field(ge=0)] = 8 * 1024 * 1024
    replica_fetch_bytes_per_sec: Annotated[float, Field(gt=0)] = 100 * 1024 * 1024
    """Replication bandwidth of one follower broker when nothing throttles it."""
    slow_follower_ratio: Annotated[float, Field(ge=0, le=1)] = 0.5
    """A 'slow' follower fetches this fraction of the leader's produce rate: it never catches up."""
    cpu_cores: Annotated[int, Field(ge=1)] = 8
    memory_bytes: Annotated[int, Field(ge=1)] = 32 * 1024**3
    disk_bytes_per_sec: Annotated[float, Field(gt=0)] = 400 * 1024 * 1024
    max_fds: Annotated[int, Field(ge=1)] = 1_048_576
    request_capacity_bytes_per_sec: Annotated[float, Field(gt=0)] = 128 * 1024 * 1024
    """Bytes a broker handles per second (produce in, consumer out, replication in and out together) with
    its request handler and network threads fully busy: the busy fraction behind
    ``RequestHandlerAvgIdlePercent``, ``NetworkProcessorAvgIdlePercent`` and the produce latency. The
    default is above the default traffic many times over, and below one follower's un-throttled
    replication (``replica_fetch_bytes_per_sec``) plus its leader's share, so that a reassignment without
    a throttle shows."""
    produce_p99_ms: Annotated[float, Field(gt=0)] = 5.0
    """The Produce request's 99th percentile ``TotalTimeMs`` of an idle broker; it rises as
    ``produce_p99_ms / (1 - busy)`` (a queue's waiting time), up to a cap."""
    signal_smoothing_s: Annotated[float, Field(gt=0)] = 60.0
    """Time constant of the busy fraction's exponential smoothing: 60 s as Kafka's one-minute rates;
    tests shorten it so that the signals follow the load within seconds."""


class ReferenceClusterSettings(BaseModel):
    """What the simulated brokers are and how their controller behaves (Kafka's defaults unless said)."""

    model_config = ConfigDict(extra="forbid")

    brokers: Annotated[int, Field(ge=1, le=1000)] = 3
    racks: list[str] = Field(default_factory=list)
    """Racks given to brokers in turn (broker i gets racks[i % len(racks)]); empty = no racks."""
    topics: list[TopicSpec] = Field(default_factory=list)
    consumer_groups: list[ConsumerGroupSpec] = Field(default_factory=list)
    """Simulated consumer groups started once the topics are online (``--consumer-group``)."""
    inter_broker_protocol_version: str = "3.9"
    """Decides what the brokers write: <2.4 topic znode v1, 2.4-2.7 v2, 2.8+ v3 with topic_id; <2.7 ISR
    changes written by the partition leaders with /isr_change_notification, 2.7+ through the controller
    (AlterPartition); 3.2+ ``leader_recovery_state`` after an unclean election."""
    broker_registration_version: Literal[1, 2, 3, 4, 5] = 5
    controller_znode_version: Literal[1, 2] = 2
    host: str = "127.0.0.1"
    listener_port_base: Annotated[int, Field(ge=0, le=65535)] = 19092
    """Broker i advertises and listens on ``PLAINTEXT://host:listener_port_base+i`` (with
    ``address_per_broker``: ``listener_port_base`` on its own address), speaking Kafka's protocol
    (docs/reference-cluster.md); a port that is taken falls back to a free one, and the registration
    advertises the port the broker listens on. 0: free ports."""
    metrics_ports: list[int] = Field(default_factory=list)
    """Ports of the brokers' /metrics endpoints in id order; missing entries pick a free port."""
    address_per_broker: bool = False
    """Broker i lives on its own loopback address 127.0.0.(i+1) (Linux routes all of 127/8 to loopback),
    with the same listener port and metrics port on every broker, as on real hosts: then a metrics URL
    template such as ``http://{host}:7071/metrics`` finds every broker."""
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 0
    """With ``address_per_broker``: the brokers' common metrics port (0: one that is free on all)."""
    metrics_dialect: Dialect = "jmx-exporter-example"
    """The jmx_exporter rule file whose names the brokers' ``/metrics`` serve (docs/collectors.md
    "Exporter dialects")."""
    broker_metrics_dialects: dict[int, Dialect] = Field(default_factory=dict)
    """Broker id -> its own dialect (a fleet whose brokers differ); wins over ``metrics_dialect``."""
    zookeeper_session_timeout_ms: Annotated[int, Field(ge=1000)] = 18_000
    replica_lag_time_max_ms: Annotated[int, Field(ge=100)] = 30_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: Annotated[float, Field(gt=0)] = 300.0
    leader_imbalance_per_broker_percentage: Annotated[int, Field(ge=0, le=100)] = 10
    unclean_leader_election_enable: bool = False
    min_insync_replicas: Annotated[int, Field(ge=1)] = 1
    log_dirs_per_broker: Annotated[int, Field(ge=1, le=16)] = 2
    log_dir_size_bytes: Annotated[int, Field(ge=1024**2)] = 100 * 1024**3
    """Size of the filesystem each log dir is mounted on (``/var/lib/kafka/data-<n>``), as node_exporter's
    ``node_filesystem_size_bytes`` shows it."""
    log_dir_base_used_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.2
    """Share of each log dir's filesystem taken by other files from the start (used bytes are this plus the
    logs of the replicas in the dir); ``POST /brokers/{id}/log-dirs/{n}/fill`` changes it."""
    log_retention_bytes: Annotated[int, Field(ge=-1)] = 1024**3
    """``log.retention.bytes``, the default of the topics' ``retention.bytes``: a log longer than this plus
    its oldest segment drops that segment. Kafka's default is -1 (no limit); 1 GiB here, so that the
    disks of a long-running demo stay level (a sawtooth between 1 GiB and 1 GiB + a segment)."""
    log_segment_bytes: Annotated[int, Field(ge=1024)] = 1024**3
    """``log.segment.bytes`` (Kafka's default, 1 GiB), the default of the topics' ``segment.bytes``."""
    tick_ms: Annotated[int, Field(ge=10, le=5000)] = 100
    placement_seed: int | None = None
    """Seed of the random start and shift of Kafka's replica placement (None: random, as Kafka)."""
    traffic: TrafficSettings = Field(default_factory=TrafficSettings)

    @model_validator(mode="after")
    def _check_addresses(self) -> ReferenceClusterSettings:
        if self.address_per_broker and self.brokers > 254:
            raise ValueError("address_per_broker gives 127.0.0.1-127.0.0.254: at most 254 brokers")
        return self

    def broker_host(self, broker_id: int) -> str:
        return f"127.0.0.{broker_id + 1}" if self.address_per_broker else self.host

    def listener_port(self, broker_id: int) -> int:
        """The port broker ``broker_id`` is configured to listen on (0: a free one)."""
        if self.address_per_broker or not self.listener_port_base:
            return self.listener_port_base
        return self.listener_port_base + broker_id

    def mountpoint(self, log_dir: int) -> str:
        """Where log dir ``log_dir`` (0-based) of every broker is mounted."""
        return f"/var/lib/kafka/data-{log_dir}"

    @field_validator("inter_broker_protocol_version")
    @classmethod
    def _check_ibp(cls, value: str) -> str:
        parse_version(value)
        return value

    @model_validator(mode="after")
    def _check_topics(self) -> ReferenceClusterSettings:
        names = [t.name for t in self.topics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"topics given twice: {', '.join(duplicates)}")
        groups = [g.name for g in self.consumer_groups]
        twice = sorted({n for n in groups if groups.count(n) > 1})
        if twice:
            raise ValueError(f"consumer groups given twice: {', '.join(twice)}")
        unknown = sorted({t for g in self.consumer_groups for t in g.topics} - set(names))
        if unknown:
            raise ValueError(
                f"consumer groups read topics that are not created at start-up: {', '.join(unknown)}"
            )
        for topic in self.topics:
            if topic.replication_factor > self.brokers:
                raise ValueError(
                    f"topic {topic.name!r}: replication factor {topic.replication_factor} "
                    f"larger than available brokers: {self.brokers}"
                )
        return self

    @property
    def ibp(self) -> tuple[int, int, int]:
        """(major, minor, IV); a version without ``-IVn`` means that release's latest IV."""
        major, minor = parse_version(self.inter_broker_protocol_version)
        iv = re.search(r"-IV(\d+)$", self.inter_broker_protocol_version)
        return major, minor, int(iv.group(1)) if iv else LATEST_IV

    @property
    def alter_partition_enabled(self) -> bool:
        """AlterIsr arrived with IBP 2.7-IV2 (``isAlterPartitionSupported``)."""
        return self.ibp >= (2, 7, 2)

    @property
    def leader_recovery_supported(self) -> bool:
        return self.ibp >= (3, 2)

    @property
    def topic_znode_version(self) -> int:
        if self.ibp >= (2, 8):
            return 3
        return 2 if self.ibp >= (2, 4) else 1

    def rack_of(self, broker_id: int) -> str | None:
        return self.racks[broker_id % len(self.racks)] if self.racks else None


class ReferenceClusterConfig(BaseSettings):
    """The reference cluster's section from ``KAFKA_HEALTH_REFERENCE_CLUSTER__*`` (nested with ``__``) over
    the config file's ``[reference_cluster]`` (``KAFKA_HEALTH_CONFIG``) over defaults: what
    ``kafka-health reference-cluster`` starts from. A bad key or value inside the section is an error
    named ``reference_cluster.<field>``; the file's other sections are the product's (a section that is
    neither is an error, as for the product's commands)."""

    model_config = SettingsConfigDict(
        env_prefix="KAFKA_HEALTH_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    reference_cluster: ReferenceClusterSettings = Field(default_factory=ReferenceClusterSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The product's settings tree, for its sources and its sections' names; imported here, when the
        # section is read, so that the simulator itself does not load the product's settings.
        from app.settings import Settings, config_sources

        return config_sources(settings_cls, init_settings, env_settings, leave=Settings.model_fields)


def load_reference_cluster_settings() -> ReferenceClusterSettings:
    """The reference cluster's settings from the environment and the config file; raises pydantic's
    ValidationError (naming ``reference_cluster.<field>``) or ValueError (the config file)."""
    return ReferenceClusterConfig().reference_cluster


def parse_version(text: str) -> tuple[int, int]:
    """``"2.8"`` or ``"2.8-IV1"`` or ``"3.9.0"`` -> (major, minor)."""
    match = re.match(r"^(\d+)\.(\d+)", text)
    if not match:
        raise ValueError(f"inter.broker.protocol.version {text!r} is not MAJOR.MINOR (e.g. 2.8 or 3.9)")
    version = (int(match.group(1)), int(match.group(2)))
    if not (2, 0) <= version < (4, 0):
        raise ValueError(f"inter.broker.protocol.version {text!r}: ZooKeeper mode is Kafka 2.0-3.9")
    return version
