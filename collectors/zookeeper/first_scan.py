"""Starting ZooKeeper collectors: how one cluster's collector connects (:class:`CollectorSpec`, its
defaults defined once, in :mod:`~collectors.zookeeper.collector`), one collector's start
(:func:`start_collector`) and every watched cluster's first full scan at once (:func:`first_scans`), so
that N clusters take one start timeout, not N. ``collect`` and ``serve`` (through the service's builder)
start their collectors here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from collectors.kafka.model import ClusterSnapshot
from collectors.kafka.zkclient import ZooKeeperSecurity
from collectors.zookeeper.collector import (
    DEFAULT_CONNECTIONS,
    DEFAULT_SESSION_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    ZooKeeperCollector,
)

OnChange = Callable[[ClusterSnapshot], None]


@dataclass(frozen=True, slots=True)
class CollectorSpec:
    """How one cluster's ZooKeeper collector connects: where, over how many sessions, with which
    timeouts and credentials."""

    connect: str
    """The ZooKeeper connect string, ``HOST:PORT[,HOST:PORT...][/chroot]``."""
    connections: int = DEFAULT_CONNECTIONS
    """Sessions the full scan is spread over."""
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    """How long the first full scan may take."""
    security: ZooKeeperSecurity | None = None
    """The credentials (digest, SASL, TLS) of every session opened on this ZooKeeper."""


def start_collector(spec: CollectorSpec, on_change: OnChange | None = None) -> ZooKeeperCollector:
    """A collector for ``spec``, started (its first full scan done); raises ZooKeeperCollectorError (and
    ValueError for a connect string that does not parse)."""
    collector = ZooKeeperCollector(
        spec.connect,
        connections=spec.connections,
        session_timeout_s=spec.session_timeout_s,
        on_change=on_change,
        security=spec.security,
    )
    collector.start(timeout=spec.start_timeout_s)
    return collector


def first_scans(
    specs: Sequence[CollectorSpec], on_change: Sequence[OnChange | None] | None = None
) -> list[ZooKeeperCollector | Exception]:
    """Each cluster's first full scan, in parallel (one cluster on the caller's thread): in ``specs``'
    order, its started collector, or the exception that says why it could not be read (the caller
    decides what a failure means). ``on_change``: each collector's, in the same order."""
    changes: Sequence[OnChange | None] = on_change if on_change is not None else [None] * len(specs)

    def start(spec: CollectorSpec, hook: OnChange | None) -> ZooKeeperCollector | Exception:
        try:
            return start_collector(spec, hook)
        except Exception as exc:  # this cluster's failure only, never the others'
            return exc

    if len(specs) == 1:
        return [start(specs[0], changes[0])]
    with ThreadPoolExecutor(max(len(specs), 1), thread_name_prefix="first-scan") as pool:
        futures = [pool.submit(start, spec, hook) for spec, hook in zip(specs, changes, strict=True)]
        return [future.result() for future in futures]
