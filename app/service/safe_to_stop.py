"""The service's safe-to-stop answers: :func:`collectors.safe_to_stop.assess_safe_to_stop` on the live view's
snapshot, computed once per snapshot version and shared by the routes and ``/metrics``.

Keyed on the snapshot version alone (not on the metrics scrape, as :meth:`ClusterView.memo` is): the answer
reads nothing scraped, and at 200k partitions one computation costs about half a second.
"""

from __future__ import annotations

import threading
import weakref

from app.service.state import ClusterView
from collectors.safe_to_stop import ClusterSafeToStop, assess_safe_to_stop

_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[ClusterView, ClusterSafeToStop] = weakref.WeakKeyDictionary()


def cluster_safety(view: ClusterView) -> ClusterSafeToStop:
    """Every known broker's answer on the view's current snapshot."""
    snapshot = view.collector.snapshot
    with _lock:
        cached = _cache.get(view)
    if cached is not None and cached.snapshot_version == snapshot.version:
        return cached
    answer = assess_safe_to_stop(
        snapshot, default_min_insync_replicas=view.settings.default_min_insync_replicas
    )
    with _lock:
        current = _cache.get(view)
        if current is None or current.snapshot_version <= answer.snapshot_version:
            _cache[view] = answer
    return answer
