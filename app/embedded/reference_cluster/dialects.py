"""The reference cluster's ``/metrics`` in each exporter dialect: the families a simulated broker serves,
named as jmx_exporter's example rules name them (``metrics.py``), renamed as each other rule file's rules
would name the same MBean and attribute.

Each translation follows its rule file's first matching rule for the MBeans the simulation has
(docs/collectors.md "Exporter dialects" cites the files and commits), including what a file does not
export (Bitnami's rules have no percentiles and no ``kafka.log`` rule without a topic). Only the attributes
the simulation keeps are served: a real exporter also serves a meter's rates next to its ``Count``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from collectors.metrics.names import Dialect

Kind = Literal["gauge", "counter", "untyped"]
LabelSet = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as served: ``name`` is the family's name (a counter's samples add ``_total``)."""

    name: str
    kind: Kind
    series: Mapping[LabelSet, float]
    help: str


@dataclass(frozen=True, slots=True)
class Bean:
    """The MBean and attribute behind a family of jmx_exporter's example naming."""

    domain: str
    """``server`` for ``kafka.server``."""
    type: str
    name: str
    attribute: str


_BEAN = re.compile(r"kafka\.(?P<domain>\w+)<type=(?P<type>[^,]+), name=(?P<name>[^,]+)")


def parse_bean(bean: str, attribute: str) -> Bean:
    """``kafka.server<type=ReplicaManager, name=UnderReplicatedPartitions`` (keys beyond name dropped)."""
    found = _BEAN.match(bean)
    if found is None:
        raise ValueError(f"not a Kafka MBean: {bean!r}")
    return Bean(found["domain"], found["type"], found["name"], attribute)


def translate(families: Iterable[tuple[Family, Bean | None]], dialect: Dialect) -> list[Family]:
    """``families`` (example naming, each with its MBean; None for node_exporter's and the process
    metrics, which every dialect serves alike) as ``dialect``'s rules name them."""
    out: list[Family] = []
    for family, bean in families:
        if bean is None or dialect == "jmx-exporter-example":
            out.append(family)
        elif dialect == "strimzi":
            out.append(_strimzi(family, bean))
        elif dialect == "confluent":
            out.append(_confluent(family, bean))
        else:
            out.extend(_bitnami(family, bean))
    return out


def _lower(*parts: str) -> str:
    return "_".join(parts).lower()


def _strimzi(family: Family, bean: Bean) -> Family:
    """Strimzi's ``kafka-metrics.yaml`` (Kafka 3.9, ZooKeeper mode): the example's rules, but its
    ``...Percent\\w*><>Value`` rule comes before the generic gauge: ``kafka_$1_$2_$3_percent``."""
    percent = re.fullmatch(r"(.+)Percent\w*", bean.name)
    if bean.attribute == "Value" and percent is not None:
        return Family(
            _lower("kafka", bean.domain, bean.type, percent[1]) + "_percent",
            "gauge",
            family.series,
            family.help,
        )
    return family


def _confluent(family: Family, bean: Bean) -> Family:
    """Confluent's ``kafka_broker.yml``: ``Count`` and ``Value`` by the generic untyped rules
    ``kafka_$1_$2_$3`` (a meter keeps its ``PerSec`` name), percentiles as the example, the request
    handlers' ``OneMinuteRate`` as the gauge ``..._requesthandleravgidlepercent_total``, label names
    lower-cased."""
    series = {_lower_labels(labels): v for labels, v in family.series.items()}
    if bean.type == "KafkaRequestHandlerPool" and bean.name == "RequestHandlerAvgIdlePercent":
        return Family(
            _lower("kafka", bean.domain, bean.type, bean.name) + "_total", "gauge", series, family.help
        )
    if bean.attribute.endswith("thPercentile"):
        return Family(family.name, "gauge", series, family.help)
    return Family(_lower("kafka", bean.domain, bean.type, bean.name), "untyped", series, family.help)


def _lower_labels(labels: LabelSet) -> LabelSet:
    return tuple(sorted((k.lower(), v) for k, v in labels))


def _bitnami(family: Family, bean: Bean) -> list[Family]:
    """Bitnami's chart (``templates/metrics/jmx-configmap.yaml``), all untyped: ``kafka.server`` beans
    ``kafka_server_$1_total_$2_$3`` (the attribute last), with a topic ``kafka_server_$1_$2_$4{topic}``;
    the controller's ``kafka_controller_$1_$2_$3``; ``RequestMetrics`` ``kafka_network_$1_$2_$4{request}``
    (Count only: no percentiles); ``SocketServer`` ``kafka_network_$1_$2_$3``; ``kafka.log`` only with a
    topic and partition. The request label takes the rest of the bean name (``request=(.+)``)."""
    attribute = "oneminuterate" if bean.attribute == "MeanRate" else bean.attribute.lower()
    kind: Kind = "untyped"
    if bean.domain == "server":
        topical = {k: v for k, v in family.series.items() if any(n == "topic" for n, _ in k)}
        total = {k: v for k, v in family.series.items() if k not in topical}
        if bean.type == "ReplicaFetcherManager":
            renamed = {
                tuple(("client_id" if n == "clientId" else n, v) for n, v in k): x for k, x in total.items()
            }
            return [
                Family(_lower("kafka_server", bean.type, bean.name, attribute), kind, renamed, family.help)
            ]
        out = []
        if total:
            out.append(
                Family(
                    _lower("kafka_server", bean.type, "total", bean.name, attribute), kind, total, family.help
                )
            )
        if topical:
            out.append(
                Family(_lower("kafka_server", bean.type, bean.name, attribute), kind, topical, family.help)
            )
        return out
    if bean.domain == "controller" and bean.type in ("KafkaController", "ControllerStats"):
        return [
            Family(
                _lower("kafka_controller", bean.type, bean.name, attribute), kind, family.series, family.help
            )
        ]
    if bean.domain == "network" and bean.type == "RequestMetrics":
        if bean.attribute != "Count":
            return []
        series = {_request_label(k): v for k, v in family.series.items()}
        return [Family(_lower("kafka_network", bean.type, bean.name, attribute), kind, series, family.help)]
    if bean.domain == "network" and bean.type == "SocketServer":
        return [
            Family(_lower("kafka_network", bean.type, bean.name, attribute), kind, family.series, family.help)
        ]
    if (
        bean.domain == "log"
        and bean.attribute == "Value"
        and any(n == "topic" for k in family.series for n, _ in k)
    ):
        return [Family(_lower("kafka_log", bean.type, bean.name), kind, family.series, family.help)]
    return []


def _request_label(labels: LabelSet) -> LabelSet:
    """``request=(.+)`` over ``request=Produce, version=9``: one label holding the rest of the name."""
    given = dict(labels)
    rest = ", ".join(f"{k}={v}" for k, v in labels if k != "request")
    value = given.get("request", "") + (f", {rest}" if rest else "")
    return (("request", value),)
