"""The Helm chart helm/kafka-health. Without helm: values.yaml and ci/*.yaml validate against
values.schema.json, the schema rejects what the templates would fail on, every ``.Values.*`` path the
templates use exists in values.yaml (and every value is used and documented), and the chart's dashboards
are the repository's dashboards/ (a symbolic link, not a copy). With helm on PATH: ``helm lint``,
``helm template`` (valid YAML with the expected kinds, the dashboards and rules byte for byte) and
``helm package`` (the linked files are in the package). Without helm those tests are skipped and say so."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "kafka-health"
DASHBOARDS = REPO / "dashboards"
RULES = DASHBOARDS / "prometheus" / "kafka-health-rules.yml"
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
TEMPLATES = sorted(p for p in (CHART / "templates").rglob("*") if p.is_file())
HELM = shutil.which("helm")
NO_HELM = (
    "helm is not on PATH: helm lint, helm template and helm package did not run "
    "(install helm 3 to run them; the schema and .Values tests ran without it)"
)
_VALUES_PATH = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of a values file over values.yaml (maps merge, everything else replaces)."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def leaf_paths(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from leaf_paths(value, path)
        else:
            yield path


def template_paths() -> set[str]:
    return {m.group(1)[1:] for p in TEMPLATES for m in _VALUES_PATH.finditer(p.read_text())}


def lookup(values: dict[str, Any], path: str) -> bool:
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def validator() -> jsonschema.Draft7Validator:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    return jsonschema.Draft7Validator(SCHEMA)


def errors(values: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(values)]


# --- without helm -----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_values_yaml_validates_against_the_schema() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert errors(VALUES) == []


@pytest.mark.unit
@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_each_ci_values_file_validates_over_values_yaml(path: Path) -> None:
    assert errors(merged(VALUES, yaml.safe_load(path.read_text()))) == []


@pytest.mark.unit
@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ({"serviceMonitor": {"enable": True}}, "Additional properties are not allowed"),
        ({"serve": {"replicaCount": 3}}, "'postgresql' was expected"),
        ({"store": {"type": "mysql"}}, "is not one of"),
        ({"analytics": {"spark": {"master": "spark://m:7077"}}}, "'kafka' was expected"),
        ({"analytics": {"spark": {"master": "yarn"}}}, "does not match"),
        ({"kafka": {"zookeeper": "zk1,zk2"}}, "does not match"),
        ({"settings": {"service__port": "1"}}, "does not match"),
        ({"analytics": {"ratedDeviation": 0}}, "less than or equal to the minimum"),
    ],
)
def test_the_schema_rejects_values_that_cannot_work(override: dict[str, Any], complaint: str) -> None:
    found = errors(merged(VALUES, override))
    assert any(complaint in e for e in found), found


@pytest.mark.unit
def test_every_values_path_in_the_templates_exists_in_values_yaml() -> None:
    used = template_paths()
    assert len(used) > 40, "the scan finds the templates' .Values paths"
    missing = sorted(p for p in used if not lookup(VALUES, p))
    assert missing == [], f"used by the templates, not in values.yaml: {missing}"


@pytest.mark.unit
def test_every_value_is_used_by_a_template() -> None:
    used = template_paths()
    unused = [
        leaf
        for leaf in leaf_paths(VALUES)
        if not any(leaf == p or leaf.startswith(p + ".") or p.startswith(leaf + ".") for p in used)
    ]
    assert unused == [], f"in values.yaml, used by no template: {unused}"


@pytest.mark.unit
def test_the_chart_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z0-9_.]+)` \|", readme, re.MULTILINE))
    missing = [
        leaf
        for leaf in leaf_paths(VALUES)
        if not any(leaf == d or leaf.startswith(d + ".") for d in documented)
    ]
    assert missing == [], f"not in README.md's values table: {missing}"
    unknown = sorted(p for p in documented if not lookup(VALUES, p))
    assert unknown == [], f"README.md documents values that do not exist: {unknown}"


@pytest.mark.unit
def test_the_chart_reads_the_repository_dashboards_through_a_symbolic_link() -> None:
    """One source: helm/kafka-health/dashboards is a link to dashboards/, not a copy."""
    link = CHART / "dashboards"
    assert link.is_symlink(), "helm/kafka-health/dashboards must be a symbolic link to ../../dashboards"
    assert link.readlink() == Path("../../dashboards")
    assert link.resolve() == DASHBOARDS.resolve()
    dashboards = (CHART / "templates" / "dashboards-configmap.yaml").read_text()
    assert '.Files.Glob "dashboards/*.json"' in dashboards
    rules = (CHART / "templates" / "prometheusrule.yaml").read_text()
    assert '.Files.Get "dashboards/prometheus/kafka-health-rules.yml"' in rules
    ignored = (CHART / ".helmignore").read_text().splitlines()
    assert not {"dashboards/", "dashboards", "dashboards/*.json", "dashboards/prometheus/"} & set(ignored)


@pytest.mark.unit
def test_the_dashboards_fit_in_one_configmap() -> None:
    assert sum(p.stat().st_size for p in DASHBOARDS.glob("*.json")) < 900 * 1024, "a ConfigMap holds 1 MiB"


@pytest.mark.unit
def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "kafka-health"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    project = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert project is not None
    assert chart["appVersion"] == project.group(1), "appVersion is kafka-health's version"


# --- with helm --------------------------------------------------------------------------------------------

ALWAYS = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "Pod"}
EXPECTED_KINDS = {
    "default-values.yaml": ALWAYS | {"PersistentVolumeClaim"},
    "full-values.yaml": ALWAYS
    | {"PersistentVolumeClaim", "Secret", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"},
    "spark-master-values.yaml": ALWAYS | {"PersistentVolumeClaim", "NetworkPolicy"},
}


@pytest.fixture
def helm(report_note: Callable[[str], None]) -> str:
    if HELM is None:
        report_note(NO_HELM)
        pytest.skip(NO_HELM)
    return HELM


def run_helm(helm: str, *args: str | Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([helm, *map(str, args)], capture_output=True, text=True, timeout=120, check=False)
    if ok:
        assert result.returncode == 0, f"helm {' '.join(map(str, args))}:\n{result.stdout}{result.stderr}"
    return result


def render(helm: str, *args: str | Path) -> list[dict[str, Any]]:
    output = run_helm(helm, "template", "kh", *args, "--namespace", "observability").stdout
    return [doc for doc in yaml.safe_load_all(output) if doc is not None]


@pytest.mark.integration
@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint(helm: str, path: Path) -> None:
    run_helm(helm, "lint", CHART, "--strict", "--values", path)


@pytest.mark.integration
@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_helm_template_renders_the_expected_kinds(helm: str, path: Path) -> None:
    docs = render(helm, CHART, "--values", path)
    assert {d["kind"] for d in docs} == EXPECTED_KINDS[path.name]
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(set(names)) == len(names), "no two objects of a kind share a name"
    for doc in docs:
        assert doc["apiVersion"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "kh"
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["resources"]["limits"]["memory"]
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        if deployment["metadata"]["name"] == "kh-kafka-health":
            (serve,) = pod["containers"]
            assert serve["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert serve["readinessProbe"]["httpGet"]["path"] == "/readyz"
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kh-kafka-health")
    assert config["data"]["KAFKA_HEALTH_SERVICE__HOST"] == "0.0.0.0"
    assert all(isinstance(v, str) for v in config["data"].values())


@pytest.mark.integration
def test_replicas_use_postgresql_from_the_secret(helm: str) -> None:
    docs = render(helm, CHART, "--values", CHART / "ci" / "full-values.yaml")
    serve = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kh-kafka-health")
    assert serve["spec"]["replicas"] == 3
    env = {e["name"]: e for e in serve["spec"]["template"]["spec"]["containers"][0]["env"]}
    store = env["KAFKA_HEALTH_ANALYTICS__STORE_URL"]["valueFrom"]["secretKeyRef"]
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert store["name"] == secret["metadata"]["name"]
    assert secret["stringData"][store["key"]].startswith("postgresql+psycopg://")
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kh-kafka-health")
    assert "KAFKA_HEALTH_ANALYTICS__STORE_URL" not in config["data"]
    assert config["data"]["KAFKA_HEALTH_SERVICE__VIEW__STALE_AFTER_S"] == "90"
    assert not [
        d for d in docs if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"].endswith("store")
    ]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "messages"),
    [
        ((), ["kafka.zookeeper is required"]),
        # the schema's if/then says it before the template's check
        (("--set", "kafka.zookeeper=zk:2181", "--set", "serve.replicaCount=2"), ["store.type", "postgresql"]),
        (
            ("--set", "kafka.zookeeper=zk:2181", "--set", "store.type=postgresql"),
            ["store.type=postgresql needs store.postgresql.url"],
        ),
        (
            ("--set", "kafka.zookeeper=zk:2181", "--set", "analytics.transport.type=kafka"),
            ["needs analytics.transport.kafka.bootstrap"],
        ),
    ],
)
def test_values_that_cannot_work_fail_with_a_message(
    helm: str, args: tuple[str, ...], messages: list[str]
) -> None:
    result = run_helm(helm, "template", "kh", CHART, *args, ok=False)
    assert result.returncode != 0
    for message in messages:
        assert message in result.stderr


@pytest.mark.integration
def test_the_dashboards_configmap_holds_the_repository_dashboards_byte_for_byte(helm: str) -> None:
    docs = render(helm, CHART, "--values", CHART / "ci" / "full-values.yaml")
    (configmap,) = [d for d in docs if d["metadata"]["name"] == "kh-kafka-health-dashboards"]
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["data"] == {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    expected = yaml.safe_load(
        RULES.read_text().replace(
            "runbook_url: http://kafka-health:8080/", "runbook_url: https://kafka-health.example.com/"
        )
    )
    assert rule["spec"] == expected


@pytest.mark.integration
def test_runbook_links_default_to_the_release_service(helm: str) -> None:
    docs = render(helm, CHART, "--set", "kafka.zookeeper=zk:2181", "--set", "prometheusRule.enabled=true")
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    urls = {r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert all(u.startswith("http://kh-kafka-health.observability.svc:8080/docs#/") for u in urls), urls


@pytest.mark.integration
def test_helm_package_holds_the_linked_files(helm: str, tmp_path: Path) -> None:
    """helm follows the symbolic link: the package carries dashboards/ as plain files, and installs from it
    render the same dashboards."""
    run_helm(helm, "package", CHART, "--destination", tmp_path)
    (package,) = tmp_path.glob("kafka-health-*.tgz")
    with tarfile.open(package) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for path in DASHBOARDS.glob("*.json"):
            member = members[f"kafka-health/dashboards/{path.name}"]
            assert member.isfile(), f"{member.name} is a file in the package, not a link"
            extracted = tar.extractfile(member)
            assert extracted is not None
            assert extracted.read() == path.read_bytes()
        rules = tar.extractfile(members["kafka-health/dashboards/prometheus/kafka-health-rules.yml"])
        assert rules is not None
        assert rules.read() == RULES.read_bytes()
        assert not [n for n in members if "/ci/" in n or (n.endswith("README.md") and "/dashboards/" in n)]
    docs = render(helm, package, "--set", "kafka.zookeeper=zk:2181")
    (configmap,) = [d for d in docs if d["metadata"]["name"] == "kh-kafka-health-dashboards"]
    assert set(configmap["data"]) == {p.name for p in DASHBOARDS.glob("*.json")}
