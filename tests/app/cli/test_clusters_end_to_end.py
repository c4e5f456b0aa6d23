"""Several clusters through the three commands: two reference clusters watched by one ``collect`` (the real
command, into a spool), one analytics job on that spool (on the run's Spark session, with the deployment's
cluster names) and one ``serve`` (the real command in a child process) on the job's store: each cluster's
load windows under its own name with its own brokers only, and a broker stopped on b alerts on b only.

The commands' own tests cover the rest of several clusters: ``test_collect_clusters.py`` (one cluster's
ZooKeeper stopped), ``tests/analytics/spark/test_clusters.py`` (the job's per-cluster evaluation),
``tests/app/service/test_clusters.py`` and ``test_serve_clusters.py`` (routes, actions, a ZooKeeper
stopped).
"""

from __future__ import annotations

import io
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from analytics.config import AnalyticsSettings
from analytics.rules import RuleSettings
from analytics.spark.job import query_failure, start_query, stop_query
from app.cli import collect as collect_command
from app.cli.common import ExitCode
from app.cli.main import build_parser
from app.embedded.zookeeper import pick_free_port
from tests.support.cli import CliFactory
from tests.support.reference_cluster import ClusterFactory, wait_for
from tests.support.store import open_store

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

WINDOW_S = 2.0
VIEWER = {"Authorization": "Bearer token-for-me"}


def sub_chroots(zk_connect: str, *names: str) -> list[str]:
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    try:
        for name in names:
            client.ensure_path(f"/{name}")
    finally:
        client.stop()
        client.close()
    return [f"{zk_connect}/{name}" for name in names]


def test_two_clusters_through_collect_the_job_and_serve(
    make_cluster: ClusterFactory,
    zk_connect: str,
    spark_session: Any,
    run_cli: CliFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("KAFKA_HEALTH_ZOOKEEPER__CONNECT", "KAFKA_HEALTH_SAMPLER__SINK", "KAFKA_HEALTH_METRICS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KAFKA_HEALTH_SERVICE__TOKENS", "me:viewer:token-for-me")
    monkeypatch.setenv("KAFKA_HEALTH_ANALYTICS__RULES__FOR_S", '{"5": 0}')
    zk_a, zk_b = sub_chroots(zk_connect, "a", "b")
    a = make_cluster(zookeeper=zk_a, brokers=3, address_per_broker=True)
    b = make_cluster(zookeeper=zk_b, brokers=4, address_per_broker=True)
    flags = [
        "--cluster", f"a={zk_a},http://{{host}}:{a.metrics_port}/metrics",
        "--cluster", f"b={zk_b},http://{{host}}:{b.metrics_port}/metrics",
    ]  # fmt: skip
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    port = pick_free_port()
    serve = run_cli("serve", *flags, "--store-url", store_url, "--port", str(port))
    serve.expect(r"kafka-health serving a \(.*\), b \(.*\) on http://127\.0\.0\.1:\d+")
    url = f"http://127.0.0.1:{port}/api/v1/clusters"

    spool = tmp_path / "spool"
    stop = threading.Event()
    result: list[tuple[int, str, str]] = []

    def collect() -> None:
        argv = ["collect", *flags, "--sink", f"spool:{spool}", "--create-spool", "--interval", "0.5"]
        out, err = io.StringIO(), io.StringIO()
        code = collect_command.run(build_parser().parse_args(argv), out, err, stop=stop)
        result.append((code, out.getvalue(), err.getvalue()))

    collector = threading.Thread(target=collect, name="collect")
    collector.start()
    settings = AnalyticsSettings(
        source=f"spool:{spool}",
        window_s=WINDOW_S,
        watermark_s=0.5,
        trigger_s=0.5,
        checkpoint=str(tmp_path / "checkpoint"),
        store_url=store_url,
        rules=RuleSettings(open_after=1, resolve_after=1, urp_for_s=0.0),
    )
    wait_for(spool.is_dir, timeout=30, message="the spool directory")
    job_store = open_store(store_url)
    query = start_query(spark_session, settings, job_store, clusters=["a", "b"])
    try:

        def latest_brokers(cluster: str) -> list[int] | None:
            load = httpx.get(f"{url}/{cluster}/load", headers=VIEWER, timeout=10)
            assert load.status_code == 200, load.text
            latest = load.json()["latest"]
            return None if latest is None else [row["broker"] for row in latest["brokers"]]

        assert wait_for(lambda: latest_brokers("a"), timeout=120, message="a load window of a") == [0, 1, 2]
        assert wait_for(lambda: latest_brokers("b"), timeout=30, message="a load window of b") == [0, 1, 2, 3]
        loads = [httpx.get(f"{url}/{c}/load", headers=VIEWER).json()["latest"] for c in ("a", "b")]
        assert [load["cluster"] for load in loads] == ["a", "b"]
        assert all(row["metrics"] for load in loads for row in load["brokers"]), "scraped load on both"

        def open_broker_down(cluster: str) -> list[str]:
            page = httpx.get(f"{url}/{cluster}/alerts", headers=VIEWER, params={"state": "open", "rule": "5"})
            assert page.status_code == 200, page.text
            return [alert["cluster"] + ":" + alert["subject"] for alert in page.json()["items"]]

        b.stop_broker(3)
        assert wait_for(lambda: open_broker_down("b"), timeout=30, message="rule 5 open on b") == [
            "b:broker:3"
        ]
        assert open_broker_down("a") == []
    finally:
        stop.set()
        collector.join(timeout=30)
        stop_query(query)
        job_store.close()
    assert query_failure(query) is None
    ((code, out, err),) = result
    assert (code, err) == (ExitCode.OK, ""), out
    assert "[a] " in out
    assert "[b] " in out
    assert serve.stop(signal.SIGTERM, timeout=30) == ExitCode.OK, serve.output()
    with open_store(store_url) as store:
        assert sorted(store.clusters()) == ["a", "b"]
