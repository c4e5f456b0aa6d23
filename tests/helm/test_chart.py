"""The Helm chart helm/kafka-health.

The values: values.yaml and ci/*.yaml validate against values.schema.json, the schema rejects what the
templates would fail on, every ``.Values.*`` path the templates use exists in values.yaml (and every value is
used and documented), and the chart's dashboards are the repository's dashboards/ (a symbolic link).

Helm itself, in process: the ``helm-python-sdk`` wheel embeds Helm v4's engine (``libhelm_c``, no helm
binary), so lint, template (render) and package are Helm's own code and run everywhere the tests run, with
no skip. Each values file is rendered once per module. Every rendered manifest is validated against
Kubernetes' OpenAPI schemas (``kubernetes-validate``, offline, strict: unknown fields are errors) for
:data:`KUBERNETES_VERSIONS`; the prometheus-operator objects, which are not in Kubernetes' schemas, against
:data:`PROMETHEUS_OPERATOR_SCHEMAS`."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from app.settings import load_settings

if os.environ.get("CI") or importlib.util.find_spec("helm_python") is not None:
    import helm_python as helm  # CI (Linux x86_64) must have it: a missing engine fails there, never skips
else:  # the wheel is Linux x86_64 only: elsewhere the dev extra leaves it out
    pytest.skip("helm-python-sdk has no wheel for this platform (Linux x86_64 only)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "kafka-health"
DASHBOARDS = REPO / "dashboards"
RULES = DASHBOARDS / "prometheus" / "kafka-health-rules.yml"
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
VALUES_CHART_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
TEMPLATES = sorted(p for p in (CHART / "templates").rglob("*") if p.is_file())
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
        ({"kafka": {"zookeeperClient": {"ssl": {"truststore": "/etc/ca.jks"}}}}, "does not match"),
        ({"kafka": {"zookeeperClient": {"authDigest": "no-colon"}}}, "does not match"),
        (
            {"kafka": {"zookeeperClient": {"ssl": {"endpointIdentificationAlgorithm": "none"}}}},
            "is not one of",
        ),
        ({"kafka": {"zookeeperClient": {"secretKeys": {"jaas": "jaas.conf"}}}}, "Additional properties"),
        ({"serve": {"tls": {"secretName": 1}}}, "is not of type"),
        # several clusters: exclusive with kafka.zookeeper, names as the product takes them
        ({"kafka": {"zookeeper": "zk:2181", "clusters": {"prod": {"zookeeper": "zk:2181"}}}}, "was expected"),
        ({"kafka": {"clusters": {"Prod": {"zookeeper": "zk:2181"}}}}, "does not match"),
        ({"kafka": {"clusters": {"-prod": {"zookeeper": "zk:2181"}}}}, "does not match"),
        ({"kafka": {"clusters": {"a" * 64: {"zookeeper": "zk:2181"}}}}, "does not match"),
        ({"kafka": {"clusters": {"eu__west": {"zookeeper": "zk:2181"}}}}, "should not be valid"),
        ({"kafka": {"clusters": {"prod": {}}}}, "'zookeeper' is a required property"),
        ({"kafka": {"clusters": {"prod": {"zookeeper": "zk1,zk2"}}}}, "does not match"),
        ({"kafka": {"clusters": {"prod": {"zookeeper": ""}}}}, "does not match"),
        (
            {"kafka": {"clusters": {"prod": {"zookeeper": "zk:2181", "metrics": "x"}}}},
            "Additional properties",
        ),
        (
            {"kafka": {"clusters": {"prod": {"zookeeper": "zk:2181", "metricsUrlTemplate": "{host}:7071"}}}},
            "does not match",
        ),
        (
            {"kafka": {"clusters": {"prod": {"zookeeper": "zk:2181", "zookeeperClient": {"jaas": "x"}}}}},
            "Additional properties",
        ),
        (
            {
                "kafka": {
                    "clusters": {
                        "prod": {
                            "zookeeper": "zk:2181",
                            "zookeeperClient": {"ssl": {"truststore": "/ca.jks"}},
                        }
                    }
                }
            },
            "does not match",
        ),
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


# --- Helm itself, in process (helm-python-sdk: Helm v4's engine as a library) ------------------------------

RELEASE = "kh"
NAMESPACE = "observability"
KUBERNETES_VERSIONS = ("1.30", "1.37")
"""The Kubernetes versions every manifest is validated for (and helm lint's --kube-version): 1.37, the
newest whose schemas kubernetes-validate 1.37 ships (what a new cluster runs), and 1.30 (April 2024), an
older release long-lived clusters still run. The chart uses only GA APIs (v1, apps/v1, policy/v1,
networking/v1) present in both; Chart.yaml's kubeVersion (>=1.23) is older than what is validated here."""

ALWAYS = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "Pod"}
EXPECTED_KINDS = {
    "default-values.yaml": ALWAYS | {"PersistentVolumeClaim"},
    "full-values.yaml": ALWAYS
    | {"PersistentVolumeClaim", "Secret", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"},
    "spark-master-values.yaml": ALWAYS | {"PersistentVolumeClaim", "NetworkPolicy"},
    "secured-zookeeper-values.yaml": ALWAYS | {"PersistentVolumeClaim", "Secret", "ServiceMonitor"},
    "multi-cluster-values.yaml": ALWAYS | {"PersistentVolumeClaim", "Secret"},
}

_DURATION = {
    "type": "string",
    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_SELECTOR = {
    "type": "object",
    "properties": {"matchLabels": _STRINGS, "matchExpressions": {"type": "array"}},
    "additionalProperties": False,
}
_OBJECT = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "labels": _STRINGS, "annotations": _STRINGS},
        },
    },
}
PROMETHEUS_OPERATOR_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "allOf": [_OBJECT],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["endpoints", "selector"],
                "properties": {
                    "selector": _LABEL_SELECTOR,
                    "namespaceSelector": {
                        "type": "object",
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                        "additionalProperties": False,
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                                "tlsConfig": {"type": "object"},
                            },
                            "additionalProperties": False,
                        },
                    },
                },
                "additionalProperties": False,
            }
        },
    },
    "PrometheusRule": {
        "allOf": [_OBJECT],
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "interval": _DURATION,
                                "limit": {"type": "integer"},
                                "labels": _STRINGS,
                                "query_offset": _DURATION,
                                "partial_response_strategy": {"type": "string"},
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["expr"],
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": ["string", "integer"]},
                                            "for": _DURATION,
                                            "keep_firing_for": _DURATION,
                                            "labels": _STRINGS,
                                            "annotations": _STRINGS,
                                        },
                                        "additionalProperties": False,
                                        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    },
                                },
                            },
                            "additionalProperties": False,
                        },
                    }
                },
                "additionalProperties": False,
            }
        },
    },
}
"""The shape of the two prometheus-operator kinds the chart makes (monitoring.coreos.com/v1), as their
CustomResourceDefinitions in prometheus-operator's ``example/prometheus-operator-crd/`` define it: the
required fields, the duration pattern of every interval, and, at the levels the chart writes, every
property the CRD knows and no other (a misspelled key is an error, as a strict API server makes it). The
CRDs themselves are not vendored; this is a subset written from them (checked against v0.93.0's)."""


