"""Limits (issue 13, "No request size limit"): the body limit, before the body is read (the middleware alone,
then over real HTTP: a ``Content-Length`` over it, a chunked body over it, a body just under it); every list
and string of every request body bounded in the OpenAPI document; a list over its cap a 422 naming it;
problems lists cut at 100 with their count; the audit row of a big refused request small."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import sqlite3
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from pydantic import SecretStr
from starlette.types import Message, Receive, Scope, Send

from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.limits import (
    DEFAULT_BODY_BYTES,
    MAX_PROBLEMS,
    BodyLimitMiddleware,
    BodyTooLargeError,
    bounded_problems,
)
from app.service.schemas.limits import MAX_BROKERS, MAX_PARTITIONS, MAX_TOPIC_NAME
from app.service.spec import ClusterSpec, ServiceSpec
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.service import ADMIN, OPERATOR, Service, product_service
from tests.support.zookeeper import ZooKeeperEndpoint

REASSIGN = "/api/v1/actions/reassignments"
ELECTION = "/api/v1/actions/preferred-replica-election"


# --- the middleware alone --------------------------------------------------------------------------------


class Recorder:
    """An ASGI app that reads its whole body (as FastAPI does) and answers 200 with its length."""

    def __init__(self) -> None:
        self.called = False
        self.body = b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.called = True
        more = True
        while more:
            message = await receive()
            self.body += message.get("body", b"")
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(len(self.body)).encode()})


def run(
    app: Recorder, headers: list[tuple[bytes, bytes]], chunks: list[bytes], limit: int = 100
) -> tuple[list[Message], int]:
    """Run the middleware on one request; the messages sent, and how many body chunks were received."""
    sent: list[Message] = []
    pulled = 0

    async def receive() -> Message:
        nonlocal pulled
        pulled += 1
        index = pulled - 1
        return {"type": "http.request", "body": chunks[index], "more_body": index < len(chunks) - 1}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "POST", "path": "/x", "headers": headers}
    asyncio.run(BodyLimitMiddleware(app, max_bytes=limit)(scope, receive, send))
    return sent, pulled


@pytest.mark.unit
def test_a_declared_length_over_the_limit_is_a_413_before_any_byte_is_read() -> None:
    app = Recorder()
    sent, pulled = run(app, [(b"content-length", b"101")], [b"x" * 101])
    assert pulled == 0
    assert not app.called
    assert sent[0]["status"] == 413
    assert (b"connection", b"close") in sent[0]["headers"]
    body = json.loads(sent[1]["body"])
    assert body["detail"].startswith("the request body is larger than 100 bytes")
    assert body["problems"] == [
        {"location": "body", "message": body["detail"], "type": "body_too_large", "limit": 100}
    ]


@pytest.mark.unit
def test_a_streamed_body_is_cut_at_the_limit() -> None:
    """No Content-Length (chunked): counted as it comes, and refused at the chunk that passes the limit."""
    app = Recorder()
    sent, pulled = run(app, [], [b"x" * 40] * 10)
    assert pulled == 3  # 120 bytes > 100: the rest is never read
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["problems"][0]["type"] == "body_too_large"


@pytest.mark.unit
def test_a_body_at_the_limit_passes() -> None:
    app = Recorder()
    sent, _ = run(app, [(b"content-length", b"100")], [b"x" * 60, b"x" * 40])
    assert sent[0]["status"] == 200
    assert app.body == b"x" * 100


@pytest.mark.unit
def test_the_counting_receive_raises_an_http_413() -> None:
    """FastAPI re-raises an HTTPException met while reading a body: the service's handler answers it."""
    error = BodyTooLargeError(100)
    assert error.status_code == 413
    assert error.headers == {"Connection": "close"}


@pytest.mark.unit
def test_problems_are_cut_with_their_count() -> None:
    many = [{"n": n} for n in range(250)]
    assert bounded_problems(many) == (many[:MAX_PROBLEMS], 250)
    assert bounded_problems(many[:MAX_PROBLEMS]) == (many[:MAX_PROBLEMS], None)


