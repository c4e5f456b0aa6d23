"""A real ZooKeeper server in a child JVM, for the demo, the command line and the integration tests.

The ZooKeeper server classes ship inside the ``pyspark`` wheel (``pyspark/jars/zookeeper-*.jar``), so
``java -cp "<pyspark>/jars/*" org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`` gives us a real
server with nothing else to install. ``$ZOOKEEPER_HOME`` or a ``zkServer.sh`` on ``PATH`` (e.g. Debian's
``zookeeper`` package) work as well.

Leaving no JVM behind is the main concern of this module:

* ``stop()`` sends SIGTERM, waits, then SIGKILLs; it is idempotent.
* ``start()`` registers an :mod:`atexit` hook, so a normal interpreter exit or an uncaught exception
  stops the server.
* The JVM runs in its own session, so Ctrl-C on a terminal reaches only Python, which then stops the JVM
  cleanly instead of racing it.
* On Linux the child sets ``PR_SET_PDEATHSIG`` to SIGKILL, so a Python parent that is killed outright
  (SIGKILL, or SIGTERM without a handler) takes the JVM with it. The kernel fires that signal when the
  *thread* that forked the child exits, so every JVM is forked by one long-lived daemon "spawner" thread
  rather than by whichever short-lived thread happened to call ``start()``.
* ``kafka-health zookeeper`` (``app/cli/zookeeper.py``) routes SIGINT and SIGTERM to ``stop()``, so both
  lead to the clean SIGTERM-then-wait shutdown rather than to the death-signal path.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from queue import SimpleQueue
from types import TracebackType
from typing import IO, Self


class ZooKeeperServerError(Exception):
    """Base of every error raised by this module."""


class ZooKeeperConfigError(ZooKeeperServerError, ValueError):
    """The caller asked for something impossible (a bad port, a data dir that is a file)."""


class JavaNotFoundError(ZooKeeperServerError):
    """No usable ``java`` executable was found."""


class ZooKeeperJarsNotFoundError(ZooKeeperServerError):
    """No ZooKeeper server jars were found in pyspark, ``$ZOOKEEPER_HOME`` or next to ``zkServer.sh``."""


class ZooKeeperStartupError(ZooKeeperServerError):
    """The JVM exited early or did not start serving in time; the message ends with its log."""


class _PortInUseError(ZooKeeperStartupError):
    """Startup failed because the client port was taken; retried when we picked the port ourselves."""


logger = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
FOUR_LETTER_WORDS = "ruok,srvr,stat,mntr"
SERVER_LOG = "zookeeper.log"
CONSOLE_LOG = "zookeeper.out"
_NOT_SERVING = "not currently serving requests"
_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 20
_JAVA_INSTALL_HINT = (
    "Java 17+ is needed to run the embedded ZooKeeper (Spark needs it too). "
    "On Debian: apt-get install openjdk-17-jre-headless, or set JAVA_HOME to a JDK/JRE."
)


# --- discovery --------------------------------------------------------------------------------------


def find_java(java: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Return the java executable: the explicit one, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH.

    An explicit ``java`` that does not exist is an error rather than a reason to fall back, because
    silently running a different JVM than the one asked for is worse than failing.
    """
    env = os.environ if env is None else env
    if java is not None:
        resolved = _executable(java, env)
        if resolved is None:
            raise JavaNotFoundError(
                f"java executable {java!r} not found or not executable. {_JAVA_INSTALL_HINT}"
            )
        return resolved
    tried: list[str] = []
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if _is_executable(candidate):
            return str(candidate)
        tried.append(f"$JAVA_HOME/bin/java ({candidate})")
    on_path = shutil.which("java", path=env.get("PATH", ""))
    if on_path is not None:
        return on_path
    tried.append("java on PATH")
    raise JavaNotFoundError(f"no java found (tried {', '.join(tried)}). {_JAVA_INSTALL_HINT}")


