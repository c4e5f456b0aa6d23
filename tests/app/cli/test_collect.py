"""``kafka-health collect``: a round on the reference cluster, a run stopped by its event, and the errors
a user meets (bad input: exit 2; a ZooKeeper that is not there: exit 1)."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

from app.cli import collect as collect_command
from app.cli.common import ExitCode
from app.cli.main import build_parser
from app.embedded.zookeeper import pick_free_port
from tests.support.reference_cluster import ClusterFactory, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_HEALTH_ZOOKEEPER__CONNECT", "KAFKA_HEALTH_SAMPLER__SINK", "KAFKA_HEALTH_METRICS"):
        monkeypatch.delenv(name, raising=False)


def collect(*argv: str, stop: threading.Event | None = None) -> tuple[int, str, str]:
    args = build_parser().parse_args(["collect", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = collect_command.run(args, out, err, stop=stop)
    return code, out.getvalue(), err.getvalue()


def test_once_writes_a_round_to_the_spool(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    make_cluster()
    code, out, err = collect("--zookeeper", zk_connect, "--sink", f"spool:{tmp_path}", "--once")
    assert (code, err) == (ExitCode.OK, "")
    assert "4 samples (3 brokers)" in out
    (path,) = tmp_path.glob("*.ndjson")
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds == ["broker", "broker", "broker", "cluster"]


def test_create_spool_makes_the_directory_the_round_goes_to(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    make_cluster()
    spool = tmp_path / "new" / "spool"
    code, _, err = collect("--zookeeper", zk_connect, "--sink", f"spool:{spool}", "--once", "--create-spool")
    assert (code, err) == (ExitCode.OK, "")
    assert len(list(spool.glob("*.ndjson"))) == 1


def test_run_writes_rounds_until_stopped(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    make_cluster()
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            collect("--zookeeper", zk_connect, "--sink", f"spool:{tmp_path}", "--interval", "0.2", stop=stop)[
                0
            ]
        )
    )
    thread.start()
    try:
        wait_for(lambda: len(list(tmp_path.glob("*.ndjson"))) >= 3, message="three rounds in the spool")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert result == [ExitCode.OK]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no ZooKeeper"),
        (["--zookeeper", "not a host"], "is not host:port"),
        (["--zookeeper", "127.0.0.1:2181", "--sink", "ftp:/x"], "spool:DIR or kafka:BOOTSTRAP/TOPIC"),
        (["--zookeeper", "127.0.0.1:2181", "--sink", "kafka:broker/"], "kafka:HOST:PORT"),
        (["--zookeeper", "127.0.0.1:2181", "--sink", "spool:/nonexistent/spool"], "--create-spool"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv: list[str], message: str) -> None:
    code, _, err = collect(*argv)
    assert code == ExitCode.BAD_INPUT
    assert err.startswith("error: ")
    assert message in err


def test_an_unreachable_zookeeper_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S", "3")
    started = time.monotonic()
    code, _, err = collect(
        "--zookeeper", f"127.0.0.1:{pick_free_port()}", "--sink", f"spool:{tmp_path}", "--once"
    )
    assert code == ExitCode.FAILED
    assert "cannot read the cluster" in err
    assert time.monotonic() - started < 30
