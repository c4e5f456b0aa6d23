"""``kafka-health demo``: everything on the embedded default, in one command, with a story.

Starts a real ZooKeeper, a 5-broker reference cluster with traffic, the collectors (samples every 2 s into a
spool directory, or with ``--transport kafka`` into a topic on an embedded Kafka-protocol broker, Tansu),
the PySpark analytics job (the load lane, 5 s windows), the service (REST, ``/metrics``, actions, and the
incident lane) and a webhook receiver subscribed through the API, prints the URLs and an admin token, then
plays a short story through the service's own API: load is skewed onto one broker (the Spark job's load
alerts open a window or two later, then resolve), a broker crashes (the incident lane pages its offline
single-replica partition within a second, then the broker down; both resolve when it is back), a
preferred replica election (dry run, then executed) and, of two simulated consumer groups, one slowed
down: rule 19 pages it ``lagging`` once its lag in seconds passes the demo's ``lag_warn_s``, and the alert
resolves when it catches up. Each alert says which lane raised it. With ``--once``
it stops after the story; otherwise everything keeps running until Ctrl-C, which stops it all cleanly (no
JVM or thread left).

The console tells the story only. The logs of what runs go to files in the demo's data directory, named
before anything starts (:class:`DemoLogs`): the simulated brokers' (which log Kafka's own errors, such as
a crash's ``no leader can be elected for offline partition``, as part of the story), ZooKeeper's, Spark's
and the service's. What means the demo failed still reaches the console (:class:`Failures`). The data
directory is removed on a clean exit and kept, logs and all, when the demo fails.

Exit codes: 0 the story was told (``--once``) or Ctrl-C/SIGTERM stopped it, 1 something did not start or a
step of the story did not happen in time.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import httpx
import uvicorn
from pydantic import SecretStr

from analytics.config import AnalyticsSettings
from analytics.rules import RuleSettings
from app.cli.common import (
    LOG_FORMAT,
    ExitCode,
    ListenError,
    listen_socket,
    settings_or_error,
    stop_signals,
    tcp_port,
    unreachable,
)
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ConsumerGroupSpec, ReferenceClusterSettings, TopicSpec
from app.embedded.reference_cluster.control import ControlApi
from app.embedded.reference_cluster.routes import reference_router
from app.embedded.tansu import Tansu, TansuUnavailableError, broker_binary
from app.embedded.webhook_receiver import WebhookReceiver
from app.embedded.zookeeper import SERVER_LOG, EmbeddedZooKeeper, ZooKeeperServerError, pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ViewSettings
from app.storage import MIGRATIONS
from app.webhooks.notifier import NotifierSettings
from collectors.consumers.config import KafkaSettings, ThresholdSettings
from collectors.metrics import MetricsCollector, MetricsSettings
from collectors.sampler import Sampler, SamplerSettings
from collectors.samples import SampleNumbering, new_collector_id
from collectors.transport import KafkaTopicSink, SampleSink, SpoolDirectorySink
from collectors.zookeeper.collector import ZooKeeperCollector
from collectors.zookeeper.first_scan import CollectorSpec, start_collector

LOOPBACK = ("127.0.0.0/8", "::1/128")
"""What the demo's webhooks may reach besides global addresses: its own receiver on loopback."""

HELP = "everything on the embedded default (ZooKeeper, brokers, collectors, Spark, service), a story"
DESCRIPTION = None

LAG_MS = 4000
WINDOW_S = 5.0
STEP_TIMEOUT_S = 120.0
LANES = {"incident": "the incident lane (serve)", "load": "the load lane (Spark)"}