def _executable(name: str, env: Mapping[str, str]) -> str | None:
    if os.sep in name:
        return name if _is_executable(Path(name)) else None
    return shutil.which(name, path=env.get("PATH", ""))


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_zookeeper_classpath(env: Mapping[str, str] | None = None) -> list[str]:
    """Return classpath entries holding the ZooKeeper server and its dependencies.

    The pyspark wheel comes first because it is always installed with this project and carries a
    consistent set of jars (ZooKeeper, netty, slf4j and log4j2); an operator's own ZooKeeper install is
    the fallback. The error lists everything tried so the fix is obvious.
    """
    env = os.environ if env is None else env
    tried: list[str] = []
    for source in (_pyspark_classpath, _zookeeper_home_classpath, _zkserver_script_classpath):
        classpath = source(env, tried)
        if classpath:
            logger.debug("ZooKeeper classpath: %s", classpath)
            return classpath
    raise ZooKeeperJarsNotFoundError(
        "ZooKeeper server jars not found; tried: " + "; ".join(tried) + ". Install pyspark "
        "(pip install pyspark), set ZOOKEEPER_HOME, or put ZooKeeper's zkServer.sh on PATH."
    )


def _pyspark_jars_dir() -> Path | None:
    """Locate ``<pyspark>/jars`` without importing pyspark, which is slow and starts nothing we need."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def _pyspark_classpath(env: Mapping[str, str], tried: list[str]) -> list[str]:
    jars = _pyspark_jars_dir()
    if jars is None:
        tried.append("pyspark (not installed)")
        return []
    if _has_server_jar([jars]) and any(jars.glob("zookeeper-jute-*.jar")):
        return [str(jars / "*")]
    tried.append(f"pyspark jars in {jars} (no zookeeper-*.jar and zookeeper-jute-*.jar)")
    return []


def _zookeeper_home_classpath(env: Mapping[str, str], tried: list[str]) -> list[str]:
    home = env.get("ZOOKEEPER_HOME")
    if not home:
        tried.append("$ZOOKEEPER_HOME (not set)")
        return []
    dirs = [Path(home), Path(home) / "lib"]
    if _has_server_jar(dirs):
        return [str(d / "*") for d in dirs if d.is_dir()]
    tried.append(f"$ZOOKEEPER_HOME={home} (no zookeeper jar in it or in lib/)")
    return []


def _zkserver_script_classpath(env: Mapping[str, str], tried: list[str]) -> list[str]:
    script = shutil.which("zkServer.sh", path=env.get("PATH", ""))
    if script is None:
        tried.append("zkServer.sh on PATH (not found)")
        return []
    home = Path(script).resolve().parent.parent
    # Debian's zookeeper package keeps its home in /usr/share/zookeeper and its jars in /usr/share/java.
    dirs = [home, home / "lib", Path("/usr/share/java")]
    if _has_server_jar(dirs):
        return [str(d / "*") for d in dirs if d.is_dir()]
    tried.append(f"zkServer.sh at {script} (no zookeeper jar under {home} or /usr/share/java)")
    return []


def _has_server_jar(dirs: Iterable[Path]) -> bool:
    """True if a dir holds ``zookeeper-3.x.y.jar`` or Debian's unversioned ``zookeeper.jar``."""
    for directory in dirs:
        if (directory / "zookeeper.jar").is_file() or any(directory.glob("zookeeper-[0-9]*.jar")):
            return True
    return False


# --- configuration files ----------------------------------------------------------------------------


def render_zoo_cfg(
    data_dir: Path, port: int, host: str, tick_time_ms: int, max_session_timeout_ms: int | None
) -> str:
    """A standalone zoo.cfg; maxClientCnxns=0 because tests open many sessions from one address."""
    lines = [
        f"dataDir={data_dir}",
        f"clientPort={port}",
        f"clientPortAddress={host}",
        f"tickTime={tick_time_ms}",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
        "initLimit=10",
        "syncLimit=5",
    ]
    if max_session_timeout_ms is not None:
        lines.append(f"maxSessionTimeout={max_session_timeout_ms}")
    return "\n".join(lines) + "\n"


def render_log4j2_properties(log_file: Path) -> str:
    """log4j2 config sending WARN and above to a file, so the JVM stays quiet on the console."""
    return "\n".join(
        [
            "status = error",
            "name = kafka-health-zookeeper",
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {log_file}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n",
            "rootLogger.level = warn",
            "rootLogger.appenderRef.file.ref = file",
            "",
        ]
    )


def java_command(
    java: str, classpath: Iterable[str], heap: str, log4j2_config: Path, zoo_cfg: Path
) -> list[str]:
    """The JVM command line: small serial-GC heap, headless, no admin server, our log config."""
    return [
        java,
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j2_config}",
        "-Dzookeeper.admin.enableServer=false",
        f"-Dzookeeper.4lw.commands.whitelist={FOUR_LETTER_WORDS}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        os.pathsep.join(classpath),
        MAIN_CLASS,
        str(zoo_cfg),
    ]


