"""What ``kafka-health serve`` checks before it serves, as a user runs it (a child process): a chroot that
holds no Kafka cluster exits 1 (``describe``'s check) and nothing is written into that ZooKeeper, or, with
``--wait-for-cluster``, the service waits not ready and becomes ready once a cluster appears there; an
SQLite store whose directory does not exist is bad input (exit 2) unless ``--create-store-dir``; no API
token configured is a warning at start-up and in ``/readyz``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from app.cli.common import ExitCode
from app.cli.main import build_parser
from app.cli.serve import settings_from_args
from app.embedded.zookeeper import pick_free_port
from app.service.auth import NO_TOKEN
from tests.support.cli import REPO
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.serve_process import Serve

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0
TOKENS = {"KAFKA_HEALTH_SERVICE__TOKENS": "me:viewer:token-for-me"}


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_")}
    return clean | extra


def run_serve(*argv: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """``kafka-health serve ARGV`` to its end (it must end within the timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "serve", "--port", str(pick_free_port()), *argv],
        check=False,
        cwd=REPO,
        env=env(**environment),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.fixture
def started() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``start(*argv, **env)``: ``kafka-health serve`` in a child process, stopped at teardown."""
    children: list[subprocess.Popen[str]] = []

    def start(*argv: str, **environment: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "serve", *argv],
            cwd=REPO,
            env=env(**environment),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=30)


def readyz(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url + "/readyz", timeout=5)
    except httpx.TransportError:
        return None


def tree(zk: KazooClient, path: str = "/") -> list[str]:
    """Every znode under ``path`` (the test's chroot), for the messages."""
    found = []
    for child in zk.get_children(path):
        below = f"{path.rstrip('/')}/{child}"
        found += [below, *tree(zk, below)]
    return found


# --- a chroot with no Kafka cluster in it --------------------------------------------------------------


def test_a_chroot_with_no_kafka_cluster_exits_1_in_one_line_and_writes_nothing(
    zk_connect: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    result = run_serve("--zookeeper", zk_connect + "/nope", "--store-url", f"sqlite:///{store}", **TOKENS)
    assert result.returncode == ExitCode.FAILED, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {zk_connect}/nope: no Kafka cluster there: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert zk_client.exists("/nope") is None, tree(zk_client)
    assert not store.exists(), "the store is opened after the cluster is found"


def test_with_wait_for_cluster_it_waits_not_ready_writing_nothing_and_is_ready_once_a_cluster_appears(
    serves: Callable[..., Serve], make_cluster: ClusterFactory, zk_connect: str, zk_client: KazooClient,
    tmp_path: Path,
) -> None:  # fmt: skip
    chroot = zk_connect + "/nope"
    serve = serves(
        chroot, f"sqlite:///{tmp_path / 'store.db'}", KAFKA_HEALTH_SERVICE__WAIT_FOR_CLUSTER="true"
    )
    waiting = wait_for(lambda: readyz(serve.url), timeout=TIMEOUT_S, message="/readyz answering")
    assert waiting.status_code == 503
    body = waiting.json()
    assert body["ready"] is False
    assert body["reason"].startswith("no Kafka cluster there: ")
    assert body["warnings"] == [], "a token is configured"
    # the incident lane and the notifier have asked their leadership by now: it stays a follower, and
    # nothing is created in that ZooKeeper
    wait_for(lambda: serve.standing() == "follower", timeout=TIMEOUT_S, message="the lane a follower")
    assert serve.get("/api/v1/cluster").json()["summary"]["brokers"] == 0
    assert zk_client.exists("/nope") is None, tree(zk_client)
    assert "; waiting for one (not ready until a Kafka cluster is there" in serve.output()

    make_cluster(zookeeper=chroot)
    wait_for(serve.ready, timeout=TIMEOUT_S, message="the service ready once the cluster is there")
    assert serve.get("/api/v1/cluster").json()["summary"]["brokers"] == 3
    wait_for(lambda: serve.standing() == "leader", timeout=TIMEOUT_S, message="the lane leading")
    assert zk_client.exists("/nope/kafka-health/notifier-lock") is not None, "its election, in the cluster"


def test_the_wait_for_cluster_flag_sets_the_service_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    parser = build_parser()
    plain = settings_from_args(parser.parse_args(["serve", "--zookeeper", "zk:2181/kafka"]))
    waiting = settings_from_args(
        parser.parse_args(["serve", "--zookeeper", "zk:2181/kafka", "--wait-for-cluster"])
    )
    assert (plain.service.wait_for_cluster, waiting.service.wait_for_cluster) == (False, True)


def test_several_clusters_one_without_kafka_is_a_warning_and_nothing_is_written_there(
    started: Callable[..., subprocess.Popen[str]],
    make_cluster: ClusterFactory,
    zk_connect: str,
    zk_client: KazooClient,
    tmp_path: Path,
) -> None:
    make_cluster()
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    # "a" is first in name order: the shared leadership (notifier, retention) must go through "b"
    child = started(
        "--port", str(port), "--store-url", f"sqlite:///{tmp_path / 'store.db'}",
        "--cluster", f"a={zk_connect}/nope", "--cluster", f"b={zk_connect}",
        **TOKENS,
    )  # fmt: skip
    wait_for(
        lambda: (r := readyz(url)) is not None and r.status_code == 200,
        timeout=TIMEOUT_S,
        message="the service ready (cluster b)",
    )
    readiness = {c["name"]: c for c in httpx.get(url + "/readyz").json()["clusters"]}
    assert (readiness["a"]["ready"], readiness["b"]["ready"]) == (False, True)
    assert readiness["a"]["reason"].startswith("no Kafka cluster there: ")
    wait_for(
        lambda: zk_client.exists("/kafka-health/notifier-lock-shared") is not None,
        timeout=TIMEOUT_S,
        message="the shared leadership taken through b",
    )
    assert zk_client.exists("/nope") is None, tree(zk_client)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode == ExitCode.OK, err
    warned = [line for line in err.splitlines() if line.startswith("warning: cluster a: ")]
    assert len(warned) == 1, err
    assert f"{zk_connect}/nope: no Kafka cluster there: " in warned[0]
    assert zk_client.exists("/nope") is None, tree(zk_client)


def test_several_clusters_none_with_kafka_exits_1_in_one_line(
    zk_connect: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    result = run_serve(
        "--cluster", f"a={zk_connect}/nope", "--cluster", f"b={zk_connect}/nope2",
        "--create-store-dir", "--store-url", f"sqlite:///{tmp_path / 'never' / 'store.db'}",
        **TOKENS,
    )  # fmt: skip
    assert result.returncode == ExitCode.FAILED, result.stderr
    assert result.stderr.startswith("error: no Kafka cluster in any watched cluster: a: ")
    assert "; b: " in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert (zk_client.exists("/nope"), zk_client.exists("/nope2")) == (None, None), tree(zk_client)
    assert not (tmp_path / "never").exists(), "the store's directory is created after the clusters are found"


# --- the store's directory -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "analytics"])
def test_an_sqlite_store_whose_directory_does_not_exist_exits_2_and_creates_nothing(
    command: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    argv = ["--zookeeper", "127.0.0.1:1"] if command == "serve" else ["--create-spool"]
    if command == "analytics":
        argv += ["--source", f"spool:{tmp_path / 'spool'}", "--checkpoint", str(tmp_path / "checkpoint")]
    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", command, *argv, "--store-url", f"sqlite:///{missing}/x.db"],
        check=False,
        cwd=REPO,
        env=env(**TOKENS),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert result.stderr == (
        f"error: store directory {missing} does not exist (give --create-store-dir to create it)\n"
    )
    assert not (tmp_path / "nonexistent").exists()


def test_the_root_case_of_the_report_exits_2_and_creates_no_root_directory() -> None:
    assert not Path("/nonexistent").exists()
    result = run_serve(
        "--zookeeper", "127.0.0.1:1", "--store-url", "sqlite:////nonexistent/dir/x.db", **TOKENS
    )
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert "store directory /nonexistent/dir does not exist" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not Path("/nonexistent").exists()


def test_a_store_path_under_a_file_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = run_serve(
        "--zookeeper", "127.0.0.1:1", "--store-url", f"sqlite:///{tmp_path / 'file' / 'x.db'}", **TOKENS
    )
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert f"store directory {tmp_path / 'file'} is not a directory" in result.stderr


def test_create_store_dir_creates_it_once_the_cluster_is_read(
    serves: Callable[..., Serve], make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    make_cluster()
    directory = tmp_path / "new" / "dir"
    serve = serves(
        zk_connect, f"sqlite:///{directory / 'x.db'}", KAFKA_HEALTH_ANALYTICS__CREATE_STORE_DIR="true"
    )
    wait_for(serve.ready, timeout=TIMEOUT_S, message="the service ready")
    assert (directory / "x.db").is_file()


# --- no API token --------------------------------------------------------------------------------------


def test_no_token_is_a_warning_line_at_start_up_and_in_readyz(
    started: Callable[..., subprocess.Popen[str]], make_cluster: ClusterFactory, zk_connect: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    make_cluster()
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    child = started(
        "--zookeeper", zk_connect, "--port", str(port), "--store-url", f"sqlite:///{tmp_path / 'store.db'}"
    )
    wait_for(
        lambda: (r := readyz(url)) is not None and r.status_code == 200,
        timeout=TIMEOUT_S,
        message="the service ready",
    )
    body = httpx.get(url + "/readyz").json()
    assert (body["ready"], body["reason"], body["warnings"]) == (True, "ok", [NO_TOKEN])
    assert httpx.get(url + "/api/v1/cluster").status_code == 401
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode == ExitCode.OK, err
    assert err.count(f"warning: {NO_TOKEN}\n") == 1, err
    assert "no API token configured" in NO_TOKEN
