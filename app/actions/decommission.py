"""Whether a drained broker can be removed: what is left of it in the cluster, and why (pure).

A decommission (``POST /api/v1/actions/decommission-broker``) is the drain plan carried out by the
reassignment executor, then verified here: a broker is removable when

* no partition has a replica on it (internal topics such as ``__consumer_offsets`` included: a drain that
  skips them leaves the broker holding the group coordinators' state), and none is being moved to it;
* no topic's ``leader/follower.replication.throttled.replicas`` names it;
* it has no dynamic broker config (``/config/brokers/<id>``): the throttle rates a reassignment set, or
  any other key, which would apply again to a new broker given the same id.

Anything else is a :class:`Leftover` with the reason, in the action's result (``removable: false``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from collectors.kafka.model import ClusterSnapshot, TopicPartition
from collectors.kafka.throttles import BROKER_THROTTLE_KEYS, TOPIC_THROTTLE_KEYS, parse_throttled_replicas

LeftoverKind = Literal["replica", "reassignment", "throttle", "config"]

CHECKS = (
    "no partition has a replica on broker {broker} (internal topics such as __consumer_offsets included)",
    "no reassignment moves a replica to broker {broker}",
    "no topic's leader/follower.replication.throttled.replicas names broker {broker}",
    "broker {broker} has no dynamic config left (/config/brokers/{broker}: the throttle rates "
    "leader/follower.replication.throttled.rate, or any other key)",
)
"""What a decommission verifies once the drain is done (a dry run lists them)."""


def checks(broker: int) -> list[str]:
    return [c.format(broker=broker) for c in CHECKS]


@dataclass(frozen=True, slots=True)
class Leftover:
    kind: LeftoverKind
    reason: str
    topic: str | None = None
    partition: int | None = None
    entity: str | None = None
    """The config entity (``brokers/<id>``, ``topics/<name>``) for a throttle or config leftover."""

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "reason": self.reason}
        if self.topic is not None:
            out["topic"] = self.topic
        if self.partition is not None:
            out["partition"] = self.partition
        if self.entity is not None:
            out["entity"] = self.entity
        return out


def leftovers(
    snapshot: ClusterSnapshot,
    broker: int,
    broker_config: Mapping[str, str],
    topic_configs: Mapping[str, Mapping[str, str]],
    skipped: Mapping[TopicPartition, str] | None = None,
) -> list[Leftover]:
    """What keeps ``broker`` from being removed: replicas on it (with the drain plan's reason for skipping
    the partition when it had one, ``skipped``), moves to it, throttled-replica entries naming it in
    ``topic_configs``, and any key of its own dynamic config ``broker_config``."""
    skipped = skipped or {}
    found: list[Leftover] = []
    pending = snapshot.pending.reassignments
    for tp, info in sorted(snapshot.partitions.items()):
        assignment = info.assignment
        if broker in assignment.replicas:
            if tp in skipped:
                reason = f"still a replica: the drain plan skipped it ({skipped[tp]})"
            elif assignment.is_being_reassigned or tp in pending:
                reason = "still a replica: the partition is being reassigned"
            else:
                reason = f"still a replica (replicas {list(assignment.replicas)})"
            found.append(Leftover("replica", reason, tp.topic, tp.partition))
        elif broker in pending.get(tp, ()):
            found.append(
                Leftover("reassignment", "a pending reassignment moves it here", tp.topic, tp.partition)
            )
    for topic, config in sorted(topic_configs.items()):
        for key in TOPIC_THROTTLE_KEYS:
            value = config.get(key)
            if value is None:
                continue
            named = sorted({p for p, b in parse_throttled_replicas(value).pairs if b == broker})
            if named:
                found.append(
                    Leftover(
                        "throttle",
                        f"{key} names broker {broker} (partitions {', '.join(map(str, named))})",
                        topic=topic,
                        entity=f"topics/{topic}",
                    )
                )
    for key, value in sorted(broker_config.items()):
        kind: LeftoverKind = "throttle" if key in BROKER_THROTTLE_KEYS else "config"
        found.append(Leftover(kind, f"dynamic broker config {key}={value}", entity=f"brokers/{broker}"))
    return found


def throttled_topics(snapshot: ClusterSnapshot) -> list[str]:
    """Topics whose config in the snapshot has a throttled-replicas key (the ones to read again)."""
    return sorted(
        t for t, info in snapshot.topics.items() if any(k in info.config for k in TOPIC_THROTTLE_KEYS)
    )
