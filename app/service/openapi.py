"""The OpenAPI document, made to say what the service really answers.

FastAPI documents its own ``HTTPValidationError`` for every 422 and nothing for the statuses a dependency
raises. The service answers every error with one body, :class:`~app.service.schemas.common.Problem`
(``{detail, problems}``, see :mod:`app.service.app`), so :func:`install_openapi` replaces ``app.openapi``
with a builder that documents, on each operation, every error status it can return, read from the route
itself rather than listed by hand:

- **401** on every operation behind a role check (:class:`~app.service.deps.RoleCheck`), **403** where that
  role is above the lowest (a viewer route cannot answer 403: every token is at least a viewer);
- **422** where the operation takes a path or query parameter or a body (validation, and the routes'
  and the action runner's own refusals);
- **400** (a body that cannot be read, e.g. not UTF-8) and **413** (over the request body limit) where it
  takes a body;
- **503** where it needs the store (:func:`~app.service.deps.store_of`,
  :func:`~app.service.deps.webhooks_of`) or a cluster (:func:`~app.service.deps.cluster_of`: its
  ZooKeeper not read yet);
- where it needs a cluster, **404** at ``/api/v1/clusters/{cluster}/...`` (no cluster of that name) and
  **409** at the unscoped path (the service watches several clusters: the path must name one);
- **404**, **409** and any other status the route declares in ``responses=`` (a lookup of a path id, a
  state conflict), given the problem body unless the route names another model (``/readyz``'s 503).

The bearer security scheme comes from the role checks' own dependency
(:data:`~app.service.deps.BEARER_SCHEME`).
``HTTPValidationError`` and ``ValidationError`` are dropped from the components: nothing answers them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from app.service.auth import Role
from app.service.deps import RoleCheck, cluster_of, store_of, webhooks_of
from app.service.schemas.common import Problem

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")

DESCRIPTIONS = {
    400: "The body could not be read (not UTF-8, or not the declared content type).",
    401: "No bearer token, a malformed Authorization header, or an unknown or revoked token.",
    403: "The token's role is below the one this operation needs.",
    404: "Nothing with that id or name (on a cluster's path: or no watched cluster of that name).",
    409: "The thing is not in a state that allows this (see detail); on an unscoped cluster route: "
    "several clusters are watched, use /api/v1/clusters/{name}/... (problems name them).",
    413: "The request body is larger than the service's limit.",
    422: "Invalid input: each problem named in `problems` (location, message, type).",
    503: "No store is configured, the cluster's ZooKeeper has not been read yet, or the live view cannot "
    "be trusted now (see detail).",
}
WWW_AUTHENTICATE = {
    "WWW-Authenticate": {
        "description": '`Bearer`, with `error="invalid_token"` for an unknown token',
        "schema": {"type": "string"},
    }
}
STORE_DEPENDENCIES = (store_of, webhooks_of)


def _calls(dependant: Dependant) -> Iterator[Any]:
    """Every callable in the dependency tree, the route's endpoint excluded."""
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def _can_fail(parameter: dict[str, Any]) -> bool:
    """Whether a value of ``parameter`` can fail validation: a required query value can be missing, and
    anything but an unconstrained string can be malformed (a path's free text, a topic name, cannot)."""
    if parameter.get("required") and parameter.get("in") != "path":
        return True
    schema = parameter.get("schema", {})
    variants = [v for v in schema.get("anyOf", [schema]) if v.get("type") != "null"]
    constraints = {"enum", "pattern", "minLength", "maxLength", "format", "const"}
    return any(v.get("type") != "string" or constraints & set(v) for v in variants)


def error_statuses(route: APIRoute, operation: dict[str, Any]) -> set[int]:
    """The error statuses ``route`` can answer, from its dependencies, its inputs (the ``operation``'s
    parameters and body, as FastAPI documented them) and its ``responses=``."""
    statuses = {int(code) for code in route.responses if str(code).isdigit() and int(code) >= 400}
    calls = list(_calls(route.dependant))
    roles = [call.role for call in calls if isinstance(call, RoleCheck)]
    if roles:
        statuses.add(401)
        if max(roles) > min(Role):
            statuses.add(403)
    if any(_can_fail(p) for p in operation.get("parameters", [])) or "requestBody" in operation:
        statuses.add(422)
    if "requestBody" in operation:
        statuses |= {400, 413}
    if any(call in STORE_DEPENDENCIES for call in calls):
        statuses.add(503)
    if cluster_of in calls:
        statuses |= {503, 404 if "{cluster}" in route.path_format else 409}
    return statuses


def _document(operation: dict[str, Any], statuses: set[int]) -> None:
    """Give ``operation`` exactly ``statuses`` as its errors, each with the problem body (unless the route
    named another model) and a description that says when; its other responses stay as they are."""
    responses: dict[str, Any] = operation.get("responses", {})
    for code in list(responses):
        if code.isdigit() and int(code) >= 400 and int(code) not in statuses:
            del responses[code]  # e.g. FastAPI's own 422 on a path whose only parameter is free text
    for status in statuses:
        response = responses.setdefault(str(status), {})
        schema = response.get("content", {}).get("application/json", {}).get("schema")
        if schema is None or schema.get("$ref", "").endswith("/HTTPValidationError"):
            response["content"] = {"application/json": {"schema": PROBLEM_REF}}
        generic = (None, "", "Validation Error", HTTPStatus(status).phrase)
        if response.get("description") in generic:
            response["description"] = DESCRIPTIONS.get(status, HTTPStatus(status).phrase)
        if status == 401:
            response["headers"] = WWW_AUTHENTICATE
    operation["responses"] = dict(sorted(responses.items()))


def build_openapi(app: FastAPI, routers: Sequence[APIRouter]) -> dict[str, Any]:
    """The document FastAPI builds, with the error statuses and bodies of each operation of ``routers``
    (those ``app`` includes) made true. The routers' own routes are read, with their full paths, rather
    than ``app.routes``, whose shape for included routers is FastAPI's internal business."""
    spec = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
    )
    paths: dict[str, Any] = spec.get("paths", {})
    routes = [r for router in routers for r in router.routes if isinstance(r, APIRoute)]
    for route in routes:
        if not route.include_in_schema:
            continue
        for method in route.methods or ():
            operation = paths.get(route.path_format, {}).get(method.lower())
            if operation is not None:
                _document(operation, error_statuses(route, operation))
    schemas: dict[str, Any] = spec.setdefault("components", {}).setdefault("schemas", {})
    for name in FASTAPI_VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    if "Problem" not in schemas:  # no route declared it: add it from the model
        schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    return spec


def install_openapi(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Serve :func:`build_openapi`'s document at ``/openapi.json`` (built once, on the first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, routers)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
