"""The fan-out of the collector's ``on_change`` (:class:`app.incidents.changes.SnapshotChanges`)."""

from __future__ import annotations

import logging

import pytest

from app.incidents.changes import SnapshotChanges
from collectors.kafka.model import ClusterSnapshot
from tests.support.snapshots import cluster

pytestmark = pytest.mark.unit


def test_every_listener_hears_each_snapshot_until_it_unsubscribes(caplog: pytest.LogCaptureFixture) -> None:
    hub = SnapshotChanges()
    heard: list[tuple[str, int]] = []

    def broken(snapshot: ClusterSnapshot) -> None:
        raise RuntimeError("a bug in a listener")

    first = hub.subscribe(lambda s: heard.append(("first", s.version)))
    hub.subscribe(broken)
    hub.subscribe(lambda s: heard.append(("last", s.version)))
    with caplog.at_level(logging.ERROR):
        hub(cluster(version=1))
    assert heard == [("first", 1), ("last", 1)]  # a failing listener does not stop the others
    assert "a snapshot listener failed" in caplog.text
    first()
    hub(cluster(version=2))
    assert heard[-1] == ("last", 2)
    assert ("first", 2) not in heard
