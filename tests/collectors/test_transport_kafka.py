"""The Kafka sink against a real Kafka-protocol broker (Tansu): the sampler keeps its batches while the
broker is down and, when it is back, delivers them in order before the next round, each sample once; a
topic that does not exist is named before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collectors.kafka.model import ClusterSnapshot, ControllerInfo
from collectors.transport import missing_topic
from tests.support import snapshots
from tests.support.tansu import TansuLog, unique_topic

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

SINK_TIMEOUT_S = 2.0
REPO = Path(__file__).resolve().parents[2]


def snapshot() -> ClusterSnapshot:
    return snapshots.cluster(
        snapshots.partition("orders", 0, (0, 1, 2), (0, 1, 2), leader=0, controller_epoch=7),
        brokers=(0, 1, 2),
        topics={},
        controller=ControllerInfo(0, 7),
        cluster_id="c1",
        version=3,
        taken_at=100.0,
        last_good_at=100.0,
    )


@dataclass
class Source:
    snapshot: ClusterSnapshot
    in_sync: bool = True


def read_topic(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Every record of the topic's partitions, in offset order per partition."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=[bootstrap], group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while len(found) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                found.extend(json.loads(r.value) for r in records)
        return found
    finally:
        consumer.close()


_BROKER_DOWN = """
import json, sys, tempfile, time
from pathlib import Path
from app.cli.common import unreachable
from app.embedded.tansu import Tansu
from collectors.sampler import Sampler, SamplerSettings
from collectors.samples import SampleNumbering
from collectors.transport import KafkaTopicSink
from tests.collectors.test_transport_kafka import SINK_TIMEOUT_S, Source, read_topic, snapshot

broker = Tansu(Path(tempfile.mkdtemp(prefix="kafka-health-tansu-")) / "tansu.log", unreachable)
try:
    sink = KafkaTopicSink(broker.bootstrap, "down", timeout_s=SINK_TIMEOUT_S)
    sampler = Sampler(Source(snapshot()), sink, SampleNumbering("down"), settings=SamplerSettings())
    rounds = [sampler.sample_once()]
    broker.stop()
    started = time.monotonic()
    rounds += [sampler.sample_once() for _ in range(3)]
    down_s = time.monotonic() - started
    broker.start()  # Tansu keeps nothing across a restart: the topic comes back empty
    rounds.append(sampler.sample_once())
    sink.close()
    records = read_topic(broker.bootstrap, "down", 16)
finally:
    broker.stop()
print(json.dumps({
    "rounds": [[r.error, r.written, r.backlog] for r in rounds],
    "down_s": down_s,
    "sequences": [r["sequence"] for r in records],
}))
"""


def test_batches_kept_while_the_broker_is_down_arrive_in_order_when_it_returns() -> None:
    """In a child process: kafka-python 3.0.12 leaves the sockets of refused connections to the garbage
    collector, and their ResourceWarnings would land in whichever test runs next (warnings are errors)."""
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _BROKER_DOWN],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    rounds = outcome["rounds"]
    assert rounds[0] == [None, 1, 0]
    for error, written, _ in rounds[1:4]:
        assert "cannot publish samples to Kafka topic 'down'" in (error or ""), rounds
        assert written == 0
    assert [r[2] for r in rounds[1:4]] == [1, 2, 3]  # kept, none dropped
    assert outcome["down_s"] < 120, "a round with the broker down must not hang"
    assert rounds[4] == [None, 4, 0]  # the three kept batches, then this round's
    per_round = 4  # three brokers and the cluster
    # the round before the broker went down was lost with it (in memory); every later one arrives once,
    # in the order the collector numbered them
    assert outcome["sequences"] == list(range(per_round, 5 * per_round))


def test_a_missing_topic_is_named_and_not_created(kafka_broker: str) -> None:
    topic = unique_topic("absent")
    why = missing_topic(kafka_broker, topic)
    assert why is not None
    assert f"Kafka topic {topic!r} does not exist on {kafka_broker}" in why
    assert missing_topic(kafka_broker, topic) is not None, "asking must not create it"
    log = TansuLog(kafka_broker)
    log.create_topic(topic, 1)
    log.close()
    assert missing_topic(kafka_broker, topic) is None
