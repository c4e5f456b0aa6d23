"""``/api/v1/webhooks`` over real HTTP (uvicorn on a free port, the service's ZooKeeper collector on the
test's chroot): admin only, 422 naming each problem, secrets never in a response, dead letters visible and
retryable, and the test send."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from analytics.model import AlertEvent, AlertState, fingerprint
from analytics.rules import RULE_NUMBERS
from analytics.store import Store
from app.embedded.reference_cluster.control import ControlServer
from app.embedded.webhook_receiver import Answer, ReceivedRequest, Responder, WebhookReceiver
from app.embedded.zookeeper import pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.container import ServiceContainer
from app.service.spec import ClusterSpec, ServiceSpec
from app.storage import Storage
from app.webhooks.notifier import Notifier, NotifierSettings
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.reference_cluster import ClusterFactory, wait_for

pytestmark = pytest.mark.integration

TOKENS = "grafana:viewer:viewer-token-1,oncall:operator:operator-token-1,root:admin:admin-token-1"
VIEWER = {"Authorization": "Bearer viewer-token-1"}
OPERATOR = {"Authorization": "Bearer operator-token-1"}
ADMIN = {"Authorization": "Bearer admin-token-1"}
SECRET = "route-tests-shared-secret"
FAST = NotifierSettings(
    poll_interval_s=0.05,
    timeout_s=2.0,
    backoff_base_s=0.05,
    backoff_max_s=0.1,
    max_attempts=2,
    election="none",
    allow_networks=("127.0.0.1/32",),  # the receiver is on loopback, refused by default
)


@dataclass
class Service:
    url: str
    store_url: str
    app: Any

    def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        return httpx.request(method, self.url + path, headers=ADMIN if headers is None else headers, **kwargs)


def run(app: Any) -> Iterator[str]:
    port = pick_free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), timeout=60, message="uvicorn started")
        assert server.started, "the service did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture
def service(zk_connect: str, tmp_path: Path) -> Iterator[Service]:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    # The service's own notifier shares the outbox with the tests' FAST ones: it must give up after as
    # many attempts, or a delivery it happens to claim counts one attempt more.
    settings = ServiceSettings(tokens=SecretStr(TOKENS), webhooks=FAST)
    app = create_app(ServiceSpec(settings, [ClusterSpec(CollectorSpec(zk_connect))], store_url=store_url))
    for url in run(app):
        yield Service(url, store_url, app)


@pytest.fixture
def strict_service(zk_connect: str, tmp_path: Path) -> Iterator[Service]:
    """The service with the default egress policy (no allowlist): loopback refused."""
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    settings = ServiceSettings(
        tokens=SecretStr(TOKENS), webhooks=FAST.model_copy(update={"allow_networks": ()})
    )
    app = create_app(ServiceSpec(settings, [ClusterSpec(CollectorSpec(zk_connect))], store_url=store_url))
    for url in run(app):
        yield Service(url, store_url, app)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as running:
        yield running


def new_webhook(service: Service, receiver: WebhookReceiver, **fields: Any) -> dict[str, Any]:
    body = {"name": "oncall", "url": receiver.url, "secret": SECRET} | fields
    response = service.call("POST", "/api/v1/webhooks", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def open_alert(store: Store, subject: str = "topic:orders") -> str:
    fp = fingerprint("c1", 1, subject)
    at = time.time()
    state = AlertState(
        fp, "c1", 1, subject, "critical", "open", "offline", {}, None, 1, 0, at, at, at, None, at, 1
    )
    event = AlertEvent(fp, 1, "opened", at, "critical", "offline", {})
    store.commit_incidents("c1", [state], [event], expected={fp: None})  # as the incident lane writes it
    return f"{fp}:1"


def test_webhooks_need_an_admin(service: Service) -> None:
    assert service.call("GET", "/api/v1/webhooks", headers={}).status_code == 401
    for headers in (VIEWER, OPERATOR):
        denied = service.call("GET", "/api/v1/webhooks", headers=headers)
        assert denied.status_code == 403
        assert "this needs admin or higher" in denied.json()["detail"]
        created = service.call("POST", "/api/v1/webhooks", headers=headers, json={"name": "x"})
        assert created.status_code == 403
    assert service.call("GET", "/api/v1/webhooks").json() == []


def test_a_webhook_is_created_listed_changed_and_deleted_and_its_secret_never_shown(
    service: Service, receiver: WebhookReceiver
) -> None:
    created = new_webhook(service, receiver, format="alertmanager", rules=[3, 1], severities=["critical"])
    assert created == {
        "id": created["id"],
        "name": "oncall",
        "url": receiver.url,
        "format": "alertmanager",
        "rules": [1, 3],
        "severities": ["critical"],
        "clusters": None,
        "has_secret": True,
        "enabled": True,
        "created_at": created["created_at"],
        "created_by": "root",
        "updated_at": created["created_at"],
        "deliveries": {"pending": 0, "delivered": 0, "dead": 0, "skipped": 0},
    }
    path = f"/api/v1/webhooks/{created['id']}"
    assert service.call("GET", path).json() == created
    assert service.call("GET", "/api/v1/webhooks").json() == [created]

    patched = service.call("PATCH", path, json={"rules": None, "secret": None, "enabled": False})
    assert patched.status_code == 200
    assert (patched.json()["rules"], patched.json()["has_secret"], patched.json()["enabled"]) == (
        None,
        False,
        False,
    )
    every_rule = service.call("PATCH", path, json={"rules": list(RULE_NUMBERS)})
    assert (every_rule.status_code, every_rule.json()["rules"]) == (200, list(RULE_NUMBERS))
    some_clusters = service.call("PATCH", path, json={"clusters": ["prod", "dev", "prod", "lkc-Xy_z.1"]})
    assert (some_clusters.status_code, some_clusters.json()["clusters"]) == (
        200,
        ["dev", "lkc-Xy_z.1", "prod"],
    )
    assert service.call("GET", path).json()["clusters"] == ["dev", "lkc-Xy_z.1", "prod"]
    every_cluster = service.call("PATCH", path, json={"clusters": None})
    assert (every_cluster.status_code, every_cluster.json()["clusters"]) == (200, None)
    only_prod = new_webhook(service, receiver, name="prod only", clusters=["prod"])
    assert only_prod["clusters"] == ["prod"]
    assert service.call("DELETE", f"/api/v1/webhooks/{only_prod['id']}").status_code == 204
    resecret = service.call("PATCH", path, json={"secret": "another-secret-16+"}).json()
    assert resecret["has_secret"] is True
    with_password = service.call("PATCH", path, json={"url": "https://bot:hunter2@hooks.example/x"}).json()
    assert with_password["url"] == "https://bot:****@hooks.example/x"

    responses = [service.call("GET", path), service.call("GET", "/api/v1/webhooks")]
    for response in responses:
        assert SECRET not in response.text
        assert "another-secret-16+" not in response.text
        assert "hunter2" not in response.text
        assert '"secret"' not in response.text

    assert service.call("DELETE", path).status_code == 204
    assert service.call("GET", path).status_code == 404
    assert service.call("DELETE", path).status_code == 404


def test_the_url_is_shown_masked_and_delivered_to_unchanged(
    service: Service, receiver: WebhookReceiver
) -> None:
    key, token, password = "xoxb1234abcd5678efgh9012", "q-token-5678", "pw-in-userinfo"
    url = receiver.url.replace("http://", f"http://bot:{password}@") + f"/T000/B000/{key}?token={token}&v=2"
    created = new_webhook(service, receiver, url=url, format="slack")
    shown = receiver.url.replace("http://", "http://bot:****@") + "/T000/B000/****?token=****&v=****"
    assert created["url"] == shown
    listed = service.call("GET", "/api/v1/webhooks")
    one = service.call("GET", f"/api/v1/webhooks/{created['id']}")
    assert [w["url"] for w in listed.json()] == [shown]
    assert one.json()["url"] == shown
    for response in (listed, one):
        for secret in (key, token, password):
            assert secret not in response.text

    with Storage.open(service.store_url) as storage:
        stored = storage.webhooks.webhook(created["id"])
    assert stored is not None
    assert stored.url == url
    assert key not in repr(stored)
    sent = service.call("POST", f"/api/v1/webhooks/{created['id']}/test").json()
    assert sent["delivered"] is True
    (request,) = receiver.requests()
    assert request.path == f"/hook/T000/B000/{key}?token={token}&v=2"  # the stored URL, secrets and all


def test_invalid_bodies_are_422_naming_each_problem(service: Service, receiver: WebhookReceiver) -> None:
    response = service.call(
        "POST",
        "/api/v1/webhooks",
        json={
            "name": " ",
            "url": "ftp://files.example/x",
            "format": "xml",
            "rules": [0, 20],
            "severities": ["urgent"],
            "secret": "short-secret",
            "colour": "red",
        },
    )
    assert response.status_code == 422
    body = response.json()
    assert sorted(p["location"] for p in body["problems"]) == [
        "body.colour",
        "body.format",
        "body.name",
        "body.rules.0",
        "body.rules.1",
        "body.secret",
        "body.severities.0",
        "body.url",
    ]
    assert "short-secret" not in response.text
    url_problem = next(p for p in body["problems"] if p["location"] == "body.url")
    assert "must be http:// or https://, not ftp" in url_problem["message"]

    assert service.call("POST", "/api/v1/webhooks", json={"name": "x"}).json()["problems"][0]["location"] == (
        "body.url"
    )
    for url in ("http://", "not a url", "/relative/path"):
        bad = service.call("POST", "/api/v1/webhooks", json={"name": "x", "url": url})
        assert bad.status_code == 422, url
    created = new_webhook(service, receiver)
    patch = service.call(
        "PATCH", f"/api/v1/webhooks/{created['id']}", json={"name": None, "enabled": None, "rules": []}
    )
    assert patch.status_code == 422
    assert sorted(p["location"] for p in patch.json()["problems"]) == [
        "body.enabled",
        "body.name",
        "body.rules",
    ]
    clusters = service.call(
        "POST",
        "/api/v1/webhooks",
        json={"name": "x", "url": receiver.url, "clusters": ["ok", "two words", "", "x" * 256, 7, "nl\n"]},
    )
    assert clusters.status_code == 422
    assert sorted(p["location"] for p in clusters.json()["problems"]) == [
        "body.clusters.1",
        "body.clusters.2",
        "body.clusters.3",
        "body.clusters.4",
        "body.clusters.5",
    ]
    for value in ([], [f"c{n}" for n in range(101)], "prod"):
        refused = service.call("PATCH", f"/api/v1/webhooks/{created['id']}", json={"clusters": value})
        assert refused.status_code == 422, value
        assert [p["location"] for p in refused.json()["problems"]] == ["body.clusters"]
    assert service.call("GET", f"/api/v1/webhooks/{created['id']}").json()["clusters"] is None
    listing = service.call("GET", f"/api/v1/webhooks/{created['id']}/deliveries", params={"state": "lost"})
    assert listing.status_code == 422
    assert listing.json()["problems"][0]["location"] == "query.state.0"


def test_unknown_ids_are_404(service: Service, receiver: WebhookReceiver) -> None:
    created = new_webhook(service, receiver)
    for method, path in [
        ("GET", "/api/v1/webhooks/999"),
        ("PATCH", "/api/v1/webhooks/999"),
        ("DELETE", "/api/v1/webhooks/999"),
        ("GET", "/api/v1/webhooks/999/deliveries"),
        ("POST", "/api/v1/webhooks/999/test"),
        ("GET", f"/api/v1/webhooks/{created['id']}/deliveries/12345"),
        ("POST", f"/api/v1/webhooks/{created['id']}/deliveries/12345/retry"),
    ]:
        response = service.call(method, path, json={} if method == "PATCH" else None)
        assert response.status_code == 404, (method, path)
        assert "no webhook" in response.json()["detail"] or "has no delivery" in response.json()["detail"]


def test_dead_letters_are_visible_and_retryable(service: Service, receiver: WebhookReceiver) -> None:
    receiver.respond_with(503)
    created = new_webhook(service, receiver)
    base = f"/api/v1/webhooks/{created['id']}"
    with Storage.open(service.store_url) as storage, Notifier(storage.webhooks, settings=FAST):
        key = open_alert(storage.analytics)
        # either notifier (this one or the service's own) may make the last attempt: ask the outbox
        wait_for(
            lambda: service.call("GET", f"{base}/deliveries", params={"state": "dead"}).json()["total"] == 1,
            message="the delivery dead after 2 attempts",
        )
        dead = service.call("GET", f"{base}/deliveries", params={"state": "dead"}).json()
        assert dead["total"] == 1
        (letter,) = dead["items"]
        assert (letter["idempotency_key"], letter["state"], letter["attempts"]) == (key, "dead", 2)
        assert letter["last_status"] == 503
        assert letter["last_error"].startswith("gave up after 2 attempts: HTTP 503")
        assert letter["payload"]["idempotency_key"] == key
        assert service.call("GET", base).json()["deliveries"]["dead"] == 1

        receiver.respond_with(200)
        retried = service.call("POST", f"{base}/deliveries/{letter['id']}/retry")
        assert retried.status_code == 200
        assert (retried.json()["state"], retried.json()["attempts"]) == ("pending", 0)
        wait_for(
            lambda: service.call("GET", f"{base}/deliveries/{letter['id']}").json()["state"] == "delivered",
            message="the retried delivery delivered",
        )
        again = service.call("POST", f"{base}/deliveries/{letter['id']}/retry")
        assert again.status_code == 409
        assert (
            again.json()["detail"]
            == f"delivery {letter['id']} is delivered; only a dead delivery can be retried"
        )
    assert set(receiver.accepted()) == {key}
    counts = service.call("GET", base).json()["deliveries"]
    assert counts == {"pending": 0, "delivered": 1, "dead": 0, "skipped": 0}
    everything = service.call("GET", f"{base}/deliveries", params={"state": ["dead", "delivered"]}).json()
    assert everything["total"] == 1


def test_the_test_event_is_sent_signed_and_reported(service: Service, receiver: WebhookReceiver) -> None:
    created = new_webhook(service, receiver, format="slack", enabled=False)
    path = f"/api/v1/webhooks/{created['id']}/test"
    sent = service.call("POST", path)
    assert sent.status_code == 200
    result = sent.json()
    assert (result["delivered"], result["outcome"], result["status"], result["error"]) == (
        True,
        "delivered",
        200,
        None,
    )
    (request,) = receiver.requests()
    assert request.signature_error is None
    assert request.idempotency_key == result["idempotency_key"]
    assert "kafka-health test notification" in request.json()["text"]

    receiver.respond_with(404)
    with Storage.open(service.store_url) as storage, Notifier(storage.webhooks, settings=FAST) as notifier:
        container = ServiceContainer.of(service.app)
        replace(container, notifier=notifier).install(service.app)  # as if the lifespan had started it
        failed = service.call("POST", path).json()
    assert (failed["delivered"], failed["outcome"], failed["status"]) == (False, "permanent", 404)
    assert failed["error"] == "HTTP 404 Not Found"
    assert service.call("GET", f"/api/v1/webhooks/{created['id']}/deliveries").json()["total"] == 0


def test_without_a_store_the_routes_say_so(zk_connect: str) -> None:
    app = create_app(
        ServiceSpec(ServiceSettings(tokens=SecretStr(TOKENS)), [ClusterSpec(CollectorSpec(zk_connect))])
    )
    for url in run(app):
        response = httpx.get(url + "/api/v1/webhooks", headers=ADMIN)
        assert response.status_code == 503
        assert "no store is configured" in response.json()["detail"]
        spec = httpx.get(url + "/openapi.json").json()
        for route in ("/api/v1/webhooks", "/api/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry"):
            assert route in spec["paths"]


# --- the egress policy -----------------------------------------------------------------------------------


def stored_webhook(service: Service, url: str) -> int:
    """A webhook written straight into the store (as one created before the policy existed)."""
    with Storage.open(service.store_url) as storage:
        return storage.webhooks.create_webhook(
            name="legacy", url=url, format="generic", secret=SECRET, created_by="root", now=time.time()
        ).id


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("127.0.0.1", "127.0.0.1 is loopback"),
        ("2130706433", "127.0.0.1 is loopback"),
        ("0x7f.1", "127.0.0.1 is loopback"),
        ("[::ffff:127.0.0.1]", "127.0.0.1 is loopback"),
        ("[::1]", "::1 is loopback"),
        ("localhost", "loopback"),
        ("10.0.0.1", "10.0.0.1 is private"),
        ("169.254.169.254", "169.254.169.254 is a cloud metadata address"),
        ("metadata.google.internal.", "metadata.google.internal is a cloud metadata name"),
    ],
)
def test_a_url_the_egress_policy_refuses_is_422_naming_the_reason(
    strict_service: Service, receiver: WebhookReceiver, host: str, reason: str
) -> None:
    url = f"http://{host}:{receiver.port}/hook"
    created = strict_service.call("POST", "/api/v1/webhooks", json={"name": "x", "url": url})
    assert created.status_code == 422, created.text
    body = created.json()
    assert body["detail"].startswith("invalid request: body.url: refused by the egress policy: ")
    assert reason in body["detail"]
    [problem] = body["problems"]
    assert (problem["location"], problem["type"]) == ("body.url", "egress_refused")
    webhook_id = stored_webhook(strict_service, "https://hooks.example.com/kafka")
    patched = strict_service.call("PATCH", f"/api/v1/webhooks/{webhook_id}", json={"url": url})
    assert patched.status_code == 422
    assert reason in patched.json()["detail"]
    assert receiver.requests() == []


def test_the_test_send_to_a_refused_address_is_422_and_sends_nothing(
    strict_service: Service, receiver: WebhookReceiver
) -> None:
    webhook_id = stored_webhook(strict_service, receiver.url)
    refused = strict_service.call("POST", f"/api/v1/webhooks/{webhook_id}/test")
    assert refused.status_code == 422
    assert refused.json()["detail"] == "not sent: refused by the egress policy: 127.0.0.1 is loopback"
    assert receiver.requests() == []


def test_the_allowlist_lets_the_receiver_through(service: Service, receiver: WebhookReceiver) -> None:
    created = new_webhook(service, receiver)  # FAST allows 127.0.0.1/32
    sent = service.call("POST", f"/api/v1/webhooks/{created['id']}/test").json()
    assert (sent["delivered"], sent["status"]) == (True, 200)
    assert len(receiver.requests()) == 1


def replying(status: int, body: bytes) -> Responder:
    def answer(_request: ReceivedRequest) -> Answer:
        return status, {}, body

    return answer


def test_the_test_send_reports_status_and_timing_never_the_body(
    service: Service, receiver: WebhookReceiver
) -> None:
    page = b"<html>internal admin page: password=hunter2-internal-only</html>"
    created = new_webhook(service, receiver)
    path = f"/api/v1/webhooks/{created['id']}/test"
    for status in (200, 404, 500):
        receiver.respond_with(replying(status, page))
        answer = service.call("POST", path)
        assert answer.status_code == 200
        assert b"hunter2" not in answer.content
        assert b"internal admin page" not in answer.content
        result = answer.json()
        assert set(result) == {"delivered", "outcome", "status", "error", "idempotency_key", "duration_s"}
        assert result["status"] == status
        assert result["duration_s"] > 0
    assert [r.status for r in receiver.requests()] == [200, 404, 500]


def test_a_webhook_aimed_at_the_reference_clusters_control_port_is_refused(
    strict_service: Service, make_cluster: ClusterFactory
) -> None:
    """The issue's case: a webhook on the control port's ``/brokers/0/stop`` stopped a broker."""
    cluster = make_cluster()
    control = ControlServer(cluster)
    control.start()
    try:
        url = f"{control.url}/brokers/0/stop"
        created = strict_service.call("POST", "/api/v1/webhooks", json={"name": "x", "url": url})
        assert created.status_code == 422
        assert "127.0.0.1 is loopback" in created.json()["detail"]
        webhook_id = stored_webhook(strict_service, url)
        assert strict_service.call("POST", f"/api/v1/webhooks/{webhook_id}/test").status_code == 422
        assert {b["state"] for b in httpx.get(control.url + "/").json()["brokers"]} == {"running"}
    finally:
        control.close()
