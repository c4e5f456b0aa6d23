"""The Prometheus test plugin's own logic: a missing binary fails the test with how to install it (it is
skipped only under KAFKA_HEALTH_SKIP_PROMETHEUS=1), Grafana's variables are substituted, and the config it
writes is Prometheus' YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.prometheus import SKIP_ENV, find_binary, substitute, write_config

pytestmark = pytest.mark.unit


def test_a_missing_binary_fails_and_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SKIP_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception) as failed:
        find_binary("prometheus-that-is-not-installed")
    message = str(failed.value)
    assert "is not on PATH" in message
    assert "make prometheus" in message
    assert "apt-get install" in message
    assert f"{SKIP_ENV}=1" in message


def test_the_skip_variable_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SKIP_ENV, "1")
    with pytest.raises(pytest.skip.Exception):
        find_binary("prometheus")


def test_grafana_variables_are_substituted_in_every_syntax() -> None:
    expr = (
        'rate(x{cluster="$cluster", c="${cluster}", d="${cluster:raw}", e="[[cluster]]"}[$__rate_interval])'
    )
    assert substitute(expr, {"cluster": "prod"}) == (
        'rate(x{cluster="prod", c="prod", d="prod", e="prod"}[15s])'
    )
    assert substitute("increase(x[$__range])", {}) == "increase(x[5m])"
    with pytest.raises(KeyError, match=r"\$broker"):
        substitute('x{broker="$broker"}', {"cluster": "prod"})


def test_the_config_scrapes_the_targets_and_loads_the_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    write_config(tmp_path / "prometheus.yml", ["127.0.0.1:8080"], [rules], "1s", "kafka-health")
    config = json.loads((tmp_path / "prometheus.yml").read_text())
    assert config["rule_files"] == [str(rules)]
    (job,) = config["scrape_configs"]
    assert job["static_configs"] == [{"targets": ["127.0.0.1:8080"]}]
    assert job["scrape_interval"] == "1s"
