"""How a pydantic ``ValidationError`` reads on one line.

Shared by the command line (``error: ...`` for bad settings, ``app/cli/common.py``) and the reference
cluster's control port (its 422 bodies), which is why it lives here rather than in either: the settings tree
imports the reference cluster's settings, so the tooling cannot import the settings module back.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


def format_validation_error(exc: ValidationError) -> str:
    """``field.path: message; ...``: every bad field named by its dotted path. A validator's own ValueError
    reads as its message, without pydantic's ``Value error, `` in front."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {_message(e)}" for e in exc.errors())


def _message(error: Any) -> str:
    reason = (error.get("ctx") or {}).get("error")
    if error["type"] == "value_error" and reason is not None:
        return str(reason)
    return str(error["msg"])
