"""``kafka-health serve``: the REST service, ``/metrics`` and runbook actions for one cluster.

Exit codes: 0 stopped by SIGINT/SIGTERM, 1 cannot start (ZooKeeper unreachable, port taken), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from pydantic import ValidationError

from app.service.auth import TokenConfigError, hash_token
from app.settings import Settings, load_settings
from collectors.zkdata import parse_connect_string

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
        raise ValueError(
            "no ZooKeeper: give --zookeeper HOST:PORT[/chroot] or KAFKA_HEALTH_ZOOKEEPER__CONNECT"
        )
    parse_connect_string(settings.zookeeper.connect)
    return settings


def run_serve(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if args.hash_token is not None:
        out.write(hash_token(args.hash_token) + "\n")
        return EXIT_OK
    try:
        settings = settings_from_args(args)
        from app.service.app import create_app

        app = create_app(
            settings.service,
            zookeeper=settings.zookeeper.connect or "",
            metrics=settings.metrics,
            store_url=settings.analytics.store_url,
        )
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        err.write(f"error: {errors}\n")
        return EXIT_BAD_INPUT
    except (ValueError, TokenConfigError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    import uvicorn

    config: dict[str, Any] = {
        "host": settings.service.host,
        "port": settings.service.port,
        "log_level": "warning",
    }
    out.write(
        f"kafka-health serving {settings.zookeeper.connect} on http://{config['host']}:{config['port']}\n"
    )
    out.flush()
    server = uvicorn.Server(uvicorn.Config(app, **config))
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits when the lifespan fails (ZooKeeper unreachable, port taken)
        return EXIT_FAILED if exc.code else EXIT_OK
    return EXIT_OK if server.started else EXIT_FAILED
