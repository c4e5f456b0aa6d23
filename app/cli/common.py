"""What every ``kafka-health`` subcommand shares: exit codes, stop signals, the settings-error report,
logging and the argparse value types.

Each subcommand's docstring (and ``--help``) says what the codes mean for it; the values are defined here
once so that a script can rely on them across subcommands.
"""

from __future__ import annotations

import argparse
import errno
import logging
import re
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

from pydantic import ValidationError

from app.validation import format_validation_error
from collectors.transport import check_spool_directory, parse_transport

if TYPE_CHECKING:
    from app.settings import Settings
    from collectors.consumers.config import KafkaSettings

T = TypeVar("T")


class ExitCode(IntEnum):
    """A subcommand's exit status."""

    OK = 0
    """Done (``describe`` read the cluster, ``collect --once`` wrote its round) or stopped by a signal."""
    FAILED = 1
    """The work could not be done: the cluster or a sink unreachable, the job or the server failed."""
    BAD_INPUT = 2
    """Flags, ``KAFKA_HEALTH_*`` variables or the config file rejected before anything started, in one line
    on stderr and before any banner (argparse's errors too, see :class:`OneLineParser`)."""
    UNHEALTHY = 3
    """``describe --fail-on-unhealthy`` read a cluster that is not healthy; ``safe-to-stop``: stopping the
    broker is not safe."""


# --- stop signals --------------------------------------------------------------------------------------

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def on_stop_signals(on_stop: Callable[[], object]) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM call ``on_stop`` (and do nothing else, so that the command
    shuts down its own way and exits 0); the previous handlers come back afterwards.

    Python installs signal handlers only in the main thread; elsewhere (a command run from a test's thread)
    this installs nothing and the caller stops the command its own way.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda _signum, _frame: on_stop()) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM within the block: what a long-running subcommand waits on."""
    stop = threading.Event()
    with on_stop_signals(stop.set):
        yield stop


# --- settings errors -----------------------------------------------------------------------------------


def settings_or_error(build: Callable[[], T], err: TextIO) -> T | None:
    """``build()``; on bad input (a ValidationError or ValueError) writes ``error: ...`` to ``err`` and
    returns None, so that every command reports bad settings the same way (and exits 2)."""
    try:
        return build()
    except ValidationError as exc:
        err.write(f"error: {format_validation_error(exc)}\n")
    except ValueError as exc:
        err.write(f"error: {first_line(exc)}\n")
    return None


def first_line(exc: BaseException, limit: int = 500) -> str:
    """An exception's message on one line: its first non-blank line, at most ``limit`` characters (a Spark
    or driver error carries a plan or a traceback after it; those go to the debug log)."""
    try:
        text = str(exc)
    except Exception:  # py4j's errors ask the JVM for their text, which may be gone
        text = ""
    lines = text.splitlines()
    first = next((i for i, part in enumerate(lines) if part.strip()), None)
    if first is None:
        return type(exc).__name__
    line = lines[first].strip()
    if line.endswith(_TRACEBACK):
        # Spark wraps a Python worker's failure with its traceback: what failed is the exception's own
        # line, the first one after the traceback that is not indented.
        cause = next((part for part in lines[first + 1 :] if part.strip() and not part[0].isspace()), "")
        line = f"{line.removesuffix(_TRACEBACK).rstrip()} {cause.strip()}".strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


_TRACEBACK = "Traceback (most recent call last):"


# --- logging -------------------------------------------------------------------------------------------

LOG_LEVEL_ENV = "KAFKA_HEALTH_LOG_LEVEL"
"""``DEBUG``, ``INFO``, ``WARNING`` (default) or ``ERROR``: what goes to stderr. Read before the settings
tree (logging must work while the settings are read); ``DEBUG`` shows what a one-line error left out (the
Spark plan of a failed query, a failed start-up's traceback)."""
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""Every command's log lines (the demo's log files too)."""


def log_level(text: str | None) -> int:
    """The level ``KAFKA_HEALTH_LOG_LEVEL`` names (any case; unset or empty: WARNING); else ValueError."""
    name = (text or "WARNING").strip().upper()
    if name not in LOG_LEVELS:
        raise ValueError(f"{LOG_LEVEL_ENV}={text!r}: expected one of {', '.join(LOG_LEVELS)}")
    level: int = getattr(logging, name)
    return level


def configure_logging(level: int = logging.WARNING) -> None:
    """Warnings and errors to stderr (``level`` and up). The Kafka and ZooKeeper clients' connection retries
    are expected noise, reported by the command itself in one line: kazoo logs only its errors, kafka-python
    nothing below CRITICAL unless debugging."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    logging.getLogger("kazoo").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.ERROR)
    logging.getLogger("kafka").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.CRITICAL)


