"""Progress and ETA of a running reassignment, pure: from the partitions it moves, what ZooKeeper shows now
and the brokers' log sizes (``collectors.partition_metrics``), how much is done, how fast it goes and when
it will be done.

A *moving replica* is a replica the reassignment adds: a broker in the partition's target replicas that
was not among its replicas before the action began. Its copy is measured as its log size against the
partition leader's (the leader's log is what it copies; a follower starts at the leader's log start, so
the sizes compare whatever the retention did). A moving replica is done once it is in the ISR (it has
caught up), or once the partition's reassignment has completed; then its bytes count as all done. A
partition is done when ZooKeeper shows exactly its target replicas, no reassignment running.

Bytes are known for a moving replica when the leader's size (else an in-sync replica's) and its own are
known: its broker was read, and a broker read with no log at all is taken as not exporting log sizes, not
as empty (a new broker has no log until its first replica arrives: its replicas' bytes are unknown until
then). The estimate counts bytes when every moving replica's are known, and falls back to partition
counts otherwise.

A copy *falls behind* (:func:`falling_behind`) when the bytes its moving replicas have left to copy grow
over a whole window (the executor's ``stall_after_s``): the partitions take in more than the throttle (or
the replication, without one) lets through, and the replicas never catch up. The verdict reads samples of
the bytes remaining of the batch in flight (:func:`bytes_remaining_of`), not of the whole action: the
partitions of later batches grow with their produce traffic whatever the throttle does.

The rate is an exponentially weighted moving average over observations (``smoothing``, the weight of the
newest), of the bytes (or partitions) done since the previous observation over the time between; the
bytes are summed over the replicas measured both times, so a broker missing from one read does not show as
a jump. The ETA is what remains over that rate: None until two observations have shown progress (a rate
needs two points, and no progress yet gives no rate), 0 when nothing remains.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from collectors.kafka.model import ClusterSnapshot, PartitionInfo, TopicPartition

DEFAULT_SMOOTHING = 0.3
"""Weight of the newest observation in the rate: about the last five observations count."""


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """One partition of the reassignment: its replicas before the action began and its target."""

    tp: TopicPartition
    origin: tuple[int, ...]
    target: tuple[int, ...]

    @property
    def new_replicas(self) -> tuple[int, ...]:
        """The replicas added: each copies the partition's data."""
        return tuple(b for b in self.target if b not in self.origin)


@dataclass(frozen=True, slots=True)
class ReplicaProgress:
    tp: TopicPartition
    broker: int
    done: bool
    bytes_done: float | None
    """None when not known (see the module docstring)."""
    bytes_total: float | None


@dataclass(frozen=True, slots=True)
class ProgressEstimate:
    at: float
    """Epoch seconds of the observation."""
    partitions_total: int
    partitions_done: int
    replicas_total: int
    """Moving replicas."""
    replicas_done: int
    bytes_total: float | None
    """Bytes the moving replicas copy in all; None unless every one of them is measured."""
    bytes_done: float | None
    rate_bytes_per_s: float | None
    rate_partitions_per_s: float | None
    eta_s: float | None
    basis: Literal["bytes", "partitions"]
    """What the figures and the ETA count: bytes when every moving replica is measured."""
    observations: int
    replicas: tuple[ReplicaProgress, ...] = ()

    @property
    def partitions_remaining(self) -> int:
        return self.partitions_total - self.partitions_done

    @property
    def bytes_remaining(self) -> float | None:
        if self.bytes_total is None or self.bytes_done is None:
            return None
        return max(0.0, self.bytes_total - self.bytes_done)

    def as_progress(self) -> dict[str, Any]:
        """The figures as JSON values, for an action's ``progress``."""
        return {
            "at": self.at,
            "basis": self.basis,
            "partitions": {
                "total": self.partitions_total,
                "done": self.partitions_done,
                "remaining": self.partitions_remaining,
            },
            "replicas": {"total": self.replicas_total, "done": self.replicas_done},
            "bytes": None
            if self.bytes_total is None
            else {"total": self.bytes_total, "done": self.bytes_done, "remaining": self.bytes_remaining},
            "rate_bytes_per_s": self.rate_bytes_per_s,
            "rate_partitions_per_s": self.rate_partitions_per_s,
            "eta_s": self.eta_s,
            "observations": self.observations,
        }


