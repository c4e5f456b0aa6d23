"""Schemathesis against the running service: every operation of ``/openapi.json``, with an admin token, on
a small reference cluster. Fails on any 5xx, any status the document does not list for the operation, any
body that does not match its documented schema and any undocumented content type.

Bounded for CI: ``KAFKA_HEALTH_FUZZ_EXAMPLES`` examples per operation (default :data:`CI_EXAMPLES`) and a
fixed seed (``derandomize``), so a run is the same run every time. ``make fuzz`` runs it with more examples
(docs/api.md, "Fuzzing"). Real executions are never started: every JSON object sent to an operation that
takes a ``dry_run`` is sent with ``"dry_run": true``, whatever was generated (anything but a literal
``true`` is taken for a real run: ``0`` or ``"no"`` once ran one), and webhook URLs are pointed at the
service's own ``/healthz`` (a test send goes to loopback, never to a generated host). That a ``dry_run``
other than ``true``/``false`` is refused is tests/app/service/test_input_booleans.py's to show.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from pydantic import SecretStr
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.cli import Cli
from tests.support.reference_cluster import wait_for
from tests.support.serve_process import ADMIN, Serve
from tests.support.zookeeper import ZooKeeperEndpoint, own_chroot

pytestmark = [pytest.mark.integration, pytest.mark.fuzz]

CI_EXAMPLES = 12
EXAMPLES = int(os.environ.get("KAFKA_HEALTH_FUZZ_EXAMPLES", CI_EXAMPLES))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
SCOPED = "/api/v1/clusters/{cluster}/"
WEBHOOK_OPERATIONS = {("POST", "/api/v1/webhooks"), ("PATCH", "/api/v1/webhooks/{webhook_id}")}


def loopback_webhook_url(url: Any, base_url: str) -> Any:
    """A generated http(s) URL with a host, pointed at the service itself (anything else stays: the
    service refuses it with a 422 and stores nothing)."""
    if not isinstance(url, str):
        return url
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        return url
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return url
    return base_url + "/healthz"


def acting_operations(spec: dict[str, Any]) -> set[tuple[str, str]]:
    """(method, path) of every operation whose JSON body has a ``dry_run``: those that can act."""
    schemas = spec.get("components", {}).get("schemas", {})

    def objects(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if "$ref" in schema:
            yield from objects(schemas[schema["$ref"].rsplit("/", 1)[1]])
        for option in schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", []):
            yield from objects(option)
        if "properties" in schema:
            yield schema

    found = set()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            if any("dry_run" in o["properties"] for o in objects(body.get("schema", {}))):
                found.add((method.upper(), path))
    return found


def without_executions(
    method: str,
    path: str,
    body: Any,
    base_url: str,
    acting: set[tuple[str, str]],
) -> Any:
    """``body`` made a dry run (``"dry_run": true``, whatever it was) if the operation can act
    (``acting``: :func:`acting_operations`), and webhook URLs sent to loopback. A body that is not a JSON
    object carries no ``dry_run``: the operation refuses it, or (no body) does its default dry run."""
    if not isinstance(body, dict):
        return body
    body = dict(body)
    if (method, path) in acting:
        body["dry_run"] = True
    if (method, path) in WEBHOOK_OPERATIONS and "url" in body:
        body["url"] = loopback_webhook_url(body["url"], base_url)
    return body


@pytest.fixture(scope="module")
def served(zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``kafka-health serve`` on ``kafka-health reference-cluster`` (3 brokers, a topic), both child
    processes in a chroot of their own; the service's URL. Child processes, not threads: hypothesis
    refuses to generate while another thread of the test process draws from ``random`` (kazoo does)."""
    workdir = tmp_path_factory.mktemp("fuzz")
    with own_chroot(zookeeper_server, "fuzz") as zk_connect:
        cluster = Cli(
            "reference-cluster", "--zookeeper", zk_connect, "--brokers", "3", "--topic", "orders:4:3"
        )
        serve: Serve | None = None
        try:
            cluster.expect(r"^ready")
            # the webhook URLs point at the service's own /healthz on loopback, which the egress policy
            # refuses unless allowed, as an on-prem receiver would be
            serve = Serve(
                zk_connect,
                f"sqlite:///{workdir / 'store.db'}",
                workdir / "serve.log",
                KAFKA_HEALTH_SERVICE__WEBHOOKS__ALLOW_NETWORKS="127.0.0.1/32",
            )
            wait_for(serve.ready, timeout=60, message="kafka-health serve ready")
            yield serve.url
        finally:
            if serve is not None:
                serve.stop()
            cluster.stop(signal.SIGTERM)
            cluster.kill_everything()


class TokenSession(requests.Session):
    """Sends every request with the token: schemathesis leaves the security header out of some cases (to
    see a 401), and a 401 says nothing of the operation behind it."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__()
        self.token_headers = headers

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        request.headers.update(self.token_headers)
        return super().send(request, **kwargs)


def _property(
    operation: schemathesis.APIOperation[Any, Any, Any, Any],
    mode: GenerationMode,
    service_url: str,
    headers: dict[str, str],
    examples: int,
    statuses: Counter[int],
    acting: set[tuple[str, str]],
    cluster: str | None = None,
) -> Callable[[], None]:
    """The hypothesis test of one operation in one mode; counts the statuses it got in ``statuses``.
    ``acting``: the operations whose bodies are made dry runs. ``cluster``: the ``{cluster}`` of a scoped
    operation (the served cluster's key), else generated."""
    method, path = operation.method.upper(), operation.path
    session = TokenSession(headers)

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: the first failure is reported as found
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case[Any]) -> None:
        case.body = without_executions(method, path, case.body, service_url, acting)
        if cluster is not None and case.path_parameters is not None:
            case.path_parameters["cluster"] = cluster
        response = case.call(base_url=service_url, session=session, timeout=30)
        statuses[response.status_code] += 1
        case.validate_response(response, checks=CHECKS, headers=headers)

    return run


