"""The retention settings: periods with units, 'forever', the checks at start-up, and the names they are
read by (``KAFKA_HEALTH_SERVICE__RETENTION__*``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.retention.config import DAY, RetentionSettings, parse_period
from app.service.config import ServiceSettings
from app.settings import Settings
from app.webhooks.notifier import NotifierSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7d", 7 * DAY),
        ("36h", 36 * 3600.0),
        ("90m", 5400.0),
        ("2w", 14 * DAY),
        ("3600", 3600.0),
        (7200, 7200.0),
        ("1.5d", 1.5 * DAY),
        (" 12H ", 12 * 3600.0),
        ("forever", 0.0),
        ("0", 0.0),
        (0, 0.0),
    ],
)
def test_periods_take_units_and_forever(value: object, seconds: float) -> None:
    assert parse_period(value) == seconds


@pytest.mark.parametrize("value", ["-1d", "7 days", "d", "", "nan", True, "30m", 59.0, "1e9x", None])
def test_bad_periods_are_refused_saying_what_is_accepted(value: object) -> None:
    with pytest.raises(ValueError, match="retention period"):
        parse_period(value)


def test_the_defaults_a_user_expects() -> None:
    periods = RetentionSettings().periods()
    assert periods["load_windows"] == 7 * DAY
    assert periods["load_rollups"] == 180 * DAY
    assert periods["processed_batches"] == 3 * DAY
    assert periods["alert_events"] == periods["alerts"] == 180 * DAY
    assert periods["actions"] == periods["audit_log"] == 365 * DAY
    assert set(periods) == {
        "load_windows",
        "load_rollups",
        "cluster_windows",
        "processed_batches",
        "alert_events",
        "alerts",
        "actions",
        "audit_log",
        "webhook_deliveries",
    }


def test_rollups_and_health_windows_outlive_the_raw_windows() -> None:
    with pytest.raises(ValidationError, match="load_rollups must be at least load_windows"):
        RetentionSettings.model_validate({"load_windows": "30d", "load_rollups": "7d"})
    with pytest.raises(ValidationError, match="load_rollups must be at least load_windows"):
        RetentionSettings.model_validate({"load_windows": "forever", "load_rollups": "180d"})
    with pytest.raises(ValidationError, match="cluster_windows must be at least load_windows"):
        RetentionSettings.model_validate({"load_windows": "10d", "cluster_windows": "2d"})
    assert (
        RetentionSettings.model_validate(
            {"load_windows": "forever", "load_rollups": "forever", "cluster_windows": 0}
        ).load_windows
        == 0
    )


def test_the_outbox_must_outlive_the_notifier_horizon() -> None:
    with pytest.raises(ValidationError, match=r"must exceed webhooks\.horizon_s"):
        ServiceSettings(retention=RetentionSettings.model_validate({"webhook_deliveries": "7d"}))
    ServiceSettings(
        retention=RetentionSettings.model_validate({"webhook_deliveries": "7d"}),
        webhooks=NotifierSettings(horizon_s=DAY),
    )
    ServiceSettings(retention=RetentionSettings.model_validate({"webhook_deliveries": "forever"}))


def test_read_from_the_environment_under_service_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__RETENTION__LOAD_WINDOWS", "2d")
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__RETENTION__AUDIT_LOG", "forever")
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__RETENTION__BATCH_ROWS", "1000")
    retention = Settings().service.retention
    assert (retention.load_windows, retention.audit_log, retention.batch_rows) == (2 * DAY, 0.0, 1000)
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__RETENTION__ALERTS", "a while")
    with pytest.raises(ValidationError, match=r"service\.retention\.alerts"):
        Settings()