CONSUMER_GROUPS = (
    ConsumerGroupSpec(name="billing", topics=["payments"], members=2, commit_interval_ms=1000),
    ConsumerGroupSpec(name="recommendations", topics=["orders"], members=3, commit_interval_ms=1000),
)
"""The demo cluster's simulated consumer groups: both keep pace and commit every second, until the story
slows :data:`LAGGING_GROUP` down."""
LAGGING_GROUP = "recommendations"
SLOW_RATE = 0.1
"""The slowed group consumes a tenth of what is produced: it falls 0.9 s behind every second."""
CATCH_UP_RATE = 4.0
LAG_WARN_S = 10.0
"""The demo's ``lag_warn_s`` (300 s by default): the slowed group is ``lagging`` some 15 s after the
slowdown (10 s behind, then 3 rounds not catching up), not minutes."""
CONSUMER_LAG = KafkaSettings(interval_s=1.0, thresholds=ThresholdSettings(lag_warn_s=LAG_WARN_S))
"""The demo's consumer-lag collector: a round every second, the demo's ``lag_warn_s``."""


@dataclass(frozen=True)
class DemoLogs:
    """Where the demo's parts log, in its data directory ``directory``."""

    directory: Path

    @property
    def reference_cluster(self) -> Path:
        """The simulated brokers and controller, and the rest of the ``app.embedded`` loggers (the embedded
        ZooKeeper's start and stop)."""
        return self.directory / "reference-cluster.log"

    @property
    def zookeeper_dir(self) -> Path:
        """The embedded ZooKeeper's data directory: its server log, its JVM's console (``zookeeper.out``)."""
        return self.directory / "zookeeper"

    @property
    def zookeeper(self) -> Path:
        return self.zookeeper_dir / SERVER_LOG

    @property
    def spark(self) -> Path:
        """The Spark job: its Python loggers (``analytics``, ``py4j``, ``pyspark``) and its JVM's console."""
        return self.directory / "spark.log"

    @property
    def service(self) -> Path:
        """The service (uvicorn, ``app``), the collectors and every other logger."""
        return self.directory / "service.log"

    @property
    def tansu(self) -> Path:
        """The embedded Kafka-protocol broker's console (``--transport kafka``)."""
        return self.directory / "tansu.log"

    def named(self, kafka: bool) -> str:
        paths = [self.reference_cluster, self.zookeeper, self.spark, self.service]
        return ", ".join(str(path) for path in (*paths, self.tansu) if kafka or path != self.tansu)


SHOWN_LOGGERS = ("app", "collectors", "analytics", "uvicorn.error")
"""Whose ERROR records the console shows as well as the log file: the product's (the service, its lanes,
actions and webhooks, the collectors, the Spark job; each logs ERROR only for a failure of its own, such
as an exception in a request, which ``uvicorn.error`` logs), as they mean the demo is failing. Not the
embedded parts' (``app.embedded``: the simulator logs Kafka's own errors as Kafka would, a crashed broker's
offline partition among them, which is the story), nor third-party clients' (kazoo, kafka-python: a
stopped broker's connections), nor anyone's warnings."""


def shown(name: str) -> bool:
    """Whether logger ``name``'s errors reach the demo's console (:data:`SHOWN_LOGGERS`)."""

    def under(parent: str) -> bool:
        return name == parent or name.startswith(f"{parent}.")

    return not under("app.embedded") and any(under(parent) for parent in SHOWN_LOGGERS)


