"""The PySpark Structured Streaming job: samples → per-broker window averages → the load model → alert
rules → store.

The query (one per checkpoint):

1. **Read** the collectors' samples as a stream: the spool directory through Spark's file source (whole
   files only: the collectors write a hidden temp file and rename it), or a Kafka topic (see
   :mod:`analytics.spark.kafka_source`). A line that is not a valid sample is kept as a ``__malformed__`` row
   so that it is counted and reported for its window instead of failing the job.
2. **Deduplicate** by ``(collector_id, sequence)`` within the watermark: a batch the collector wrote twice
   (a retried Kafka publish) counts once.
3. **Window**: tumbling event-time windows of ``window_s`` with a watermark of ``watermark_s``; per cluster,
   window, broker and metric the average, and per cluster and window the latest health document. Output
   mode append: each window is emitted once, when the watermark has passed its end.
4. **foreachBatch**: the load model runs on the executors as a grouped pandas UDF per (cluster, window)
   (``applyInPandas``), so no raw sample reaches the driver; the driver gets one row per broker and window
   plus the health documents, evaluates the rules and commits to the store (:mod:`analytics.pipeline`).

Several clusters: every step is per cluster (the samples' ``cluster``), so two clusters' windows, load and
alerts never mix. The watermark is the query's, one for all clusters: it follows the newest sample of any
cluster, so a cluster whose samples stop does not hold back the others' windows (its own last windows close
as the others' samples move the watermark on). Given the deployment's cluster names (``clusters``), the
job drops the samples of any other cluster, and says so once per unknown name.

Exactly once: Spark's checkpoint makes a restarted query re-run an unfinished batch with the same id and
the same input; the store's processed-batches row, written in the same transaction as the results, makes
that re-run a no-op if the first run got as far as committing.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Final

import pandas as pd

from analytics.config import DEFAULT_MASTER, AnalyticsSettings
from analytics.load_model import LoadModelError, compute_load, load_report_rows
from analytics.model import BrokerLoad, LoadWindow, Window
from analytics.pipeline import BatchOutcome, HealthSample, WindowInput, process_batch
from analytics.store import ANALYTICS_MIGRATIONS, Migration, Store
from collectors.samples import LOAD_METRICS, SAMPLE_SCHEMA_VERSION
from collectors.transport import check_spool_directory, parse_transport

log = logging.getLogger(__name__)

HEALTH = "__health__"
MALFORMED = "__malformed__"
"""``kind`` of the aggregated rows besides ``broker``: health documents, and lines that are not samples."""

_SAMPLE_DDL = (
    "v INT, collector_id STRING, sequence BIGINT, timestamp DOUBLE, kind STRING, cluster STRING, "
    "broker INT, metrics MAP<STRING, DOUBLE>, health STRING, _corrupt_record STRING"
)
"""A sample line (collectors/samples.py). ``health`` is read as the raw JSON text of the object."""

_LOAD_COLUMNS = (
    ("cluster", "STRING"),
    ("window_start", "DOUBLE"),
    ("window_end", "DOUBLE"),
    ("broker", "INT"),
    ("normalized_load", "DOUBLE"),
    ("deviation_rate", "DOUBLE"),
    ("weighted_load", "DOUBLE"),
    ("shares", "MAP<STRING,DOUBLE>"),
    ("metrics", "MAP<STRING,DOUBLE>"),
    ("stddev", "DOUBLE"),
    ("stddev_threshold", "DOUBLE"),
    ("rated_deviation", "DOUBLE"),
    ("error", "STRING"),
)
LOAD_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _LOAD_COLUMNS)
"""The grouped pandas UDF's output: one row per broker and window (``error`` set on a single row with
broker -1 when the model could not run)."""


# --- the session -----------------------------------------------------------------------------------------


DRIVER_ADDRESS_KEYS: Final = ("spark.driver.bindAddress", "spark.driver.host")
LOOPBACK: Final = "127.0.0.1"


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[N,F]``, ``local[*]`` or ``local-cluster[...]``: everything on this
    machine."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def driver_address_conf(master: str, configured: Collection[str], env: Mapping[str, str]) -> dict[str, str]:
    """The driver's addresses the job sets: loopback for a local master, so that the driver's RPC and
    block-manager ports (unauthenticated unless ``spark.authenticate`` is on) are not reachable from the
    network, where Spark would otherwise bind every interface and advertise the host's name.

    Nothing when the user chose them: a key in ``configured`` (the settings' ``spark_conf``, Spark's own
    ``spark-defaults.conf`` or ``--conf``) or ``SPARK_LOCAL_IP`` in ``env``. Nothing for an external
    master either: the executors run on other machines and must reach the driver, so Spark's defaults (or
    the user's choice) stand there."""
    if not is_local_master(master) or env.get("SPARK_LOCAL_IP"):
        return {}
    return {key: LOOPBACK for key in DRIVER_ADDRESS_KEYS if key not in configured}


