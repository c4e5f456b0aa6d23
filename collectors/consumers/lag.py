"""Lag, pure: per partition in records (log end − committed) and in seconds (how long ago the log end was
where the consumer is now, interpolated from the partition's log-end history), and per group."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from collectors.kafka.model import TopicPartition

DEFAULT_HISTORY_SAMPLES = 240
"""Log-end samples kept per partition: the last 20 minutes at the default 10 s round every round, the
hours before ever more sparsely (:class:`LogEndHistory`)."""


@dataclass(frozen=True, slots=True)
class LagSeconds:
    """``value`` seconds behind; with ``at_least`` the consumer is behind the oldest sample the history
    holds, and ``value`` is the age of that sample (a lower bound)."""

    value: float
    at_least: bool = False


def lag_records(committed: int | None, log_end: int) -> int | None:
    """log end − committed, never negative (a commit past the log end, e.g. read a moment after the log
    end was, is no lag); None without a commit."""
    if committed is None:
        return None
    return max(0, log_end - committed)


def lag_seconds(history: Sequence[tuple[float, int]], committed: int | None, now: float) -> LagSeconds | None:
    """How long ago (seconds before ``now``) the log end was at ``committed``.

    ``history``: (time, log end) samples, oldest first, the newest the current log end. The log end is
    interpolated linearly between two samples. Caught up (committed at or past the newest sample): 0.
    Behind the oldest sample: ``at_least`` the age of the oldest sample. A log end that went backwards
    (a partition recreated, a truncation) starts the history again at the first sample after the drop.
    None without a commit or without a sample."""
    if committed is None or not history:
        return None
    if isinstance(history, _Samples):
        return _lag_seconds(history.times, history.ends, committed, now)
    i = len(history) - 1
    if committed >= history[i][1]:
        return LagSeconds(0.0)
    # backwards from the newest sample (a consumer is most often near the log end): the segment whose
    # log end passed ``committed``; committed < the log end of sample i all along
    while i > 0:
        t_prev, end_prev = history[i - 1]
        t_i, end_i = history[i]
        if end_prev > end_i:
            break  # the log end went backwards here: the history starts at sample i
        if end_prev <= committed:
            at = t_prev + (committed - end_prev) / (end_i - end_prev) * (t_i - t_prev)
            return LagSeconds(max(0.0, now - at))
        i -= 1
    return LagSeconds(max(0.0, now - history[i][0]), at_least=True)


def _lag_seconds(times: array[float], ends: array[int], committed: int, now: float) -> LagSeconds:
    """:func:`lag_seconds` on the arrays of :class:`_Samples` (no tuple per sample read)."""
    i = len(ends) - 1
    end_i = ends[i]
    if committed >= end_i:
        return LagSeconds(0.0)
    while i > 0:
        end_prev = ends[i - 1]
        if end_prev > end_i:
            break
        if end_prev <= committed:
            t_prev = times[i - 1]
            at = t_prev + (committed - end_prev) / (end_i - end_prev) * (times[i] - t_prev)
            return LagSeconds(max(0.0, now - at))
        i -= 1
        end_i = end_prev
    return LagSeconds(max(0.0, now - times[i]), at_least=True)


class _Samples(Sequence[tuple[float, int]]):
    """One partition's samples in two arrays (16 bytes a sample: 20,000 partitions of 240 samples are
    about 80 MB, where tuples would take several times that)."""

    __slots__ = ("ends", "times")

    def __init__(self) -> None:
        self.times = array("d")
        self.ends = array("q")

    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, index: int) -> tuple[float, int]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[float, int]]: ...
    def __getitem__(self, index: int | slice) -> tuple[float, int] | Sequence[tuple[float, int]]:
        if isinstance(index, slice):
            return list(zip(self.times[index], self.ends[index], strict=True))
        return self.times[index], self.ends[index]

    def copy(self) -> tuple[tuple[float, int], ...]:
        return tuple(zip(self.times, self.ends, strict=True))


class LogEndHistory:
    """The bounded (time, log end) history of each partition, kept by the collector across rounds.

    A log end that does not move keeps two samples, the first and the last round it was seen at (so that
    records written after a quiet spell count from its end, not its start). Past ``max_samples`` every
    second sample of the older half is dropped: the newest half keeps every round, older history is
    kept ever more sparsely, and the history reaches further back than ``max_samples`` rounds."""

    def __init__(self, max_samples: int = DEFAULT_HISTORY_SAMPLES) -> None:
        if max_samples < 4:
            raise ValueError("the log-end history needs at least 4 samples")
        self.max_samples = max_samples
        self._samples: dict[TopicPartition, _Samples] = {}

    def record(self, now: float, log_ends: Mapping[TopicPartition, int]) -> None:
        for tp, end in log_ends.items():
            samples = self._samples.get(tp)
            if samples is None:
                samples = self._samples[tp] = _Samples()
            times, ends = samples.times, samples.ends
            if len(ends) >= 2 and ends[-1] == end and ends[-2] == end:
                times[-1] = now  # the same log end again: its run now lasts until this round
                continue
            times.append(now)
            ends.append(end)
            if len(times) > self.max_samples:
                half = len(times) // 2
                del times[1:half:2]
                del ends[1:half:2]

    def forget_except(self, keep: Iterable[TopicPartition]) -> None:
        """Drops the partitions no longer in use (their history would only grow stale)."""
        kept = set(keep)
        for tp in [tp for tp in self._samples if tp not in kept]:
            del self._samples[tp]

    def of(self, tp: TopicPartition) -> Sequence[tuple[float, int]]:
        samples = self._samples.get(tp)
        return () if samples is None else samples


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_start: int | None
    log_end: int | None
    lag: int | None
    lag_seconds: LagSeconds | None
    member: str | None = None
    metadata: str = ""
    leader_epoch: int | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class GroupLag:
    """A group's lag in one round: ``lag`` the sum of its partitions' (None when none has a commit),
    ``max_lag_seconds`` the largest (``max_lag_seconds_at_least`` when that one is a lower bound)."""

    group: str
    state: str
    members: int
    partitions: tuple[PartitionLag, ...]
    lag: int | None
    max_lag_seconds: float | None
    max_lag_seconds_at_least: bool = False


def partition_lag(
    tp: TopicPartition,
    committed: int | None,
    log_start: int | None,
    log_end: int | None,
    history: Sequence[tuple[float, int]],
    now: float,
    *,
    member: str | None = None,
    metadata: str = "",
    leader_epoch: int | None = None,
) -> PartitionLag:
    lag = None if log_end is None else lag_records(committed, log_end)
    seconds = None if log_end is None else lag_seconds(history, committed, now)
    return PartitionLag(
        tp.topic,
        tp.partition,
        committed,
        log_start,
        log_end,
        lag,
        seconds,
        member,
        metadata,
        leader_epoch,
    )


def group_lag(group: str, state: str, members: int, partitions: Iterable[PartitionLag]) -> GroupLag:
    ordered = tuple(sorted(partitions, key=lambda p: (p.topic, p.partition)))
    lags = [p.lag for p in ordered if p.lag is not None]
    seconds = [p.lag_seconds for p in ordered if p.lag_seconds is not None]
    worst = max(seconds, key=lambda s: (s.value, s.at_least), default=None)
    return GroupLag(
        group,
        state,
        members,
        ordered,
        sum(lags) if lags else None,
        None if worst is None else worst.value,
        worst is not None and worst.at_least,
    )