# --- argparse ------------------------------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with its errors in one line, ``error: <what> (see kafka-health CMD --help)``, and
    exit 2, like every other bad input (argparse prints its whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        sys.exit(ExitCode.BAD_INPUT)


# --- listening ----------------------------------------------------------------------------------------


class ListenError(Exception):
    """The listen address is valid but cannot be bound now (the port in use, no permission): exit 1."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` as uvicorn binds it, for uvicorn to serve on: a host that is not
    an address of this machine is bad input (ValueError), a port in use or refused is
    :class:`ListenError`; either in one line, before the banner."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ValueError(f"listen host {host!r}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ValueError(f"listen host {host!r}: {reason} (not an address of this machine)") from None
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"port {port} on {host} is in use ({reason})") from None
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


# --- reachability ----------------------------------------------------------------------------------------


def unreachable(servers: Sequence[str], timeout: float) -> str | None:
    """None when one of ``HOST:PORT`` ``servers`` answers as a Kafka broker within ``timeout`` seconds in
    all; else why not, for each (``h:1: Connection refused; h2:9092: timed out``). A client library's own
    bootstrap retries for a minute and logs every attempt; this answers in one line and in seconds.

    Accepting a TCP connection is not enough: a port that is open but is not Kafka (an HTTP server, a
    TLS listener, a proxy with nothing behind it) would let the job start and fail minutes later inside
    Spark. So each server is sent Kafka's ApiVersions request (v0, which every broker since 0.10 answers
    before authentication) and must answer it with the request's correlation id."""
    deadline = time.monotonic() + timeout
    reasons: list[str] = []
    for server in servers:
        host, _, port = server.strip().rpartition(":")
        remaining = max(0.1, deadline - time.monotonic())
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=remaining) as sock:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                why = _not_kafka(sock)
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
        if why is None:
            return None
        reasons.append(f"{server.strip()}: {why}")
    return "; ".join(reasons)


_API_VERSIONS = 18
_PROBE_CORRELATION_ID = 0x6B68  # "kh"
_PROBE_CLIENT_ID = b"kafka-health"
_MAX_API_VERSIONS_RESPONSE = 1 << 20


def _not_kafka(sock: socket.socket) -> str | None:
    """None when the peer answers an ApiVersions v0 request as a Kafka broker; else what it did."""
    header = struct.pack(">hhih", _API_VERSIONS, 0, _PROBE_CORRELATION_ID, len(_PROBE_CLIENT_ID))
    request = header + _PROBE_CLIENT_ID
    try:
        sock.sendall(struct.pack(">i", len(request)) + request)
        answer = b""
        while len(answer) < 8:
            chunk = sock.recv(8 - len(answer))
            if not chunk:
                return "accepts connections but closed this one without answering Kafka's ApiVersions request"
            answer += chunk
    except TimeoutError:
        return "accepts connections but did not answer Kafka's ApiVersions request in time"
    size, correlation_id = struct.unpack(">ii", answer)
    if correlation_id != _PROBE_CORRELATION_ID or not 4 < size <= _MAX_API_VERSIONS_RESPONSE:
        return f"accepts connections but is not a Kafka broker (it answered {answer!r})"
    return None


# --- a secured ZooKeeper -----------------------------------------------------------------------------


def add_zk_config_argument(parser: argparse.ArgumentParser) -> None:
    """``--zk-config FILE`` (alias ``--zk-tls-config-file``, Kafka's tools' name): Kafka's ZooKeeper client
    properties (``zookeeper.ssl.*``, ``zookeeper.set.acl``, the JAAS file, ``zookeeper.auth.digest``) for
    a secured ZooKeeper (docs/collectors.md "Secured ZooKeeper")."""
    parser.add_argument(
        "--zk-config",
        "--zk-tls-config-file",
        dest="zk_config",
        type=Path,
        metavar="FILE",
        help="Kafka-style ZooKeeper client properties: TLS, SASL (JAAS file), digest auth, set.acl",
    )


# --- the watched clusters and their metrics ---------------------------------------------------------------