def choose_master(configured: str | None, spark_own: str | None) -> str:
    """The job's master: the settings' (``--master``, ``KAFKA_HEALTH_ANALYTICS__MASTER``) when set, else
    Spark's own under ``spark-submit`` (its ``--master``, or ``spark.master`` in ``spark-defaults.conf``),
    else ``local[2]``. Without the
    middle step ``spark-submit --master spark://…`` would quietly run the job in local mode."""
    return configured or spark_own or DEFAULT_MASTER


def under_spark_submit(env: Mapping[str, str]) -> bool:
    """Whether ``spark-submit`` started this driver (its JVM is there already, and says where in
    ``PYSPARK_GATEWAY_PORT``). Only then is Spark's ``spark.master`` the user's choice: a JVM that pyspark
    launches itself has ``local[*]`` there by default."""
    return "PYSPARK_GATEWAY_PORT" in env


PYTHON_CONF: Final = "spark.pyspark.python"


def worker_python(spark_conf: Mapping[str, str], env: Mapping[str, str], driver_python: str) -> str:
    """The interpreter the executors' Python workers run (pyspark sends the driver's ``PYSPARK_PYTHON``
    with every Python function): ``spark.pyspark.python`` from the settings, else ``PYSPARK_PYTHON``
    (which ``spark-submit --conf spark.pyspark.python=…`` sets for the driver), else the driver's own
    interpreter, right only when the executors run on this machine or one laid out like it."""
    return spark_conf.get(PYTHON_CONF) or env.get("PYSPARK_PYTHON") or driver_python


def _launch_jvm_in_own_session(output: IO[bytes] | None = None) -> None:
    """Start the driver's JVM (unless running) in a session and process group of its own. A stop signal
    sent to our process group (systemd's default, a terminal's job control, ``kill -- -PGID``) would
    otherwise reach the JVM too, whose shutdown hooks stop the SparkContext under a running batch; the
    job's own stop (:func:`stop_query`, then :func:`stop_session`) is the only one. The JVM still ends
    with us: it exits when its standard input (a pipe from this process) closes.

    ``output``: where the JVM's standard output and error go (Spark's log4j console, the Python workers'
    stderr, which Spark copies there), instead of ours; the demo keeps its console for its story."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is None:
        popen_kwargs: dict[str, Any] = {"start_new_session": True}
        if output is not None:
            popen_kwargs.update(stdout=output, stderr=subprocess.STDOUT)
        gateway = launch_gateway(popen_kwargs=popen_kwargs)  # type: ignore[no-untyped-call]
        SparkContext._ensure_initialized(gateway=gateway)


def _spark_defaults(keys: Collection[str]) -> dict[str, str]:
    """Which of ``keys`` Spark's own configuration sets (``spark-defaults.conf``, ``spark-submit``'s
    ``--master`` and ``--conf``, ``--conf`` in ``PYSPARK_SUBMIT_ARGS``), with their values: the JVM,
    launched now if need be, holds them as system properties."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    conf = SparkConf()
    return {key: str(conf.get(key)) for key in keys if conf.contains(key)}


