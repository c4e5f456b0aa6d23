"""The run's order: the slowest test files first.

``make test`` runs the suite on three workers with ``--dist loadfile --no-loadscope-reorder``: a file goes
whole to a worker, in the order collected, as workers free up (without ``--no-loadscope-reorder``,
pytest-xdist orders the files by their number of tests instead). A long file collected late leaves one
worker running it alone at the end of the run; collected first, it runs while the other workers go through
the many short files. The list is measured (``--durations``) and only orders: a file missing from it, or a
new slow one, still runs. Within a file the order is unchanged (some modules rely on it).
"""

from __future__ import annotations

from typing import Final

import pytest

SLOWEST_FIRST: Final = (
    "tests/app/cli/test_demo.py",
    "tests/app/cli/test_rolling_restart_service.py",
    "tests/analytics/spark/test_exactly_once.py",
    "tests/app/incidents/test_consumer_groups_end_to_end.py",
    "tests/app/cli/test_analytics_stop.py",
    "tests/app/actions/test_resume.py",
    "tests/analytics/spark/test_standalone.py",
    "tests/app/incidents/test_end_to_end.py",
    "tests/analytics/spark/test_end_to_end.py",
    "tests/app/cli/test_rolling_restart.py",
    "tests/analytics/spark/test_clusters.py",
    "tests/app/silences/test_end_to_end.py",
    "tests/app/cli/test_kafka_transport.py",
    "tests/app/service/test_openapi_fuzz.py",
    "tests/analytics/spark/test_kafka_source.py",
    "tests/app/cli/test_collect_clusters.py",
    "tests/analytics/spark/test_kafka_contract.py",
    "tests/app/cli/test_clusters_end_to_end.py",
    "tests/app/incidents/test_causes_end_to_end.py",
    "tests/dashboards/test_panels.py",
)
"""Test files by their measured duration, the longest first, a Spark job's file and another in turn (the
Spark jobs take a core each: three of them at once on two cores slow each other down)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    last = len(SLOWEST_FIRST)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], last))  # stable: files keep order
