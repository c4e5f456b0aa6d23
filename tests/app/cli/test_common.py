"""What the subcommands share: the exit-code table, stop signals, the settings-error report, logging and the
argparse value types."""

from __future__ import annotations

import argparse
import io
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel, Field, ValidationError

from app.cli import analytics, collect, demo, describe, reference_cluster, rolling_restart, serve, zookeeper
from app.cli.common import (
    STOP_SIGNALS,
    ExitCode,
    configure_logging,
    duration,
    log_level,
    metrics_overrides,
    on_stop_signals,
    settings_or_error,
    settings_tree_with_flags,
    stop_signals,
    tcp_port,
)
from app.cli.main import build_parser
from app.settings import Settings

pytestmark = pytest.mark.unit

SUBCOMMAND_MODULES = [
    zookeeper,
    reference_cluster,
    describe,
    rolling_restart,
    collect,
    analytics,
    serve,
    demo,
]


# --- exit codes ----------------------------------------------------------------------------------------


def test_the_exit_code_table() -> None:
    assert {code.name: code.value for code in ExitCode} == {
        "OK": 0,
        "FAILED": 1,
        "BAD_INPUT": 2,
        "UNHEALTHY": 3,
    }


def test_argparse_rejects_flags_with_the_bad_input_code() -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["describe"])  # --zookeeper is required
    assert exited.value.code == ExitCode.BAD_INPUT


@pytest.mark.parametrize("module", SUBCOMMAND_MODULES, ids=lambda m: m.__name__)
def test_every_subcommand_documents_its_exit_codes(module: ModuleType) -> None:
    assert "Exit codes: 0 " in (module.__doc__ or "")


# --- stop signals --------------------------------------------------------------------------------------


@pytest.fixture
def handlers_before() -> Iterator[dict[int, object]]:
    before: dict[int, object] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield before
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before, "handlers not restored"


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_sets_the_event_and_nothing_else(
    signum: signal.Signals, handlers_before: dict[int, object]
) -> None:
    with stop_signals() as stop:
        assert not stop.is_set()
        signal.raise_signal(signum)  # neither KeyboardInterrupt nor death: the handler runs here, now
        assert stop.wait(5)
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == handlers_before


def test_the_previous_handlers_come_back_after_an_exception(handlers_before: dict[int, object]) -> None:
    def interrupted() -> None:
        with stop_signals():
            assert signal.getsignal(signal.SIGTERM) != handlers_before[signal.SIGTERM]
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        interrupted()


def test_on_stop_signals_calls_back_once_per_signal(handlers_before: dict[int, object]) -> None:
    calls: list[str] = []
    with on_stop_signals(lambda: calls.append("stop")):
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
    assert calls == ["stop", "stop"]


def test_off_the_main_thread_nothing_is_installed(handlers_before: dict[int, object]) -> None:
    seen: list[object] = []

    def in_a_thread() -> None:
        with stop_signals() as stop:
            seen.append(stop.is_set())
            seen.append({sig: signal.getsignal(sig) for sig in STOP_SIGNALS})

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join(10)
    assert seen == [False, handlers_before]


# --- settings errors -----------------------------------------------------------------------------------


class _Section(BaseModel):
    interval_s: float = Field(gt=0)


class _Tree(BaseModel):
    sampler: _Section


def test_a_validation_error_is_one_line_naming_the_field() -> None:
    err = io.StringIO()
    assert settings_or_error(lambda: _Tree.model_validate({"sampler": {"interval_s": 0}}), err) is None
    assert err.getvalue() == "error: sampler.interval_s: Input should be greater than 0\n"


def test_a_value_error_is_its_message() -> None:
    def build() -> _Tree:
        raise ValueError("no ZooKeeper: give --zookeeper")

    err = io.StringIO()
    assert settings_or_error(build, err) is None
    assert err.getvalue() == "error: no ZooKeeper: give --zookeeper\n"


def test_good_settings_are_returned_and_nothing_is_written() -> None:
    err = io.StringIO()
    tree = settings_or_error(lambda: _Tree.model_validate({"sampler": {"interval_s": 2}}), err)
    assert tree == _Tree(sampler=_Section(interval_s=2))
    assert err.getvalue() == ""


# --- logging -------------------------------------------------------------------------------------------


def test_kazoo_logs_only_its_errors_and_kafka_python_nothing_unless_debugging() -> None:
    kazoo, kafka = logging.getLogger("kazoo"), logging.getLogger("kafka")
    levels = kazoo.level, kafka.level
    try:
        configure_logging()
        assert (kazoo.level, kafka.level) == (logging.ERROR, logging.CRITICAL)
        configure_logging(logging.DEBUG)
        assert (kazoo.level, kafka.level) == (logging.DEBUG, logging.DEBUG)
    finally:
        kazoo.setLevel(levels[0])
        kafka.setLevel(levels[1])


@pytest.mark.parametrize(
    ("text", "level"),
    [(None, logging.WARNING), ("", logging.WARNING), ("debug", logging.DEBUG), ("ERROR", 40)],
)
def test_log_level_names(text: str | None, level: int) -> None:
    assert log_level(text) == level


