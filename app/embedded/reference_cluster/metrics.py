"""Each simulated broker's ``/metrics``: Kafka's JMX metrics under jmx_exporter's Kafka rules
(``kafka-2_0_0.yml``) plus the host metrics node_exporter and the JVM agent give, on one endpoint; or, with
``metrics_dialect``, the Kafka metrics as another common rule file names them (``dialects.py``).

The values are taken on the cluster's loop at scrape time (one consistent moment) and rendered by
prometheus_client in the standard text format. A stopped broker's endpoint refuses connections.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from app.embedded.http_server import QuietHTTPServer
from app.embedded.reference_cluster.broker import SimBroker
from app.embedded.reference_cluster.dialects import Bean, Family, Kind, parse_bean, translate
from app.embedded.reference_cluster.traffic import PRODUCE_QUANTILES, produce_latency_ms
from app.embedded.zookeeper import pick_free_port
from collectors.metrics.names import Dialect

if TYPE_CHECKING:
    from app.embedded.reference_cluster.cluster import ReferenceCluster

SHUTDOWN_POLL_S = 0.05
"""How often a broker's metrics server looks for a shutdown request (``close()`` waits that long)."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DISK_DEVICE = "nvme0n1"
NETWORK_DEVICE = "eth0"
_JMX_HELP = "Attribute exposed for management ({bean}><>{attribute})"


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything one scrape shows, as plain values."""

    gauges: dict[str, float]
    counters: dict[str, float]
    labelled_counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = field(default_factory=dict)
    labelled_gauges: dict[str, dict[tuple[tuple[str, str], ...], float]] = field(default_factory=dict)
    log_sizes: list[tuple[str, float]] = field(default_factory=list)
    """``kafka_log_log_size`` per replica: its labels as the text format writes them, and its bytes.
    Rendered apart from the other families (:func:`render`): at hundreds of replicas per broker a scrape
    joins precomputed strings instead of building label dicts."""
    overrides: Mapping[str, float] = field(default_factory=dict)
    """Served series name -> the value that every series of that name shows (the control port's
    ``POST /brokers/{id}/metrics``)."""


# name -> (MBean, attribute) for the HELP text jmx_exporter writes
_BEANS: dict[str, tuple[str, str]] = {
    "kafka_server_replicamanager_underreplicatedpartitions": (
        "kafka.server<type=ReplicaManager, name=UnderReplicatedPartitions",
        "Value",
    ),
    "kafka_server_replicamanager_partitioncount": (
        "kafka.server<type=ReplicaManager, name=PartitionCount",
        "Value",
    ),
    "kafka_server_replicamanager_leadercount": (
        "kafka.server<type=ReplicaManager, name=LeaderCount",
        "Value",
    ),
    "kafka_server_replicamanager_underminisrpartitioncount": (
        "kafka.server<type=ReplicaManager, name=UnderMinIsrPartitionCount",
        "Value",
    ),
    "kafka_server_replicamanager_atminisrpartitioncount": (
        "kafka.server<type=ReplicaManager, name=AtMinIsrPartitionCount",
        "Value",
    ),
    "kafka_server_replicamanager_offlinereplicacount": (
        "kafka.server<type=ReplicaManager, name=OfflineReplicaCount",
        "Value",
    ),
    "kafka_server_replicamanager_reassigningpartitions": (
        "kafka.server<type=ReplicaManager, name=ReassigningPartitions",
        "Value",
    ),
    "kafka_server_replicamanager_isrshrinks": (
        "kafka.server<type=ReplicaManager, name=IsrShrinksPerSec",
        "Count",
    ),
    "kafka_server_replicamanager_isrexpands": (
        "kafka.server<type=ReplicaManager, name=IsrExpandsPerSec",
        "Count",
    ),
    "kafka_controller_kafkacontroller_activecontrollercount": (
        "kafka.controller<type=KafkaController, name=ActiveControllerCount",
        "Value",
    ),
    "kafka_controller_kafkacontroller_offlinepartitionscount": (
        "kafka.controller<type=KafkaController, name=OfflinePartitionsCount",
        "Value",
    ),
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount": (
        "kafka.controller<type=KafkaController, name=PreferredReplicaImbalanceCount",
        "Value",
    ),
    "kafka_controller_kafkacontroller_globalpartitioncount": (
        "kafka.controller<type=KafkaController, name=GlobalPartitionCount",
        "Value",
    ),
    "kafka_controller_kafkacontroller_globaltopiccount": (
        "kafka.controller<type=KafkaController, name=GlobalTopicCount",
        "Value",
    ),
    "kafka_controller_controllerstats_uncleanleaderelections": (
        "kafka.controller<type=ControllerStats, name=UncleanLeaderElectionsPerSec",
        "Count",
    ),
    "kafka_server_brokertopicmetrics_bytesin": (
        "kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec",
        "Count",
    ),
    "kafka_server_brokertopicmetrics_bytesout": (
        "kafka.server<type=BrokerTopicMetrics, name=BytesOutPerSec",
        "Count",
    ),
    "kafka_server_brokertopicmetrics_messagesin": (
        "kafka.server<type=BrokerTopicMetrics, name=MessagesInPerSec",
        "Count",
    ),
    "kafka_server_brokertopicmetrics_failedproducerequests": (
        "kafka.server<type=BrokerTopicMetrics, name=FailedProduceRequestsPerSec",
        "Count",
    ),
    "kafka_server_brokertopicmetrics_replicationbytesin": (
        "kafka.server<type=BrokerTopicMetrics, name=ReplicationBytesInPerSec",
        "Count",
    ),
    "kafka_server_brokertopicmetrics_replicationbytesout": (
        "kafka.server<type=BrokerTopicMetrics, name=ReplicationBytesOutPerSec",
        "Count",
    ),
    "kafka_network_requestmetrics_requests": (
        "kafka.network<type=RequestMetrics, name=RequestsPerSec",
        "Count",
    ),
    "kafka_log_logmanager_offlinelogdirectorycount": (
        "kafka.log<type=LogManager, name=OfflineLogDirectoryCount",
        "Value",
    ),
    "kafka_server_replicafetchermanager_maxlag": (
        "kafka.server<type=ReplicaFetcherManager, name=MaxLag",
        "Value",
    ),
    "kafka_server_kafkaserver_brokerstate": ("kafka.server<type=KafkaServer, name=BrokerState", "Value"),
    "kafka_log_log_size": ("kafka.log<type=Log, name=Size", "Value"),
    # jmx_exporter's rule for a meter named *Percent reads its MeanRate: Kafka marks the meter with each
    # handler thread's idle nanoseconds, so the rate is the idle fraction (Strimzi's rules name it alike)
    "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent": (
        "kafka.server<type=KafkaRequestHandlerPool, name=RequestHandlerAvgIdlePercent",
        "MeanRate",
    ),
    # a gauge: the generic Value rule comes first in kafka-2_0_0.yml (Strimzi's rules, whose *Percent
    # rules come first, name it ..._networkprocessoravgidle_percent)
    "kafka_network_socketserver_networkprocessoravgidlepercent": (
        "kafka.network<type=SocketServer, name=NetworkProcessorAvgIdlePercent",
        "Value",
    ),
    # a histogram's percentiles, with the label quantile="0.<N>" from <N>thPercentile
    "kafka_network_requestmetrics_totaltimems": (
        "kafka.network<type=RequestMetrics, name=TotalTimeMs, request=Produce",
        "99thPercentile",
    ),
}

_HOST_HELP = {
    "node_cpu_seconds": "Seconds the CPUs spent in each mode.",
    "node_disk_read_bytes": "The total number of bytes read successfully.",
    "node_disk_written_bytes": "The total number of bytes written successfully.",
    "node_disk_io_time_seconds": "Total seconds spent doing I/Os.",
    "node_network_receive_bytes": "Network device statistic receive_bytes.",
    "node_network_transmit_bytes": "Network device statistic transmit_bytes.",
    "node_memory_MemTotal_bytes": "Memory information field MemTotal_bytes.",
    "node_memory_MemAvailable_bytes": "Memory information field MemAvailable_bytes.",
    "process_open_fds": "Number of open file descriptors.",
    "process_max_fds": "Maximum number of open file descriptors.",
    "node_filesystem_size_bytes": "Filesystem size in bytes.",
    "node_filesystem_avail_bytes": "Filesystem space available to non-root users in bytes.",
}

_go_float = cast(Callable[[float], str], floatToGoString)
"""prometheus_client's value format (``1.2e+07``), typed."""

