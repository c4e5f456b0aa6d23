"""``kafka-health serve --cluster NAME=ZK`` (repeated) as a user runs it: a cluster whose ZooKeeper cannot
be read at start-up is a one-line warning and answers 503 while the others are served; no readable
cluster at all exits 1; ``--cluster`` with ``--zookeeper`` is bad input."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.cli import serve as serve_command
from app.cli.common import CLUSTER_AND_ZOOKEEPER, ExitCode
from app.cli.main import build_parser
from app.embedded.zookeeper import pick_free_port
from tests.support.cli import REPO
from tests.support.reference_cluster import ClusterFactory, wait_for

pytestmark = pytest.mark.integration

VIEWER = {"Authorization": "Bearer token-for-me"}


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_")}
    return clean | extra


def serve(*argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["serve", *argv])
    out, err = io.StringIO(), io.StringIO()
    return serve_command.run(args, out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--cluster", "a=127.0.0.1:2181", "--zookeeper", "127.0.0.1:2181"],
            f"error: {CLUSTER_AND_ZOOKEEPER}\n",
        ),
        (
            ["--cluster", "a"],
            "error: --cluster 'a': expected NAME=HOST:PORT[/chroot][,METRICS_URL_TEMPLATE]\n",
        ),
        (["--cluster", "A=zk:1"], "is not a cluster name"),
        (["--cluster", "a=zk:1", "--cluster", "a=zk:2"], "error: --cluster a: given twice\n"),
        (["--cluster", "a=zk:1", "--cluster", "b=zk:notaport"], "error: cluster b: "),
    ],
)
def test_bad_clusters_exit_2_in_one_line(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    code, out, err = serve(*argv, "--port", str(pick_free_port()))
    assert (code, out) == (ExitCode.BAD_INPUT, "")
    assert err.startswith("error: ")
    assert err.count("\n") == 1, err
    assert message in err


def test_no_readable_cluster_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S", "1")
    monkeypatch.setenv("KAFKA_HEALTH_ANALYTICS__STORE_URL", f"sqlite:///{tmp_path / 'store.db'}")
    code, out, err = serve(
        "--cluster", f"a=127.0.0.1:{pick_free_port()}", "--cluster", f"b=127.0.0.1:{pick_free_port()}",
        "--port", str(pick_free_port()),
    )  # fmt: skip
    assert (code, out) == (ExitCode.FAILED, "")
    assert err.startswith("error: cannot read any cluster: a: ")
    assert "; b: " in err
    assert err.count("\n") == 1, err


def test_an_unreadable_cluster_is_retried_while_the_others_are_served(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    make_cluster()
    port, down = pick_free_port(), f"127.0.0.1:{pick_free_port()}"
    argv = [
        sys.executable, "-m", "app.cli.main", "serve", "--port", str(port),
        "--store-url", f"sqlite:///{tmp_path / 'store.db'}",
        "--cluster", f"a={zk_connect}", "--cluster", f"b={down}",
    ]  # fmt: skip
    child = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env(
            KAFKA_HEALTH_SERVICE__TOKENS="me:viewer:token-for-me", KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S="1"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(url + "/readyz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout=60, message="the service ready (cluster a)")
        listed = httpx.get(url + "/api/v1/clusters", headers=VIEWER).json()
        assert [(c["name"], c["reachable"], c["zookeeper"]) for c in listed] == [
            ("a", True, zk_connect),
            ("b", False, down),
        ]
        assert httpx.get(url + "/api/v1/clusters/a/cluster", headers=VIEWER).json()["summary"]["brokers"] == 3
        b = httpx.get(url + "/api/v1/clusters/b/cluster", headers=VIEWER)
        assert b.status_code == 503
        assert b.json()["detail"].startswith(f"cluster b: ZooKeeper not reachable yet ({down}")
        readiness = httpx.get(url + "/readyz").json()["clusters"]
        assert [(c["name"], c["ready"]) for c in readiness] == [("a", True), ("b", False)]
    finally:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    assert child.returncode == ExitCode.OK, err
    assert f"kafka-health serving a ({zk_connect}), b ({down}) on http://127.0.0.1:{port}" in out
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"warning: cluster b: cannot read its ZooKeeper at {down}: ")
    assert warnings[0].endswith("(retried in the background)")
    assert "Traceback" not in err
