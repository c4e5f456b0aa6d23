"""``/brokers/{id}/safe-to-stop`` and ``/brokers/safe-to-stop``: the bodies of
:func:`collectors.safe_to_stop.answer_json` and :func:`~collectors.safe_to_stop.cluster_json`."""

from __future__ import annotations

from pydantic import BaseModel


class TopicPartitionOut(BaseModel):
    topic: str
    partition: int


class UnhealthyPartitionOut(BaseModel):
    topic: str
    partition: int
    problems: list[str]
    """``offline``, ``under_min_isr``, ``under_replicated``: worst first."""
    out_of_isr: list[int]
    """Assigned replicas missing from the ISR (replicas a reassignment is adding are not missing)."""


class SafeToStopOut(BaseModel):
    broker: int
    safe: bool
    """Stopping the broker now takes no partition offline or under min ISR."""
    trusted: bool
    """Always true in a 200 answer: a view out of sync with ZooKeeper answers 503."""
    registered: bool
    """False: the broker is already stopped (it holds replicas but is not in ``/brokers/ids``)."""
    controller: bool
    would_go_offline: list[TopicPartitionOut]
    would_go_under_min_isr: list[TopicPartitionOut]
    leaderships_to_move: list[TopicPartitionOut]
    already_under_replicated: list[UnhealthyPartitionOut]
    """Partitions already offline, under min ISR or under-replicated, whoever is stopped."""
    reasons: list[str]
    """One sentence per reason it is not safe (empty when it is)."""
    notes: list[str]
    snapshot_version: int


class BrokerSafetyOut(BaseModel):
    broker: int
    safe: bool
    registered: bool
    controller: bool
    would_go_offline: list[TopicPartitionOut]
    would_go_under_min_isr: list[TopicPartitionOut]
    leaderships: int
    """Partitions the broker leads (the list: ``/brokers/{id}/safe-to-stop``)."""
    reasons: list[str]
    notes: list[str]


class ClusterSafeToStopOut(BaseModel):
    trusted: bool
    safe_to_stop: list[int]
    """The brokers that may be stopped right now, one at a time."""
    brokers: list[BrokerSafetyOut]
    """Every registered broker and every broker assigned a replica."""
    already_under_replicated: list[UnhealthyPartitionOut]
    snapshot_version: int
