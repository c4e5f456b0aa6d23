"""One round of the consumer-lag collector: the groups (filtered by the settings' include/exclude
regexes), their members, committed offsets and the log offsets of the partitions in use, then each
group's lag (:mod:`.lag`) and verdict (:mod:`.verdicts`). The collector keeps, across rounds, the log-end
history of each partition in use and each group's :class:`~.verdicts.GroupTrack`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from collectors.consumers.client import CommittedOffset, GroupDescription, GroupOffsetsReader
from collectors.consumers.config import KafkaSettings
from collectors.consumers.lag import (
    DEFAULT_HISTORY_SAMPLES,
    GroupLag,
    LogEndHistory,
    group_lag,
    partition_lag,
)
from collectors.consumers.verdicts import GroupTrack, Thresholds, Verdict, judge, observe
from collectors.kafka.model import TopicPartition


@dataclass(frozen=True, slots=True)
class GroupReport:
    lag: GroupLag
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class ConsumerRound:
    """A round's result; ``errors``: what could not be read (group -> one line), the round goes on."""

    at: float
    groups: dict[str, GroupReport]
    errors: dict[str, str] = field(default_factory=dict)


class ConsumerLagCollector:
    def __init__(
        self,
        reader: GroupOffsetsReader,
        settings: KafkaSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        history_samples: int = DEFAULT_HISTORY_SAMPLES,
    ) -> None:
        self.reader = reader
        self.settings = settings or KafkaSettings()
        self.clock = clock
        self.history = LogEndHistory(history_samples)
        self.tracks: dict[str, GroupTrack] = {}
        self._thresholds: dict[str, Thresholds] = {}
        """Each group's (:meth:`KafkaSettings.thresholds_for`: regexes and a model dump, once a group)."""

    def round(self) -> ConsumerRound:
        groups = [g for g in self.reader.list_groups() if self.settings.wants(g)]
        descriptions = self.reader.describe_groups(groups)
        # one group's coordinator failing does not end the round: its error is reported
        committed, errors = self.reader.committed_offsets_of(groups)
        in_use: set[TopicPartition] = set()
        for group, commits in committed.items():
            in_use.update(commits)
            description = descriptions.get(group)
            if description is not None:
                for member in description.members:
                    in_use.update(member.assignment)
        offsets = self.reader.log_offsets(sorted(in_use))
        now = self.clock()
        self.history.record(now, {tp: end for tp, (_, end) in offsets.items()})
        self.history.forget_except(in_use)
        reports: dict[str, GroupReport] = {}
        for group, commits in committed.items():
            lag = self._group_lag(group, descriptions.get(group), commits, offsets, now)
            track = observe(self.tracks.get(group, GroupTrack()), lag, now)
            self.tracks[group] = track
            thresholds = self._thresholds.get(group)
            if thresholds is None:
                thresholds = self._thresholds[group] = self.settings.thresholds_for(group)
            reports[group] = GroupReport(lag, judge(lag, track, now, thresholds))
        for gone in [g for g in self.tracks if g not in committed]:
            del self.tracks[gone]
            self._thresholds.pop(gone, None)
        return ConsumerRound(now, reports, errors)

    def _group_lag(
        self,
        group: str,
        description: GroupDescription | None,
        commits: dict[TopicPartition, CommittedOffset],
        offsets: dict[TopicPartition, tuple[int, int]],
        now: float,
    ) -> GroupLag:
        owner = {}
        members = () if description is None else description.members
        for member in members:
            for tp in member.assignment:
                owner[tp] = member.member_id
        partitions = []
        for tp in sorted(set(commits) | set(owner)):
            commit = commits.get(tp)
            start, end = offsets.get(tp, (None, None))
            partitions.append(
                partition_lag(
                    tp,
                    None if commit is None else commit.offset,
                    start,
                    end,
                    self.history.of(tp),
                    now,
                    member=owner.get(tp),
                    metadata="" if commit is None else commit.metadata,
                    leader_epoch=None if commit is None else commit.leader_epoch,
                )
            )
        state = "Dead" if description is None else description.state
        return group_lag(group, state, len(members), partitions)
