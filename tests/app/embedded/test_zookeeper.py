"""EmbeddedZooKeeper: a real server in a child JVM that never outlives its Python parent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient

from app.embedded import zookeeper as zookeeper_server
from app.embedded.zookeeper import (
    EmbeddedZooKeeper,
    JavaNotFoundError,
    ZooKeeperConfigError,
    ZooKeeperJarsNotFoundError,
    ZooKeeperServerError,
    ZooKeeperStartupError,
    find_java,
    find_zookeeper_classpath,
    pick_free_port,
)
from tests.support.zookeeper import jvm_gone

pytestmark = pytest.mark.integration

HEAP = "256m"

CHILD_STARTS_SERVER = """
import sys, time
from pathlib import Path
from app.embedded.zookeeper import EmbeddedZooKeeper
server = EmbeddedZooKeeper(data_dir=Path(sys.argv[1]), heap="256m")
server.start()
print(server.pid, flush=True)
time.sleep(600)
"""


@contextmanager
def kazoo(connect_string: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=connect_string)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


# --- lifecycle --------------------------------------------------------------------------------------


def test_serves_kazoo_on_a_free_port_and_leaves_no_jvm_or_data_dir() -> None:
    with EmbeddedZooKeeper(heap=HEAP) as server:
        assert server.is_running
        assert server.connect_string == f"127.0.0.1:{server.port}"
        data_dir, pid = server.data_dir, server.pid
        assert pid is not None
        assert data_dir.stat().st_mode & 0o077 == 0
        with kazoo(server.connect_string) as client:
            client.create("/brokers/ids/1", b'{"host":"b1"}', makepath=True)
            assert client.get("/brokers/ids/1")[0] == b'{"host":"b1"}'
        assert "ZooKeeperServerMain" in " ".join(psutil.Process(pid).cmdline())

    assert (server.is_running, server.pid) == (False, None)
    assert jvm_gone(pid, within=0)
    assert not data_dir.exists()
    server.stop()


def test_given_port_and_relative_data_dir_are_used_and_the_dir_is_kept_for_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    port, data_dir = pick_free_port(), Path("zk")
    server = EmbeddedZooKeeper(port, data_dir, heap=HEAP, max_session_timeout_ms=30_000)
    with server:
        assert server.connect_string == f"127.0.0.1:{port}"
        with kazoo(server.connect_string) as client:
            client.create("/kept", b"yes")

    zoo_cfg = (data_dir / "zoo.cfg").read_text()
    for setting in (f"clientPort={port}", "maxClientCnxns=0", "maxSessionTimeout=30000"):
        assert setting in zoo_cfg
    assert (data_dir / "version-2").is_dir()
    assert (data_dir / "zookeeper.log").is_file()
    with server, kazoo(server.connect_string) as client:
        assert client.get("/kept")[0] == b"yes"


def test_two_servers_run_side_by_side_with_separate_data() -> None:
    with EmbeddedZooKeeper(heap=HEAP) as first, EmbeddedZooKeeper(heap=HEAP) as second:
        assert first.port != second.port
        assert first.data_dir != second.data_dir
        with kazoo(first.connect_string) as one, kazoo(second.connect_string) as two:
            one.create("/only-in-first")
            assert two.exists("/only-in-first") is None


def test_jvm_outlives_the_thread_that_started_it_and_stop_is_idempotent() -> None:
    server = EmbeddedZooKeeper(heap=HEAP)
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
    try:
        time.sleep(0.3)
        assert server.is_running
        pid = server.pid
        assert pid is not None
    finally:
        server.stop()
    server.stop()
    assert jvm_gone(pid, within=0)


def test_jvm_dies_with_its_sigkilled_python_parent(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD_STARTS_SERVER, str(tmp_path / "zk")],
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        assert parent.stdout is not None
        jvm_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(jvm_pid)
        parent.kill()
    assert jvm_gone(jvm_pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_exec_wrapper_sets_the_death_signal_and_refuses_an_orphaned_start() -> None:
    read_death_signal = [
        sys.executable,
        "-c",
        "import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)",
    ]
    wrapped = zookeeper_server._with_death_signal(read_death_signal, os.getpid())
    assert (
        subprocess.run(wrapped, capture_output=True, text=True, check=True).stdout == f"{signal.SIGKILL:d}\n"
    )
    wrong_parent = zookeeper_server._with_death_signal(read_death_signal, parent_pid=1)
    orphan = subprocess.run(wrong_parent, capture_output=True, text=True, check=False)
    assert (orphan.returncode, orphan.stdout) == (1, "")


# --- failures ---------------------------------------------------------------------------------------


def test_missing_explicit_java_says_how_to_install_it() -> None:
    with pytest.raises(JavaNotFoundError, match="'/nonexistent/bin/java' not found") as caught:
        EmbeddedZooKeeper(java="/nonexistent/bin/java").start()
    assert "Java 17+" in str(caught.value)
    assert "apt-get install openjdk-17-jre-headless" in str(caught.value)


def test_no_java_on_path_or_java_home_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match=r"tried java on PATH\). Java 17\+ is needed") as caught:
        EmbeddedZooKeeper().start()
    assert "set JAVA_HOME" in str(caught.value)


def test_java_home_is_preferred_over_path(tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    assert find_java(env={"JAVA_HOME": str(tmp_path / "jdk"), "PATH": "/usr/bin:/bin"}) == str(java)


def test_taken_port_is_a_startup_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        port = squatter.getsockname()[1]
        with pytest.raises(ZooKeeperStartupError, match=f"port {port} on 127.0.0.1 is already in use"):
            EmbeddedZooKeeper(port, heap=HEAP).start()


def test_jvm_exiting_early_reports_its_last_log_lines(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(data_dir=tmp_path / "zk", heap="lots")
    with pytest.raises(ZooKeeperStartupError, match="exited with code 1 during startup") as caught:
        server.start()
    assert "Invalid maximum heap size: -Xmxlots" in str(caught.value)
    assert not server.is_running


def test_bad_settings_are_rejected_before_anything_starts(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ZooKeeperConfigError, match="not a directory"):
        EmbeddedZooKeeper(data_dir=a_file)
    with pytest.raises(ZooKeeperConfigError, match="port must be"):
        EmbeddedZooKeeper(port=0)
    with pytest.raises(ZooKeeperServerError, match="has not started"):
        _ = EmbeddedZooKeeper().port


# --- classpath discovery ----------------------------------------------------------------------------


def test_classpath_comes_from_the_pyspark_wheel() -> None:
    (entry,) = find_zookeeper_classpath(env={})
    jars = Path(entry).parent
    assert jars.name == "jars"
    assert jars.parent.name == "pyspark"
    assert list(jars.glob("zookeeper-jute-*.jar"))


def test_classpath_falls_back_to_zookeeper_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(zookeeper_server, "_pyspark_jars_dir", lambda: None)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "zookeeper-3.8.4.jar").write_bytes(b"")
    assert find_zookeeper_classpath(env={"ZOOKEEPER_HOME": str(tmp_path)}) == [
        str(tmp_path / "*"),
        str(tmp_path / "lib" / "*"),
    ]


def test_classpath_falls_back_to_a_symlinked_zkserver_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(zookeeper_server, "_pyspark_jars_dir", lambda: None)
    home = tmp_path / "share" / "zookeeper"
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "lib" / "zookeeper.jar").write_bytes(b"")
    script = home / "bin" / "zkServer.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "zkServer.sh").symlink_to(script)
    classpath = find_zookeeper_classpath(env={"PATH": str(tmp_path / "bin")})
    assert str(home / "lib" / "*") in classpath


def test_missing_jars_error_lists_what_was_tried(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(zookeeper_server, "_pyspark_jars_dir", lambda: None)
    with pytest.raises(ZooKeeperJarsNotFoundError) as caught:
        find_zookeeper_classpath(env={"ZOOKEEPER_HOME": str(tmp_path), "PATH": str(tmp_path)})
    message = str(caught.value)
    for tried in ("pyspark (not installed)", f"$ZOOKEEPER_HOME={tmp_path}", "zkServer.sh on PATH"):
        assert tried in message


def _java_children() -> set[int]:
    return {c.pid for c in psutil.Process(os.getpid()).children(recursive=True) if "java" in c.name()}


@pytest.fixture(scope="module", autouse=True)
def _no_jvm_left_behind_by_this_module() -> Iterator[None]:
    """Guard for the whole file: every server its tests started was stopped (the session's shared
    ZooKeeper, started by whichever test used it first, is not this module's)."""
    before = _java_children()
    yield
    assert _java_children() - before == set()
