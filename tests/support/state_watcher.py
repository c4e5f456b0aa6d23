"""Every version of every partition state znode of a cluster, as ZooKeeper's watches deliver them, judged
as it arrives: what the rolling-restart tests use to show that at no moment was a partition offline or
under min ISR (tests/app/cli/test_safe_to_stop.py, tests/app/cli/test_rolling_restart.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import DataWatch


@dataclass
class StateWatcher:
    """A violation is a state with no leader or an ISR below min(min.insync.replicas, replicas).

    ``replicas``: the replication factor of each partition by name (``orders-0``); ``min_isr``: each
    topic's ``min.insync.replicas``."""

    zk: KazooClient
    replicas: dict[str, int]
    min_isr: Mapping[str, int]
    events: int = 0
    violations: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def watch(self, topic: str, partition: int) -> None:
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        name = f"{topic}-{partition}"
        floor = min(self.min_isr[topic], self.replicas[name])

        def seen(data: bytes | None, _stat: object) -> None:
            if data is None:
                return
            state = json.loads(data)
            with self._lock:
                self.events += 1
                if state["leader"] == -1 or len(state["isr"]) < floor:
                    self.violations.append((time.monotonic(), name, state))

        DataWatch(self.zk, path, seen)

    def since(self, moment: float) -> list[tuple[float, str, dict[str, Any]]]:
        with self._lock:
            return [v for v in self.violations if v[0] >= moment]
