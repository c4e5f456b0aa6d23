"""Where samples go: a spool directory (default) or a Kafka topic, behind one small interface.

Spool directory: each batch becomes one newline-delimited JSON file, written to a hidden temp file and
renamed into place, so a reader (Spark's file source ignores names starting with ``.``) only ever sees
whole files. Files older than the retention are deleted at the next write.

Kafka topic: one record per sample, keyed by collector id (so one collector's samples stay in order on one
partition), ``acks=all``; the producer is created by kafka-python unless one is handed in.
"""

from __future__ import annotations

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


class KafkaTopicSink:
    """One record per sample on ``topic``; ``write`` returns once every record is acknowledged."""

    def __init__(
        self, bootstrap_servers: str, topic: str, producer: Producer | None = None, timeout_s: float = 30.0
    ) -> None:
        if not topic:
            raise ValueError("a Kafka topic name is required")
        self.topic = topic
        self.timeout_s = timeout_s
        if producer is None:
            from kafka import KafkaProducer

            producer = KafkaProducer(bootstrap_servers=bootstrap_servers.split(","), acks="all", linger_ms=5)
        self._producer = producer

    def write(self, samples: Sequence[Sample]) -> None:
        futures = [
            self._producer.send(self.topic, value=s.to_line().encode(), key=s.collector_id.encode())
            for s in samples
        ]
        try:
            self._producer.flush(timeout=self.timeout_s)
            for future in futures:
                future.get(timeout=self.timeout_s)
        except Exception as exc:
            raise TransportError(f"cannot publish samples to Kafka topic {self.topic!r}: {exc}") from exc

    def close(self) -> None:
        self._producer.close(timeout=self.timeout_s)


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
