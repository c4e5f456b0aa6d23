"""Every dashboard panel's PromQL against a real Prometheus (Debian's package) scraping a running
kafka-health on the reference cluster with faults injected: each query is valid and returns data, with the
template variables substituted as Grafana would. The same Prometheus loads the alerting rules file: every
rule evaluates without error, and the faults make the rules that should fire pending."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient
from pydantic import SecretStr

from analytics.model import BrokerLoad, LoadWindow, Window
from analytics.pipeline import HealthSample, WindowInput, process_batch
from analytics.rules import RuleSettings
from app.embedded.reference_cluster.cluster import ReferenceCluster
from app.embedded.reference_cluster.config import ConsumerGroupSpec
from app.embedded.zookeeper import pick_free_port
from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.service.state import ViewSettings
from app.storage import open_database
from collectors.consumers.config import KafkaSettings
from collectors.health import assess
from collectors.kafka.admin import KazooAdmin
from collectors.metrics import MetricsSettings
from collectors.samples import health_document
from collectors.zookeeper.collector import scan
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.prometheus import (
    RULES_FILE,
    PanelQuery,
    PrometheusError,
    PrometheusFactory,
    load_dashboards,
    panel_queries,
    substitute,
)
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.service import TOKENS, run_server
from tests.support.store import open_store

EXPECTED_EMPTY: dict[tuple[str, str], str] = {
    ("kafka-health-operations", title): "a series per running reassignment, and none runs in this test "
    "(tests/app/actions/test_resume.py reads them from serve's /metrics while one runs)"
    for title in (
        "Reassignments: bytes remaining",
        "Reassignments: ETA",
        "Reassignments: throttle",
    )
}
"""(dashboard uid, panel title) -> why that panel may return nothing here: a series kafka-health does not
export yet, or one that exists only while a runbook action runs. Every other panel must return data, and a
panel listed here that returns data fails the test too (take it off the list then)."""

RANGE_S = 60.0
STEP_S = 1.0
SCRAPES = 5
DOWN_BROKER = 2
"""Crashed: it holds replicas but is not registered (rule 5), its partitions are under-replicated."""
UNSCRAPED_BROKER = 0
"""Registered, but its metrics exporter is down (nothing listens at its URL): scrape failures."""
THROTTLED_BROKER = 1
"""A leftover follower replication throttle (the Operations dashboard's throttle panels)."""
CONSUMER_GROUP = ConsumerGroupSpec(name="billing", topics=["orders"], members=2, commit_interval_ms=500)
"""A simulated consumer group for the Consumers dashboard's series, on the calm cluster, whose brokers all
stay up (kafka-python 3.0.12 leaves the sockets of refused connections, to the faulty cluster's crashed
broker, to the garbage collector: ResourceWarnings in whichever test runs then). Its lag is collected
every second; it keeps pace: status ok, lag and lag_seconds small but present."""
CONSUMER_LAG = KafkaSettings(interval_s=1.0)
LOAD = {0: 0.5, 1: 0.25, 2: 0.25}
"""Db per broker of the load window put in the store: broker 0 carries half the load (rules 8 and 9)."""
LABEL_VALUES = re.compile(r"label_values\((?P<metric>.+),\s*(?P<label>\w+)\)")
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|{}\[\]]")


def grafana_all(values: list[str]) -> str:
    """A multi-value variable set to All, as Grafana's Prometheus datasource puts it into a query: each
    value regex-escaped (the backslash doubled for PromQL's string), joined with | in a group."""
    return "(" + "|".join(_REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(), v) for v in values) + ")"


pytestmark = [
    pytest.mark.integration,
    # kafka-python 3 (the consumer-lag collector, in process) reads its protocol schemas with
    # importlib.resources' legacy read_text
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]


FAULTY, CALM = "faulty", "calm"
"""The two clusters the service watches: the faults go to the first; the second stays healthy, so that
the dashboards' $cluster variable offers both and a panel set to one shows that one only."""


@dataclass
class FaultyService:
    url: str
    cluster: ReferenceCluster
    store_url: str
    zk_connect: str

    @property
    def target(self) -> str:
        return self.url.removeprefix("http://")

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics").text


