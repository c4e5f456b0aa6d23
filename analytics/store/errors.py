"""The store's one exception, and the short form of a driver's error that its messages quote."""

from __future__ import annotations

from typing import Final

__all__ = ["StoreConflictError", "StoreError", "error_detail"]

_MAX_DETAIL: Final = 600


class StoreError(Exception):
    """The store cannot be opened or used; the message says which store and why."""


class StoreConflictError(StoreError):
    """A compare-and-set write found the rows changed since they were read (another writer was first):
    nothing was written; read again and retry."""


def error_detail(exc: BaseException) -> str:
    """The driver's message (not SQLAlchemy's, which repeats the statement and up to 1,000 parameters)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if isinstance(orig, BaseException) else exc).strip()
    text = f"{type(orig if isinstance(orig, BaseException) else exc).__name__}: {text}"
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."
