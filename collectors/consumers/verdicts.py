"""One verdict per consumer group per round, pure: :func:`observe` folds a round's :class:`GroupLag` into
the group's :class:`GroupTrack` (what earlier rounds showed), :func:`judge` gives the verdict.

What OffsetFetch shows is the committed offset, its metadata and leader epoch, never when it was
committed. A *commit is seen* when any of those three changed for any partition of the group since the
previous round; a consumer that commits the very same offset and metadata again is indistinguishable
from one that does not commit at all. The clocks below start at the later of the last seen commit and
the moment the lag became positive, so that an idle consumer on a quiet topic (no commits for hours, no
lag) is not judged stopped the moment a record arrives (Burrow #303).

The verdicts, worst first (the first that holds is the group's):

- ``falling_off_log`` (critical): a committed offset is below its partition's log-start offset: records
  were deleted unread.
- ``stopped`` (critical): lag > 0 and no commit seen for ``stopped_after_s`` (default: ``stopped_commit_
  intervals`` times the group's observed commit interval, at least ``stopped_min_s``).
- ``stalled`` (critical): commits are seen within ``stopped_after_s``, but a partition with lag > 0 has
  kept the same committed offset for ``stopped_after_s`` (a consumer stuck on one partition).
- ``no_consumer`` (warning): lag > 0 and the group has no member (before ``stopped_after_s`` ran out).
- ``rewound`` (warning): a committed offset went backwards since the previous round.
- ``lagging`` (warning): the largest ``lag_seconds`` is above ``lag_warn_s`` in each of the last
  ``lagging_rounds`` rounds and did not fall over them.
- ``ok``: none of those; a group with zero lag is always ``ok``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from collectors.consumers.lag import GroupLag
from collectors.kafka.model import TopicPartition

Status = Literal["ok", "lagging", "stopped", "stalled", "rewound", "no_consumer", "falling_off_log"]
Severity = Literal["ok", "warning", "critical"]

SEVERITY: dict[Status, Severity] = {
    "ok": "ok",
    "lagging": "warning",
    "rewound": "warning",
    "no_consumer": "warning",
    "stalled": "critical",
    "stopped": "critical",
    "falling_off_log": "critical",
}

COMMIT_INTERVALS_KEPT = 10


@dataclass(frozen=True, slots=True)
class Thresholds:
    lag_warn_s: float = 300.0
    lagging_rounds: int = 3
    stopped_after_s: float | None = None
    """None: follows the observed commit interval (see :meth:`stopped_after`)."""
    stopped_min_s: float = 60.0
    stopped_commit_intervals: float = 3.0

    def stopped_after(self, commit_intervals: tuple[float, ...]) -> float:
        if self.stopped_after_s is not None:
            return self.stopped_after_s
        if not commit_intervals:
            return self.stopped_min_s
        return max(self.stopped_min_s, self.stopped_commit_intervals * statistics.median(commit_intervals))


@dataclass(frozen=True, slots=True)
class GroupTrack:
    """What the previous rounds showed of one group (bounded)."""

    last_t: float | None = None
    committed: Mapping[TopicPartition, tuple[int, str, int | None]] = field(default_factory=dict)
    last_commit_seen_t: float | None = None
    commit_intervals: tuple[float, ...] = ()
    lag_since_t: float | None = None
    partition_moved_t: Mapping[TopicPartition, float] = field(default_factory=dict)
    partition_lag_since_t: Mapping[TopicPartition, float] = field(default_factory=dict)
    max_lag_seconds: tuple[float | None, ...] = ()
    rewound: tuple[TopicPartition, ...] = ()


def observe(track: GroupTrack, lag: GroupLag, now: float, keep_rounds: int = 3) -> GroupTrack:
    """The track with this round added (pure)."""
    first = track.last_t is None
    before_all, moved_before, lag_since_before = (
        track.committed,
        track.partition_moved_t,
        track.partition_lag_since_t,
    )
    committed: dict[TopicPartition, tuple[int, str, int | None]] = {}
    moved: dict[TopicPartition, float] = {}
    lag_since_p: dict[TopicPartition, float] = {}
    rewound = []
    changed = False
    for p in lag.partitions:  # one pass: this runs for every partition of every group each round
        offset = p.committed
        if offset is None:
            continue
        tp = p.tp
        value = (offset, p.metadata, p.leader_epoch)
        committed[tp] = value
        before = before_all.get(tp)
        if before != value:
            changed = True
        if before is None or before[0] != offset:
            moved[tp] = now
            if before is not None and offset < before[0]:
                rewound.append(tp)
        else:
            moved[tp] = moved_before[tp]
        if p.lag is not None and p.lag > 0:
            lag_since_p[tp] = lag_since_before.get(tp, now)
    seen = not first and changed
    last_commit = now if first or seen else track.last_commit_seen_t
    intervals = track.commit_intervals
    if seen and track.last_commit_seen_t is not None:
        intervals = (*intervals, now - track.last_commit_seen_t)[-COMMIT_INTERVALS_KEPT:]
    positive = lag.lag is not None and lag.lag > 0
    lag_since = (track.lag_since_t if track.lag_since_t is not None else now) if positive else None
    return replace(
        track,
        last_t=now,
        committed=committed,
        last_commit_seen_t=last_commit,
        commit_intervals=intervals,
        lag_since_t=lag_since,
        partition_moved_t=moved,
        partition_lag_since_t=lag_since_p,
        max_lag_seconds=(*track.max_lag_seconds, lag.max_lag_seconds)[-max(keep_rounds, 1) :],
        rewound=tuple(rewound),
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    group: str
    status: Status
    reason: str

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.status]


def judge(lag: GroupLag, track: GroupTrack, now: float, thresholds: Thresholds) -> Verdict:
    """The group's verdict; ``track`` must already include this round (:func:`observe`)."""
    group = lag.group

    def verdict(status: Status, reason: str) -> Verdict:
        return Verdict(group, status, reason)

    if lag.lag is None:
        return verdict("ok", "no committed offsets")
    if lag.lag == 0:
        return verdict("ok", "no lag")
    below = [
        (p, p.committed, p.log_start)
        for p in lag.partitions
        if p.committed is not None and p.log_start is not None and p.committed < p.log_start
    ]
    if below:
        p, committed, log_start = below[0]
        return verdict(
            "falling_off_log",
            f"committed offset {committed} of {p.topic}-{p.partition} is below its log start "
            f"{log_start}: {log_start - committed} records were deleted unread"
            + (f" (and {len(below) - 1} more partitions)" if len(below) > 1 else ""),
        )
    after = thresholds.stopped_after(track.commit_intervals)
    since = max(track.last_commit_seen_t or now, track.lag_since_t or now)
    if now - since >= after:
        who = "no member" if lag.members == 0 else f"{lag.members} members"
        return verdict(
            "stopped",
            f"no commit seen for {now - since:.0f} s (stopped after {after:.0f} s) with lag {lag.lag} "
            f"({who})",
        )
    moved_t, lag_since_t = track.partition_moved_t, track.partition_lag_since_t
    stuck = []
    for p in lag.partitions:
        if p.lag is not None and p.lag > 0 and p.committed is not None:
            tp = p.tp
            if now - max(moved_t.get(tp, now), lag_since_t.get(tp, now)) >= after:
                stuck.append(tp)
    stuck.sort()
    if stuck:
        names = ", ".join(str(tp) for tp in stuck[:5]) + (" ..." if len(stuck) > 5 else "")
        return verdict(
            "stalled",
            f"the group commits, but the committed offset of {names} has not moved for {after:.0f} s "
            "with lag",
        )
    if lag.members == 0:
        return verdict("no_consumer", f"lag {lag.lag} and the group has no member (state {lag.state})")
    if track.rewound:
        names = ", ".join(str(tp) for tp in track.rewound[:5])
        return verdict("rewound", f"the committed offset of {names} went backwards")
    recent = track.max_lag_seconds[-thresholds.lagging_rounds :]
    if (
        len(recent) >= thresholds.lagging_rounds
        and all(s is not None and s > thresholds.lag_warn_s for s in recent)
        and recent[-1] is not None
        and recent[0] is not None
        and recent[-1] >= recent[0]
    ):
        return verdict(
            "lagging",
            f"{recent[-1]:.0f} s behind (above {thresholds.lag_warn_s:.0f} s for {len(recent)} rounds, "
            "not falling)",
        )
    return verdict("ok", f"lag {lag.lag}")