BROKER_STATE_RUNNING = 3
REQUEST_HANDLER_IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent"
NETWORK_PROCESSOR_IDLE = "kafka_network_socketserver_networkprocessoravgidlepercent"
REQUEST_TOTAL_TIME = "kafka_network_requestmetrics_totaltimems"
LOG_SIZE = "kafka_log_log_size"
FILESYSTEM_SIZE = "node_filesystem_size_bytes"
FILESYSTEM_AVAIL = "node_filesystem_avail_bytes"
FILESYSTEM_TYPE = "xfs"


def filesystem_device(log_dir: int) -> str:
    """The block device log dir ``log_dir`` is mounted from: a partition of the broker's one disk
    (``nvme0n1``, whose I/O ``node_disk_*`` counts)."""
    return f"/dev/{DISK_DEVICE}p{log_dir + 1}"


@functools.lru_cache(maxsize=64)
def _filesystem_labels(mountpoint: str, log_dir: int) -> tuple[tuple[str, str], ...]:
    return (("device", filesystem_device(log_dir)), ("fstype", FILESYSTEM_TYPE), ("mountpoint", mountpoint))


def _help(name: str) -> str:
    if name in _HOST_HELP:
        return _HOST_HELP[name]
    bean, attribute = _BEANS[name]
    return _JMX_HELP.format(bean=bean, attribute=attribute)