# --- a secured server --------------------------------------------------------------------------------


SASL_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
X509_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
SERVER_JAAS = "jaas.conf"


@dataclass(frozen=True)
class ServerSecurity:
    """A secured server, with ZooKeeper's own options. Digest ACLs need nothing on the server.

    ``sasl_users`` (user → password): SASL DIGEST-MD5 on the client port, through the server JAAS file
    (``Server`` section, ``DigestLoginModule``) and ``authProvider.1=SASLAuthenticationProvider``.
    ``tls_keystore`` (a PEM file: PKCS#8 private key and certificate chain) and ``tls_truststore`` (PEM CA
    certificates): a second, TLS-only port (``secureClientPort``, served by Netty, which then serves the
    plain port too), with ``client_auth`` ``need``, ``want`` or ``none`` (ZooKeeper's ``ssl.clientAuth``).
    The plain client port stays open (the four-letter words that tell us the server is up need it)."""

    sasl_users: Mapping[str, str] = field(default_factory=dict)
    tls_keystore: Path | None = None
    tls_truststore: Path | None = None
    client_auth: str = "need"

    def __post_init__(self) -> None:
        if (self.tls_keystore is None) != (self.tls_truststore is None):
            raise ZooKeeperConfigError("TLS needs both tls_keystore and tls_truststore")
        if self.client_auth not in ("need", "want", "none"):
            raise ZooKeeperConfigError(f"client_auth must be need, want or none, got {self.client_auth!r}")

    @property
    def tls(self) -> bool:
        return self.tls_keystore is not None


def render_security_cfg(security: ServerSecurity, secure_port: int | None) -> list[str]:
    """zoo.cfg lines for ``security`` (keys without ``zookeeper.``: ZooKeeper turns unknown zoo.cfg keys
    into ``zookeeper.<key>`` system properties, which is where its TLS and auth options are read)."""
    lines: list[str] = []
    if security.sasl_users:
        lines.append(f"authProvider.1={SASL_AUTH_PROVIDER}")
    if security.tls_keystore is not None and security.tls_truststore is not None:
        lines += [
            f"secureClientPort={secure_port}",
            f"serverCnxnFactory={NETTY_FACTORY}",
            f"authProvider.x509={X509_AUTH_PROVIDER}",
            f"ssl.keyStore.location={security.tls_keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={security.tls_truststore}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={security.client_auth}",
        ]
    return lines


def render_server_jaas(users: Mapping[str, str]) -> str:
    """The server's JAAS file: one DigestLoginModule with ``user_<name>="<password>"`` per user."""
    entries = "\n".join(f'    user_{name}="{password}"' for name, password in users.items())
    return f"Server {{\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n{entries};\n}};\n"


# --- four-letter words ------------------------------------------------------------------------------


def send_four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter word and return the whole reply (the server closes after it)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _serving(host: str, port: int) -> bool:
    """``ruok`` answers as soon as the port listens; ``srvr`` tells whether sessions are served yet."""
    try:
        if send_four_letter_word(host, port, "ruok", timeout=1.0) != "imok":
            return False
        reply = send_four_letter_word(host, port, "srvr", timeout=1.0)
    except OSError:
        return False
    return "Zookeeper version" in reply and _NOT_SERVING not in reply


_PORT_PICKER = random.Random()


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to outgoing connections (Linux: ``ip_local_port_range``)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A free port below the kernel's ephemeral range, so that no client connection's local port (of this
    process or of another test run on the machine) can take it later: a simulated broker binds its port
    again when it restarts. Someone may still take it before we bind, hence the startup retry; when no port
    below the range is found free, one the kernel hands out."""
    low, _ = _ephemeral_range()
    if low > 11_000:
        for _ in range(50):
            port = _PORT_PICKER.randrange(10_000, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        picked: int = sock.getsockname()[1]
    return picked


def _port_is_free(host: str, port: int) -> bool:
    """Bind as the JVM will (SO_REUSEADDR), so TIME_WAIT leftovers don't count as taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


# --- spawning ---------------------------------------------------------------------------------------


