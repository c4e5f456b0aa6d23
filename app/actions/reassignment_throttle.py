"""A reassignment's replication throttle: what was asked for (:class:`ThrottleSpec`), and writing the throttle
keys into entity configs (read-modify-write of ``/config/<type>/<entity>``, the brokers told through
``/config/changes`` as kafka-configs does; every other key of the config is kept). Their removal is
:func:`app.actions.throttle_removal.remove_throttles`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from collectors.kafka.admin import AdminZooKeeper

if TYPE_CHECKING:
    from app.actions.adaptive import AdaptiveThrottle

ThrottleMode = Literal["none", "static", "adaptive"]


@dataclass(frozen=True, slots=True)
class ThrottleSpec:
    mode: ThrottleMode
    rate: int | None = None
    """The static rate (bytes/s)."""
    adaptive: AdaptiveThrottle | None = None

    @property
    def initial_rate(self) -> int | None:
        """The rate set before the first batch: the static one, or the adaptive minimum (it rises from
        there while the brokers stay healthy)."""
        if self.adaptive is not None:
            return int(self.adaptive.min_bytes_per_s)
        return self.rate

    @staticmethod
    def from_request(request: Mapping[str, Any]) -> ThrottleSpec:
        """From the action's recorded request (``throttle`` for an adaptive one, else
        ``throttle_bytes_per_sec``); ValueError when it is malformed."""
        throttle = request.get("throttle")
        if isinstance(throttle, Mapping) and throttle.get("mode") == "adaptive":
            from app.actions.adaptive import AdaptiveThrottle

            return ThrottleSpec("adaptive", adaptive=AdaptiveThrottle.model_validate(dict(throttle)))
        rate = request.get("throttle_bytes_per_sec")
        if rate is None:
            return ThrottleSpec("none")
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise ValueError(f"the throttle rate must be an integer of at least 1 byte/s, got {rate!r}")
        return ThrottleSpec("static", rate=rate)


def set_config_keys(zk: AdminZooKeeper, entity_type: str, entity: str, values: Mapping[str, str]) -> bool:
    """Merge ``values`` into the entity's config; writes (and notifies) only when something changes.
    Returns whether it wrote."""
    config = zk.get_config(entity_type, entity)
    updated = config | dict(values)
    if updated == config:
        return False
    zk.set_config(entity_type, entity, updated)
    return True