def take_snapshot(cluster: ReferenceCluster, broker: SimBroker) -> MetricsSnapshot | None:
    """What ``broker`` reports now, from its own view (URP and min-ISR counts by leaders only; controller
    gauges only on the controller). Runs on the cluster's loop."""
    if not broker.alive:
        return None
    led = broker.led_partitions()
    min_isr = cluster.configs.min_insync_replicas
    gauges: dict[str, float] = {
        "kafka_server_replicamanager_underreplicatedpartitions": sum(
            1 for _, v in led if len(v.isr) < v.replication_factor
        ),
        "kafka_server_replicamanager_partitioncount": len(broker.partitions) + len(broker.offline_replicas()),
        "kafka_server_replicamanager_leadercount": len(led),
        "kafka_server_replicamanager_underminisrpartitioncount": sum(
            1 for tp, v in led if len(v.isr) < min(min_isr(tp.topic), len(v.assignment.replicas))
        ),
        "kafka_server_replicamanager_atminisrpartitioncount": sum(
            1 for tp, v in led if len(v.isr) == min(min_isr(tp.topic), len(v.assignment.replicas))
        ),
        "kafka_server_replicamanager_offlinereplicacount": len(broker.offline_replicas()),
        "kafka_server_replicamanager_reassigningpartitions": sum(
            1 for _, v in led if v.assignment.is_being_reassigned
        ),
        "kafka_log_logmanager_offlinelogdirectorycount": len(broker.failed_log_dirs),
        "kafka_server_kafkaserver_brokerstate": BROKER_STATE_RUNNING,
        "node_memory_MemTotal_bytes": cluster.settings.traffic.memory_bytes,
        "node_memory_MemAvailable_bytes": cluster.settings.traffic.memory_bytes
        - broker.host.memory_used_bytes,
        "process_open_fds": broker.host.open_fds,
        "process_max_fds": cluster.settings.traffic.max_fds,
        REQUEST_HANDLER_IDLE: 1.0 - broker.request_load.busy,
        NETWORK_PROCESSOR_IDLE: 1.0 - broker.request_load.busy,
    }
    gauges.update(_controller_gauges(cluster, broker))
    c = broker.counters
    counters = {
        "kafka_server_replicamanager_isrshrinks": c.isr_shrinks,
        "kafka_server_replicamanager_isrexpands": c.isr_expands,
        "kafka_controller_controllerstats_uncleanleaderelections": c.unclean_leader_elections,
        "kafka_server_brokertopicmetrics_bytesin": sum(c.bytes_in.values()),
        "kafka_server_brokertopicmetrics_bytesout": sum(c.bytes_out.values()),
        "kafka_server_brokertopicmetrics_messagesin": sum(c.messages_in.values()),
        "kafka_server_brokertopicmetrics_failedproducerequests": sum(c.failed_produce_requests.values()),
        "kafka_server_brokertopicmetrics_replicationbytesin": c.replication_bytes_in,
        "kafka_server_brokertopicmetrics_replicationbytesout": c.replication_bytes_out,
    }
    by_topic = {
        "kafka_server_brokertopicmetrics_bytesin": c.bytes_in,
        "kafka_server_brokertopicmetrics_bytesout": c.bytes_out,
        "kafka_server_brokertopicmetrics_messagesin": c.messages_in,
        "kafka_server_brokertopicmetrics_failedproducerequests": c.failed_produce_requests,
    }
    labelled_counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {
        name: {(("topic", t),): v for t, v in sorted(values.items())} for name, values in by_topic.items()
    }
    labelled_counters["kafka_network_requestmetrics_requests"] = {
        (("request", r), ("version", "9")): v for r, v in sorted(c.requests.items())
    }
    h = broker.host_counters
    cores = cluster.settings.traffic.cpu_cores
    labelled_counters["node_cpu_seconds"] = {
        (("cpu", str(cpu)), ("mode", mode)): seconds / cores
        for cpu in range(cores)
        for mode, seconds in sorted(h.cpu_seconds.items())
    }
    device = (("device", DISK_DEVICE),)
    labelled_counters["node_disk_read_bytes"] = {device: h.disk_read_bytes}
    labelled_counters["node_disk_written_bytes"] = {device: h.disk_written_bytes}
    labelled_counters["node_disk_io_time_seconds"] = {device: h.disk_io_time_seconds}
    nic = (("device", NETWORK_DEVICE),)
    labelled_counters["node_network_receive_bytes"] = {nic: h.network_receive_bytes}
    labelled_counters["node_network_transmit_bytes"] = {nic: h.network_transmit_bytes}
    message_bytes = cluster.settings.traffic.message_bytes
    labelled_gauges: dict[str, dict[tuple[tuple[str, str], ...], float]] = {
        "kafka_server_replicafetchermanager_maxlag": {(("clientId", "Replica"),): _max_lag(cluster, broker)},
        REQUEST_TOTAL_TIME: _produce_latency(cluster, broker),
    }
    settings = cluster.settings
    filesystems = [_filesystem_labels(settings.mountpoint(n), n) for n in range(len(broker.disks))]
    labelled_gauges[FILESYSTEM_SIZE] = {
        labels: disk.size_bytes for labels, disk in zip(filesystems, broker.disks, strict=True)
    }
    labelled_gauges[FILESYSTEM_AVAIL] = {
        labels: disk.avail_bytes for labels, disk in zip(filesystems, broker.disks, strict=True)
    }
    failed = broker.failed_log_dirs
    log_sizes = [
        (lg.labels, (lg.leo - lg.log_start) * message_bytes)
        for lg in broker.logs.values()
        if lg.log_dir not in failed
    ]
    return MetricsSnapshot(
        gauges,
        counters,
        labelled_counters,
        labelled_gauges,
        log_sizes,
        dict(broker.metric_overrides),
    )


