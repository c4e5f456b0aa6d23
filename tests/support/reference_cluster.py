"""pytest plugin and helpers for tests against the reference cluster.

* ``make_cluster(settings=None, *, start=True, zookeeper=None, **overrides)``: a
  :class:`~app.embedded.reference_cluster.cluster.ReferenceCluster` on the test's own chroot (``zk_connect``),
  stopped at teardown, which then fails the test if the cluster recorded errors on its loop.
* :func:`small_settings`: 3 brokers, ``orders`` 4×3, 1.5 s replica lag, no auto rebalance, a fixed
  placement seed; keyword overrides win.
* :func:`wait_for`: poll a predicate every 50 ms until it returns something truthy.
* :func:`zk_partitions` / :func:`scrape`: read the cluster as a collector would, from ZooKeeper
  (a separate kazoo session) and from a broker's ``/metrics``, never from the simulation's memory.

Enable with ``pytest_plugins = ["tests.support.zookeeper", "tests.support.reference_cluster"]`` and import the
helpers from this module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from prometheus_client.parser import text_string_to_metric_families

from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ReferenceClusterSettings, TopicSpec

T = TypeVar("T")

LAG_MS = 1500
"""``replica.lag.time.max.ms`` of :func:`small_settings`: short, so ISR shrinks take ~1.5-2.5 s."""
PLACEMENT_SEED = 7
POLL_INTERVAL_S = 0.05


def small_settings(**overrides: Any) -> ReferenceClusterSettings:
    """A small, reproducible cluster; ``overrides`` are ``ReferenceClusterSettings`` fields."""
    values: dict[str, Any] = {
        "brokers": 3,
        "topics": [TopicSpec(name="orders", partitions=4, replication_factor=3)],
        "replica_lag_time_max_ms": LAG_MS,
        "auto_leader_rebalance_enable": False,
        "placement_seed": PLACEMENT_SEED,
    }
    values.update(overrides)
    return ReferenceClusterSettings.model_validate(values)


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float = 60.0,
    message: str = "the condition",
    *,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` every 50 ms until it returns something truthy, and return that (so a predicate
    may return the value it found, or None meaning "not yet").

    Exceptions of the types in ``ignore`` count as "not yet" (e.g. ``NoNodeError`` while a znode is being
    created); any other exception propagates at once. On timeout the AssertionError names ``message``, the
    timeout and the last value (or exception) seen. The default timeout is generous (the machine may be
    loaded): a test waits for the event and asserts what happened, never how long it took (``bench/``).
    """
    deadline = time.monotonic() + timeout
    last: object = "<never evaluated>"
    while True:
        try:
            result = predicate()
        except ignore as exc:
            last = exc
        else:
            if result:
                return result
            last = result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {message}; last seen: {last!r}")
        time.sleep(POLL_INTERVAL_S)


class ClusterFactory(Protocol):
    """``make_cluster(settings=None, *, start=True, zookeeper=None, **overrides)``.

    ``settings`` defaults to :func:`small_settings`; ``overrides`` apply on top of either. ``zookeeper``
    defaults to the test's ``zk_connect`` (its own chroot). With ``start=False`` the caller starts it.
    """

    def __call__(
        self,
        settings: ReferenceClusterSettings | None = None,
        *,
        start: bool = True,
        zookeeper: str | None = None,
        **overrides: Any,
    ) -> ReferenceCluster: ...


@pytest.fixture
def make_cluster(zk_connect: str) -> Iterator[ClusterFactory]:
    """Start reference clusters; at teardown stop them all (last first) and require ``errors == []``."""
    clusters: list[ReferenceCluster] = []

    def make(
        settings: ReferenceClusterSettings | None = None,
        *,
        start: bool = True,
        zookeeper: str | None = None,
        **overrides: Any,
    ) -> ReferenceCluster:
        if settings is None:
            settings = small_settings(**overrides)
        elif overrides:
            settings = ReferenceClusterSettings.model_validate(settings.model_dump() | overrides)
        cluster = ReferenceCluster(settings, zookeeper or zk_connect)
        clusters.append(cluster)
        if start:
            cluster.start()
        return cluster

    yield make

    stop_failures: list[str] = []
    for cluster in reversed(clusters):
        try:
            cluster.stop()
        except Exception as exc:  # keep stopping the others; reported below
            stop_failures.append(f"{type(exc).__name__}: {exc}")
    recorded = {i: cluster.errors for i, cluster in enumerate(clusters) if cluster.errors}
    assert not stop_failures, f"stopping a reference cluster failed: {stop_failures}"
    assert not recorded, f"reference clusters recorded errors on their loop (by start order): {recorded}"


