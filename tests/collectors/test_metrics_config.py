"""The metrics settings' log-dir mount points and disk fit window: the environment's forms and bad input."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings
from collectors.metrics import MetricsSettings

pytestmark = pytest.mark.unit

TEMPLATE = "http://{host}:7071/metrics"


@pytest.mark.parametrize(
    "value",
    ["/var/lib/kafka/data-0,/var/lib/kafka/data-1", ' /var/lib/kafka/data-0 , /var/lib/kafka/data-1 ',
     '["/var/lib/kafka/data-0", "/var/lib/kafka/data-1"]'],
)  # fmt: skip
def test_the_mount_points_are_read_from_a_comma_separated_or_json_environment_variable(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_METRICS__URL_TEMPLATE", TEMPLATE)
    monkeypatch.setenv("KAFKA_HEALTH_METRICS__LOG_DIR_MOUNTPOINTS", value)
    monkeypatch.setenv("KAFKA_HEALTH_METRICS__DISK_FIT_WINDOW_S", "900")
    metrics = Settings().metrics
    assert metrics is not None
    assert metrics.log_dir_mountpoints == ("/var/lib/kafka/data-0", "/var/lib/kafka/data-1")
    assert metrics.disk_fit_window_s == 900.0


def test_the_defaults_are_no_mount_points_and_half_an_hour() -> None:
    settings = MetricsSettings(url_template=TEMPLATE)
    assert settings.log_dir_mountpoints == ()
    assert settings.disk_fit_window_s == 1800.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"log_dir_mountpoints": "data-0"}, "not an absolute mount point"),
        ({"log_dir_mountpoints": "/a,/a"}, "given twice"),
        ({"log_dir_mountpoints": '["/a", '}, "not a JSON list"),
        ({"disk_fit_window_s": 10}, "disk_fit_window_s"),
    ],
)
def test_bad_mount_points_and_windows_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        MetricsSettings.model_validate({"url_template": TEMPLATE, **options})