class Failures(logging.Filter):
    """The records the demo's console shows: ERROR and above from :data:`SHOWN_LOGGERS`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR and shown(record.name)


@contextlib.contextmanager
def logs_to_files(logs: DemoLogs, console: IO[str]) -> Iterator[IO[bytes]]:
    """Route the process's logging to ``logs``' files for the ``with`` block, and :class:`Failures` to
    ``console`` as well; yield the file for the Spark JVM's console. The loggers' handlers are restored
    after (the simulator's and Spark's loggers do not propagate meanwhile: their files only)."""
    formatter = logging.Formatter(LOG_FORMAT)
    opened: list[logging.Handler] = []

    def to_file(path: Path) -> logging.Handler:
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(formatter)
        opened.append(handler)
        return handler

    failures = logging.StreamHandler(console)
    failures.setFormatter(formatter)
    failures.addFilter(Failures())
    service, spark = to_file(logs.service), to_file(logs.spark)
    routes: dict[str, tuple[list[logging.Handler], bool]] = {  # a logger's handlers, and if it propagates
        "": ([service, failures], True),  # the root: the service, the collectors, third-party clients
        "uvicorn": ([], True),  # to the root, whatever uvicorn's own config did before
        "uvicorn.access": ([], True),
        "app.embedded": ([to_file(logs.reference_cluster)], False),
        "analytics": ([spark, failures], False),
        "py4j": ([spark], False),
        "pyspark": ([spark], False),
    }
    loggers = {name: logging.getLogger(name or None) for name in routes}
    saved = {name: (logger.handlers[:], logger.propagate) for name, logger in loggers.items()}
    for name, logger in loggers.items():
        logger.handlers, logger.propagate = routes[name]
    try:
        with logs.spark.open("ab") as jvm:
            yield jvm
    finally:
        for name, logger in loggers.items():
            logger.handlers, logger.propagate = saved[name]
        for handler in opened:
            handler.close()


class StoryError(Exception):
    """A step of the story did not happen in time (printed; the demo exits 1)."""


class Demo:
    def __init__(self, base: str, token: str, out: Any, receiver: WebhookReceiver | None = None) -> None:
        self.http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        self.out = out
        self.receiver = receiver

    def say(self, text: str) -> None:
        self.out.write(f"{text}\n")
        self.out.flush()

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: Any = None) -> Any:
        response = self.http.post(path, json=body if body is not None else {})
        if response.status_code >= 400:
            raise StoryError(f"POST {path}: {response.status_code} {response.json().get('detail')}")
        return response.json()

    def wait(self, what: str, check: Callable[[], Any], timeout: float = STEP_TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = check()
            if result:
                return result
            time.sleep(0.5)
        raise StoryError(f"timed out after {timeout:g} s waiting for {what}")

    def open_alerts(self, rule: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("/api/v1/alerts", state="open", rule=rule)["items"]
        return items

    def paged(
        self, rule: int, kind: str, since: float, subject: str | None = None
    ) -> tuple[float, dict[str, Any]] | None:
        """The first webhook the receiver accepted for ``rule``'s ``kind`` (on ``subject``, when given)
        since ``since``: (when, body)."""
        if self.receiver is None:
            return None
        for request in self.receiver.accepted_requests():
            body = request.json()
            if (
                request.received_at >= since
                and body.get("rule") == rule
                and body.get("kind") == kind
                and subject in (None, body.get("subject"))
            ):
                return request.received_at, body
        return None

    def opened(self, alert: dict[str, Any], after: float | None = None, what: str = "the fault") -> None:
        took = "" if after is None else f" {after:.2f} s after {what}"
        self.say(
            f"   alert opened{took} by {LANES.get(alert['lane'], alert['lane'])}: "
            f"[{alert['severity']}] {alert['summary']}"
        )

    def summary(self) -> str:
        s = self.get("/api/v1/cluster")["summary"]
        return (
            f"{s['brokers']} brokers (down: {s['brokers_down'] or 'none'}), {s['partitions']} partitions: "
            f"{s['under_replicated']} under-replicated, {s['under_min_isr']} under min ISR, "
            f"{s['offline']} offline, "
            f"{s['preferred_replica_imbalance']} not led by their preferred replica"
        )

    def consumer_groups(self) -> dict[str, dict[str, Any]]:
        """The latest consumer-lag round's groups by name (none before the first round)."""
        response = self.http.get("/api/v1/consumer-groups")
        if response.status_code == 503:  # no round yet
            return {}
        response.raise_for_status()
        return {g["group"]: g for g in response.json()["groups"]}

    def consumers(self) -> str:
        def behind(g: dict[str, Any]) -> str:
            seconds = g["max_lag_seconds"]
            return "" if seconds is None else f", {seconds:.1f} s behind"

        return "; ".join(
            f"{name}: {g['status']}, {g['members']} members, lag {g['lag']} records{behind(g)}"
            for name, g in sorted(self.consumer_groups().items())
        )

    def load(self) -> str:
        latest = self.get("/api/v1/load")["latest"]
        if latest is None:
            return "no load window yet"
        shares = ", ".join(f"{b['broker']}: {b['normalized_load']:.3f}" for b in latest["brokers"])
        return (
            f"load shares {{{shares}}}, σ {latest['stddev']:.4f} (threshold {latest['stddev_threshold']:.4f})"
        )


