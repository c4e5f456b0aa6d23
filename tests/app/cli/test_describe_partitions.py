"""A partition's JSON: ``describe --format json`` and the API's ``PartitionOut`` are the one
:func:`collectors.health.partition_json` (the API without ``zk_version``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.cli.describe import describe_json
from app.service.routes.cluster import partition_out
from app.service.schemas.cluster import PartitionOut
from collectors.health import assess, partition_json, partition_settings
from collectors.kafka.model import ClusterSnapshot
from tests.support import snapshots

pytestmark = pytest.mark.unit


def _snapshot() -> ClusterSnapshot:
    return snapshots.cluster(
        snapshots.partition("orders", 0, [1, 2, 3]),
        snapshots.partition("orders", 1, [2, 3, 1], isr=[2], recovering=True),
        snapshots.partition("orders", 2, [3, 1, 2], isr=[], leader=-1),
        snapshots.partition("moving", 0, [1, 2, 4], adding=[4], removing=[3]),
        snapshots.partition("fresh", 0, [1, 2], with_state=False),
        snapshots.partition("broken", 0, [1, 2], state_error="not JSON"),
        brokers=[1, 2, 3, 4],
    )


def _expected(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    report = assess(snapshot)
    return [
        partition_json(info, report.partitions[tp], partition_settings(report, snapshot, info))
        for tp, info in sorted(snapshot.partitions.items())
    ]


def test_describe_prints_the_shared_json() -> None:
    snapshot = _snapshot()
    described = describe_json(snapshot, assess(snapshot), sorted(snapshot.partitions))["partitions"]
    assert described == _expected(snapshot)
    versions = {p["topic"]: p["zk_version"] for p in described}  # the state znode's, None without one
    assert versions == {"broken": None, "fresh": None, "moving": -1, "orders": -1}


def test_the_api_serves_the_shared_json_without_the_znode_version() -> None:
    snapshot = _snapshot()
    report = assess(snapshot)
    served = [
        partition_out(info, report.partitions[tp], partition_settings(report, snapshot, info)).model_dump(
            mode="json"
        )
        for tp, info in sorted(snapshot.partitions.items())
    ]
    expected = [{k: v for k, v in p.items() if k != "zk_version"} for p in _expected(snapshot)]
    assert served == expected
    assert [list(p) for p in served] == [list(p) for p in expected]  # the same keys, in the same order
    assert list(PartitionOut.model_fields) == list(expected[0])
