"""The webhook notifier: alert events from the store, through the outbox, to each webhook's receiver.

One thread polls every ``poll_interval_s``, and at once when woken (:meth:`Notifier.wake`: the incident
lane wakes it after each commit that wrote alert events and their outbox rows, so that a page does not wait
for the poll); while this instance is the leader it

1. writes an outbox row for every new (webhook, alert event) pair
   (:meth:`WebhookStore.enqueue_deliveries`; the body is rendered then and never changes; an event a
   silence matches is entered ``skipped``, and its alert pages when the silence ends if it is still open:
   :meth:`WebhookStore.release_silenced`, checked on every poll after a silence ended), and
2. sends the due rows: it claims a row (counting the attempt and leasing the row, in the database) before
   the request and records the outcome after it, so that a crash at any point neither loses a delivery
   (a leased row is sent again when its lease ends) nor sends it under another key: every attempt of a row
   carries the same ``Idempotency-Key``, and receivers deduplicate on it.

Outcomes: 2xx is delivered; 408, 429, 5xx, timeouts and connection errors are retried after an
exponential backoff with full jitter (``uniform(0, min(backoff_max_s, backoff_base_s * 2**(n-1)))`` after
the n-th attempt, or the receiver's ``Retry-After`` if longer), until ``max_attempts``; any other status
(3xx, 4xx) is a permanent error: the row is dead at once. Dead rows stay visible until requeued.

The backoff grows to minutes, and a receiver that answers again must not wait that long for its pending
events (a page): while a webhook has deliveries waiting on a backoff, its receiver is **probed** once
nobody has tried it for ``probe_interval_s`` (:func:`probe_at`; not before a ``Retry-After`` it asked
for). A probe sends those deliveries now (claimed and leased like attempts, the same key and body), oldest
event first, until one fails; a probe is not counted as an attempt and a failed one puts the delivery's
due time back, so the backoff schedule, ``max_attempts`` and the time to give up are what they were. So a
receiver's pending events go out within ``probe_interval_s`` (plus a poll) of its recovery.

**Re-sends.** A webhook in the ``alertmanager-api`` format (:data:`RESENT_FORMATS`) posts to Alertmanager,
which resolves an alert by itself at its ``endsAt``: so, as Prometheus does, an open alert is posted again
every ``alertmanager_resend_interval_s`` (rendered anew, ``endsAt`` ahead of the time it is sent) for as
long as it stays open, once its events are all sent (none pending in the outbox: an alert's events and its
re-sends arrive in order); its ``resolved`` event is an outbox row like any other, with ``endsAt`` the
resolution. Which alerts to re-send is read from the store (the open alerts and their outbox rows), so a
restarted or newly elected notifier goes on re-sending them; only the time of each alert's last re-send is
kept in memory (a new leader re-sends an open alert one interval after its last outbox row was written,
at once when that is past; Alertmanager takes it as the same alert). Re-sends go through the same egress
policy, signing, workers (one webhook at a time) and leadership as deliveries; one that fails is tried
again after the backoff (at most one interval later), and is not an outbox row (nothing to list or
requeue: the next re-send is the retry).

Only one instance delivers: the leader of :mod:`app.leadership` (an ephemeral znode on the cluster's
ZooKeeper, held for as long as the instance's session lives; always this one for a single instance). The
service shares one leadership between its notifier and its incident lane (:func:`service_leadership`), so
the replica that commits an alert event is the one whose notifier is woken to send it. While its session
is disconnected, the last leader stays the ``last-leader`` (:meth:`ZooKeeperLeadership.standing`) and keeps
delivering: when ZooKeeper itself is down nobody else can be elected, yet the incident lane's staleness
alert (rule 11) must still go out. That is safe because a delivery is claimed in the database (a lease)
before it is sent, and receivers deduplicate on the idempotency key.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Annotated, Any, Final, Literal, Self

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from app.leadership import DEFAULT_LOCK_PATH, AlwaysLeader, Leadership, service_leadership
from app.webhooks import formats
from app.webhooks.egress import EgressPolicy, parse_network
from app.webhooks.model import RESENT_FORMATS, AlertNotice, Webhook, WebhookDelivery
from app.webhooks.signing import delivery_headers
from app.webhooks.store import WebhookStore
from app.webhooks.transport import EgressGuard, Resolver, SystemResolver, guarded_client, refused_cause
from app.webhooks.urls import redact

__all__ = [
    "AttemptResult",
    "Notifier",
    "NotifierSettings",
    "NotifierStats",
    "Outcome",
    "backoff_s",
    "egress_guard",
    "ping",
    "post",
    "probe_at",
    "retry_delay_s",
    "service_notifier",
]

log = logging.getLogger(__name__)

USER_AGENT: Final = "kafka-health-webhooks/0.1"
ERROR_LOG_EVERY_S: Final = 60.0
RESEND_SCAN_MAX_S: Final = 5.0
"""The open alerts to re-send are looked for every quarter of the re-send interval, at least this often."""
_DRAIN_BYTES: Final = 4096


class NotifierSettings(BaseModel):
    """How the notifier polls, sends, retries and elects its leader."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    poll_interval_s: Annotated[float, Field(gt=0, le=60)] = 0.5
    """How often the outbox is filled from the alert events and due deliveries are sent."""
    timeout_s: Annotated[float, Field(gt=0, le=120)] = 5.0
    """HTTP timeout of one attempt (connect, write and read, each)."""
    max_attempts: Annotated[int, Field(ge=1, le=1000)] = 12
    """Attempts of one delivery before it is dead (with the defaults: retried for up to ~19 minutes);
    probes are not counted."""
    backoff_base_s: Annotated[float, Field(gt=0)] = 1.0
    backoff_max_s: Annotated[float, Field(gt=0)] = 300.0
    probe_interval_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    """While a webhook has deliveries waiting on a backoff, its receiver is tried (probed, not counted as
    an attempt) at least this often: the longest a receiver that answers again waits for its pending
    events, however long their backoffs have grown."""
    recent_s: Annotated[float, Field(gt=0)] = 600.0
    """Every poll looks for new events this recent (event time: their window's end)..."""
    full_scan_interval_s: Annotated[float, Field(gt=0)] = 30.0
    """...and this often (and on taking the leadership) for every new event within ``horizon_s``: so an
    event committed late (a job catching up) is sent within this interval, and polls stay cheap."""
    horizon_s: Annotated[float, Field(gt=0)] = 7 * 86400.0
    """Events older than this (event time) are not entered in the outbox any more; finished rows are pruned
    by the store's retention (``retention.webhook_deliveries``, which must exceed this by an hour)."""
    batch_size: Annotated[int, Field(ge=1, le=10_000)] = 100
    """Due deliveries read per poll."""
    workers: Annotated[int, Field(ge=1, le=64)] = 4
    """Webhooks sent to in parallel (one webhook's deliveries go one at a time)."""
    election: Literal["zookeeper", "none"] = "zookeeper"
    """``zookeeper``: instances elect one deliverer through ZooKeeper; ``none``: this one always delivers."""
    lock_path: str = DEFAULT_LOCK_PATH
    """The election's ephemeral znode, under the connect string's chroot."""
    zookeeper: str | None = None
    """Connect string for the election (``host:port[,...][/chroot]``); default: the cluster's."""
    session_timeout_s: Annotated[float, Field(ge=1, le=600)] = 10.0
    """The leadership's ZooKeeper session timeout: how long a crashed leader keeps the leadership (its
    ephemeral znode) before another instance takes over webhooks, incident alerts and runbook actions.
    ZooKeeper bounds what it grants to 2-20 of its ``tickTime`` (4-40 s by default)."""
    external_url: str = ""
    """This service's base URL, for links to alerts in payloads (none when empty)."""
    alertmanager_resend_interval_s: Annotated[float, Field(gt=0, le=3600)] = formats.DEFAULT_RESEND_INTERVAL_S
    """How often an open alert is posted again to an ``alertmanager-api`` webhook; its ``endsAt`` is
    :data:`~app.webhooks.formats.ENDS_AT_RESENDS` (4) intervals ahead, so Alertmanager resolves it by
    itself only when several re-sends in a row are missed."""
    allow_networks: Annotated[tuple[str, ...], NoDecode] = ()
    """CIDRs or addresses webhooks may reach although the egress policy refuses them by default (private,
    loopback, link-local, ...: :mod:`app.webhooks.egress`), for on-premises receivers: e.g.
    ``KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS=10.20.0.0/16,fd12::/64``. A cloud metadata address
    is allowed only when listed alone (``169.254.169.254/32``)."""
    allow_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    """Host names (exact, case-insensitive) whose addresses webhooks may reach whatever they are (metadata
    addresses excepted): ``KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_HOSTS=alerts.corp.internal``."""

    @field_validator("allow_networks", "allow_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):  # an environment variable: a,b,c or a JSON list
            if value.strip().startswith("["):
                try:
                    return tuple(json.loads(value))
                except (ValueError, TypeError):
                    raise ValueError(f"not a JSON list of strings: {value!r}") from None
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(parse_network(text)) for text in value)

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            if not host or any(c in host for c in "/:@[] ") or host.startswith("*"):
                raise ValueError(f"{host!r} is not a host name (exact names only, no port or wildcard)")
        return value

    @field_validator("lock_path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/") or "//" in value or value == "/":
            raise ValueError(f"lock_path must be an absolute znode path like {DEFAULT_LOCK_PATH}")
        return value

    @model_validator(mode="after")
    def _orders(self) -> Self:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError(
                f"backoff_max_s ({self.backoff_max_s:g}) must be at least backoff_base_s "
                f"({self.backoff_base_s:g})"
            )
        if self.recent_s > self.horizon_s:
            raise ValueError(f"recent_s ({self.recent_s:g}) must not exceed horizon_s ({self.horizon_s:g})")
        return self

    @property
    def egress(self) -> EgressPolicy:
        """The webhook egress policy with this section's allowlists."""
        return EgressPolicy.of(self.allow_networks, self.allow_hosts)

    @property
    def lease_s(self) -> float:
        """How long a claimed delivery is held for one attempt (longer than any attempt can take)."""
        return 4 * self.timeout_s + 5.0