def build_session(
    settings: AnalyticsSettings, app_name: str = "kafka-health-analytics", jvm_output: IO[bytes] | None = None
) -> Any:
    """A SparkSession for the job, on :func:`choose_master`'s master. The executors' Python workers run
    :func:`worker_python`; they import our packages from what the job ships (``--py-files``, see
    docs/analytics.md) or, on this machine, from the driver's installation. A local master's driver
    listens on loopback only (:func:`driver_address_conf`). ``jvm_output``: where the driver's JVM writes
    its console, when this starts it (default: our stdout and stderr)."""
    os.environ["PYSPARK_PYTHON"] = worker_python(settings.spark_conf, os.environ, sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    _launch_jvm_in_own_session(jvm_output)
    submitted = under_spark_submit(os.environ)
    spark_own = _spark_defaults(("spark.master", *DRIVER_ADDRESS_KEYS))
    master = choose_master(settings.master, spark_own.get("spark.master") if submitted else None)
    addresses: dict[str, str] = {}
    if is_local_master(master):
        configured = set(settings.spark_conf) | set(spark_own)
        addresses = driver_address_conf(master, configured, os.environ)

    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # The state is small (a row per broker and open window): Spark's 200 shuffle partitions would
        # mean 200 state-store partitions per stateful operator and slow micro-batches for nothing.
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.files.ignoreMissingFiles", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    )
    for key, value in {**addresses, **settings.spark_conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _py_files_for_driver_workers(spark.sparkContext)
    if not log.isEnabledFor(logging.DEBUG):
        _quiet_query_failures(spark)
    return spark


def _py_files_for_driver_workers(sc: Any) -> None:
    """Put ``--py-files`` on the path of the Python workers the driver's JVM starts itself: Spark plans a
    Python data source (the Kafka source without the connector) in such a worker, which gets Spark's
    files directory but not the shipped archives in it (found on a standalone cluster: ``No module named
    'analytics'`` while planning). The executors' workers are unaffected: they add the archives from their
    own files directory, where these driver paths do not exist."""
    from pyspark import SparkFiles

    includes = [os.path.join(SparkFiles.getRootDirectory(), name) for name in sc._python_includes]
    if includes:
        current = sc.environment.get("PYTHONPATH")
        sc.environment["PYTHONPATH"] = os.pathsep.join([*includes, *([current] if current else [])])


QUERY_LOGGERS: Final = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
)
"""Where Spark logs a failed query with its JVM stack trace (Spark 4.1's package, then 4.0's)."""


def _quiet_query_failures(spark: Any) -> None:
    """Spark logs a failed query at ERROR with a JVM stack trace of a hundred lines, and then raises it to
    whoever waits on the query, which reports it (the command line in one line, the rest at debug): the
    log record says it a second time, so it is off unless debugging."""
    jvm = spark.sparkContext._jvm
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in QUERY_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)