def _controller_gauges(cluster: ReferenceCluster, broker: SimBroker) -> dict[str, float]:
    controller = cluster.controller
    is_controller = controller is not None and controller.active and controller.broker_id == broker.id
    if not is_controller or controller is None:
        return {
            "kafka_controller_kafkacontroller_activecontrollercount": 0,
            "kafka_controller_kafkacontroller_offlinepartitionscount": 0,
            "kafka_controller_kafkacontroller_preferredreplicaimbalancecount": 0,
            "kafka_controller_kafkacontroller_globalpartitioncount": 0,
            "kafka_controller_kafkacontroller_globaltopiccount": 0,
        }
    states = controller.states
    offline = sum(
        1
        for tp in controller.assignments
        if tp not in states or states[tp].leader < 0 or states[tp].leader not in controller.live_brokers
    )
    imbalance = sum(
        1
        for tp, a in controller.assignments.items()
        if tp in states and states[tp].leader != a.preferred_leader
    )
    return {
        "kafka_controller_kafkacontroller_activecontrollercount": 1,
        "kafka_controller_kafkacontroller_offlinepartitionscount": offline,
        "kafka_controller_kafkacontroller_preferredreplicaimbalancecount": imbalance,
        "kafka_controller_kafkacontroller_globalpartitioncount": len(controller.assignments),
        "kafka_controller_kafkacontroller_globaltopiccount": len(controller.topic_ids),
    }


