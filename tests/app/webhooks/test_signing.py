"""Signatures: what the sender puts in the headers, and what verify() accepts and refuses."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from app.webhooks.signing import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    SignatureError,
    delivery_headers,
    sign,
    verify,
)

pytestmark = pytest.mark.unit

SECRET = "a-shared-secret-of-some-length"
BODY = b'{"kind":"opened","sequence":1}'
NOW = 1_700_000_000.0


def test_the_signature_is_hmac_sha256_over_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, 1_700_000_000, BODY) == f"sha256={expected}"


def test_delivery_headers() -> None:
    headers = delivery_headers(SECRET, BODY, "fp:3", now=NOW + 0.9)
    assert headers == {
        IDEMPOTENCY_HEADER: "fp:3",
        TIMESTAMP_HEADER: "1700000000",
        SIGNATURE_HEADER: sign(SECRET, 1_700_000_000, BODY),
    }
    unsigned = delivery_headers(None, BODY, "fp:3", now=NOW)
    assert SIGNATURE_HEADER not in unsigned
    assert unsigned[IDEMPOTENCY_HEADER] == "fp:3"


def test_verify_accepts_a_good_request_in_any_header_case() -> None:
    headers = delivery_headers(SECRET, BODY, "fp:1", now=NOW)
    assert verify(SECRET, headers, BODY, now=NOW + 10) == 1_700_000_000
    lower = {name.lower(): value for name, value in headers.items()}
    assert verify(SECRET, lower, BODY, now=NOW - 10) == 1_700_000_000


@pytest.mark.parametrize(
    ("secret", "body", "now", "message"),
    [
        (SECRET, BODY + b" ", NOW, "signature mismatch"),
        (SECRET, BODY.replace(b"opened", b"closed"), NOW, "signature mismatch"),
        ("another-secret-entirely", BODY, NOW, "signature mismatch"),
        (SECRET, BODY, NOW + 301, r"1700000000 is 301 s old \(tolerance 300 s\)"),
        (SECRET, BODY, NOW - 301, r"is 301 s in the future"),
    ],
)
def test_verify_refuses_tampering_wrong_secrets_and_old_timestamps(
    secret: str, body: bytes, now: float, message: str
) -> None:
    headers = delivery_headers(SECRET, BODY, "fp:1", now=NOW)
    with pytest.raises(SignatureError, match=message):
        verify(secret, headers, body, 300, now=now)


def test_a_replayed_request_with_a_new_timestamp_does_not_verify() -> None:
    headers = delivery_headers(SECRET, BODY, "fp:1", now=NOW)
    headers[TIMESTAMP_HEADER] = str(int(NOW) + 100)
    with pytest.raises(SignatureError, match="signature mismatch"):
        verify(SECRET, headers, BODY, now=NOW + 100)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({SIGNATURE_HEADER: None}, "missing X-Kafka-Health-Signature"),
        ({TIMESTAMP_HEADER: None}, "missing X-Kafka-Health-Timestamp"),
        ({TIMESTAMP_HEADER: "soon"}, "is not an integer"),
        ({SIGNATURE_HEADER: "md5=abc"}, "must start with 'sha256='"),
        ({SIGNATURE_HEADER: "sha256=00"}, "signature mismatch"),
    ],
)
def test_verify_refuses_missing_or_malformed_headers(change: dict[str, str | None], message: str) -> None:
    headers: dict[str, str] = delivery_headers(SECRET, BODY, "fp:1", now=NOW)
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    with pytest.raises(SignatureError, match=message):
        verify(SECRET, headers, BODY, now=NOW)
