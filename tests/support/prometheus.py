"""pytest plugin: a real Prometheus server (Debian's ``prometheus`` package) and ``promtool``.

* ``start_prometheus(targets, rule_files=...)`` (fixture, a factory): writes a config that scrapes the
  targets every second, starts ``prometheus`` on 127.0.0.1 and a free port with its TSDB in the test's
  temporary directory, waits until it is ready and stops it at teardown (SIGTERM, then SIGKILL), so no
  process is left behind.
* ``promtool``, ``prometheus_binary`` (fixtures): the paths of ``promtool`` and ``prometheus``.
* ``report_note`` (fixture): ``report_note(line)`` prints the line in a section at the end of the run
  (whatever the capture mode), for what a test wants said even when it passes.

Neither skips when the binary is missing: the test fails and says how to install it (``make prometheus``,
i.e. ``apt-get install prometheus``), unless ``KAFKA_HEALTH_SKIP_PROMETHEUS=1`` is set, which skips them.

Enable it in ``tests/conftest.py``: ``pytest_plugins = [..., "tests.support.prometheus"]``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from app.embedded.zookeeper import pick_free_port
from tests.support import daemons

SKIP_ENV = "KAFKA_HEALTH_SKIP_PROMETHEUS"
INSTALL_HINT = (
    "run `make prometheus` (it installs Debian's prometheus package: "
    "`apt-get install --no-install-recommends prometheus`, which brings promtool too), "
    f"or set {SKIP_ENV}=1 to skip the tests that need it"
)
NOTES_TITLE = "kafka-health dashboards, rules and chart"

_notes_key = pytest.StashKey[list[str]]()


class PrometheusError(Exception):
    """Prometheus answered a query with an error (a bad expression, a bad parameter)."""


def find_binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``: fails the test (does not skip) when it is missing,
    except under ``KAFKA_HEALTH_SKIP_PROMETHEUS=1``."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the tests that need {name} do not run")
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: {INSTALL_HINT}", pytrace=False)
    return path


@dataclass
class Prometheus:
    """A running Prometheus server and its HTTP API."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    config_path: Path
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10.0))

    def api(self, path: str, **params: Any) -> Any:
        """GET ``/api/v1/<path>``; the ``data`` of a success, PrometheusError with the error otherwise."""
        response = self.client.get(f"{self.url}/api/v1/{path}", params=params)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result (vector or scalar as a one-element list)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.api("query", **params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query's series (each with its ``values``)."""
        data = self.api("query_range", query=expr, start=start, end=end, step=step)
        return list(data["result"])

    def label_values(self, label: str, match: str) -> list[str]:
        return list(self.api(f"label/{label}/values", **{"match[]": match}))

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self.api("rules")["groups"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def wait_for_scrapes(self, samples: int, timeout: float = 30.0) -> None:
        """Until every target has been scraped successfully ``samples`` times (a series needs two samples
        for rate(); the count comes from ``scrape_samples_scraped`` over the last minute)."""
        deadline = time.monotonic() + timeout
        last = "no target"
        while time.monotonic() < deadline:
            targets = self.targets()
            if targets and all(t["health"] == "up" for t in targets):
                counts = self.query("count_over_time(up[1m])")
                if len(counts) == len(targets) and all(float(c["value"][1]) >= samples for c in counts):
                    return
                last = f"scrapes so far: {[c['value'][1] for c in counts]}"
            elif targets:
                last = "; ".join(f"{t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}" for t in targets)
            time.sleep(0.25)
        raise AssertionError(f"Prometheus did not scrape {samples} times within {timeout:g}s ({last})")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        self.client.close()
        daemons.stop(self.process)


class PrometheusFactory(Protocol):
    """``start_prometheus(targets, *, rule_files=(), scrape_interval="1s", job="kafka-health")``: a
    Prometheus scraping ``targets`` (``host:port``) at ``/metrics``, evaluating ``rule_files``."""

    def __call__(
        self,
        targets: Sequence[str],
        *,
        rule_files: Sequence[Path] = (),
        scrape_interval: str = "1s",
        job: str = "kafka-health",
    ) -> Prometheus: ...


def write_config(
    path: Path, targets: Sequence[str], rule_files: Sequence[Path], scrape_interval: str, job: str
) -> None:
    """Prometheus' YAML config, written as JSON (which is YAML)."""
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(p.resolve()) for p in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": list(targets)}],
            }
        ],
    }
    path.write_text(json.dumps(config, indent=2))


