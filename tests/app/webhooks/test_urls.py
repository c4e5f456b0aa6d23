"""Webhook URLs as shown: each kind of secret masked, the rest kept, and redact() on error texts."""

from __future__ import annotations

import pytest

from app.webhooks.urls import mask_url, redact, url_secrets

pytestmark = pytest.mark.unit

SLACK = "https://hooks.slack.com/services/T0001AB/B0002CD/abcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SLACK, "https://hooks.slack.com/services/T0001AB/B0002CD/****"),
        ("https://hooks.slack.com/services/T000/B000/XXXX", "https://hooks.slack.com/services/T000/B000/****"),
        ("https://discord.com/api/webhooks/1234/tok", "https://discord.com/api/webhooks/1234/****"),
        ("https://example.com/hook?token=s3cr3t", "https://example.com/hook?token=****"),
        ("https://example.com/hook?a=1&b=&c", "https://example.com/hook?a=****&b=&c"),
        ("https://user:pa55@example.com:8443/hook", "https://user:****@example.com:8443/hook"),
        ("https://tok3n@example.com/hook", "https://****@example.com/hook"),
        ("https://example.com/hook#frag", "https://example.com/hook#****"),
        ("https://example.com/hooks/9f8e7d6c5b4a39281706f5e4/x", "https://example.com/hooks/****/x"),
        ("http://127.0.0.1:9000/alerts/kafka-health", "http://127.0.0.1:9000/alerts/kafka-health"),
        ("https://example.com/a-very-long-but-plain-path-segment", "https://example.com/a-very-long-but-plain-path-segment"),
        ("http://[::1:bad", "****"),
    ],
)  # fmt: skip
def test_mask_url_hides_the_secrets_and_keeps_the_rest(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_every_secret_part_is_listed_and_none_survives_the_mask() -> None:
    url = "https://admin:hunter2pw@hooks.slack.com/services/T1/B2/abcdefghijklmnopqrstuvwx?token=qwerty123#f"
    secrets = url_secrets(url)
    assert set(secrets) == {"hunter2pw", "abcdefghijklmnopqrstuvwx", "qwerty123", "f"}
    shown = mask_url(url)
    assert not any(secret in shown for secret in secrets if len(secret) > 1)
    assert shown.startswith("https://admin:****@hooks.slack.com/services/T1/B2/****?token=****")


def test_redact_masks_the_url_and_its_secrets_quoted_alone() -> None:
    text = f"ConnectError: cannot reach {SLACK}; receiver said: bad key abcdefghijklmnopqrstuvwx on page 2"
    redacted = redact(text, SLACK)
    assert "abcdefghijklmnopqrstuvwx" not in redacted
    assert "https://hooks.slack.com/services/T0001AB/B0002CD/****;" in redacted
    assert redacted.endswith("bad key **** on page 2")
    # short values are not masked wherever they occur in the text
    assert redact("page 2 of 2", "https://example.com/?page=2") == "page 2 of 2"
