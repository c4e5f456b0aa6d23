"""Kafka's ZooKeeper client configuration (``ZKClientConfig``) and the one factory of kazoo sessions: how
kafka-health authenticates to a secured ZooKeeper.

Production ZooKeepers of Kafka clusters are secured in three ways, often together:

- **SASL** (DIGEST-MD5): Kafka reads a JAAS file named by the JVM property
  ``java.security.auth.login.config`` and logs in with its ``Client`` section (the section's name is the
  ``zookeeper.sasl.clientconfig`` property; the server's service name ``zookeeper.sasl.client.username``,
  default ``zookeeper``). We read the same file: a ``DigestLoginModule`` entry's ``username``/``password``.
  Kerberos (``Krb5LoginModule``, GSSAPI) is refused with a clear error: not supported.
- **TLS to the client port** (``zookeeper.ssl.client.enable=true``): a trust store to verify the server
  and, optionally, a key store holding a client certificate (for ZooKeeper's x509 authentication).
  Kafka's names are ``zookeeper.ssl.truststore.location``/``.type``/``.password`` and
  ``zookeeper.ssl.keystore.*``; Python's TLS needs PEM files, so the PEM type is supported (a PEM key store
  holds the private key, PKCS#8, and the certificate chain in one file); JKS and PKCS12 stores are refused
  with the command that converts them. ``zookeeper.ssl.endpoint.identification.algorithm`` (Kafka's default
  ``HTTPS``) turns host name verification on; empty turns it off.
- **digest** (``addauth digest user:password``, as zkCli does): not something Kafka's brokers use, but the
  usual way an operator's tool is given rights on ACL-protected znodes. Our key is
  ``zookeeper.auth.digest=user:password`` (kafka-health's own; Kafka has none).

``zookeeper.set.acl=true`` (Kafka's name) makes the znodes we create (the admin znodes of elections and
reassignments, entity configs) carry Kafka's secure ACLs: all rights for the creator's identities, read for
everyone unless the path is one of Kafka's sensitive ones (``ZkData.defaultAcls``: user and broker
configs, delegation tokens).

Every kazoo session of the product is made by :func:`kazoo_client` so that these settings apply to all of
them (the collector's readers, the actions' admin writer, the service's leadership). Our own wire reader
speaks neither TLS nor SASL, so a secured setup reads through :class:`~collectors.zookeeper.wire.KazooReader`
(``ZooKeeperCollector(security=...)``): one code path for every kind of security, at the price of a slower
full scan (see docs/collectors.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE

# Kafka's property names (KafkaConfig / ZKClientConfig); ``zookeeper.auth.digest`` is ours.
SSL_CLIENT_ENABLE = "zookeeper.ssl.client.enable"
SSL_TRUSTSTORE_LOCATION = "zookeeper.ssl.truststore.location"
SSL_TRUSTSTORE_TYPE = "zookeeper.ssl.truststore.type"
SSL_TRUSTSTORE_PASSWORD = "zookeeper.ssl.truststore.password"
SSL_KEYSTORE_LOCATION = "zookeeper.ssl.keystore.location"
SSL_KEYSTORE_TYPE = "zookeeper.ssl.keystore.type"
SSL_KEYSTORE_PASSWORD = "zookeeper.ssl.keystore.password"
SSL_ENDPOINT_IDENTIFICATION = "zookeeper.ssl.endpoint.identification.algorithm"
SET_ACL = "zookeeper.set.acl"
SASL_CLIENT = "zookeeper.sasl.client"
SASL_CLIENT_CONFIG = "zookeeper.sasl.clientconfig"
SASL_SERVICE = "zookeeper.sasl.client.username"
JAAS_CONFIG = "java.security.auth.login.config"
AUTH_DIGEST = "zookeeper.auth.digest"

SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")
"""Kafka's ``ZkData.SensitiveRootPaths`` (the user and broker entity configs, delegation tokens; the same in a
2.x-era and a 3.x ``ZkData.scala``): a znode whose path starts with one gets no world read."""


class ZooKeeperSecurityError(ValueError):
    """The security settings are unusable (a missing file, an unsupported store type or login module)."""


@dataclass(frozen=True)
class Sasl:
    username: str
    password: str = field(repr=False)
    mechanism: str = "DIGEST-MD5"
    service: str = "zookeeper"


@dataclass(frozen=True)
class Tls:
    ca: str | None = None
    """PEM file of the certificates to trust; None: the system's."""
    certfile: str | None = None
    keyfile: str | None = None
    keyfile_password: str | None = field(default=None, repr=False)
    verify_certs: bool = True
    check_hostname: bool = True


