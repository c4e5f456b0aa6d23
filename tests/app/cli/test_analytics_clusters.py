"""``kafka-health analytics`` takes the deployment's clusters (``--cluster``, ``[clusters.NAME]``) for the
job's cluster filter, from the same config as ``collect``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.cli.analytics import settings_from_args
from app.cli.main import build_parser
from app.settings import CONFIG_ENV

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("KAFKA_HEALTH_")]:
        monkeypatch.delenv(name)


def test_the_cluster_names_come_from_the_flags_and_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = f"spool:{tmp_path}"
    monkeypatch.setenv("KAFKA_HEALTH_ANALYTICS__STORE_URL", f"sqlite:///{tmp_path / 'store.db'}")
    parse = build_parser().parse_args
    _, names = settings_from_args(parse(["analytics", "--source", spool]))
    assert names == ()  # one cluster: every cluster the samples name is evaluated
    config = tmp_path / "kafka-health.toml"
    config.write_text('[clusters.prod.zookeeper]\nconnect = "zk1:2181"\n')
    monkeypatch.setenv(CONFIG_ENV, str(config))
    _, names = settings_from_args(parse(["analytics", "--source", spool]))
    assert names == ("prod",)
    settings, names = settings_from_args(
        parse(["analytics", "--source", spool, "--cluster", "stage=zk2:2181", "--window", "5s"])
    )
    assert names == ("prod", "stage")
    assert settings.window_s == 5.0
