"""The run's order list (tests/support/ordering.py) names files that exist, each once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.ordering import SLOWEST_FIRST

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def test_every_file_of_the_order_exists_once() -> None:
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    missing = [path for path in SLOWEST_FIRST if not (ROOT / path).is_file()]
    assert not missing, f"renamed or removed test files still in tests/support/ordering.py: {missing}"


def test_the_slowest_files_are_collected_first(request: pytest.FixtureRequest) -> None:
    files = list(dict.fromkeys(item.nodeid.split("::", 1)[0] for item in request.session.items))
    present = [path for path in SLOWEST_FIRST if path in files]
    assert files[: len(present)] == present
