"""Bearer tokens and roles: viewer < operator < admin.

Tokens come from ``KAFKA_HEALTH_SERVICE__TOKENS="name:role:token,..."`` (scripts, tests, the demo) and/or a
file of hashed tokens for production, one per line::

    # name:role:sha256:<hex of sha256(token)>
    grafana:viewer:sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08

so the service never holds a production token in clear. Comparison is constant-time on the SHA-256 of the
presented token. A missing or unknown token is 401 (with ``WWW-Authenticate: Bearer``), a known token
whose role is too low is 403; both say what was expected.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class Role(IntEnum):
    viewer = 1
    operator = 2
    admin = 3


class TokenConfigError(ValueError):
    """A token definition that cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    role: Role
    digest: bytes


def _role(text: str, where: str) -> Role:
    try:
        return Role[text]
    except KeyError:
        raise TokenConfigError(f"{where}: role {text!r} is not one of viewer, operator, admin") from None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_tokens(spec: str, where: str = "KAFKA_HEALTH_SERVICE__TOKENS") -> list[_Entry]:
    """``name:role:token,...`` (tokens in clear)."""
    entries = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep1, rest = item.partition(":")
        role, sep2, token = rest.partition(":")
        if not (sep1 and sep2 and name and token):
            raise TokenConfigError(f"{where}: {item.split(':')[0]!r}: expected name:role:token")
        if len(token) < 8:
            raise TokenConfigError(f"{where}: the token of {name!r} is shorter than 8 characters")
        entries.append(_Entry(name, _role(role, where), _digest(token)))
    return entries


def parse_token_file(path: Path) -> list[_Entry]:
    """Lines ``name:role:sha256:<64 hex>``; blank lines and ``#`` comments ignored."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TokenConfigError(f"cannot read the token file {path}: {exc}") from exc
    entries = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{number}"
        parts = line.split(":")
        if len(parts) != 4 or parts[2] != "sha256":
            raise TokenConfigError(f"{where}: expected name:role:sha256:<hex>")
        name, role, _, hexdigest = parts
        try:
            digest = bytes.fromhex(hexdigest)
        except ValueError:
            raise TokenConfigError(f"{where}: {hexdigest[:8]}... is not hexadecimal") from None
        if len(digest) != hashlib.sha256().digest_size:
            raise TokenConfigError(f"{where}: a SHA-256 digest has 64 hex digits")
        entries.append(_Entry(name, _role(role, where), digest))
    return entries


NO_TOKEN = (
    "no API token configured (KAFKA_HEALTH_SERVICE__TOKENS or KAFKA_HEALTH_SERVICE__TOKENS_FILE): every "
    "/api/v1 route answers 401; /healthz, /readyz and /metrics need none"
)
"""What ``serve`` warns at start-up and ``/readyz`` lists in its ``warnings`` when no token is configured."""


class TokenStore:
    def __init__(self, entries: Iterable[_Entry]) -> None:
        self._entries = list(entries)
        names = [e.name for e in self._entries]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TokenConfigError(f"token names must be unique: {', '.join(duplicates)}")

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str) -> Principal | None:
        digest = _digest(token)
        found = None
        for entry in self._entries:  # no early exit: the time does not depend on which entry matched
            if hmac.compare_digest(entry.digest, digest):
                found = entry
        return None if found is None else Principal(found.name, found.role)


def hash_token(token: str) -> str:
    """The digest to put in a token file (``kafka-health serve --hash-token``)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()
