"""The reference cluster's control port (127.0.0.1): its state as JSON and fault injection.

``GET /``; ``POST /brokers/{id}/stop`` (body ``{"controlled": true}`` for a controlled shutdown),
``/brokers/{id}/start``, ``/brokers/{id}/stall``, ``/brokers/{id}/slow``, ``/brokers/{id}/resume``,
``/brokers/{id}/log-dirs/{n}/fail``, ``/brokers/{id}/log-dirs/{n}/fill`` (body ``{"used_ratio": 0.9,
"bytes_per_s": 5e6}``, either or both), ``/brokers/{id}/metrics`` (body ``{"set": {"<series>": value}}``
or ``{"reset": true}``), ``POST /controller/stop``, ``POST /load/skew``, ``POST /topics``,
``POST /topics/{topic}/partitions/{p}/corrupt-state`` (the state znode becomes unparseable),
``POST /topics/{topic}/partitions/{p}/append`` (body ``{"records": N}``: N records written as an
``acks=all`` producer would, answered once the high watermark has them),
``POST /migration/start`` (body ``{"kraft_controller_id": 3000, "kraft_controller_epoch": 1}``, both
optional: a simulated ZK→KRaft migration), ``POST /consumer-groups`` (body ``{"name", "topics", "members",
"commit_interval_ms", "rate_factor"}``: a simulated consumer group) and
``POST /consumer-groups/{name}/stop|start|stall|slow|rewind`` (``slow`` and ``start`` take
``{"rate_factor": 0.5}``, ``rewind`` takes ``{"records": N}``).
Each answers with the cluster's new state; 404, 409 and 422 carry ``{"error": message}``.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from pydantic import ValidationError

from app.embedded.http_server import QuietHTTPServer
from app.embedded.reference_cluster.admin import AdminError
from app.embedded.reference_cluster.cluster import ClusterError, ReferenceCluster
from app.embedded.reference_cluster.config import ConsumerGroupSpec, TopicSpec
from app.embedded.reference_cluster.traffic import SkewError
from app.validation import format_validation_error
from collectors.kafka.model import TopicPartition

MAX_BODY_BYTES = 64 * 1024

_BROKER_ACTION = re.compile(r"^/brokers/(?P<id>[^/]+)/(?P<action>stop|start|stall|slow|resume)$")
_LOG_DIR_FAIL = re.compile(r"^/brokers/(?P<id>[^/]+)/log-dirs/(?P<dir>[^/]+)/fail$")
_LOG_DIR_FILL = re.compile(r"^/brokers/(?P<id>[^/]+)/log-dirs/(?P<dir>[^/]+)/fill$")
_BROKER_METRICS = re.compile(r"^/brokers/(?P<id>[^/]+)/metrics$")
_GROUP_ACTION = re.compile(r"^/consumer-groups/(?P<name>[^/]+)/(?P<action>stop|start|stall|slow|rewind)$")
_CORRUPT_STATE = re.compile(r"^/topics/(?P<topic>[^/]+)/partitions/(?P<partition>[^/]+)/corrupt-state$")
_APPEND = re.compile(r"^/topics/(?P<topic>[^/]+)/partitions/(?P<partition>[^/]+)/append$")


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _int(text: str, what: str) -> int:
    if not text.lstrip("-").isdigit():
        raise RequestError(404, f"{what} {text!r} is not a number")
    return int(text)


def _number(value: Any) -> float | None:
    """A finite JSON number (not a boolean), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _fill_body(payload: dict[str, Any]) -> tuple[float | None, float | None]:
    """``{"used_ratio": 0..1, "bytes_per_s": N}``, at least one of them."""
    allowed = {"used_ratio", "bytes_per_s"}
    if not payload or set(payload) - allowed:
        raise RequestError(
            422, f"a fill body is an object with used_ratio and/or bytes_per_s, got {payload!r}"
        )
    used_ratio = bytes_per_s = None
    if "used_ratio" in payload:
        used_ratio = _number(payload["used_ratio"])
        if used_ratio is None or not 0.0 <= used_ratio <= 1.0:
            raise RequestError(422, f"used_ratio must be a number in [0, 1], got {payload['used_ratio']!r}")
    if "bytes_per_s" in payload:
        bytes_per_s = _number(payload["bytes_per_s"])
        if bytes_per_s is None:
            raise RequestError(422, f"bytes_per_s must be a finite number, got {payload['bytes_per_s']!r}")
    return used_ratio, bytes_per_s


def _metrics_body(payload: dict[str, Any]) -> tuple[dict[str, float], bool]:
    """``{"set": {"<series name as served>": value, ...}, "reset": true}``, at least one of them."""
    allowed = {"set", "reset"}
    if not payload or set(payload) - allowed:
        raise RequestError(422, f"a metrics body is an object with set and/or reset, got {payload!r}")
    reset = payload.get("reset", False)
    if not isinstance(reset, bool):
        raise RequestError(422, "reset must be true or false")
    values = payload.get("set", {})
    if not isinstance(values, dict):
        raise RequestError(422, "set must be an object of series name -> value")
    bad = sorted(name for name, value in values.items() if _number(value) is None)
    if bad:
        raise RequestError(422, f"the value of {', '.join(bad)} is not a finite number")
    return {name: float(value) for name, value in values.items()}, reset


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
        if match := _LOG_DIR_FILL.match(path):
            broker_id, log_dir = _int(match["id"], "broker"), _int(match["dir"], "log dir")
            used_ratio, bytes_per_s = _fill_body(payload)
            return lambda: cluster.fill_log_dir(broker_id, log_dir, used_ratio, bytes_per_s)
        if match := _BROKER_METRICS.match(path):
            broker_id = _int(match["id"], "broker")
            values, reset = _metrics_body(payload)
            return lambda: cluster.override_metrics(broker_id, values, reset)
        if match := _CORRUPT_STATE.match(path):
            tp = TopicPartition(match["topic"], _int(match["partition"], "partition"))
            return lambda: cluster.corrupt_partition_state(tp)
        if match := _APPEND.match(path):
            tp = TopicPartition(match["topic"], _int(match["partition"], "partition"))
            records = payload.get("records")
            if isinstance(records, bool) or not isinstance(records, int):
                raise RequestError(422, 'append takes {"records": N} with N a positive integer')
            return lambda: cluster.append_records(tp, records)
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
        if path == "/consumer-groups":
            group = ConsumerGroupSpec.model_validate(payload)
            return lambda: cluster.add_consumer_group(group)
        if match := _GROUP_ACTION.match(path):
            name, group_action = unquote(match["name"]), match["action"]
            return lambda: cluster.consumer_group_action(name, group_action, payload)
        raise RequestError(404, f"no route for POST {path}")


class ControlServer:
    def __init__(self, cluster: ReferenceCluster, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cluster = cluster
        self.api = ControlApi(cluster)
        self._server = QuietHTTPServer((host, port), self._handler_class())
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
