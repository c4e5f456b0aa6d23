"""The service's safe-to-stop answers: :func:`collectors.safe_to_stop.assess_safe_to_stop` on the live view,
computed once per snapshot version (and scrape) and shared by the routes and ``/metrics``."""

from __future__ import annotations

from app.service.state import ClusterView
from collectors.safe_to_stop import ClusterSafeToStop, assess_safe_to_stop


def cluster_safety(view: ClusterView) -> ClusterSafeToStop:
    """Every known broker's answer on the view's current snapshot (memoised: one pass per version)."""
    default = view.settings.default_min_insync_replicas
    answer: ClusterSafeToStop = view.memo(
        "safe_to_stop",
        lambda state: assess_safe_to_stop(state.snapshot, default_min_insync_replicas=default),
    )
    return answer
