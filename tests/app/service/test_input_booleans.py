"""A request that looks like a dry run never acts: every boolean a route takes (query, body), as the
OpenAPI document of ``create_app`` describes it, is strict. Bodies take JSON ``true``/``false`` only, query
strings the text ``true``/``false`` only; anything else is a 422 ``{detail, problems}`` naming the input.
Pydantic's lax mode took ``0``, ``"no"``, ``"off"``, ``"f"``, ``"0"`` and ``"false"`` for false, so
``{"dry_run": 0}`` elected leaders and ``{"dry_run": "no"}`` removed throttles (issue 22).

The walk is :mod:`tests.app.service.test_input_bounds`'s. One service for the whole module: the walk only
sends bad values, none changes anything. That a refused request leaves no action, audit row or znode behind
is shown per action route in ``tests/app/service/routes`` (test_actions.py, test_throttles.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.app.service.test_input_bounds import _alternatives, _nest, _path_values
from tests.support.service import ADMIN, Service, product_service
from tests.support.zookeeper import ZooKeeperEndpoint

pytestmark = pytest.mark.integration

BAD_BODY_VALUES: tuple[Any, ...] = (0, 1, "no", "false", "true", "yes", "0", "off", "f", 0.0, [], {})
"""Sent to every boolean of a body; ``null`` too where the schema does not allow it."""
BAD_QUERY_VALUES = ("0", "1", "no", "yes", "False", "TRUE", "True", "off", "f", "")
"""Sent to every boolean of a query string (text: ``true`` and ``false`` are the only booleans)."""

PARTITION_FILTERS = (
    "under_replicated",
    "under_min_isr",
    "at_min_isr",
    "offline",
    "state_unknown",
    "non_preferred",
)
BOOLEAN_INPUTS = {
    *(("GET", "/api/v1/partitions", name) for name in PARTITION_FILTERS),
    *(("GET", "/api/v1/clusters/{cluster}/partitions", name) for name in PARTITION_FILTERS),
    ("POST", "/api/v1/actions/preferred-replica-election", "dry_run"),
    ("POST", "/api/v1/actions/reassignments", "dry_run"),
    ("POST", "/api/v1/actions/reassignments", "allow_replication_factor_change"),
    ("POST", "/api/v1/actions/{action_id}/rollback", "dry_run"),
    ("POST", "/api/v1/clusters/{cluster}/actions/preferred-replica-election", "dry_run"),
    ("POST", "/api/v1/clusters/{cluster}/actions/reassignments", "dry_run"),
    ("POST", "/api/v1/throttles/clear", "dry_run"),
    ("POST", "/api/v1/throttles/clear", "include_in_use"),
    ("POST", "/api/v1/clusters/{cluster}/throttles/clear", "dry_run"),
    ("POST", "/api/v1/plans/rebalance", "leader_moves"),
    ("POST", "/api/v1/webhooks", "enabled"),
    ("PATCH", "/api/v1/webhooks/{webhook_id}", "enabled"),
}
"""Inputs the walk must find (so that it cannot pass by finding nothing); it finds every other one too."""


@dataclass(frozen=True)
class BooleanInput:
    method: str
    path: str
    where: str  # query, body
    name: str  # a body field's path: "throttle.enabled"
    nullable: bool
    """The schema allows null (``WebhookPatch.enabled``: the route refuses it itself)."""
    types: frozenset[str]
    """The JSON types the schema allows: ``{"boolean"}``, or ``{"boolean", "null"}``."""

    def bad_values(self) -> list[Any]:
        if self.where == "query":
            return list(BAD_QUERY_VALUES)
        return [*BAD_BODY_VALUES, *([] if self.nullable else [None])]


@pytest.fixture(scope="module")
def bool_service(
    zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """The product's routes only, on a small reference cluster in a chroot of its own."""
    store = tmp_path_factory.mktemp("booleans") / "store.db"
    with product_service(zookeeper_server, store, "input-booleans") as service:
        yield service


def _types(spec: dict[str, Any], schema: dict[str, Any]) -> frozenset[str]:
    return frozenset(str(alt.get("type")) for alt in _alternatives(spec, schema))


