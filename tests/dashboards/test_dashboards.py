"""The Grafana dashboards, their provisioning files and the Prometheus rules file, read as files: stable
uids, the ${datasource} and cluster variables (several clusters at once), a sane layout, every query
filtered by the clusters chosen, kept apart by cluster and using only the series and labels docs/api.md
documents, and every rule's runbook link an operation of the service's OpenAPI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml
from pydantic import SecretStr

from app.service.app import create_app
from app.service.config import ServiceSettings
from app.service.spec import ClusterSpec, ServiceSpec
from app.webhooks.formats import RULE_TITLES, TEST_RULE
from collectors.zookeeper.first_scan import CollectorSpec
from tests.support.prometheus import (
    DASHBOARDS_DIR,
    REPO_ROOT,
    RULES_FILE,
    iter_panels,
    load_dashboards,
    panel_queries,
    substitute,
)

pytestmark = pytest.mark.unit

SCHEMA_VERSION = 39
"""Grafana 10.4 / 11.0's dashboard schema; later Grafana versions migrate it on load."""
UIDS = {
    "kafka-health-cluster-health.json": "kafka-health-cluster",
    "kafka-health-broker-load.json": "kafka-health-broker-load",
    "kafka-health-operations.json": "kafka-health-operations",
    "kafka-health-collector-health.json": "kafka-health-collector",
    "kafka-health-consumers.json": "kafka-health-consumers",
}
PROMETHEUS_SERIES = {
    "ALERTS": {"alertname", "alertstate", "severity", "rule", "topic", "broker"},
    "scrape_duration_seconds": set(),
}
"""Series Prometheus itself makes (ALERTS: from the kafka-health rules file)."""
TARGET_LABELS = {"cluster", "instance", "job"}
PANEL_TYPES = {"stat", "timeseries", "table", "bargauge", "piechart", "state-timeline"}
GRID_COLUMNS = 24
SERVICE_URL = "http://kafka-health:8080"

_METRIC = re.compile(r"\b(kafka_health_\w+|ALERTS|scrape_duration_seconds)\b(\s*\{[^}]*\})?")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_AGGREGATION = re.compile(
    r"\b(sum|max|min|count|avg|group|stddev|stdvar|topk|bottomk|quantile)\s*(by\s*\(([^)]*)\))?\s*\("
)
CLUSTER_MATCHER = 'cluster=~"$cluster"'
"""What every query selects its series with: $cluster is multi-valued, Grafana gives it as a regular
expression (each value escaped, several joined with |)."""
PER_INSTANCE = {("kafka-health-collector", "kafka-health instances reporting", "B")}
"""(dashboard uid, panel title, refId) of the queries whose one value per line is a kafka-health instance
(which serves every cluster it watches), not a cluster."""


