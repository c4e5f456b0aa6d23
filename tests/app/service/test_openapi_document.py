"""The OpenAPI document is a published interface: clients are generated from it and scripts are written
against its names. This test keeps it byte for byte what ``openapi.json`` beside it holds, so that a
refactor of the service's wiring cannot change it unnoticed; a deliberate change of the API regenerates
the copy (``python -m tests.app.service.test_openapi_document``) and shows up in review as its diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from collectors.zookeeper.first_scan import CollectorSpec

pytestmark = pytest.mark.unit

STORED = Path(__file__).with_name("openapi.json")


def current_document() -> str:
    """The product's document (no reference-cluster routes), as text with one key per line."""
    settings = ServiceSettings(tokens=SecretStr("ci:viewer:not-a-real-token"))
    app = create_app(ServiceSpec(settings, [ClusterSpec(CollectorSpec("127.0.0.1:1"))]))
    spec: dict[str, Any] = app.openapi()
    return json.dumps(spec, indent=1, ensure_ascii=False) + "\n"


def test_the_openapi_document_is_the_stored_copy() -> None:
    assert current_document() == STORED.read_text(encoding="utf-8"), (
        "the OpenAPI document changed; if that is intended, regenerate the stored copy with "
        "`python -m tests.app.service.test_openapi_document` and review its diff"
    )


if __name__ == "__main__":
    STORED.write_text(current_document(), encoding="utf-8")
    print(f"wrote {STORED}")
