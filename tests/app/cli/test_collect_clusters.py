"""``kafka-health collect`` watching two reference clusters at once: each cluster's samples carry its name,
one cluster's ZooKeeper going down does not delay the other's rounds, and a cluster whose ZooKeeper does
not answer at start-up is a warning, sampled once it answers.

Cluster ``a`` runs on the run's shared ZooKeeper (``make_cluster``); cluster ``b`` on a second ZooKeeper
server of its own, started once for this module, which the tests stop and start again.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.cli import collect as collect_command
from app.cli.common import ExitCode
from app.cli.main import build_parser
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.zookeeper import EmbeddedZooKeeper, pick_free_port
from app.settings import CONFIG_ENV
from tests.support.reference_cluster import ClusterFactory, small_settings, wait_for

pytestmark = pytest.mark.integration

INTERVAL_S = 0.3


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        if name != "KAFKA_HEALTH_LOG_LEVEL":
            monkeypatch.delenv(name)


@dataclass
class SecondCluster:
    """Cluster ``b``: a reference cluster on a ZooKeeper server of its own."""

    server: EmbeddedZooKeeper
    cluster: ReferenceCluster
    connect: str

    def zookeeper_down(self) -> None:
        self.server.stop()

    def zookeeper_up(self) -> None:
        self.server.start()


@pytest.fixture(scope="module")
def cluster_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecondCluster]:
    server = EmbeddedZooKeeper(
        pick_free_port(), tmp_path_factory.mktemp("zk-b"), heap="256m", max_session_timeout_ms=60_000
    )
    server.start()
    connect = f"{server.connect_string}/b-{uuid.uuid4().hex[:8]}"
    cluster = ReferenceCluster(
        small_settings(brokers=2, topics=[TopicSpec(name="payments", partitions=2, replication_factor=2)]),
        connect,
    )
    try:
        cluster.start()
        yield SecondCluster(server, cluster, connect)
    finally:
        server.start()  # a test that failed with it down: the brokers' sessions come back, then close
        cluster.stop()
        server.stop()


@pytest.fixture
def cluster_b_up(cluster_b: SecondCluster) -> Iterator[SecondCluster]:
    """Cluster ``b`` with its ZooKeeper serving, before and after the test."""
    cluster_b.zookeeper_up()
    yield cluster_b
    cluster_b.zookeeper_up()


class Collect:
    """``kafka-health collect ARGS`` on a thread, until :meth:`stop`."""

    def __init__(self, *argv: str) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()
        self.stop_event = threading.Event()
        self.code: int | None = None
        args = build_parser().parse_args(["collect", *argv])
        self.thread = threading.Thread(target=self._run, args=(args,), daemon=True)
        self.thread.start()

    def _run(self, args: object) -> None:
        self.code = collect_command.run(args, self.out, self.err, stop=self.stop_event)  # type: ignore[arg-type]

    def stop(self) -> int | None:
        self.stop_event.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "collect did not stop"
        return self.code


def rounds(spool: Path, cluster: str) -> list[float]:
    """The start times of ``cluster``'s rounds in the spool (one cluster sample per round), in order."""
    times = []
    for path in spool.glob("*.ndjson"):
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            sample = json.loads(line)
            if sample["cluster"] == cluster and sample["kind"] == "cluster":
                times.append(sample["timestamp"])
    return sorted(times)


def assert_rounds_between(a_rounds: list[float], b_rounds: list[float]) -> None:
    """Cluster a started rounds while each of b's slow rounds (5 s of scrape timeouts) was under way: had
    a waited for b, one round of a would fall between two of b's."""
    for b_start, b_next in itertools.pairwise(b_rounds):
        between = [t for t in a_rounds if b_start < t < b_next]
        assert len(between) >= 2, (b_start, b_next, a_rounds)


def samples(spool: Path) -> list[dict[str, object]]:
    return [json.loads(line) for path in spool.glob("*.ndjson") for line in path.read_text().splitlines()]