def story(demo: Demo, cluster: ReferenceCluster) -> None:
    say = demo.say
    say("\n== 1. A healthy cluster")
    demo.wait("the first load window", lambda: demo.get("/api/v1/load")["latest"])
    say(f"   {demo.summary()}\n   {demo.load()}")

    say("\n== 2. Load skewed onto broker 1: the Spark job's load lane sees it a window or two later")
    skewed = time.time()
    demo.post("/api/v1/reference/load/skew", {"brokers": {"1": 4}})
    alert = demo.wait("the load alert on broker 1 (rule 8)", lambda: [
        a for a in demo.open_alerts(8) if a["subject"] == "broker:1"
    ])[0]  # fmt: skip
    demo.opened(alert, time.time() - skewed, "the skew")
    cluster_alert = demo.wait("the cluster imbalance alert (rule 9)", lambda: demo.open_alerts(9))[0]
    demo.opened(cluster_alert)
    say(f"   {demo.load()}")
    plan = demo.post("/api/v1/plans/rebalance", {})
    say(
        f"   a rebalance plan would move {plan['replica_moves']} replicas and {plan['leader_moves']} leaders "
        f"(Kafka's --generate: {plan['kafka_generate_moves']}); σ after {plan['after']['stddev']:.4f}"
    )
    demo.post("/api/v1/reference/load/skew", {"reset": True})
    demo.wait("the load alerts to resolve", lambda: not demo.open_alerts(8) and not demo.open_alerts(9))
    say("   skew removed: both load alerts resolved")

    say("\n== 3. Broker 2 crashes: the incident lane pages within a second")
    crashed = time.time()
    demo.post("/api/v1/reference/brokers/2/stop")
    when, page = demo.wait(
        "the webhook for the offline partition (rule 1)", lambda: demo.paged(1, "opened", crashed)
    )
    (alert,) = [a for a in demo.open_alerts(1) if a["subject"] == page["subject"]]
    demo.opened(alert, when - crashed, "the crash")
    say(f"   {demo.summary()}")
    alert = demo.wait("the broker-down alert (rule 5)", lambda: demo.open_alerts(5))[0]
    demo.opened(alert, (alert["opened_at"] or crashed) - crashed, "the crash")
    demo.post("/api/v1/reference/brokers/2/start")
    demo.wait(
        "broker 2 back in every ISR", lambda: demo.get("/api/v1/cluster")["summary"]["under_replicated"] == 0
    )
    say(f"   broker 2 restarted and caught up: {demo.summary()}")
    demo.wait("the incident alerts to resolve", lambda: not demo.open_alerts(1) and not demo.open_alerts(5))
    say("   the offline-partition and broker-down alerts resolved")

    say("\n== 4. A preferred replica election through the API")
    dry = demo.post("/api/v1/actions/preferred-replica-election", {"scope": "all"})
    say(
        f"   dry run: {len(dry['to_elect'])} partitions to move back to their preferred leader; "
        f"leaders per broker now {dry['current_leaders']}, after {dry['predicted_leaders']}"
    )
    run = demo.post("/api/v1/actions/preferred-replica-election", {"scope": "all", "dry_run": False})
    action = demo.wait(
        "the election to finish",
        lambda: (
            (a := demo.get(f"/api/v1/actions/{run['action_id']}"))["state"] not in ("PENDING", "RUNNING")
            and a
        ),
    )
    say(
        f"   action {action['id']}: {action['state']}, "
        f"{action['result'].get('elected', 0)} partitions elected"
    )
    say(f"   {demo.summary()}")
    consumer_story(demo)