# --- one attempt -----------------------------------------------------------------------------------------


Outcome = Literal["delivered", "retry", "permanent", "refused"]


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one POST came to: ``delivered`` (2xx), ``retry``, ``permanent`` (do not retry) or ``refused``
    (the egress policy refused every address of the host: nothing was sent)."""

    outcome: Outcome
    status: int | None
    error: str | None
    retry_after_s: float | None = None
    duration_s: float = 0.0


def post(
    client: httpx.Client,
    url: str,
    body: str,
    idempotency_key: str,
    secret: str | None,
    *,
    timeout_s: float,
    attempt: int = 1,
) -> AttemptResult:
    """POST ``body`` to ``url`` once, signed, and classify the answer (never raises). The error text is
    stored, logged and shown by the API, so the URL's secrets are masked in it (an exception's message may
    quote the URL); it never carries the receiver's answer, only its status: a reply body is whatever the
    URL's server says, and showing it would make a webhook a way to read internal services."""
    result = _post(client, url, body, idempotency_key, secret, timeout_s=timeout_s, attempt=attempt)
    if result.error is None:
        return result
    return replace(result, error=redact(result.error, url))


def _post(
    client: httpx.Client,
    url: str,
    body: str,
    idempotency_key: str,
    secret: str | None,
    *,
    timeout_s: float,
    attempt: int,
) -> AttemptResult:
    content = body.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Kafka-Health-Attempt": str(attempt),
        **delivery_headers(secret, content, idempotency_key),
    }
    started = time.monotonic()
    try:
        with client.stream("POST", url, content=content, headers=headers, timeout=timeout_s) as response:
            _drain(response)
            status = response.status_code
            retry_after = _retry_after(response.headers.get("retry-after"))
            reason = response.reason_phrase
    except httpx.TimeoutException as exc:
        return AttemptResult(
            "retry", None, f"timed out after {timeout_s:g} s ({type(exc).__name__})", None, _since(started)
        )
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        return AttemptResult("permanent", None, f"bad URL: {exc}", None, _since(started))
    except httpx.TransportError as exc:
        refused = refused_cause(exc)
        if refused is not None:
            return AttemptResult("refused", None, str(refused), None, _since(started))
        return AttemptResult("retry", None, f"{type(exc).__name__}: {exc}", None, _since(started))
    except Exception as exc:  # anything else: retried; the error says what
        return AttemptResult("retry", None, f"{type(exc).__name__}: {exc}", None, _since(started))
    duration = _since(started)
    if 200 <= status < 300:
        return AttemptResult("delivered", status, None, None, duration)
    text = f"HTTP {status} {reason}".rstrip()
    if 300 <= status < 400:
        text += " (redirects are not followed)"
    if status in (408, 429) or status >= 500:
        return AttemptResult("retry", status, text, retry_after, duration)
    return AttemptResult("permanent", status, text, None, duration)


