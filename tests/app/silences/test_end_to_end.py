"""A silence end to end, as an operator uses one: the reference cluster, a real ``kafka-health serve``, a
webhook subscribed through the API and a real HTTP receiver (app.embedded.webhook_receiver).

A maintenance silence for broker N created through the API keeps broker N's page (rule 5) from the
receiver while the alert opens and is recorded with ``silenced_by``; expiring the silence (with
``kafka-health silence expire``) while the broker is still down sends exactly one ``opened`` page.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.embedded.webhook_receiver import WebhookReceiver
from tests.support.cli import REPO
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.serve_process import ADMIN, ADMIN_TOKEN, START_TIMEOUT_S, Serve

pytestmark = pytest.mark.integration

SECRET = "a-shared-secret-for-the-tests"
FAST = {
    "KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS": "127.0.0.1/32",  # the receiver is on loopback
    "KAFKA_HEALTH_ANALYTICS__RULES__FOR_S": '{"5": 2}',  # rule 5 (broker down) opens after 2 s
}


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as running:
        yield running


def cli(serve: Serve, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_HEALTH_")}
    env["KAFKA_HEALTH_TOKEN"] = ADMIN_TOKEN
    argv = [sys.executable, "-m", "app.cli.main", "silence", *args, "--service-url", serve.url]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)


def pages(receiver: WebhookReceiver, subject: str) -> list[dict[str, Any]]:
    return [b for b in receiver.accepted().values() if b["rule"] == 5 and b["subject"] == subject]


def open_alert(serve: Serve, subject: str) -> dict[str, Any] | None:
    found = httpx.get(
        serve.url + "/api/v1/alerts", params={"rule": 5, "state": "open"}, headers=ADMIN, timeout=10
    )
    assert found.status_code == 200, found.text
    return next((a for a in found.json()["items"] if a["subject"] == subject), None)


def test_a_silence_keeps_a_broker_down_page_from_the_receiver_until_it_is_expired(
    make_cluster: ClusterFactory,
    zk_connect: str,
    tmp_path: Path,
    serves: Callable[..., Serve],
    receiver: WebhookReceiver,
) -> None:
    cluster = make_cluster()
    broker = max(cluster.brokers)
    serve = serves(zk_connect, f"sqlite:///{tmp_path / 'store.db'}", **FAST)
    wait_for(serve.ready, timeout=START_TIMEOUT_S, message="serve ready")
    wait_for(lambda: serve.standing() == "leader", timeout=30, message="its incident lane elected")
    body = {"name": "oncall", "url": receiver.url, "secret": SECRET, "rules": [5]}
    created = httpx.post(serve.url + "/api/v1/webhooks", json=body, headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text

    for bad, named in [
        ({"matchers": [{"name": "brokr", "value": "3"}], "duration_s": 60}, "'brokr'"),
        (
            {"matchers": [{"name": "rule", "value": "(", "regex": True}], "duration_s": 60},
            "regular expression",
        ),
        ({"matchers": [{"name": "broker", "value": "3"}]}, "exactly one of duration_s and ends_at"),
        ({"matchers": [{"name": "broker", "value": "3"}], "duration_s": 60, "ends_at": 2**32}, "exactly one"),
        ({"matchers": [{"name": "broker", "value": "3"}], "ends_at": "2001-01-01T00:00:00Z"}, "in the past"),
        ({"matchers": [], "duration_s": 60}, "at least one matcher"),
    ]:
        refused = httpx.post(serve.url + "/api/v1/silences", json=bad, headers=ADMIN, timeout=10)
        assert refused.status_code == 422, refused.text
        assert named in refused.json()["detail"], refused.text
    assert httpx.get(serve.url + "/api/v1/silences", headers=ADMIN, timeout=10).json()["total"] == 0
    bad_cli = cli(serve, "add", "--matcher", "brokr=3", "--duration", "30m")
    assert (bad_cli.returncode, bad_cli.stderr.count("\n")) == (2, 1), bad_cli.stderr
    assert "'brokr'" in bad_cli.stderr

    request = {"maintenance": {"broker": broker}, "duration_s": 3600, "comment": "rolling restart"}
    made = httpx.post(serve.url + "/api/v1/silences", json=request, headers=ADMIN, timeout=10)
    assert made.status_code == 201, made.text
    silence = made.json()
    assert (silence["state"], silence["created_by"], silence["maintenance"]) == (
        "active",
        "root",
        {"broker": broker},
    )
    listed = cli(serve, "list", "--state", "active")
    assert listed.returncode == 0, listed.stderr
    assert f"silence {silence['id']} active" in listed.stdout

    subject = f"broker:{broker}"
    cluster.stop_broker(broker)
    alert = wait_for(lambda: open_alert(serve, subject), timeout=60, message="rule 5 open")
    assert alert["silenced_by"] == [silence["id"]]
    detail = httpx.get(f"{serve.url}/api/v1/alerts/{alert['fingerprint']}", headers=ADMIN, timeout=10).json()
    assert [(e["kind"], e["silenced_by"]) for e in detail["events"]] == [("opened", [silence["id"]])]
    metrics = httpx.get(serve.url + "/metrics", timeout=10).text
    assert 'kafka_health_silences{cluster="' in metrics
    assert 'state="active"} 1.0' in metrics
    time.sleep(2.0)  # the notifier polls every 0.5 s: had it sent the page, it would be here by now
    assert pages(receiver, subject) == []

    expired = cli(serve, "expire", str(silence["id"]))
    assert expired.returncode == 0, expired.stderr
    assert f"silence {silence['id']} expired" in expired.stdout
    (page,) = wait_for(lambda: pages(receiver, subject), timeout=60, message="the page after the silence")
    assert page["kind"] == "opened"
    assert page["idempotency_key"] == f"{alert['fingerprint']}:1"
    assert open_alert(serve, subject) is not None  # the broker is still down: it paged while open
    again = cli(serve, "expire", str(silence["id"]))
    assert again.returncode == 2
    assert "has ended already" in again.stderr
    time.sleep(2.0)
    assert len(pages(receiver, subject)) == 1  # once
    audit = httpx.get(serve.url + "/api/v1/audit", headers=ADMIN, timeout=10).json()
    assert [e["action"] for e in audit if e["action"].startswith("silence-")] == [
        "silence-expire",
        "silence-create",
    ]
    cluster.start_broker(broker)
