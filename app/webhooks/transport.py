"""The egress policy enforced where the connection is made: resolve once, check, connect to what was checked.

Checking a URL and then handing it to an HTTP client is not enough: the client resolves the name again, and
a name can answer a public address to the check and a private one to the connect (DNS rebinding; a TTL of
0 is all it takes). So the webhook client's connect step is ours: :class:`GuardedBackend` is an httpcore
network backend whose ``connect_tcp`` turns the host into addresses (:func:`egress.literal_address` for a
literal, else the :class:`Resolver`: ``getaddrinfo``, as the socket module would), keeps those the policy
allows, and connects to one of them by address. Nothing else is resolved, so the peer is always an
address that passed; TLS still verifies the URL's name (httpcore sends SNI and checks the certificate
against the origin's host, not the address), and the Host header is the URL's.

A refusal raises :class:`EgressRefused` (an httpcore ``ConnectError``, so httpx raises ``ConnectError``
with it as the cause: :func:`refused_cause` finds it). No proxy is used (``trust_env`` off): a proxy
would make the connect reach the proxy, and the policy could not see the receiver.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import httpcore
import httpx

from app.webhooks.egress import EgressPolicy, IPAddress, literal_address

SocketOption: TypeAlias = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)
"""httpcore's socket option (its own alias is private)."""

__all__ = [
    "EgressGuard",
    "EgressRefused",
    "GuardedBackend",
    "Resolver",
    "SystemResolver",
    "guarded_client",
    "refused_cause",
]


class Resolver(Protocol):
    """Host name to addresses, in the order a connect would try them."""

    def resolve(self, host: str, port: int) -> list[IPAddress]: ...


class SystemResolver:
    """The operating system's resolver, asked exactly as ``socket.create_connection`` asks it."""

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        found: list[IPAddress] = []
        for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            address = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
            if address not in found:
                found.append(address)
        return found


class EgressRefused(httpcore.ConnectError):
    """The policy refused every address of the host: no connection was made."""


@dataclass(frozen=True, slots=True)
class EgressGuard:
    """The policy and the resolver it is applied through."""

    policy: EgressPolicy
    resolver: Resolver

    def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses of ``host`` that may be connected to, in order; raises :class:`EgressRefused`
        (naming the first reason) when none may, and OSError when the name does not resolve."""
        reason = self.policy.host_refusal(host)
        if reason is not None:
            raise EgressRefused(f"refused by the egress policy: {reason}")
        literal = literal_address(host)
        candidates = [literal] if literal is not None else self.resolver.resolve(host, port)
        allowed: list[IPAddress] = []
        reasons: list[str] = []
        for address in candidates:
            why = self.policy.address_refusal(address, host)
            if why is None:
                allowed.append(address)
            else:
                reasons.append(why)
        if not allowed:
            shown = reasons[0] if reasons else f"{host} has no address"
            more = f" (and {len(reasons) - 1} more of its addresses)" if len(reasons) > 1 else ""
            raise EgressRefused(f"refused by the egress policy: {shown}{more}")
        return allowed

    def check_url(self, url: str) -> str | None:
        """Why delivering to ``url`` would be refused now, or None (also when its name does not resolve
        now: the delivery checks again). For the API's create and update, before anything is stored."""
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL:
            return None  # the URL's own validation says why
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            self.addresses(parsed.raw_host.decode("ascii"), port)
        except EgressRefused as exc:
            return str(exc)
        except (OSError, UnicodeError):
            return None
        return None


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend with the connect step checked by ``guard``."""

    def __init__(self, guard: EgressGuard) -> None:
        self.guard = guard
        self._sync = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = self.guard.addresses(host, port)
        except OSError as exc:  # the name does not resolve: a connection error, retried
            raise httpcore.ConnectError(f"{host}: {exc}") from exc
        last: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:  # as socket.create_connection does: each in turn
            try:
                return self._sync.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        raise EgressRefused("refused by the egress policy: a webhook cannot use a Unix socket")

    def sleep(self, seconds: float) -> None:
        self._sync.sleep(seconds)


class _GuardedTransport(httpx.HTTPTransport):
    """httpx's transport on a connection pool whose connects go through :class:`GuardedBackend`."""

    def __init__(self, guard: EgressGuard, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context, network_backend=GuardedBackend(guard), retries=0
        )


def guarded_client(guard: EgressGuard, *, timeout_s: float, headers: dict[str, str]) -> httpx.Client:
    """An httpx client that connects only to addresses ``guard`` allows, follows no redirect and uses no
    proxy."""
    ssl_context = httpx.create_ssl_context(trust_env=False)
    return httpx.Client(
        transport=_GuardedTransport(guard, ssl_context),
        timeout=timeout_s,
        follow_redirects=False,
        trust_env=False,
        headers=headers,
    )


def refused_cause(exc: BaseException) -> EgressRefused | None:
    """The :class:`EgressRefused` behind an httpx error, if the policy is why it failed."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EgressRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