@pytest.fixture
def silent_metrics() -> Iterator[str]:
    """A metrics URL whose server accepts connections and never answers: each scrape of it waits for the
    scrape timeout (5 s), which makes every round of a cluster scraped there slow."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/metrics"


def test_two_clusters_are_sampled_by_name_and_one_zookeeper_down_does_not_delay_the_other(
    make_cluster: ClusterFactory,
    zk_connect: str,
    cluster_b_up: SecondCluster,
    silent_metrics: str,
    tmp_path: Path,
) -> None:
    make_cluster()
    collect = Collect(
        "--cluster",
        f"a={zk_connect}",
        "--cluster",
        f"b={cluster_b_up.connect},{silent_metrics}",
        "--sink",
        f"spool:{tmp_path}",
        "--interval",
        f"{INTERVAL_S}",
    )
    try:
        wait_for(
            lambda: len(rounds(tmp_path, "a")) >= 3 and rounds(tmp_path, "b"),
            timeout=60,
            message="three rounds of cluster a and one of cluster b (whose scrapes time out)",
        )
        written = samples(tmp_path)
        by_cluster = {
            name: {(s["kind"], s["broker"]) for s in written if s["cluster"] == name} for name in ("a", "b")
        }
        assert by_cluster["a"] == {("broker", 0), ("broker", 1), ("broker", 2), ("cluster", None)}
        assert by_cluster["b"] == {("broker", 0), ("broker", 1), ("cluster", None)}
        assert {str(s["cluster"]) for s in written} == {"a", "b"}
        ids = {name: {s["collector_id"] for s in written if s["cluster"] == name} for name in ("a", "b")}
        assert len(ids["a"]) == len(ids["b"]) == 1
        assert ids["a"] != ids["b"]
        out = collect.out.getvalue()
        assert "[a] " in out, out
        assert "[b] " in out, out

        # b's rounds each wait 5 s for its scrapes; a's rounds go on meanwhile (how evenly: bench/latency.py)
        wait_for(lambda: len(rounds(tmp_path, "b")) >= 2, timeout=60, message="two rounds of cluster b")
        assert_rounds_between(rounds(tmp_path, "a"), rounds(tmp_path, "b"))

        cluster_b_up.zookeeper_down()
        down_at = time.time()
        wait_for(
            lambda: len([t for t in rounds(tmp_path, "b") if t >= down_at]) >= 2,
            timeout=60,
            message="two rounds of cluster b with its ZooKeeper down",
        )
        after = [t for t in rounds(tmp_path, "a") if t >= down_at]
        assert_rounds_between(after, [t for t in rounds(tmp_path, "b") if t >= down_at])
        assert "scrape failed" in collect.out.getvalue()
        assert collect.thread.is_alive()
        assert collect.code is None
    finally:
        code = collect.stop()
    assert code == ExitCode.OK, collect.err.getvalue()


def test_a_cluster_unreachable_at_start_up_is_a_warning_and_sampled_once_it_answers(
    make_cluster: ClusterFactory, zk_connect: str, cluster_b_up: SecondCluster, tmp_path: Path
) -> None:
    make_cluster()
    cluster_b_up.zookeeper_down()
    started = time.monotonic()
    collect = Collect(
        "--cluster",
        f"a={zk_connect}",
        "--cluster",
        f"b={cluster_b_up.connect}",
        "--sink",
        f"spool:{tmp_path}",
        "--interval",
        f"{INTERVAL_S}",
    )
    try:
        wait_for(lambda: len(rounds(tmp_path, "a")) >= 3, timeout=60, message="three rounds of cluster a")
        warning = collect.err.getvalue()
        assert warning.startswith(f"warning: cluster b: cannot read the cluster at {cluster_b_up.connect}: ")
        assert warning.count("\n") == 1
        assert "trying again in the background" in warning
        assert rounds(tmp_path, "b") == []
        cluster_b_up.zookeeper_up()
        wait_for(lambda: rounds(tmp_path, "b"), timeout=60, message="a round of cluster b once it answers")
        assert "collector " in collect.out.getvalue()
        assert "cluster b at" in collect.out.getvalue()
    finally:
        code = collect.stop()
    assert code == ExitCode.OK, collect.err.getvalue()
    assert time.monotonic() - started < 90


def test_once_writes_a_round_of_each_cluster_and_warns_of_one_that_cannot_be_read(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_cluster()
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S", "3")
    down = f"127.0.0.1:{pick_free_port()}"
    args = build_parser().parse_args(
        [
            "collect",
            "--cluster",
            f"a={zk_connect}",
            "--cluster",
            f"b={down}",
            "--sink",
            f"spool:{tmp_path}",
            "--once",
        ]
    )
    out, err = io.StringIO(), io.StringIO()
    assert collect_command.run(args, out, err) == ExitCode.OK
    assert err.getvalue().startswith(f"warning: cluster b: cannot read the cluster at {down}: ")
    assert err.getvalue().rstrip().endswith("no round written for it")
    assert {s["cluster"] for s in samples(tmp_path)} == {"a"}
    assert out.getvalue().startswith("[a] ")


def test_no_cluster_readable_exits_1_and_the_clusters_are_tried_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S", "10")
    names = ("a", "b", "c")
    argv = [arg for name in names for arg in ("--cluster", f"{name}=127.0.0.1:{pick_free_port()}")]
    args = build_parser().parse_args(["collect", *argv, "--sink", f"spool:{tmp_path}", "--once"])
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    assert collect_command.run(args, out, err) == ExitCode.FAILED
    took = time.monotonic() - started
    (line,) = err.getvalue().splitlines()
    assert line.startswith(
        "error: none of the 3 clusters can be read: cluster a: cannot read the cluster at "
    )
    assert "; cluster b: cannot read" in line
    assert "; cluster c: cannot read" in line
    assert out.getvalue() == ""
    # at once: one start timeout (10 s); one after the other: three (30 s). The margin is the machine's load.
    assert took < 2 * 10, f"three clusters took {took:.1f} s: their first scans did not run at once"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "Prod=127.0.0.1:2181"], "not a cluster name"),
        (["--cluster", "prod"], "expected NAME=HOST:PORT"),
        (["--cluster", "prod=not a host"], "cluster prod: "),
        (["--cluster", "a=127.0.0.1:2181", "--cluster", "a=127.0.0.1:2182"], "given twice"),
        (["--cluster", "a=127.0.0.1:2181", "--zookeeper", "127.0.0.1:2181"], "--cluster and --zookeeper"),
    ],
)
def test_bad_cluster_flags_exit_2_with_one_line(argv: list[str], message: str, tmp_path: Path) -> None:
    args = build_parser().parse_args(["collect", *argv, "--sink", f"spool:{tmp_path}"])
    out, err = io.StringIO(), io.StringIO()
    assert collect_command.run(args, out, err) == ExitCode.BAD_INPUT
    assert err.getvalue().startswith("error: ")
    assert err.getvalue().count("\n") == 1
    assert message in err.getvalue()
    assert out.getvalue() == ""


def test_clusters_of_the_config_file_keep_the_shared_zookeeper_section_under_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "kafka-health.toml"
    config.write_text(
        "[zookeeper]\nsession_timeout_s = 9\n"
        '[clusters.prod.zookeeper]\nconnect = "zk1:2181/prod"\nconnections = 2\n'
        '[clusters.stage.zookeeper]\nconnect = "zk2:2181/stage"\n'
    )
    monkeypatch.setenv(CONFIG_ENV, str(config))
    args = build_parser().parse_args(
        ["collect", "--cluster", "test=zk3:2181,http://{host}:9404/metrics", "--sink", f"spool:{tmp_path}"]
    )
    watched = collect_command.settings_from_args(args).watched()
    assert [(w.name, w.connect, w.zookeeper.connections, w.zookeeper.session_timeout_s) for w in watched] == [
        ("prod", "zk1:2181/prod", 2, 9.0),
        ("stage", "zk2:2181/stage", 4, 9.0),
        ("test", "zk3:2181", 4, 9.0),
    ]
    assert [None if w.metrics is None else w.metrics.url_template for w in watched] == [
        None,
        None,
        "http://{host}:9404/metrics",
    ]
    without_flags = build_parser().parse_args(["collect", "--sink", f"spool:{tmp_path}", "--interval", "5"])
    watched = collect_command.settings_from_args(without_flags).watched()
    assert [(w.name, w.zookeeper.connections, w.zookeeper.session_timeout_s) for w in watched] == [
        ("prod", 2, 9.0),
        ("stage", 4, 9.0),
    ]
