"""``/api/v1/load`` (viewer role): the load windows and their hourly rollups, from the store."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from analytics.model import LoadWindow
from analytics.store import LoadRollup, Store
from app.service.container import ClusterComponents
from app.service.deps import ClusterDep, StoreDep, Viewer
from app.service.schemas.common import MAX_PAGE
from app.service.schemas.load import BrokerLoadOut, LoadOut, LoadWindowOut

router = APIRouter(prefix="/api/v1", tags=["load"])


@router.get("/load", response_model=LoadOut)
def load(
    _: Viewer,
    watched: ClusterDep,
    store: StoreDep,
    since: float | None = None,
    cluster: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
) -> LoadOut:
    """The latest load window (Db, r_n and D per metric per broker, σ and its threshold) and, with
    ``since`` (epoch seconds), the windows from then on: hourly rollups (``resolution: hour``) for the
    hours older than the raw windows' retention, then the windows, oldest first, at most ``limit``."""
    key = _cluster_key(watched, store, cluster)
    if key is None:
        return LoadOut(latest=None, history=[])
    latest = store.latest_load(key)
    history: list[LoadWindowOut] = []
    if since is not None:
        history = [_rollup_out(r) for r in store.load_rollups(key, since=since, limit=limit)]
        if len(history) < limit:
            raw = store.load_history(key, since=since, limit=limit - len(history))
            history.extend(_load_out(w) for w in raw)
    return LoadOut(latest=None if latest is None else _load_out(latest), history=history)


def _rollup_out(rollup: LoadRollup) -> LoadWindowOut:
    return LoadWindowOut(
        cluster=rollup.cluster,
        window_start=rollup.hour_start,
        window_end=rollup.hour_end,
        stddev=rollup.stddev_avg,
        stddev_threshold=rollup.stddev_threshold_avg,
        rated_deviation=rollup.rated_deviation_avg,
        imbalanced=rollup.imbalanced_windows > 0,
        resolution="hour",
        windows=rollup.windows,
        max_stddev=rollup.stddev_max,
        brokers=[
            BrokerLoadOut(
                broker=b.broker,
                normalized_load=b.normalized_load_avg,
                deviation_rate=b.deviation_rate_avg,
                weighted_load=b.weighted_load_avg,
                shares={},
                metrics={},
                max_normalized_load=b.normalized_load_max,
                min_deviation_rate=b.deviation_rate_min,
                max_deviation_rate=b.deviation_rate_max,
            )
            for b in rollup.brokers
        ],
    )


def _load_out(window: LoadWindow) -> LoadWindowOut:
    return LoadWindowOut(
        cluster=window.window.cluster,
        window_start=window.window.start,
        window_end=window.window.end,
        stddev=window.stddev,
        stddev_threshold=window.stddev_threshold,
        rated_deviation=window.rated_deviation,
        imbalanced=window.imbalanced,
        brokers=[
            BrokerLoadOut(
                broker=b.broker,
                normalized_load=b.normalized_load,
                deviation_rate=b.deviation_rate,
                weighted_load=b.weighted_load,
                shares=dict(b.shares),
                metrics=dict(b.metrics),
            )
            for b in window.brokers
        ],
    )


def _cluster_key(watched: ClusterComponents, store: Store, cluster: str | None) -> str | None:
    """The store's name for the cluster: the given one (the scoped path's key), a named cluster's name,
    else this snapshot's cluster id, or the only one in the store."""
    if cluster is not None:
        return cluster
    if watched.name is not None:
        return watched.name
    known = store.clusters()
    own = watched.view.state.snapshot.cluster_id
    if own is not None and own in known:
        return own
    return known[0] if len(known) == 1 else own
