"""The consumer-lag collector's section of the settings tree (``kafka:`` in the root, env prefix
``KAFKA_HEALTH_KAFKA__``) and Kafka's client properties (``--command-config FILE``), pure."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import NoDecode

from collectors.consumers.verdicts import Thresholds
from collectors.metrics.endpoints import normalise_listener

DEFAULT_INTERVAL_S = 10.0


class ThresholdSettings(BaseModel):
    """The verdicts' thresholds; in ``groups`` every field is optional and overrides the global one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lag_warn_s: Annotated[float | None, Field(gt=0)] = None
    lagging_rounds: Annotated[int | None, Field(ge=1, le=100)] = None
    stopped_after_s: Annotated[float | None, Field(gt=0)] = None
    stopped_min_s: Annotated[float | None, Field(gt=0)] = None
    stopped_commit_intervals: Annotated[float | None, Field(gt=0)] = None

    def over(self, base: Thresholds) -> Thresholds:
        changes = {k: v for k, v in self.model_dump().items() if v is not None}
        return Thresholds(**{**_thresholds_dict(base), **changes})


def _thresholds_dict(t: Thresholds) -> dict[str, Any]:
    return {name: getattr(t, name) for name in Thresholds.__dataclass_fields__}


def _check_regex(value: str, what: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{what} {value!r} is not a regular expression: {exc}") from None
    return value


class KafkaSettings(BaseModel):
    """How kafka-health reaches the brokers over Kafka's protocol, and the consumer-lag collector."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """Collect consumer lag (``serve``; ``KAFKA_HEALTH_KAFKA__ENABLED``): on by default, over the brokers'
    Kafka listeners; brokers that do not answer are an error of the round, never fatal."""
    listener: str | None = None
    """The brokers' listener to bootstrap from (``KAFKA_HEALTH_KAFKA__LISTENER``, ``--kafka-listener``);
    default: the listener named PLAINTEXT, else each broker's first endpoint."""
    bootstrap_servers: str | None = None
    """``HOST:PORT[,...]`` (``--bootstrap-server``); wins over the registered endpoints."""
    client_config: str | None = None
    """A file of Kafka client properties (``--command-config``), see :func:`client_kwargs`."""
    interval_s: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_INTERVAL_S
    include: Annotated[tuple[str, ...], NoDecode] = ()
    """Group regexes (full match); empty: every group (``KAFKA_HEALTH_KAFKA__INCLUDE``: ``a,b`` or a JSON
    list)."""
    exclude: Annotated[tuple[str, ...], NoDecode] = ()
    exporter_compatible_metrics: bool = False
    """Also kafka_exporter's metric names on /metrics."""
    thresholds: ThresholdSettings = ThresholdSettings()
    groups: dict[str, ThresholdSettings] = Field(default_factory=dict)
    """Group regex (full match) -> overrides; the first that matches wins."""
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0

    @field_validator("listener")
    @classmethod
    def _check_listener(cls, value: str | None) -> str | None:
        return None if value is None else normalise_listener(value)

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap(cls, value: str | None) -> str | None:
        return None if value is None else ",".join(parse_bootstrap(value))

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            if value.strip().startswith("["):
                try:
                    return tuple(json.loads(value))
                except (ValueError, TypeError):
                    raise ValueError(f"not a JSON list of group regexes: {value!r}") from None
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("include", "exclude")
    @classmethod
    def _check_regexes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_regex(v, "group regex") for v in value)

    @field_validator("groups")
    @classmethod
    def _check_group_keys(cls, value: dict[str, ThresholdSettings]) -> dict[str, ThresholdSettings]:
        for key in value:
            _check_regex(key, "group regex")
        return value

    def wants(self, group: str) -> bool:
        """Included (no include regex, or one matches) and not excluded."""
        if self.include and not any(re.fullmatch(r, group) for r in self.include):
            return False
        return not any(re.fullmatch(r, group) for r in self.exclude)

    def thresholds_for(self, group: str) -> Thresholds:
        base = self.thresholds.over(Thresholds())
        for pattern, overrides in self.groups.items():
            if re.fullmatch(pattern, group):
                return overrides.over(base)
        return base