def add_watched_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The clusters a long-running command watches (``collect``, ``serve``): ``--zookeeper`` for one,
    ``--cluster`` (:func:`add_cluster_argument`) for each of several, and ``--zk-config``
    (:func:`add_zk_config_argument`) for a secured ZooKeeper."""
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/chroot]",
        help="the cluster's ZooKeeper (or KAFKA_HEALTH_ZOOKEEPER__CONNECT); one cluster",
    )
    add_cluster_argument(parser)
    add_zk_config_argument(parser)


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """``--metrics-url-template`` and ``--metrics-listener``: where the brokers' metrics are (merged into
    the settings by :func:`settings_tree_with_flags`)."""
    parser.add_argument(
        "--metrics-url-template", metavar="T", help="brokers' metrics, e.g. http://{host}:7071/metrics"
    )
    parser.add_argument(
        "--metrics-listener",
        metavar="NAME",
        help="the brokers' listener whose host and port fill {host}/{port} "
        "(or KAFKA_HEALTH_METRICS__LISTENER; default: PLAINTEXT if a broker has it, else its first endpoint)",
    )


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kafka-listener``, ``--bootstrap-server`` and ``--command-config``: how the brokers are reached
    over Kafka's protocol (consumer lag), as Kafka's own tools take them (merged into the settings'
    ``kafka`` section by :func:`kafka_overrides`)."""
    parser.add_argument(
        "--kafka-listener",
        metavar="NAME",
        help="the brokers' listener to bootstrap from (or KAFKA_HEALTH_KAFKA__LISTENER; default: PLAINTEXT "
        "if a broker has it, else its first endpoint)",
    )
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="bootstrap from these brokers instead of their registered endpoints "
        "(or KAFKA_HEALTH_KAFKA__BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties: security.protocol, sasl.*, ssl.* "
        "(or KAFKA_HEALTH_KAFKA__CLIENT_CONFIG)",
    )