def estimate_progress(
    moves: Sequence[PartitionMove],
    snapshot: ClusterSnapshot,
    log_sizes: Mapping[int, Mapping[TopicPartition, float]] | None,
    previous: ProgressEstimate | None,
    now: float,
    smoothing: float = DEFAULT_SMOOTHING,
) -> ProgressEstimate:
    """The reassignment's progress at ``now``; ``log_sizes`` is broker id -> partition -> bytes for the
    brokers read (None: no read), ``previous`` the estimate before (None for the first)."""
    if not 0 < smoothing <= 1:
        raise ValueError(f"smoothing is the newest observation's weight, in (0, 1]; got {smoothing!r}")
    sizes = {b: s for b, s in (log_sizes or {}).items() if s}
    replicas: list[ReplicaProgress] = []
    partitions_done = 0
    for move in moves:
        info = snapshot.partitions.get(move.tp)
        complete = _complete(info, move)
        partitions_done += complete
        for broker in move.new_replicas:
            replicas.append(_replica(move.tp, broker, info, complete, sizes))
    measured = all(r.bytes_done is not None and r.bytes_total is not None for r in replicas)
    bytes_total = sum(r.bytes_total or 0.0 for r in replicas) if measured else None
    bytes_done = sum(r.bytes_done or 0.0 for r in replicas) if measured else None
    observations = 1 if previous is None else previous.observations + 1
    rate_bytes = _rate_bytes(replicas, previous, now, smoothing)
    rate_partitions = _rate_partitions(partitions_done, previous, now, smoothing)
    basis: Literal["bytes", "partitions"]
    if replicas and bytes_total is not None and bytes_done is not None:
        basis, eta = "bytes", _eta(max(0.0, bytes_total - bytes_done), rate_bytes)
    else:
        basis, eta = "partitions", _eta(float(len(moves) - partitions_done), rate_partitions)
    return ProgressEstimate(
        at=now,
        partitions_total=len(moves),
        partitions_done=partitions_done,
        replicas_total=len(replicas),
        replicas_done=sum(r.done for r in replicas),
        bytes_total=bytes_total,
        bytes_done=bytes_done,
        rate_bytes_per_s=rate_bytes,
        rate_partitions_per_s=rate_partitions,
        eta_s=eta,
        basis=basis,
        observations=observations,
        replicas=tuple(replicas),
    )


def moves_of(
    targets: Mapping[TopicPartition, Sequence[int]], origins: Mapping[TopicPartition, Sequence[int]]
) -> list[PartitionMove]:
    """The moves of a reassignment from its target replicas and the assignment recorded before it began
    (a partition missing from ``origins`` is taken as having had no replica: everything it gets is new)."""
    return [PartitionMove(tp, tuple(origins.get(tp, ())), tuple(target)) for tp, target in targets.items()]


def _complete(info: PartitionInfo | None, move: PartitionMove) -> bool:
    return info is not None and not info.assignment.is_being_reassigned and info.replicas == move.target


def _replica(
    tp: TopicPartition,
    broker: int,
    info: PartitionInfo | None,
    complete: bool,
    sizes: Mapping[int, Mapping[TopicPartition, float]],
) -> ReplicaProgress:
    caught_up = info is not None and broker in info.isr and broker in info.replicas
    done = complete or caught_up
    total = _source_size(tp, broker, info, sizes)
    own = sizes[broker].get(tp, 0.0) if broker in sizes else None
    if done:
        measured = total if total is not None else own
        return ReplicaProgress(tp, broker, True, measured, measured)
    if total is None or own is None:
        return ReplicaProgress(tp, broker, False, None, total)
    return ReplicaProgress(tp, broker, False, min(own, total), total)


def _source_size(
    tp: TopicPartition,
    broker: int,
    info: PartitionInfo | None,
    sizes: Mapping[int, Mapping[TopicPartition, float]],
) -> float | None:
    """What the new replica copies: the leader's log size, else the largest in-sync replica's."""
    if info is None:
        return None
    leader = sizes.get(info.leader, {}).get(tp)
    if leader is not None:
        return leader
    others = [sizes[b][tp] for b in info.isr if b != broker and b in sizes and tp in sizes[b]]
    return max(others) if others else None


def _rate_bytes(
    replicas: Sequence[ReplicaProgress], previous: ProgressEstimate | None, now: float, smoothing: float
) -> float | None:
    if previous is None:
        return None
    before = {(r.tp, r.broker): r.bytes_done for r in previous.replicas if r.bytes_done is not None}
    common = [
        (r.bytes_done, before[(r.tp, r.broker)])
        for r in replicas
        if r.bytes_done is not None and (r.tp, r.broker) in before
    ]
    if not common:
        return previous.rate_bytes_per_s
    delta = sum(max(0.0, now_done - then) for now_done, then in common)
    return _smoothed(delta, now - previous.at, previous.rate_bytes_per_s, smoothing)


def _rate_partitions(
    done: int, previous: ProgressEstimate | None, now: float, smoothing: float
) -> float | None:
    if previous is None:
        return None
    return _smoothed(
        max(0, done - previous.partitions_done), now - previous.at, previous.rate_partitions_per_s, smoothing
    )


