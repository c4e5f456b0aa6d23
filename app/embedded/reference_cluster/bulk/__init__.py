"""Bulk mode: a large ZK-mode Kafka cluster written straight into ZooKeeper, for benchmarks.

:mod:`.plan` describes the cluster and the znode operations (pure); :mod:`.writer` sends them.
"""

from app.embedded.reference_cluster.bulk.plan import (
    BulkClusterSpec,
    BulkWriteError,
    ClusterExistsError,
    FaultKind,
)
from app.embedded.reference_cluster.bulk.writer import (
    DEFAULT_BATCH_OPS,
    DEFAULT_CONNECTIONS,
    DEFAULT_IN_FLIGHT,
    BulkWriteReport,
    write_bulk_cluster,
)

__all__ = [
    "DEFAULT_BATCH_OPS",
    "DEFAULT_CONNECTIONS",
    "DEFAULT_IN_FLIGHT",
    "BulkClusterSpec",
    "BulkWriteError",
    "BulkWriteReport",
    "ClusterExistsError",
    "FaultKind",
    "write_bulk_cluster",
]
