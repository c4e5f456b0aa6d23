"""The job's Spark session (``build_session`` in :mod:`analytics.spark.job`): a local master's driver binds
and advertises loopback only, unless the user chose its addresses; an external master keeps Spark's. The
master and the executors' Python: the settings', else Spark's own configuration's, else the defaults."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analytics.config import DEFAULT_MASTER, AnalyticsSettings
from analytics.spark.job import (
    DRIVER_ADDRESS_KEYS,
    choose_master,
    driver_address_conf,
    is_local_master,
    under_spark_submit,
    worker_python,
)

BOTH = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


@pytest.mark.unit
@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,3]", "local-cluster[2,1,1024]"])
def test_a_local_master_gets_loopback_addresses(master: str) -> None:
    assert is_local_master(master)
    assert driver_address_conf(master, set(), {}) == BOTH


@pytest.mark.unit
@pytest.mark.parametrize(
    "master", ["spark://spark-master:7077", "yarn", "k8s://https://k8s:6443", "localhost"]
)
def test_an_external_master_keeps_sparks_defaults(master: str) -> None:
    assert not is_local_master(master)
    assert driver_address_conf(master, set(), {}) == {}


@pytest.mark.unit
def test_what_the_user_set_wins() -> None:
    assert driver_address_conf("local[2]", {"spark.driver.host"}, {}) == {
        "spark.driver.bindAddress": "127.0.0.1"
    }
    assert driver_address_conf("local[2]", set(DRIVER_ADDRESS_KEYS), {}) == {}
    assert driver_address_conf("local[2]", set(), {"SPARK_LOCAL_IP": "10.0.0.5"}) == {}


@pytest.mark.unit
def test_the_master_is_the_settings_then_spark_submits_then_local() -> None:
    assert AnalyticsSettings().master is None
    assert choose_master(None, None) == DEFAULT_MASTER == "local[2]"
    # spark-submit --master spark://... without --master to the job: the cluster, not local mode
    assert choose_master(None, "spark://m:7077") == "spark://m:7077"
    assert choose_master("local[4]", "spark://m:7077") == "local[4]"
    assert choose_master("spark://a:7077", None) == "spark://a:7077"


@pytest.mark.unit
def test_sparks_master_counts_only_under_spark_submit() -> None:
    assert under_spark_submit({"PYSPARK_GATEWAY_PORT": "40123"})
    assert not under_spark_submit({})


@pytest.mark.spark
def test_without_a_master_the_job_runs_local_2_not_pysparks_local_star(tmp_path: Path) -> None:
    """pyspark launches its JVM with ``spark.master=local[*]``: that is no choice of the user's."""
    script = (
        "from analytics.config import AnalyticsSettings\n"
        "from analytics.spark.job import build_session, stop_session\n"
        "spark = build_session(AnalyticsSettings())\n"
        "print('master', spark.sparkContext.master)\n"
        "stop_session(spark)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "master local[2]\n" in done.stdout, done.stderr[-2000:]


@pytest.mark.unit
def test_the_executors_python_is_the_configured_one_else_pyspark_python_else_the_drivers() -> None:
    conf = {"spark.pyspark.python": "/opt/kh/venv/bin/python"}
    env = {"PYSPARK_PYTHON": "./environment/bin/python"}
    assert worker_python(conf, env, "/usr/bin/python3") == "/opt/kh/venv/bin/python"
    assert worker_python({}, env, "/usr/bin/python3") == "./environment/bin/python"
    assert worker_python({}, {}, "/usr/bin/python3") == "/usr/bin/python3"


def _listening_sockets() -> dict[str, str]:
    """Socket inode -> local address (hex, as in /proc/net/tcp*) of every listening TCP socket."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found[fields[9]] = fields[1]
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    return inodes


def _is_loopback(hex_address: str) -> bool:
    # IPv4 is one little-endian word (127.0.0.1 is 0100007F); IPv6 is four, ::ffff:127.x.y.z ends with it
    host = hex_address.split(":", maxsplit=1)[0]
    if len(host) == 8:
        return host.endswith("7F")
    return host == "00000000000000000000000001000000" or (
        host.startswith("0000000000000000FFFF0000") and host.endswith("7F")
    )


@pytest.mark.spark
def test_the_shared_local_session_listens_on_loopback_only(spark_session: Any) -> None:
    from pyspark import SparkContext

    conf = spark_session.sparkContext.getConf()
    assert {key: conf.get(key) for key in DRIVER_ADDRESS_KEYS} == BOTH
    driver_port = int(conf.get("spark.driver.port"))
    assert SparkContext._gateway is not None
    jvm = SparkContext._gateway.proc.pid
    listening = _listening_sockets()
    jvm_listens = sorted(listening[inode] for inode in _socket_inodes(jvm) if inode in listening)
    # the driver's RPC port, the block manager's and py4j's gateway: all on loopback
    assert driver_port in {int(a.split(":")[1], 16) for a in jvm_listens}, jvm_listens
    assert len(jvm_listens) >= 3, jvm_listens
    assert all(_is_loopback(a) for a in jvm_listens), f"the JVM listens on {jvm_listens}"


@pytest.mark.unit
def test_spark_conf_in_the_settings_takes_spark_keys_only() -> None:
    from pydantic import ValidationError

    from analytics.config import AnalyticsSettings

    assert AnalyticsSettings(spark_conf={"spark.driver.host": "10.0.0.5"}).spark_conf == {
        "spark.driver.host": "10.0.0.5"
    }
    with pytest.raises(ValidationError, match=r"start with 'spark\.'"):
        AnalyticsSettings(spark_conf={"driver.host": "10.0.0.5"})