@dataclass(frozen=True)
class ZooKeeperSecurity:
    """Everything a kazoo session needs to be let in; the default is an unsecured ZooKeeper."""

    digest: str | None = field(default=None, repr=False)
    """``user:password`` for ``addauth digest``."""
    sasl: Sasl | None = None
    tls: Tls | None = None
    set_acl: bool = False

    @property
    def secured(self) -> bool:
        return self.digest is not None or self.sasl is not None or self.tls is not None

    def summary(self) -> str:
        """What is used, without secrets (for error messages and logs)."""
        parts = []
        if self.sasl is not None:
            parts.append(f"SASL {self.sasl.mechanism} as {self.sasl.username!r}")
        if self.digest is not None:
            parts.append(f"digest as {self.digest.partition(':')[0]!r}")
        if self.tls is not None:
            parts.append("TLS" + (" with a client certificate" if self.tls.certfile else ""))
        return ", ".join(parts) or "no authentication"

    def kazoo_options(self) -> dict[str, Any]:
        """The :class:`~kazoo.client.KazooClient` keyword arguments for these settings (the ACLs of the
        znodes we create are per path: :func:`acls_for`)."""
        options: dict[str, Any] = {}
        if self.digest is not None:
            options["auth_data"] = [("digest", self.digest)]
        if self.sasl is not None:
            options["sasl_options"] = {
                "mechanism": self.sasl.mechanism,
                "username": self.sasl.username,
                "password": self.sasl.password,
                "service": self.sasl.service,
            }
        if self.tls is not None:
            options |= {
                "use_ssl": True,
                "ca": self.tls.ca,
                "certfile": self.tls.certfile,
                "keyfile": self.tls.keyfile,
                "keyfile_password": self.tls.keyfile_password,
                "verify_certs": self.tls.verify_certs,
                "check_hostname": self.tls.check_hostname,
            }
        return options


def acls_for(path: str, security: ZooKeeperSecurity) -> list[ACL] | None:
    """Kafka's ``ZkData.defaultAcls(isSecure, path)``: None (kazoo's default, world:anyone all) when
    ``zookeeper.set.acl`` is off; else creator-all, plus world read unless the path starts with a sensitive
    root (Kafka's ``sensitivePath`` is a plain prefix test; ``/consumers``, open there, is never ours)."""
    if not security.set_acl:
        return None
    sensitive = any(path.startswith(root) for root in SENSITIVE_ROOT_PATHS)
    return list(CREATOR_ALL_ACL) + ([] if sensitive else list(READ_ACL_UNSAFE))


def kazoo_client(
    hosts: str, *, timeout: float, security: ZooKeeperSecurity | None = None, **options: Any
) -> KazooClient:
    """The one place the product makes a kazoo session: ``security``'s options applied to every one."""
    extra = security.kazoo_options() if security is not None else {}
    return KazooClient(hosts=hosts, timeout=timeout, **(extra | options))


# --- Kafka-style files --------------------------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` file as Kafka's tools read it: ``key=value`` or ``key: value`` or
    ``key value``, ``#``/``!`` comments, a trailing backslash continues a line."""
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"^((?:\\.|[^=:\s\\])+)\s*[=:\s]\s*(.*)$", logical)
        if match:
            result[match.group(1).replace("\\", "")] = match.group(2).strip()
        elif logical.strip():
            result[logical.strip()] = ""
        logical = ""
    return result


