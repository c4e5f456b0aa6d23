"""The ``alertmanager-api`` format against a real Alertmanager (Debian's ``prometheus-alertmanager``,
tests.support.alertmanager): an alert posted to its ``/api/v2/alerts`` is active there with kafka-health's
labels, is kept alive by the re-sends while it stays open, and is resolved there when it resolves (it
leaves the active alerts, and Alertmanager itself notifies it ``resolved``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics.model import fingerprint
from app.storage import Storage
from app.webhooks import formats
from app.webhooks.notifier import Notifier, NotifierSettings
from tests.support.alertmanager import Alertmanager
from tests.support.health import alert_row
from tests.support.reference_cluster import wait_for
from tests.support.store import write_alert

pytestmark = pytest.mark.integration

RESEND_S = 2.0
"""The re-send interval of these tests: an open alert ends 8 s after each re-send."""
SETTINGS = NotifierSettings(
    poll_interval_s=0.05,
    timeout_s=5.0,
    backoff_base_s=0.05,
    backoff_max_s=0.5,
    election="none",
    allow_networks=("127.0.0.1/32",),  # Alertmanager is on loopback, refused by default
    external_url="http://kafka-health.test:8000",
    alertmanager_resend_interval_s=RESEND_S,
)
CLUSTER = "am-test"


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    with Storage.open(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def write_event(storage: Storage, kind: str, subject: str, sequence: int, at: float, batch: int) -> None:
    state, event = alert_row(CLUSTER, 5, subject, kind, "critical", sequence, at)  # type: ignore[arg-type]
    write_alert(storage.analytics, state, [event], batch)


def ours(alertmanager: Alertmanager, subject: str) -> list[dict[str, Any]]:
    return alertmanager.alerts(f'cluster="{CLUSTER}"', f'subject="{subject}"')


def test_an_alert_reaches_alertmanager_is_kept_alive_and_is_resolved_there(
    alertmanager: Alertmanager, storage: Storage
) -> None:
    subject = "broker:3"
    storage.webhooks.create_webhook(
        name="alertmanager",
        url=alertmanager.url,  # the base URL: /api/v2/alerts is added
        format="alertmanager-api",
        created_by="root",
        now=time.time(),
    )
    opened_at = time.time()
    write_event(storage, "opened", subject, 1, opened_at, 1)
    with Notifier(storage.webhooks, settings=SETTINGS) as notifier:
        wait_for(lambda: ours(alertmanager, subject), timeout=60, message="the alert in Alertmanager")
        (alert,) = ours(alertmanager, subject)
        assert alert["labels"] == {
            "alertname": "KafkaHealthRule5",
            "cluster": CLUSTER,
            "rule": "5",
            "subject": subject,
            "severity": "critical",
            "broker": "3",
        }
        assert alert["status"]["state"] == "active"
        assert alert["startsAt"].startswith(formats.rfc3339(opened_at)[:19])
        assert alert["annotations"]["summary"] == f"rule 5 on {subject}"
        assert alert["generatorURL"] == (
            f"http://kafka-health.test:8000/api/v1/alerts/{fingerprint(CLUSTER, 5, subject)}"
        )
        first_ends = alert["endsAt"]

        # re-sent while open: Alertmanager's endsAt moves on, the alert stays active
        wait_for(
            lambda: notifier.stats().resent >= 2 and ours(alertmanager, subject)[0]["endsAt"] > first_ends,
            timeout=60,
            message="the alert re-sent with a later endsAt",
        )
        (alert,) = ours(alertmanager, subject)
        assert alert["status"]["state"] == "active"

        def notified(status: str) -> list[dict[str, Any]]:
            """The alert in Alertmanager's own notifications with ``status``."""
            return [
                a
                for a in alertmanager.notified()
                if a["labels"].get("subject") == subject and a["status"] == status
            ]

        wait_for(lambda: notified("firing"), timeout=60, message="Alertmanager's firing notification")

        resolved_at = time.time()
        write_event(storage, "resolved", subject, 2, resolved_at, 2)
        wait_for(lambda: not ours(alertmanager, subject), timeout=60, message="the alert resolved there")
        assert [d.kind for d in storage.webhooks.deliveries(state="delivered")] == ["resolved", "opened"]
        wait_for(lambda: notified("resolved"), timeout=60, message="Alertmanager's resolved notification")
    resolved = notified("resolved")[0]
    assert resolved["labels"]["alertname"] == "KafkaHealthRule5"
    assert resolved["endsAt"].startswith(formats.rfc3339(resolved_at)[:19])  # ended when it resolved
    assert ours(alertmanager, subject) == []  # neither active nor re-sent after it resolved


def test_the_full_alerts_url_is_taken_too_and_a_stopped_notifier_lets_alertmanager_resolve_it(
    alertmanager: Alertmanager, storage: Storage
) -> None:
    """A webhook URL that ends with ``/api/v2/alerts`` is posted to as it is. An open alert that is no
    longer re-sent (the notifier stopped, and none took over) ends in Alertmanager at its ``endsAt``:
    what the re-sends are for."""
    subject = "broker:4"
    storage.webhooks.create_webhook(
        name="alertmanager",
        url=f"{alertmanager.url}/api/v2/alerts",
        format="alertmanager-api",
        created_by="root",
        now=time.time(),
    )
    write_event(storage, "opened", subject, 1, time.time(), 1)
    with Notifier(storage.webhooks, settings=SETTINGS):
        wait_for(lambda: ours(alertmanager, subject), timeout=60, message="the alert in Alertmanager")
    (alert,) = ours(alertmanager, subject)
    assert alert["status"]["state"] == "active"
    wait_for(
        lambda: not ours(alertmanager, subject), timeout=120, message="Alertmanager resolved it by itself"
    )
    # restarted, the notifier finds the open alert in the store and posts it again
    with Notifier(storage.webhooks, settings=SETTINGS):
        wait_for(lambda: ours(alertmanager, subject), timeout=60, message="the alert re-sent after a restart")
    assert ours(alertmanager, subject)[0]["status"]["state"] == "active"
