"""``kafka-health describe --consumer-groups``: one round of the consumer-lag collector, read directly
(ListGroups, DescribeGroups, OffsetFetch, ListOffsets over Kafka's protocol), printed as text or as the
JSON of ``GET /api/v1/consumer-groups/{group}`` for each group.

One round has one log-end sample per partition: ``lag_seconds`` of a partition behind is then only known
as "at least 0 s" and every verdict is that of a first round (``serve`` keeps the history that gives
seconds and verdicts their meaning)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, TextIO

from app.cli.common import check_kafka_client, kafka_overrides
from app.service.schemas.consumer_groups import ConsumerGroupDetailOut
from collectors.consumers.client import open_reader
from collectors.consumers.collector import ConsumerLagCollector, ConsumerRound
from collectors.consumers.config import KafkaSettings
from collectors.consumers.lag import LagSeconds
from collectors.kafka.model import BrokerRegistration


def kafka_settings(args: argparse.Namespace) -> KafkaSettings:
    """``KAFKA_HEALTH_KAFKA__*`` (and the config file's ``[kafka]``) with the flags over them; raises
    ValueError / ValidationError (bad input)."""
    from app.settings import load_settings

    current = load_settings().kafka.model_dump(exclude_unset=True)
    settings = KafkaSettings.model_validate(kafka_overrides(args, current))
    check_kafka_client(settings)
    return settings


def read_round(settings: KafkaSettings, brokers: Mapping[int, BrokerRegistration]) -> ConsumerRound:
    """One round against the brokers (raises ValueError for bad settings, kafka-python's errors when no
    broker answers)."""
    reader = open_reader(settings, brokers)
    try:
        return ConsumerLagCollector(reader, settings).round()
    finally:
        reader.close()


def round_json(round_: ConsumerRound) -> dict[str, Any]:
    return {
        "at": round_.at,
        "groups": [
            ConsumerGroupDetailOut.of(round_.groups[g], round_.at).model_dump(mode="json")
            for g in sorted(round_.groups)
        ],
        "errors": dict(sorted(round_.errors.items())),
    }


def _number(value: int | float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def _seconds(value: float | None, at_least: bool) -> str:
    if value is None:
        return "-"
    return f">={value:.0f}" if at_least else f"{value:.0f}"


def _lag_seconds(seconds: LagSeconds | None) -> str:
    return "-" if seconds is None else _seconds(seconds.value, seconds.at_least)


def write_round_text(round_: ConsumerRound, out: TextIO) -> None:
    """A line per group (state, members, lag, seconds behind, verdict), then its partitions."""
    groups = [round_.groups[g] for g in sorted(round_.groups)]
    out.write(f"Consumer groups: {len(groups)}\n")
    for report in groups:
        lag, verdict = report.lag, report.verdict
        out.write(
            f"\nGroup: {lag.group}\tState: {lag.state}\tMembers: {lag.members}\tLag: {_number(lag.lag)}\t"
            f"LagSeconds: {_seconds(lag.max_lag_seconds, lag.max_lag_seconds_at_least)}\t"
            f"Status: {verdict.status} ({verdict.reason})\n"
        )
        for p in lag.partitions:
            out.write(
                f"\tTopic: {p.topic}\tPartition: {p.partition}\tCommitted: {_number(p.committed)}\t"
                f"LogStart: {_number(p.log_start)}\tLogEnd: {_number(p.log_end)}\tLag: {_number(p.lag)}\t"
                f"LagSeconds: {_lag_seconds(p.lag_seconds)}\tMember: {p.member or '-'}\n"
            )
    for group, error in sorted(round_.errors.items()):
        out.write(f"\nGroup: {group}\tnot read: {error}\n")
