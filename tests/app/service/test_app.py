"""The application as built by ``create_app``: every route documented in OpenAPI (over real HTTP), and the
published names of the OpenAPI components that share a class name."""

from __future__ import annotations

import json
import re
from typing import Any
from unittest.mock import ANY

import httpx
import pytest
from pydantic import SecretStr

from app.embedded.zookeeper import pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.service import TOKENS, VIEWER, Service, run_server


@pytest.mark.integration
def test_openapi_documents_every_route(service: Service) -> None:
    spec = httpx.get(service.url + "/openapi.json").json()
    for path in (
        "/api/v1/cluster",
        "/api/v1/partitions",
        "/api/v1/alerts/{fingerprint}/ack",
        "/readyz",
        "/api/v1/brokers/safe-to-stop",
        "/api/v1/brokers/{broker_id}/safe-to-stop",
    ):
        assert path in spec["paths"]
    assert httpx.get(service.url + "/docs").status_code == 200


@pytest.mark.unit
def test_components_sharing_a_class_name_keep_their_published_names() -> None:
    """Two ``ActionOut`` and two ``LoadOut`` models: OpenAPI names them after the module they were first
    published from, and generated clients depend on those names wherever the classes live now."""
    app = create_app(
        ServiceSpec(
            ServiceSettings(tokens=SecretStr("ci:viewer:not-a-real-token")),
            [ClusterSpec(CollectorSpec("127.0.0.1:1"))],
        )
    )
    schemas = app.openapi()["components"]["schemas"]
    published = (
        "app__service__schemas__ActionOut",
        "app__service__actions_api__ActionOut",
        "app__service__schemas__LoadOut",
        "app__service__actions_api__LoadOut",
    )
    for name in published:
        assert name in schemas, name
    assert "ActionOut" not in schemas
    assert "LoadOut" not in schemas
    assert set(schemas["app__service__schemas__ActionOut"]["properties"]) == {"method", "path", "body"}
    assert "requested_by" in schemas["app__service__actions_api__ActionOut"]["properties"]
    assert "history" in schemas["app__service__schemas__LoadOut"]["properties"]
    assert "imbalanced_brokers" in schemas["app__service__actions_api__LoadOut"]["properties"]


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), p, op) for p, ops in spec["paths"].items() for m, op in ops.items()]


@pytest.mark.unit
def test_openapi_documents_the_problem_body_and_the_bearer_scheme_on_every_operation() -> None:
    """Every 4xx/5xx an operation lists has the one problem body (``/readyz``'s 503 excepted: its own
    model); protected operations carry the bearer requirement and 401 (403 above the viewer role); public
    ones neither; FastAPI's HTTPValidationError is gone; 413/400 wherever a body is taken."""
    app = create_app(
        ServiceSpec(
            ServiceSettings(tokens=SecretStr("ci:viewer:not-a-real-token")),
            [ClusterSpec(CollectorSpec("127.0.0.1:1"))],
        )
    )
    spec = app.openapi()
    assert "HTTPValidationError" not in json.dumps(spec)
    assert spec["components"]["securitySchemes"] == {
        "bearer": {"type": "http", "scheme": "bearer", "description": ANY}
    }
    public = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
    operations = _operations(spec)
    assert len(operations) >= 33
    for method, path, op in operations:
        what = f"{method} {path}"
        errors = {int(c): r for c, r in op["responses"].items() if int(c) >= 400}
        for status, response in errors.items():
            schema = response["content"]["application/json"]["schema"]
            expected = "Readyz" if what == "GET /readyz" else "Problem"
            assert schema == {"$ref": f"#/components/schemas/{expected}"}, (what, status)
        if (method, path) in public:
            assert "security" not in op, what
            assert not {401, 403} & set(errors), what
            continue
        assert op["security"] == [{"bearer": []}], what
        assert 401 in errors, what
        assert "WWW-Authenticate" in errors[401]["headers"], what
        if "requestBody" in op:
            assert {400, 413, 422} <= set(errors), what
    by_name = {f"{m} {p}": op for m, p, op in operations}
    statuses = {name: {int(c) for c in op["responses"]} for name, op in by_name.items()}
    # a viewer route cannot answer 403 (every token is at least a viewer); operator and admin ones can
    assert 403 not in statuses["GET /api/v1/cluster"]
    assert 403 in statuses["POST /api/v1/actions/reassignments"]
    assert 403 in statuses["GET /api/v1/audit"]
    # no input, no 422; a free-text path id cannot be malformed, only unknown
    assert 422 not in statuses["GET /api/v1/cluster"]
    # (a cluster's route: 409 at its unscoped path with several clusters, 503 before its ZooKeeper is read)
    assert statuses["GET /api/v1/topics/{name}"] == {200, 401, 404, 409, 503}
    assert statuses["POST /api/v1/actions/{action_id}/cancel"] == {200, 401, 403, 404, 409, 503}
    # at /api/v1/clusters/{cluster}/...: 404 for an unknown cluster, never the unscoped path's 409
    assert statuses["GET /api/v1/clusters/{cluster}/cluster"] == {200, 401, 404, 503}
    assert statuses["GET /api/v1/clusters/{cluster}/topics/{name}"] == {200, 401, 404, 503}
    assert statuses["GET /api/v1/clusters"] == {200, 401}
    scoped = {name for name in statuses if name.split()[1].startswith("/api/v1/clusters/{cluster}/")}
    unscoped = {f"{name.split()[0]} /api/v1/{name.split('/', 5)[5]}" for name in scoped}
    assert len(scoped) >= 23
    assert unscoped <= set(statuses)  # every scoped operation is an unscoped one too
    # the store's 503, the lookups' 404, the conflicts' 409
    assert 503 in statuses["GET /api/v1/alerts"]
    assert 503 in statuses["POST /api/v1/webhooks/{webhook_id}/test"]
    assert 503 not in statuses["GET /api/v1/audit"]
    assert 409 not in statuses["GET /api/v1/webhooks"]  # the service's, not a cluster's
    assert {404, 409} <= statuses["POST /api/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry"]
    assert 404 in statuses["GET /api/v1/webhooks/{webhook_id}"]


@pytest.mark.integration
def test_authentication_comes_before_every_other_answer(zk_connect: str) -> None:
    """With no store configured (the routes that need one answer 503), a request without a token is still
    a 401 on every protected operation, and a viewer's request to an operator or admin operation a 403: a
    caller who may not use the service learns nothing of its state."""
    app = create_app(
        ServiceSpec(ServiceSettings(tokens=SecretStr(TOKENS)), [ClusterSpec(CollectorSpec(zk_connect))])
    )
    spec = app.openapi()
    port = pick_free_port()
    server, thread = run_server(app, port)
    try:
        checked = 0
        for method, path, op in _operations(spec):
            if "security" not in op:
                continue
            url = f"http://127.0.0.1:{port}" + re.sub(r"\{[^}]+\}", "1", path)
            body: dict[str, Any] | None = {} if "requestBody" in op else None
            anonymous = httpx.request(method, url, json=body)
            assert (anonymous.status_code, anonymous.json()["detail"]) == (401, ANY), (method, path)
            if 403 in {int(c) for c in op["responses"]}:
                viewer = httpx.request(method, url, json=body, headers=VIEWER)
                assert viewer.status_code == 403, (method, path, viewer.text)
            checked += 1
        assert checked >= 30
        store_less = httpx.get(f"http://127.0.0.1:{port}/api/v1/alerts", headers=VIEWER)
        assert store_less.status_code == 503
    finally:
        server.should_exit = True
        thread.join(timeout=30)
