"""Every command's bad input exits 2 with one line on stderr and nothing on stdout (no banner); a dependency
that does not answer (ZooKeeper, Kafka, PostgreSQL, a port in use) exits 1 with one line. No traceback,
no usage block, no Spark plan.

The table runs ``main([...])`` in this process (argparse's errors are a ``SystemExit``), with the
``KAFKA_HEALTH_*`` variables of each row only. Placeholders in a row: ``{closed}`` a TCP port nobody
listens on, ``{busy}`` one somebody does, ``{tmp}`` the test's directory, ``{zk}`` the shared ZooKeeper
(started only for the rows that name it).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from app.cli.common import ExitCode, first_line, unreachable
from app.cli.main import main
from app.cli.serve import StartupErrors
from app.embedded.zookeeper import pick_free_port

pytestmark = pytest.mark.integration

BAD, FAILED = ExitCode.BAD_INPUT, ExitCode.FAILED
ZK_DOWN = "127.0.0.1:{closed}"
PG_DOWN = "postgresql+psycopg://kh@127.0.0.1:{closed}/kh"
STORE = "sqlite:///{tmp}/store.db"


class Case(NamedTuple):
    argv: list[str]
    code: int
    message: str
    env: dict[str, str] | None = None


CASES: dict[str, Case] = {
    # --- the command line itself
    "no command": Case([], BAD, "the following arguments are required: COMMAND"),
    "unknown command": Case(["describ"], BAD, "invalid choice: 'describ'"),
    "log level": Case(
        ["describe", "--zookeeper", "zk:2181"],
        BAD,
        "KAFKA_HEALTH_LOG_LEVEL",
        {"KAFKA_HEALTH_LOG_LEVEL": "loud"},
    ),
    # --- describe
    "describe: no --zookeeper": Case(["describe"], BAD, "--zookeeper"),
    "describe: empty connect string": Case(["describe", "--zookeeper", ""], BAD, "names no server"),
    "describe: port not a number": Case(["describe", "--zookeeper", "zk:notaport"], BAD, "is not host:port"),
    "describe: timeout -1": Case(["describe", "--zookeeper", "zk:2181", "--timeout", "-1"], BAD, "--timeout"),
    "describe: timeout 0": Case(["describe", "--zookeeper", "zk:2181", "--timeout", "0"], BAD, "above 0"),
    "describe: timeout nan": Case(
        ["describe", "--zookeeper", "zk:2181", "--timeout", "nan"], BAD, "not a duration"
    ),
    "describe: format xml": Case(
        ["describe", "--zookeeper", "zk:2181", "--format", "xml"], BAD, "invalid choice: 'xml'"
    ),
    "describe: default min ISR 0": Case(
        ["describe", "--zookeeper", "zk:2181", "--default-min-isr", "0"], BAD, "not a min.insync.replicas"
    ),
    "describe: default unclean election maybe": Case(
        ["describe", "--zookeeper", "zk:2181", "--default-unclean-leader-election", "maybe"],
        BAD,
        "'maybe' is not true or false",
    ),
    "describe: metrics template placeholder": Case(
        ["describe", "--zookeeper", ZK_DOWN, "--metrics-url-template", "http://{nope}/m"],
        BAD,
        "unknown placeholder {nope}",
    ),
    "describe: metrics template not http": Case(
        ["describe", "--zookeeper", ZK_DOWN, "--metrics-url-template", "ftp://{host}/m"],
        BAD,
        "ftp://{host}/m",
    ),
    "describe: ZooKeeper down": Case(
        ["describe", "--zookeeper", ZK_DOWN, "--timeout", "5s"],
        FAILED,
        "cannot read the cluster at 127.0.0.1:",
    ),
    "describe: --zk-config missing": Case(
        ["describe", "--zookeeper", "zk:2181", "--zk-config", "/nope/zk.properties"], BAD, "no such file"
    ),
    # --- safe-to-stop
    "safe-to-stop: broker -1": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "-1"], BAD, "--broker"
    ),
    "safe-to-stop: broker x": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "x"], BAD, "is not a broker id"
    ),
    "safe-to-stop: wait -5": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "1", "--wait", "-5"], BAD, "--wait"
    ),
    "safe-to-stop: wait nan": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "1", "--wait", "nan"], BAD, "not a duration"
    ),
    "safe-to-stop: min ISR 0": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "1", "--default-min-insync-replicas", "0"],
        BAD,
        "integer >= 1",
    ),
    "safe-to-stop: no ZooKeeper": Case(["safe-to-stop", "--broker", "1"], BAD, "no ZooKeeper"),
    "safe-to-stop: env connections 0": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "1"],
        BAD,
        "zookeeper.connections",
        {"KAFKA_HEALTH_ZOOKEEPER__CONNECTIONS": "0"},
    ),
    "safe-to-stop: env session timeout abc": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "1"],
        BAD,
        "zookeeper.session_timeout_s",
        {"KAFKA_HEALTH_ZOOKEEPER__SESSION_TIMEOUT_S": "abc"},
    ),
    "safe-to-stop: env misspelt key": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "1"],
        BAD,
        "zookeeper.conect: Extra inputs",
        {"KAFKA_HEALTH_ZOOKEEPER__CONECT": "zk:2181"},
    ),
    "safe-to-stop: config file missing": Case(
        ["safe-to-stop", "--zookeeper", "zk:2181", "--broker", "1"],
        BAD,
        "KAFKA_HEALTH_CONFIG={tmp}/nope.toml: no such file",
        {"KAFKA_HEALTH_CONFIG": "{tmp}/nope.toml"},
    ),
    "safe-to-stop: ZooKeeper down": Case(
        ["safe-to-stop", "--zookeeper", ZK_DOWN, "--broker", "1", "--timeout", "5s"],
        FAILED,
        "cannot read the cluster",
    ),
    # --- collect
    "collect: interval -1": Case(
        ["collect", "--zookeeper", "zk:2181", "--interval", "-1"], BAD, "--interval"
    ),
    "collect: interval 0": Case(["collect", "--zookeeper", "zk:2181", "--interval", "0"], BAD, "above 0"),
    "collect: interval nan": Case(
        ["collect", "--zookeeper", "zk:2181", "--interval", "nan"], BAD, "not a duration"
    ),
    "collect: interval over an hour": Case(
        ["collect", "--zookeeper", "zk:2181", "--interval", "2h", "--create-spool"], BAD, "sampler.interval_s"
    ),
    "collect: sink scheme": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "ftp:/x"],
        BAD,
        "expected spool:DIR or kafka:BOOTSTRAP/TOPIC",
    ),
    "collect: sink kafka without topic": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "kafka:h:1"], BAD, "kafka:HOST:PORT"
    ),
    "collect: sink kafka bad port": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "kafka:h:99999/t"], BAD, "is not HOST:PORT"
    ),
    "collect: spool missing": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "spool:{tmp}/missing"],
        BAD,
        "spool directory {tmp}/missing does not exist",
    ),
    "collect: spool is a file": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "spool:{tmp}/file"], BAD, "is not a directory"
    ),
    "collect: no ZooKeeper": Case(["collect", "--sink", "spool:{tmp}"], BAD, "no ZooKeeper"),
    "collect: metrics template": Case(
        [
            "collect",
            "--zookeeper",
            "zk:2181",
            "--sink",
            "spool:{tmp}",
            "--metrics-url-template",
            "http://{nope}/m",
        ],
        BAD,
        "metrics.url_template: unknown placeholder",
    ),
    "collect: metrics listener not a listener name": Case(
        [
            "collect",
            "--zookeeper",
            "zk:2181",
            "--sink",
            "spool:{tmp}",
            "--metrics-url-template",
            "http://{host}:7071/m",
            "--metrics-listener",
            "SSL://x:1",
        ],
        BAD,
        "metrics.listener: listener name 'SSL://x:1' is not a Kafka listener name",
    ),
    "describe: metrics listener not a listener name": Case(
        ["describe", "--zookeeper", "zk:2181", "--metrics-listener", "a b"], BAD, "not a Kafka listener name"
    ),
    "collect: env retention -1": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "spool:{tmp}"],
        BAD,
        "sampler.spool_retention_s",
        {"KAFKA_HEALTH_SAMPLER__SPOOL_RETENTION_S": "-1"},
    ),
    "collect: env metrics not JSON": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "spool:{tmp}"],
        BAD,
        "metrics: Input should be a valid dictionary",
        {"KAFKA_HEALTH_METRICS": "{bad"},
    ),
    "collect: env metrics dialect": Case(
        ["collect", "--zookeeper", "zk:2181", "--sink", "spool:{tmp}"],
        BAD,
        "metrics.dialect: Input should be 'auto', 'reference', 'jmx-exporter-example'",
        {
            "KAFKA_HEALTH_METRICS__URL_TEMPLATE": "http://{host}:7071/metrics",
            "KAFKA_HEALTH_METRICS__DIALECT": "jmx",
        },
    ),
    "collect: env create_spool not a bool": Case(
        ["collect", "--zookeeper", "zk:2181"],
        BAD,
        "sampler.create_spool",
        {"KAFKA_HEALTH_SAMPLER__CREATE_SPOOL": "maybe"},
    ),
    "collect: ZooKeeper down": Case(
        ["collect", "--zookeeper", ZK_DOWN, "--sink", "spool:{tmp}", "--once"],
        FAILED,
        "cannot read the cluster",
        {"KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S": "5"},
    ),
    "collect: cluster name upper-case": Case(
        ["collect", "--cluster", "Prod=zk:2181", "--sink", "spool:{tmp}"], BAD, "'Prod' is not a cluster name"
    ),
    "collect: cluster without ZooKeeper": Case(
        ["collect", "--cluster", "prod", "--sink", "spool:{tmp}"], BAD, "expected NAME=HOST:PORT"
    ),
    "collect: cluster connect string": Case(
        ["collect", "--cluster", "prod=zk:notaport", "--sink", "spool:{tmp}"], BAD, "cluster prod: "
    ),
    "collect: cluster given twice": Case(
        ["collect", "--cluster", "a=zk:1", "--cluster", "a=zk:2", "--sink", "spool:{tmp}"], BAD, "given twice"
    ),
    "collect: cluster and zookeeper": Case(
        ["collect", "--cluster", "a=zk:2181", "--zookeeper", "zk:2181", "--sink", "spool:{tmp}"],
        BAD,
        "--cluster and --zookeeper together",
    ),
    "collect: env cluster name": Case(
        ["collect", "--sink", "spool:{tmp}"],
        BAD,
        "not a cluster name",
        {"KAFKA_HEALTH_CLUSTERS__PROD_EU_": '{"zookeeper": {"connect": "zk:2181"}}'},
    ),
    "collect: every cluster's ZooKeeper down": Case(
        [
            "collect",
            "--cluster",
            f"a={ZK_DOWN}",
            "--cluster",
            f"b={ZK_DOWN}",
            "--sink",
            "spool:{tmp}",
            "--once",
        ],
        FAILED,
        "none of the 2 clusters can be read",
        {"KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S": "5"},
    ),
    "collect: Kafka sink down": Case(
        ["collect", "--zookeeper", ZK_DOWN, "--sink", "kafka:127.0.0.1:{closed}/samples", "--once"],
        FAILED,
        "no Kafka broker reachable",
    ),
    # --- analytics
    "analytics: spool missing": Case(
        ["analytics", "--source", "spool:{tmp}/missing", "--store-url", STORE],
        BAD,
        "spool directory {tmp}/missing does not exist (give --create-spool",
    ),
    "analytics: source scheme": Case(
        ["analytics", "--source", "bogus"], BAD, "analytics.source: 'bogus': expected spool:DIR"
    ),
    "analytics: cluster name": Case(
        ["analytics", "--source", "spool:{tmp}", "--cluster", "a b=zk:2181"], BAD, "not a cluster name"
    ),
    "analytics: cluster given twice": Case(
        ["analytics", "--source", "spool:{tmp}", "--cluster", "a=zk:1", "--cluster", "a=zk:2"],
        BAD,
        "given twice",
    ),
    "analytics: trigger 0": Case(["analytics", "--trigger", "0"], BAD, "--trigger"),
    "analytics: window nan": Case(["analytics", "--window", "nan"], BAD, "--window"),
    "analytics: watermark -1": Case(["analytics", "--watermark", "-1"], BAD, "--watermark"),
    "analytics: rated deviation -1": Case(
        ["analytics", "--rated-deviation", "-1"], BAD, "analytics.rules.rated_deviation"
    ),
    "analytics: rated deviation nan": Case(["analytics", "--rated-deviation", "nan"], BAD, "finite"),
    "analytics: store mysql": Case(
        ["analytics", "--source", "spool:{tmp}", "--store-url", "mysql://kh@db/kh"],
        BAD,
        "unsupported store URL scheme 'mysql'",
    ),
    "analytics: store garbage": Case(
        ["analytics", "--source", "spool:{tmp}", "--store-url", "garbage"], BAD, "invalid store URL 'garbage'"
    ),
    "analytics: store in memory": Case(
        ["analytics", "--source", "spool:{tmp}", "--store-url", "sqlite://"], BAD, "not an in-memory database"
    ),
    "analytics: store password not shown": Case(
        ["analytics", "--source", "spool:{tmp}", "--store-url", "mysql://kh:s3cret@db/kh"],
        BAD,
        "mysql://kh:***@db/kh",
    ),
    "analytics: env weights": Case(
        ["analytics", "--source", "spool:{tmp}"],
        BAD,
        "analytics.weights.x",
        {"KAFKA_HEALTH_ANALYTICS__WEIGHTS": '{"x": -1}'},
    ),
    "analytics: env spark conf": Case(
        ["analytics", "--source", "spool:{tmp}"],
        BAD,
        "start with 'spark.'",
        {"KAFKA_HEALTH_ANALYTICS__SPARK_CONF": '{"driver.host": "x"}'},
    ),
    "analytics: PostgreSQL down": Case(
        ["analytics", "--source", "spool:{tmp}", "--store-url", PG_DOWN],
        FAILED,
        "cannot open the store at postgresql+psycopg://kh@127.0.0.1:",
    ),
    "analytics: Kafka source down": Case(
        ["analytics", "--source", "kafka:127.0.0.1:{closed}/samples", "--store-url", STORE],
        FAILED,
        "no Kafka broker reachable at 127.0.0.1:",
    ),
    # --- serve
    "serve: --zk-tls-config-file missing": Case(
        ["serve", "--zookeeper", "zk:2181", "--zk-tls-config-file", "/nope/zk.properties"],
        BAD,
        "error: zookeeper: ZooKeeper client config /nope/zk.properties: no such file",
    ),
    "serve: --command-config GSSAPI": Case(
        ["serve", "--zookeeper", ZK_DOWN, "--command-config", "{tmp}/gssapi.properties"],
        BAD,
        "sasl.mechanism: GSSAPI is not supported",
    ),
    "describe --consumer-groups: --command-config GSSAPI, before reading the cluster": Case(
        [
            "describe",
            "--zookeeper",
            ZK_DOWN,
            "--consumer-groups",
            "--command-config",
            "{tmp}/gssapi.properties",
        ],
        BAD,
        "sasl.mechanism: GSSAPI is not supported",
    ),
    "serve: port 0": Case(["serve", "--zookeeper", "zk:2181", "--port", "0"], BAD, "not a TCP port"),
    "serve: port 70000": Case(["serve", "--zookeeper", "zk:2181", "--port", "70000"], BAD, "not a TCP port"),
    "serve: port x": Case(["serve", "--zookeeper", "zk:2181", "--port", "x"], BAD, "not a TCP port"),
    "serve: no ZooKeeper": Case(["serve"], BAD, "no ZooKeeper"),
    "serve: store mysql": Case(
        ["serve", "--zookeeper", ZK_DOWN, "--store-url", "mysql://kh@db/kh"],
        BAD,
        "analytics.store_url: unsupported store URL scheme 'mysql'",
    ),
    "serve: tokens": Case(
        ["serve", "--zookeeper", "zk:2181"],
        BAD,
        "expected name:role:token",
        {"KAFKA_HEALTH_SERVICE__TOKENS": "garbage"},
    ),
    "serve: TLS cert missing": Case(
        ["serve", "--zookeeper", "zk:2181", "--tls-cert", "{tmp}/no.crt", "--tls-key", "{tmp}/no.key"],
        BAD,
        "no such file",
    ),
    "serve: host unknown": Case(
        [
            "serve",
            "--zookeeper",
            ZK_DOWN,
            "--host",
            "no such host!",
            "--port",
            "{closed}",
            "--store-url",
            STORE,
        ],
        BAD,
        "listen host 'no such host!'",
    ),
    "serve: host not this machine": Case(
        [
            "serve",
            "--zookeeper",
            ZK_DOWN,
            "--host",
            "192.0.2.123",
            "--port",
            "{closed}",
            "--store-url",
            STORE,
        ],
        BAD,
        "not an address of this machine",
    ),
    "serve: port in use": Case(
        ["serve", "--zookeeper", ZK_DOWN, "--port", "{busy}", "--store-url", STORE],
        FAILED,
        "port {busy} on 127.0.0.1 is in use",
    ),
    "serve: PostgreSQL down": Case(  # the chroot holds no Kafka cluster: waited for, the store is opened
        ["serve", "--zookeeper", "{zk}", "--port", "{closed}", "--store-url", PG_DOWN, "--wait-for-cluster"],
        FAILED,
        "cannot open the store at postgresql+psycopg://kh@127.0.0.1:",
    ),
    "serve: ZooKeeper down": Case(
        ["serve", "--zookeeper", ZK_DOWN, "--port", "{closed}", "--store-url", STORE],
        FAILED,
        "cannot read the cluster at 127.0.0.1:",
        {"KAFKA_HEALTH_ZOOKEEPER__START_TIMEOUT_S": "5"},
    ),
    # --- the embedded parts
    "zookeeper: port 0": Case(["zookeeper", "--port", "0"], BAD, "not a TCP port"),
    "zookeeper: data dir is a file": Case(
        ["zookeeper", "--data-dir", "{tmp}/file"], BAD, "is not a directory"
    ),
    "reference-cluster: brokers 0": Case(
        ["reference-cluster", "--brokers", "0"], BAD, "brokers: Input should be greater than or equal to 1"
    ),
    "reference-cluster: brokers x": Case(
        ["reference-cluster", "--brokers", "x"], BAD, "invalid int value: 'x'"
    ),
    "reference-cluster: topic": Case(
        ["reference-cluster", "--topic", "orders"], BAD, "is not NAME:PARTITIONS:RF"
    ),
    "reference-cluster: protocol version": Case(
        ["reference-cluster", "--inter-broker-protocol-version", "9.9"],
        BAD,
        "ZooKeeper mode is Kafka 2.0-3.9",
    ),
    "reference-cluster: lag": Case(
        ["reference-cluster", "--replica-lag-time-max-ms", "-1"], BAD, "replica_lag_time_max_ms"
    ),
    "reference-cluster: metrics dialect": Case(
        ["reference-cluster", "--metrics-dialect", "prometheus"], BAD, "invalid choice: 'prometheus'"
    ),
    "reference-cluster: ZooKeeper connect": Case(
        ["reference-cluster", "--zookeeper", "zk"], BAD, "is not host:port"
    ),
    "reference-cluster: control port in use": Case(
        ["reference-cluster", "--control-port", "{busy}"],
        FAILED,
        "control port {busy} on 127.0.0.1 is in use",
    ),
    "demo: brokers 0": Case(["demo", "--brokers", "0"], BAD, "not a number of brokers from 3 to 50"),
    "demo: brokers 2": Case(["demo", "--brokers", "2"], BAD, "not a number of brokers from 3 to 50"),
    "demo: port in use": Case(["demo", "--port", "{busy}"], FAILED, "port {busy} on 127.0.0.1 is in use"),
}


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def fill(text: str, values: dict[str, Any]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", str(value))
    return text


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_one_line_and_the_right_code(
    case: Case,
    tmp_path: Path,
    busy_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    values: dict[str, Any] = {"closed": pick_free_port(), "busy": busy_port, "tmp": tmp_path}
    if any("{zk}" in arg for arg in case.argv):
        values["zk"] = request.getfixturevalue("zk_connect")
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "gssapi.properties").write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n")
    monkeypatch.chdir(tmp_path)  # the default spool, checkpoint and store are relative
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    for name, value in (case.env or {}).items():
        monkeypatch.setenv(name, fill(value, values))
    code: int | str | None
    try:
        code = main([fill(arg, values) for arg in case.argv])
    except SystemExit as exited:
        code = exited.code  # argparse
    out, err = capsys.readouterr()
    assert (code, out) == (case.code, ""), err
    assert err.count("\n") == 1, err
    assert err.startswith("error: "), err
    assert fill(case.message, values) in err
    assert "Traceback" not in err
    assert not (tmp_path / "missing").exists()  # a spool that was not there is not created
    assert not (tmp_path / "kafka-health-data").exists()  # nor the default store


def test_the_table_is_the_testers_size() -> None:
    assert len(CASES) >= 50
    assert {c.code for c in CASES.values()} == {BAD, FAILED}


# --- the parts ------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_first_line_keeps_what_failed_and_drops_the_plan() -> None:
    plan = (
        "[STREAM_FAILED] Query terminated with exception: no broker\n\n=== Streaming Query ===\n"
        + "x\n" * 200
    )
    assert first_line(RuntimeError(plan)) == "[STREAM_FAILED] Query terminated with exception: no broker"
    assert first_line(RuntimeError("")) == "RuntimeError"
    wrapped = (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
        'initialOffset: Traceback (most recent call last):\n  File "x.py", line 1, in f\n    f()\n'
        "KafkaSourceError: cannot connect to Kafka at h:9092\n\tat org.apache.spark.Foo(Foo.scala:1)\n"
    )
    assert first_line(RuntimeError(wrapped)) == (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
        "initialOffset: KafkaSourceError: cannot connect to Kafka at h:9092"
    )
    assert first_line(RuntimeError("y" * 900)).endswith("...")
    assert len(first_line(RuntimeError("y" * 900))) == 500


@pytest.mark.integration
def test_unreachable_wants_a_kafka_broker_not_just_an_open_port(kafka_broker: str, busy_port: int) -> None:
    """A real broker (Tansu) answers; a closed port, a port that accepts and says nothing, and an HTTP
    server are each named with why, in about the time given, not after Spark's minutes of retries."""
    closed = pick_free_port()
    assert unreachable([f"127.0.0.1:{closed}", kafka_broker], 5) is None
    with http_server() as web:
        started = time.monotonic()
        why = unreachable([f"127.0.0.1:{closed}", f"127.0.0.1:{busy_port}", web], 1.5)
        took = time.monotonic() - started
    assert why is not None
    closed_why, silent_why, web_why = why.split("; ")
    assert closed_why.startswith(f"127.0.0.1:{closed}: ")
    assert silent_why == (
        f"127.0.0.1:{busy_port}: accepts connections but did not answer Kafka's ApiVersions request in time"
    )
    assert web_why.startswith(f"{web}: accepts connections but ")
    assert took < 30  # about the 1.5 s given (on a loaded machine), not Spark's minutes of retries


@contextmanager
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Server:
    started = False


@pytest.mark.unit
def test_uvicorns_start_up_errors_are_held_back_until_it_has_started() -> None:
    server = _Server()
    held = StartupErrors(server)
    try:
        raise OSError("the lifespan failed\nwith a long traceback")
    except OSError as exc:
        failure = logging.LogRecord(
            "uvicorn.error", logging.ERROR, "", 0, "lifespan", (), (OSError, exc, None)
        )
    assert held.filter(failure) is False
    assert (
        held.filter(logging.LogRecord("uvicorn.error", logging.ERROR, "", 0, "startup failed", (), None))
        is False
    )
    assert held.reason == "the lifespan failed"
    assert held.filter(logging.LogRecord("uvicorn.error", logging.INFO, "", 0, "started", (), None)) is True
    server.started = True
    assert (
        held.filter(logging.LogRecord("uvicorn.error", logging.ERROR, "", 0, "a request", (), None)) is True
    )