def stop_session(spark: Any) -> None:
    """Stop the session and its JVM now (pyspark otherwise leaves the JVM until the interpreter exits),
    so a test run or an embedding process leaves no Java process behind."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    finally:
        SparkContext._gateway = None
        SparkContext._jvm = None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)


# --- the stream ------------------------------------------------------------------------------------------


def read_samples(spark: Any, settings: AnalyticsSettings) -> Any:
    """The raw sample rows as a streaming DataFrame (schema ``_SAMPLE_DDL``)."""
    spec = parse_transport(settings.source)
    if spec.kind == "spool":
        assert spec.directory is not None
        if settings.create_spool:
            spec.directory.mkdir(parents=True, exist_ok=True)
        else:
            check_spool_directory(spec.directory)
        return (
            spark.readStream.schema(_SAMPLE_DDL)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
            .option("maxFilesPerTrigger", settings.max_files_per_trigger)
            .json(str(spec.directory))
        )
    from analytics.spark.kafka_source import read_kafka_samples

    return read_kafka_samples(spark, spec, _SAMPLE_DDL, settings.kafka_options)


def sample_rows(raw: Any, settings: AnalyticsSettings) -> Any:
    """Validated, deduplicated sample rows exploded to one row per (sample, metric): ``cluster, broker,
    event_time, metric, value, health`` (``health`` a struct for ``__health__`` rows, the offending text
    for ``__malformed__`` rows)."""
    from pyspark.sql import functions as F

    valid = (
        (F.col("_corrupt_record").isNull())
        & (F.col("v") == SAMPLE_SCHEMA_VERSION)
        & F.col("collector_id").isNotNull()
        & F.col("sequence").isNotNull()
        & F.col("cluster").isNotNull()
        & F.col("timestamp").isNotNull()
        & ~F.isnan("timestamp")
        & (
            ((F.col("kind") == "broker") & F.col("broker").isNotNull() & F.col("metrics").isNotNull())
            | ((F.col("kind") == "cluster") & F.col("health").isNotNull())
        )
    )
    stamped = raw.withColumn("valid", F.coalesce(valid, F.lit(False))).withColumn(
        "event_time",
        F.when(F.col("valid"), F.timestamp_seconds("timestamp")).otherwise(F.current_timestamp()),
    )
    watermarked = stamped.withWatermark("event_time", f"{settings.watermark_s:g} seconds")
    # Malformed lines have no identity to deduplicate on; give each a unique one.
    keyed = watermarked.withColumn(
        "dedup_id",
        F.when(F.col("valid"), F.concat_ws("/", "collector_id", F.col("sequence").cast("string"))).otherwise(
            F.concat(
                F.lit("malformed/"), F.sha2(F.coalesce("_corrupt_record", F.to_json(F.struct("*"))), 256)
            )
        ),
    )
    # A static DataFrame (a backfill, a test) has no watermark to bound the state: plain dropDuplicates.
    keyed = (
        keyed.dropDuplicatesWithinWatermark(["dedup_id"])
        if raw.isStreaming
        else keyed.dropDuplicates(["dedup_id"])
    )
    good = keyed.filter(F.col("valid"))
    no_metrics = [F.lit(None).cast("double").alias(c) for c in METRIC_COLUMNS]
    known = F.array(*[F.lit(m) for m in LOAD_METRICS])
    # Higher-order functions keep the expressions small (Spark's generated code carries them in comments).
    usable = F.map_filter("metrics", lambda k, v: F.array_contains(known, k) & _usable(v))
    unusable = F.map_filter("metrics", lambda k, v: F.array_contains(known, k) & ~_usable(v))
    brokers = good.filter(F.col("kind") == "broker").select(
        "cluster",
        "broker",
        "event_time",
        F.lit(BROKER).alias("kind"),
        *[usable[m].alias(name) for m, name in zip(LOAD_METRICS, METRIC_COLUMNS, strict=True)],
        F.size(unusable).alias("bad"),
        F.lit(None).cast(_HEALTH_STRUCT).alias("health"),
    )
    health = good.filter(F.col("kind") == "cluster").select(
        "cluster",
        F.lit(-1).alias("broker"),
        "event_time",
        F.lit(HEALTH).alias("kind"),
        *no_metrics,
        F.lit(0).alias("bad"),
        F.struct(
            "collector_id",
            "timestamp",
            F.col("health").alias("doc"),
            F.lit(None).cast("string").alias("text"),
        ).alias("health"),
    )
    malformed = keyed.filter(~F.col("valid")).select(
        F.coalesce("cluster", F.lit("unknown")).alias("cluster"),
        F.lit(-1).alias("broker"),
        "event_time",
        F.lit(MALFORMED).alias("kind"),
        *no_metrics,
        F.lit(1).alias("bad"),
        F.struct(
            F.lit(None).cast("string").alias("collector_id"),
            F.lit(None).cast("double").alias("timestamp"),
            F.lit(None).cast("string").alias("doc"),
            F.substring(F.coalesce("_corrupt_record", F.to_json(F.struct("*"))), 1, 300).alias("text"),
        ).alias("health"),
    )
    return brokers.unionByName(health).unionByName(malformed)


BROKER = "broker"
METRIC_PREFIX = "m_"
METRIC_COLUMNS = tuple(f"{METRIC_PREFIX}{m}" for m in LOAD_METRICS)
"""One column per load-model metric: a sample's metrics map is fixed-shape, so averaging columns per broker
keeps one state row per (window, broker) instead of one per metric as well."""
_HEALTH_STRUCT = "struct<collector_id:string,timestamp:double,doc:string,text:string>"


def _usable(value: Any) -> Any:
    """A metric value the load model can take: finite and not negative (else the sample is reported)."""
    from pyspark.sql import functions as F

    return value.isNotNull() & ~F.isnan(value) & (value >= 0) & (value < math.inf)


def window_aggregates(rows: Any, settings: AnalyticsSettings) -> Any:
    """Per cluster, event-time window, broker and kind: each metric's average, the sample count, the
    number of unusable values (reported as malformed), and the latest health document."""
    from pyspark.sql import functions as F

    window = F.window("event_time", f"{settings.window_s:g} seconds")
    return (
        rows.groupBy(window.alias("window"), "cluster", "broker", "kind")
        .agg(
            *[F.avg(c).alias(c) for c in METRIC_COLUMNS],
            F.count(F.lit(1)).alias("samples"),
            F.sum("bad").alias("bad"),
            F.max_by("health", "event_time").alias("health"),
        )
        .select(
            "cluster",
            (F.unix_micros(F.col("window.start")) / 1e6).alias("window_start"),
            (F.unix_micros(F.col("window.end")) / 1e6).alias("window_end"),
            "broker",
            "kind",
            *METRIC_COLUMNS,
            "samples",
            "bad",
            "health",
        )
    )


# --- the load model inside Spark -------------------------------------------------------------------------


def load_udf(
    weights: Mapping[str, float] | None, rated_deviation: float
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The grouped pandas UDF: one (cluster, window)'s ``broker, metric, value`` rows in, ``LOAD_SCHEMA``
    rows out."""
    columns = [name for name, _ in _LOAD_COLUMNS]

    def apply(frame: pd.DataFrame) -> pd.DataFrame:
        key = frame.iloc[0]
        head = {
            "cluster": key["cluster"],
            "window_start": key["window_start"],
            "window_end": key["window_end"],
        }
        samples = (
            frame.melt(
                id_vars=["broker"], value_vars=list(METRIC_COLUMNS), var_name="metric", value_name="value"
            )
            .dropna(subset=["value"])
            .assign(metric=lambda f: f["metric"].str.removeprefix(METRIC_PREFIX))
        )
        try:
            report = compute_load(samples, weights, rated_deviation)
        except LoadModelError as exc:
            error = dict.fromkeys(columns) | head | {"broker": -1, "error": str(exc)}
            return pd.DataFrame([error], columns=columns)
        rows = load_report_rows(report)
        raw = samples.pivot(index="broker", columns="metric", values="value")
        out = pd.DataFrame(
            {
                **{k: [v] * len(rows) for k, v in head.items()},
                "broker": rows["broker"].astype("int32"),
                "normalized_load": rows["normalized_load"],
                "deviation_rate": rows["deviation_rate"],
                "weighted_load": rows["weighted_load"],
                "shares": rows["shares"],
                "metrics": [
                    {m: float(v) for m, v in raw.loc[b].items() if pd.notna(v)} for b in rows["broker"]
                ],
                "stddev": rows["stddev"],
                "stddev_threshold": rows["stddev_threshold"],
                "rated_deviation": report.rated_deviation,
                "error": None,
            }
        )
        return out[columns]

    return apply


