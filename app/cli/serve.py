"""``kafka-health serve``: the REST service, ``/metrics`` and runbook actions for one cluster.

Exit codes: 0 stopped by SIGINT/SIGTERM, 1 cannot start (ZooKeeper unreachable, port taken), 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

from pydantic import ValidationError

from app.service.auth import TokenConfigError, hash_token
from app.settings import NO_ZOOKEEPER, Settings, load_settings
from app.validation import format_validation_error
from collectors.kafka.zkdata import parse_connect_string
from collectors.zookeeper.collector import ZooKeeperCollector, ZooKeeperCollectorError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper")
    parser.add_argument(
        "--metrics-url-template", metavar="T", help="brokers' metrics, e.g. http://{host}:7071/metrics"
    )
    parser.add_argument("--store-url", metavar="URL", help="the analytics job's store (load and alerts)")
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8080)")
    parser.add_argument("--hash-token", metavar="TOKEN", help="print the token-file digest of TOKEN and exit")


def settings_from_args(args: argparse.Namespace) -> Settings:
    base = load_settings().model_dump()
    if args.zookeeper is not None:
        base["zookeeper"]["connect"] = args.zookeeper
    if args.metrics_url_template is not None:
        base["metrics"] = {"url_template": args.metrics_url_template}
    if args.store_url is not None:
        base["analytics"]["store_url"] = args.store_url
    for flag in ("host", "port"):
        if getattr(args, flag) is not None:
            base["service"][flag] = getattr(args, flag)
    settings = Settings.model_validate(base)
    if settings.zookeeper.connect is None:
        raise ValueError(NO_ZOOKEEPER)
    parse_connect_string(settings.zookeeper.connect)
    return settings


def _server(config: Any) -> Any:
    """uvicorn's Server, stopped by SIGINT/SIGTERM with exit 0 (uvicorn re-raises the signal after its
    graceful shutdown, so the process would die of it: a stop asked for is not a failure here)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            stop = lambda *_: setattr(self, "should_exit", True)  # noqa: E731
            previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server(config)


def run_serve(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if args.hash_token is not None:
        out.write(hash_token(args.hash_token) + "\n")
        return EXIT_OK
    try:
        settings = settings_from_args(args)
        from app.service.app import create_app, token_store

        token_store(settings.service)
    except ValidationError as exc:
        err.write(f"error: {format_validation_error(exc)}\n")
        return EXIT_BAD_INPUT
    except (ValueError, TokenConfigError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    zk = settings.zookeeper
    connect = zk.connect or ""
    # Read the cluster before listening: an unreachable ZooKeeper is a clear error, not a traceback.
    collector = ZooKeeperCollector(
        connect, connections=zk.connections, session_timeout_s=zk.session_timeout_s
    )
    try:
        collector.start(timeout=zk.start_timeout_s)
    except ZooKeeperCollectorError as exc:
        err.write(f"error: cannot read the cluster at {connect}: {exc}\n")
        return EXIT_FAILED
    try:
        app = create_app(
            settings.service,
            zookeeper=connect,
            metrics=settings.metrics,
            store_url=settings.analytics.store_url,
            collector_factory=lambda _: collector,
        )
        import uvicorn

        host, port = settings.service.host, settings.service.port
        out.write(f"kafka-health serving {connect} on http://{host}:{port}\n")
        out.flush()
        server = _server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        try:
            server.run()
        except SystemExit as exc:  # uvicorn exits when it cannot bind the port or the lifespan fails
            if exc.code:
                err.write(f"error: the service could not start on {host}:{port} (see above)\n")
                return EXIT_FAILED
        if not server.started:
            err.write(f"error: the service could not start on {host}:{port} (see above)\n")
            return EXIT_FAILED
        return EXIT_OK
    finally:
        collector.stop()
