"""Where each broker's metrics are: URL and URL-template validation, listener names, and
:class:`MetricsEndpoints`, which gives each broker its URL from an explicit map or a template."""

from __future__ import annotations

import string
import urllib.parse
from collections.abc import Mapping

from collectors.kafka.model import BrokerRegistration
from collectors.metrics.errors import EndpointError

PLACEHOLDERS = ("host", "port", "id", "rack")
_PROBE = {"host": "broker.example", "port": "9092", "id": "0", "rack": "rack-a"}


def validate_url(url: str, what: str = "metrics URL") -> str:
    """An absolute http(s) URL with a host and, if given, a valid port."""
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port
    except ValueError as exc:
        raise ValueError(f"{what} {url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{what} {url!r} must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"{what} {url!r} has no host")
    return url


def validate_url_template(template: str) -> str:
    """Only ``{host}``, ``{port}``, ``{id}`` and ``{rack}`` (no format specs), and an http(s) URL."""
    allowed = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"metrics URL template {template!r}: {exc} (use {{{{ and }}}} for braces)") from None
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            raise ValueError(
                f"unknown placeholder {{{name}}} in metrics URL template {template!r}: use {allowed}"
            )
        if spec or conversion:
            raise ValueError(f"placeholder {{{name}}} in metrics URL template {template!r} takes no format")
    if "[{host}]" in template:
        raise ValueError(
            f"metrics URL template {template!r}: write {{host}} without brackets; IPv6 hosts get them"
        )
    validate_url(template.format(**_PROBE), f"metrics URL template {template!r} gives")
    return template


def normalise_listener(name: str) -> str:
    """A listener name as Kafka stores it (``ListenerName.normalised``: upper case), or ValueError."""
    text = name.strip()
    if not text or any(c.isspace() for c in text) or ":" in text or "/" in text or "," in text:
        raise ValueError(
            f"listener name {name!r} is not a Kafka listener name (e.g. PLAINTEXT, INTERNAL: the part "
            "before :// in advertised.listeners)"
        )
    return text.upper()


def missing_listener(brokers: Mapping[int, BrokerRegistration], listener: str | None) -> str | None:
    """Why ``listener`` is bad input: no registered broker has it (a typo, or the wrong cluster); else None.
    A listener only some brokers have is not an error: those brokers get no metrics URL and say why."""
    if listener is None or not brokers:
        return None
    if any(b.endpoint(listener) is not None for b in brokers.values()):
        return None
    seen = sorted({e.listener for b in brokers.values() for e in b.endpoints})
    return f"no registered broker has that listener (their listeners: {', '.join(seen) or 'none'})"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class MetricsEndpoints:
    """Where each broker's metrics are: the explicit map first, else the template filled from the
    broker's registration (host and port of ``listener``, else of the listener named PLAINTEXT, Kafka's
    default inter-broker listener, else of the first one: :meth:`BrokerRegistration.endpoint`; IPv6 hosts
    bracketed; the rack percent-encoded). A broker without ``listener`` gets no URL (its scrape says why)."""

    def __init__(
        self, template: str | None = None, urls: Mapping[int, str] | None = None, listener: str | None = None
    ) -> None:
        self.template = None if template is None else validate_url_template(template)
        self.urls = {b: validate_url(u, f"metrics URL of broker {b}") for b, u in (urls or {}).items()}
        self.listener = None if listener is None else normalise_listener(listener)

    def url_for(self, broker: BrokerRegistration) -> str:
        if broker.id in self.urls:
            return self.urls[broker.id]
        if self.template is None:
            raise EndpointError(f"no metrics URL for broker {broker.id}: not in the map and no template")
        host, port = self._address(broker)
        if "{rack}" in self.template and broker.rack is None:
            raise EndpointError(f"broker {broker.id} has no rack for {{rack}} in {self.template!r}")
        rack = urllib.parse.quote(broker.rack or "", safe="")
        return self.template.format(host=_url_host(host), port=port, id=broker.id, rack=rack)

    def _address(self, broker: BrokerRegistration) -> tuple[str, int]:
        endpoint = broker.endpoint(self.listener)
        if endpoint is None and self.listener is not None:
            listeners = ", ".join(e.listener for e in broker.endpoints) or "none"
            raise EndpointError(f"broker {broker.id} has no listener {self.listener!r} (it has {listeners})")
        if endpoint is None:
            raise EndpointError(f"broker {broker.id} registered no endpoint")
        return endpoint.host, endpoint.port