def _produce_latency(
    cluster: ReferenceCluster, broker: SimBroker
) -> dict[tuple[tuple[str, str], ...], float]:
    """The Produce request's ``TotalTimeMs`` percentiles; 0 before the broker's first produce request, as
    a Kafka histogram without samples reports."""
    served = broker.counters.requests["Produce"] > 0
    p99 = cluster.settings.traffic.produce_p99_ms
    return {
        (("quantile", quantile), ("request", "Produce")): produce_latency_ms(
            broker.request_load.busy, p99, factor
        )
        if served
        else 0.0
        for quantile, factor in PRODUCE_QUANTILES.items()
    }


def _max_lag(cluster: ReferenceCluster, broker: SimBroker) -> float:
    lag = 0.0
    for tp, view in broker.partitions.items():
        leader = cluster.brokers.get(view.leader)
        if view.leader == broker.id or leader is None or not leader.alive or tp not in leader.logs:
            continue
        lag = max(lag, leader.logs[tp].leo - broker.logs[tp].leo)
    return float(int(lag))


def families(snapshot: MetricsSnapshot) -> list[tuple[Family, Bean | None]]:
    """The snapshot's families in jmx_exporter's example naming, each with the MBean it comes from (None
    for node_exporter's and the process metrics)."""
    out: list[tuple[Family, Bean | None]] = []

    def add(name: str, kind: Kind, series: dict[tuple[tuple[str, str], ...], float]) -> None:
        bean = None if name in _HOST_HELP else parse_bean(*_BEANS[name])
        out.append((Family(name, kind, series, _help(name)), bean))

    s = snapshot
    for name, value in s.gauges.items():
        add(name, "gauge", {(): value})
    for name, series in s.labelled_gauges.items():
        add(name, "gauge", dict(series))
    for name in sorted(set(s.counters) | set(s.labelled_counters)):
        series = dict(s.labelled_counters.get(name, {}))
        if name in s.counters:
            series[()] = s.counters[name]
        add(name, "counter", series)
    return out


_KINDS: dict[Kind, type[GaugeMetricFamily] | type[CounterMetricFamily] | type[UnknownMetricFamily]] = {
    "gauge": GaugeMetricFamily,
    "counter": CounterMetricFamily,
    "untyped": UnknownMetricFamily,
}


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: MetricsSnapshot, dialect: Dialect) -> None:
        self.snapshot = snapshot
        self.dialect = dialect

    def collect(self) -> Iterator[Metric]:
        overrides = self.snapshot.overrides
        for source, bean in families(self.snapshot):
            for family in translate([(source, bean)], self.dialect):
                series = family.series
                if overrides and source.kind == "gauge" and family.name in overrides:
                    series = dict.fromkeys(series, overrides[family.name])
                yield _family(_KINDS[family.kind], family.name, family.help, series)


@functools.lru_cache(maxsize=8)
def log_size_family(dialect: Dialect) -> tuple[str, Kind]:
    """The name and type ``dialect``'s rules give ``kafka.log:type=Log,name=Size`` with its topic and
    partition: ``kafka_log_log_size`` in all four (a gauge in jmx_exporter's example and Strimzi's,
    untyped in Confluent's and Bitnami's)."""
    probe = Family(LOG_SIZE, "gauge", {(("partition", "0"), ("topic", "t")): 0.0}, "")
    [served] = translate([(probe, parse_bean(*_BEANS[LOG_SIZE]))], dialect)
    return served.name, served.kind