def values_file(path: Path) -> dict[str, Any]:
    """A values file as ``helm --values`` reads it (Helm's own YAML reading, not PyYAML's)."""
    return helm.values_from_yaml(path.read_text())


def set_values(*expressions: str) -> dict[str, Any]:
    """``--set A=B --set C=D`` as Helm parses them."""
    values: dict[str, Any] = {}
    for expression in expressions:
        values = merged(values, helm.parse_set_string(expression))
    return values


def render(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    """``helm template kh CHART --namespace observability``: every template's objects (NOTES.txt is text
    for the user, not a manifest); each template must be valid YAML."""
    manifests = chart.render(values=values, name=RELEASE, namespace=NAMESPACE)
    docs: list[dict[str, Any]] = []
    for template, text in sorted(manifests.items()):
        if template.endswith("/NOTES.txt"):
            continue
        try:
            docs.extend(doc for doc in yaml.safe_load_all(text) if doc is not None)
        except yaml.YAMLError as exc:
            raise AssertionError(f"{template} is not valid YAML: {exc}\n{text}") from None
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def rendered(chart: helm.Chart) -> dict[str, list[dict[str, Any]]]:
    """Each ci/*.yaml rendered once for the whole module."""
    return {path.name: render(chart, values_file(path)) for path in CI_VALUES}


@pytest.mark.unit
def test_the_sdk_is_helm_4() -> None:
    assert helm.helm_sdk_version().startswith("v4."), helm.helm_sdk_version()


@pytest.mark.unit
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint(path: Path, version: str) -> None:
    """``helm lint --strict --kube-version``: no warning, no error (an INFO such as "icon is recommended"
    is allowed, as helm lint --strict allows it)."""
    report = helm.lint(
        CHART, values_file(path), strict=True, namespace=NAMESPACE, kube_version=f"v{version}.0"
    )
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.unit
def test_helm_lint_finds_a_broken_template(tmp_path: Path) -> None:
    """The lint above can fail: a copy of the chart with a template that dereferences a missing value."""
    copy_ = tmp_path / "kafka-health"
    shutil.copytree(CHART, copy_, symlinks=False)
    (copy_ / "templates" / "broken.yaml").write_text("data: {{ .Values.nothing.here }}\n")
    report = helm.lint(copy_, values_file(CHART / "ci" / "default-values.yaml"), strict=True)
    (error,) = [m for m in report["messages"] if m["severity"] == 3]
    assert "templates/broken.yaml:1" in error["error"]
    assert "nil pointer" in error["error"]


@pytest.mark.unit
@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_helm_template_renders_the_expected_kinds(
    rendered: dict[str, list[dict[str, Any]]], path: Path
) -> None:
    docs = rendered[path.name]
    assert {d["kind"] for d in docs} == EXPECTED_KINDS[path.name]
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(set(names)) == len(names), "no two objects of a kind share a name"
    for doc in docs:
        assert doc["apiVersion"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
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
    config = find(docs, "ConfigMap", "kh-kafka-health")
    assert config["data"]["KAFKA_HEALTH_SERVICE__HOST"] == "0.0.0.0"
    assert all(isinstance(v, str) for v in config["data"].values())


@pytest.mark.unit
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_every_manifest_is_valid_for_kubernetes(
    rendered: dict[str, list[dict[str, Any]]], path: Path, version: str
) -> None:
    """Kubernetes' own OpenAPI schemas of ``version``, strict (an unknown or misplaced field is an error,
    as the API server's field validation makes it); a kind with no schema fails the test."""
    problems = []
    for doc in rendered[path.name]:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # not Kubernetes' (test_prometheus_operator_objects_are_valid)
        try:
            used = kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(map(str, exc.path))
            problems.append(f"{doc['kind']}/{doc['metadata']['name']} {where}: {exc.message}")
        else:
            assert used == version, f"kubernetes-validate has no {version} schemas (used {used})"
    assert problems == []


@pytest.mark.unit
@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda d: d["spec"].__setitem__("replica", 1), "Additional properties are not allowed"),
        (lambda d: d["spec"].__setitem__("replicas", "3"), "is not of type"),
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name"), "'name' is a required"),
    ],
)
def test_the_kubernetes_validation_can_fail(
    rendered: dict[str, list[dict[str, Any]]], change: Any, complaint: str
) -> None:
    deployment = copy.deepcopy(find(rendered["default-values.yaml"], "Deployment", "kh-kafka-health"))
    kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)
    change(deployment)
    with pytest.raises(kubernetes_validate.ValidationError, match=complaint):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def operator_errors(doc: dict[str, Any]) -> list[str]:
    schema = PROMETHEUS_OPERATOR_SCHEMAS[doc["kind"]]
    jsonschema.Draft7Validator.check_schema(schema)
    found = jsonschema.Draft7Validator(schema).iter_errors(doc)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