def _smoothed(delta: float, elapsed: float, before: float | None, smoothing: float) -> float | None:
    if elapsed <= 0:
        return before
    observed = delta / elapsed
    if before is None:
        return observed if delta > 0 else None
    return smoothing * observed + (1 - smoothing) * before


def _eta(remaining: float, rate: float | None) -> float | None:
    if remaining <= 0:
        return 0.0
    if rate is None or rate <= 0:
        return None
    return remaining / rate


# --- falling behind ----------------------------------------------------------------------------------------

Sample = tuple[float, float]
"""``(time in seconds, bytes remaining)``: one measurement of the copy in flight."""


@dataclass(frozen=True, slots=True)
class FallingBehind:
    """The bytes remaining grew from ``bytes_then`` (at ``since``) to ``bytes_now`` (at ``at``)."""

    since: float
    at: float
    bytes_then: float
    bytes_now: float

    @property
    def elapsed_s(self) -> float:
        return self.at - self.since

    @property
    def growth_bytes_per_s(self) -> float:
        """How fast the remainder grows: what the partitions take in beyond what the copy moves."""
        return (self.bytes_now - self.bytes_then) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def describe(self, throttle_bytes_per_s: int | None) -> str:
        """``falling behind: ...`` with the figures: the bytes remaining then and now, their growth rate,
        and the throttle."""
        throttle = (
            "no throttle (the replication itself is slower than the produce rate)"
            if throttle_bytes_per_s is None
            else f"a throttle of {byte_rate(throttle_bytes_per_s)}"
        )
        return (
            f"falling behind: bytes remaining grew from {byte_size(self.bytes_then)} to "
            f"{byte_size(self.bytes_now)} in {self.elapsed_s:.0f} s (+{byte_rate(self.growth_bytes_per_s)}) "
            f"at {throttle}"
        )

    def reason(self, throttle_bytes_per_s: int | None, held: str | None = None) -> str:
        """The action's reason when it goes STALLED for it: :meth:`describe`, why the throttle stays where
        it is (``held``, an adaptive one), and what it means."""
        because = f"; {held}" if held else ""
        return (
            f"{self.describe(throttle_bytes_per_s)}{because}: the moving partitions take in more than the "
            "copy moves, so their new replicas never catch up (raise the throttle)"
        )


def bytes_remaining_of(estimate: ProgressEstimate, partitions: Collection[TopicPartition]) -> float | None:
    """The bytes the moving replicas of ``partitions`` (the batch in flight) have left to copy; None when
    any of them is not measured, or none of them copies anything."""
    wanted = frozenset(partitions)
    replicas = [r for r in estimate.replicas if r.tp in wanted]
    if not replicas or any(r.bytes_done is None or r.bytes_total is None for r in replicas):
        return None
    return sum(max(0.0, (r.bytes_total or 0.0) - (r.bytes_done or 0.0)) for r in replicas)


def window_of(samples: Sequence[Sample], window_s: float) -> list[Sample]:
    """The samples a verdict over ``window_s`` needs (oldest first): those of the last ``window_s`` and the
    latest one before them (where the window begins). The executor keeps only these."""
    if not samples:
        return []
    start = samples[-1][0] - window_s
    before = [i for i, (at, _) in enumerate(samples) if at <= start]
    return list(samples[before[-1] if before else 0 :])


def falling_behind(samples: Sequence[Sample], window_s: float) -> FallingBehind | None:
    """The verdict on the copy in flight from its samples (oldest first): falling behind when they cover
    ``window_s`` (one is at least that old), the bytes remaining at the end are above those at the window's
    start (the latest sample at or before ``window_s`` ago), and their least-squares trend over the window
    rises, so that one noisy sample neither makes nor unmakes the verdict. None otherwise: too soon to
    tell, holding, or catching up."""
    if window_s <= 0:
        raise ValueError(f"the window must be positive, got {window_s!r}")
    window = window_of(samples, window_s)
    if len(window) < 2 or window[-1][0] - window[0][0] < window_s:
        return None
    (since, then), (at, now) = window[0], window[-1]
    if now <= then or _slope(window) <= 0:
        return None
    return FallingBehind(since, at, then, now)


def _slope(samples: Sequence[Sample]) -> float:
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_b = sum(b for _, b in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread <= 0:
        return 0.0
    return sum((t - mean_t) * (b - mean_b) for t, b in samples) / spread


def byte_size(value: float) -> str:
    """``58.0 MiB``: bytes in the largest binary unit that keeps a number of at least 1."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def byte_rate(value: float) -> str:
    """``256.0 KiB/s``."""
    return f"{byte_size(value)}/s"