def _render_log_sizes(snapshot: MetricsSnapshot, dialect: Dialect) -> bytes:
    """``kafka_log_log_size`` as prometheus_client would write it, from the precomputed label strings."""
    if not snapshot.log_sizes:
        return b""
    name, kind = log_size_family(dialect)
    head = f"{name}{{"
    override = snapshot.overrides.get(name)
    if override is None:
        lines = [f"{head}{labels}}} {_go_float(value)}\n" for labels, value in snapshot.log_sizes]
    else:
        shown = _go_float(override)
        lines = [f"{head}{labels}}} {shown}\n" for labels, _ in snapshot.log_sizes]
    lines.insert(0, f"# HELP {name} {_help(LOG_SIZE)}\n# TYPE {name} {kind}\n")
    return "".join(lines).encode()


class OverrideError(ValueError):
    """A metrics override names a series the broker does not serve, or one that is not a gauge."""


def check_overrides(snapshot: MetricsSnapshot, dialect: Dialect, values: Mapping[str, float]) -> None:
    """Every name in ``values`` must be a gauge family the broker serves in ``dialect`` (untyped families
    count when their MBean attribute is a gauge's), every value a finite number."""
    gauges = {log_size_family(dialect)[0]}
    others: set[str] = set()
    for source, bean in families(snapshot):
        for family in translate([(source, bean)], dialect):
            if source.kind == "gauge":
                gauges.add(family.name)
            else:
                others.update((family.name, f"{family.name}_total"))
    counters = sorted(n for n in values if n in others and n not in gauges)
    unknown = sorted(n for n in values if n not in gauges and n not in others)
    bad_values = sorted(
        n
        for n, v in values.items()
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
    )
    problems = []
    if unknown:
        problems.append(f"broker serves no series named {', '.join(unknown)} (in the {dialect} dialect)")
    if counters:
        problems.append(f"{', '.join(counters)}: a counter, not a gauge")
    if bad_values:
        problems.append(f"the value of {', '.join(bad_values)} is not a finite number")
    if problems:
        raise OverrideError("; ".join(problems))


def _family(
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily] | type[UnknownMetricFamily],
    name: str,
    help_text: str,
    series: Mapping[tuple[tuple[str, str], ...], float],
) -> Metric:
    label_names = sorted({k for labels in series for k, _ in labels})
    family = kind(name, help_text, labels=label_names)
    for labels, value in series.items():
        as_dict = dict(labels)
        family.add_metric([as_dict.get(k, "") for k in label_names] if labels else [], value)
    return family


def render(snapshot: MetricsSnapshot, dialect: Dialect = "jmx-exporter-example") -> bytes:
    """The snapshot in the text format, named as ``dialect``'s rules name it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snapshot, dialect))
    return generate_latest(registry) + _render_log_sizes(snapshot, dialect)


class BrokerMetricsServer:
    """One broker's HTTP endpoint; bound while the broker runs, on the same port across restarts."""

    def __init__(
        self,
        host: str,
        port: int,
        snapshot: Callable[[], MetricsSnapshot | None],
        dialect: Dialect = "jmx-exporter-example",
    ) -> None:
        self.host = host
        self.port = port
        self.dialect = dialect
        self._snapshot = snapshot
        self._server: QuietHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        if self._server is not None:
            return
        snapshot = self._snapshot
        dialect = self.dialect

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                taken = snapshot()
                if taken is None:
                    self.send_error(503, "broker is not running")
                    return
                body = render(taken, dialect)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = _bind(self.host, self.port, Handler)
        self.port = server.server_address[1]
        self._server = server
        # serve_forever polls every 0.5 s by default, which every broker stopped paid in close().
        self._thread = threading.Thread(
            target=server.serve_forever, args=(SHUTDOWN_POLL_S,), name=f"metrics-{self.port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


def _bind(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> QuietHTTPServer:
    """The server on ``port``; with 0, on a free port below the kernel's ephemeral range
    (:func:`~app.embedded.zookeeper.pick_free_port`), which a restarted broker binds again: an ephemeral
    port could meanwhile be some connection's local port."""
    if port:
        return QuietHTTPServer((host, port), handler)
    for _ in range(20):
        try:
            return QuietHTTPServer((host, pick_free_port(host)), handler)
        except OSError:
            continue  # taken between the pick and the bind
    return QuietHTTPServer((host, 0), handler)