@pytest.mark.unit
def test_prometheus_operator_objects_are_valid(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = [
        d for docs in rendered.values() for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")
    ]
    assert {d["kind"] for d in docs} == set(PROMETHEUS_OPERATOR_SCHEMAS)
    for doc in docs:
        assert operator_errors(doc) == [], doc["kind"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kind", "change", "complaint"),
    [
        ("ServiceMonitor", lambda s: s.pop("endpoints"), "'endpoints' is a required property"),
        ("ServiceMonitor", lambda s: s["endpoints"][0].__setitem__("interval", "15 s"), "does not match"),
        ("ServiceMonitor", lambda s: s["endpoints"][0].__setitem__("timeout", "5s"), "not allowed"),
        (
            "PrometheusRule",
            lambda s: s["groups"][0]["rules"][0].__setitem__("for", "5 min"),
            "does not match",
        ),
        ("PrometheusRule", lambda s: s["groups"][0]["rules"][0].pop("expr"), "'expr' is a required"),
        (
            "PrometheusRule",
            lambda s: s["groups"][0]["rules"][0].__setitem__("record", "x"),
            "valid under each",
        ),
    ],
)
def test_the_prometheus_operator_validation_can_fail(
    rendered: dict[str, list[dict[str, Any]]], kind: str, change: Any, complaint: str
) -> None:
    (doc,) = copy.deepcopy([d for d in rendered["full-values.yaml"] if d["kind"] == kind])
    change(doc["spec"])
    assert any(complaint in e for e in operator_errors(doc)), operator_errors(doc)


@pytest.mark.unit
def test_replicas_use_postgresql_from_the_secret(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["full-values.yaml"]
    serve = find(docs, "Deployment", "kh-kafka-health")
    assert serve["spec"]["replicas"] == 3
    env = {e["name"]: e for e in serve["spec"]["template"]["spec"]["containers"][0]["env"]}
    store = env["KAFKA_HEALTH_ANALYTICS__STORE_URL"]["valueFrom"]["secretKeyRef"]
    secret = find(docs, "Secret", "kh-kafka-health-secrets")
    assert store["name"] == secret["metadata"]["name"]
    assert secret["stringData"][store["key"]].startswith("postgresql+psycopg://")
    config = find(docs, "ConfigMap", "kh-kafka-health")
    assert "KAFKA_HEALTH_ANALYTICS__STORE_URL" not in config["data"]
    assert config["data"]["KAFKA_HEALTH_SERVICE__VIEW__STALE_AFTER_S"] == "90"
    assert not [
        d for d in docs if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"].endswith("store")
    ]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sets", "error", "messages"),
    [
        ((), helm.HelmRenderError, ["kafka.zookeeper or kafka.clusters is required"]),
        # the schema's if/then and propertyNames say it before the template's checks
        (
            ("kafka.zookeeper=zk:2181", "kafka.clusters.prod.zookeeper=zk:2182"),
            helm.HelmValuesError,
            ["/kafka/zookeeper", "value must be ''"],
        ),
        (
            ("kafka.clusters.Prod.zookeeper=zk:2181",),
            helm.HelmValuesError,
            ["invalid propertyName 'Prod'", "does not match pattern"],
        ),
        (
            (
                "kafka.clusters.prod.zookeeper=zk:2181",
                "kafka.clusters.prod.zookeeperClient.ssl.keystore=-----BEGIN PRIVATE KEY-----",
            ),
            helm.HelmRenderError,
            ["kafka.clusters.prod.zookeeperClient.ssl.truststore/keystore without ssl.clientEnable"],
        ),
        # the schema's if/then says it before the template's check
        (
            ("kafka.zookeeper=zk:2181", "serve.replicaCount=2"),
            helm.HelmValuesError,
            ["/store/type", "postgresql"],
        ),
        (
            ("kafka.zookeeper=zk:2181", "store.type=postgresql"),
            helm.HelmRenderError,
            ["store.type=postgresql needs store.postgresql.url"],
        ),
        (
            ("kafka.zookeeper=zk:2181", "analytics.transport.type=kafka"),
            helm.HelmRenderError,
            ["needs analytics.transport.kafka.bootstrap"],
        ),
        (
            ("kafka.zookeeper=zk:2181", "kafka.zookeeperClient.ssl.truststore=-----BEGIN CERTIFICATE-----"),
            helm.HelmRenderError,
            ["without ssl.clientEnable"],
        ),
    ],
)
def test_values_that_cannot_work_fail_with_a_message(
    chart: helm.Chart, sets: tuple[str, ...], error: type[helm.HelmError], messages: list[str]
) -> None:
    with pytest.raises(error) as failed:
        render(chart, set_values(*sets))
    for message in messages:
        assert message in str(failed.value)


@pytest.mark.unit
def test_the_dashboards_configmap_holds_the_repository_dashboards_byte_for_byte(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["full-values.yaml"]
    configmap = find(docs, "ConfigMap", "kh-kafka-health-dashboards")
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


@pytest.mark.unit
def test_runbook_links_default_to_the_release_service(chart: helm.Chart) -> None:
    docs = render(chart, set_values("kafka.zookeeper=zk:2181", "prometheusRule.enabled=true"))
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    urls = {r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert all(u.startswith("http://kh-kafka-health.observability.svc:8080/docs#/") for u in urls), urls


@pytest.mark.unit
def test_helm_package_holds_the_linked_files(tmp_path: Path) -> None:
    """helm follows the symbolic link: the package carries dashboards/ as plain files, and installs from it
    render the same dashboards."""
    package = Path(helm.package(CHART, destination=tmp_path))
    assert package.name == f"kafka-health-{VALUES_CHART_VERSION}.tgz"
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
    with helm.Chart.load(package) as packaged:
        docs = render(packaged, set_values("kafka.zookeeper=zk:2181"))
    configmap = find(docs, "ConfigMap", "kh-kafka-health-dashboards")
    assert set(configmap["data"]) == {p.name for p in DASHBOARDS.glob("*.json")}


# --- a secured ZooKeeper and the service's own TLS ---------------------------------------------------------

ZOOKEEPER_DIR = "/etc/kafka-health/zookeeper"


def containers(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every Deployment's containers."""
    return [
        (d["spec"]["template"]["spec"], c)
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]


def settings_environment(
    docs: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any], root: Path
) -> dict[str, str]:
    """The KAFKA_HEALTH_* environment ``container`` gets, as the kubelet would give it: the ConfigMap, its
    env (Secret references resolved from the chart's Secrets), and the mounted Secret files written under
    ``root`` in place of their mount paths (which the environment's paths are rewritten to)."""
    secrets = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "secret" in volume:
            sources = [(volume["secret"]["secretName"], volume["secret"]["items"])]
        else:
            projected = volume.get("projected", {}).get("sources", [])
            sources = [(s["secret"]["name"], s["secret"]["items"]) for s in projected if "secret" in s]
        sources = [(name, items) for name, items in sources if name in secrets]
        if not sources:
            continue
        target = root / mount["name"]
        target.mkdir()
        for name, items in sources:
            for item in items:
                (target / item["path"]).parent.mkdir(parents=True, exist_ok=True)
                (target / item["path"]).write_text(secrets[name][item["key"]])
        mounts[mount["mountPath"]] = target
    (configmap,) = [e["configMapRef"]["name"] for e in container["envFrom"]]
    env = dict(find(docs, "ConfigMap", configmap)["data"])
    for variable in container["env"]:
        ref = variable.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None and ref["name"] in secrets:
            env[variable["name"]] = secrets[ref["name"]][ref["key"]]

    def local(value: str) -> str:
        for mount_path, target in mounts.items():
            value = value.replace(mount_path + "/", f"{target}/")
        return value

    return {k: local(v) for k, v in env.items() if k.startswith("KAFKA_HEALTH_")}


@pytest.mark.unit
def test_the_secured_zookeeper_values_give_every_container_settings_the_product_accepts(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contract between the chart and app/settings.py: each container's environment and mounted files,
    loaded by the product's own settings (extra="forbid": a misspelled variable is an error), give the
    ZooKeeper security the values asked for."""
    docs = rendered["secured-zookeeper-values.yaml"]
    secret = find(docs, "Secret", "kh-kafka-health-zookeeper")
    assert set(secret["stringData"]) == {
        "client.properties",
        "jaas.conf",
        "truststore.pem",
        "keystore.pem",
        "keystore-password",
        "auth-digest",
    }
    config = find(docs, "ConfigMap", "kh-kafka-health")["data"]
    assert config["KAFKA_HEALTH_ZOOKEEPER__SASL_JAAS_CONFIG"] == f"{ZOOKEEPER_DIR}/jaas.conf"
    assert "keystore-secret" not in str(config), "no secret in the ConfigMap"
    assert "ops-secret" not in str(config), "no secret in the ConfigMap"
    deployment = find(docs, "Deployment", "kh-kafka-health")["spec"]["template"]["metadata"]["annotations"]
    assert deployment["checksum/zookeeper"]
    pods = containers(docs)
    assert {c["name"] for _, c in pods} == {"serve", "collect", "analytics"}
    for index, (pod, container) in enumerate(pods):
        for name in [n for n in os.environ if n.startswith("KAFKA_HEALTH_")]:
            monkeypatch.delenv(name)
        root = tmp_path / str(index)
        root.mkdir()
        for name, value in settings_environment(docs, pod, container, root).items():
            monkeypatch.setenv(name, value)
        security = load_settings().zookeeper.security()
        assert security.tls is not None, container["name"]
        assert security.tls.ca == str(root / "zookeeper" / "truststore.pem")
        assert security.tls.certfile == security.tls.keyfile == str(root / "zookeeper" / "keystore.pem")
        assert security.tls.keyfile_password == "keystore-secret"
        assert security.tls.check_hostname is True
        assert security.sasl is not None
        assert (security.sasl.username, security.sasl.password) == ("kafka", "kafka-secret")
        assert security.digest == "ops:ops-secret"
        assert security.set_acl is True


@pytest.mark.unit
def test_an_existing_secret_supplies_only_the_keys_named(chart: helm.Chart) -> None:
    docs = render(
        chart,
        set_values(
            "kafka.zookeeper=zk:2182",
            "kafka.zookeeperClient.ssl.clientEnable=true",
            "kafka.zookeeperClient.ssl.endpointIdentificationAlgorithm=",
            "kafka.zookeeperClient.existingSecret=zk-client",
            "kafka.zookeeperClient.secretKeys.jaasConfig=jaas.conf",
            "kafka.zookeeperClient.secretKeys.truststore=ca.pem",
            "kafka.zookeeperClient.secretKeys.authDigest=digest",
        ),
    )
    assert not [d for d in docs if d["kind"] == "Secret"], "the chart makes no Secret of its own"
    config = find(docs, "ConfigMap", "kh-kafka-health")["data"]
    zookeeper = {
        k: v
        for k, v in config.items()
        if k.startswith("KAFKA_HEALTH_ZOOKEEPER__") and k != "KAFKA_HEALTH_ZOOKEEPER__CONNECT"
    }
    assert zookeeper == {
        "KAFKA_HEALTH_ZOOKEEPER__SASL_JAAS_CONFIG": f"{ZOOKEEPER_DIR}/jaas.conf",
        "KAFKA_HEALTH_ZOOKEEPER__SSL_CLIENT_ENABLE": "true",
        "KAFKA_HEALTH_ZOOKEEPER__SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "",
        "KAFKA_HEALTH_ZOOKEEPER__SSL_TRUSTSTORE_LOCATION": f"{ZOOKEEPER_DIR}/truststore.pem",
        "KAFKA_HEALTH_ZOOKEEPER__SSL_TRUSTSTORE_TYPE": "PEM",
    }
    for pod, container in containers(docs):
        (volume,) = [v for v in pod["volumes"] if v["name"] == "zookeeper"]
        assert volume["secret"]["secretName"] == "zk-client"
        assert volume["secret"]["items"] == [
            {"key": "jaas.conf", "path": "jaas.conf"},
            {"key": "ca.pem", "path": "truststore.pem"},
        ]
        assert {"name": "zookeeper", "mountPath": ZOOKEEPER_DIR, "readOnly": True} in container[
            "volumeMounts"
        ]
        digest = [e for e in container["env"] if e["name"] == "KAFKA_HEALTH_ZOOKEEPER__AUTH_DIGEST"]
        assert digest == [
            {
                "name": "KAFKA_HEALTH_ZOOKEEPER__AUTH_DIGEST",
                "valueFrom": {"secretKeyRef": {"name": "zk-client", "key": "digest"}},
            }
        ]


@pytest.mark.unit
def test_an_open_zookeeper_and_plain_http_by_default(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["default-values.yaml"]
    config = find(docs, "ConfigMap", "kh-kafka-health")["data"]
    assert [k for k in config if k.startswith("KAFKA_HEALTH_ZOOKEEPER__")] == [
        "KAFKA_HEALTH_ZOOKEEPER__CONNECT"
    ]
    assert "KAFKA_HEALTH_SERVICE__TLS_CERT" not in config
    for pod, container in containers(docs):
        assert not [v for v in pod["volumes"] if v["name"] in ("zookeeper", "tls")]
        assert not [e for e in container["env"] if "ZOOKEEPER" in e["name"]]
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in container:
                assert container[probe]["httpGet"]["scheme"] == "HTTP"
    test_pod = find(docs, "Pod", "kh-kafka-health-test")
    assert (
        '"http://kh-kafka-health.observability.svc:8080"' in test_pod["spec"]["containers"][0]["command"][-1]
    )


@pytest.mark.unit
def test_the_service_serves_https_from_its_tls_secret(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["secured-zookeeper-values.yaml"]
    config = find(docs, "ConfigMap", "kh-kafka-health")["data"]
    assert config["KAFKA_HEALTH_SERVICE__TLS_CERT"] == "/etc/kafka-health/tls/tls.crt"
    assert config["KAFKA_HEALTH_SERVICE__TLS_KEY"] == "/etc/kafka-health/tls/tls.key"
    serve = find(docs, "Deployment", "kh-kafka-health")["spec"]["template"]["spec"]
    (volume,) = [v for v in serve["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "kafka-health-tls"
    (container,) = serve["containers"]
    assert {"name": "tls", "mountPath": "/etc/kafka-health/tls", "readOnly": True} in container[
        "volumeMounts"
    ]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    (endpoint,) = find(docs, "ServiceMonitor", "kh-kafka-health")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"serverName": "kh-kafka-health.observability.svc"}
    test_pod = find(docs, "Pod", "kh-kafka-health-test")["spec"]
    assert '"https://kh-kafka-health.observability.svc:8080"' in test_pod["containers"][0]["command"][-1]
    assert test_pod["volumes"][0]["secret"]["secretName"] == "kafka-health-tls"


# --- several clusters --------------------------------------------------------------------------------------


def load_container_settings(
    docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, root: Path
) -> Iterator[tuple[str, Path, Any]]:
    """(container name, where its mounted files are, its Settings) for every container of ``docs``, each
    loaded by the product's own settings from the environment the kubelet would give it."""
    for index, (pod, container) in enumerate(containers(docs)):
        for name in [n for n in os.environ if n.startswith("KAFKA_HEALTH_")]:
            monkeypatch.delenv(name)
        files = root / str(index)
        files.mkdir()
        for name, value in settings_environment(docs, pod, container, files).items():
            monkeypatch.setenv(name, value)
        yield container["name"], files, load_settings()


@pytest.mark.unit
def test_the_multi_cluster_values_give_every_container_the_clusters_the_product_accepts(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two named clusters, one of them secured: each container's environment and mounted files, loaded by
    app/settings.py, watch both clusters with their own ZooKeeper, metrics and credentials, the shared
    kafka.zookeeperClient under what each cluster sets."""
    docs = rendered["multi-cluster-values.yaml"]
    config = find(docs, "ConfigMap", "kh-kafka-health")["data"]
    assert "KAFKA_HEALTH_ZOOKEEPER__CONNECT" not in config, "a named cluster's ZooKeeper only"
    assert config["KAFKA_HEALTH_CLUSTERS__ORDERS-EU__ZOOKEEPER__CONNECT"].startswith("zk-0.zk-orders:2181")
    assert config["KAFKA_HEALTH_CLUSTERS__PAYMENTS__ZOOKEEPER__SASL_JAAS_CONFIG"] == (
        f"{ZOOKEEPER_DIR}/payments/jaas.conf"
    )
    for secret_text in ("payments-secret", "payments-keystore-secret", "payments-digest", "ops-secret"):
        assert secret_text not in str(config), "no secret in the ConfigMap"
    secret = find(docs, "Secret", "kh-kafka-health-zookeeper")
    assert set(secret["stringData"]) == {
        "auth-digest",
        "payments.jaas.conf",
        "payments.truststore.pem",
        "payments.keystore.pem",
        "payments.keystore-password",
        "payments.auth-digest",
    }
    loaded = list(load_container_settings(docs, monkeypatch, tmp_path))
    assert [name for name, _, _ in loaded] == ["collect", "analytics", "serve"]
    for name, files, settings in loaded:
        orders, payments = settings.watched()
        assert (orders.name, orders.connect) == ("orders-eu", "zk-0.zk-orders:2181,zk-1.zk-orders:2181/kafka")
        assert orders.metrics is not None
        assert orders.metrics.url_template == "http://{host}:9404/metrics", name
        open_ = orders.zookeeper.security()
        assert (open_.tls, open_.sasl) == (None, None), name
        assert (open_.digest, open_.set_acl) == ("ops:ops-secret", True), "the shared client's"

        assert (payments.name, payments.connect) == (
            "payments",
            "zk-0.zk-payments:2182,zk-1.zk-payments:2182/kafka",
        )
        assert payments.metrics is not None
        assert payments.metrics.url_template == "http://{host}:7071/metrics", "the shared template"
        secured = payments.zookeeper.security()
        assert secured.tls is not None, name
        own = files / "zookeeper" / "payments"
        assert secured.tls.ca == str(own / "truststore.pem")
        assert secured.tls.certfile == secured.tls.keyfile == str(own / "keystore.pem")
        assert secured.tls.keyfile_password == "payments-keystore-secret"
        assert secured.tls.check_hostname is True
        assert secured.sasl is not None
        assert (secured.sasl.username, secured.sasl.password) == ("payments", "payments-secret")
        assert (secured.digest, secured.set_acl) == ("payments:payments-digest", False), (
            "its own, over the shared"
        )


@pytest.mark.unit
def test_a_cluster_with_its_own_existing_secret_mounts_it_beside_the_shared_files(chart: helm.Chart) -> None:
    docs = render(
        chart,
        set_values(
            "kafka.zookeeperClient.jaasConfig=Client {};",
            "kafka.clusters.prod.zookeeper=zk-prod:2182",
            "kafka.clusters.prod.zookeeperClient.ssl.clientEnable=true",
            "kafka.clusters.prod.zookeeperClient.existingSecret=zk-prod",
            "kafka.clusters.prod.zookeeperClient.secretKeys.truststore=ca.pem",
            "kafka.clusters.prod.zookeeperClient.secretKeys.keystorePassword=password",
            "kafka.clusters.stage.zookeeper=zk-stage:2181",
        ),
    )
    assert find(docs, "Secret", "kh-kafka-health-zookeeper")["stringData"] == {"jaas.conf": "Client {};"}
    config = find(docs, "ConfigMap", "kh-kafka-health")["data"]
    prod = f"{ZOOKEEPER_DIR}/prod"
    assert {k: v for k, v in config.items() if "ZOOKEEPER__" in k} == {
        "KAFKA_HEALTH_ZOOKEEPER__SASL_JAAS_CONFIG": f"{ZOOKEEPER_DIR}/jaas.conf",
        "KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__CONNECT": "zk-prod:2182",
        "KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__SSL_CLIENT_ENABLE": "true",
        "KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__SSL_TRUSTSTORE_LOCATION": f"{prod}/truststore.pem",
        "KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__SSL_TRUSTSTORE_TYPE": "PEM",
        "KAFKA_HEALTH_CLUSTERS__STAGE__ZOOKEEPER__CONNECT": "zk-stage:2181",
    }
    pods = containers(docs)
    assert {c["name"] for _, c in pods} == {"serve", "collect", "analytics"}
    for pod, container in pods:
        (volume,) = [v for v in pod["volumes"] if v["name"] == "zookeeper"]
        assert volume["projected"]["sources"] == [
            {
                "secret": {
                    "name": "kh-kafka-health-zookeeper",
                    "items": [{"key": "jaas.conf", "path": "jaas.conf"}],
                }
            },
            {"secret": {"name": "zk-prod", "items": [{"key": "ca.pem", "path": "prod/truststore.pem"}]}},
        ]
        assert {"name": "zookeeper", "mountPath": ZOOKEEPER_DIR, "readOnly": True} in container[
            "volumeMounts"
        ]
        password = [e for e in container["env"] if "PASSWORD" in e["name"]]
        assert password == [
            {
                "name": "KAFKA_HEALTH_CLUSTERS__PROD__ZOOKEEPER__SSL_KEYSTORE_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "zk-prod", "key": "password"}},
            }
        ]
    for version in KUBERNETES_VERSIONS:
        for doc in docs:
            if not doc["apiVersion"].startswith("monitoring.coreos.com/"):
                kubernetes_validate.validate(doc, version, strict=True)


@pytest.fixture(scope="module")
def chart_without_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[helm.Chart]:
    """The chart as ``helm install --skip-schema-validation`` sees it: only the templates' checks."""
    copy_ = tmp_path_factory.mktemp("chart") / "kafka-health"
    shutil.copytree(CHART, copy_, symlinks=False)
    (copy_ / "values.schema.json").unlink()
    with helm.Chart.load(copy_) as loaded:
        yield loaded


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ("kafka.zookeeper=zk:2181", "kafka.clusters.prod.zookeeper=zk:2182"),
            "kafka.zookeeper and kafka.clusters are both set",
        ),
        (("kafka.clusters.Prod.zookeeper=zk:2181",), "kafka.clusters.Prod: not a cluster name"),
        (
            ("kafka.clusters.eu__west.zookeeper=zk:2181",),
            'kafka.clusters.eu__west: a cluster name cannot hold "__"',
        ),
        (
            ("kafka.clusters.prod.metricsUrlTemplate=http://{host}:7071/metrics",),
            "kafka.clusters.prod.zookeeper is required",
        ),
    ],
)
def test_the_templates_check_the_clusters_without_the_schema(
    chart_without_schema: helm.Chart, sets: tuple[str, ...], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as failed:
        render(chart_without_schema, set_values(*sets))
    assert message in str(failed.value)
