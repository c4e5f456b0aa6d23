"""The egress policy at the connect step, over real sockets to the embedded webhook receiver: DNS rebinding
is refused at connect, the connection goes to the address that was checked (with the URL's name in the Host
header), and the operating system's resolver is asked as httpcore would ask it (a contract on
``localhost``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from app.embedded.webhook_receiver import WebhookReceiver
from app.webhooks.egress import EgressPolicy, IPAddress
from app.webhooks.notifier import NotifierSettings, post
from app.webhooks.transport import EgressGuard, Resolver, SystemResolver, guarded_client

pytestmark = pytest.mark.integration

SECRET = "transport-tests-shared-secret"
PUBLIC = ipaddress.ip_address("93.184.216.34")
LOOPBACK = ipaddress.ip_address("127.0.0.1")


class Rebinding:
    """A name that answers a public address to the first question and loopback to every later one (a
    rebinding attacker's DNS with a TTL of 0)."""

    def __init__(self) -> None:
        self.answers: list[list[IPAddress]] = []

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        answer: list[IPAddress] = [PUBLIC] if not self.answers else [LOOPBACK]
        self.answers.append(answer)
        return answer


class Pinned:
    """Every name is 127.0.0.1 (and nothing else resolves it: the name exists only here)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        return [LOOPBACK]


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as running:
        yield running


def send(url: str, guard: EgressGuard) -> tuple[str, str | None]:
    with guarded_client(guard, timeout_s=5, headers={}) as client:
        result = post(client, url, '{"test": true}', "k:1", SECRET, timeout_s=5)
    return result.outcome, result.error


def guard_of(
    resolver: Resolver, allow_networks: tuple[str, ...] = (), allow_hosts: tuple[str, ...] = ()
) -> EgressGuard:
    settings = NotifierSettings(allow_networks=allow_networks, allow_hosts=allow_hosts)
    return EgressGuard(settings.egress, resolver)


def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused_at_connect(
    receiver: WebhookReceiver,
) -> None:
    rebinding = Rebinding()
    guard = EgressGuard(EgressPolicy(), rebinding)
    url = f"http://hooks.rebind.example:{receiver.port}/hook"
    assert guard.check_url(url) is None  # the API's check: public, accepted
    outcome, error = send(url, guard)  # the delivery: resolved again, now loopback
    assert (outcome, error) == ("refused", "refused by the egress policy: 127.0.0.1 is loopback")
    assert rebinding.answers == [[PUBLIC], [LOOPBACK]]  # one resolution per connect, no other lookup
    assert receiver.requests() == []


def test_the_connection_goes_to_the_checked_address_with_the_urls_name_as_host(
    receiver: WebhookReceiver,
) -> None:
    pinned = Pinned()
    url = f"http://receiver.only-here.example:{receiver.port}/hook"
    outcome, error = send(url, guard_of(pinned, allow_networks=("127.0.0.1/32",)))
    assert (outcome, error) == ("delivered", None)
    assert pinned.asked == ["receiver.only-here.example"]  # the name is not known to any real resolver
    (request,) = receiver.requests()
    assert request.headers["host"] == f"receiver.only-here.example:{receiver.port}"
    assert request.signature_error is None


def test_the_system_resolver_answers_localhost_as_the_socket_module_does(receiver: WebhookReceiver) -> None:
    """The contract of :class:`SystemResolver` with the real resolver: ``localhost`` is loopback only, the
    default policy refuses it at connect, and allowing it (by name, or by network) lets the real receiver
    through."""
    found = SystemResolver().resolve("localhost", receiver.port)
    assert found
    assert all(address.is_loopback for address in found)
    assert LOOPBACK in found
    url = f"http://localhost:{receiver.port}/hook"
    outcome, error = send(url, EgressGuard(EgressPolicy(), SystemResolver()))
    assert outcome == "refused"
    assert error is not None
    assert "loopback" in error
    assert receiver.requests() == []
    assert send(url, guard_of(SystemResolver(), allow_hosts=("localhost",))) == ("delivered", None)
    # localhost may resolve to ::1 too, where nothing listens: only the allowed 127.0.0.1 is tried
    assert send(url, guard_of(SystemResolver(), allow_networks=("127.0.0.1/32",))) == ("delivered", None)
    assert len(receiver.requests()) == 2


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "0x7f.1", "127.1", "[::ffff:127.0.0.1]"])
def test_every_spelling_of_loopback_is_refused_at_connect(receiver: WebhookReceiver, host: str) -> None:
    outcome, error = send(f"http://{host}:{receiver.port}/", EgressGuard(EgressPolicy(), SystemResolver()))
    assert outcome == "refused"
    assert error is not None
    assert "127.0.0.1" in error
    assert receiver.requests() == []