def _drain(response: httpx.Response) -> None:
    """Read and discard the start of the body (at most a few KiB), so that a short reply leaves the
    connection reusable; nothing of it is kept."""
    read = 0
    for chunk in response.iter_raw():
        read += len(chunk)
        if read >= _DRAIN_BYTES:
            break


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP date: ignored, the backoff applies
    return seconds if seconds >= 0 else None


def _since(started: float) -> float:
    return time.monotonic() - started


def backoff_s(attempts: int, settings: NotifierSettings, rng: random.Random) -> float:
    """The delay after the ``attempts``-th failed attempt: full jitter over an exponential ceiling."""
    ceiling = min(settings.backoff_max_s, settings.backoff_base_s * 2.0 ** min(max(attempts - 1, 0), 60))
    return ceiling * rng.random()


def probe_at(
    last_tried_at: float | None, settings: NotifierSettings, quiet_until: float | None = None
) -> float:
    """When a receiver whose deliveries wait on a backoff is probed: ``probe_interval_s`` after any of its
    pending deliveries was last tried (``last_tried_at``; at once when none was), and not before the end of
    a ``Retry-After`` it answered (``quiet_until``)."""
    at = -math.inf if last_tried_at is None else last_tried_at + settings.probe_interval_s
    return at if quiet_until is None else max(at, quiet_until)


