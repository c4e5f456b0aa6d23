"""Webhook request signatures: HMAC-SHA256 over ``"{timestamp}.{body}"``, keyed with the webhook's secret.

Every delivery carries::

    Idempotency-Key: <fingerprint>:<sequence>        (the same on every attempt: deduplicate on it)
    X-Kafka-Health-Timestamp: <epoch seconds>        (when this attempt was sent)
    X-Kafka-Health-Signature: sha256=<hex digest>    (only when the webhook has a secret)

A receiver recomputes the digest over the timestamp header, a dot and the raw body bytes, compares in
constant time, and refuses timestamps too far from its clock (replays). :func:`verify` does all three.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Final

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "SignatureError",
    "delivery_headers",
    "sign",
    "verify",
]

SIGNATURE_HEADER: Final = "X-Kafka-Health-Signature"
TIMESTAMP_HEADER: Final = "X-Kafka-Health-Timestamp"
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
SCHEME: Final = "sha256="
DEFAULT_TOLERANCE_S: Final = 300.0


class SignatureError(ValueError):
    """A request whose signature does not verify; the message says why (never the expected digest)."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 of ``b"{timestamp}." + body``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return SCHEME + mac.hexdigest()


def delivery_headers(
    secret: str | None, body: bytes, idempotency_key: str, now: float | None = None
) -> dict[str, str]:
    """The headers of one attempt: the idempotency key, the timestamp and, with a secret, the signature."""
    timestamp = int(time.time() if now is None else now)
    headers = {IDEMPOTENCY_HEADER: idempotency_key, TIMESTAMP_HEADER: str(timestamp)}
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
    return headers


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    *,
    now: float | None = None,
) -> int:
    """Check a received request (``headers`` in any case, ``body`` the raw bytes); returns its timestamp.

    Raises :class:`SignatureError` when a header is missing or malformed, the timestamp is more than
    ``tolerance_s`` from ``now`` (default: the clock), or the signature does not match.
    """
    lower = {name.lower(): value for name, value in headers.items()}
    signature = lower.get(SIGNATURE_HEADER.lower())
    stamp = lower.get(TIMESTAMP_HEADER.lower())
    if signature is None:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    if stamp is None:
        raise SignatureError(f"missing {TIMESTAMP_HEADER} header")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise SignatureError(f"{TIMESTAMP_HEADER} is not an integer: {stamp[:40]!r}") from None
    current = time.time() if now is None else now
    age = current - timestamp
    if abs(age) > tolerance_s:
        when = f"{age:.0f} s old" if age > 0 else f"{-age:.0f} s in the future"
        raise SignatureError(
            f"{TIMESTAMP_HEADER} {timestamp} is {when} (tolerance {tolerance_s:g} s): "
            "a replay, or a clock out of sync"
        )
    if not signature.startswith(SCHEME):
        raise SignatureError(f"{SIGNATURE_HEADER} must start with {SCHEME!r}")
    if not hmac.compare_digest(signature.encode(), sign(secret, timestamp, body).encode()):
        raise SignatureError("signature mismatch: wrong secret, or the body was changed")
    return timestamp
