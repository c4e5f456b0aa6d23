"""What the executors and the dry run read from the brokers' metrics endpoints, beyond the service's periodic
scrape: the log sizes of the partitions a reassignment moves (its progress in bytes) and each partition's
produce rate (the dry run's throttle check). Both are targeted reads of a few labelled series
(:mod:`collectors.partition_metrics`) through the service's metrics collector."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.metrics import MetricsCollector
from collectors.partition_metrics import PartitionMetricsScrape, bytes_in_rates, scrape_partition_metrics

RATE_WINDOW_S = 2.0
"""The produce rates of a dry run are the bytes-in counters' increase over at least this long: the first
dry run reads twice, this far apart; later ones reuse the previous read when it is recent enough."""
REUSE_FOR_S = 120.0


class PartitionMetricsReader:
    def __init__(self, collector: MetricsCollector, snapshot: Callable[[], ClusterSnapshot]) -> None:
        self._collector = collector
        self._snapshot = snapshot
        self._lock = threading.Lock()
        self._last: tuple[float, PartitionMetricsScrape] | None = None

    def log_sizes(self, brokers: Sequence[int]) -> dict[int, Mapping[TopicPartition, float]]:
        """Broker id -> partition -> log size (bytes), for the registered brokers of ``brokers`` read."""
        registered = self._snapshot().brokers
        wanted = {b: registered[b] for b in brokers if b in registered}
        return scrape_partition_metrics(self._collector, wanted).log_sizes()

    def produce_rates(self) -> dict[TopicPartition, float]:
        """Each partition's produce rate (bytes/s): its leader's bytes-in rate for the topic, shared evenly
        by the topic's partitions that broker leads (Kafka counts bytes in per topic, not per partition)."""
        snapshot = self._snapshot()
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] > REUSE_FOR_S:
                self._last = (now, scrape_partition_metrics(self._collector, snapshot.brokers))
                time.sleep(RATE_WINDOW_S)
            elif now - self._last[0] < RATE_WINDOW_S:
                time.sleep(RATE_WINDOW_S - (now - self._last[0]))
            before = self._last[1]
            after = scrape_partition_metrics(self._collector, snapshot.brokers)
            self._last = (time.monotonic(), after)
        rates = bytes_in_rates(before, after)
        led = Counter((info.leader, tp.topic) for tp, info in snapshot.partitions.items())
        produce: dict[TopicPartition, float] = {}
        for tp, info in snapshot.partitions.items():
            topic_rate = rates.get(info.leader, {}).get(tp.topic)
            if topic_rate is not None and led[(info.leader, tp.topic)]:
                produce[tp] = topic_rate / led[(info.leader, tp.topic)]
        return produce
