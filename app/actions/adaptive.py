"""The adaptive replication throttle's controller: how a reassignment's throttle follows the load of the
brokers it involves. Pure: the executor reads the signals, asks :func:`next_rate`, writes the throttle
configs and audits the decision.

A static throttle low enough to be safe at peak makes a big move take days; one high enough to finish
overnight hurts producers at peak. The controller moves the rate between the request's bounds instead:

* **Healthy** brokers (every signal they have within its threshold, no under-replicated partition outside
  the reassignment) raise the rate by a fixed step (additive increase), toward ``max_bytes_per_s``.
* **One unhealthy** broker, or one under-replicated partition outside the moving partitions, lowers it by
  a factor (multiplicative decrease), toward ``min_bytes_per_s``. Additive increase and multiplicative
  decrease is how TCP shares a link: a rate pushed down fast when it hurts, back up slowly, converges
  rather than swings.
* The rate changes **at most once per** ``interval_s``: the signals are smoothed over about a minute
  (Kafka's one-minute rates, the histograms' decaying reservoirs), so a change needs time to show before
  the next is judged.
* A copy **falling behind** (its bytes remaining grew for ``stall_after_s``:
  :func:`app.actions.progress.falling_behind`) is raised at once, past the step, by :func:`catch_up`: to
  the current rate plus twice the growth (the remainder then shrinks as fast as it grew), within
  ``max_bytes_per_s``. Not when a broker is unhealthy (the load the controller lowers the rate for would
  only grow), nor above the ceiling: then the action goes STALLED, the reason saying why the rate holds.
* A broker whose **signals are missing** (not scraped, or its exporter does not have them) counts neither
  as healthy nor as unhealthy, and the reason says so; with **no signals at all** and no under-replicated
  partition, the rate holds: nothing is known, so nothing changes.

The signals (``collectors.metrics.BROKER_SIGNALS``) and their defaults:

* ``request_handler_idle`` below ``request_handler_idle_min`` (0.3): the request handler threads are
  more than 70 % busy; requests start to wait for a free handler, and the broker has little room left for
  a burst of its clients' traffic.
* ``network_processor_idle`` below ``network_processor_idle_min`` (0.3): the same for the network threads.
* ``produce_p99_ms`` above ``produce_p99_max_ms`` (500 ms, an absolute bound: producers feel it), or
  above ``produce_p99_factor`` (3) times the broker's own baseline (its p99 before the reassignment
  began) and above ``produce_p99_floor_ms`` (20 ms: under it a multiple of a tiny baseline is noise).
* any under-replicated partition outside the moving partitions (:func:`urps_outside`): replication is
  already failing somewhere the reassignment is not supposed to touch.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from collectors.health import expected_isr_size
from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.metrics import MetricsScrape

REQUEST_HANDLER_IDLE = "request_handler_idle"
NETWORK_PROCESSOR_IDLE = "network_processor_idle"
PRODUCE_P99_MS = "produce_p99_ms"
UNDER_REPLICATED = "under_replicated"
MAX_RATE = 2**63 - 1
"""The largest rate in bytes/s: Kafka's throttle configs are Java longs (the service's bounds,
``app.service.schemas.common``, say the same; this layer cannot import them)."""
_LISTED = 5
"""Partitions or brokers named in a reason; the rest are counted."""


class AdaptiveThrottle(BaseModel):
    """A reassignment's ``throttle: {"mode": "adaptive", "min_bytes_per_s": ..., "max_bytes_per_s": ...}``;
    the rest is optional (see the module docstring for what each threshold means and why)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["adaptive"]
    min_bytes_per_s: Annotated[StrictInt, Field(ge=1, le=MAX_RATE)]
    """The floor: replication never stops (0 would never finish); also the starting rate."""
    max_bytes_per_s: Annotated[StrictInt, Field(ge=1, le=MAX_RATE)]
    interval_s: Annotated[float, Field(gt=0, le=86_400)] = 30.0
    """At most one change per interval."""
    increase_step_bytes_per_s: Annotated[StrictInt, Field(ge=1, le=MAX_RATE)] | None = None
    """Added when healthy; None: a tenth of (max - min), at least 1 (ten healthy intervals from the floor
    to the ceiling)."""
    decrease_factor: Annotated[float, Field(gt=0, lt=1)] = 0.5
    """Multiplied when unhealthy."""
    request_handler_idle_min: Annotated[float, Field(ge=0, le=1)] = 0.3
    network_processor_idle_min: Annotated[float, Field(ge=0, le=1)] = 0.3
    produce_p99_max_ms: Annotated[float, Field(gt=0)] = 500.0
    produce_p99_factor: Annotated[float, Field(gt=1)] = 3.0
    produce_p99_floor_ms: Annotated[float, Field(ge=0)] = 20.0

    @model_validator(mode="after")
    def _check_bounds(self) -> AdaptiveThrottle:
        if self.min_bytes_per_s > self.max_bytes_per_s:
            raise ValueError(
                f"min_bytes_per_s ({self.min_bytes_per_s}) is above max_bytes_per_s ({self.max_bytes_per_s})"
            )
        return self

    @property
    def step(self) -> int:
        """The additive increase, bytes/s."""
        if self.increase_step_bytes_per_s is not None:
            return self.increase_step_bytes_per_s
        return max(1, (self.max_bytes_per_s - self.min_bytes_per_s) // 10)

    @property
    def initial_rate(self) -> int:
        """Where a reassignment starts: the floor, raised as the brokers show they can take more."""
        return self.min_bytes_per_s

    def clamp(self, rate: float) -> int:
        """``rate`` as a whole number of bytes/s within [min, max]."""
        return int(min(self.max_bytes_per_s, max(self.min_bytes_per_s, math.floor(rate))))


@dataclass(frozen=True, slots=True)
class BrokerSignals:
    """One broker's request signals; None where it has not given one."""

    request_handler_idle: float | None = None
    network_processor_idle: float | None = None
    produce_p99_ms: float | None = None
    produce_p99_baseline_ms: float | None = None
    """The broker's produce p99 before the reassignment began (None: unknown; only the absolute bound
    applies)."""

    @property
    def known(self) -> bool:
        return any(
            v is not None and math.isfinite(v)
            for v in (self.request_handler_idle, self.network_processor_idle, self.produce_p99_ms)
        )


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason to lower the rate: a broker's signal past its threshold, or partitions under-replicated
    outside the reassignment (``broker`` None)."""

    signal: str
    value: float
    threshold: float
    broker: int | None = None
    sentence: str = ""


@dataclass(frozen=True, slots=True)
class Assessment:
    """The brokers involved, sorted into the three kinds, and the findings against them."""

    healthy: tuple[int, ...]
    unhealthy: tuple[int, ...]
    unknown: tuple[int, ...]
    findings: tuple[Finding, ...]

    @property
    def any_unhealthy(self) -> bool:
        return bool(self.findings)


@dataclass(frozen=True, slots=True)
class ThrottleDecision:
    """A change of the throttle, for the executor to write and the audit to keep."""

    rate: int
    previous: int
    direction: Literal["raise", "lower"]
    reason: str
    """One sentence naming the brokers and signals behind it."""
    at: float
    findings: tuple[Finding, ...] = ()


# --- reading the signals --------------------------------------------------------------------------------


def signals_from_scrape(
    scrape: MetricsScrape | None, baselines: Mapping[int, float] | None = None
) -> dict[int, BrokerSignals]:
    """Each broker's signals from the metrics collector's scrape (the brokers scraped well), with its
    produce p99 baseline from ``baselines`` (see :func:`produce_baselines`)."""
    if scrape is None:
        return {}
    known = baselines or {}
    out: dict[int, BrokerSignals] = {}
    for broker, scraped in scrape.scrapes.items():
        if not scraped.ok:
            continue
        values = scraped.values
        out[broker] = BrokerSignals(
            request_handler_idle=_finite(values.get(REQUEST_HANDLER_IDLE)),
            network_processor_idle=_finite(values.get(NETWORK_PROCESSOR_IDLE)),
            produce_p99_ms=_finite(values.get(PRODUCE_P99_MS)),
            produce_p99_baseline_ms=known.get(broker),
        )
    return out


def produce_baselines(scrape: MetricsScrape | None) -> dict[int, float]:
    """Each broker's produce p99 now, to keep as its baseline when a reassignment begins (brokers without
    one, or with 0, a histogram without samples, are left out)."""
    if scrape is None:
        return {}
    return {
        b: v
        for b, v in scrape.values(PRODUCE_P99_MS).items()
        if math.isfinite(v) and v > 0 and scrape.scrapes[b].ok
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def urps_outside(
    snapshot: ClusterSnapshot, moving_partitions: Collection[TopicPartition]
) -> tuple[TopicPartition, ...]:
    """The partitions under-replicated (ISR smaller than the assigned replicas, new replicas of a running
    reassignment not counted) that are not among ``moving_partitions``, sorted. A partition without a
    state znode (no controller has started it) is not counted: its ISR is not known."""
    moving = frozenset(moving_partitions)
    found = [
        tp
        for tp, info in snapshot.partitions.items()
        if tp not in moving
        and info.state is not None
        and len(info.state.isr) < expected_isr_size(info.assignment)
    ]
    return tuple(sorted(found))


# --- judging them -----------------------------------------------------------------------------------------


def assess(
    signals_by_broker: Mapping[int, BrokerSignals],
    brokers_involved: Collection[int],
    urps_outside_moving: Collection[TopicPartition],
    settings: AdaptiveThrottle,
) -> Assessment:
    """Sort the brokers involved into healthy, unhealthy and unknown (no signal at all), with a finding per
    signal past its threshold, and one for the under-replicated partitions outside the reassignment."""
    healthy: list[int] = []
    unhealthy: list[int] = []
    unknown: list[int] = []
    findings: list[Finding] = []
    for broker in sorted(set(brokers_involved)):
        signals = signals_by_broker.get(broker)
        if signals is None or not signals.known:
            unknown.append(broker)
            continue
        found = _broker_findings(broker, signals, settings)
        (unhealthy if found else healthy).append(broker)
        findings.extend(found)
    urps = sorted(set(urps_outside_moving))
    if urps:
        findings.append(
            Finding(
                UNDER_REPLICATED,
                float(len(urps)),
                0.0,
                sentence=f"{len(urps)} partition(s) under-replicated outside the reassignment "
                f"({_listed([str(tp) for tp in urps])})",
            )
        )
    return Assessment(tuple(healthy), tuple(unhealthy), tuple(unknown), tuple(findings))


def _broker_findings(broker: int, s: BrokerSignals, settings: AdaptiveThrottle) -> list[Finding]:
    found = []
    idle_checks = (
        (
            REQUEST_HANDLER_IDLE,
            "request-handler idle",
            _finite(s.request_handler_idle),
            settings.request_handler_idle_min,
        ),
        (
            NETWORK_PROCESSOR_IDLE,
            "network-processor idle",
            _finite(s.network_processor_idle),
            settings.network_processor_idle_min,
        ),
    )
    for signal, words, value, minimum in idle_checks:
        if value is not None and value < minimum:
            found.append(
                Finding(
                    signal, value, minimum, broker, f"broker {broker}: {words} {value:.2f} < {minimum:.2f}"
                )
            )
    p99 = _finite(s.produce_p99_ms)
    if p99 is not None:
        limit = produce_p99_limit_ms(s.produce_p99_baseline_ms, settings)
        if p99 > limit:
            because = (
                f"{settings.produce_p99_factor:g}x its baseline {s.produce_p99_baseline_ms:.1f} ms"
                if limit < settings.produce_p99_max_ms
                else "the absolute bound"
            )
            found.append(
                Finding(
                    PRODUCE_P99_MS,
                    p99,
                    limit,
                    broker,
                    f"broker {broker}: produce p99 {p99:.1f} ms > {limit:.1f} ms ({because})",
                )
            )
    return found


def produce_p99_limit_ms(baseline_ms: float | None, settings: AdaptiveThrottle) -> float:
    """Above this a broker's produce p99 is unhealthy: the absolute bound, or, with a baseline, the lower
    of that bound and ``factor x baseline`` (never under the floor)."""
    if baseline_ms is None or not math.isfinite(baseline_ms) or baseline_ms <= 0:
        return settings.produce_p99_max_ms
    relative = max(settings.produce_p99_floor_ms, settings.produce_p99_factor * baseline_ms)
    return min(settings.produce_p99_max_ms, relative)


# --- deciding --------------------------------------------------------------------------------------------


def next_rate(
    current: int,
    signals_by_broker: Mapping[int, BrokerSignals],
    brokers_involved: Collection[int],
    urps_outside_moving: Collection[TopicPartition],
    now: float,
    last_change_at: float | None,
    settings: AdaptiveThrottle,
) -> ThrottleDecision | None:
    """The throttle's next rate, or None to keep ``current``: too soon since the last change (``now -
    last_change_at < interval_s``), nothing known (no signal from any broker involved and no
    under-replicated partition outside the reassignment), or already at the bound it would move toward.

    Lower by ``decrease_factor`` when anything is unhealthy, else raise by the step; the result is always
    within [min, max] (a ``current`` outside them is brought back within by the next decision)."""
    if last_change_at is not None and now - last_change_at < settings.interval_s:
        return None
    found = assess(signals_by_broker, brokers_involved, urps_outside_moving, settings)
    if found.any_unhealthy:
        target = settings.clamp(current * settings.decrease_factor)
        why = "; ".join(f.sentence for f in found.findings)
    elif found.healthy:
        target = settings.clamp(current + settings.step)
        why = f"{_brokers(found.healthy)} healthy (every signal within its threshold)"
    else:
        return None
    if target == current:
        return None
    direction: Literal["raise", "lower"] = "raise" if target > current else "lower"
    verb = "raising" if direction == "raise" else "lowering"
    if not settings.min_bytes_per_s <= current <= settings.max_bytes_per_s:
        verb += " (back within the bounds)"
    reason = f"{verb} the throttle {_rate(current)} -> {_rate(target)}: {why}"
    if found.unknown:
        reason += f"; {_brokers(found.unknown)} without signals, counted neither healthy nor unhealthy"
    return ThrottleDecision(target, current, direction, reason, now, found.findings)


def catch_up(
    current: int,
    growth_bytes_per_s: float,
    why: str,
    signals_by_broker: Mapping[int, BrokerSignals],
    brokers_involved: Collection[int],
    urps_outside_moving: Collection[TopicPartition],
    now: float,
    settings: AdaptiveThrottle,
) -> ThrottleDecision | str:
    """The answer to a copy falling behind by ``growth_bytes_per_s`` (``why``: the verdict's figures): a
    raise to ``current + 2 x growth`` (at least by the step, at most to ``max_bytes_per_s``), or, as a
    sentence, why the rate cannot rise: it is at its ceiling, or a broker involved is unhealthy (or
    partitions outside the reassignment are under-replicated), the load :func:`next_rate` lowers it for.
    Not bound by ``interval_s``: a verdict takes a whole ``stall_after_s`` of growth to form."""
    found = assess(signals_by_broker, brokers_involved, urps_outside_moving, settings)
    if found.any_unhealthy:
        held = "; ".join(f.sentence for f in found.findings)
        return f"the adaptive throttle cannot rise from {_rate(current)}: {held}"
    if current >= settings.max_bytes_per_s:
        return f"the adaptive throttle is at its maximum, {_rate(settings.max_bytes_per_s)}"
    wanted = current + max(settings.step, math.ceil(2 * max(0.0, growth_bytes_per_s)))
    target = settings.clamp(wanted)
    reason = f"raising the throttle {_rate(current)} -> {_rate(target)}: the reassignment is {why}"
    return ThrottleDecision(target, current, "raise", reason, now)


def _rate(bytes_per_s: int) -> str:
    return f"{bytes_per_s} B/s ({bytes_per_s / 1024 / 1024:.1f} MiB/s)"


def _brokers(ids: tuple[int, ...]) -> str:
    word = "broker" if len(ids) == 1 else "brokers"
    return f"{word} {_listed([str(b) for b in ids])}"


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return f"{shown} and {len(names) - _LISTED} more" if len(names) > _LISTED else shown