@pytest.fixture
def faulty_service(make_cluster: ClusterFactory, zk_connect: str, tmp_path: Path) -> Iterator[FaultyService]:
    """kafka-health serve (over real HTTP) watching two 3-broker reference clusters, ``faulty`` with broker
    0's metrics URL pointing at a port nothing listens on, and ``calm`` with a consumer group whose lag it
    collects."""
    faulty_zk, calm_zk = f"{zk_connect}/{FAULTY}", f"{zk_connect}/{CALM}"
    root = KazooClient(hosts=zk_connect)
    root.start(timeout=15)
    for path in (FAULTY, CALM):
        root.ensure_path(f"/{path}")
    root.stop()
    root.close()
    cluster = make_cluster(zookeeper=faulty_zk)
    calm = make_cluster(zookeeper=calm_zk, consumer_groups=[CONSUMER_GROUP])
    urls = {b: url for b in cluster.brokers if (url := cluster.metrics_url(b)) is not None}
    urls[UNSCRAPED_BROKER] = f"http://127.0.0.1:{pick_free_port()}/metrics"
    calm_urls = {b: url for b in calm.brokers if (url := calm.metrics_url(b)) is not None}
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    open_database(store_url).close()
    settings = ServiceSettings(tokens=SecretStr(TOKENS), view=ViewSettings(metrics_interval_s=0.3))
    app = create_app(
        ServiceSpec(
            settings,
            [
                ClusterSpec(CollectorSpec(faulty_zk), name=FAULTY, metrics=metrics(urls)),
                ClusterSpec(
                    CollectorSpec(calm_zk), name=CALM, metrics=metrics(calm_urls), kafka=CONSUMER_LAG
                ),
            ],
            store_url=store_url,
        )
    )
    port = pick_free_port()
    server, thread = run_server(app, port)
    try:
        yield FaultyService(f"http://127.0.0.1:{port}", cluster, store_url, faulty_zk)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def metrics(urls: dict[int, str]) -> MetricsSettings:
    """The brokers' metrics, with the shortest disk fit window: a log dir's growth (its time-to-full series)
    is known a second after the first scrape, not after 3 of the default window's 5 s samples."""
    return MetricsSettings(urls=urls, disk_fit_window_s=60)


def inject_faults(service: FaultyService) -> str:
    """Crash a broker, leave a replication throttle behind (as Kafka's tool does without ``--verify``),
    wait until /metrics shows them, and store what the analytics job would: a load window skewed onto
    broker 0 and the alerts the rules raise on the real health state. Returns the cluster's key (its
    name: the service watches it by name)."""
    service.cluster.stop_broker(DOWN_BROKER)
    admin = KazooAdmin(service.zk_connect)
    try:
        admin.set_config("brokers", str(THROTTLED_BROKER), {"follower.replication.throttled.rate": "1048576"})
        orders = admin.get_config("topics", "orders")
        admin.set_config("topics", "orders", orders | {"follower.replication.throttled.replicas": "*"})
    finally:
        admin.close()
    shown = [
        re.compile(rf'^kafka_health_broker_down\{{[^}}]*broker="{DOWN_BROKER}"', re.MULTILINE),
        re.compile(r'^kafka_health_topic_partitions\{[^}]*state="under_replicated"', re.MULTILINE),
        re.compile(
            rf'^kafka_health_broker_scrape_up\{{[^}}]*broker="{UNSCRAPED_BROKER}"[^}}]*\}} 0', re.MULTILINE
        ),
        re.compile(
            rf'^kafka_health_replication_throttle_rate_bytes\{{[^}}]*broker="{THROTTLED_BROKER}"',
            re.MULTILINE,
        ),
        re.compile(
            rf'^kafka_health_consumergroup_lag_seconds\{{cluster="{CALM}",group="{CONSUMER_GROUP.name}"',
            re.MULTILINE,
        ),
    ]

    def faults_shown() -> bool:
        text = service.metrics()
        return all(pattern.search(text) for pattern in shown)

    wait_for(
        faults_shown,
        timeout=30,
        message="/metrics shows the broker down, URPs, the failed scrape, the throttle and consumer lag",
    )
    snapshot = scan(service.zk_connect)
    cluster_id = FAULTY
    doc = health_document(snapshot, assess(snapshot))
    now = time.time()
    doc["snapshot"]["last_good_at"] = now
    window = Window(cluster_id, now - 10, now)
    n = len(LOAD)
    brokers = tuple(
        BrokerLoad(b, {"partitions": 4.0}, {"partitions": db}, db, db, (db - 1 / n) * n)
        for b, db in LOAD.items()
    )
    stddev = (sum((db - 1 / n) ** 2 for db in LOAD.values()) / n) ** 0.5
    load = LoadWindow(window, brokers, stddev, 0.1 / n, 0.1)
    with open_store(service.store_url) as store:
        process_batch(
            store,
            "dashboards-test",
            0,
            [WindowInput(window, load, None, HealthSample("dashboards-test", now, doc))],
            RuleSettings(open_after=1, resolve_after=1, urp_for_s=0.0),
        )
    return cluster_id


def returns_data(prometheus_query: PanelQuery, series: list[dict[str, object]]) -> bool:
    if prometheus_query.instant:
        return bool(series)
    return any(s.get("values") for s in series)