def _body_booleans(
    spec: dict[str, Any], schema: dict[str, Any], prefix: str = ""
) -> Iterator[tuple[str, frozenset[str]]]:
    """(field path, types) of every boolean in a body schema; ``[]`` marks a list's items."""
    types = _types(spec, schema)
    if "boolean" in types and prefix:
        yield prefix, types
    for alt in _alternatives(spec, schema):
        if alt.get("type") == "array":
            yield from _body_booleans(spec, alt.get("items", {}), prefix + "[]")
        elif alt.get("type") == "object" or "properties" in alt:
            for name, field in alt.get("properties", {}).items():
                yield from _body_booleans(spec, field, f"{prefix}.{name}" if prefix else name)


def boolean_inputs(spec: dict[str, Any]) -> list[BooleanInput]:
    found = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                types = _types(spec, parameter.get("schema", {}))
                if "boolean" in types:
                    where = parameter["in"]
                    found.append(
                        BooleanInput(method.upper(), path, where, parameter["name"], "null" in types, types)
                    )
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, types in _body_booleans(spec, body.get("schema", {})):
                found.append(BooleanInput(method.upper(), path, "body", name, "null" in types, types))
    return found


def send(
    client: httpx.Client, service: Service, spec: dict[str, Any], item: BooleanInput, value: Any
) -> httpx.Response:
    operation = spec["paths"][item.path][item.method.lower()]
    path_values = _path_values(item.path, operation, spec)
    if "cluster" in path_values:  # /api/v1/clusters/{cluster}/...: the served cluster
        path_values["cluster"] = client.get(service.url + "/api/v1/clusters", headers=ADMIN).json()[0]["key"]
    url = service.url + item.path.format(**path_values)
    if item.where == "query":
        return client.request(item.method, url, headers=ADMIN, params={item.name: value}, timeout=30)
    return client.request(item.method, url, headers=ADMIN, json=_nest(item.name, value), timeout=30)


def refused(response: httpx.Response, item: BooleanInput) -> bool:
    """A 422 with the service's ``{detail, problems}`` body, a problem located at the input."""
    if response.status_code != 422:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    if not isinstance(body, dict) or not isinstance(body.get("detail"), str):
        return False
    field = item.name.replace("[]", "").split(".")[-1]
    return any(
        str(problem.get("location", "")).split(".")[-1] == field for problem in body.get("problems", [])
    )


def test_every_boolean_input_is_strict(bool_service: Service) -> None:
    spec = httpx.get(bool_service.url + "/openapi.json").json()
    inputs = boolean_inputs(spec)
    missing = BOOLEAN_INPUTS - {(i.method, i.path, i.name) for i in inputs}
    assert not missing, f"the walk did not find {sorted(missing)}"
    # published as booleans (clients generated from /openapi.json send true/false), null only where allowed
    odd = [i for i in inputs if i.types not in ({"boolean"}, {"boolean", "null"})]
    assert not odd, odd
    assert {i.name for i in inputs if i.nullable and i.where == "body"} == {"enabled"}
    failures = []
    with httpx.Client() as client:
        for item in inputs:
            for value in item.bad_values():
                what = f"{item.method} {item.path} {item.where} {item.name}={value!r}"
                try:
                    response = send(client, bool_service, spec, item, value)
                except httpx.TransportError as exc:  # an exception escaping a route ends the connection
                    failures.append(f"{what}: {type(exc).__name__} {exc}")
                    continue
                if not refused(response, item):
                    failures.append(f"{what}: {response.status_code} {response.text[:200]}")
    assert not failures, "\n".join(failures)


def test_true_and_false_are_still_booleans(bool_service: Service) -> None:
    """The strict parsing takes the two values it must: the text ``true``/``false`` of a query string and
    JSON ``true``/``false`` in a body (a dry run, so nothing acts)."""
    partitions = bool_service.get("/api/v1/partitions", under_replicated="false", non_preferred="false")
    assert partitions.status_code == 200, partitions.text
    assert partitions.json()["total"] > 0
    assert bool_service.get("/api/v1/partitions", offline="true").json()["total"] == 0
    election = bool_service.post(
        "/api/v1/actions/preferred-replica-election", json={"scope": "all", "dry_run": True}
    )
    assert election.status_code == 200, election.text
    assert election.json()["dry_run"] is True
    clear = bool_service.post("/api/v1/throttles/clear", json={"dry_run": True, "include_in_use": False})
    assert clear.status_code == 200, clear.text
