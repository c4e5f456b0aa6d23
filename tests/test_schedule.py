"""The suite's schedule names files that exist: a renamed slow file would silently go back to the end."""

from pathlib import Path

import pytest

from tests.support.schedule import HEAVY_FIRST

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.unit
def test_every_file_the_schedule_starts_first_exists_once() -> None:
    missing = [path for path in HEAVY_FIRST if not (ROOT / path).is_file()]
    assert not missing, f"tests/support/schedule.py names files that do not exist: {missing}"
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)