# Runs in the forked child before the JVM: a fresh single-threaded interpreter, so unlike a preexec_fn
# it cannot deadlock on a lock some other thread of ours held at fork time. The death signal survives
# exec; the getppid check closes the window in which the parent died before prctl ran.
_DEATH_SIGNAL_EXEC = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


def _with_death_signal(argv: list[str], parent_pid: int) -> list[str]:
    """Prefix ``argv`` so that, on Linux, the process is SIGKILLed when its forking thread dies."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return argv
    return [sys.executable, "-I", "-S", "-c", _DEATH_SIGNAL_EXEC, str(parent_pid), *argv]


@dataclass
class _SpawnRequest:
    argv: list[str]
    cwd: Path
    output: IO[bytes]
    result: Future[subprocess.Popen[bytes]] = field(default_factory=Future)


class _Spawner:
    """One daemon thread that forks every JVM, so PR_SET_PDEATHSIG outlives the caller's thread.

    The thread lives as long as the process; a forked Python child gets its own on first use.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: SimpleQueue[_SpawnRequest] = SimpleQueue()
        self._owner_pid: int | None = None

    def spawn(self, argv: list[str], cwd: Path, output: IO[bytes]) -> subprocess.Popen[bytes]:
        request = _SpawnRequest(argv, cwd, output)
        self._ensure_thread()
        self._requests.put(request)
        return request.result.result()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._owner_pid == os.getpid():
                return
            self._requests = SimpleQueue()
            threading.Thread(target=self._serve, name="zookeeper-spawner", daemon=True).start()
            self._owner_pid = os.getpid()

    def _serve(self) -> None:
        requests = self._requests
        while True:
            request = requests.get()
            if not request.result.set_running_or_notify_cancel():
                continue
            try:
                request.result.set_result(_popen(request))
            except BaseException as exc:
                request.result.set_exception(exc)


