"""The order the suite's files are handed to the xdist workers: the longest first.

``make test`` runs ``pytest -n 3 --dist loadfile --no-loadscope-reorder``: each file goes to one worker,
in the order collected here. xdist's own order (most tests first) hands out last the files with one or two
tests that each take minutes (the demo, Spark's exactly-once runs), so the suite used to end with one
worker still running the demo while the others were idle. Here the files below, measured in a clean
clone's run (``--durations=0``) and heaviest first, start first; the rest follow with the most tests
first, as xdist would order them. A file missing from the list costs time, never a result: the order only
decides which worker runs what and when.
"""

from __future__ import annotations

import pytest

# The files whose tests took longest, heaviest first: the seconds of a clean-clone run on 3 workers
# (2026-11-28, the whole suite 3,099 s of test time; the files below 1,647 s of it).
HEAVY_FIRST: tuple[str, ...] = (
    "tests/analytics/spark/test_exactly_once.py",  # 260 s: two Spark jobs killed and restarted
    "tests/app/actions/test_resume.py",  # 238 s
    "tests/app/cli/test_demo.py",  # 162 s: the whole demo, once
    "tests/app/cli/test_analytics_stop.py",  # 151 s
    "tests/app/cli/test_rolling_restart_service.py",  # 116 s
    "tests/app/cli/test_serve_start_checks.py",  # 98 s
    "tests/analytics/spark/test_end_to_end.py",  # 89 s
    "tests/analytics/spark/test_kafka_source.py",  # 86 s
    "tests/analytics/spark/test_standalone.py",  # 86 s
    "tests/app/cli/test_reference_cluster.py",  # 79 s
    "tests/app/incidents/test_end_to_end.py",  # 78 s
    "tests/app/incidents/test_consumer_groups_end_to_end.py",  # 75 s
    "tests/app/service/test_openapi_fuzz.py",  # 69 s
    "tests/analytics/spark/test_job.py",  # 61 s
)


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests_per_file: dict[str, int] = {}
    for item in items:
        tests_per_file[_file(item)] = tests_per_file.get(_file(item), 0) + 1
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    order = {
        path: (rank.get(path, len(rank)), -count if path not in rank else 0, i)
        for i, (path, count) in enumerate(tests_per_file.items())
    }
    items.sort(key=lambda item: order[_file(item)])  # stable: a file's own tests keep their order