def compute_windows(
    aggregates: Any, settings: AnalyticsSettings, clusters: Collection[str] | None = None
) -> tuple[Any, Any]:
    """The load rows (load model applied per cluster and window on the executors) and the health and
    malformed rows, both as DataFrames of one micro-batch. ``clusters``: the deployment's cluster names;
    the load model runs only on theirs, and the other clusters' rows come with the health rows, for
    :func:`window_inputs` to count and drop."""
    from pyspark.sql import functions as F

    metrics = aggregates.filter(F.col("kind") == BROKER)
    others_wanted = (F.col("kind") != BROKER) | (F.col("bad") > 0)
    if clusters:
        known = F.col("cluster").isin(sorted(clusters))
        metrics = metrics.filter(known)
        others_wanted = others_wanted | ~known
    loads = (
        metrics.select("cluster", "window_start", "window_end", "broker", *METRIC_COLUMNS)
        .groupBy("cluster", "window_start", "window_end")
        .applyInPandas(load_udf(settings.weights, settings.rules.rated_deviation), LOAD_SCHEMA)
    )
    others = aggregates.filter(others_wanted).select(
        "cluster", "window_start", "window_end", "kind", "samples", "bad", "health"
    )
    return loads, others


@dataclass(frozen=True, slots=True)
class _Key:
    cluster: str
    start: float
    end: float


