"""``kafka-health analytics`` stops cleanly at any moment: SIGTERM while samples stream in (so that a
micro-batch is under way) exits 0 once that batch is done, with no Spark internal error on stderr, on
the spool source and on the Kafka source (Tansu), whether the signal reaches the process alone or its whole
process group (systemd, a terminal); and what it committed before the stop is kept."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from collectors.samples import Sample
from collectors.transport import KafkaTopicSink, SpoolDirectorySink
from tests.support.cli import Cli
from tests.support.store import open_store
from tests.support.tansu import TansuLog, unique_topic

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

SPARK_INTERNAL_ERRORS = (
    "session() is null",
    "RpcEnv already stopped",
    "Exception",
    "ERROR",
    "Error",
)


class Feeder:
    """Writes a round of samples (4 brokers and the cluster) every 50 ms until stopped."""

    def __init__(self, write: Callable[[list[Sample]], None]) -> None:
        self._write = write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.rounds = 0

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            now = time.time()
            batch = [
                Sample("stop", sequence + b, now, "broker", "c", b, {"partitions": 8.0, "nwBytesIn": 100.0})
                for b in range(4)
            ]
            sequence += len(batch)
            self._write(batch)
            self.rounds += 1
            self._stop.wait(0.05)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture(params=["spool", "kafka"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Feeder]]:
    if request.param == "spool":
        sink = SpoolDirectorySink(tmp_path / "spool", retention_s=10**9)
        with Feeder(sink.write) as feeder:
            yield f"spool:{tmp_path / 'spool'}", feeder
        return
    bootstrap: str = request.getfixturevalue("kafka_broker")
    topic = unique_topic("stop")
    log = TansuLog(bootstrap)
    log.create_topic(topic, 2)
    log.close()
    kafka = KafkaTopicSink(bootstrap, topic)
    try:
        with Feeder(kafka.write) as feeder:
            yield f"kafka:{bootstrap}/{topic}", feeder
    finally:
        kafka.close()


def test_sigterm_mid_batch_exits_0_within_seconds_without_spark_errors(
    transport: tuple[str, Feeder], tmp_path: Path
) -> None:
    source, feeder = transport
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    group = source.startswith("kafka")  # one source each way: the process alone, its process group
    cli = Cli(
        "analytics",
        "--source", source,
        "--window", "2s",
        "--watermark", "0s",
        "--trigger", "0.5s",
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--store-url", store_url,
        new_session=group,
    )  # fmt: skip
    try:
        cli.expect(r"batch \d+: [1-9]\d* windows", timeout=180)
        cli.expect(r"batch \d+:", timeout=60)  # the next one has started: samples keep coming
        time.sleep(0.3)
        started = time.monotonic()
        code = (cli.stop_group if group else cli.stop)(signal.SIGTERM, timeout=60)
        took = time.monotonic() - started
    finally:
        cli.kill_everything()
    assert code == 0, cli.output()
    errors = [line for line in cli.stderr if any(word in line for word in SPARK_INTERNAL_ERRORS)]
    assert errors == [], cli.output()
    assert feeder.rounds > 0
    with open_store(store_url) as store:
        assert store.last_evaluated_window("c") is not None
    print(f"\n{source.partition(':')[0]}: SIGTERM -> exit 0 in {took:.1f} s")
