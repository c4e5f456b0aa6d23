"""``/consumer-groups``: the consumer groups of the latest consumer-lag round (:mod:`collectors.consumers`),
each with its lag, how far behind in seconds and its verdict; one group's partitions."""

from __future__ import annotations

from pydantic import BaseModel

from collectors.consumers.collector import ConsumerRound, GroupReport
from collectors.consumers.lag import PartitionLag


class ConsumerGroupFields(BaseModel):
    group: str
    state: str
    """The group's state as its coordinator says it (``Stable``, ``Empty``, ``PreparingRebalance``, ...;
    ``Dead`` when it could not be described)."""
    members: int
    lag: int | None
    """Records behind, summed over its partitions with a commit; null when none has one."""
    max_lag_seconds: float | None
    """How far behind its furthest partition is, in seconds (null: not known)."""
    max_lag_seconds_at_least: bool
    """True when ``max_lag_seconds`` is a lower bound: the log end was last at the committed offset before
    the collector's log-end history begins."""
    status: str
    """The verdict: ``ok``, ``lagging``, ``stopped``, ``stalled``, ``rewound``, ``no_consumer`` or
    ``falling_off_log`` (docs/alert-rules.md, rule 19)."""
    severity: str
    """``ok``, ``warning`` or ``critical``."""
    reason: str
    """Why, in a sentence (with the figures behind the verdict)."""

    @staticmethod
    def fields(report: GroupReport) -> dict[str, object]:
        lag, verdict = report.lag, report.verdict
        return {
            "group": lag.group,
            "state": lag.state,
            "members": lag.members,
            "lag": lag.lag,
            "max_lag_seconds": lag.max_lag_seconds,
            "max_lag_seconds_at_least": lag.max_lag_seconds_at_least,
            "status": verdict.status,
            "severity": verdict.severity,
            "reason": verdict.reason,
        }


class ConsumerGroupOut(ConsumerGroupFields):
    partition_count: int
    """Its partitions: those with a commit or assigned to a member."""

    @classmethod
    def of(cls, report: GroupReport) -> ConsumerGroupOut:
        return cls.model_validate({**cls.fields(report), "partition_count": len(report.lag.partitions)})


class ConsumerGroupsOut(BaseModel):
    groups: list[ConsumerGroupOut]
    """Every group of the round (after the ``kafka.include``/``kafka.exclude`` filters), by name."""
    at: float
    """When the round read the log offsets (Unix time)."""
    errors: dict[str, str]
    """Groups whose committed offsets could not be read this round: group -> why."""
    error: str | None = None
    """Why the rounds since this one failed (null: this is the latest round)."""

    @classmethod
    def of(cls, round_: ConsumerRound, error: str | None = None) -> ConsumerGroupsOut:
        return cls(
            groups=[ConsumerGroupOut.of(round_.groups[g]) for g in sorted(round_.groups)],
            at=round_.at,
            errors=dict(sorted(round_.errors.items())),
            error=error,
        )


class ConsumerPartitionOut(BaseModel):
    topic: str
    partition: int
    committed: int | None
    """The group's committed offset; null without a commit."""
    log_start: int | None
    log_end: int | None
    """The partition's log-start and log-end offsets (null: its leader did not answer)."""
    lag: int | None
    """``log_end - committed`` (never negative); null without a commit."""
    lag_seconds: float | None
    """How long ago the log end was where the group is now (0 when caught up); null: not known."""
    lag_seconds_at_least: bool
    """True when ``lag_seconds`` is a lower bound (older than the collector's log-end history)."""
    member: str | None
    """The member the partition is assigned to (null: none)."""

    @classmethod
    def of(cls, p: PartitionLag) -> ConsumerPartitionOut:
        seconds = p.lag_seconds
        return cls(
            topic=p.topic,
            partition=p.partition,
            committed=p.committed,
            log_start=p.log_start,
            log_end=p.log_end,
            lag=p.lag,
            lag_seconds=None if seconds is None else seconds.value,
            lag_seconds_at_least=seconds is not None and seconds.at_least,
            member=p.member,
        )


class ConsumerGroupDetailOut(ConsumerGroupFields):
    at: float
    """When the round read the log offsets (Unix time)."""
    partitions: list[ConsumerPartitionOut]
    """Its partitions (with a commit or assigned to a member), by topic and partition."""

    @classmethod
    def of(cls, report: GroupReport, at: float) -> ConsumerGroupDetailOut:
        return cls.model_validate(
            {
                **cls.fields(report),
                "at": at,
                "partitions": [ConsumerPartitionOut.of(p) for p in report.lag.partitions],
            }
        )