def window_inputs(
    load_rows: list[Any],
    other_rows: list[Any],
    clusters: Collection[str] | None = None,
    unknown: dict[str, int] | None = None,
) -> list[WindowInput]:
    """Collected rows → one :class:`WindowInput` per cluster and window. ``clusters``: the deployment's
    cluster names; a row of another cluster (malformed lines aside, which are reported whatever they
    name) is dropped, its samples added to ``unknown`` under its cluster's name."""
    loads: dict[_Key, list[Any]] = {}
    for row in load_rows:
        loads.setdefault(_Key(row["cluster"], row["window_start"], row["window_end"]), []).append(row)
    health: dict[_Key, HealthSample] = {}
    malformed: dict[_Key, int] = {}
    examples: dict[_Key, str] = {}
    for row in other_rows:
        if clusters and row["cluster"] not in clusters and row["kind"] != MALFORMED:
            if unknown is not None:
                unknown[row["cluster"]] = unknown.get(row["cluster"], 0) + int(row["samples"] or 0)
            continue
        key = _Key(row["cluster"], row["window_start"], row["window_end"])
        h = row["health"]
        if row["kind"] == HEALTH and h is not None:
            try:
                doc = json.loads(h["doc"])
            except (TypeError, ValueError):
                doc = None
            health[key] = HealthSample(h["collector_id"], float(h["timestamp"]), doc)
        elif row["bad"]:
            malformed[key] = malformed.get(key, 0) + int(row["bad"])
            if h is not None and h["text"]:
                examples.setdefault(key, h["text"])
    inputs = []
    for key in sorted(loads.keys() | health.keys() | malformed.keys(), key=lambda k: (k.cluster, k.start)):
        window = Window(key.cluster, key.start, key.end)
        load, error = _load_window(window, loads.get(key, []))
        if key in examples:
            log.warning("malformed samples in %s: e.g. %s", window, examples[key])
        inputs.append(WindowInput(window, load, error, health.get(key), malformed.get(key, 0)))
    return inputs


def _load_window(window: Window, rows: list[Any]) -> tuple[LoadWindow | None, str | None]:
    if not rows:
        return None, None
    failed = [r["error"] for r in rows if r["error"] is not None]
    if failed:
        return None, failed[0]
    brokers = tuple(
        BrokerLoad(
            broker=int(r["broker"]),
            metrics=dict(r["metrics"] or {}),
            shares=dict(r["shares"] or {}),
            weighted_load=float(r["weighted_load"]),
            normalized_load=float(r["normalized_load"]),
            deviation_rate=float(r["deviation_rate"]),
        )
        for r in sorted(rows, key=lambda r: int(r["broker"]))
    )
    first = rows[0]
    return (
        LoadWindow(
            window=window,
            brokers=brokers,
            stddev=float(first["stddev"]),
            stddev_threshold=float(first["stddev_threshold"]),
            rated_deviation=float(first["rated_deviation"]),
        ),
        None,
    )


