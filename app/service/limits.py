"""The service's size limits: the request body limit (an ASGI middleware) and the error bodies' problem cap.

Without them one request could cost the service what a cluster's worth of requests does: a 16.7 MB dry
run of a reassignment was parsed whole, validated item by item, answered with a 67 MB list of problems and
written to the audit trail as 16.3 MB, in 9.8 s of CPU during which ``GET /api/v1/cluster`` went from 74 ms
to 2.97 s at worst (issue 13). So:

* :class:`BodyLimitMiddleware` refuses a body larger than ``service.max_body_bytes`` before anything parses
  it: a ``Content-Length`` over the limit is answered 413 at once, without reading a byte of the body; a
  body without one (chunked) is counted as it streams in and cut at the limit, 413 too;
* :func:`bounded_problems` keeps the first :data:`MAX_PROBLEMS` problems of an error body and counts the
  rest (``problems_total``), so that 100,000 bad items do not make a 100,000-item answer.

The lists and strings of the request bodies are bounded where they are declared
(:mod:`app.service.schemas.limits`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_BODY_BYTES = 1024 * 1024
"""1 MiB: ZooKeeper's default ``jute.maxbuffer``, the largest znode Kafka's own reassignment tool can write;
about 17,000 partitions of a reassignment, or every partition of an election by name."""
MIN_BODY_BYTES = 1024
"""Below this even a webhook's definition would not fit."""
MAX_BODY_BYTES = 1024 * 1024 * 1024
"""1 GiB: a setting above it is a typo, not a plan."""

MAX_PROBLEMS = 100
"""Problems listed in an error body; ``problems_total`` counts them all when there are more."""
MAX_PROBLEMS_IN_DETAIL = 5
"""Problems summarized in the one-line ``detail`` of a validation error."""

SETTING = "KAFKA_HEALTH_SERVICE__MAX_BODY_BYTES"


def too_large_detail(limit: int) -> str:
    return f"the request body is larger than {limit:,} bytes (the service's limit, {SETTING})"


def too_large_body(limit: int) -> dict[str, Any]:
    """The 413 body: the service's problem shape, one problem naming the limit."""
    message = too_large_detail(limit)
    return {
        "detail": message,
        "problems": [{"location": "body", "message": message, "type": "body_too_large", "limit": limit}],
    }


class BodyTooLargeError(HTTPException):
    """Raised by the counting ``receive`` when a streamed body passes the limit; FastAPI re-raises an
    HTTPException met while reading a body, so the service's handler answers it (413,
    :func:`too_large_body`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_detail(limit), headers={"Connection": "close"})
        self.limit = limit


class BodyLimitMiddleware:
    """Pure ASGI (no request object, nothing buffered): cheap on every request, and the only way to answer
    before the body is read. ``Connection: close`` on the 413: the rest of the body is never read, so the
    connection cannot carry another request."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLargeError(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLargeError:
            if started:  # an app that answered before reading all of its body: nothing more to say
                raise
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(too_large_body(self.max_bytes)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed one before we see it
    return None


def bounded_problems(
    problems: Sequence[dict[str, Any]], limit: int = MAX_PROBLEMS
) -> tuple[list[dict[str, Any]], int | None]:
    """The first ``limit`` problems, and how many there are in all when some were left out (else None)."""
    if len(problems) <= limit:
        return list(problems), None
    return list(problems[:limit]), len(problems)
