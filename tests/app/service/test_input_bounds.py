"""No 500 from input: every integer a route takes (path, query, body), as the OpenAPI document of
``create_app`` describes it, is bounded there and refused with a 422 ``{detail, problems}`` body when out of
range or not an integer (``true``, ``1e30``, ``1.5``) -- never a 500 (integers >= 2**63 made SQLite raise
OverflowError). One service for the whole module: the walk only sends bad values, none changes anything."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from app.service.schemas.common import MAX_ID, MAX_JAVA_INT
from tests.support.service import ADMIN, Service, product_service
from tests.support.zookeeper import ZooKeeperEndpoint

pytestmark = pytest.mark.integration

OUT_OF_ANY_RANGE: tuple[Any, ...] = (2**63, 2**64, -(2**63) - 1, 1e30, True, 1.5)
"""Sent to every integer input whatever its bounds; plus minimum - 1 and maximum + 1 of each."""

INTEGER_INPUTS = {
    ("GET", "/api/v1/brokers/{broker_id}", "broker_id"),
    ("GET", "/api/v1/partitions", "broker"),
    ("GET", "/api/v1/partitions", "offset"),
    ("GET", "/api/v1/alerts", "offset"),
    ("GET", "/api/v1/actions", "offset"),
    ("GET", "/api/v1/audit", "offset"),
    ("GET", "/api/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", "delivery_id"),
    ("POST", "/api/v1/webhooks/{webhook_id}/test", "webhook_id"),
    ("POST", "/api/v1/plans/drain-broker/{broker_id}", "broker_id"),
    ("POST", "/api/v1/plans/drain-broker/{broker_id}", "brokers[]"),
    ("POST", "/api/v1/plans/drain-broker/{broker_id}", "max_replicas_per_broker"),
    ("POST", "/api/v1/plans/rebalance", "max_moves"),
    ("POST", "/api/v1/plans/rebalance", "max_bytes"),
    ("POST", "/api/v1/actions/preferred-replica-election", "budget_bytes"),
    ("POST", "/api/v1/actions/preferred-replica-election", "partitions[].partition"),
    ("POST", "/api/v1/actions/reassignments", "partitions[].replicas[]"),
    ("POST", "/api/v1/actions/reassignments", "throttle.min_bytes_per_s"),
    ("POST", "/api/v1/actions/reassignments", "throttle_bytes_per_sec"),
    ("POST", "/api/v1/throttles/clear", "brokers[]"),
    ("POST", "/api/v1/webhooks", "rules[]"),
    ("PATCH", "/api/v1/webhooks/{webhook_id}", "rules[]"),
}
"""Inputs the walk must find (so that it cannot pass by finding nothing); it finds every other one too."""


@dataclass(frozen=True)
class IntegerInput:
    method: str
    path: str
    where: str  # path, query, body
    name: str  # a body field's path: "partitions[].partition"
    minimum: int | None
    maximum: int | None

    def bad_values(self) -> list[Any]:
        values = list(OUT_OF_ANY_RANGE)
        if self.minimum is not None:
            values.append(self.minimum - 1)
        if self.maximum is not None:
            values.append(self.maximum + 1)
        return values


@pytest.fixture(scope="module")
def bounded_service(
    zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """The product's routes only (no reference-cluster controls), on a small reference cluster in a chroot
    of its own."""
    store = tmp_path_factory.mktemp("bounds") / "store.db"
    with product_service(zookeeper_server, store, "input-bounds") as service:
        yield service


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _alternatives(spec: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    schema = _resolve(spec, schema)
    options = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if options:
        return [alt for option in options for alt in _alternatives(spec, option)]
    return [schema]


def _bound(value: float | None) -> int | None:
    """FastAPI's OpenAPI model types bounds as floats: 2**63 - 1 is published as 9.223372036854776e18."""
    return None if value is None else int(value)


def _integer_bounds(spec: dict[str, Any], schema: dict[str, Any]) -> tuple[bool, int | None, int | None]:
    for alt in _alternatives(spec, schema):
        if alt.get("type") == "integer":
            return True, _bound(alt.get("minimum")), _bound(alt.get("maximum"))
    return False, None, None


def _body_integers(
    spec: dict[str, Any], schema: dict[str, Any], prefix: str = ""
) -> Iterator[tuple[str, int | None, int | None]]:
    """(field path, minimum, maximum) of every integer in a body schema; ``[]`` marks a list's items."""
    for alt in _alternatives(spec, schema):
        if alt.get("type") == "integer":
            yield prefix, _bound(alt.get("minimum")), _bound(alt.get("maximum"))
        elif alt.get("type") == "array":
            yield from _body_integers(spec, alt.get("items", {}), prefix + "[]")
        elif alt.get("type") == "object" or "properties" in alt:
            for name, field in alt.get("properties", {}).items():
                yield from _body_integers(spec, field, f"{prefix}.{name}" if prefix else name)