@pytest.mark.unit
def test_the_body_limit_is_a_service_setting() -> None:
    assert ServiceSettings().max_body_bytes == DEFAULT_BODY_BYTES == 1024 * 1024
    assert ServiceSettings(max_body_bytes=4096).max_body_bytes == 4096
    with pytest.raises(ValueError, match="max_body_bytes"):
        ServiceSettings(max_body_bytes=10)


# --- every list and string of every request body is bounded ----------------------------------------------


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _unbounded(spec: dict[str, Any], schema: dict[str, Any], path: str, seen: set[str]) -> Iterator[str]:
    """Arrays without ``maxItems`` and strings without ``maxLength`` (nor an enum) in a body schema."""
    ref = schema.get("$ref")
    if ref is not None:
        if ref in seen:
            return
        seen = seen | {ref}
    schema = _resolve(spec, schema)
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            yield from _unbounded(spec, option, path, seen)
    kind = schema.get("type")
    if kind == "array":
        if "maxItems" not in schema:
            yield path
        yield from _unbounded(spec, schema.get("items", {}), path + "[]", seen)
    elif kind == "string" and not {"maxLength", "enum", "const"} & set(schema):
        yield path
    for name, field in schema.get("properties", {}).items():
        yield from _unbounded(spec, field, f"{path}.{name}" if path else name, seen)