# --- running it ------------------------------------------------------------------------------------------


STOP_REQUESTED: Final = "kafka-health: the job was asked to stop"
"""The message of :class:`StopRequested`, found again in the query's exception."""


class StopRequested(RuntimeError):  # noqa: N818 (not an error: how a requested stop ends the query)
    """Raised by :class:`BatchHandler` for a micro-batch that starts after a stop was requested: the query
    ends on its own between two batches, and the batch, planned but not committed, runs again with the same
    id and input at the next start (exactly once: Spark's offset log and the store's processed batches)."""

    def __init__(self, batch_id: int) -> None:
        super().__init__(f"{STOP_REQUESTED} before batch {batch_id}")


class BatchHandler:
    """The foreachBatch function: Spark calls it on the driver with each micro-batch's final windows.

    A clean stop (:meth:`request_stop`, then :func:`stop_query`) never interrupts a batch: the batch under
    way finishes and commits, the next one is refused (:class:`StopRequested`), and the query ends by
    itself. Interrupting the stream thread instead (``query.stop()`` mid-batch) makes Spark fail inside
    its planner and its RPC ("SparkPlan.session() is null", "RpcEnv already stopped") and can hang."""

    def __init__(
        self,
        settings: AnalyticsSettings,
        store: Store,
        on_batch: Callable[[int, BatchOutcome], None] | None = None,
        clusters: Collection[str] | None = None,
    ) -> None:
        """``clusters``: the deployment's cluster names (several clusters configured); the samples of any
        other cluster are dropped, counted in :attr:`unknown_clusters` and logged once per name. None or
        empty: every cluster's samples are evaluated (a single-cluster deployment, keyed by cluster id)."""
        self.settings = settings
        self.store = store
        self.on_batch = on_batch
        self.clusters = frozenset(clusters or ())
        self.unknown_clusters: dict[str, int] = {}
        """Samples dropped per cluster name that is not one of :attr:`clusters`."""
        self._lock = threading.Lock()
        self._stopping = False
        self._idle = threading.Event()
        self._idle.set()

    def request_stop(self) -> None:
        """No batch starts after this; the one under way (if any) goes on to its commit."""
        with self._lock:
            self._stopping = True

    @property
    def idle(self) -> bool:
        """No batch is being processed (between batches, or refusing them after a stop request)."""
        return self._idle.is_set()

    def __call__(self, batch: Any, batch_id: int) -> None:
        with self._lock:
            if self._stopping:
                raise StopRequested(batch_id)
            self._idle.clear()
        try:
            self._process(batch, batch_id)
        finally:
            self._idle.set()

    def _process(self, batch: Any, batch_id: int) -> None:
        if self.store.batch_committed(self.settings.query_name, batch_id):
            log.info("batch %d was committed before (replay after a restart): skipped", batch_id)
            return
        started = time.perf_counter()
        batch = batch.persist()
        try:
            loads, others = compute_windows(batch, self.settings, self.clusters)
            other_rows = others.collect()
            collected = time.perf_counter()
            load_rows = loads.collect() if other_rows or not batch.isEmpty() else []
            unknown: dict[str, int] = {}
            inputs = window_inputs(load_rows, other_rows, self.clusters, unknown)
        finally:
            batch.unpersist()
        self._count_unknown(unknown)
        modelled = time.perf_counter()
        outcome = process_batch(self.store, self.settings.query_name, batch_id, inputs, self.settings.rules)
        log.debug(
            "batch %d: windows and health %.2f s, load model %.2f s, rules and store %.2f s",
            batch_id,
            collected - started,
            modelled - collected,
            time.perf_counter() - modelled,
        )
        if self.on_batch is not None:
            self.on_batch(batch_id, outcome)

    def _count_unknown(self, unknown: Mapping[str, int]) -> None:
        for name, count in sorted(unknown.items()):
            if name not in self.unknown_clusters:
                log.warning(
                    "samples of cluster %r, which is not one of the configured clusters (%s): dropped "
                    "(said once per cluster name)",
                    name,
                    ", ".join(sorted(self.clusters)),
                )
            self.unknown_clusters[name] = self.unknown_clusters.get(name, 0) + count