def _launch(binary: str, config: Path, data: Path, log_path: Path) -> Prometheus:
    port = pick_free_port()
    process = daemons.launch(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ],
        log_path,
    )
    return Prometheus(f"http://127.0.0.1:{port}", process, log_path, config)


def _wait_ready(prometheus: Prometheus) -> bool:
    """True once ``/-/ready`` answers 200; False when the process exited (e.g. its port was taken)."""
    return daemons.ready(prometheus, "Prometheus")


@pytest.fixture
def report_note(request: pytest.FixtureRequest) -> Callable[[str], None]:
    notes = request.config.stash.setdefault(_notes_key, [])
    return notes.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    recorded: list[str] = config.stash.get(_notes_key, [])
    notes = list(dict.fromkeys(recorded))
    if notes:
        terminalreporter.section(NOTES_TITLE)
        for line in notes:
            terminalreporter.write_line(line)


@pytest.fixture
def promtool() -> str:
    return find_binary("promtool")


@pytest.fixture
def prometheus_binary() -> str:
    return find_binary("prometheus")


@pytest.fixture
def start_prometheus(prometheus_binary: str, tmp_path: Path) -> Iterator[PrometheusFactory]:
    """Request it before the fixtures that take long to start: a missing binary fails the test first."""
    started: list[Prometheus] = []

    def start(
        targets: Sequence[str],
        *,
        rule_files: Sequence[Path] = (),
        scrape_interval: str = "1s",
        job: str = "kafka-health",
    ) -> Prometheus:
        home = tmp_path / f"prometheus-{len(started)}"
        home.mkdir()
        config = home / "prometheus.yml"
        write_config(config, targets, rule_files, scrape_interval, job)
        for _ in range(3):  # the free port may be taken between picking it and binding it
            prometheus = _launch(prometheus_binary, config, home / "data", home / "prometheus.log")
            started.append(prometheus)
            if _wait_ready(prometheus):
                return prometheus
            prometheus.stop()
        raise AssertionError(f"Prometheus did not start:\n{prometheus.log()}")

    try:
        yield start
    finally:
        for prometheus in reversed(started):
            prometheus.stop()


# --- Grafana dashboards: their PromQL -------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = REPO_ROOT / "dashboards"
RULES_FILE = DASHBOARDS_DIR / "prometheus" / "kafka-health-rules.yml"
GRAFANA_VARIABLES = {"__rate_interval": "15s", "__interval": "15s", "__range": "5m"}
"""What Grafana puts in for its built-in variables (with a 1 s scrape interval, 15 s covers many samples)."""

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


@dataclass(frozen=True, slots=True)
class PanelQuery:
    """One PromQL target of one dashboard panel."""

    dashboard: str
    """The dashboard's uid."""
    panel: str
    """The panel's title."""
    panel_type: str
    ref_id: str
    expr: str
    instant: bool
    legend: str

    @property
    def name(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}"


def load_dashboards(directory: Path = DASHBOARDS_DIR) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` dashboard of ``directory`` by file name."""
    return {path.name: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}


def iter_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The dashboard's panels, those inside collapsed rows included (rows themselves are not)."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def panel_queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    return [
        PanelQuery(
            dashboard["uid"],
            panel["title"],
            panel["type"],
            target["refId"],
            target["expr"],
            bool(target.get("instant")) and not target.get("range", False),
            target.get("legendFormat", ""),
        )
        for panel in iter_panels(dashboard)
        for target in panel.get("targets", [])
        if not target.get("hide")
    ]


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Grafana's variable interpolation (``$x``, ``${x}``, ``${x:fmt}``, ``[[x]]``) with ``variables``
    and :data:`GRAFANA_VARIABLES`; KeyError naming a variable that has no value."""
    values = {**GRAFANA_VARIABLES, **variables}

    def replace(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g is not None)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)
