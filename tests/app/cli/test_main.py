"""``kafka-health``'s parser and dispatch: one subcommand per module, the three ways to start it (the console
script's ``app.cli.main:main``, ``python -m app.cli`` and ``spark-submit app/cli/main.py``)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from app.cli import (
    analytics,
    collect,
    demo,
    describe,
    reference_cluster,
    rolling_restart,
    safe_to_stop,
    serve,
    silence,
    zookeeper,
)
from app.cli.main import SUBCOMMANDS, Subcommand, build_parser, load, main
from tests.support.cli import REPO

NAMES = [
    "zookeeper",
    "reference-cluster",
    "describe",
    "safe-to-stop",
    "rolling-restart",
    "collect",
    "analytics",
    "serve",
    "silence",
    "demo",
]


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.unit
def test_one_subcommand_per_module_in_the_order_help_lists_them() -> None:
    modules: list[Subcommand] = [
        zookeeper, reference_cluster, describe, safe_to_stop, rolling_restart, collect, analytics, serve,
        silence, demo
    ]  # fmt: skip
    assert list(SUBCOMMANDS) == NAMES
    assert [load(name) for name in NAMES] == modules
    listed = re.findall(r"^    (\S+)", build_parser().format_help(), flags=re.MULTILINE)
    assert listed == NAMES


@pytest.mark.unit
def test_bad_flags_exit_2_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["zookeeper", "--port", "0"])
    assert exited.value.code == 2
    assert "argument --port: '0' is not a TCP port (1-65535)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["no-such-command"])
    assert exited.value.code == 2


@pytest.mark.integration
def test_a_subcommand_loads_only_its_own_module() -> None:
    """``kafka-health describe`` reads a cluster without importing the service, Spark's helpers or the
    simulator."""
    probe = (
        "import sys; from app.cli.main import build_parser; "
        "build_parser('describe').parse_args(['describe', '--zookeeper', 'zk:2181']); "
        "print(sorted(m for m in sys.modules if m.startswith('app.cli.') or m in ('fastapi', 'pyspark')))"
    )
    result = run_python("-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['app.cli.common', 'app.cli.describe', 'app.cli.main']"


@pytest.mark.integration
@pytest.mark.parametrize("module", ["app.cli", "app.cli.main"])
def test_python_dash_m_runs_the_command_line(module: str) -> None:
    result = run_python("-m", module, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: kafka-health [-h] COMMAND ...")
    assert result.stderr == ""


@pytest.mark.integration
def test_main_py_runs_as_a_script_as_spark_submit_runs_it() -> None:
    """``spark-submit ... app/cli/main.py analytics`` (docs/analytics.md): the script's own folder first on
    sys.path must not let ``app/cli/analytics.py`` stand in for the ``analytics`` package."""
    result = run_python(str(REPO / "app" / "cli" / "main.py"), "analytics", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: kafka-health analytics")