def kafka_overrides(args: argparse.Namespace, current: Mapping[str, Any]) -> dict[str, Any]:
    """The ``kafka`` section with the flags of :func:`add_kafka_arguments` over ``current`` (those the
    command has and were given)."""
    section = dict(current)
    for flag, key in (
        ("kafka_listener", "listener"),
        ("bootstrap_server", "bootstrap_servers"),
        ("command_config", "client_config"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            section[key] = value
    return section


def check_kafka_client(settings: KafkaSettings) -> None:
    """The client properties file read as the collector will (``--command-config``): a missing file or a
    property kafka-python cannot honour is bad input now, one line naming the key (ValueError)."""
    if settings.enabled and settings.client_config is not None:
        from collectors.consumers.client import read_client_config

        try:
            read_client_config(settings.client_config)
        except ValueError as exc:
            message = str(exc)
            prefix = (
                ""
                if message.startswith("--command-config")
                else f"--command-config {settings.client_config}: "
            )
            raise ValueError(prefix + message) from None


def add_cluster_argument(parser: argparse.ArgumentParser, text: str | None = None) -> None:
    """``--cluster NAME=HOST:PORT[/chroot][,METRICS_URL_TEMPLATE]``, repeatable: one deployment watching
    several clusters, each known by its name (``[clusters.NAME]`` in the config file does the same)."""
    parser.add_argument(
        "--cluster",
        action="append",
        dest="clusters",
        metavar="NAME=HOST:PORT[/chroot][,TEMPLATE]",
        help=text
        or "a cluster to watch, known by NAME (repeat for several; or [clusters.NAME] in the config "
        "file, KAFKA_HEALTH_CLUSTERS__NAME__ZOOKEEPER__CONNECT); TEMPLATE: its brokers' metrics URL "
        "template; not with --zookeeper",
    )


CLUSTER_AND_ZOOKEEPER = (
    "--cluster and --zookeeper together: give --zookeeper for one cluster, or --cluster NAME=ZK for each "
    "of several, not both"
)


# --- flags into the settings tree --------------------------------------------------------------------


def settings_tree_with_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings tree (``KAFKA_HEALTH_*`` over the config file over defaults, :func:`settings_tree`)
    with the watched-cluster flags (:func:`add_watched_cluster_arguments`: ``--zookeeper``, ``--cluster``,
    ``--zk-config``) and the metrics flags (:func:`add_metrics_arguments`) merged in, those of them that
    the command has: the dict the command adds its own flags to and validates again
    (``Settings.model_validate``). Raises ValueError / ValidationError with a message."""
    clusters: list[str] | None = getattr(args, "clusters", None)
    zookeeper: str | None = getattr(args, "zookeeper", None)
    if clusters and zookeeper is not None:
        raise ValueError(CLUSTER_AND_ZOOKEEPER)
    from app.settings import load_settings  # the whole tree: only the commands that read it load it

    template: str | None = getattr(args, "metrics_url_template", None)
    # with the flag's template, a metrics section the environment gives only in part (a listener, the log
    # dirs' mount points, no endpoint) is valid; the flag then replaces the section's endpoints below
    loaded = load_settings() if template is None else load_settings(metrics={"url_template": template})
    tree = settings_tree(loaded) | cluster_overrides(loaded, clusters)
    zk_config: Path | None = getattr(args, "zk_config", None)
    for key, value in (("connect", zookeeper), ("client_config", zk_config)):
        if value is not None:
            tree["zookeeper"] = tree["zookeeper"] | {key: value}
    tree["kafka"] = kafka_overrides(args, tree["kafka"])
    return tree | metrics_overrides(tree["metrics"], template, getattr(args, "metrics_listener", None))


def settings_tree(settings: Settings) -> dict[str, Any]:
    """``settings`` as the dict a command merges its flags into and validates again. The ``clusters`` are
    dumped with only the fields each one set: a full dump would fill
    in every default, and those would then win over the shared ``[zookeeper]`` section (credentials,
    timeouts) that each cluster's section is merged over."""
    tree: dict[str, Any] = settings.model_dump()
    tree["clusters"] = {
        name: cluster.model_dump(exclude_unset=True) for name, cluster in settings.clusters.items()
    }
    return tree


def parse_cluster_flag(text: str) -> tuple[str, str, str | None]:
    """``NAME=ZK_CONNECT[,METRICS_URL_TEMPLATE]`` (``--cluster``) as ``(name, connect, template)``; raises
    ValueError. The connect string may list several hosts separated by commas; the template is what
    follows the first comma whose remainder has ``://`` (``prod=zk1:2181,zk2:2181/kafka,http://{host}:7071/metrics``)."""
    from app.settings import CLUSTER_NAME, CLUSTER_NAME_RULE

    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name or not rest.strip():
        raise ValueError(f"--cluster {text!r}: expected NAME=HOST:PORT[/chroot][,METRICS_URL_TEMPLATE]")
    if not CLUSTER_NAME.match(name):
        raise ValueError(f"--cluster {text!r}: {name!r} is not a cluster name ({CLUSTER_NAME_RULE})")
    parts = rest.split(",")
    at = next((i for i, part in enumerate(parts) if "://" in part), None)
    if at is None:
        return name, rest.strip(), None
    connect = ",".join(parts[:at]).strip()
    template = ",".join(parts[at:]).strip()
    if not connect:
        raise ValueError(f"--cluster {text!r}: no ZooKeeper before the metrics URL template")
    return name, connect, template


def cluster_overrides(base: Settings, flags: list[str] | None) -> dict[str, Any]:
    """The ``clusters`` section the repeated ``--cluster`` flags make over the settings' own (a flag's
    ZooKeeper and template win over the same cluster's settings; other clusters of the settings stay),
    with ``zookeeper.connect`` cleared: empty without the flag. Raises ValueError."""
    if not flags:
        return {}
    clusters = {name: cluster.model_dump(exclude_unset=True) for name, cluster in base.clusters.items()}
    seen: set[str] = set()
    for flag in flags:
        name, connect, template = parse_cluster_flag(flag)
        if name in seen:
            raise ValueError(f"--cluster {name}: given twice")
        seen.add(name)
        section = clusters.setdefault(name, {})
        section["zookeeper"] = dict(section.get("zookeeper") or {}) | {"connect": connect}
        if template is not None:
            metrics = dict(section.get("metrics") or {})
            metrics.pop("urls", None)
            section["metrics"] = metrics | {"url_template": template}
    zookeeper = base.zookeeper.model_dump(exclude_unset=True)
    zookeeper.pop("connect", None)
    return {"clusters": clusters, "zookeeper": zookeeper}


def metrics_overrides(
    current: Mapping[str, Any] | None, template: str | None, listener: str | None
) -> dict[str, Any]:
    """The ``metrics`` section the flags make, as ``{"metrics": ...}`` (empty without either flag):
    ``--metrics-url-template`` replaces the settings' template and drops their per-broker URL map (which
    would win over the flag), keeping the rest (listener, dialects, names, limits);
    ``--metrics-listener`` sets the listener of either."""
    if template is None and listener is None:
        return {}
    section: dict[str, Any] = dict(current or {})
    if template is not None:
        section.pop("urls", None)
        section["url_template"] = template
    if listener is not None:
        section["listener"] = listener
    return {"metrics": section}


# --- the samples' spool directory ----------------------------------------------------------------------


def require_spool(transport: str, create: bool) -> None:
    """A spool directory (``collect``'s sink, ``analytics``' source) must exist unless the command is to
    create it (``--create-spool``); a Kafka topic is checked later, when it is reached. Raises ValueError."""
    spec = parse_transport(transport)
    if spec.kind != "spool" or create:
        return
    assert spec.directory is not None
    try:
        check_spool_directory(spec.directory)
    except ValueError as exc:
        raise ValueError(f"{exc} (give --create-spool to create it)") from None


# --- argparse value types ------------------------------------------------------------------------------


def tcp_port(text: str) -> int:
    """A TCP port, 1-65535 (0, "any free port", is what leaving the flag out means)."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """``500ms``, ``2s``, ``1.5m``, ``1h`` or plain seconds, to seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 500ms, 2s, 1m)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def positive_duration(text: str) -> float:
    """A :func:`duration` above 0 (a timeout or an interval: 0, negative or ``nan`` is bad input)."""
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration above 0 (e.g. 500ms, 2s, 1m)")
    return seconds
