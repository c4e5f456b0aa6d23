"""The webhook egress policy (pure): which hosts and addresses a webhook may reach, in every spelling the
operating system accepts, with and without the allowlists; and its settings."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from app.settings import load_settings
from app.webhooks.egress import EgressPolicy, IPAddress, literal_address, parse_network
from app.webhooks.notifier import NotifierSettings
from app.webhooks.transport import EgressGuard, EgressRefused

pytestmark = pytest.mark.unit


class TableResolver:
    """Names to addresses from a table; any other name does not resolve (OSError, as getaddrinfo)."""

    def __init__(self, table: dict[str, list[str]] | None = None) -> None:
        self.table = table or {}
        self.asked: list[str] = []

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [literal_address(a) or pytest.fail(a) for a in self.table[host]]


NAMES = {
    "hooks.example.com": ["93.184.216.34"],
    "private.example.com": ["10.0.0.5"],
    "rebound.example.com": ["127.0.0.1"],
    "metadata.example.com": ["169.254.169.254"],
    "mixed.example.com": ["10.0.0.5", "93.184.216.34"],
    "v6.example.com": ["2606:4700:4700::1111"],
    "v6-loopback.example.com": ["::1"],
    "hooks.corp": ["10.20.30.40"],
    "hooks.corp.": ["10.20.30.40"],
}


def guard(**allow: Any) -> EgressGuard:
    return EgressGuard(NotifierSettings(**allow).egress, TableResolver(NAMES))


REFUSED = [
    # loopback, in every spelling inet_aton and the URL parser accept
    ("http://127.0.0.1:8080/x", "127.0.0.1 is loopback"),
    ("http://127.0.0.2/", "127.0.0.2 is loopback"),
    ("http://2130706433/", "127.0.0.1 is loopback"),
    ("http://0x7f.1/", "127.0.0.1 is loopback"),
    ("http://0x7f000001/", "127.0.0.1 is loopback"),
    ("http://017700000001/", "127.0.0.1 is loopback"),
    ("http://0x7f.0.0.0x1/", "127.0.0.1 is loopback"),
    ("http://127.1/", "127.0.0.1 is loopback"),
    ("http://127.0.1/", "127.0.0.1 is loopback"),
    ("http://127.0.0.1./", "127.0.0.1 is loopback"),
    ("http://[::1]/", "::1 is loopback"),
    ("http://[::ffff:127.0.0.1]/", "IPv6 form of 127.0.0.1: 127.0.0.1 is loopback"),
    ("http://[::ffff:7f00:1]/", "IPv6 form of 127.0.0.1: 127.0.0.1 is loopback"),
    ("http://[64:ff9b::7f00:1]/", "an IPv6 form of 127.0.0.1, loopback"),
    ("http://[2002:7f00:1::1]/", "an IPv6 form of 127.0.0.1, loopback"),
    ("http://localhost:8080/", "localhost is loopback"),
    ("http://LOCALHOST./", "localhost is loopback"),
    ("http://api.localhost/", "api.localhost is loopback"),
    ("http://rebound.example.com/", "127.0.0.1 is loopback"),
    ("http://v6-loopback.example.com/", "::1 is loopback"),
    # unspecified
    ("http://0.0.0.0:8080/", "0.0.0.0 is unspecified"),
    ("http://0/", "0.0.0.0 is unspecified"),
    ("http://[::]/", ":: is unspecified"),
    # private: RFC 1918, RFC 6598, unique local
    ("http://10.0.0.1/", "10.0.0.1 is private"),
    ("http://10.1/", "10.0.0.1 is private"),
    ("http://167772161/", "10.0.0.1 is private"),
    ("http://172.16.5.4/", "172.16.5.4 is private"),
    ("http://172.31.255.255/", "172.31.255.255 is private"),
    ("http://192.168.1.1/", "192.168.1.1 is private"),
    ("http://0xc0.0xa8.1.1/", "192.168.1.1 is private"),
    ("http://100.64.0.1/", "100.64.0.1 is shared address space (RFC 6598)"),
    ("http://100.127.255.254/", "shared address space"),
    ("http://[fc00::1]/", "fc00::1 is private"),
    ("http://[fd12:3456::1]/", "fd12:3456::1 is private"),
    ("http://[::ffff:10.0.0.1]/", "IPv6 form of 10.0.0.1: 10.0.0.1 is private"),
    ("http://private.example.com/", "10.0.0.5 is private"),
    # link-local
    ("http://169.254.1.1/", "169.254.1.1 is link-local"),
    ("http://[fe80::1]/", "fe80::1 is link-local"),
    # cloud metadata
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
    ("http://0xA9FEA9FE/", "169.254.169.254 is a cloud metadata address"),
    ("http://2852039166/", "169.254.169.254 is a cloud metadata address"),
    ("http://169.254.43518/", "169.254.169.254 is a cloud metadata address"),
    ("http://[::ffff:169.254.169.254]/", "169.254.169.254 is a cloud metadata address"),
    ("http://[fd00:ec2::254]/", "fd00:ec2::254 is a cloud metadata address"),
    ("http://100.100.100.200/", "100.100.100.200 is a cloud metadata address"),
    (
        "http://metadata.google.internal/computeMetadata/v1/",
        "metadata.google.internal is a cloud metadata name",
    ),
    ("http://Metadata.Google.Internal./", "metadata.google.internal is a cloud metadata name"),
    ("http://metadata.example.com/", "169.254.169.254 is a cloud metadata address"),
    # multicast, broadcast, reserved
    ("http://224.0.0.1/", "224.0.0.1 is multicast"),
    ("http://[ff02::1]/", "ff02::1 is multicast"),
    ("http://255.255.255.255/", "not a global address"),
    ("http://240.0.0.1/", "not a global address"),
    ("http://192.0.2.1/", "not a global address"),  # TEST-NET-1
    ("http://[2001:db8::1]/", "not a global address"),  # documentation
]


@pytest.mark.parametrize(("url", "reason"), REFUSED)
def test_the_default_policy_refuses_every_spelling_of_a_non_global_address(url: str, reason: str) -> None:
    found = guard().check_url(url)
    assert found is not None, f"{url} was allowed"
    assert found.startswith("refused by the egress policy: ")
    assert reason in found


ALLOWED = [
    "https://hooks.example.com/kafka",
    "http://93.184.216.34:8080/",
    "http://1570691106/",  # 93.158.134.34 as one number: global, so fine
    "https://8.8.8.8/",
    "http://[2606:4700:4700::1111]/",
    "http://v6.example.com/",
    "http://mixed.example.com/",  # one address passes: the connect uses only that one
    "https://unresolvable.example.com/",  # nothing to judge yet: the delivery checks when it connects
]


@pytest.mark.parametrize("url", ALLOWED)
def test_global_addresses_and_names_that_resolve_to_them_are_allowed(url: str) -> None:
    assert guard().check_url(url) is None


def test_a_name_with_several_addresses_connects_only_to_those_that_pass() -> None:
    assert guard().addresses("mixed.example.com", 80) == [literal_address("93.184.216.34")]
    with pytest.raises(EgressRefused, match=r"10\.0\.0\.5 is private"):
        guard().addresses("private.example.com", 80)


def test_an_unresolvable_name_is_an_oserror_at_connect_not_a_refusal() -> None:
    with pytest.raises(socket.gaierror, match="not known"):
        guard().addresses("unresolvable.example.com", 80)


def test_a_literal_is_never_sent_to_the_resolver() -> None:
    resolver = TableResolver(NAMES)
    checked = EgressGuard(EgressPolicy(), resolver)
    for host in ("2130706433", "0x7f.1", "::1", "8.8.8.8"):
        checked.check_url(f"http://[{host}]/" if ":" in host else f"http://{host}/")
    assert resolver.asked == []


# --- the allowlists --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allow", "url"),
    [
        ({"allow_networks": ["10.0.0.0/8"]}, "http://10.1.2.3/"),
        ({"allow_networks": ["10.0.0.0/8"]}, "http://167837955/"),  # 10.1.2.3
        ({"allow_networks": ["10.0.0.0/8"]}, "http://[::ffff:10.1.2.3]/"),
        ({"allow_networks": ["10.0.0.0/8"]}, "http://private.example.com/"),
        ({"allow_networks": ["127.0.0.1"]}, "http://127.0.0.1:9/"),
        ({"allow_networks": ["127.0.0.1/32"]}, "http://localhost:9/"),
        ({"allow_networks": ["::1/128"]}, "http://[::1]:9/"),
        ({"allow_networks": ["fd12::/16"]}, "http://[fd12:3456::1]/"),
        ({"allow_hosts": ["hooks.corp"]}, "http://hooks.corp/"),
        ({"allow_hosts": ["HOOKS.CORP."]}, "http://hooks.corp./"),
        ({"allow_hosts": ["localhost"]}, "http://localhost:9/"),
        ({"allow_networks": ["169.254.169.254/32"]}, "http://169.254.169.254/"),
        ({"allow_networks": ["169.254.169.254"]}, "http://0xA9FEA9FE/"),
    ],
)
def test_the_allowlists_open_what_they_name(allow: dict[str, Any], url: str) -> None:
    assert guard(**allow).check_url(url) is None
    assert guard().check_url(url) is not None, "refused without the allowlist"


@pytest.mark.parametrize(
    ("allow", "url", "reason"),
    [
        ({"allow_networks": ["10.0.0.0/8"]}, "http://192.168.1.1/", "192.168.1.1 is private"),
        ({"allow_networks": ["127.0.0.1/32"]}, "http://127.0.0.2/", "127.0.0.2 is loopback"),
        ({"allow_networks": ["169.254.0.0/16"]}, "http://169.254.169.254/", "a cloud metadata address"),
        ({"allow_networks": ["0.0.0.0/0"]}, "http://169.254.169.254/", "a cloud metadata address"),
        ({"allow_networks": ["::/0"]}, "http://[fd00:ec2::254]/", "a cloud metadata address"),
        ({"allow_hosts": ["metadata.example.com"]}, "http://metadata.example.com/", "cloud metadata"),
        ({"allow_hosts": ["metadata.google.internal"]}, "http://metadata.google.internal/", "metadata name"),
        ({"allow_hosts": ["hooks.corp"]}, "http://10.20.30.40/", "10.20.30.40 is private"),
        ({"allow_hosts": ["hooks.corp"]}, "http://private.example.com/", "10.0.0.5 is private"),
    ],
)
def test_the_allowlists_open_nothing_else_and_metadata_only_by_its_address(
    allow: dict[str, Any], url: str, reason: str
) -> None:
    found = guard(**allow).check_url(url)
    assert found is not None
    assert reason in found


# --- spellings: ours are the operating system's ----------------------------------------------------------


SPELLINGS = [
    "2130706433",
    "0x7f.1",
    "0x7f000001",
    "0X7F.0.0.1",
    "017700000001",
    "0177.0.0.1",
    "127.1",
    "127.0.1",
    "0x7f.0.0.0x1",
    "0",
    "10.1",
    "0300.0250.0.1",
    "0xA9FEA9FE",
    "169.254.43518",
    "4294967295",
    "::ffff:127.0.0.1",
    "::1",
    "::",
    # not addresses: names to the resolver
    "4294967296",
    "256.1",
    "1.2.3.4.5",
    "08.0.0.1",
    "0x",
    "1e1",
    "hooks.example.com",
]


@pytest.mark.parametrize("host", SPELLINGS)
def test_literal_addresses_are_read_as_getaddrinfo_reads_them(host: str) -> None:
    """A contract with the real C library: what ``getaddrinfo`` takes as a numeric host is the address we
    check, and what it does not take is a name (which our guard resolves through it)."""
    try:
        info = socket.getaddrinfo(host, 80, flags=socket.AI_NUMERICHOST, type=socket.SOCK_STREAM)
        expected = literal_address(str(info[0][4][0]))
    except socket.gaierror:
        expected = None
    assert literal_address(host) == expected


# --- settings --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"allow_networks": ["10.0.0.1/8"]}, r"'10.0.0.1/8' has host bits set: did you mean 10.0.0.0/8\?"),
        ({"allow_networks": ["10.0.0/33"]}, "'10.0.0/33' is not a CIDR"),
        ({"allow_networks": ["corp.example"]}, "'corp.example' is not a CIDR"),
        ({"allow_hosts": ["hooks.corp:8080"]}, "is not a host name"),
        ({"allow_hosts": ["*.corp"]}, "no port or wildcard"),
        ({"allow_networks": "[not json"}, "not a JSON list"),
    ],
)
def test_bad_allowlists_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NotifierSettings(**values)


def test_the_allowlists_come_from_the_environment_as_lists_or_comma_separated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS", "10.20.0.0/16, fd12::/64,127.0.0.1")
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_HOSTS", '["alerts.corp.internal"]')
    webhooks = load_settings().service.webhooks
    assert webhooks.allow_networks == ("10.20.0.0/16", "fd12::/64", "127.0.0.1/32")
    assert webhooks.allow_hosts == ("alerts.corp.internal",)
    assert webhooks.egress.allow_networks == tuple(
        parse_network(n) for n in ("10.20.0.0/16", "fd12::/64", "127.0.0.1")
    )


def test_the_default_allows_nothing_private() -> None:
    assert NotifierSettings().egress == EgressPolicy()
