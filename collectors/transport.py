"""Where samples go: a spool directory (default) or a Kafka topic, behind one small interface.

Spool directory: each batch becomes one newline-delimited JSON file, written to a hidden temp file and
renamed into place, so a reader (Spark's file source ignores names starting with ``.``) only ever sees
whole files. Files older than the retention are deleted at the next write.

Kafka topic: one record per sample, keyed by collector id (so one collector's samples stay in order on one
partition), ``acks=all``; the producer is created by kafka-python unless one is handed in.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from collectors.samples import Sample

SPOOL_SUFFIX = ".ndjson"


class TransportError(Exception):
    """A batch could not be handed over. A spool file is all or nothing; a Kafka batch may be partly
    published, and writing it again is safe: the analytics job drops samples it has seen by
    ``(collector_id, sequence)``."""


class MissingSpoolError(ValueError):
    """A spool directory that does not exist (or is not a directory) and was not to be created."""


def check_spool_directory(directory: Path) -> None:
    """Raises :class:`MissingSpoolError` naming ``directory`` unless it is an existing directory."""
    if directory.is_dir():
        return
    what = "is not a directory" if directory.exists() else "does not exist"
    raise MissingSpoolError(f"spool directory {directory} {what}")


class SampleSink(Protocol):
    def write(self, samples: Sequence[Sample]) -> None: ...

    def close(self) -> None: ...


class SpoolDirectorySink:
    """Atomic newline-delimited JSON files in ``directory``, deleted after ``retention_s``."""

    def __init__(
        self,
        directory: Path,
        retention_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
        *,
        create: bool = True,
    ) -> None:
        """``create``: make ``directory`` (and its parents) if it does not exist; without it a missing
        directory is :class:`MissingSpoolError` (the command line's default: a typo is an error)."""
        if retention_s <= 0:
            raise ValueError(f"spool retention must be positive, got {retention_s}")
        self.directory = Path(directory)
        self.retention_s = retention_s
        self._clock = clock
        if create:
            self.directory.mkdir(parents=True, exist_ok=True)
        else:
            check_spool_directory(self.directory)

    def write(self, samples: Sequence[Sample]) -> None:
        if not samples:
            return
        first = samples[0]
        name = f"{int(self._clock() * 1000):013d}-{first.collector_id}-{first.sequence:012d}{SPOOL_SUFFIX}"
        payload = "".join(s.to_line() + "\n" for s in samples).encode()
        try:
            fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=SPOOL_SUFFIX, dir=self.directory)
        except OSError as exc:
            raise TransportError(f"cannot write samples to {self.directory}: {exc}") from exc
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.directory / name)
        except OSError as exc:
            Path(temp).unlink(missing_ok=True)
            raise TransportError(f"cannot write samples to {self.directory}: {exc}") from exc
        self._apply_retention()

    def _apply_retention(self) -> None:
        cutoff = self._clock() - self.retention_s
        for path in self.directory.glob(f"*{SPOOL_SUFFIX}"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except FileNotFoundError:
                continue

    def files(self) -> list[Path]:
        """The published files, oldest first."""
        return sorted(p for p in self.directory.glob(f"*{SPOOL_SUFFIX}") if not p.name.startswith("."))

    def close(self) -> None:
        pass


class Producer(Protocol):
    """The part of kafka-python's ``KafkaProducer`` the sink uses."""

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None) -> Any: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


ProducerFactory = Callable[[], Producer]


def kafka_python_producer(bootstrap_servers: str, timeout_s: float) -> Producer:
    """kafka-python's producer as the sink uses it: ``acks=all``; one request in flight per broker, so
    that a retried request cannot overtake the next one (a collector's samples stay in order); every
    wait (bootstrap, metadata, a request, a delivery) bounded by the sink's timeout, so that a round
    with the broker down fails in seconds instead of blocking the sampler for minutes."""
    from kafka import KafkaProducer
    from kafka.net.compat import KafkaNetClient

    timeout_ms = int(timeout_s * 1000)
    clients: list[Any] = []

    def client(**config: Any) -> Any:
        made = KafkaNetClient(**config)
        clients.append(made)
        return made

    try:
        producer: Producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers.split(","),
            acks="all",
            linger_ms=5,
            max_in_flight_requests_per_connection=1,
            bootstrap_timeout_ms=timeout_ms,
            max_block_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
            delivery_timeout_ms=2 * timeout_ms + 5,
            reconnect_backoff_max_ms=1000,
            kafka_client=client,
        )
    except BaseException:
        # kafka-python 3 starts its client's IO thread before it bootstraps and leaves it (and its
        # sockets) running when that fails: a collector retrying every round would leak one per round.
        for made in clients:
            made.close()
        raise
    return producer


