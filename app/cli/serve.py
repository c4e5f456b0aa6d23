"""``kafka-health serve``: the REST service, ``/metrics`` and runbook actions for one cluster, or for several
(``--cluster NAME=ZK[,TEMPLATE]``, repeated, or ``[clusters.NAME]`` sections: each cluster's routes under
``/api/v1/clusters/NAME/...``).

Everything that can fail is tried before the banner, each failure one line: the settings (flags,
``KAFKA_HEALTH_*``, the tokens, the TLS files, the store URL, an SQLite store's directory that does not
exist without ``--create-store-dir``: exit 2), the listen address (a host that is not an address of this
machine: exit 2; a port in use: exit 1, bound here and handed to uvicorn, so it cannot be taken in
between), the cluster (the first full scan: exit 1; a chroot that holds no Kafka cluster, ``describe``'s
check: exit 1 unless ``--wait-for-cluster``) and the store (opened and migrated: exit 1; after the
cluster, so that a ZooKeeper typo leaves no SQLite file behind). With several clusters their first scans
run in parallel; a cluster that cannot be read is a one-line warning and is retried in the background
(its routes answer 503 until it is read), a cluster whose chroot holds no Kafka cluster is a one-line
warning and is served not ready until one appears, and the start-up fails (exit 1) only when no cluster
can be read, or (without ``--wait-for-cluster``) none holds a Kafka cluster. Nothing is written into a
ZooKeeper chroot that holds no Kafka cluster (:meth:`~app.service.container.ClusterComponents.has_kafka`).
No API token configured is a one-line warning (every ``/api/v1`` route would answer 401). A failure of
uvicorn's start-up after that is one line too; its traceback goes to the debug log
(``KAFKA_HEALTH_LOG_LEVEL=DEBUG``).

Exit codes: 0 stopped by SIGINT/SIGTERM, 1 cannot start (ZooKeeper or the store unreachable, port taken),
2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
import ssl
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, TextIO

from analytics.store import StoreError
from app.cli.common import (
    ExitCode,
    ListenError,
    add_kafka_arguments,
    add_metrics_arguments,
    add_watched_cluster_arguments,
    check_kafka_client,
    first_line,
    listen_socket,
    on_stop_signals,
    settings_or_error,
    settings_tree_with_flags,
    tcp_port,
)
from app.service.auth import NO_TOKEN, hash_token
from app.service.config import ServiceSettings
from app.settings import Settings
from app.storage import Storage
from collectors.health import no_kafka_cluster
from collectors.metrics import missing_listener
from collectors.zookeeper.collector import ZooKeeperCollector

log = logging.getLogger(__name__)

HELP = "the REST service: cluster state, load, alerts, /metrics and runbook actions"
DESCRIPTION = (
    "Exit codes: 0 stopped, 1 cannot start (with several clusters: none can be read; no Kafka cluster in "
    "the chroot, without --wait-for-cluster), 2 bad input (including an SQLite store's directory that does "
    "not exist, without --create-store-dir)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_watched_cluster_arguments(parser)
    add_metrics_arguments(parser)
    add_kafka_arguments(parser)
    parser.add_argument(
        "--store-url",
        metavar="URL",
        help="the store (load and alerts); with it the service writes incident alerts",
    )
    parser.add_argument(
        "--create-store-dir",
        action="store_true",
        default=None,
        help="create the SQLite store's directory if it does not exist (default: a missing one is an error; "
        "or KAFKA_HEALTH_ANALYTICS__CREATE_STORE_DIR)",
    )
    parser.add_argument(
        "--wait-for-cluster",
        action="store_true",
        default=None,
        help="start although the chroot holds no Kafka cluster yet: not ready until one appears (default: "
        "exit 1, as describe; or KAFKA_HEALTH_SERVICE__WAIT_FOR_CLUSTER)",
    )
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=tcp_port, help="listen port (default 8080)")
    parser.add_argument(
        "--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate (chain); needs --tls-key"
    )
    parser.add_argument("--tls-key", metavar="FILE", help="the certificate's PEM private key, unencrypted")
    parser.add_argument("--hash-token", metavar="TOKEN", help="print the token-file digest of TOKEN and exit")


def settings_from_args(args: argparse.Namespace) -> Settings:
    tree = settings_tree_with_flags(args)
    if args.store_url is not None:
        tree["analytics"]["store_url"] = args.store_url
    if getattr(args, "create_store_dir", None) is not None:
        tree["analytics"]["create_store_dir"] = args.create_store_dir
    if getattr(args, "wait_for_cluster", None) is not None:
        tree["service"]["wait_for_cluster"] = args.wait_for_cluster
    for flag in ("host", "port", "tls_cert", "tls_key"):
        if getattr(args, flag) is not None:
            tree["service"][flag] = getattr(args, flag)
    settings = Settings.model_validate(tree)
    settings.require_watched()
    return settings


def _encrypted_key() -> str:
    raise ValueError("it is encrypted; give an unencrypted key file, readable by the service's user only")


def check_tls(service: ServiceSettings) -> None:
    """Load the certificate and key as uvicorn will, so that a missing, unreadable, malformed, encrypted
    or mismatched file is bad input reported in one line before anything starts (uvicorn would fail
    later, with a traceback). Raises ValueError."""
    if service.tls_cert is None or service.tls_key is None:
        return
    for what, path in (("certificate", service.tls_cert), ("key", service.tls_key)):
        if not path.is_file():
            raise ValueError(f"TLS {what} {path}: no such file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(service.tls_cert, service.tls_key, password=_encrypted_key)
    except ValueError as exc:
        raise ValueError(f"TLS key {service.tls_key}: {exc}") from None
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ValueError(
            f"TLS certificate {service.tls_cert} and key {service.tls_key} cannot be loaded: {reason}"
            " (PEM files, the key matching the certificate)"
        ) from None


class StartupErrors(logging.Filter):
    """Holds back uvicorn's error records until the server has started (a failed lifespan is logged with
    its traceback, then "Application startup failed"): the command reports the first one in one line and
    the records go to the debug log. Once started, uvicorn's errors pass as usual."""

    def __init__(self, server: Any) -> None:
        super().__init__()
        self.server = server
        self.reason: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self.server.started or record.levelno < logging.ERROR:
            return True
        if self.reason is None:
            exc = record.exc_info[1] if record.exc_info else None
            self.reason = first_line(exc) if exc is not None else record.getMessage()
        log.debug("uvicorn: %s", record.getMessage(), exc_info=record.exc_info)
        return False