def retry_delay_s(delay_s: float, retry_after_s: float | None, settings: NotifierSettings) -> float:
    """``delay_s``, or the receiver's ``Retry-After`` (capped at ``backoff_max_s``) if that is longer."""
    return delay_s if retry_after_s is None else max(delay_s, min(retry_after_s, settings.backoff_max_s))


# --- the notifier ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Resend:
    """When an open alert is re-sent to a webhook next, and how many re-sends in a row failed."""

    next_at: float
    failures: int


@dataclass(frozen=True, slots=True)
class NotifierStats:
    """Counters of one notifier since it was created."""

    leader: bool = False
    """Delivering: the leader, or the last leader while its ZooKeeper session is disconnected."""
    wakes: int = 0
    """Polls started early by :meth:`Notifier.wake`."""
    polls: int = 0
    entered: int = 0
    """Rows written to the outbox (pending, or skipped by a filter)."""
    attempts: int = 0
    probes: int = 0
    """Early tries of deliveries waiting on a backoff (not counted in ``attempts``)."""
    delivered: int = 0
    retried: int = 0
    dead: int = 0
    resent: int = 0
    """Open alerts posted again to an ``alertmanager-api`` receiver (accepted)."""
    resend_failures: int = 0
    """Re-sends that failed (tried again after the backoff, or at the next interval)."""
    errors: int = 0
    """Polls or sends that failed on an unexpected error (logged)."""