def consumer_story(demo: Demo) -> None:
    """Step 5: of the two consumer groups, :data:`LAGGING_GROUP` is slowed to :data:`SLOW_RATE` of the
    produce rate: its lag in seconds grows past the demo's ``lag_warn_s`` and rule 19 pages it ``lagging``
    (one page for the group); sped up to :data:`CATCH_UP_RATE` it catches up, back to the produce rate,
    and the alert resolves."""
    say, group, names = demo.say, LAGGING_GROUP, {g.name for g in CONSUMER_GROUPS}
    say(f"\n== 5. Consumer group {group} falls behind: rule 19 pages it lagging, then it catches up")
    demo.wait("both consumer groups in a consumer-lag round", lambda: demo.consumer_groups().keys() >= names)
    say(f"   {demo.consumers()}")
    slowed = time.time()
    demo.post(f"/api/v1/reference/consumer-groups/{group}/slow", {"rate_factor": SLOW_RATE})
    when, _page = demo.wait(
        f"the webhook for consumer group {group} lagging (rule 19)",
        lambda: demo.paged(19, "opened", slowed, f"group:{group}"),
    )
    (alert,) = [a for a in demo.open_alerts(19) if a["subject"] == f"group:{group}"]
    demo.opened(alert, when - slowed, "the slowdown")
    say(f"   {demo.consumers()}")
    demo.post(f"/api/v1/reference/consumer-groups/{group}/start", {"rate_factor": CATCH_UP_RATE})
    demo.wait(
        f"consumer group {group} to catch up",
        lambda: (
            (g := demo.consumer_groups().get(group)) is not None
            and g["status"] == "ok"
            and (g["max_lag_seconds"] or 0.0) < LAG_WARN_S / 2
        ),
    )
    demo.post(f"/api/v1/reference/consumer-groups/{group}/slow", {"rate_factor": 1.0})
    demo.wait(f"the alert on consumer group {group} to resolve", lambda: not demo.open_alerts(19))
    say(f"   {group} consumed {CATCH_UP_RATE:g}x as fast until caught up: the lagging alert resolved")
    say(f"   {demo.consumers()}")


@contextlib.contextmanager
def _running_server(app: Any, port: int) -> Iterator[uvicorn.Server]:
    # log_config=None: uvicorn's loggers propagate to the demo's (its own config writes them to stderr)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", log_config=None)
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.started:
            raise RuntimeError(f"the service did not start on port {port}")
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def story_brokers(text: str) -> int:
    """A broker count the story can be told on: its topics have three replicas (3-50)."""
    if not text.isdigit() or not 3 <= int(text) <= 50:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of brokers from 3 to 50")
    return int(text)