def integer_inputs(spec: dict[str, Any]) -> list[IntegerInput]:
    found = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                is_int, low, high = _integer_bounds(spec, parameter.get("schema", {}))
                if is_int and parameter["in"] in ("path", "query"):
                    found.append(
                        IntegerInput(method.upper(), path, parameter["in"], parameter["name"], low, high)
                    )
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, low, high in _body_integers(spec, body.get("schema", {})):
                found.append(IntegerInput(method.upper(), path, "body", name, low, high))
    return found


def _nest(name: str, value: Any) -> Any:
    """``{"partitions": [{"partition": value}]}`` for ``partitions[].partition``."""
    head, _, rest = name.partition(".")
    inner = _nest(rest, value) if rest else value
    key, brackets = head.rstrip("[]"), (len(head) - len(head.rstrip("[]"))) // 2
    for _ in range(brackets):
        inner = [inner]
    return {key: inner} if key else inner


def _path_values(spec_path: str, operation: dict[str, Any], spec: dict[str, Any]) -> dict[str, str]:
    """A valid value of each path parameter (the bad one is put in after)."""
    values = {}
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            is_int, low, _ = _integer_bounds(spec, parameter.get("schema", {}))
            values[parameter["name"]] = str(low if is_int and low is not None else 1) if is_int else "x"
    return values


def _as_text(value: Any) -> str:
    return "true" if value is True else str(value)


def send(
    client: httpx.Client, service: Service, spec: dict[str, Any], item: IntegerInput, value: Any
) -> httpx.Response:
    operation = spec["paths"][item.path][item.method.lower()]
    path_values = _path_values(item.path, operation, spec)
    if "cluster" in path_values:  # /api/v1/clusters/{cluster}/...: the served cluster
        path_values["cluster"] = client.get(service.url + "/api/v1/clusters", headers=ADMIN).json()[0]["key"]
    params: dict[str, str] = {}
    body: Any = None
    if item.where == "path":
        path_values[item.name] = _as_text(value)
    elif item.where == "query":
        params[item.name] = _as_text(value)
    else:
        body = _nest(item.name, value)
    url = service.url + item.path.format(**path_values)
    return client.request(item.method, url, headers=ADMIN, params=params, json=body, timeout=30)


def test_every_integer_input_is_bounded_and_refused_out_of_range(bounded_service: Service) -> None:
    spec = httpx.get(bounded_service.url + "/openapi.json").json()
    inputs = integer_inputs(spec)
    missing = INTEGER_INPUTS - {(i.method, i.path, i.name) for i in inputs}
    assert not missing, f"the walk did not find {sorted(missing)}"
    unbounded = [i for i in inputs if i.minimum is None or i.maximum is None]
    assert not unbounded, f"integer inputs without a documented minimum and maximum: {unbounded}"
    for item in inputs:
        assert item.minimum is not None
        assert item.maximum is not None
        assert item.minimum >= -(2**63), item
        assert item.maximum <= MAX_ID + 1, item  # + 1: the float rounding of 2**63 - 1 (see _bound)
        if item.name in (
            "broker_id",
            "broker",
            "brokers[]",
            "partitions[].partition",
            "partitions[].replicas[]",
        ):
            # /throttles/clear names a negative broker id among its own problems (tests/app/service/routes)
            low = -(2**31) if item.path.endswith("/throttles/clear") else 0
            assert (item.minimum, item.maximum) == (low, MAX_JAVA_INT), item
    failures = []
    with httpx.Client() as client:
        for item in inputs:
            for value in item.bad_values():
                what = f"{item.method} {item.path} {item.where} {item.name}={value!r}"
                try:
                    response = send(client, bounded_service, spec, item, value)
                except httpx.TransportError as exc:  # an exception escaping a route ends the connection
                    failures.append(f"{what}: {type(exc).__name__} {exc}")
                    continue
                if not _refused(response, item):
                    failures.append(f"{what}: {response.status_code} {response.text[:200]}")
    assert not failures, "\n".join(failures)


def _refused(response: httpx.Response, item: IntegerInput) -> bool:
    """A 422 with the service's ``{detail, problems}`` body, a problem naming the input."""
    if response.status_code != 422:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    if not isinstance(body, dict) or "detail" not in body:
        return False
    field = item.name.replace("[]", "").split(".")[-1]
    return any(field in str(problem.get("location", "")) for problem in body.get("problems", []))
