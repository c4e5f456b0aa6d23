"""The service's consumer-lag component (:class:`app.service.consumers.ConsumerLag`) on the in-memory
reader: a failing client is an error kept, never raised; the routes' answers (404, 503), the ``/metrics``
series and ``describe``'s text from one round. The service end to end: tests/app/incidents/
test_consumer_groups_end_to_end.py."""

from __future__ import annotations

import io
from collections.abc import Mapping

import pytest
from fastapi import HTTPException
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from app.cli.describe_consumers import round_json, write_round_text
from app.service.auth import Principal, Role
from app.service.consumer_metrics import consumer_metrics
from app.service.consumers import ConsumerLag
from app.service.routes.consumer_groups import consumer_group, consumer_groups
from collectors.consumers.client import GroupOffsetsReader
from collectors.consumers.config import KafkaSettings
from collectors.kafka.model import BrokerRegistration, TopicPartition
from tests.support.consumer_groups_fake import FakeGroupOffsets

pytestmark = pytest.mark.unit

ORDERS_0 = TopicPartition("orders", 0)
VIEWER = Principal("viewer", Role.viewer)


def fake_cluster() -> FakeGroupOffsets:
    fake = FakeGroupOffsets()
    fake.create_topic("orders", 2)
    fake.produce(ORDERS_0, 10)
    fake.join("billing", "m-1", [ORDERS_0, TopicPartition("orders", 1)])
    fake.commit("billing", ORDERS_0, 4)
    return fake


def lag_on(reader: GroupOffsetsReader, **settings: object) -> ConsumerLag:
    def opened(_s: KafkaSettings, _b: Mapping[int, BrokerRegistration]) -> GroupOffsetsReader:
        return reader

    return ConsumerLag(KafkaSettings.model_validate(settings), dict, open_reader=opened)


def test_a_client_that_cannot_open_is_an_error_kept_not_raised() -> None:
    def refused(_s: KafkaSettings, _b: Mapping[int, BrokerRegistration]) -> GroupOffsetsReader:
        raise ConnectionRefusedError(111, "Connection refused")

    lag = ConsumerLag(KafkaSettings(), dict, open_reader=refused)
    assert lag.round_now() is None
    assert lag.error is not None
    assert "Connection refused" in lag.error
    assert lag.latest is None
    assert (lag.stats().rounds, lag.stats().errors) == (0, 1)
    with pytest.raises(HTTPException) as refused_answer:
        consumer_groups(VIEWER, lag)
    assert refused_answer.value.status_code == 503
    assert "no consumer-lag round has succeeded yet: ConnectionRefusedError" in refused_answer.value.detail


def test_the_routes_answer_from_the_latest_round() -> None:
    lag = lag_on(fake_cluster())
    assert lag.round_now() is not None
    listed = consumer_groups(VIEWER, lag)
    assert [(g.group, g.members, g.lag, g.status) for g in listed.groups] == [("billing", 1, 6, "ok")]
    billing = consumer_group("billing", VIEWER, lag)
    assert [
        (p.partition, p.committed, p.log_start, p.log_end, p.lag, p.member) for p in billing.partitions
    ] == [
        (0, 4, 0, 10, 6, "m-1"),
        (1, None, 0, 0, None, "m-1"),
    ]
    with pytest.raises(HTTPException) as unknown:
        consumer_group("nobody", VIEWER, lag)
    assert unknown.value.status_code == 404
    assert "no consumer group nobody in the latest round" in unknown.value.detail


class _Series(Collector):
    def __init__(self, lag: ConsumerLag) -> None:
        self.lag = lag

    def collect(self):  # type: ignore[no-untyped-def]
        yield from consumer_metrics("c1", self.lag)


def exposition(lag: ConsumerLag) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Series(lag))
    return generate_latest(registry).decode()


def test_metrics_of_a_round_and_kafka_exporters_names_only_when_asked() -> None:
    plain = lag_on(fake_cluster())
    plain.round_now()
    text = exposition(plain)
    assert (
        'kafka_health_consumergroup_lag{cluster="c1",group="billing",partition="0",topic="orders"} 6.0'
        in text
    )
    assert 'kafka_health_consumergroup_status{cluster="c1",group="billing",status="ok"} 1.0' in text
    assert 'kafka_health_consumergroup_status{cluster="c1",group="billing",status="stopped"} 0.0' in text
    assert 'kafka_health_consumer_lag_up{cluster="c1"} 1.0' in text
    assert "kafka_consumergroup_lag" not in text
    compatible = lag_on(fake_cluster(), exporter_compatible_metrics=True)
    compatible.round_now()
    text = exposition(compatible)
    assert (
        'kafka_consumergroup_lag{cluster="c1",consumergroup="billing",partition="0",topic="orders"} 6.0'
        in text
    )
    assert (
        'kafka_consumergroup_current_offset{cluster="c1",consumergroup="billing",partition="0",'
        'topic="orders"} 4.0' in text
    )
    assert 'kafka_topic_partition_current_offset{cluster="c1",partition="0",topic="orders"} 10.0' in text


def test_describe_prints_a_round() -> None:
    lag = lag_on(fake_cluster())
    found = lag.round_now()
    assert found is not None
    out = io.StringIO()
    write_round_text(found, out)
    assert out.getvalue().splitlines()[:4] == [
        "Consumer groups: 1",
        "",
        "Group: billing\tState: Stable\tMembers: 1\tLag: 6\tLagSeconds: >=0\tStatus: ok (lag 6)",
        "\tTopic: orders\tPartition: 0\tCommitted: 4\tLogStart: 0\tLogEnd: 10\tLag: 6\tLagSeconds: >=0\t"
        "Member: m-1",
    ]
    assert [p["committed"] for p in round_json(found)["groups"][0]["partitions"]] == [4, None]