def _describe(exc: BaseException) -> str:
    """The failure's message, with those of the exceptions it groups (hypothesis's flaky reports)."""
    text = f"{type(exc).__name__}: {str(exc).strip()}"
    for inner in getattr(exc, "exceptions", ()):
        text += "\n  - " + _describe(inner).replace("\n", "\n    ")
    return text


@dataclass
class FuzzRun:
    operations: int = 0
    failures: list[str] = field(default_factory=list)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    """Per operation (``"GET /path"``), the statuses answered."""

    def requests(self) -> int:
        return sum(sum(c.values()) for c in self.statuses.values())


def fuzz(service_url: str, headers: dict[str, str], examples: int) -> FuzzRun:
    """Every operation of the service's document, up to ``examples`` positive and ``examples`` negative
    cases each (hypothesis, derandomized): the operations run, the failures found (one line per operation
    and mode, with the first failure's message) and the statuses answered. The operations at
    ``/api/v1/clusters/{cluster}/...`` run the handlers of the unscoped ones again: a quarter of the
    examples, the positive ones on the served cluster (its key), the negative ones on generated names."""
    schema = schemathesis.openapi.from_url(service_url + "/openapi.json")
    key = httpx.get(service_url + "/api/v1/clusters", headers=headers).json()[0]["key"]
    acting = acting_operations(httpx.get(service_url + "/openapi.json").json())
    assert ("POST", "/api/v1/actions/preferred-replica-election") in acting, acting  # the walk found them
    run = FuzzRun()
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # an invalid operation raises here
        run.operations += 1
        method, path = operation.method.upper(), operation.path
        statuses = run.statuses.setdefault(f"{method} {path}", Counter())
        modes = [GenerationMode.POSITIVE]
        if operation.definition.raw.get("parameters") or "requestBody" in operation.definition.raw:
            modes.append(GenerationMode.NEGATIVE)  # nothing to get wrong in an operation without input
        scoped = path.startswith(SCOPED)
        for mode in modes:
            cluster = key if scoped and mode is GenerationMode.POSITIVE else None
            count = max(3, examples // 4) if scoped else examples
            try:
                _property(operation, mode, service_url, headers, count, statuses, acting, cluster)()
            except (Exception, BaseExceptionGroup) as exc:  # every operation runs; all are listed at the end
                run.failures.append(f"{method} {path} ({mode.value}): {_describe(exc)[:3000]}")
    return run


def test_every_operation_answers_as_documented(served: str) -> None:
    run = fuzz(served, ADMIN, EXAMPLES)
    assert run.operations >= 33, run.operations  # the product's operations, none skipped
    assert not run.failures, "\n\n".join(run.failures)
    # the admin token went with every request: no operation was fuzzed behind its 401
    refused = {op: c for op, c in run.statuses.items() if c[401] or c[403]}
    assert not refused, refused
    # and the fuzzing reached the operations themselves: most answered a 2xx at least once
    reached = [op for op, c in run.statuses.items() if any(200 <= s < 300 for s in c)]
    assert len(reached) >= len(run.statuses) // 2, run.statuses
    print(f"{run.operations} operations, {run.requests()} requests:", dict(run.statuses))


@pytest.mark.unit
def test_a_real_execution_is_sent_as_a_dry_run() -> None:
    """Every operation that takes a ``dry_run`` is found in the document, and its object bodies go with
    ``"dry_run": true`` whatever was generated: ``0``, ``"no"`` or ``"false"`` is not trusted to be refused
    (each once ran a real election or removed throttles)."""
    app = create_app(
        ServiceSpec(
            ServiceSettings(tokens=SecretStr("ci:viewer:not-a-real-token")),
            [ClusterSpec(CollectorSpec("127.0.0.1:1"))],
        )
    )
    acting = acting_operations(app.openapi())
    unscoped = {
        ("POST", "/api/v1/actions/preferred-replica-election"),
        ("POST", "/api/v1/actions/reassignments"),
        ("POST", "/api/v1/actions/{action_id}/rollback"),
        ("POST", "/api/v1/actions/demote-broker"),
        ("POST", "/api/v1/actions/promote-broker"),
        ("POST", "/api/v1/actions/decommission-broker"),
        ("POST", "/api/v1/throttles/clear"),
    }
    assert acting == unscoped | {(m, p.replace("/api/v1/", SCOPED)) for m, p in unscoped}
    base = "http://127.0.0.1:1"
    election = ("POST", "/api/v1/actions/preferred-replica-election")
    values: tuple[Any, ...] = (False, 0, "no", "false", "off", None, [], True)
    for value in values:
        body = {"dry_run": value, "scope": "all"}
        assert without_executions(*election, body, base, acting) == {"dry_run": True, "scope": "all"}
    assert without_executions(*election, {}, base, acting) == {"dry_run": True}
    assert without_executions(*election, [1], base, acting) == [1]  # not an object: a 422
    assert without_executions(*election, None, base, acting) is None  # no body: the default dry run
    assert without_executions("POST", "/x", {"dry_run": 0}, base, acting) == {"dry_run": 0}  # cannot act
    hook = ("POST", "/api/v1/webhooks")
    assert without_executions(*hook, {"url": "http://169.254.169.254/x"}, base, acting) == {
        "url": base + "/healthz"
    }
    assert without_executions(*hook, {"url": "not a url"}, base, acting) == {"url": "not a url"}