def _server(config: Any) -> Any:
    """uvicorn's Server, stopped by SIGINT/SIGTERM with exit 0 (uvicorn re-raises the signal after its
    graceful shutdown, so the process would die of it: a stop asked for is not a failure here)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with on_stop_signals(lambda: setattr(self, "should_exit", True)):
                yield

    return Server(config)


def settings_and_tokens(args: argparse.Namespace) -> Settings:
    """The settings, with the tokens and the TLS files checked too: bad input, reported before the cluster
    is read (raises ValueError / ValidationError with a message)."""
    settings = settings_from_args(args)
    from app.service.app import token_store

    token_store(settings.service)
    check_tls(settings.service)
    for cluster in settings.watched():
        if cluster.kafka is not None:
            check_kafka_client(cluster.kafka)
    settings.analytics.require_store_directory()
    return settings


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if args.hash_token is not None:
        out.write(hash_token(args.hash_token) + "\n")
        return ExitCode.OK
    settings = settings_or_error(lambda: settings_and_tokens(args), err)
    if settings is None:
        return ExitCode.BAD_INPUT
    service = settings.service
    try:
        sock = listen_socket(service.host, service.port)
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.BAD_INPUT
    except ListenError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.FAILED
    with contextlib.closing(sock):
        return _serve(settings, sock, out, err)


def _serve(settings: Settings, sock: socket.socket, out: TextIO, err: TextIO) -> int:
    from app.service.app import create_app, token_store
    from app.service.container import first_scans, public_connect

    spec = settings.service_spec()
    watched = settings.watched()
    # Read the clusters before listening: an unreachable ZooKeeper is a clear error, not a traceback.
    clusters = first_scans(spec.clusters)
    scans = [cluster.collector for cluster in clusters]
    started = [scan for scan in scans if isinstance(scan, ZooKeeperCollector)]
    # describe's check: a chroot that holds no Kafka cluster is a wrong connect string (or one to wait for)
    no_kafka = [
        no_kafka_cluster(scan.snapshot) if isinstance(scan, ZooKeeperCollector) else None for scan in scans
    ]
    try:
        if not started:
            if len(watched) == 1:
                err.write(f"error: cannot read the cluster at {watched[0].connect}: {scans[0]}\n")
            else:
                reasons = "; ".join(f"{w.label()}: {r}" for w, r in zip(watched, scans, strict=True))
                err.write(f"error: cannot read any cluster: {reasons}\n")
            return ExitCode.FAILED
        if not settings.service.wait_for_cluster and all(
            not isinstance(scan, ZooKeeperCollector) or missing is not None
            for scan, missing in zip(scans, no_kafka, strict=True)
        ):
            if len(watched) == 1:
                err.write(f"error: {public_connect(watched[0].connect)}: {no_kafka[0]}\n")
            else:
                reasons = "; ".join(
                    f"{w.label()}: {public_connect(w.connect)}: {missing or scan}"
                    for w, scan, missing in zip(watched, scans, no_kafka, strict=True)
                )
                err.write(f"error: no Kafka cluster in any watched cluster: {reasons}\n")
            return ExitCode.FAILED
        waiting: list[str] = []
        for cluster, scan, missing in zip(watched, scans, no_kafka, strict=True):
            if not isinstance(scan, ZooKeeperCollector):  # the service retries it at once
                err.write(
                    f"warning: cluster {cluster.label()}: cannot read its ZooKeeper at "
                    f"{public_connect(cluster.connect)}: {scan} (retried in the background)\n"
                )
                err.flush()
                continue
            where = "" if cluster.name is None else f"cluster {cluster.name}: "
            if missing is not None:  # said once the store is open too (no warning before an error)
                waiting.append(
                    f"warning: {where}{public_connect(cluster.connect)}: {missing}; waiting for one "
                    "(not ready until a Kafka cluster is there; nothing is written into this ZooKeeper)\n"
                )
            listener = None if cluster.metrics is None else cluster.metrics.listener
            absent = missing_listener(scan.snapshot.brokers, listener)
            if absent is not None:
                err.write(f"error: {where}metrics.listener {listener}: {absent}\n")
                return ExitCode.BAD_INPUT
        try:  # the lifespan opens it again; a failure here is one line rather than uvicorn's traceback
            Storage.open(settings.analytics.store_url).close()
        except StoreError as exc:
            log.debug("the store cannot be opened", exc_info=True)
            err.write(f"error: {first_line(exc)}\n")
            return ExitCode.FAILED
        err.writelines(waiting)
        if not len(token_store(settings.service)):
            err.write(f"warning: {NO_TOKEN}\n")
        err.flush()
        app = create_app(replace(spec, clusters=clusters))
        import uvicorn

        service = settings.service
        host, port = service.host, sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            ssl_certfile=service.tls_cert,
            ssl_keyfile=service.tls_key,
        )
        server = _server(config)
        held = StartupErrors(server)
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.addFilter(held)
        if len(watched) == 1 and watched[0].name is None:
            what = watched[0].connect
        else:
            what = ", ".join(f"{w.name} ({public_connect(w.connect)})" for w in watched)
        out.write(f"kafka-health serving {what} on {service.scheme}://{host}:{port}\n")
        out.flush()
        try:
            server.run(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits when the lifespan fails
            if exc.code and not server.started:
                err.write(f"error: the service could not start: {held.reason or 'see the debug log'}\n")
                return ExitCode.FAILED
        finally:
            uvicorn_log.removeFilter(held)
        if not server.started:
            err.write(f"error: the service could not start: {held.reason or 'see the debug log'}\n")
            return ExitCode.FAILED
        return ExitCode.OK
    finally:
        for collector in started:
            collector.stop()