class KafkaTopicSink:
    """One record per sample on ``topic``; ``write`` returns once every record is acknowledged.

    A failed write (no broker, a timeout, a refused record) is :class:`TransportError`, and the producer
    is closed without waiting for what it still holds and made again at the next write: the sampler
    keeps the batch and writes it again, in order, so the batch the caller retries is the only copy
    (a producer that went on retrying it on its own would send it behind newer batches)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        producer: Producer | None = None,
        timeout_s: float = 30.0,
        *,
        factory: ProducerFactory | None = None,
    ) -> None:
        """``producer``: used as it is, also after a failure (tests); else ``factory`` makes one when needed
        (default: :func:`kafka_python_producer`)."""
        if not topic:
            raise ValueError("a Kafka topic name is required")
        self.topic = topic
        self.timeout_s = timeout_s
        self._factory = factory
        if producer is None and factory is None:
            self._factory = lambda: kafka_python_producer(bootstrap_servers, timeout_s)
        self._producer = producer

    def write(self, samples: Sequence[Sample]) -> None:
        try:
            if self._producer is None:
                assert self._factory is not None
                self._producer = self._factory()
            producer = self._producer
            futures = [
                producer.send(self.topic, value=s.to_line().encode(), key=s.collector_id.encode())
                for s in samples
            ]
            producer.flush(timeout=self.timeout_s)
            for future in futures:
                future.get(timeout=self.timeout_s)
        except Exception as exc:
            self._discard()
            raise TransportError(f"cannot publish samples to Kafka topic {self.topic!r}: {exc}") from exc

    def _discard(self) -> None:
        if self._factory is None or self._producer is None:
            return
        producer, self._producer = self._producer, None
        with contextlib.suppress(Exception):  # it failed already; what it still holds is dropped
            producer.close(timeout=0)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=self.timeout_s)


def missing_topic(bootstrap_servers: str, topic: str, timeout_s: float = 10.0) -> str | None:
    """Why ``topic`` cannot be used (it does not exist, or the cluster cannot be asked), in one line; None
    when it exists. Asked without creating it (a broker with ``auto.create.topics.enable`` would create
    a mistyped topic at the first produce, and the samples would go where no job reads them)."""
    from kafka import KafkaConsumer

    consumer: Any = None
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap_servers.split(","),
            allow_auto_create_topics=False,
            bootstrap_timeout_ms=int(timeout_s * 1000),
            request_timeout_ms=int(timeout_s * 1000),
        )
        topics = consumer.topics()
    except Exception as exc:
        return f"cannot list the topics of {bootstrap_servers}: {type(exc).__name__}: {exc}"
    finally:
        if consumer is not None:
            consumer.close()
    if topic in topics:
        return None
    return (
        f"Kafka topic {topic!r} does not exist on {bootstrap_servers} (create it first, e.g. "
        f"kafka-topics.sh --create --topic {topic}: the collectors and the job do not create topics)"
    )


# --- naming a transport -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransportSpec:
    """``spool:DIR`` or ``kafka:BOOTSTRAP/TOPIC``: how the collectors and the analytics job name the same
    transport (``kafka-health collect --sink`` and ``kafka-health analytics --source``)."""

    kind: Literal["spool", "kafka"]
    directory: Path | None = None
    bootstrap_servers: str | None = None
    topic: str | None = None

    def __str__(self) -> str:
        if self.kind == "spool":
            return f"spool:{self.directory}"
        return f"kafka:{self.bootstrap_servers}/{self.topic}"


_KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def parse_transport(text: str) -> TransportSpec:
    """Parse ``spool:DIR`` or ``kafka:HOST:PORT[,HOST:PORT...]/TOPIC``; ValueError says what is wrong."""
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("spool", "kafka"):
        raise ValueError(f"{text!r}: expected spool:DIR or kafka:BOOTSTRAP/TOPIC")
    if kind == "spool":
        if not rest:
            raise ValueError(f"{text!r}: spool: needs a directory")
        return TransportSpec("spool", directory=Path(rest).expanduser())
    bootstrap, slash, topic = rest.rpartition("/")
    if not slash or not bootstrap or not topic:
        raise ValueError(f"{text!r}: expected kafka:HOST:PORT[,HOST:PORT...]/TOPIC")
    if not _KAFKA_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ValueError(f"{text!r}: {topic!r} is not a legal Kafka topic name")
    for server in bootstrap.split(","):
        host, colon, port = server.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r}: {server!r} is not HOST:PORT")
    return TransportSpec("kafka", bootstrap_servers=bootstrap, topic=topic)


def open_sink(
    spec: TransportSpec, spool_retention_s: float = 3600.0, *, create_spool: bool = True
) -> SampleSink:
    if spec.kind == "spool":
        assert spec.directory is not None
        return SpoolDirectorySink(spec.directory, spool_retention_s, create=create_spool)
    assert spec.bootstrap_servers is not None
    assert spec.topic is not None
    return KafkaTopicSink(spec.bootstrap_servers, spec.topic)