def start_query(
    spark: Any,
    settings: AnalyticsSettings,
    store: Store,
    on_batch: Callable[[int, BatchOutcome], None] | None = None,
    clusters: Collection[str] | None = None,
) -> Any:
    """Start the streaming query; returns pyspark's StreamingQuery (stop it with :func:`stop_query`).
    ``clusters``: the deployment's cluster names, whose samples alone are evaluated (:class:`BatchHandler`).
    """
    rows = sample_rows(read_samples(spark, settings), settings)
    handler = BatchHandler(settings, store, on_batch, clusters)
    query = (
        window_aggregates(rows, settings)
        .writeStream.queryName(settings.query_name)
        .outputMode("append")
        .option("checkpointLocation", settings.checkpoint)
        .trigger(processingTime=f"{settings.trigger_s:g} seconds")
        .foreachBatch(handler)
        .start()
    )
    _handlers[str(query.id)] = handler
    return query


_handlers: dict[str, BatchHandler] = {}
"""The handler of each query :func:`start_query` started, by query id, for :func:`stop_query`."""


def stop_query(query: Any, timeout_s: float = 30.0) -> None:
    """Stop between micro-batches: the batch under way finishes and commits, the next is refused and ends
    the query (:class:`StopRequested`), or the query is stopped while it waits for its next trigger. Only
    past ``timeout_s`` is the stream thread interrupted (safe, the checkpoint and the store make the
    batch's re-run exactly once, but noisy). Call it from the thread that runs the job, never from a
    signal handler, and before the session is stopped."""
    handler = _handlers.pop(str(query.id), None)
    if handler is not None:
        handler.request_stop()
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        if (handler is None or handler.idle) and not query.status.get("isTriggerActive"):
            break
        time.sleep(0.05)
    query.stop()


def query_failure(query: Any) -> str | None:
    """Why the query failed, or None: it runs, it was stopped, or it ended on a requested stop."""
    failure = query.exception()
    if failure is None:
        return None
    try:
        text = str(failure)
    except Exception:  # pyspark's exception asks the JVM for its text, which may be gone
        text = type(failure).__name__
    return None if STOP_REQUESTED in text else text


class _StopRequestedFilter(logging.Filter):
    """py4j logs, at ERROR and with a traceback, every exception a Python callback raises: a refused batch
    after a stop request is not one to report."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StopRequested))


logging.getLogger("py4j.clientserver").addFilter(_StopRequestedFilter())


@contextmanager
def running_job(
    settings: AnalyticsSettings,
    on_batch: Callable[[int, BatchOutcome], None] | None = None,
    migrations: Sequence[Migration] = ANALYTICS_MIGRATIONS,
    clusters: Collection[str] | None = None,
    jvm_output: IO[bytes] | None = None,
) -> Iterator[Any]:
    """Session, store and query for the duration of a ``with`` block (tests, the demo, the CLI).
    ``clusters``: the deployment's cluster names when it watches several (:class:`BatchHandler`).
    ``jvm_output``: where the driver's JVM writes its console (:func:`build_session`; the demo's log file).

    ``migrations``: what the store's database is opened with; the analytics tables' by default, every
    subsystem's (``app.storage.MIGRATIONS``) from the command line and the demo, whose database the service
    shares (and which it may have created first).
    """
    store = Store.open(settings.store_url, migrations=migrations)
    try:
        spark = build_session(settings, jvm_output=jvm_output)
        try:
            query = start_query(spark, settings, store, on_batch, clusters)
            try:
                yield query
            finally:
                stop_query(query)
        finally:
            stop_session(spark)
    finally:
        store.close()