def documented_metrics() -> dict[str, set[str]]:
    """docs/api.md's ``/metrics`` table: metric name -> its labels (``cluster`` is on every series)."""
    text = (REPO_ROOT / "docs" / "api.md").read_text()
    section = text.split("## `/metrics`", 1)[1]
    metrics: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`kafka_health_"):
            continue
        labels = set(re.findall(r"\w+", cells[1].split("(")[0]))
        for name in re.findall(r"`(kafka_health_\w+)`", cells[0]):
            metrics[name] = labels | {"cluster"}
    assert len(metrics) >= 20, f"cannot read the /metrics table of docs/api.md: {sorted(metrics)}"
    return metrics


DOCUMENTED = documented_metrics()
KNOWN_SERIES = {**DOCUMENTED, **PROMETHEUS_SERIES}
DASHBOARDS = load_dashboards()


def all_queries() -> list[Any]:
    return [q for board in DASHBOARDS.values() for q in panel_queries(board)]


def test_the_dashboards_have_stable_uids_and_the_current_schema() -> None:
    assert {name: board["uid"] for name, board in DASHBOARDS.items()} == UIDS
    titles = [board["title"] for board in DASHBOARDS.values()]
    assert len(set(titles)) == len(titles)
    for board in DASHBOARDS.values():
        assert board["schemaVersion"] == SCHEMA_VERSION
        assert board["id"] is None, "an exported dashboard carries no database id"
        assert len(board["uid"]) <= 40
        assert "kafka-health" in board["tags"]
        assert board["description"]
        assert "__inputs" not in board, "provisioned dashboards pick the datasource through ${datasource}"


@pytest.mark.parametrize("name", sorted(UIDS))
def test_template_variables_are_datasource_and_cluster(name: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    assert set(variables) == {"datasource", "cluster"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    cluster = variables["cluster"]
    assert cluster["type"] == "query"
    assert cluster["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert cluster["definition"] == "label_values(kafka_health_brokers_alive, cluster)"
    assert cluster["query"]["query"] == cluster["definition"]
    assert cluster["multi"] is True, "several clusters at once"
    assert cluster["includeAll"] is True
    assert cluster.get("allValue") is None, "All is every value offered, escaped, not a free regex"
    assert cluster["current"]["value"] == ["$__all"], "a new visit shows every cluster"


@pytest.mark.parametrize("name", sorted(UIDS))
def test_panels_are_laid_out_on_the_grid_without_overlapping(name: str) -> None:
    panels = list(iter_panels(DASHBOARDS[name]))
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids), "panel ids are unique"
    titles = [p["title"] for p in panels]
    assert len(set(titles)) == len(titles), "panel titles are unique in a dashboard"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        assert panel["title"], panel
        assert panel["description"], panel["title"]
        grid = panel["gridPos"]
        assert grid["w"] > 0
        assert grid["h"] > 0
        assert grid["x"] >= 0
        assert grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_panel_and_target_uses_the_datasource_variable(name: str) -> None:
    for panel in iter_panels(DASHBOARDS[name]):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], f"{panel['title']!r} has no query"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids)
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
            if target.get("format") == "table" or panel["type"] in ("table", "piechart", "bargauge"):
                assert target.get("instant") is True, f"{panel['title']!r} shows the value now"


def test_every_series_in_a_query_is_documented_and_filtered_by_cluster() -> None:
    for query in all_queries():
        found = _METRIC.findall(query.expr)
        assert found, query.name
        for metric, selector in found:
            assert metric in KNOWN_SERIES, f"{query.name}: {metric} is not in docs/api.md's /metrics table"
            if metric.startswith("kafka_health_") or metric == "ALERTS":
                assert CLUSTER_MATCHER in selector, (
                    f"{query.name}: {metric} is not filtered by {CLUSTER_MATCHER}"
                )
        assert 'cluster="$cluster"' not in query.expr, (
            f"{query.name}: = takes one cluster, $cluster is several"
        )


def test_several_clusters_are_never_added_up_into_one_value() -> None:
    """Every aggregation keeps the cluster label (``by (cluster, ...)``), so with several clusters chosen
    each one gets its own value, and each line or value is named by its cluster (``{{cluster}}`` in the
    legend, a column of a table, or one panel per cluster through a repeat)."""
    checked = 0
    for board in DASHBOARDS.values():
        panels = {p["title"]: p for p in iter_panels(board)}
        for query in panel_queries(board):
            key = (query.dashboard, query.panel, query.ref_id)
            aggregations = _AGGREGATION.findall(query.expr)
            for operator, _by, labels in aggregations:
                grouped = {label.strip() for label in labels.split(",")}
                wanted = "instance" if key in PER_INSTANCE else "cluster"
                assert wanted in grouped, f"{query.name}: {operator} without by ({wanted}, ...)"
                checked += 1
            panel = panels[query.panel]
            if key in PER_INSTANCE or panel.get("repeat") == "cluster":
                continue
            if panel["type"] == "table":  # the cluster is a column, or part of the rows' names
                steps = panel.get("transformations", [])
                hidden = {
                    label
                    for step in steps
                    if step["id"] == "organize"
                    for label, excluded in step["options"].get("excludeByName", {}).items()
                    if excluded
                }
                assert "cluster" not in hidden, f"{query.name}: the table hides the cluster"
                for step in steps:
                    if step["id"] == "groupingToMatrix":
                        row = step["options"]["rowField"]
                        assert row.startswith("cluster_"), f"{query.name}: rows {row!r} mix the clusters"
                        assert f'"{row}", " / ", "cluster"' in query.expr, query.name
            else:
                assert "{{cluster}}" in query.legend, f"{query.name}: its legend does not name the cluster"
    assert checked > 50, "the scan finds the aggregations"
    pies = [p for b in DASHBOARDS.values() for p in iter_panels(b) if p["type"] == "piechart"]
    assert pies
    assert all(p.get("repeat") == "cluster" for p in pies), "a pie is each cluster's 100 %: one per cluster"


def test_every_label_a_query_groups_by_or_shows_exists_on_its_series() -> None:
    for query in all_queries():
        metrics = {m for m, _ in _METRIC.findall(query.expr)}
        labels = set().union(*(KNOWN_SERIES[m] for m in metrics)) | TARGET_LABELS
        used = {
            label.strip()
            for group in _LABEL_LIST.findall(query.expr)
            for label in group.split(",")
            if label.strip()
        }
        used |= set(_LEGEND_LABEL.findall(query.legend))
        used |= set(re.findall(r"(\w+)\s*[=!]~?\s*\"", query.expr))
        assert used <= labels, f"{query.name}: labels {sorted(used - labels)} are not on {sorted(metrics)}"


def test_only_grafana_variables_with_a_value_appear_in_queries() -> None:
    for query in all_queries():
        expr = substitute(query.expr, {"cluster": "c"})
        assert "$" not in expr, query.name


def test_the_dashboards_answer_what_the_issue_asks() -> None:
    """Each dashboard's panels cover the issue's list (by the series they read)."""
    wanted = {
        "kafka-health-cluster": [
            "kafka_health_brokers_alive",
            "kafka_health_controller_broker_id",
            "kafka_health_controller_epoch",
            'state=~"under_replicated|at_min_isr|under_min_isr|offline"',
            "kafka_health_topic_partitions",
            "kafka_health_broker_preferred_leader_imbalance_ratio",
            "kafka_health_alerts_open",
        ],
        "kafka-health-broker-load": [
            "kafka_health_broker_normalized_load",
            "kafka_health_broker_deviation_rate",
            "kafka_health_load_rated_deviation",
            "kafka_health_load_stddev",
            "kafka_health_load_stddev_threshold",
        ],
        "kafka-health-operations": [
            "kafka_health_actions",
            "kafka_health_webhook_deliveries",
            "kafka_health_alerts_open",
        ],
        "kafka-health-collector": [
            "kafka_health_scan_duration_seconds",
            "kafka_health_snapshot_age_seconds",
            "kafka_health_scrape_failures_total",
        ],
        "kafka-health-consumers": [
            "kafka_health_consumergroup_lag{",
            "kafka_health_consumergroup_lag_seconds",
            "kafka_health_consumergroup_status",
            "kafka_health_consumergroup_members",
            "kafka_health_consumer_lag_up",
            "kafka_health_consumer_lag_rounds_total",
            "kafka_health_consumer_lag_errors_total",
            "kafka_health_consumer_lag_last_round_seconds",
        ],
    }
    for board in DASHBOARDS.values():
        text = "\n".join(q.expr for q in panel_queries(board))
        for needle in wanted[board["uid"]]:
            assert needle in text, f"{board['uid']} has no panel on {needle}"
    load = next(b for b in DASHBOARDS.values() if b["uid"] == "kafka-health-broker-load")
    types = {p["type"] for p in iter_panels(load)}
    assert "piechart" in types, "the load model's pie chart of each broker's share"
    deviation = next(p for p in iter_panels(load) if p["title"].startswith("Deviation rate"))
    assert {t["legendFormat"] for t in deviation["targets"]} >= {"{{cluster}} +r", "{{cluster}} −r"}


def test_the_open_alerts_table_names_every_rule_the_service_pages() -> None:
    """Rule numbers are shown with their names, for every rule (1-19), in order."""
    board = DASHBOARDS["kafka-health-cluster-health.json"]
    table = next(p for p in iter_panels(board) if p["title"] == "Open alerts")
    [mappings] = [
        prop["value"][0]["options"]
        for override in table["fieldConfig"]["overrides"]
        if override["matcher"]["options"] == "rule"
        for prop in override["properties"]
        if prop["id"] == "mappings"
    ]
    rules = sorted(rule for rule in RULE_TITLES if rule != TEST_RULE)
    assert sorted(int(rule) for rule in mappings) == rules
    for rule in rules:
        assert mappings[str(rule)]["index"] == rule - 1
        assert mappings[str(rule)]["text"].startswith(f"{rule} "), mappings[str(rule)]
    for rule in range(12, 20):  # those added with them: the webhooks' titles
        assert mappings[str(rule)]["text"] == f"{rule} {RULE_TITLES[rule]}"


def test_provisioning_files() -> None:
    provider = yaml.safe_load(
        (DASHBOARDS_DIR / "provisioning" / "dashboards" / "kafka-health.yaml").read_text()
    )
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file"
    assert entry["options"]["path"].startswith("/")
    datasources = yaml.safe_load(
        (DASHBOARDS_DIR / "provisioning" / "datasources" / "prometheus.yaml").read_text()
    )
    assert datasources["apiVersion"] == 1
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"].startswith("http")
    assert source["jsonData"]["timeInterval"].endswith("s")


# --- the Prometheus rules file ----------------------------------------------------------------------------

RULES: list[dict[str, Any]] = yaml.safe_load(RULES_FILE.read_text())["groups"][0]["rules"]
MIRRORED = {"1", "2", "3", "4", "5", "7", "8", "9", "11", "13", "14", "15", "16", "17", "18", "19"}
NOT_MIRRORED = {"6", "10"}


def _openapi() -> dict[str, Any]:
    app = create_app(
        ServiceSpec(
            ServiceSettings(tokens=SecretStr("ci:viewer:not-a-real-token")),
            [ClusterSpec(CollectorSpec("127.0.0.1:1"))],
        )
    )
    return app.openapi()


def test_every_alert_has_for_severity_summary_description_and_runbook() -> None:
    for rule in RULES:
        assert rule["alert"].startswith("KafkaHealth"), rule
        assert re.fullmatch(r"\d+[smh](\d+s)?", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url", "api_call"}, rule["alert"]
        assert annotations["summary"].startswith("{{ $labels.cluster }}: ")
        assert annotations["runbook_url"].startswith(f"{SERVICE_URL}/docs#/")
    assert {r["labels"].get("rule") for r in RULES} - {None} == MIRRORED
    header = RULES_FILE.read_text().split("groups:")[0]
    for number in NOT_MIRRORED:
        assert f"rule {number} " in header, f"the header says why rule {number} is not mirrored"


def test_runbook_links_and_api_calls_name_operations_of_the_service() -> None:
    """``/docs#/<tag>/<operationId>`` is Swagger UI's deep link: it must name an operation that exists,
    and the ``api_call`` annotation the same route."""
    spec = _openapi()
    operations: dict[str, tuple[str, str, list[str]]] = {
        op["operationId"]: (method.upper(), path, op.get("tags", []))
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    }
    for rule in RULES:
        fragment = rule["annotations"]["runbook_url"].split("#/", 1)[1]
        tag, operation_id = (unquote(part) for part in fragment.split("/"))  # Swagger UI writes %20
        assert operation_id in operations, f"{rule['alert']}: no operation {operation_id} in the OpenAPI"
        method, path, tags = operations[operation_id]
        assert tag in tags, f"{rule['alert']}: {operation_id} is not tagged {tag} (tags {tags})"
        # the label templates first: ``{{ $labels.broker }}`` holds spaces, the call's parts are split on them
        call = re.sub(r"\{\{ \$labels\.\w+ \}\}", "X", rule["annotations"]["api_call"])
        call_method, call_target = call.split(" ", 2)[:2]
        call_path = call_target.split("?")[0]
        pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(path))
        assert call_method == method, rule["alert"]
        assert re.fullmatch(pattern, call_path), f"{rule['alert']}: {call_target} is not {path}"


def test_the_promtool_unit_tests_cover_every_alert() -> None:
    tests = yaml.safe_load((Path(__file__).parent / "promtool" / "kafka-health-rules.test.yml").read_text())
    fired = {
        (case["alertname"], alert["exp_labels"]["severity"])
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        for alert in case["exp_alerts"]
    }
    assert fired == {(r["alert"], r["labels"]["severity"]) for r in RULES}
    for test in tests["tests"]:
        # a series that should not fire beside each one that should: more input series than alerts
        alerts = max(len(case["exp_alerts"]) for case in test["alert_rule_test"])
        assert len(test["input_series"]) > alerts, test["name"]
