"""An in-memory :class:`collectors.consumers.client.GroupOffsetsReader` for the consumer-lag tests:
groups, members, commits and log offsets set by the test (a stopped, stalled, rewound or deleted-unread
consumer on demand). ``tests/collectors/consumers/test_reader_contract.py`` runs the same checks on it
and on a real Kafka-protocol broker (Tansu)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from collectors.consumers.client import CommittedOffset, GroupDescription, GroupMember, GroupsOffsets
from collectors.kafka.model import TopicPartition


@dataclass
class FakeGroup:
    state: str = "Stable"
    members: list[GroupMember] = field(default_factory=list)
    committed: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)


class FakeGroupOffsets:
    def __init__(self) -> None:
        self.groups: dict[str, FakeGroup] = {}
        self.logs: dict[TopicPartition, tuple[int, int]] = {}
        self.closed = False

    # --- what a test does
    def create_topic(self, topic: str, partitions: int = 1) -> None:
        for p in range(partitions):
            self.logs.setdefault(TopicPartition(topic, p), (0, 0))

    def produce(self, tp: TopicPartition, records: int) -> None:
        start, end = self.logs.get(tp, (0, 0))
        self.logs[tp] = (start, end + records)

    def delete_records(self, tp: TopicPartition, before: int) -> None:
        start, end = self.logs[tp]
        self.logs[tp] = (max(start, before), end)

    def join(self, group: str, member_id: str, assignment: Sequence[TopicPartition]) -> None:
        g = self.groups.setdefault(group, FakeGroup())
        g.members.append(GroupMember(member_id, member_id, "/127.0.0.1", tuple(sorted(assignment))))
        g.state = "Stable"

    def leave_all(self, group: str) -> None:
        g = self.groups[group]
        g.members.clear()
        g.state = "Empty"

    def commit(self, group: str, tp: TopicPartition, offset: int, metadata: str = "") -> None:
        g = self.groups.setdefault(group, FakeGroup(state="Empty"))
        g.committed[tp] = CommittedOffset(offset, metadata)

    def end(self, tp: TopicPartition) -> int:
        return self.logs[tp][1]

    # --- the reader
    def list_groups(self) -> list[str]:
        return sorted(self.groups)

    def describe_groups(self, groups: Sequence[str]) -> dict[str, GroupDescription]:
        return {
            g: GroupDescription(g, self.groups[g].state, "consumer", tuple(self.groups[g].members))
            for g in groups
            if g in self.groups
        }

    def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self.groups[group].committed) if group in self.groups else {}

    def committed_offsets_of(self, groups: Sequence[str]) -> GroupsOffsets:
        return GroupsOffsets({g: self.committed_offsets(g) for g in groups}, {})

    def log_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: self.logs[tp] for tp in partitions if tp in self.logs}

    def close(self) -> None:
        self.closed = True