def test_every_panel_query_is_valid_and_returns_data(
    start_prometheus: PrometheusFactory, faulty_service: FaultyService, report_note: Callable[[str], None]
) -> None:
    inject_faults(faulty_service)
    prometheus = start_prometheus([faulty_service.target], rule_files=[RULES_FILE])
    prometheus.wait_for_scrapes(SCRAPES)
    end = time.time()

    invalid: list[str] = []
    data: dict[tuple[str, str], bool] = {}
    empty_targets: list[str] = []
    for board in load_dashboards().values():
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                match = LABEL_VALUES.fullmatch(variable["definition"])
                assert match is not None, variable["definition"]
                values = prometheus.label_values(match["label"], match["metric"])
                assert sorted(values) == [CALM, FAULTY], (
                    f"{board['uid']}: ${variable['name']} offers {values}"
                )
                assert variable["includeAll"], variable["name"]
                assert variable["multi"], variable["name"]
        # $cluster at its default, All: every value the variable offers
        variables = {"cluster": grafana_all(values), "datasource": "prometheus"}
        for query in panel_queries(board):
            expr = substitute(query.expr, variables)
            try:
                if query.instant:
                    series = prometheus.query(expr, at=end)
                else:
                    series = prometheus.query_range(expr, end - RANGE_S, end, STEP_S)
            except PrometheusError as exc:
                invalid.append(f"{query.name}: {exc}\n    {expr}")
                continue
            # $cluster set to the calm cluster alone: nothing of the faulty one shows
            calm_only = substitute(query.expr, variables | {"cluster": grafana_all([CALM])})
            if query.instant:
                calm_series = prometheus.query(calm_only, at=end)
            else:
                calm_series = prometheus.query_range(calm_only, end - RANGE_S, end, STEP_S)
            leaked = [s for s in calm_series if s.get("metric", {}).get("cluster", CALM) != CALM]
            if leaked:
                invalid.append(
                    f"{query.name}: $cluster={CALM} shows another cluster's series\n    {calm_only}"
                )
            key = (query.dashboard, query.panel)
            has_data = returns_data(query, series)
            data[key] = data.get(key, True) and has_data
            if not has_data and key not in EXPECTED_EMPTY:
                empty_targets.append(f"{query.name}: no data\n    {expr}")

    assert not invalid + empty_targets, "\n".join(
        ["invalid PromQL:", *invalid, "queries that return nothing:", *empty_targets]
    )
    unknown = set(EXPECTED_EMPTY) - set(data)
    assert not unknown, f"EXPECTED_EMPTY names panels that do not exist: {sorted(unknown)}"
    now_with_data = sorted(key for key in EXPECTED_EMPTY if data[key])
    assert not now_with_data, f"these panels return data now: take them off EXPECTED_EMPTY: {now_with_data}"
    for (uid, title), reason in sorted(EXPECTED_EMPTY.items()):
        report_note(f"expected empty: {uid} / {title}: {reason}")
    report_note(
        f"dashboards: {len(data) - len(EXPECTED_EMPTY)} of {len(data)} panels returned data from a real "
        f"Prometheus ({len(EXPECTED_EMPTY)} expected empty)"
    )


def test_the_rules_evaluate_and_the_faults_make_them_pending(
    start_prometheus: PrometheusFactory, faulty_service: FaultyService
) -> None:
    cluster_id = inject_faults(faulty_service)
    prometheus = start_prometheus([faulty_service.target], rule_files=[RULES_FILE])
    prometheus.wait_for_scrapes(3)

    names = set(prometheus.label_values("__name__", '{job="kafka-health"}'))
    used = set(re.findall(r"\bkafka_health_\w+", RULES_FILE.read_text()))
    # a series per unfinished runbook action: none runs here (tests/app/actions/test_resume.py reads it)
    while_an_action_runs = {"kafka_health_action_stalled"}
    missing = used - names - while_an_action_runs
    assert not missing, f"the rules read series /metrics does not have: {sorted(missing)}"

    def evaluated() -> list[dict[str, object]] | None:
        rules = [r for g in prometheus.rule_groups() for r in g["rules"]]
        return rules if all(r["health"] != "unknown" for r in rules) else None

    rules = wait_for(evaluated, timeout=30, message="every rule evaluated once")
    assert {r["name"]: r["health"] for r in rules} == {r["name"]: "ok" for r in rules}, rules

    expected = {
        ("KafkaHealthBrokerDown", "broker", str(DOWN_BROKER)),
        ("KafkaHealthUnderReplicatedPartitions", "topic", "orders"),
        ("KafkaHealthBrokerLoadDeviation", "broker", "0"),
        ("KafkaHealthClusterLoadImbalance", "cluster", cluster_id),
    }

    def alerting() -> set[tuple[str, str, str]] | None:
        seen = {
            (a["labels"]["alertname"], label, a["labels"].get(label, ""))
            for a in prometheus.alerts()
            if a["labels"].get("cluster") == cluster_id
            for label in ("broker", "topic", "cluster")
        }
        return seen if expected <= seen else None

    wait_for(alerting, timeout=30, message=f"alerts pending for {sorted(expected)}")
    quiet = {"KafkaHealthOfflinePartitions", "KafkaHealthNoActiveController", "KafkaHealthCollectorStale"}
    assert not quiet & {a["labels"]["alertname"] for a in prometheus.alerts()}
