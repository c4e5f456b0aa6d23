"""The webhook egress policy: which addresses a webhook may be delivered to (pure, no I/O).

An admin chooses a webhook's URL, and the service sends to it from inside the network, so without a
policy a webhook is a server-side request forgery: a cloud metadata endpoint, a database's HTTP port, the
reference cluster's control port. By default a webhook may only reach **global** unicast addresses: not
private (RFC 1918, RFC 6598's 100.64.0.0/10, IPv6 unique-local fc00::/7), loopback, link-local,
unspecified, multicast, broadcast or reserved, and not an IPv6 address that embeds one of those (IPv4
mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4, Teredo); never a cloud metadata address unless that
very address is allowed.

The policy judges addresses, not spellings: a URL's host is turned into addresses the way the operating
system does when it connects (:func:`literal_address` reads every spelling ``inet_aton`` accepts:
``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``; names are resolved by the caller,
:mod:`app.webhooks.transport`), and each address is checked. Host names are checked only for what no
address reveals: the metadata names (``metadata.google.internal``) and ``localhost`` (RFC 6761: always
loopback, whatever a resolver says).

``allow_networks`` (CIDRs or addresses) and ``allow_hosts`` (exact host names) open the policy for
on-premises receivers; a metadata address stays refused unless ``allow_networks`` names it alone (a /32 or
/128), never through a wider network or a host name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "METADATA_ADDRESSES",
    "METADATA_HOSTS",
    "EgressPolicy",
    "IPAddress",
    "IPNetwork",
    "canonical_host",
    "literal_address",
    "parse_network",
    "refusal_of",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
        ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.ip_address("192.0.0.192"),  # Oracle Cloud (classic)
    }
)
"""Cloud instance metadata endpoints: credentials for the asking."""

METADATA_HOSTS: Final[frozenset[str]] = frozenset({"metadata.google.internal", "metadata.goog"})
"""Names of metadata endpoints, refused whatever they resolve to."""

_SHARED: Final = ipaddress.ip_network("100.64.0.0/10")
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_PRIVATE: Final[tuple[IPNetwork, ...]] = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)
_LOCALHOST: Final = "localhost"


def canonical_host(host: str) -> str:
    """``host`` as compared: lower case, without the brackets of an IPv6 literal or a final dot."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def _inet_aton_part(text: str) -> int | None:
    if text[:2] in ("0x", "0X"):
        digits, base = text[2:], 16
    elif len(text) > 1 and text.startswith("0"):
        digits, base = text[1:], 8
    else:
        digits, base = text, 10
    if not digits or not all(c in "0123456789abcdefABCDEF"[: base if base != 16 else 22] for c in digits):
        return None
    return int(digits, base)


def literal_address(host: str) -> IPAddress | None:
    """The address a host written as a literal stands for, or None for a name. IPv4 is read as
    ``inet_aton`` reads it (what ``getaddrinfo`` does with a numeric host, and so what the connect does):
    one to four parts, each decimal, octal (leading 0) or hex (0x), the last filling the remaining bytes;
    so ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and ``127.1`` are all 127.0.0.1. IPv6 with or without
    brackets; a zone (``%eth0``) is dropped."""
    host = canonical_host(host)
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host.partition("%")[0])
        except ValueError:
            return None
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = [_inet_aton_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    numbers = [v for v in values if v is not None]
    *leading, last = numbers
    if any(v > 0xFF for v in leading) or last >= 1 << (8 * (4 - len(leading))):
        return None
    value = 0
    for byte in leading:
        value = value << 8 | byte
    return ipaddress.IPv4Address(value << (8 * (4 - len(leading))) | last)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (and a connect may reach through it)."""
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _category(address: IPAddress) -> str | None:
    """Why ``address`` is not a global unicast address (None when it is), in the RFCs' words."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address in _SHARED:
        return "shared address space (RFC 6598)"
    if any(address in network for network in _PRIVATE):
        return "private"
    if isinstance(address, ipaddress.IPv6Address):
        for inner in _embedded_ipv4(address):
            reason = _category(inner)
            if reason is not None:
                return f"an IPv6 form of {inner}, {reason}"
    if address.is_reserved or address.is_private or not address.is_global:
        return "reserved (not a global address)"
    return None


def refusal_of(address: IPAddress) -> str | None:
    """Why the default policy refuses ``address`` (e.g. ``127.0.0.1 is loopback``), or None."""
    reason = _category(address)
    return None if reason is None else f"{address} is {reason}"


def parse_network(text: str) -> IPNetwork:
    """A CIDR (``10.20.0.0/16``, ``fd12::/64``) or one address (``10.20.30.40``: a /32 or /128); raises
    ValueError naming the mistake (host bits set: ``10.0.0.1/8`` is refused, not widened)."""
    value = text.strip()
    try:
        return ipaddress.ip_network(canonical_host(value), strict=True)
    except ValueError as exc:
        if "host bits set" in str(exc):
            wide = ipaddress.ip_network(canonical_host(value), strict=False)
            raise ValueError(f"{value!r} has host bits set: did you mean {wide}?") from None
        raise ValueError(f"{value!r} is not a CIDR (like 10.20.0.0/16) or an IP address") from None


def _exactly(network: IPNetwork) -> IPAddress | None:
    return network.network_address if network.prefixlen == network.max_prefixlen else None


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Default: global unicast only. ``allow_networks`` and ``allow_hosts`` add what on-premises receivers
    need; a metadata address needs ``allow_networks`` to name it alone."""

    allow_networks: tuple[IPNetwork, ...] = ()
    allow_hosts: frozenset[str] = frozenset()

    @classmethod
    def of(cls, networks: Iterable[str] = (), hosts: Iterable[str] = ()) -> EgressPolicy:
        """From the settings' strings (validated: raises ValueError on a bad CIDR)."""
        return cls(tuple(parse_network(n) for n in networks), frozenset(canonical_host(h) for h in hosts))

    def host_allowed(self, host: str) -> bool:
        return canonical_host(host) in self.allow_hosts

    def host_refusal(self, host: str) -> str | None:
        """Why ``host`` is refused by its name alone (a metadata name, ``localhost``), or None: the
        addresses it resolves to are checked too (:meth:`address_refusal`)."""
        name = canonical_host(host)
        if literal_address(name) is not None:
            return None
        if name in METADATA_HOSTS or name.endswith(tuple(f".{m}" for m in METADATA_HOSTS)):
            listed = any(_exactly(n) in METADATA_ADDRESSES for n in self.allow_networks)
            if listed and self.host_allowed(name):
                return None
            return f"{name} is a cloud metadata name"
        if (name == _LOCALHOST or name.endswith("." + _LOCALHOST)) and not self.host_allowed(name):
            loopback = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
            if not any(a in n for a in loopback for n in self.allow_networks):
                return f"{name} is loopback"
        return None

    def address_refusal(self, address: IPAddress, host: str | None = None) -> str | None:
        """Why a connection to ``address`` (resolved from ``host``, if a name) is refused, or None."""
        if address in METADATA_ADDRESSES:
            if any(_exactly(n) == address for n in self.allow_networks):
                return None
            return refusal_of(address)
        if any(address in n for n in self.allow_networks):
            return None
        if host is not None and literal_address(host) is None and self.host_allowed(host):
            return None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            inner = self.address_refusal(address.ipv4_mapped, host)
            return None if inner is None else f"{address} is an IPv6 form of {address.ipv4_mapped}: {inner}"
        return refusal_of(address)