class Notifier:
    """Sends webhook deliveries from the store's outbox; :meth:`start` / :meth:`stop` (or ``with``)."""

    def __init__(
        self,
        store: WebhookStore,
        settings: NotifierSettings | None = None,
        leadership: Leadership | None = None,
        *,
        resolver: Resolver | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings or NotifierSettings()
        self.leadership: Leadership = leadership or AlwaysLeader()
        self.egress = egress_guard(self.settings, resolver)
        """The egress policy every send goes through (and the API checks URLs with)."""
        self._rng = rng or random.Random()
        self._clock = clock
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._busy: set[int] = set()
        self._mutex = threading.Lock()
        self._stats = NotifierStats()
        self._next_full_scan = 0.0
        self._silences_checked_at = 0.0
        self._quiet_until: dict[int, float] = {}
        """Per webhook: the end of the last ``Retry-After`` its receiver answered (no probe before)."""
        self._next_resend_scan = 0.0
        self._resends: dict[tuple[int, str], _Resend] = {}
        """Per (webhook, alert fingerprint): when it is re-sent next, after failures (in memory only)."""

    # -- running

    def start(self) -> None:
        """Start the leadership client and the polling thread (returns at once)."""
        if self._thread is not None:
            raise RuntimeError("the notifier is already running")
        self._stopping.clear()
        self.leadership.start()
        self._pool = ThreadPoolExecutor(self.settings.workers, thread_name_prefix="webhook-send")
        self._thread = threading.Thread(target=self._run, name="webhook-notifier", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling, let the requests in flight finish (each within its timeout) and record them, then
        give up the leadership. Pending deliveries stay in the outbox for the next leader."""
        self._stopping.set()
        self._woken.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self.leadership.stop()
        self._set(leader=False)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def wake(self) -> None:
        """Poll now instead of at the end of the current wait: new events are in the store (returns at once;
        wakes that arrive during a poll make one more poll)."""
        self._woken.set()

    def stats(self) -> NotifierStats:
        with self._mutex:
            return self._stats

    # -- one-off sends

    def ping(self, webhook: Webhook) -> tuple[AlertNotice, AttemptResult]:
        """Send a made-up event (:func:`formats.ping_notice`) to ``webhook`` now, outside the outbox."""
        return ping(webhook, self.settings, self.egress)

    def render(self, webhook: Webhook, notice: AlertNotice) -> str:
        return formats.render(
            webhook,
            notice,
            external_url=self.settings.external_url,
            now=self._clock(),
            resend_interval_s=self.settings.alertmanager_resend_interval_s,
        )

    # -- the loop

    def _run(self) -> None:
        last_error, logged_at = "", 0.0
        while not self._stopping.is_set():
            try:
                self.poll()
            except Exception as exc:  # e.g. the store unreachable: keep polling, log each new error once
                self._count(errors=1)
                error, now = f"{type(exc).__name__}: {exc}", time.monotonic()
                if error != last_error or now - logged_at >= ERROR_LOG_EVERY_S:
                    log.exception("webhook notifier: the poll failed; retrying every %g s", self._interval)
                    last_error, logged_at = error, now
            if self._woken.wait(self._interval) and not self._stopping.is_set():
                self._count(wakes=1)
            self._woken.clear()

    @property
    def _interval(self) -> float:
        return self.settings.poll_interval_s

    def poll(self) -> None:
        """One pass: check the leadership, fill the outbox, hand the due deliveries to the senders."""
        standing = self.leadership.standing()
        leader = standing != "follower"
        with self._mutex:
            if leader != self._stats.leader:
                log.info(
                    "webhook notifier: %s the leadership (%s)",
                    "took" if leader else "does not hold",
                    standing,
                )
                self._next_full_scan = 0.0
            self._stats = replace(self._stats, leader=leader, polls=self._stats.polls + 1)
        if not leader:
            return
        settings = self.settings
        now = self._clock()
        full = now >= self._next_full_scan
        # an alert a silence held pages once the silence ends (before its later events are entered)
        released = self.store.release_silenced(
            now, self.render, ended_since=None if full else self._silences_checked_at
        )
        self._silences_checked_at = now
        if released:
            log.info("webhook notifier: %d held deliveries released: their silences ended", released)
        limit = 10 * settings.batch_size
        entered = self.store.enqueue_deliveries(
            now, self.render, horizon_s=settings.horizon_s if full else settings.recent_s, limit=limit
        )
        if entered:
            self._count(entered=entered)
        if full and entered < limit:  # else more are waiting: scan everything again next time
            self._next_full_scan = now + settings.full_scan_interval_s
        due = self.store.due_deliveries(now, limit=settings.batch_size)
        groups: dict[int, list[WebhookDelivery]] = {}
        for delivery in due:
            groups.setdefault(delivery.webhook_id, []).append(delivery)
        with self._mutex:
            quiet = dict(self._quiet_until)
        probed = [
            webhook_id
            for webhook_id, tried in self.store.backed_off_webhooks(now).items()
            if webhook_id not in groups and probe_at(tried, settings, quiet.get(webhook_id)) <= now
        ]
        resends = self._due_resends(now)
        if not groups and not probed and not resends:
            return
        hooks = {hook.id: hook for hook in self.store.webhooks(enabled=True)}
        for webhook_id, deliveries in groups.items():
            if webhook_id in hooks:
                self._submit(hooks[webhook_id], deliveries, probe=False)
        for webhook_id in probed:
            if webhook_id in hooks and not self._is_busy(webhook_id):
                waiting = self.store.backed_off_deliveries(webhook_id, now, limit=settings.batch_size)
                if waiting:
                    self._submit(hooks[webhook_id], waiting, probe=True)
        for webhook_id, notices in resends.items():
            if webhook_id in hooks and webhook_id not in groups and webhook_id not in probed:
                self._submit_resends(hooks[webhook_id], notices)

    def _due_resends(self, now: float) -> dict[int, list[AlertNotice]]:
        """The open alerts due to be re-sent, per webhook (looked for every quarter interval at most)."""
        interval = self.settings.alertmanager_resend_interval_s
        if now < self._next_resend_scan:
            return {}
        self._next_resend_scan = now + min(interval / 4, RESEND_SCAN_MAX_S)
        sent = self.store.open_alerts_sent(RESENT_FORMATS)
        due: dict[int, list[AlertNotice]] = {}
        with self._mutex:
            known = {(webhook_id, notice.event.fingerprint) for webhook_id, notice, _ in sent}
            for key in set(self._resends) - known:  # resolved, or its webhook changed: forget it
                del self._resends[key]
            for webhook_id, notice, rendered_at in sent:
                state = self._resends.get((webhook_id, notice.event.fingerprint))
                at = rendered_at + interval if state is None else max(rendered_at + interval, state.next_at)
                if at <= now:
                    due.setdefault(webhook_id, []).append(notice)
        return due

    def _submit_resends(self, webhook: Webhook, notices: list[AlertNotice]) -> None:
        """Re-send ``notices`` to ``webhook`` in a worker, unless one is sending to it already."""
        with self._mutex:
            if webhook.id in self._busy or self._pool is None:
                return
            self._busy.add(webhook.id)
            self._pool.submit(self._resend_all, webhook, notices)

    def _resend_all(self, webhook: Webhook, notices: list[AlertNotice]) -> None:
        try:
            with _client(self.settings, self.egress) as client:
                for notice in notices:
                    if self._stopping.is_set() or not self.stats().leader:
                        break
                    self._resend(client, webhook, notice)
        except Exception:
            self._count(errors=1)
            log.exception("webhook notifier: re-sending to webhook %d (%s) failed", webhook.id, webhook.name)
        finally:
            with self._mutex:
                self._busy.discard(webhook.id)

    def _resend(self, client: httpx.Client, webhook: Webhook, notice: AlertNotice) -> Outcome:
        """Post the open alert of ``notice`` to ``webhook`` again (rendered now), and schedule the next."""
        settings = self.settings
        key = (webhook.id, notice.event.fingerprint)
        with self._mutex:
            failures = self._resends[key].failures if key in self._resends else 0
        result = post(
            client,
            formats.delivery_url(webhook.format, webhook.url),
            self.render(webhook, notice),
            notice.idempotency_key,
            webhook.secret,
            timeout_s=settings.timeout_s,
            attempt=failures + 1,
        )
        done = self._clock()
        interval = settings.alertmanager_resend_interval_s
        where = f"webhook {webhook.id} ({webhook.name}) re-send of [{notice.idempotency_key}]"
        if result.outcome == "delivered":
            state = _Resend(done + interval, 0)
            self._count(resent=1)
            log.debug("%s delivered", where)
        else:
            failures += 1
            delay = interval
            if result.outcome == "retry":
                backoff = backoff_s(failures, settings, self._rng)
                delay = min(interval, retry_delay_s(backoff, result.retry_after_s, settings))
            state = _Resend(done + delay, failures)
            self._count(resend_failures=1)
            log.warning(
                "%s failed (%s), tried again in %.1f s: %s", where, result.outcome, delay, result.error
            )
        with self._mutex:
            self._resends[key] = state
        return result.outcome

    def _is_busy(self, webhook_id: int) -> bool:
        with self._mutex:
            return webhook_id in self._busy

    def _submit(self, webhook: Webhook, deliveries: list[WebhookDelivery], *, probe: bool) -> None:
        """Send ``deliveries`` to ``webhook`` in a worker, unless one is sending to it already."""
        with self._mutex:
            if webhook.id in self._busy or self._pool is None:
                return
            self._busy.add(webhook.id)
            self._pool.submit(self._send_all, webhook, deliveries, probe)

    def _send_all(self, webhook: Webhook, deliveries: list[WebhookDelivery], probe: bool = False) -> None:
        """Send ``deliveries`` one at a time; a probe stops at the first that is to be retried (the receiver
        still fails: the others keep their backoffs)."""
        try:
            with _client(self.settings, self.egress) as client:
                for delivery in deliveries:
                    if self._stopping.is_set() or not self.stats().leader:
                        break
                    outcome = self._send(client, webhook, delivery, probe=probe)
                    if probe and outcome == "retry":
                        break
        except Exception:
            self._count(errors=1)
            log.exception("webhook notifier: sending to webhook %d (%s) failed", webhook.id, webhook.name)
        finally:
            with self._mutex:
                self._busy.discard(webhook.id)

    def _send(
        self, client: httpx.Client, webhook: Webhook, delivery: WebhookDelivery, *, probe: bool = False
    ) -> Outcome | None:
        """One attempt of ``delivery`` (a probe: an early try of its next attempt, not counted, that puts its
        due time back if it fails), recorded; its outcome, or None when it was not sent."""
        settings = self.settings
        now = self._clock()
        lease_until = now + settings.lease_s
        due_at = delivery.next_attempt_at
        if probe:
            claimed = self.store.claim_probe(delivery, now, lease_until=lease_until)
        else:
            claimed = self.store.claim_delivery(delivery.id, now, lease_until=lease_until)
        if claimed is None:
            return None  # delivered, claimed or tried meanwhile (or, for a probe, due now)
        if claimed.payload is None:
            self.store.mark_dead(claimed.id, error="the outbox row has no payload")
            self._count(dead=1)
            return "permanent"
        attempt = claimed.attempts + 1 if probe else claimed.attempts
        result = post(
            client,
            formats.delivery_url(webhook.format, webhook.url),
            claimed.payload,
            claimed.idempotency_key,
            webhook.secret,
            timeout_s=settings.timeout_s,
            attempt=attempt,
        )
        self._count(**({"probes": 1} if probe else {"attempts": 1}))
        done = self._clock()
        if result.outcome == "retry" and result.retry_after_s is not None:
            with self._mutex:
                self._quiet_until[webhook.id] = done + retry_delay_s(0.0, result.retry_after_s, settings)
        where = f"webhook {webhook.id} ({webhook.name}) delivery {claimed.id} [{claimed.idempotency_key}]"
        if result.outcome == "delivered":
            self.store.mark_delivered(claimed.id, at=done, status=result.status)
            self._count(delivered=1)
            if probe:
                log.info("%s delivered by a probe: the receiver answers again", where)
            else:
                log.debug("%s delivered (attempt %d)", where, claimed.attempts)
        elif result.outcome == "refused":
            error = (
                f"not sent: {result.error}; fix the webhook's URL (or allow the receiver: allow_networks, "
                "allow_hosts), then retry the delivery"
            )
            self.store.mark_dead(claimed.id, error=error)
            self._count(dead=1)
            log.warning("%s is dead: %s", where, error)
        elif result.outcome == "permanent":
            error = f"permanent error, not retried: {result.error}; fix the webhook, then retry the delivery"
            self.store.mark_dead(claimed.id, error=error, status=result.status)
            self._count(dead=1)
            log.warning("%s is dead: %s", where, error)
        elif probe and due_at is not None:
            next_attempt_at = max(due_at, done + retry_delay_s(0.0, result.retry_after_s, settings))
            self.store.mark_failed(
                claimed.id,
                next_attempt_at=next_attempt_at,
                error=f"probe before attempt {attempt}: {result.error}",
                status=result.status,
            )
            log.info(
                "%s: the receiver still fails (probe, not counted): %s; attempt %d in %.1f s, the next probe "
                "in %g s",
                where,
                result.error,
                attempt,
                max(0.0, next_attempt_at - done),
                settings.probe_interval_s,
            )
        elif claimed.attempts >= settings.max_attempts:
            error = f"gave up after {claimed.attempts} attempts: {result.error}"
            self.store.mark_dead(claimed.id, error=error, status=result.status)
            self._count(dead=1)
            log.warning("%s is dead: %s", where, error)
        else:
            delay = retry_delay_s(
                backoff_s(claimed.attempts, settings, self._rng), result.retry_after_s, settings
            )
            self.store.mark_failed(
                claimed.id,
                next_attempt_at=done + delay,
                error=f"attempt {claimed.attempts}: {result.error}",
                status=result.status,
            )
            self._count(retried=1)
            log.info(
                "%s failed (attempt %d), retrying in %.1f s: %s", where, claimed.attempts, delay, result.error
            )
        return result.outcome

    def _count(self, **increments: int) -> None:
        with self._mutex:
            self._stats = replace(
                self._stats, **{name: getattr(self._stats, name) + n for name, n in increments.items()}
            )

    def _set(self, **values: Any) -> None:
        with self._mutex:
            self._stats = replace(self._stats, **values)


def egress_guard(settings: NotifierSettings, resolver: Resolver | None = None) -> EgressGuard:
    """The egress policy of ``settings`` through ``resolver`` (default: the operating system's)."""
    return EgressGuard(settings.egress, resolver or SystemResolver())


def _client(settings: NotifierSettings, guard: EgressGuard) -> httpx.Client:
    return guarded_client(guard, timeout_s=settings.timeout_s, headers={"User-Agent": USER_AGENT})


def ping(
    webhook: Webhook, settings: NotifierSettings | None = None, guard: EgressGuard | None = None
) -> tuple[AlertNotice, AttemptResult]:
    """Send :func:`formats.ping_notice` to ``webhook`` once, now (no outbox, no retries), through the egress
    policy (``guard``, default: ``settings``' through the system resolver)."""
    settings = settings or NotifierSettings()
    guard = guard or egress_guard(settings)
    notice = formats.ping_notice(webhook)
    body = formats.render(
        webhook,
        notice,
        external_url=settings.external_url,
        now=notice.event.at,
        resend_interval_s=settings.alertmanager_resend_interval_s,
    )
    url = formats.delivery_url(webhook.format, webhook.url)
    with _client(settings, guard) as client:
        result = post(client, url, body, notice.idempotency_key, webhook.secret, timeout_s=settings.timeout_s)
    return notice, result


@contextlib.contextmanager
def service_notifier(
    store: WebhookStore | None,
    zookeeper: str,
    settings: NotifierSettings | None = None,
    leadership: Leadership | None = None,
) -> Iterator[Notifier | None]:
    """The service's notifier, running for the ``with`` block (None, and nothing runs, without a store),
    on ``leadership`` (default :func:`service_leadership`; the notifier starts it and stops it)."""
    if store is None:
        yield None
        return
    settings = settings or NotifierSettings()
    leadership = leadership or service_leadership(zookeeper, settings)
    with Notifier(store, settings=settings, leadership=leadership) as notifier:
        yield notifier
