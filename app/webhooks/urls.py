"""Webhook URLs as they may be shown: with their secrets masked.

A webhook URL is often itself the credential (Slack's ``/services/T../B../XXXX``, a ``?token=`` query
parameter, ``user:pass@`` user info), so the API, the logs and the delivery errors show :func:`mask_url`'s
form; the store keeps the URL unchanged and delivery uses it. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

MASK: Final = "****"

_TOKEN_SEGMENT: Final = re.compile(r"[A-Za-z0-9_\-.~]{20,}")
"""A path segment that looks like a generated token: 20 or more URL-safe characters, letters and digits."""

_SECRET_PATHS: Final[dict[str, tuple[str, int]]] = {
    # host: (path prefix, how many segments after it are identifiers shown as they are)
    "hooks.slack.com": ("/services/", 2),  # /services/T…/B…/SECRET
    "discord.com": ("/api/webhooks/", 1),  # /api/webhooks/ID/TOKEN
    "discordapp.com": ("/api/webhooks/", 1),
}
"""Services whose webhook path carries the secret after some identifiers: every later segment is masked."""


_QUOTED_SECRET_MIN: Final = 6


def _looks_like_token(segment: str) -> bool:
    return (
        _TOKEN_SEGMENT.fullmatch(segment) is not None
        and any(c.isdigit() for c in segment)
        and any(c.isalpha() for c in segment)
    )


def _masked_path(host: str, path: str) -> str:
    segments = path.split("/")
    known = _SECRET_PATHS.get(host.lower())
    if known is not None and path.startswith(known[0]):
        prefix, shown = known
        first_secret = prefix.count("/") + shown  # index in ``segments`` of the first secret segment
        return "/".join(s if i < first_secret or not s else MASK for i, s in enumerate(segments))
    return "/".join(MASK if _looks_like_token(s) else s for s in segments)


def _masked_query(query: str) -> str:
    parts = []
    for part in query.split("&"):
        name, sep, value = part.partition("=")
        parts.append(f"{name}={MASK}" if sep and value else part)
    return "&".join(parts)


def _split(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        return None
    return parts


def mask_url(url: str) -> str:
    """``url`` with its secrets replaced by ``****``: the password of the user info (or a lone user name,
    often a token), every query parameter's value, the fragment, Slack's and Discord's secret path
    segments and any path segment that looks like a generated token. Scheme, host, port, parameter names
    and the other path segments stay, so that the webhook can still be recognised. A URL that cannot be
    parsed is shown as ``****`` whole."""
    parts = _split(url)
    if parts is None:
        return MASK
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        userinfo = f"{user}:{MASK}" if colon and password else (MASK if not colon and user else userinfo)
        netloc = f"{userinfo}@{hostport}"
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            _masked_path(parts.hostname or "", parts.path),
            _masked_query(parts.query),
            MASK if parts.fragment else "",
        )
    )


def url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that :func:`mask_url` hides (longest first), for :func:`redact`."""
    parts = _split(url)
    if parts is None:
        return [url] if url else []
    masked = _split(mask_url(url))
    assert masked is not None
    found: set[str] = set()
    userinfo, at, _ = parts.netloc.rpartition("@")
    masked_userinfo = masked.netloc.rpartition("@")[0]
    if at and userinfo != masked_userinfo:
        user, colon, password = userinfo.partition(":")
        found.add(password if colon else user)
    found.update(s for s, m in zip(parts.path.split("/"), masked.path.split("/"), strict=True) if s != m)
    found.update(
        p.partition("=")[2]
        for p, m in zip(parts.query.split("&"), masked.query.split("&"), strict=True)
        if p != m
    )
    if parts.fragment:
        found.add(parts.fragment)
    return sorted((s for s in found if s), key=len, reverse=True)


def redact(text: str, url: str) -> str:
    """``text`` (an error message, say) with ``url`` and each of its secret parts masked: the URL is
    replaced by its masked form first, then any secret of at least 6 characters still quoted on its own
    (a shorter one, ``?page=2`` say, is no secret worth masking every ``2`` of the text for)."""
    text = text.replace(url, mask_url(url))
    for secret in url_secrets(url):
        if len(secret) >= _QUOTED_SECRET_MIN:
            text = text.replace(secret, MASK)
    return text
