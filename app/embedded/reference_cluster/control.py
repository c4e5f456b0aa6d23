"""The reference cluster's control port (127.0.0.1): its state as JSON and fault injection.

``GET /``; ``POST /brokers/{id}/stop`` (body ``{"controlled": true}`` for a controlled shutdown),
``/brokers/{id}/start``, ``/brokers/{id}/stall``, ``/brokers/{id}/slow``, ``/brokers/{id}/resume``,
``/brokers/{id}/log-dirs/{n}/fail``, ``POST /controller/stop``, ``POST /load/skew``, ``POST /topics``,
``POST /topics/{topic}/partitions/{p}/corrupt-state`` (the state znode becomes unparseable),
``POST /migration/start`` (body ``{"kraft_controller_id": 3000, "kraft_controller_epoch": 1}``, both
optional: a simulated ZK→KRaft migration).
Each answers with the cluster's new state; 404, 409 and 422 carry ``{"error": message}``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import ValidationError

from app.embedded.reference_cluster.admin import AdminError
from app.embedded.reference_cluster.cluster import ClusterError, ReferenceCluster
from app.embedded.reference_cluster.config import TopicSpec
from app.embedded.reference_cluster.traffic import SkewError
from app.validation import format_validation_error
from collectors.kafka.model import TopicPartition

MAX_BODY_BYTES = 64 * 1024

_BROKER_ACTION = re.compile(r"^/brokers/(?P<id>[^/]+)/(?P<action>stop|start|stall|slow|resume)$")
_LOG_DIR_FAIL = re.compile(r"^/brokers/(?P<id>[^/]+)/log-dirs/(?P<dir>[^/]+)/fail$")
_CORRUPT_STATE = re.compile(r"^/topics/(?P<topic>[^/]+)/partitions/(?P<partition>[^/]+)/corrupt-state$")


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _int(text: str, what: str) -> int:
    if not text.lstrip("-").isdigit():
        raise RequestError(404, f"{what} {text!r} is not a number")
    return int(text)


class ControlApi:
    """The control routes without HTTP: ``handle(method, path, body) -> (status, JSON)``. The control port
    serves them, and so does ``kafka-health serve`` under ``/api/v1/reference`` on the embedded cluster."""

    def __init__(self, cluster: ReferenceCluster) -> None:
        self.cluster = cluster

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """Route one request; returns (status, JSON body). Separate from HTTP so it reads as a table."""
        try:
            if method == "GET" and path == "/":
                return 200, self.cluster.describe()
            if method != "POST":
                raise RequestError(404, f"no route for {method} {path}")
            payload = _json_body(body)
            action = self._route_post(path, payload)
            action()
            return 200, self.cluster.describe()
        except RequestError as exc:
            return exc.status, {"error": exc.message}
        except ClusterError as exc:
            return exc.status, {"error": exc.message}
        except (SkewError, AdminError) as exc:
            return 422 if isinstance(exc, SkewError) else 409, {"error": str(exc)}
        except ValidationError as exc:
            return 422, {"error": format_validation_error(exc)}

    def _route_post(self, path: str, payload: dict[str, Any]) -> Callable[[], object]:
        cluster = self.cluster
        if match := _BROKER_ACTION.match(path):
            broker_id, action = _int(match["id"], "broker"), match["action"]
            if action == "stop":
                controlled = payload.get("controlled", False)
                if not isinstance(controlled, bool):
                    raise RequestError(422, "controlled must be true or false")
                return lambda: cluster.stop_broker(broker_id, controlled=controlled)
            return {
                "start": lambda: cluster.start_broker(broker_id),
                "stall": lambda: cluster.stall_follower(broker_id),
                "slow": lambda: cluster.slow_follower(broker_id),
                "resume": lambda: cluster.resume_follower(broker_id),
            }[action]
        if match := _LOG_DIR_FAIL.match(path):
            broker_id, log_dir = _int(match["id"], "broker"), _int(match["dir"], "log dir")
            return lambda: cluster.fail_log_dir(broker_id, log_dir)
        if match := _CORRUPT_STATE.match(path):
            tp = TopicPartition(match["topic"], _int(match["partition"], "partition"))
            return lambda: cluster.corrupt_partition_state(tp)
        if path == "/controller/stop":
            return cluster.stop_controller
        if path == "/migration/start":
            kraft_id = payload.get("kraft_controller_id", 3000)
            kraft_epoch = payload.get("kraft_controller_epoch", 1)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (kraft_id, kraft_epoch)):
                raise RequestError(422, "kraft_controller_id and kraft_controller_epoch must be integers")
            return lambda: cluster.start_migration(kraft_id, kraft_epoch)
        if path == "/load/skew":
            return lambda: cluster.skew(payload)
        if path == "/topics":
            spec = TopicSpec.model_validate(payload)
            return lambda: cluster.create_topic(spec)
        raise RequestError(404, f"no route for POST {path}")


class ControlServer:
    def __init__(self, cluster: ReferenceCluster, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cluster = cluster
        self.api = ControlApi(cluster)
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="control-port", daemon=True
        )  # a short poll interval: close() waits for it

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        control = self

        class Handler(BaseHTTPRequestHandler):
            def _respond(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    status, body = 413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"}
                else:
                    status, body = control.api.handle(
                        method, self.path.split("?")[0], self.rfile.read(length)
                    )
                data = json.dumps(body, indent=2).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._respond("GET")

            def do_POST(self) -> None:
                self._respond("POST")

            def do_PUT(self) -> None:
                self._respond("PUT")

            def do_DELETE(self) -> None:
                self._respond("DELETE")

            def do_PATCH(self) -> None:
                self._respond("PATCH")

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


def _json_body(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(422, f"body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise RequestError(422, "body must be a JSON object")
    return payload
