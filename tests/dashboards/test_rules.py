"""The Prometheus rules file under promtool (Debian's prometheus package): it checks, and its unit tests
(tests/dashboards/promtool/) show every alert firing on a series that should fire it and staying quiet on
one that should not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.prometheus import DASHBOARDS_DIR, RULES_FILE

pytestmark = pytest.mark.integration  # runs promtool

UNIT_TESTS = Path(__file__).parent / "promtool" / "kafka-health-rules.test.yml"


def promtool_run(promtool: str, *args: str | Path) -> str:
    result = subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(map(str, args))} failed:\n{output}"
    return output


def test_promtool_check_rules(promtool: str) -> None:
    output = promtool_run(promtool, "check", "rules", RULES_FILE)
    assert "SUCCESS: 24 rules found" in output


def test_promtool_unit_tests_fire_and_stay_quiet(promtool: str) -> None:
    output = promtool_run(promtool, "test", "rules", UNIT_TESTS)
    assert "SUCCESS" in output


def test_the_example_scrape_config_loads_the_rules(promtool: str) -> None:
    output = promtool_run(
        promtool, "check", "config", DASHBOARDS_DIR / "prometheus" / "scrape-config.example.yml"
    )
    assert "1 rule files found" in output
