"""Reading a broker's endpoint over HTTP: the :class:`MetricsFetcher` interface (unit tests hand in a fake)
and :class:`HttpFetcher`, its httpx implementation with one kept-alive client per broker."""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import httpx

from collectors.metrics.config import DEFAULT_MAX_RESPONSE_BYTES
from collectors.metrics.errors import FetchError, FetchTimeoutError


class MetricsFetcher(Protocol):
    """Reads one endpoint: the body as text, or :class:`FetchError` (:class:`FetchTimeoutError` when it takes
    longer than ``timeout`` seconds)."""

    def fetch(self, url: str, timeout: float) -> str: ...


ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
"""The classic text format: an exporter that can also speak OpenMetrics keeps to the format we parse."""


KEEPALIVE_S = 25.0
"""How long an idle connection to a broker is kept for the next scrape: longer than the sampler's default
10 s interval, shorter than the 30 s after which the JDK's built-in HTTP server (jmx_exporter's) closes an
idle connection, so that the scraper lets go first and never sends on a connection the server is closing."""
_MAX_REDIRECTS = 10
"""Redirects followed at most: urllib's limit (``HTTPRedirectHandler.max_redirections``)."""


@dataclass(slots=True)
class _Broker:
    """One broker endpoint's client (one keep-alive connection), when it was last used, how many fetches
    are using it now."""

    client: httpx.Client
    used: float
    fetching: int = 0


class HttpFetcher:
    """:class:`MetricsFetcher` over httpx, keeping one long-lived client per broker endpoint (scheme, host
    and port) so that each broker's connection is reused from one scrape to the next (HTTP keep-alive, as
    Prometheus scrapes).

    One client per endpoint rather than one for all: httpx's connection pool re-examines every connection
    it holds on each request, which made one shared client cost 22 ms of CPU per scrape at 200 brokers
    against 0.8 ms this way (docs/benchmarks.md). A client unused for :data:`KEEPALIVE_S` (a broker that
    went away) is closed.

    As a scraper talks to the brokers directly, nothing is taken from the environment (``trust_env=False``:
    no proxies, no ``.netrc``) and certificates are verified against the system's trust store (what
    :func:`ssl.create_default_context` loads). ``timeout`` bounds connecting, each read and the whole
    body; a body over ``max_bytes`` is refused. Bodies are asked for uncompressed (``Accept-Encoding:
    identity``). Clients are made on first use (the constructor does no I/O) and closed by :meth:`close`.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, user_agent: str = "kafka-health") -> None:
        self.max_bytes = max_bytes
        self.user_agent = user_agent
        self._brokers: dict[tuple[str, str, int | None], _Broker] = {}
        self._tls: ssl.SSLContext | None = None
        self._swept = time.monotonic()
        self._lock = threading.Lock()

    def fetch(self, url: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        try:
            with self._checkout(url) as client, client.stream("GET", url, timeout=timeout) as response:
                if not response.is_success:
                    raise FetchError(f"HTTP {response.status_code} {response.reason_phrase}")
                body = self._read(response, deadline, timeout)
                charset = response.charset_encoding or "utf-8"
        except httpx.TimeoutException:
            raise FetchTimeoutError(f"no answer within {timeout:g} s") from None
        except httpx.ConnectError as exc:
            raise FetchError(f"cannot connect: {_os_reason(exc)}") from None
        except httpx.HTTPError as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}") from None
        try:
            return body.decode(charset, errors="replace")
        except LookupError:
            return body.decode("utf-8", errors="replace")

    def close(self) -> None:
        """Close every kept connection; a later :meth:`fetch` connects afresh."""
        with self._lock:
            brokers, self._brokers = list(self._brokers.values()), {}
        for broker in brokers:
            broker.client.close()

    @contextlib.contextmanager
    def _checkout(self, url: str) -> Iterator[httpx.Client]:
        """The endpoint's client, made on first use, counted as in use until the fetch is done."""
        parts = urllib.parse.urlsplit(url)
        endpoint = (parts.scheme, parts.hostname or "", parts.port)
        now = time.monotonic()
        with self._lock:
            idle = self._idle(now)
            broker = self._brokers.get(endpoint)
            if broker is None:
                broker = self._brokers[endpoint] = _Broker(self._new_client(), now)
            broker.used = now
            broker.fetching += 1
        for client in idle:
            client.close()
        try:
            yield broker.client
        finally:
            with self._lock:
                broker.fetching -= 1
                broker.used = time.monotonic()

    def _idle(self, now: float) -> list[httpx.Client]:
        """Take out the clients no fetch has used for KEEPALIVE_S (their connection has expired anyway: a
        broker that went away); looked for at most once per KEEPALIVE_S. Called under the lock."""
        if now - self._swept < KEEPALIVE_S:
            return []
        self._swept = now
        idle = [e for e, b in self._brokers.items() if not b.fetching and now - b.used > KEEPALIVE_S]
        return [self._brokers.pop(e).client for e in idle]

    def _new_client(self) -> httpx.Client:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return httpx.Client(
            headers={"Accept": ACCEPT, "Accept-Encoding": "identity", "User-Agent": self.user_agent},
            verify=self._tls,
            trust_env=False,
            follow_redirects=True,
            max_redirects=_MAX_REDIRECTS,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )

    def _read(self, response: httpx.Response, deadline: float, timeout: float) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchError(f"response larger than {self.max_bytes} bytes")
            if time.monotonic() > deadline:
                raise FetchTimeoutError(f"body not complete within {timeout:g} s")
            chunks.append(chunk)
        return b"".join(chunks)


def _os_reason(exc: BaseException) -> str:
    """The operating system's words for a failed connection ("Connection refused", "Name or service not
    known"): httpx wraps the socket's error, which is found down the chain of causes."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return str(exc)