DEMO_TOPIC = "kafka-health-samples"
"""The topic of ``--transport kafka`` (created on the embedded broker before the collectors start)."""


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    """Create ``topic`` (the analytics job reads only a topic that exists; it never creates one)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=[bootstrap])
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--brokers", type=story_brokers, default=5, help="number of brokers, 3-50 (default 5)"
    )
    parser.add_argument("--port", type=tcp_port, help="the service's port (default: a free one)")
    parser.add_argument(
        "--once", action="store_true", help="play the story once and exit (instead of running until Ctrl-C)"
    )
    parser.add_argument(
        "--transport",
        choices=("spool", "kafka"),
        default="spool",
        help="how samples reach the Spark job: a spool directory (default) or a Kafka topic on an embedded "
        "Kafka-protocol broker (Tansu; pip install 'kafka-health[kafka-demo]')",
    )


def demo_cluster(brokers: int) -> ReferenceClusterSettings:
    """The demo's reference cluster of ``brokers`` brokers (ValidationError when that is not a count the
    simulator takes)."""
    return ReferenceClusterSettings(
        brokers=brokers,
        topics=[
            TopicSpec(name="orders", partitions=20, replication_factor=3),
            TopicSpec(
                name="payments", partitions=10, replication_factor=3, config={"min.insync.replicas": "2"}
            ),
            TopicSpec(name="clickstream", partitions=brokers, replication_factor=1),
        ],
        replica_lag_time_max_ms=LAG_MS,
        auto_leader_rebalance_enable=False,
        placement_seed=42,
        consumer_groups=list(CONSUMER_GROUPS),
    )


def _sample(
    stack: contextlib.ExitStack,
    collector: ZooKeeperCollector,
    urls: dict[int, str],
    broker: Tansu | None,
    workdir: Path,
) -> None:
    """The demo's sampler on ``collector``, every 2 s, into the spool (or ``broker``'s topic) until
    ``stack`` closes."""
    metrics = MetricsCollector(urls=urls, timeout_s=2.0)
    stack.callback(metrics.close)
    sink: SampleSink
    if broker is None:
        sink = SpoolDirectorySink(workdir / "spool")
    else:
        create_topic(broker.bootstrap, DEMO_TOPIC)
        sink = KafkaTopicSink(broker.bootstrap, DEMO_TOPIC)
        stack.callback(sink.close)
    sampler = Sampler(
        collector,
        sink,
        SampleNumbering(new_collector_id("demo")),
        metrics=metrics,
        settings=SamplerSettings(interval_s=2.0),
    )
    sampling = threading.Event()
    thread = threading.Thread(target=sampler.run, args=(sampling,), name="sampler", daemon=True)
    thread.start()
    stack.callback(thread.join, 10)
    stack.callback(sampling.set)


def _analytics_settings(source: str, workdir: Path) -> AnalyticsSettings:
    """The demo's analytics job: short windows and quick rules, so that the story's alerts open and
    resolve within seconds; its checkpoint and store in ``workdir``."""
    return AnalyticsSettings(
        source=source,
        create_spool=True,
        window_s=WINDOW_S,
        watermark_s=1.0,
        trigger_s=1.0,
        checkpoint=str(workdir / "checkpoint"),
        store_url=f"sqlite:///{workdir / 'kafka-health.db'}",
        # rule 19 resolves 3 s after the group is ok again (30 s by default)
        rules=RuleSettings(
            open_after=2, resolve_after=2, urp_for_s=10.0, for_s={5: 5.0}, resolve_after_s={19: 3.0}
        ),
    )


def _service_spec(
    token: str, watched: ClusterSpec, analytics: AnalyticsSettings, cluster: ReferenceCluster
) -> ServiceSpec:
    """The demo's service: an admin ``token``, the ``watched`` cluster, the analytics job's store and
    rules, and the reference ``cluster``'s fault controls."""
    return ServiceSpec(
        ServiceSettings(
            tokens=SecretStr(f"demo:admin:{token}"),
            view=ViewSettings(metrics_interval_s=2.0),
            # a local demo: its webhook receiver is on loopback, which the egress policy refuses by
            # default (docs/webhooks.md, "Egress policy")
            webhooks=NotifierSettings(allow_networks=LOOPBACK),
        ),
        [watched],
        store_url=analytics.store_url,
        rules=analytics.rules,
        load_window_s=analytics.window_s,
        extra_routers=[reference_router(ControlApi(cluster))],
    )


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    token = secrets.token_urlsafe(16)
    port = args.port or pick_free_port()
    settings = settings_or_error(lambda: demo_cluster(args.brokers), sys.stderr)
    if settings is None:
        return ExitCode.BAD_INPUT
    if args.port:
        try:
            listen_socket("127.0.0.1", port).close()
        except ListenError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return ExitCode.FAILED
    transport = getattr(args, "transport", "spool")
    if transport == "kafka":
        try:
            broker_binary()
        except TansuUnavailableError as exc:
            sys.stderr.write(f"error: --transport kafka: {exc}\n")
            return ExitCode.FAILED
    workdir = Path(tempfile.mkdtemp(prefix="kafka-health-demo-"))
    logs = DemoLogs(workdir)
    broker: Tansu | None = None
    if transport == "kafka":
        try:
            broker = Tansu(logs.tansu, unreachable)
        except TansuUnavailableError as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            sys.stderr.write(f"error: --transport kafka: {exc}\n")
            return ExitCode.FAILED
    source = f"spool:{workdir / 'spool'}" if broker is None else f"kafka:{broker.bootstrap}/{DEMO_TOPIC}"
    analytics = _analytics_settings(source, workdir)
    code = ExitCode.OK
    clean = False  # the story told or stopped: the data directory goes; else it stays, with the logs

    def remove_data() -> None:
        if clean:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            sys.stderr.write(f"the logs are kept in {workdir}\n")

    with stop_signals() as stop, contextlib.ExitStack() as stack:
        stack.callback(remove_data)
        jvm_output = stack.enter_context(logs_to_files(logs, sys.stderr))
        if broker is not None:
            stack.callback(broker.stop)
        try:
            out.write(
                f"starting ZooKeeper, {args.brokers} brokers, the collectors, Spark and the service...\n"
                f"logs: {logs.named(kafka=broker is not None)}\n"
                "(this console shows the story, and of the logs only errors that mean the demo failed)\n"
            )
            out.flush()
            zookeeper = EmbeddedZooKeeper(data_dir=logs.zookeeper_dir)
            zookeeper.start()
            stack.callback(zookeeper.stop)
            cluster = ReferenceCluster(settings, zookeeper.connect_string)
            cluster.start()
            stack.callback(cluster.stop)
            urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
            # the service watches the collector the sampler samples (one set of sessions)
            watched = ClusterSpec(
                CollectorSpec(zookeeper.connect_string),
                metrics=MetricsSettings(urls=urls, timeout_s=2.0),
                kafka=CONSUMER_LAG,
            )
            collector = start_collector(watched.zookeeper, on_change=watched.changes)
            stack.callback(collector.stop)
            _sample(stack, collector, urls, broker, workdir)

            from analytics.spark.job import running_job

            stack.enter_context(running_job(analytics, migrations=MIGRATIONS, jvm_output=jvm_output))
            spec = _service_spec(token, replace(watched, collector=collector), analytics, cluster)
            app = create_app(spec)
            stack.enter_context(_running_server(app, port))
            receiver = stack.enter_context(WebhookReceiver(secret=token))
            base = f"http://127.0.0.1:{port}"
            out.write(
                "\nkafka-health is up on the embedded reference cluster "
                f"(ZooKeeper {zookeeper.connect_string})\n"
                f"  API docs   {base}/docs\n"
                f"  metrics    {base}/metrics\n"
                f"  token      {token}   (admin; e.g. curl -H 'Authorization: Bearer {token}' "
                f"{base}/api/v1/cluster)\n"
                f"  data       {workdir} (with the logs; removed on exit, kept if the demo fails)\n"
                f"  samples    {source}\n"
                f"  webhooks   {receiver.url} (a receiver subscribed to every alert)\n"
            )
            out.flush()
            demo = Demo(base, token, out, receiver)
            stack.callback(demo.http.close)
            demo.post(
                "/api/v1/webhooks",
                {"name": "demo", "url": receiver.url, "secret": token, "format": "generic"},
            )
            story(demo, cluster)
            if not args.once:
                out.write(
                    f"\nEverything keeps running. Try:\n"
                    f"  curl -H 'Authorization: Bearer {token}' {base}/api/v1/alerts\n"
                    f"  curl -X POST -H 'Authorization: Bearer {token}' "
                    f"{base}/api/v1/reference/brokers/0/stop\n"
                    "Ctrl-C stops everything.\n"
                )
                out.flush()
                stop.wait()
            clean = True
        except KeyboardInterrupt:
            # Spark's context installs its own SIGINT handler, which raises this: a stop, not an error
            clean = True
        except (StoryError, ZooKeeperServerError, RuntimeError) as exc:
            sys.stderr.write(f"error: {exc}\n")
            code = ExitCode.FAILED
        out.write("stopping...\n")
        out.flush()
    return code
