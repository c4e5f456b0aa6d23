"""The application as built by ``create_app``: every route documented in OpenAPI (over real HTTP), and the
published names of the OpenAPI components that share a class name."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr

from app.service.app import create_app
from app.service.config import ServiceSettings
from tests.support.service import Service


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
    app = create_app(ServiceSettings(tokens=SecretStr("ci:viewer:not-a-real-token")), zookeeper="127.0.0.1:1")
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
