"""The embedded parts' HTTP server: a client that goes away mid-answer is not an error.

:class:`http.server.ThreadingHTTPServer` prints a traceback to standard error for every request that
raises, including a scraper that timed out or a process that stopped while its answer was being
written (``BrokenPipeError``, ``ConnectionResetError``). A broker's exporter does not complain about
that, and the demo's console is for the story only: a client gone is logged at debug, any other
failure goes to the module's log with its traceback, never to the console.
"""

from __future__ import annotations

import logging
import sys
from http.server import ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class QuietHTTPServer(ThreadingHTTPServer):
    """A :class:`ThreadingHTTPServer` whose request errors go to logging, not to standard error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):  # BrokenPipe, ConnectionReset, ConnectionAborted
            log.debug("%s went away before its answer was written: %s", client_address, error)
            return
        log.error("request from %s on port %s failed", client_address, self.server_address[1], exc_info=True)