@pytest.mark.unit
def test_every_list_and_string_of_every_request_body_is_bounded() -> None:
    app = create_app(
        ServiceSpec(
            ServiceSettings(tokens=SecretStr("a:admin:token-of-16-chars")),
            [ClusterSpec(CollectorSpec("127.0.0.1:1"))],
        )
    )
    spec = app.openapi()
    bodies = {}
    for route, operations in spec["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if content is not None:
                bodies[f"{method.upper()} {route}"] = content["schema"]
    assert {f"POST {REASSIGN}", "POST /api/v1/throttles/clear", "POST /api/v1/plans/rebalance"} <= set(
        bodies
    ), "the walk found no body"
    unbounded = {
        f"{operation}: {field}"
        for operation, schema in bodies.items()
        for field in _unbounded(spec, schema, "", set())
    }
    assert not unbounded, f"lists or strings without a bound: {sorted(unbounded)}"


# --- over real HTTP --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited_service(
    zookeeper_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """The product's routes, default settings (a 1 MiB body limit), on a small reference cluster in a
    chroot of its own."""
    store = tmp_path_factory.mktemp("limits") / "store.db"
    with product_service(zookeeper_server, store, "limits") as service:
        yield service


def _connect(service: Service) -> socket.socket:
    url = urlsplit(service.url)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def _head(path: str, extra: str) -> bytes:
    token = OPERATOR["Authorization"]
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: {token}\r\n"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


def _response(sock: socket.socket) -> tuple[int, dict[str, str], dict[str, Any]]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = json.loads(response.read())
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


@pytest.mark.integration
def test_a_content_length_over_the_limit_is_answered_before_the_body_is_sent(
    limited_service: Service,
) -> None:
    """Only the headers go: were the body read, the server would wait for it (and the socket time out)."""
    with _connect(limited_service) as sock:
        sock.sendall(_head(REASSIGN, f"Content-Length: {DEFAULT_BODY_BYTES + 1}\r\n"))
        status, headers, body = _response(sock)
    assert status == 413
    assert headers["connection"] == "close"
    assert body["problems"][0]["type"] == "body_too_large"
    assert body["problems"][0]["limit"] == DEFAULT_BODY_BYTES
    assert "KAFKA_HEALTH_SERVICE__MAX_BODY_BYTES" in body["detail"]


@pytest.mark.integration
def test_a_chunked_body_is_cut_at_the_limit(limited_service: Service) -> None:
    """Chunks past the limit, the body never ended: the answer comes at the limit, not at the end."""
    chunk = b" " * 65536
    with _connect(limited_service) as sock:
        sock.sendall(_head(REASSIGN, "Transfer-Encoding: chunked\r\n"))
        for _ in range(DEFAULT_BODY_BYTES // len(chunk) + 1):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, _, body = _response(sock)
    assert status == 413
    assert body["problems"][0]["type"] == "body_too_large"
    assert set(body) == {"detail", "problems"}


@pytest.mark.integration
def test_a_body_just_under_the_limit_still_works(limited_service: Service) -> None:
    request = json.dumps({"scope": "all"})
    padded = request + " " * (DEFAULT_BODY_BYTES - len(request))
    assert len(padded) == DEFAULT_BODY_BYTES
    response = httpx.post(
        limited_service.url + ELECTION,
        content=padded,
        headers=OPERATOR | {"Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.json()["dry_run"] is True


@pytest.mark.integration
@pytest.mark.parametrize(
    ("route", "body", "location"),
    [
        (REASSIGN, {"partitions": [{}] * (MAX_PARTITIONS + 1)}, "body.partitions"),
        ("/api/v1/plans/rebalance", {"brokers": list(range(MAX_BROKERS + 1))}, "body.brokers"),
        ("/api/v1/throttles/clear", {"topics": ["t" * (MAX_TOPIC_NAME + 1)]}, "body.topics.0"),
        (ELECTION, {"scope": "topics", "topics": ["o" * (MAX_TOPIC_NAME + 1)]}, "body.topics.0"),
    ],
)
def test_a_list_or_string_over_its_cap_is_a_422_naming_it(
    limited_service: Service, route: str, body: dict[str, Any], location: str
) -> None:
    response = limited_service.post(route, json=body, timeout=30)
    assert response.status_code == 422, response.text
    problems = response.json()["problems"]
    assert [p["location"] for p in problems] == [location]
    assert problems[0]["type"] in ("too_long", "string_too_long")


@pytest.mark.integration
def test_100k_bad_items_make_100_problems_and_their_count(limited_service: Service) -> None:
    """Each ``{}`` lacks its topic, partition and replicas: 300,000 problems, the first 100 listed."""
    response = limited_service.post(REASSIGN, json={"partitions": [{}] * 100_000}, timeout=60)
    assert response.status_code == 422
    body = response.json()
    assert len(body["problems"]) == MAX_PROBLEMS
    assert body["problems_total"] == 300_000
    assert body["problems"][0]["location"] == "body.partitions.0.topic"
    assert body["detail"].endswith("; and 299,995 more")
    assert len(response.content) < 20_000


@pytest.mark.integration
def test_the_planners_problems_are_cut_and_their_audit_row_is_small(limited_service: Service) -> None:
    """5,000 partitions of topics that do not exist: the planner finds 5,000 problems; the 422 lists 100
    and counts them, its detail names 5; the audit row keeps 100 messages, the count and the digest."""
    items = [{"topic": f"nope-{n}", "partition": 0, "replicas": [0, 1, 2]} for n in range(5000)]
    response = limited_service.post(REASSIGN, json={"partitions": items}, timeout=60)
    assert response.status_code == 422
    body = response.json()
    assert len(body["problems"]) == MAX_PROBLEMS
    assert body["problems_total"] == 5000
    assert body["problems"][0]["topic"] == "nope-0"
    assert body["detail"].endswith("; and 4,995 more (5,000 problems)")
    assert len(response.content) < 30_000
    (entry,) = limited_service.get("/api/v1/audit", headers=ADMIN, limit=1).json()
    assert entry["outcome"] == "refused"
    assert entry["detail"]["problems_total"] == 5000
    assert entry["detail"]["partitions"] == 5000
    assert len(entry["detail"]["problems"]) == 100
    assert len(entry["detail"]["request_sha256"]) == 64
    database = limited_service.store_url.removeprefix("sqlite:///")
    with sqlite3.connect(database) as conn:
        (size,) = conn.execute(
            "SELECT length(detail) FROM audit_log ORDER BY sequence DESC LIMIT 1"
        ).fetchone()
    assert size < 16_000
