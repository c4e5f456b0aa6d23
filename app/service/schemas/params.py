"""The path and query parameters the routes share, bounded as :mod:`app.service.schemas.common` says.

Apart from the models because they are FastAPI's ``Path``/``Query``: the command line renders the models
(``kafka-health describe`` prints the throttles as the API does) and must not import the web framework.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import BeforeValidator

from app.service.schemas.common import MAX_ID, MAX_JAVA_INT


def _query_bool(value: object) -> bool:
    """The text ``true`` or ``false`` of a query string as a bool; anything else (``1``, ``no``, ``True``,
    an empty value) is refused: FastAPI's lax parsing took ``0``, ``off`` and ``f`` for false."""
    if value == "true":
        return True
    if value == "false":
        return False
    raise ValueError("must be true or false (lower case)")


BrokerIdPath = Annotated[int, Path(ge=0, le=MAX_JAVA_INT, description="a broker id (0..2^31-1)")]
IdPath = Annotated[int, Path(ge=0, le=MAX_ID, description="an id (0..2^63-1)")]
BrokerIdQuery = Annotated[int | None, Query(ge=0, le=MAX_JAVA_INT, description="a broker id (0..2^31-1)")]
Offset = Annotated[int, Query(ge=0, le=MAX_ID, description="items skipped (0..2^63-1)")]
Limit = Annotated[int, Query(ge=1, le=1000, description="items returned at most (1..1000)")]
"""The page size of the store's lists (alerts, actions, audit, deliveries)."""
QueryBool = Annotated[
    bool | None, BeforeValidator(_query_bool), Query(description="true or false (lower case)")
]
"""A yes/no filter of a query string: ``true`` or ``false``, nothing else (published as a boolean)."""
