"""The conductor's demotions, promotions and silences done inside the service, for its rolling restarts
(:class:`app.maintenance.conducting.RollingRestarts`): the cluster's :class:`~app.actions.runner.ActionRunner`
(the same checks, journal and audit as ``POST /api/v1/actions/demote-broker|promote-broker``), the silences'
store (audited as ``POST /api/v1/silences`` is) and the alert store (the open alerts a silence holds), as
the run's requester."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from analytics.store import Database, Store
from app.actions.orders import ActionError, ConflictError, LeadershipOrder
from app.actions.runner import ActionRunner
from app.actions.state import ActionLog, AuditEntry
from app.maintenance.rolling_restart import ServiceConflictError, ServiceError
from app.maintenance.service_client import maintenance_silence_body
from app.service.auth import Principal
from app.silences.model import AlertFacts, SilenceDraft, check_draft, silencers
from app.silences.store import SilenceStore

__all__ = ["InProcessMaintenance"]


class InProcessMaintenance:
    """:class:`~app.maintenance.rolling_restart.MaintenanceService` in-process, as ``who``."""

    def __init__(
        self,
        who: Principal,
        runner: ActionRunner,
        actions: ActionLog,
        database: Database,
        alerts: Store,
        wake_notifier: Callable[[], None] | None = None,
    ) -> None:
        self.who = who
        self.runner = runner
        self.actions = actions
        self.silences = SilenceStore(database)
        self.alerts = alerts
        self.wake_notifier = wake_notifier

    def _start(self, step: Callable[[Any, LeadershipOrder], Any], broker: int) -> str:
        try:
            outcome = step(self.who, LeadershipOrder(broker, dry_run=False))
        except ConflictError as exc:
            raise ServiceConflictError(exc.message) from exc
        except ActionError as exc:
            raise ServiceError(exc.message) from exc
        if outcome.action is None:
            raise ServiceError(f"broker {broker}: no action was started")
        return str(outcome.action.id)

    def start_demotion(self, broker: int) -> str:
        return self._start(self.runner.demote, broker)

    def start_promotion(self, broker: int) -> str:
        return self._start(self.runner.promote, broker)

    def action_state(self, action_id: str) -> tuple[str, str | None]:
        try:
            record = self.runner.action(action_id)
        except ActionError as exc:
            raise ServiceError(exc.message) from exc
        return record.state.value, record.error

    def find_action(self, kind: str, broker: int, since: float) -> str | None:
        for record in self.actions.records(kinds=[kind], limit=100):
            if record.requested_at < since:
                return None
            if record.request.get("broker") == broker and not record.request.get("dry_run", False):
                return record.id
        return None

    def silence(self, broker: int, duration_s: int, comment: str) -> str:
        body = maintenance_silence_body(broker, duration_s, comment)
        now = time.time()
        draft = check_draft(
            matchers=[],
            maintenance=body["maintenance"],
            duration_s=body["duration_s"],
            ends_at=None,
            starts_at=None,
            comment=body["comment"],
            now=now,
        )
        if not isinstance(draft, SilenceDraft):
            raise ServiceError("; ".join(p.msg for p in draft))
        silence = self.silences.create(draft, created_by=self.who.name, now=now)
        self._audit("silence-create", {
            "silence": silence.id, "matchers": [], "maintenance": {"broker": broker},
            "starts_at": silence.starts_at, "ends_at": silence.ends_at, "comment": silence.comment,
        })  # fmt: skip
        return str(silence.id)

    def expire(self, silence_id: str) -> None:
        silence, ended = self.silences.expire(int(silence_id), by=self.who.name, now=time.time())
        if silence is not None and ended:
            self._audit("silence-expire", {"silence": silence.id})
            if self.wake_notifier is not None:
                self.wake_notifier()

    def held(self, silence_id: str) -> int:
        now = time.time()
        silences = [s for s in self.silences.ending_after(now) if s.id == int(silence_id)]
        if not silences:
            return 0
        held = 0
        for alert in self.alerts.alerts(state="open", limit=100_000):
            if alert.event_sequence == 0:
                continue
            facts = AlertFacts(alert.cluster, alert.rule, alert.subject, alert.severity, alert.evidence)
            if silencers(silences, facts, now):
                held += 1
        return held

    def _audit(self, action: str, detail: dict[str, Any]) -> None:
        self.actions.audit(
            AuditEntry(
                time.time(), self.who.name, self.who.role.name, action, False, "accepted", None, detail
            )
        )