def _popen(request: _SpawnRequest) -> subprocess.Popen[bytes]:
    """Own session, so a terminal's Ctrl-C reaches only Python, which then stops the JVM cleanly."""
    return subprocess.Popen(
        _with_death_signal(request.argv, os.getpid()),
        cwd=request.cwd,
        stdin=subprocess.DEVNULL,
        stdout=request.output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


_SPAWNER = _Spawner()


# --- the server -------------------------------------------------------------------------------------


class EmbeddedZooKeeper:
    """A standalone ZooKeeper server in a child JVM, started and stopped from Python.

    ``port=None`` picks a free port; ``data_dir=None`` uses a private temporary directory that is removed
    on stop, while a given directory is kept (with its zoo.cfg, logs and snapshots) for inspection or a
    restart with the same data.
    """

    def __init__(
        self,
        port: int | None = None,
        data_dir: Path | None = None,
        *,
        host: str = "127.0.0.1",
        java: str | None = None,
        heap: str = "1g",
        startup_timeout: float = 30.0,
        tick_time_ms: int = 2000,
        max_session_timeout_ms: int | None = None,
        security: ServerSecurity | None = None,
    ) -> None:
        if port is not None and not 0 < port < 65536:
            raise ZooKeeperConfigError(f"port must be between 1 and 65535, got {port}")
        if data_dir is not None and data_dir.exists() and not data_dir.is_dir():
            raise ZooKeeperConfigError(f"data dir {data_dir} exists and is not a directory")
        if startup_timeout <= 0 or tick_time_ms <= 0:
            raise ZooKeeperConfigError("startup_timeout and tick_time_ms must be positive")
        self._requested_port = port
        self._given_data_dir = data_dir
        self._host = host
        self._java = java
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._tick_time_ms = tick_time_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._security = security
        self._secure_port: int | None = None
        self._lock = threading.RLock()
        self._port: int | None = port
        self._data_dir: Path | None = data_dir
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.is_running else "stopped"
        return f"<EmbeddedZooKeeper {self._host}:{self._port} {state}>"

    @property
    def port(self) -> int:
        if self._port is None:
            raise ZooKeeperServerError("the port is chosen on start(); the server has not started")
        return self._port

    @property
    def host(self) -> str:
        return self._host

    @property
    def connect_string(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def secure_connect_string(self) -> str:
        """``host:port`` of the TLS port (a server started with ``ServerSecurity`` TLS files)."""
        if self._secure_port is None:
            raise ZooKeeperServerError("no TLS port: the server was not started with TLS")
        return f"{self._host}:{self._secure_port}"

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise ZooKeeperServerError(
                "the private data dir is created on start(); the server has not started"
            )
        return self._data_dir

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_file(self) -> Path:
        return self.data_dir / SERVER_LOG

    def start(self) -> None:
        """Start the JVM and block until it serves sessions; a no-op if already running."""
        with self._lock:
            if self.is_running:
                return
            java = find_java(self._java)
            classpath = find_zookeeper_classpath()
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                try:
                    self._start_once(java, classpath)
                except _PortInUseError:
                    if self._requested_port is not None or attempt == _PORT_ATTEMPTS:
                        raise
                    logger.info("port %s was taken before ZooKeeper bound it; picking another", self._port)
                    self._port = None
                else:
                    return

    def _start_once(self, java: str, classpath: list[str]) -> None:
        if self._port is None:
            self._port = pick_free_port(self._host)
        if not _port_is_free(self._host, self._port):
            raise _PortInUseError(f"port {self._port} on {self._host} is already in use")
        data_dir = self._prepare_data_dir()
        argv = java_command(java, classpath, self._heap, data_dir / "log4j2.properties", data_dir / "zoo.cfg")
        if self._security is not None and self._security.sasl_users:
            argv.insert(1, f"-Djava.security.auth.login.config={data_dir / SERVER_JAAS}")
        with (data_dir / CONSOLE_LOG).open("ab") as console:
            self._process = _SPAWNER.spawn(argv, data_dir, console)
        atexit.register(self.stop)
        logger.info("started ZooKeeper JVM pid %s on %s", self._process.pid, self.connect_string)
        try:
            self._wait_until_serving()
        except BaseException:
            self.stop()
            raise

    def _prepare_data_dir(self) -> Path:
        """Write zoo.cfg and the log config; return the absolute dir, as the JVM runs with it as cwd."""
        if self._given_data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="kafka-health-zk-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data_dir = self.data_dir.resolve()
        zoo_cfg = render_zoo_cfg(
            data_dir, self.port, self._host, self._tick_time_ms, self._max_session_timeout_ms
        )
        if self._security is not None:
            if self._security.tls:
                self._secure_port = pick_free_port(self._host)
            zoo_cfg += "".join(f"{line}\n" for line in render_security_cfg(self._security, self._secure_port))
            if self._security.sasl_users:
                (data_dir / SERVER_JAAS).write_text(render_server_jaas(self._security.sasl_users))
        (data_dir / "zoo.cfg").write_text(zoo_cfg)
        (data_dir / "log4j2.properties").write_text(render_log4j2_properties(data_dir / SERVER_LOG))
        return data_dir

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while True:
            returncode = self._process.poll() if self._process is not None else -1
            if returncode is not None:
                raise self._startup_error(f"the ZooKeeper JVM exited with code {returncode} during startup")
            if _serving(self._host, self.port):
                return
            if time.monotonic() > deadline:
                raise self._startup_error(
                    f"ZooKeeper did not serve on {self.connect_string} within {self._startup_timeout:g}s"
                )
            time.sleep(0.05)

    def _startup_error(self, summary: str) -> ZooKeeperStartupError:
        tail = self.log_tail()
        error = _PortInUseError if "Address already in use" in tail else ZooKeeperStartupError
        return error(f"{summary}; last log lines:\n{tail}" if tail else summary)

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the server log and of the JVM console, for error messages."""
        parts = []
        for name in (SERVER_LOG, CONSOLE_LOG):
            path = self.data_dir / name
            if path.is_file():
                text = path.read_text(errors="replace").strip().splitlines()[-lines:]
                if text:
                    parts.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(parts)

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM the JVM, SIGKILL it after ``timeout``, remove a private data dir; idempotent."""
        with self._lock:
            atexit.unregister(self.stop)
            process, self._process = self._process, None
            if process is not None:
                _terminate(process, timeout)
                logger.info("stopped ZooKeeper JVM pid %s", process.pid)
            if self._given_data_dir is None and self._data_dir is not None:
                shutil.rmtree(self._data_dir, ignore_errors=True)
                self._data_dir = None


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        logger.warning("ZooKeeper JVM pid %s ignored SIGTERM for %ss; killing it", process.pid, timeout)
        process.kill()
        process.wait()
