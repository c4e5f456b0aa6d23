"""What the service answers whatever URL and method a client sends, walking every path of ``/openapi.json``:
every paged route takes any offset up to 2^63-1 with any limit it documents (200 or a 422, never a 500);
no redirect (a trailing slash is a 404, never a ``Location`` built from the request's ``Host``); ``OPTIONS``
and every 405 carry the URL's full ``Allow``. One service for the module: nothing here changes anything but
the one webhook the deliveries' route needs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.service.schemas.common import MAX_ID
from tests.support.service import ADMIN, Service, product_service
from tests.support.zookeeper import ZooKeeperEndpoint

pytestmark = pytest.mark.integration

PAGED = {
    "/api/v1/actions",
    "/api/v1/alerts",
    "/api/v1/audit",
    "/api/v1/partitions",
    "/api/v1/webhooks/{webhook_id}/deliveries",
    "/api/v1/clusters/{cluster}/partitions",
}
"""Paged routes the walk must find (so that it cannot pass by finding none); it takes every other too."""

SEVERAL_METHODS = {
    "/api/v1/webhooks": {"GET", "POST"},
    "/api/v1/webhooks/{webhook_id}": {"GET", "PATCH", "DELETE"},
}
"""Paths of several methods (Starlette's own ``Allow`` named one of them), as the document says."""

OFFSETS = (MAX_ID, MAX_ID - 1, MAX_ID - 999, 2**62)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@pytest.fixture(scope="module")
def routed(
    zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    store = tmp_path_factory.mktemp("routing") / "store.db"
    with product_service(zookeeper_server, store, "routing") as service:
        yield service


@pytest.fixture(scope="module")
def spec(routed: Service) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(routed.url + "/openapi.json").json()
    return document


@pytest.fixture(scope="module")
def values(routed: Service) -> dict[str, str]:
    """A value of each path parameter that names something that exists: the served cluster, a webhook."""
    cluster = httpx.get(routed.url + "/api/v1/clusters", headers=ADMIN).json()[0]["key"]
    body = {"name": "routing", "url": "https://hooks.example.com/kafka-health"}
    created = httpx.post(routed.url + "/api/v1/webhooks", headers=ADMIN, json=body)
    assert created.status_code == 201, created.text
    return {"cluster": cluster, "webhook_id": str(created.json()["id"])}


def _url(path: str, values: dict[str, str]) -> str:
    """The path with each parameter filled in: a known value, else 1 (no id nor name of that value exists,
    so the URL matches only the templates that take any value there)."""
    return re.sub(r"\{([^}]+)\}", lambda m: values.get(m.group(1), "1"), path)


def _documented_methods(spec: dict[str, Any], url: str) -> set[str]:
    """The methods the document gives every path template ``url`` fits: ``/api/v1/actions/reassignments``
    is ``POST`` there and ``GET /api/v1/actions/{action_id}`` too."""
    methods = set()
    for path, operations in spec["paths"].items():
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", path), url):
            methods |= {method.upper() for method in operations}
    return methods


def _allow(response: httpx.Response) -> set[str]:
    return {method.strip() for method in response.headers.get("allow", "").split(",") if method.strip()}


def _is_problem(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return (
        isinstance(body, dict)
        and isinstance(body.get("detail"), str)
        and isinstance(body.get("problems"), list)
    )


def _query(spec: dict[str, Any], operation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    schemas = {}
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "query":
            schema = parameter.get("schema", {})
            while "$ref" in schema:
                schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
            schemas[parameter["name"]] = schema
    return schemas


def test_every_paged_route_answers_an_offset_up_to_the_largest(
    routed: Service, spec: dict[str, Any], values: dict[str, str]
) -> None:
    paged = {
        path: _query(spec, operations["get"])
        for path, operations in spec["paths"].items()
        if "get" in operations and {"offset", "limit"} & set(_query(spec, operations["get"]))
    }
    assert set(paged) >= PAGED, f"the walk did not find {sorted(PAGED - set(paged))}"
    failures = []
    with httpx.Client(headers=ADMIN, timeout=30) as client:
        for path, query in sorted(paged.items()):
            assert "limit" in query, f"{path}: an offset without a limit"
            if "offset" in query:
                assert int(query["offset"]["maximum"]) >= MAX_ID, path  # published as a float (2**63)
            most = int(query["limit"]["maximum"])
            for offset in OFFSETS if "offset" in query else (None,):  # /load: a limit only
                for limit in sorted({1, 100, most - 1, most}):
                    params = {"limit": limit} if offset is None else {"offset": offset, "limit": limit}
                    what = f"GET {path} {params}"
                    try:
                        response = client.get(routed.url + _url(path, values), params=params)
                    except httpx.TransportError as exc:  # an exception escaping a route ends the connection
                        failures.append(f"{what}: {type(exc).__name__} {exc}")
                        continue
                    if response.status_code == 200:
                        body = response.json()
                        if offset is not None and (body if isinstance(body, list) else body["items"]):
                            failures.append(f"{what}: items, though nothing is that far down any list")
                    elif response.status_code != 422 or not _is_problem(response):
                        failures.append(f"{what}: {response.status_code} {response.text[:200]}")
    assert not failures, "\n".join(failures)


def test_no_redirect_names_the_host_the_request_gave(
    routed: Service, spec: dict[str, Any], values: dict[str, str]
) -> None:
    """Starlette redirected ``/api/v1/webhooks/`` to ``http://<the request's Host>/api/v1/webhooks`` (307):
    now a trailing slash is a URL no route serves, a 404 with the Problem body, for every method."""
    failures = []
    with httpx.Client(
        headers={**ADMIN, "Host": "evil.example"}, timeout=30, follow_redirects=False
    ) as client:
        for path, operations in sorted(spec["paths"].items()):
            url = routed.url + _url(path, values) + "/"
            for method in operations:
                response = client.request(method.upper(), url)
                if response.status_code != 404 or "location" in response.headers or not _is_problem(response):
                    location = response.headers.get("location")
                    failures.append(f"{method.upper()} {url}: {response.status_code} Location={location}")
    assert not failures, "\n".join(failures)
    webhooks = httpx.get(
        routed.url + "/api/v1/webhooks/", headers={**ADMIN, "Host": "evil.example"}, follow_redirects=False
    )
    assert (webhooks.status_code, webhooks.json()) == (404, {"detail": "Not Found", "problems": []})
    assert "evil.example" not in str(webhooks.headers)


def test_options_and_every_405_carry_the_full_allow(
    routed: Service, spec: dict[str, Any], values: dict[str, str]
) -> None:
    """At every path of the document, ``OPTIONS`` (204, no token needed) lists every method the document
    gives that URL, and ``OPTIONS``; a method the URL does not serve is a 405 (Problem body) with that same
    ``Allow``."""
    for path, methods in SEVERAL_METHODS.items():
        assert {m.upper() for m in spec["paths"][path]} == methods, path
    failures = []
    with httpx.Client(timeout=30) as client:
        for path in sorted(spec["paths"]):
            url = _url(path, values)
            expected = _documented_methods(spec, url) | {"OPTIONS"}
            options = client.options(routed.url + url)
            if options.status_code != 204 or _allow(options) != expected:
                failures.append(f"OPTIONS {url}: {options.status_code} Allow {_allow(options)} != {expected}")
            for method in sorted(set(METHODS) - expected):
                refused = client.request(method, routed.url + url, headers=ADMIN)
                if refused.status_code != 405 or _allow(refused) != expected or not _is_problem(refused):
                    failures.append(
                        f"{method} {url}: {refused.status_code} Allow {_allow(refused)} != {expected}"
                    )
    assert not failures, "\n".join(failures)
    webhooks = httpx.options(routed.url + "/api/v1/webhooks")
    assert (webhooks.status_code, webhooks.headers["allow"], webhooks.content) == (
        204,
        "GET, POST, OPTIONS",
        b"",
    )
    deleted = httpx.delete(routed.url + "/api/v1/webhooks", headers=ADMIN)
    assert (deleted.status_code, deleted.headers["allow"]) == (405, "GET, POST, OPTIONS")
    assert httpx.options(routed.url + "/api/v1/no-such-thing").status_code == 404
