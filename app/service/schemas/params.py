"""The path and query parameters the routes share, bounded as :mod:`app.service.schemas.common` says.

Apart from the models because they are FastAPI's ``Path``/``Query``: the command line renders the models
(``kafka-health describe`` prints the throttles as the API does) and must not import the web framework.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from app.service.schemas.common import MAX_ID, MAX_JAVA_INT

BrokerIdPath = Annotated[int, Path(ge=0, le=MAX_JAVA_INT, description="a broker id (0..2^31-1)")]
IdPath = Annotated[int, Path(ge=0, le=MAX_ID, description="an id (0..2^63-1)")]
BrokerIdQuery = Annotated[int | None, Query(ge=0, le=MAX_JAVA_INT, description="a broker id (0..2^31-1)")]
Offset = Annotated[int, Query(ge=0, le=MAX_ID, description="items skipped (0..2^63-1)")]
Limit = Annotated[int, Query(ge=1, le=1000, description="items returned at most (1..1000)")]
"""The page size of the store's lists (alerts, actions, audit, deliveries)."""
