"""``kafka-health serve`` as a user runs it: the real command in a child process on the reference cluster
(it answers over HTTP and stops on SIGTERM with exit 0), and its errors: bad input exits 2, a ZooKeeper
that is not there exits 1 with a message."""

from __future__ import annotations

import io
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.cli import serve as serve_command
from app.cli.common import ExitCode
from app.cli.main import build_parser
from app.embedded.zookeeper import pick_free_port
from app.service.auth import hash_token
from tests.support.cli import REPO
from tests.support.reference_cluster import ClusterFactory, wait_for

pytestmark = pytest.mark.integration

TOKENS = "KAFKA_HEALTH_SERVICE__TOKENS"


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_")}
    return clean | extra


def serve(*argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["serve", *argv])
    out, err = io.StringIO(), io.StringIO()
    return serve_command.run(args, out, err), out.getvalue(), err.getvalue()


def test_the_command_serves_the_cluster_and_stops_on_sigterm(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    make_cluster()
    port = pick_free_port()
    argv = [
        sys.executable, "-m", "app.cli.main", "serve", "--zookeeper", zk_connect, "--port", str(port),
        "--store-url", f"sqlite:///{tmp_path / 'store.db'}",
    ]  # fmt: skip
    child = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env(KAFKA_HEALTH_SERVICE__TOKENS="me:viewer:token-for-me"),
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

        wait_for(ready, timeout=60, message="the service ready")
        body = httpx.get(url + "/api/v1/cluster", headers={"Authorization": "Bearer token-for-me"}).json()
        assert body["summary"]["brokers"] == 3
    finally:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    assert child.returncode == ExitCode.OK, err
    assert f"on http://127.0.0.1:{port}" in out


def self_signed(directory: Path, name: str = "tls") -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost and its unencrypted key, made by openssl now."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_the_command_serves_https_with_tls_cert_and_key(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path
) -> None:
    make_cluster()
    cert, key = self_signed(tmp_path)
    port = pick_free_port()
    argv = [
        sys.executable, "-m", "app.cli.main", "serve", "--zookeeper", zk_connect, "--port", str(port),
        "--tls-cert", str(cert), "--tls-key", str(key), "--store-url", f"sqlite:///{tmp_path / 'store.db'}",
    ]  # fmt: skip
    child = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env(KAFKA_HEALTH_SERVICE__TOKENS="me:viewer:token-for-me"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    trusted = ssl.create_default_context(cafile=str(cert))
    try:
        url = f"https://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(url + "/readyz", verify=trusted).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout=60, message="the service ready over https")
        headers = {"Authorization": "Bearer token-for-me"}
        body = httpx.get(url + "/api/v1/cluster", headers=headers, verify=trusted).json()
        assert body["summary"]["brokers"] == 3
        with pytest.raises(httpx.TransportError):  # plain HTTP is not answered on the TLS port
            httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    finally:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    assert child.returncode == ExitCode.OK, err
    assert f"on https://127.0.0.1:{port}" in out


def test_bad_tls_files_exit_2_in_one_line_before_the_banner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    cert, key = self_signed(tmp_path)
    other_cert, other_key = self_signed(tmp_path, "other")
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-aes256", "-passout", "pass:pw", "-out", str(encrypted)],
        check=True,
        capture_output=True,
    )
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    zk = ["--zookeeper", f"127.0.0.1:{pick_free_port()}"]  # never reached: bad input is found first
    cases = [
        (["--tls-cert", str(cert)], "needs both tls_cert and tls_key"),
        (["--tls-cert", str(tmp_path / "missing.crt"), "--tls-key", str(key)], "missing.crt: no such file"),
        (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "missing.key")], "missing.key: no such file"),
        (["--tls-cert", str(garbage), "--tls-key", str(key)], "cannot be loaded"),
        (["--tls-cert", str(cert), "--tls-key", str(other_key)], "cannot be loaded"),
        (["--tls-cert", str(cert), "--tls-key", str(encrypted)], "it is encrypted"),
    ]
    for argv, message in cases:
        code, out, err = serve(*zk, *argv)
        assert (code, out) == (ExitCode.BAD_INPUT, ""), argv
        assert err.startswith("error: "), err
        assert err.count("\n") == 1, err
        assert message in err, err
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__TLS_CERT", str(other_cert))
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__TLS_KEY", str(key))
    code, _, err = serve(*zk)
    assert code == ExitCode.BAD_INPUT
    assert "cannot be loaded" in err  # the environment's pair is checked too


def test_hash_token_prints_the_token_file_digest() -> None:
    code, out, _ = serve("--hash-token", "s3cret-token")
    assert code == ExitCode.OK
    assert out.strip() == hash_token("s3cret-token")


@pytest.mark.parametrize(
    ("argv", "environment", "message"),
    [
        ([], {}, "no ZooKeeper"),
        (["--zookeeper", "zk:notaport"], {}, "zk:notaport"),
        (
            ["--zookeeper", "127.0.0.1:2181"],
            {"KAFKA_HEALTH_SERVICE__TOKENS": "me:boss:abcdefgh1"},
            "role 'boss'",
        ),
        (
            ["--zookeeper", "127.0.0.1:2181"],
            {"KAFKA_HEALTH_SERVICE__TOKENS": "me:viewer:short"},
            "8 characters",
        ),
        (["--zookeeper", "127.0.0.1:2181"], {"KAFKA_HEALTH_SERVICE__PORT": "70000"}, "service.port"),
    ],
)
def test_bad_input_exits_2(
    argv: list[str], environment: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    code, _, err = serve(*argv)
    assert code == ExitCode.BAD_INPUT
    assert err.startswith("error: ")
    assert message in err


def test_an_unreachable_zookeeper_exits_1_with_a_message(tmp_path: Path) -> None:
    port = pick_free_port()
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "serve", "--zookeeper", f"127.0.0.1:{pick_free_port()}",
         "--port", str(port), "--store-url", f"sqlite:///{tmp_path / 'store.db'}"],
        check=False,
        cwd=REPO,
        env=env(KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S="3"),
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "error: cannot read the cluster at 127.0.0.1:" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 45


def test_a_metrics_listener_no_broker_has_exits_2_before_the_banner(
    make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    make_cluster()
    code, out, err = serve(
        "--zookeeper", zk_connect, "--port", str(pick_free_port()),
        "--store-url", f"sqlite:///{tmp_path / 'store.db'}",
        "--metrics-url-template", "http://{host}:7071/metrics", "--metrics-listener", "internal",
    )  # fmt: skip
    assert (code, out) == (ExitCode.BAD_INPUT, "")
    assert err == (
        "error: metrics.listener INTERNAL: no registered broker has that listener "
        "(their listeners: PLAINTEXT)\n"
    )