def test_a_log_level_that_is_no_level_is_bad_input() -> None:
    with pytest.raises(ValueError, match="KAFKA_HEALTH_LOG_LEVEL='verbose': expected one of DEBUG, INFO"):
        log_level("verbose")


# --- argparse value types ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "port"), [("1", 1), ("9092", 9092), ("65535", 65535)])
def test_tcp_port(text: str, port: int) -> None:
    assert tcp_port(text) == port


@pytest.mark.parametrize("text", ["0", "65536", "-1", "x", "80.5", ""])
def test_not_a_tcp_port(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"is not a TCP port \(1-65535\)"):
        tcp_port(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("2s", 2.0), ("1.5m", 90.0), ("1h", 3600.0), ("3", 3.0), (" 10 s ", 10.0), (".5s", 0.5)],
)
def test_duration(text: str, seconds: float) -> None:
    assert duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "2d", "-1s", "1.2.3s", "two"])
def test_not_a_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"is not a duration \(e\.g\. 500ms, 2s, 1m\)"):
        duration(text)


def test_the_metrics_flags_make_the_metrics_section() -> None:
    env = {
        "url_template": "http://{host}:7071/m",
        "urls": {1: "http://x/m"},
        "listener": "INTERNAL",
        "dialect": "strimzi",
    }
    assert metrics_overrides(env, None, None) == {}
    # a template replaces the settings' template, drops the URL map (it would win) and keeps the rest
    assert metrics_overrides(env, "http://{host}:9/m", None) == {
        "metrics": {"url_template": "http://{host}:9/m", "listener": "INTERNAL", "dialect": "strimzi"}
    }
    assert metrics_overrides(env, None, "SSL") == {"metrics": {**env, "listener": "SSL"}}
    assert metrics_overrides(None, "http://{host}:9/m", "SSL") == {
        "metrics": {"url_template": "http://{host}:9/m", "listener": "SSL"}
    }


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_the_watched_cluster_and_metrics_flags_go_into_the_tree_once(
    tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    """``serve``, ``collect``, ``analytics`` and ``safe-to-stop`` start from the same merge; each command's
    flags are those it has (``analytics`` has only ``--cluster``)."""
    clean_environment.setenv("KAFKA_HEALTH_ZOOKEEPER__CONNECT", "zk-env:2181")
    clean_environment.setenv("KAFKA_HEALTH_ZOOKEEPER__SESSION_TIMEOUT_S", "7")
    clean_environment.setenv("KAFKA_HEALTH_METRICS__URLS", '{"1": "http://b1/m"}')
    flags = ["--zookeeper", "zk1:2181", "--zk-config", str(tmp_path / "zk.properties")]
    flags += ["--metrics-url-template", "http://{host}:9/m", "--metrics-listener", "SSL"]
    serve_args = build_parser("serve").parse_args(["serve", *flags])

    tree = settings_tree_with_flags(serve_args)

    assert tree["zookeeper"]["connect"] == "zk1:2181"
    assert tree["zookeeper"]["client_config"] == tmp_path / "zk.properties"
    assert tree["zookeeper"]["session_timeout_s"] == 7.0
    assert {k: tree["metrics"][k] for k in ("url_template", "listener")} == {
        "url_template": "http://{host}:9/m",
        "listener": "SSL",
    }
    assert "urls" not in tree["metrics"], "the flag's template would lose to the URL map"

    analytics_args = build_parser("analytics").parse_args(["analytics", "--cluster", "prod=zk2:2181"])
    tree = settings_tree_with_flags(analytics_args)
    assert "connect" not in tree["zookeeper"], "--cluster replaces the single cluster of the environment"
    assert tree["clusters"] == {"prod": {"zookeeper": {"connect": "zk2:2181"}}}
    assert tree["metrics"]["urls"] == {1: "http://b1/m"}

    both = build_parser("collect").parse_args(["collect", "--zookeeper", "zk1:2181", "--cluster", "a=zk:1"])
    with pytest.raises(ValueError, match="--cluster and --zookeeper together"):
        settings_tree_with_flags(both)


def test_a_metrics_section_without_an_endpoint_in_the_environment_takes_the_flags_template(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    """``KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS`` (or ``__LISTENER``) alone is no valid metrics section;
    with ``--metrics-url-template`` it is, and it is kept."""
    clean_environment.setenv("KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS", "/data-0,/data-1")
    clean_environment.setenv("KAFKA_HEALTH_METRICS__LISTENER", "internal")
    flags = ["--zookeeper", "zk1:2181", "--metrics-url-template", "http://{host}:9/m"]

    tree = settings_tree_with_flags(build_parser("serve").parse_args(["serve", *flags]))

    metrics = Settings.model_validate(tree).metrics
    assert metrics is not None
    assert metrics.url_template == "http://{host}:9/m"
    assert metrics.log_dir_mountpoints == ("/data-0", "/data-1")
    assert metrics.listener == "INTERNAL"
    with pytest.raises(ValidationError, match="needs url_template"):  # without the flag: still an error
        settings_tree_with_flags(build_parser("serve").parse_args(["serve", "--zookeeper", "zk1:2181"]))
