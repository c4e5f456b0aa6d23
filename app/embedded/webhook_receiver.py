"""A small webhook receiver: the reference for what a receiver does, and the tests' real HTTP endpoint.

It verifies each request's signature (401 when it does not verify), deduplicates on ``Idempotency-Key``
(a key it accepted before is answered 200 again and not accepted twice) and records every request. What
it answers can be changed while it runs (:meth:`WebhookReceiver.respond_with`), and it can be stopped and
started again on the same port, to play a receiver that fails or is down::

    with WebhookReceiver(secret="a-long-shared-secret") as receiver:
        ...  # create a webhook with url=receiver.url and the same secret
        receiver.accepted()  # {idempotency key: parsed body}, each key once
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any, Self

from app.embedded.http_server import QuietHTTPServer
from app.webhooks.signing import IDEMPOTENCY_HEADER, SignatureError, verify

__all__ = ["Answer", "ReceivedRequest", "Responder", "WebhookReceiver"]

Answer = int | tuple[int, Mapping[str, str]] | tuple[int, Mapping[str, str], bytes]
"""A status, with extra headers, and with a body of its own (default: ``{"status": N}``)."""
Responder = Callable[["ReceivedRequest"], Answer]
"""Decides the status (and extra headers, and body) of the answer to a request whose signature verified."""


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    path: str
    headers: Mapping[str, str]
    """Header names in lower case."""
    body: bytes
    idempotency_key: str | None
    signature_error: str | None
    """Why the signature did not verify (None: it did, or the receiver has no secret)."""
    received_at: float
    """``time.time()`` when the request arrived."""
    status: int = 0
    """What the receiver answered."""
    duplicate: bool = False
    """Answered 2xx for a key accepted before (not accepted again)."""

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """An HTTP server on ``host:port`` (port 0: a free one, kept across restarts) that takes POSTs."""

    def __init__(
        self,
        secret: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tolerance_s: float = 300.0,
    ) -> None:
        self.secret = secret
        self.host = host
        self.port = port
        self.tolerance_s = tolerance_s
        self._responder: Responder = lambda _request: 200
        self._lock = threading.Lock()
        self._requests: list[ReceivedRequest] = []
        self._accepted: dict[str, ReceivedRequest] = {}
        self._server: QuietHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- running

    def start(self) -> None:
        if self._server is not None:
            return
        server = QuietHTTPServer((self.host, self.port), self._handler())
        self.port = int(server.server_address[1])
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="webhook-receiver")
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (connections are refused until :meth:`start`)."""
        server, self._server = self._server, None
        thread, self._thread = self._thread, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    @property
    def running(self) -> bool:
        return self._server is not None

    def respond_with(self, responder: int | Responder) -> None:
        """Answer every verified request with this status, or as this function decides."""
        if isinstance(responder, int):
            status = responder
            self._responder = lambda _request: status
        else:
            self._responder = responder

    # -- what arrived

    def requests(self) -> list[ReceivedRequest]:
        """Every request, in arrival order."""
        with self._lock:
            return list(self._requests)

    def accepted(self) -> dict[str, Any]:
        """Idempotency key → parsed body of every request accepted (answered 2xx the first time)."""
        with self._lock:
            return {key: request.json() for key, request in self._accepted.items()}

    def accepted_requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._accepted.values())

    # -- serving

    def _handle(
        self, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Mapping[str, str], bytes | None]:
        lower = {name.lower(): value for name, value in headers.items()}
        key = lower.get(IDEMPOTENCY_HEADER.lower())
        error = None
        if self.secret is not None:
            try:
                verify(self.secret, lower, body, self.tolerance_s)
            except SignatureError as exc:
                error = str(exc)
        request = ReceivedRequest(path, lower, body, key, error, time.time())
        extra: Mapping[str, str] = {}
        content: bytes | None = None
        with self._lock:
            duplicate = False
            if error is not None:
                status = 401
            elif key is not None and key in self._accepted:
                status, duplicate = 200, True
            else:
                answer = self._responder(request)
                if isinstance(answer, int):
                    status = answer
                elif len(answer) == 2:
                    status, extra = answer
                else:
                    status, extra, content = answer
            request = ReceivedRequest(path, lower, body, key, error, request.received_at, status, duplicate)
            self._requests.append(request)
            if 200 <= status < 300 and key is not None and not duplicate:
                self._accepted[key] = request
        return status, extra, content

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: one request per connection, so that a stopped receiver serves nothing more on a
            # connection a client kept open

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                status, extra, content = receiver._handle(self.path, dict(self.headers.items()), body)
                answer = json.dumps({"status": status}).encode() if content is None else content
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
