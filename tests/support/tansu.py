"""pytest plugin: real Kafka-protocol brokers (Tansu, :mod:`app.embedded.tansu`) for the tests.

``kafka_broker`` (session) starts one ``tansu broker`` on a free port of 127.0.0.1, waits until it answers
Kafka's ApiVersions request, and gives its bootstrap address (``127.0.0.1:PORT``); it is stopped at the
end of the session (SIGTERM, then SIGKILL; an ``atexit`` hook covers a run that ends without teardown).
``private_tansu`` (function) makes brokers a test may stop and start (a broker that goes away).
:class:`TansuLog` writes records to chosen partitions the way :class:`tests.support.kafka_fake.FakeKafkaLog`
does to the fake, so that one contract test runs on both.

Enable it in ``tests/conftest.py``: ``pytest_plugins = [..., "tests.support.tansu"]``.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cli.common import unreachable
from app.embedded.tansu import Tansu


def start_tansu(log: Path, port: int | None = None) -> Tansu:
    return Tansu(log, unreachable, port=port)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """The bootstrap address of the run's Tansu broker."""
    with tempfile.TemporaryDirectory(prefix="kafka-health-tansu-") as workdir:
        broker = start_tansu(Path(workdir) / "tansu.log")
        try:
            yield broker.bootstrap
        finally:
            broker.stop()


@pytest.fixture
def private_tansu(tmp_path: Path) -> Iterator[Callable[[], Tansu]]:
    """Starts brokers of the test's own (stopped at its end)."""
    started: list[Tansu] = []

    def make() -> Tansu:
        broker = start_tansu(tmp_path / f"tansu-{len(started)}.log")
        started.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in started:
            broker.stop()


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test on the session broker uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class TansuLog:
    """Creates topics and appends records to chosen partitions of a broker, with kafka-python."""

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaAdminClient, KafkaProducer

        self.bootstrap = bootstrap
        self._admin = KafkaAdminClient(bootstrap_servers=[bootstrap])
        self._producer = KafkaProducer(bootstrap_servers=[bootstrap], acks="all", linger_ms=5)

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        from kafka.admin import NewTopic

        self._admin.create_topics([NewTopic(topic, partitions, 1)])

    def append(self, topic: str, partition: int, values: Iterable[str | None]) -> list[int]:
        """Append records (in one producer batch where they fit); returns their offsets."""
        futures: list[Any] = [
            self._producer.send(topic, value=None if v is None else v.encode(), partition=partition)
            for v in values
        ]
        self._producer.flush(timeout=30)
        return [int(f.get(timeout=30).offset) for f in futures]

    def close(self) -> None:
        self._producer.close(timeout=10)
        self._admin.close()
