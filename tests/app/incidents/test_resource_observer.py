"""The ISR changes the incident lane counts for rule 18 (:class:`app.incidents.resources.ResourceObserver`):
every snapshot heard is compared with the one before, and the first one heard with the view's current
snapshot, so a change published right after the lane starts is counted too."""

from __future__ import annotations

import pytest

from app.incidents.resources import ResourceObserver
from collectors.kafka.model import ClusterSnapshot
from tests.support.snapshots import cluster, partition

pytestmark = pytest.mark.unit


def orders(version: int, isr: list[int]) -> ClusterSnapshot:
    return cluster(partition("orders", 0, [1, 2, 3], isr=isr), version=version)


def changes_of(observer: ResourceObserver, current: ClusterSnapshot, now: float) -> object:
    resources = observer.observe(current, None, {}, now)
    return None if 3 not in resources else resources[3].isr_changes


def test_the_first_change_heard_after_start_is_compared_with_the_current_snapshot() -> None:
    observer = ResourceObserver(isr_flap_window_s=300.0)
    settled = orders(1, [1, 2, 3])
    assert changes_of(observer, settled, now=10.0) == ()  # the first evaluation: nothing heard yet
    left, back = orders(2, [1, 2]), orders(3, [1, 2, 3])
    observer.record(11.0, left)
    observer.record(12.0, back)
    assert changes_of(observer, back, now=13.0) == ((("orders", 0), 2),)  # the leave and the rejoin


def test_a_snapshot_heard_again_after_the_baseline_is_not_a_change() -> None:
    observer = ResourceObserver(isr_flap_window_s=300.0)
    left = orders(2, [1, 2])
    observer.observe(left, None, {}, now=10.0)  # the view already had version 2 ...
    observer.record(10.5, left)  # ... when the collector's notice of it was heard
    observer.record(11.0, orders(3, [1, 2, 3]))
    assert changes_of(observer, orders(3, [1, 2, 3]), now=12.0) == ((("orders", 0), 1),)
