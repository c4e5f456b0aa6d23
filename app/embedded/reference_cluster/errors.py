"""The error the reference cluster raises for a fault or request it refuses."""

from __future__ import annotations


class ClusterError(Exception):
    """A fault or request the cluster refuses; ``status`` is the HTTP status the control port answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
