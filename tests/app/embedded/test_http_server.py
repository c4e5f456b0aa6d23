"""The embedded servers' request errors go to logging: a client gone mid-answer is not a traceback on the
console (the demo's console tells the story only)."""

from __future__ import annotations

import http.client
import logging
import socket
import struct
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

import pytest

from app.embedded.http_server import QuietHTTPServer
from tests.support.reference_cluster import wait_for

pytestmark = pytest.mark.integration

BODY = b"x" * (4 << 20)  # more than any socket buffer holds: the write meets the closed connection


@dataclass
class Served:
    """The server's port, the event that lets ``/slow`` answer, and the test's captured output and log."""

    port: int
    client_gone: threading.Event
    capsys: pytest.CaptureFixture[str]
    caplog: pytest.LogCaptureFixture


@pytest.fixture
def served(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> Iterator[Served]:
    client_gone = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/boom":
                raise ValueError("the handler's own bug")
            if self.path == "/slow":
                client_gone.wait(10)
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

        def log_message(self, format: str, *args: object) -> None:
            pass

    quiet = QuietHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=quiet.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield Served(quiet.server_address[1], client_gone, capsys, caplog)
    finally:
        quiet.shutdown()
        quiet.server_close()
        thread.join(5)


def _get(port: int, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        response.read()
        return int(response.status)


def test_a_client_that_goes_away_mid_answer_leaves_stderr_empty_and_the_server_serving(
    served: Served,
) -> None:
    port, caplog = served.port, served.caplog
    caplog.set_level(logging.DEBUG, logger="app.embedded.http_server")
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    client.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    client.close()
    served.client_gone.set()
    assert _get(port, "/") == 200, "the server goes on serving"
    wait_for(lambda: any("went away" in r.getMessage() for r in caplog.records), message="the debug line")
    assert all(r.levelno == logging.DEBUG for r in caplog.records), caplog.text
    assert served.capsys.readouterr().err == ""


def test_a_handler_that_raises_is_logged_with_its_traceback_not_printed(served: Served) -> None:
    port, caplog = served.port, served.caplog
    with pytest.raises(http.client.RemoteDisconnected):  # closed without an answer
        _get(port, "/boom")
    assert _get(port, "/") == 200
    wait_for(lambda: any(r.levelno == logging.ERROR for r in caplog.records), message="the error line")
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failed[0].exc_info is not None
    assert "the handler's own bug" in caplog.text
    assert served.capsys.readouterr().err == ""