def parse_bootstrap(text: str) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` (IPv6 hosts in brackets), or ValueError."""
    servers = [part.strip() for part in text.split(",") if part.strip()]
    if not servers:
        raise ValueError("--bootstrap-server: expected HOST:PORT[,HOST:PORT...]")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--bootstrap-server: {server!r} is not HOST:PORT")
    return servers


# --- Kafka's client properties -------------------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """Java's ``.properties`` format as Kafka's tools read it: ``key=value`` or ``key: value`` or
    ``key value``, ``#``/``!`` comments, a trailing backslash continues the line, ``\\`` escapes."""
    result: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key, value = _split_property(line)
        result[key] = value
    return result


def _split_property(line: str) -> tuple[str, str]:
    key: list[str] = []
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            key.append(_unescape(line[i + 1]))
            i += 2
            continue
        if c in "=: \t\f":
            break
        key.append(c)
        i += 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    value: list[str] = []
    j = 0
    while j < len(rest):
        if rest[j] == "\\" and j + 1 < len(rest):
            value.append(_unescape(rest[j + 1]))
            j += 2
            continue
        value.append(rest[j])
        j += 1
    return "".join(key), "".join(value)


def _unescape(c: str) -> str:
    return {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}.get(c, c)


_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<opts>.*?);?\s*$", re.S
)
_JAAS_OPTION = re.compile(r'(?P<key>[\w.-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))')

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``sasl.jaas.config``'s one login module: (module class, options), or ValueError."""
    match = _JAAS.match(text)
    if match is None:
        raise ValueError(
            'sasl.jaas.config: expected \'<LoginModule> required username="..." password="...";\''
        )
    options = {
        m["key"]: (re.sub(r"\\(.)", r"\1", m["quoted"]) if m["quoted"] is not None else m["bare"])
        for m in _JAAS_OPTION.finditer(match["opts"])
    }
    return match["module"], options


SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# Security keys that change nothing kafka-python needs to know (or are defaults it shares).
_IGNORED = {"ssl.protocol", "ssl.enabled.protocols"}


def _default_store_type(props: dict[str, str], store: str, inline: str) -> str:
    """Kafka's default store type is JKS; PEM contents, or a location named like a PEM file, are PEM."""
    if f"ssl.{store}.{inline}" in props:
        return "PEM"
    location = props.get(f"ssl.{store}.location")
    if location is None:
        return ""
    return "PEM" if location.lower().endswith((".pem", ".crt", ".cer", ".key")) else "JKS"


def client_kwargs(props: dict[str, str]) -> dict[str, Any]:
    """kafka-python's keyword arguments for Kafka's client properties; ValueError (one line, naming the
    key) for anything kafka-python cannot do. PEM contents (``ssl.truststore.certificates``,
    ``ssl.keystore.certificate.chain``, ``ssl.keystore.key``) come back under ``ssl_pem_*`` keys: the
    edge (:func:`collectors.consumers.client.ssl_context`) turns them into an ``ssl_context``."""
    props = {k.strip(): v.strip() for k, v in props.items()}
    kwargs: dict[str, Any] = {}
    protocol = props.pop("security.protocol", "PLAINTEXT").upper()
    if protocol not in SUPPORTED_PROTOCOLS:
        raise ValueError(f"security.protocol: {protocol!r} is not one of {', '.join(SUPPORTED_PROTOCOLS)}")
    kwargs["security_protocol"] = protocol
    sasl = protocol.startswith("SASL_")
    ssl_on = protocol.endswith("SSL")

    mechanism = props.pop("sasl.mechanism", "GSSAPI" if sasl else "").upper()
    jaas = props.pop("sasl.jaas.config", None)
    if sasl:
        if mechanism not in _LOGIN_MODULES:
            raise ValueError(
                f"sasl.mechanism: {mechanism} is not supported (kafka-health speaks PLAIN, SCRAM-SHA-256 "
                "and SCRAM-SHA-512)"
            )
        if jaas is None:
            raise ValueError(f"sasl.jaas.config: required for sasl.mechanism={mechanism}")
        module, options = parse_jaas(jaas)
        if module != _LOGIN_MODULES[mechanism]:
            raise ValueError(f"sasl.jaas.config: {module} is not the login module of {mechanism}")
        for option in ("username", "password"):
            if option not in options:
                raise ValueError(f'sasl.jaas.config: no {option}="..."')
        kwargs.update(
            sasl_mechanism=mechanism,
            sasl_plain_username=options["username"],
            sasl_plain_password=options["password"],
        )

    ssl_keys = [k for k in props if k.startswith("ssl.")]
    if ssl_on:
        for store, inline in (("truststore", "certificates"), ("keystore", "key")):
            kind = props.pop(f"ssl.{store}.type", "").upper() or _default_store_type(props, store, inline)
            if kind not in ("", "PEM"):
                raise ValueError(
                    f"ssl.{store}.type: {kind} stores are not supported (convert the store to PEM and set "
                    f"ssl.{store}.type=PEM)"
                )
        if "ssl.truststore.location" in props:
            kwargs["ssl_cafile"] = props.pop("ssl.truststore.location")
        if "ssl.truststore.certificates" in props:
            kwargs["ssl_pem_cadata"] = props.pop("ssl.truststore.certificates")
        if "ssl.keystore.location" in props:
            location = props.pop("ssl.keystore.location")
            kwargs["ssl_certfile"] = location
            kwargs["ssl_keyfile"] = location
        chain = props.pop("ssl.keystore.certificate.chain", None)
        key = props.pop("ssl.keystore.key", None)
        if (chain is None) != (key is None):
            missing = "ssl.keystore.key" if key is None else "ssl.keystore.certificate.chain"
            raise ValueError(f"{missing}: required with the other of the PEM key store's two keys")
        if chain is not None:
            kwargs["ssl_pem_certificate_chain"] = chain
            kwargs["ssl_pem_key"] = key
        password = props.pop("ssl.key.password", None) or props.pop("ssl.keystore.password", None)
        props.pop("ssl.keystore.password", None)
        props.pop("ssl.truststore.password", None)
        if password is not None:
            kwargs["ssl_password"] = password
        algorithm = props.pop("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("", "https"):
            raise ValueError(f"ssl.endpoint.identification.algorithm: {algorithm!r} is not https or empty")
        kwargs["ssl_check_hostname"] = algorithm == "https"
    else:
        for key_name in ssl_keys:
            props.pop(key_name)  # Kafka ignores ssl.* without an SSL protocol
    for key_name in props:
        if key_name in _IGNORED or not key_name.startswith(("sasl.", "ssl.", "security.")):
            continue  # a property of no security meaning (group.id, ...): nothing to do
        raise ValueError(f"{key_name}: not a client property kafka-health supports")
    return kwargs