_JAAS_SECTION = re.compile(r"(\w[\w.-]*)\s*\{(.*?)\}\s*;", re.S)
_JAAS_ENTRY = re.compile(r"([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);", re.S)
_JAAS_OPTION = re.compile(r'([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


def parse_jaas(text: str, section: str = "Client", service: str = "zookeeper") -> Sasl:
    """The SASL credentials of the JAAS file's ``section`` (Kafka's ``Client``): its DigestLoginModule's
    ``username`` and ``password``."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    sections = {m.group(1): m.group(2) for m in _JAAS_SECTION.finditer(text)}
    if section not in sections:
        found = ", ".join(sorted(sections)) or "none"
        raise ZooKeeperSecurityError(f"the JAAS file has no {section!r} section (found: {found})")
    for module, _, body in _JAAS_ENTRY.findall(sections[section]):
        if module != DIGEST_LOGIN_MODULE:
            raise ZooKeeperSecurityError(
                f"JAAS section {section!r} uses {module}: only {DIGEST_LOGIN_MODULE} (SASL DIGEST-MD5) "
                "is supported"
            )
        opts = {m[0]: m[1] if m[1] or not m[2] else m[2] for m in _JAAS_OPTION.findall(body)}
        if "username" not in opts or "password" not in opts:
            raise ZooKeeperSecurityError(f'JAAS section {section!r} needs username="..." and password="..."')
        return Sasl(opts["username"], opts["password"], service=service)
    raise ZooKeeperSecurityError(f"JAAS section {section!r} has no login module")


def _flag(props: Mapping[str, str], key: str, default: bool) -> bool:
    value = props.get(key)
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ZooKeeperSecurityError(f"{key}={value!r}: expected true or false")
    return lowered == "true"


def _readable(key: str, location: str) -> str:
    path = Path(location).expanduser()
    if not path.is_file():
        raise ZooKeeperSecurityError(f"{key}={location}: no such file")
    return str(path)


def _pem_store(props: Mapping[str, str], prefix: str) -> str | None:
    location = props.get(f"{prefix}.location", "").strip()
    if not location:
        return None
    store_type = props.get(f"{prefix}.type", "").strip().upper()
    if store_type in ("", "PEM") and not location.lower().endswith((".jks", ".p12", ".pfx")):
        return _readable(f"{prefix}.location", location)
    if store_type == "PEM":
        return _readable(f"{prefix}.location", location)
    kind = store_type or location.rsplit(".", 1)[-1].upper()
    raise ZooKeeperSecurityError(
        f"{prefix}.location={location}: a {kind} store; only PEM is supported. Convert it with "
        f"`keytool -importkeystore -srckeystore {location} -destkeystore store.p12 -deststoretype PKCS12` "
        "and `openssl pkcs12 -in store.p12 -out store.pem -nodes`, and set the type to PEM"
    )


def security_from_properties(props: Mapping[str, str]) -> ZooKeeperSecurity:
    """:class:`ZooKeeperSecurity` from Kafka's ZooKeeper client properties (a ``--zk-tls-config-file`` or
    ``server.properties``; unknown keys are ignored so that a broker's whole file can be given). A PEM
    trust store needs no password (one given is ignored, as Kafka does)."""
    tls = None
    if _flag(props, SSL_CLIENT_ENABLE, False):
        keystore = _pem_store(props, "zookeeper.ssl.keystore")
        algorithm = props.get(SSL_ENDPOINT_IDENTIFICATION, "HTTPS").strip()
        tls = Tls(
            ca=_pem_store(props, "zookeeper.ssl.truststore"),
            certfile=keystore,
            keyfile=keystore,
            keyfile_password=props.get(SSL_KEYSTORE_PASSWORD) or None,
            check_hostname=algorithm.upper() == "HTTPS",
        )
    sasl = None
    jaas = props.get(JAAS_CONFIG, "").strip()
    if jaas and _flag(props, SASL_CLIENT, True):
        path = Path(_readable(JAAS_CONFIG, jaas))
        sasl = parse_jaas(
            path.read_text(),
            props.get(SASL_CLIENT_CONFIG, "Client").strip() or "Client",
            props.get(SASL_SERVICE, "zookeeper").strip() or "zookeeper",
        )
    digest = props.get(AUTH_DIGEST, "").strip() or None
    if digest is not None and ":" not in digest:
        raise ZooKeeperSecurityError(f"{AUTH_DIGEST}: expected user:password")
    return ZooKeeperSecurity(digest=digest, sasl=sasl, tls=tls, set_acl=_flag(props, SET_ACL, False))


def security_from_file(path: Path, overrides: Mapping[str, str] | None = None) -> ZooKeeperSecurity:
    """:func:`security_from_properties` of a properties file, ``overrides`` (the same keys) on top."""
    if not path.is_file():
        raise ZooKeeperSecurityError(f"ZooKeeper client config {path}: no such file")
    try:
        props = parse_properties(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ZooKeeperSecurityError(f"ZooKeeper client config {path}: not readable: {exc}") from None
    return security_from_properties(props | dict(overrides or {}))
