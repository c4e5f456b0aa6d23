"""The run's order: the slowest test files first.

``make test`` runs the suite on two workers with ``--dist loadfile``: a file goes whole to a worker, in the
order collected, as workers free up. A long file collected late leaves one worker running it alone at the
end of the run; collected first, it runs while the other worker goes through the many short files. The
list is measured (``--durations``) and only orders: a file missing from it, or a new slow one, still runs.
Within a file the order is unchanged (some modules rely on it).
"""

from __future__ import annotations

from typing import Final

import pytest

SLOWEST_FIRST: Final = (
    "tests/app/cli/test_demo.py",
    "tests/analytics/spark/test_exactly_once.py",
    "tests/app/cli/test_analytics_stop.py",
    "tests/app/cli/test_rolling_restart_service.py",
    "tests/app/incidents/test_consumer_groups_end_to_end.py",
    "tests/app/actions/test_resume.py",
    "tests/analytics/spark/test_end_to_end.py",
    "tests/app/incidents/test_end_to_end.py",
    "tests/analytics/spark/test_standalone.py",
    "tests/app/cli/test_kafka_transport.py",
    "tests/analytics/spark/test_kafka_source.py",
    "tests/app/cli/test_rolling_restart.py",
    "tests/app/cli/test_collect_clusters.py",
    "tests/analytics/spark/test_kafka_contract.py",
    "tests/app/silences/test_end_to_end.py",
    "tests/app/service/test_openapi_fuzz.py",
    "tests/app/cli/test_clusters_end_to_end.py",
    "tests/app/incidents/test_causes_end_to_end.py",
    "tests/dashboards/test_panels.py",
)
"""Test files by their measured duration, the longest first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    last = len(SLOWEST_FIRST)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], last))  # stable: files keep order