# --- reading the cluster as a collector would --------------------------------------------------------


@dataclass(frozen=True)
class ZkPartition:
    """One partition as ZooKeeper shows it: the topic znode's assignment and the state znode."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int | None
    """None when the state znode does not exist (yet); -1 when offline."""
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        """docs/kafka-reference.md §3: |ISR| < |AR| − |adding replicas| (only for partitions with a state)."""
        return self.leader is not None and len(self.isr) < len(self.replicas) - len(self.adding_replicas)


def read_json(zk: KazooClient, path: str) -> Any:
    data, _ = zk.get(path)
    return json.loads(data)


def zk_partitions(zk: KazooClient) -> dict[tuple[str, int], ZkPartition]:
    """Every partition of every topic under ``/brokers/topics``, keyed by (topic, partition)."""
    result: dict[tuple[str, int], ZkPartition] = {}
    try:
        topics = zk.get_children("/brokers/topics")
    except NoNodeError:
        return result
    for topic in sorted(topics):
        znode = read_json(zk, f"/brokers/topics/{topic}")
        adding: Mapping[str, list[int]] = znode.get("adding_replicas") or {}
        for key, replicas in znode.get("partitions", {}).items():
            try:
                state = read_json(zk, f"/brokers/topics/{topic}/partitions/{key}/state")
            except NoNodeError:
                state = None
            result[topic, int(key)] = ZkPartition(
                topic=topic,
                partition=int(key),
                replicas=tuple(replicas),
                adding_replicas=tuple(adding.get(key, [])),
                leader=None if state is None else int(state["leader"]),
                isr=() if state is None else tuple(state["isr"]),
            )
    return result


def live_broker_ids(zk: KazooClient) -> list[int]:
    return sorted(int(child) for child in zk.get_children("/brokers/ids"))


def controller_id(zk: KazooClient) -> int | None:
    try:
        return int(read_json(zk, "/controller")["brokerid"])
    except NoNodeError:
        return None


def controller_epoch(zk: KazooClient) -> int:
    return int(zk.get("/controller_epoch")[0])


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Scrape:
    """One ``/metrics`` response, parsed by prometheus_client's parser."""

    content_type: str
    types: dict[str, str]
    """Family name (counters without ``_total``, as the parser names them) -> ``gauge``/``counter``/..."""
    samples: dict[str, list[Sample]]
    """Sample name as exposed (counters with ``_total``) -> its series."""

    def series(self, name: str) -> list[Sample]:
        return self.samples.get(name, [])

    def value(self, name: str, **labels: str) -> float:
        """Sum of the series of ``name`` whose labels include ``labels``; KeyError if there are none."""
        matching = [s.value for s in self.series(name) if labels.items() <= s.labels.items()]
        if not matching:
            raise KeyError(f"no series {name}{labels or ''} in the scrape")
        return sum(matching)

    def unlabelled(self, name: str) -> float:
        """The value of the one series of ``name`` that has no labels at all."""
        [value] = [s.value for s in self.series(name) if not s.labels]
        return value


def scrape(url: str, timeout: float = 5.0) -> Scrape:
    """GET a broker's ``/metrics`` and parse it; raises ``httpx.ConnectError`` when the endpoint refuses,
    ``httpx.HTTPStatusError`` for a status other than 2xx."""
    response = httpx.get(url, timeout=timeout, trust_env=False)
    response.raise_for_status()
    content_type = response.headers.get("Content-Type", "")
    text = response.content.decode()
    types: dict[str, str] = {}
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(Sample(dict(sample.labels), float(sample.value)))
    return Scrape(content_type, types, samples)
