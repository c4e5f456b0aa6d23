"""The webhooks' queries: :class:`WebhookStore`, on the ``webhooks`` subscriptions and the
``webhook_deliveries`` outbox (:mod:`app.webhooks.tables`), which the routes and the notifier use.

Which event goes to which webhook is :mod:`app.webhooks.policy`'s; this module reads the candidates and
writes the rows. See ``docs/webhooks.md``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analytics.model import AlertEvent, EventKind, Severity
from analytics.store import Database, StoreError
from analytics.store.database import check_page, finite, one_or_many, opt_float, opt_int
from analytics.store.rows import read_action_ref, read_alert_event
from analytics.store.tables import alert_events_table, alerts_table
from app.silences.model import AlertFacts, Silence, silencers
from app.silences.store import silences_ending_after
from app.silences.tables import silences_table
from app.webhooks.model import (
    DELIVERY_STATES,
    WEBHOOK_FIELDS,
    AlertNotice,
    DeliveryState,
    Webhook,
    WebhookDelivery,
    WebhookFormat,
    WebhookRenderer,
    checked_fields,
)
from app.webhooks.policy import clip, outbox_entry, run_of, silence_reason, skip_reason
from app.webhooks.tables import webhook_deliveries_table, webhooks_table

__all__ = ["DEFAULT_WEBHOOK_HORIZON_S", "WebhookStore"]

DEFAULT_WEBHOOK_HORIZON_S: Final = 7 * 86400.0
"""How far back (event time) :meth:`WebhookStore.enqueue_deliveries` looks for events not in the outbox."""


# --- the store -------------------------------------------------------------------------------------------


class WebhookStore:
    """The webhooks and their outbox, on a :class:`Database` the caller opened with the webhook tables'
    migration (and the analytics tables', which the outbox joins); the caller closes it.

    Thread-safe, like the database: every call is one transaction. Errors are :class:`StoreError`.
    """

    def __init__(self, database: Database) -> None:
        self._db = database

    @property
    def database(self) -> Database:
        return self._db

    def create_webhook(
        self,
        *,
        name: str,
        url: str,
        format: WebhookFormat,
        rules: Collection[int] | None = None,
        severities: Collection[str] | None = None,
        clusters: Collection[str] | None = None,
        secret: str | None = None,
        enabled: bool = True,
        created_by: str,
        now: float,
    ) -> Webhook:
        """Add a subscription; it receives the events recorded from now on (those already in the store are
        entered in its outbox as ``skipped``, so that a new webhook is not flooded with history), of the
        alerts of ``clusters`` (cluster keys; None: every cluster)."""
        values = checked_fields(
            {
                "name": name,
                "url": url,
                "format": format,
                "rules": rules,
                "severities": severities,
                "clusters": clusters,
                "secret": secret,
                "enabled": enabled,
            }
        )
        if not created_by:
            raise StoreError("create_webhook: created_by must not be empty")
        now = finite(now, "create_webhook: now")
        with self._db.errors(f"create webhook {name!r}"), self._db.write() as conn:
            webhook_id = int(
                conn.execute(
                    sa.insert(webhooks_table)
                    .values(**values, created_at=now, created_by=created_by, updated_at=now)
                    .returning(webhooks_table.c.id)
                ).scalar_one()
            )
            if values["enabled"]:
                self._skip_recorded_events(
                    conn,
                    webhook_id,
                    now,
                    "recorded before the webhook was created",
                    _of_clusters(values["clusters"]),
                )
            return _webhook(conn.execute(_select_webhook(webhook_id)).one())

    def webhooks(self, *, enabled: bool | None = None) -> list[Webhook]:
        """Every webhook (or only the enabled or disabled ones), by id."""
        query = sa.select(webhooks_table).order_by(webhooks_table.c.id)
        if enabled is not None:
            query = query.where(webhooks_table.c.enabled == enabled)
        with self._db.errors("read webhooks"), self._db.read() as conn:
            return [_webhook(row) for row in conn.execute(query)]

    def webhook(self, webhook_id: int) -> Webhook | None:
        """One webhook, or None."""
        with self._db.errors(f"read webhook {webhook_id}"), self._db.read() as conn:
            row = conn.execute(_select_webhook(webhook_id)).first()
        return None if row is None else _webhook(row)

    def update_webhook(self, webhook_id: int, changes: Mapping[str, Any], now: float) -> Webhook | None:
        """Change some of ``name``, ``url``, ``format``, ``rules``, ``severities``, ``clusters``,
        ``secret``, ``enabled``; None when there is no such webhook.

        Rows already in the outbox keep their payload (rendered in the format of the time) but are sent to
        the current URL with the current secret. Re-enabling a webhook enters the events recorded while it
        was disabled as ``skipped``; its pending deliveries, held while it was disabled, go out again.
        Widening ``clusters`` enters the events already recorded of the clusters it adds as ``skipped``
        (the webhook gets their events from now on, not their history); narrowing it leaves the rows
        already in the outbox as they are (pending ones are still sent).
        """
        unknown = sorted(set(changes) - WEBHOOK_FIELDS)
        if unknown:
            raise StoreError(f"update_webhook: unknown fields {unknown}; use {sorted(WEBHOOK_FIELDS)}")
        values = checked_fields(changes)
        now = finite(now, "update_webhook: now")
        with self._db.errors(f"update webhook {webhook_id}"), self._db.write() as conn:
            before = conn.execute(_select_webhook(webhook_id)).first()
            if before is None:
                return None
            conn.execute(
                sa.update(webhooks_table)
                .where(webhooks_table.c.id == webhook_id)
                .values(**values, updated_at=now)
            )
            after = _webhook(conn.execute(_select_webhook(webhook_id)).one())
            if after.enabled and not before.enabled:
                self._skip_recorded_events(
                    conn,
                    webhook_id,
                    now,
                    "recorded while the webhook was disabled",
                    _of_clusters(after.clusters),
                )
            elif after.enabled and "clusters" in values:
                added = _added_clusters(_webhook(before).clusters, after.clusters)
                if added is not None:
                    self._skip_recorded_events(
                        conn, webhook_id, now, "recorded before the webhook watched its cluster", added
                    )
            return after

    def delete_webhook(self, webhook_id: int) -> bool:
        """Delete the webhook and its outbox rows; False when there is no such webhook."""
        with self._db.errors(f"delete webhook {webhook_id}"), self._db.write() as conn:
            conn.execute(
                sa.delete(webhook_deliveries_table).where(webhook_deliveries_table.c.webhook_id == webhook_id)
            )
            result = conn.execute(sa.delete(webhooks_table).where(webhooks_table.c.id == webhook_id))
            return result.rowcount == 1

    def enqueue_deliveries(
        self,
        now: float,
        render: WebhookRenderer,
        *,
        horizon_s: float = DEFAULT_WEBHOOK_HORIZON_S,
        limit: int = 1000,
    ) -> int:
        """Write an outbox row for every (enabled webhook, alert event) pair that has none yet, for events
        at or after ``now - horizon_s``, at most ``limit`` per call; returns how many rows were written.

        Idempotent, and needs no cursor: the candidates are an anti-join on the outbox's unique
        ``(webhook_id, fingerprint, sequence)``, so events committed late or out of order are found, and a
        concurrent call inserts nothing twice. An event is ``pending`` when it passes the webhook's filter,
        or when it follows (updated, resolved) an event of the same run of its alert that was sent to the
        webhook, so that a receiver that saw an alert open also sees it resolve; otherwise ``skipped``,
        with the reason (:mod:`app.webhooks.policy`); an event a silence active at its time matches is
        ``skipped`` with ``silenced_by`` (:meth:`release_silenced` pages its alert when the silence ends).
        The payload is rendered now (a failing ``render`` makes the row ``dead``).
        """
        check_page(limit, 0)
        now = finite(now, "enqueue_deliveries: now")
        with self._db.errors("read alert events for webhooks"), self._db.read() as conn:
            candidates = _Candidates.read(conn, now - horizon_s, limit)
        if not candidates.rows:
            return 0
        outbox = candidates.outbox_rows(now, render)
        with self._db.errors("enqueue webhook deliveries"), self._db.write() as conn:
            written = conn.execute(
                # no conflict target: a row is unique both by its event and by its idempotency key, and
                # PostgreSQL skips only the target's conflicts (a concurrent call raced the other unique)
                self._db.insert(webhook_deliveries_table)
                .on_conflict_do_nothing()
                .returning(webhook_deliveries_table.c.id),
                outbox,
            )
            return len(written.all())

    def release_silenced(
        self, now: float, render: WebhookRenderer, *, ended_since: float | None = None
    ) -> int:
        """Page the open alerts whose opening a silence held and that no silence matches any more: the held
        ``opened`` row of each one's current run goes ``pending`` (once: the update is conditional on the
        row still being held), with the alert as it is now (its current severity, summary and evidence),
        for each enabled webhook that watches its cluster and whose filter it passes. Returns how many rows
        were released.

        ``ended_since``: look only if a silence ended after it (and at or before ``now``), a cheap index
        read; None looks in every case (the notifier does on its full scans, and when it takes over)."""
        now = finite(now, "release_silenced: now")
        d, a, e, s = webhook_deliveries_table.c, alerts_table.c, alert_events_table.c, silences_table.c
        if ended_since is not None:
            ended = sa.select(s.id).where(s.ends_at > ended_since, s.ends_at <= now).limit(1)
            with self._db.errors("read ended silences"), self._db.read() as conn:
                if conn.execute(ended).first() is None:
                    return 0
        later = alert_events_table.alias("later_opening")
        query = (
            sa.select(
                d.id,
                d.webhook_id,
                d.fingerprint,
                d.sequence,
                e.at,
                a.cluster,
                a.rule,
                a.subject,
                a.severity,
                a.summary,
                a.evidence,
                a.action,
            )
            .select_from(
                webhook_deliveries_table.join(alerts_table, a.fingerprint == d.fingerprint).join(
                    alert_events_table, sa.and_(e.fingerprint == d.fingerprint, e.sequence == d.sequence)
                )
            )
            .where(
                a.state == "open",
                d.state == "skipped",
                d.kind == "opened",
                d.silenced_by.is_not(None),
                ~sa.exists().where(
                    later.c.fingerprint == d.fingerprint,
                    later.c.kind == "opened",
                    later.c.sequence > d.sequence,
                ),
            )
            .order_by(d.id)
        )
        with self._db.errors("read the deliveries silences held"), self._db.read() as conn:
            rows = conn.execute(query).all()
            if not rows:
                return 0
            silences = silences_ending_after(conn, now)
            hook_ids = sorted({int(r.webhook_id) for r in rows})
            hooks = {
                h.id: h
                for h in (
                    _webhook(r)
                    for r in conn.execute(sa.select(webhooks_table).where(webhooks_table.c.id.in_(hook_ids)))
                )
            }
        released: list[dict[str, Any]] = []
        for row in rows:
            severity = cast(Severity, row.severity)
            facts = AlertFacts(str(row.cluster), int(row.rule), str(row.subject), severity, row.evidence)
            hook = hooks.get(int(row.webhook_id))
            if hook is None or not hook.enabled or not hook.watches(facts.cluster):
                continue
            if silencers(silences, facts, now) or hook.mismatch(facts.rule, severity) is not None:
                continue  # still silenced; or it no longer passes the webhook's filter
            event = AlertEvent(
                str(row.fingerprint), int(row.sequence), "opened", float(row.at), severity,
                str(row.summary), dict(row.evidence),
            )  # fmt: skip
            notice = AlertNotice(
                event, facts.cluster, facts.rule, facts.subject, read_action_ref(row.action), float(row.at)
            )
            entry = outbox_entry(hook, notice, None, render)
            released.append(
                {"row_id": int(row.id), "new_state": entry.state, "body": entry.payload, "error": entry.error}
            )
        if not released:
            return 0
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == sa.bindparam("row_id"), d.state == "skipped")
            .values(
                state=sa.bindparam("new_state"),
                payload=sa.bindparam("body"),
                last_error=sa.bindparam("error"),
                attempts=0,
                next_attempt_at=now,
                created_at=now,
            )
        )
        with self._db.errors("release the deliveries silences held"), self._db.write() as conn:
            count = 0
            for values in released:  # one by one: each update's rowcount says whether it released the row
                count += int(conn.execute(statement, values).rowcount)
            return count

    def enqueue_in(
        self,
        conn: Connection,
        fingerprints: Collection[str],
        now: float,
        render: WebhookRenderer,
        *,
        horizon_s: float = DEFAULT_WEBHOOK_HORIZON_S,
    ) -> int:
        """:meth:`enqueue_deliveries` for the events of these alerts, inside the caller's transaction
        ``conn``: the incident lane writes its events' outbox rows in the transaction that writes the
        events, so that an event is never committed without them (the same rows, the same policy, the same
        rendering). Returns how many rows were written."""
        if not fingerprints:
            return 0
        now = finite(now, "enqueue_in: now")
        candidates = _Candidates.read(conn, now - horizon_s, None, sorted(set(fingerprints)))
        if not candidates.rows:
            return 0
        outbox = candidates.outbox_rows(now, render)
        conn.execute(sa.insert(webhook_deliveries_table), outbox)
        return len(outbox)

    def open_alerts_sent(
        self, formats: Collection[WebhookFormat], limit: int = 10_000
    ) -> list[tuple[int, AlertNotice, float]]:
        """The open alerts whose current run an enabled webhook of ``formats`` was sent (an event of the run
        has an outbox row for it that is not skipped) and that wait for nothing in its outbox (no pending
        row): what a receiver that needs firing alerts re-sent gets again (:mod:`app.webhooks.notifier`).
        Each as ``(webhook_id, notice, rendered_at)``: the notice of the alert's latest event, and when
        the newest of the run's rows for the webhook was rendered (written). At most ``limit``, by webhook
        and alert."""
        check_page(limit, 0)
        if not formats:
            return []
        w, e, a = webhooks_table.c, alert_events_table.c, alerts_table.c
        d = webhook_deliveries_table.c
        openings = alert_events_table.alias("openings")
        run_start = (  # the sequence of the alert's latest opened event: where its current run starts
            sa.select(sa.func.max(openings.c.sequence))
            .where(openings.c.fingerprint == a.fingerprint, openings.c.kind == "opened")
            .correlate(alerts_table)
            .scalar_subquery()
        )
        waiting = webhook_deliveries_table.alias("waiting")
        pending = (
            sa.exists()
            .where(waiting.c.webhook_id == d.webhook_id, waiting.c.fingerprint == d.fingerprint)
            .where(waiting.c.state == "pending")
        )
        sent = (
            sa.select(d.webhook_id, d.fingerprint, sa.func.max(d.created_at).label("rendered_at"))
            .join(webhooks_table, w.id == d.webhook_id)
            .join(alerts_table, a.fingerprint == d.fingerprint)
            .where(
                w.enabled,
                w.format.in_(sorted(formats)),
                a.state == "open",
                d.state != "skipped",
                d.sequence >= run_start,
                ~pending,
            )
            .group_by(d.webhook_id, d.fingerprint)
            .subquery("sent")
        )
        opened = alert_events_table.alias("opened")
        query = (
            sa.select(
                sent.c.webhook_id,
                sent.c.rendered_at,
                e.fingerprint,
                e.sequence,
                e.kind,
                e.at,
                e.severity,
                e.summary,
                e.evidence,
                a.cluster,
                a.rule,
                a.subject,
                a.action,
                opened.c.at.label("opened_at"),
            )
            .select_from(sent)
            .join(alerts_table, a.fingerprint == sent.c.fingerprint)
            .join(alert_events_table, sa.and_(e.fingerprint == a.fingerprint, e.sequence == a.event_sequence))
            .outerjoin(
                opened,
                sa.and_(
                    opened.c.fingerprint == a.fingerprint,
                    opened.c.sequence == run_start,
                ),
            )
            .order_by(sent.c.webhook_id, e.fingerprint)
            .limit(limit)
        )
        with self._db.errors("read the open alerts to re-send"), self._db.read() as conn:
            rows: list[sa.Row[Any]] = list(conn.execute(query))
        return [
            (
                int(row.webhook_id),
                AlertNotice(
                    event=read_alert_event(row),
                    cluster=str(row.cluster),
                    rule=int(row.rule),
                    subject=str(row.subject),
                    action=read_action_ref(row.action),
                    opened_at=opt_float(row.opened_at),
                ),
                float(row.rendered_at),
            )
            for row in rows
        ]

    def due_deliveries(self, now: float, limit: int = 100) -> list[WebhookDelivery]:
        """Pending deliveries of enabled webhooks due at ``now``, oldest due first, at most ``limit``: only
        the first pending event of each alert per webhook, so that an alert's events arrive in order."""
        check_page(limit, 0)
        d = webhook_deliveries_table.c
        query = (
            _first_pending_of_each_alert(d.next_attempt_at <= now)
            .order_by(d.next_attempt_at, d.id)
            .limit(limit)
        )
        with self._db.errors("read due webhook deliveries"), self._db.read() as conn:
            return [_delivery(row) for row in conn.execute(query)]

    def claim_delivery(self, delivery_id: int, now: float, lease_until: float) -> WebhookDelivery | None:
        """Take a due pending delivery for one attempt: count the attempt and hold the row until
        ``lease_until`` (no other sender picks it before; should this one crash, it is retried then).
        None when it is no longer pending and due (another sender claimed it, or it was delivered)."""
        d = webhook_deliveries_table.c
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == delivery_id, d.state == "pending", d.next_attempt_at <= now)
            .values(attempts=d.attempts + 1, last_attempt_at=now, next_attempt_at=lease_until)
            .returning(*webhook_deliveries_table.columns)
        )
        with self._db.errors(f"claim webhook delivery {delivery_id}"), self._db.write() as conn:
            row = conn.execute(statement).first()
        return None if row is None else _delivery(row)

    def backed_off_webhooks(self, now: float) -> dict[int, float | None]:
        """Enabled webhooks with a pending delivery waiting on a backoff (due after ``now``), each with the
        last time any of its pending deliveries was tried (None: never): what the notifier decides its
        probes on (:func:`app.webhooks.notifier.probe_at`)."""
        now = finite(now, "backed_off_webhooks: now")
        d = webhook_deliveries_table.c
        query = (
            sa.select(d.webhook_id, sa.func.max(d.last_attempt_at))
            .join(webhooks_table, webhooks_table.c.id == d.webhook_id)
            .where(webhooks_table.c.enabled, d.state == "pending")
            .group_by(d.webhook_id)
            .having(sa.func.max(d.next_attempt_at) > now)
            .order_by(d.webhook_id)
        )
        with self._db.errors("read backed-off webhooks"), self._db.read() as conn:
            return {int(webhook_id): opt_float(tried) for webhook_id, tried in conn.execute(query)}

    def backed_off_deliveries(self, webhook_id: int, now: float, limit: int = 100) -> list[WebhookDelivery]:
        """The webhook's pending deliveries waiting on a backoff (due after ``now``), only the first pending
        event of each alert (as :meth:`due_deliveries`), oldest event first, at most ``limit``: what a probe
        of the receiver sends (:meth:`claim_probe`)."""
        check_page(limit, 0)
        now = finite(now, "backed_off_deliveries: now")
        d = webhook_deliveries_table.c
        query = (
            _first_pending_of_each_alert(d.webhook_id == webhook_id, d.next_attempt_at > now)
            .order_by(d.id)
            .limit(limit)
        )
        with self._db.errors(f"read backed-off deliveries of webhook {webhook_id}"), self._db.read() as conn:
            return [_delivery(row) for row in conn.execute(query)]

    def claim_probe(self, seen: WebhookDelivery, now: float, lease_until: float) -> WebhookDelivery | None:
        """Take a delivery that waits on its backoff (``seen``, as :meth:`backed_off_deliveries` read it:
        due after ``now``) for a probe: an early try that is not counted as an attempt (``attempts`` stays),
        recorded as tried at ``now`` and held like a claim (until ``lease_until``, or its due time if
        later). None when it changed since it was read (claimed, tried, settled or requeued) or is due
        already (then it is an attempt: :meth:`claim_delivery`). A probe that fails puts the due time back
        (:meth:`mark_failed`)."""
        now = finite(now, "claim_probe: now")
        due_at = seen.next_attempt_at
        if due_at is None or due_at <= now:
            return None
        d = webhook_deliveries_table.c
        tried = (
            d.last_attempt_at.is_(None)
            if seen.last_attempt_at is None
            else d.last_attempt_at == seen.last_attempt_at
        )
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == seen.id, d.state == "pending", d.next_attempt_at == due_at, tried)
            .values(last_attempt_at=now, next_attempt_at=max(due_at, lease_until))
            .returning(*webhook_deliveries_table.columns)
        )
        with self._db.errors(f"claim webhook delivery {seen.id} for a probe"), self._db.write() as conn:
            row = conn.execute(statement).first()
        return None if row is None else _delivery(row)

    def mark_delivered(self, delivery_id: int, *, at: float, status: int | None) -> bool:
        """The receiver accepted the delivery; False when it was not pending."""
        return self._settle(
            delivery_id,
            {"state": "delivered", "delivered_at": at, "next_attempt_at": None, "last_status": status},
            error=None,
        )

    def mark_failed(
        self, delivery_id: int, *, next_attempt_at: float, error: str, status: int | None = None
    ) -> bool:
        """The attempt failed and the delivery is to be retried at ``next_attempt_at``."""
        return self._settle(
            delivery_id, {"next_attempt_at": next_attempt_at, "last_status": status}, error=error
        )

    def mark_dead(self, delivery_id: int, *, error: str, status: int | None = None) -> bool:
        """Give up on the delivery (a dead letter, listed until requeued or its webhook is deleted)."""
        return self._settle(
            delivery_id, {"state": "dead", "next_attempt_at": None, "last_status": status}, error=error
        )

    def requeue_delivery(self, delivery_id: int, now: float) -> bool:
        """Send a dead delivery again, from its first attempt, at ``now``; False when it is not dead."""
        d = webhook_deliveries_table.c
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == delivery_id, d.state == "dead", d.payload.is_not(None))
            .values(state="pending", attempts=0, next_attempt_at=now)
        )
        with self._db.errors(f"requeue webhook delivery {delivery_id}"), self._db.write() as conn:
            return conn.execute(statement).rowcount == 1

    def delivery(self, delivery_id: int) -> WebhookDelivery | None:
        """One outbox row, or None."""
        query = sa.select(webhook_deliveries_table).where(webhook_deliveries_table.c.id == delivery_id)
        with self._db.errors(f"read webhook delivery {delivery_id}"), self._db.read() as conn:
            row = conn.execute(query).first()
        return None if row is None else _delivery(row)

    def deliveries(
        self,
        webhook_id: int | None = None,
        *,
        state: str | Collection[str] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[WebhookDelivery]:
        """Outbox rows (of one webhook, in ``state``), newest first."""
        check_page(limit, offset)
        d = webhook_deliveries_table.c
        query = sa.select(webhook_deliveries_table)
        if webhook_id is not None:
            query = query.where(d.webhook_id == webhook_id)
        if state is not None:
            query = query.where(d.state.in_(one_or_many(state)))
        query = query.order_by(d.id.desc()).limit(limit).offset(offset)
        with self._db.errors("read webhook deliveries"), self._db.read() as conn:
            return [_delivery(row) for row in conn.execute(query)]

    def delivery_stats(self) -> dict[int, dict[DeliveryState, int]]:
        """Outbox rows per webhook and state (every state present, zero when none)."""
        d = webhook_deliveries_table.c
        query = sa.select(d.webhook_id, d.state, sa.func.count()).group_by(d.webhook_id, d.state)
        stats: dict[int, dict[DeliveryState, int]] = {}
        with self._db.errors("read webhook delivery counts"), self._db.read() as conn:
            for webhook_id in conn.execute(sa.select(webhooks_table.c.id)).scalars():
                stats[int(webhook_id)] = dict.fromkeys(DELIVERY_STATES, 0)
            for webhook_id, state, count in conn.execute(query):
                stats.setdefault(int(webhook_id), dict.fromkeys(DELIVERY_STATES, 0))[
                    cast(DeliveryState, state)
                ] = int(count)
        return stats

    def prune_deliveries(self, before: float) -> int:
        """Delete delivered and skipped rows of events before ``before`` (event time); returns how many.
        Keep ``before`` at or below ``now - horizon_s`` of :meth:`enqueue_deliveries`, else a pruned event
        still inside the horizon would be entered (and sent) again."""
        d = webhook_deliveries_table.c
        statement = sa.delete(webhook_deliveries_table).where(
            d.state.in_(("delivered", "skipped")), d.event_at < before
        )
        with self._db.errors("prune webhook deliveries"), self._db.write() as conn:
            return int(conn.execute(statement).rowcount)

    def _skip_recorded_events(
        self,
        conn: Connection,
        webhook_id: int,
        now: float,
        reason: str,
        clusters: sa.ColumnElement[bool] | None,
    ) -> None:
        """Enter every recorded event that has no outbox row for the webhook as ``skipped`` (only those of
        the alerts ``clusters`` selects, a condition on ``alerts.cluster``, when given)."""
        e, d = alert_events_table.c, webhook_deliveries_table.c
        recorded = sa.exists().where(
            d.webhook_id == webhook_id, d.fingerprint == e.fingerprint, d.sequence == e.sequence
        )
        events = sa.select(
            sa.literal(webhook_id, sa.Integer),
            e.fingerprint,
            e.sequence,
            e.fingerprint.concat(":").concat(sa.cast(e.sequence, sa.Text)),
            e.kind,
            e.at,
            sa.literal("skipped", sa.Text),
            sa.literal(0, sa.Integer),
            sa.literal(f"not sent: {reason}", sa.Text),
            sa.literal(now, sa.Double),
        ).where(~recorded)
        if clusters is not None:
            events = events.join_from(
                alert_events_table, alerts_table, alerts_table.c.fingerprint == e.fingerprint
            ).where(clusters)
        conn.execute(
            sa.insert(webhook_deliveries_table).from_select(
                [
                    "webhook_id",
                    "fingerprint",
                    "sequence",
                    "idempotency_key",
                    "kind",
                    "event_at",
                    "state",
                    "attempts",
                    "last_error",
                    "created_at",
                ],
                events,
            )
        )

    def _settle(self, delivery_id: int, values: dict[str, Any], error: str | None) -> bool:
        d = webhook_deliveries_table.c
        statement = (
            sa.update(webhook_deliveries_table)
            .where(d.id == delivery_id, d.state == "pending")
            .values(**values, last_error=None if error is None else clip(error))
        )
        with self._db.errors(f"update webhook delivery {delivery_id}"), self._db.write() as conn:
            return conn.execute(statement).rowcount == 1


# --- the outbox's candidates -----------------------------------------------------------------------------


@dataclass
class _Candidates:
    """The (enabled webhook, alert event) pairs without an outbox row, with what the policy needs about
    them: the webhooks, each alert's ``opened`` events (its runs), and the events already sent."""

    rows: list[sa.Row[Any]]
    hooks: dict[int, Webhook]
    openings: dict[str, list[tuple[int, float]]]
    """Per alert: ``(sequence, at)`` of its ``opened`` events, in sequence order."""
    sent: dict[tuple[int, str], set[int]]
    """Per (webhook, alert): the sequences of the events in its outbox that are not skipped."""
    silences: list[Silence] = field(default_factory=list)
    """The silences that may silence the candidates (those ending after the earliest)."""
    held: dict[tuple[int, str], set[int]] = field(default_factory=dict)
    """Per (webhook, alert): the sequences of its ``opened`` events a silence held (not released yet)."""

    @staticmethod
    def read(
        conn: Connection, since: float, limit: int | None, fingerprints: list[str] | None = None
    ) -> _Candidates:
        query = _candidates_query(conn.dialect.name, since, limit, fingerprints)
        rows: list[sa.Row[Any]] = list(conn.execute(query))
        if not rows:
            return _Candidates([], {}, {}, {})
        hook_ids = sorted({int(r.webhook_id) for r in rows})
        fingerprints = sorted({str(r.fingerprint) for r in rows})
        w, e, d = webhooks_table.c, alert_events_table.c, webhook_deliveries_table.c
        hooks = {
            h.id: h
            for h in (_webhook(r) for r in conn.execute(sa.select(webhooks_table).where(w.id.in_(hook_ids))))
        }
        openings: dict[str, list[tuple[int, float]]] = {}
        for opening in conn.execute(
            sa.select(e.fingerprint, e.sequence, e.at)
            .where(e.fingerprint.in_(fingerprints), e.kind == "opened")
            .order_by(e.fingerprint, e.sequence)
        ):
            openings.setdefault(str(opening.fingerprint), []).append(
                (int(opening.sequence), float(opening.at))
            )
        sent: dict[tuple[int, str], set[int]] = {}
        for delivered in conn.execute(
            sa.select(d.webhook_id, d.fingerprint, d.sequence).where(
                d.webhook_id.in_(hook_ids), d.fingerprint.in_(fingerprints), d.state != "skipped"
            )
        ):
            sent.setdefault((int(delivered.webhook_id), str(delivered.fingerprint)), set()).add(
                int(delivered.sequence)
            )
        held: dict[tuple[int, str], set[int]] = {}
        for skipped in conn.execute(
            sa.select(d.webhook_id, d.fingerprint, d.sequence).where(
                d.webhook_id.in_(hook_ids),
                d.fingerprint.in_(fingerprints),
                d.state == "skipped",
                d.kind == "opened",
                d.silenced_by.is_not(None),
            )
        ):
            held.setdefault((int(skipped.webhook_id), str(skipped.fingerprint)), set()).add(
                int(skipped.sequence)
            )
        silences = silences_ending_after(conn, min(float(r.at) for r in rows))
        return _Candidates(rows, hooks, openings, sent, silences, held)

    def silenced_by(self, candidate: sa.Row[Any], event: AlertEvent) -> list[int]:
        """The silences active at the event's time that match it."""
        if not self.silences:
            return []
        facts = AlertFacts(
            str(candidate.cluster),
            int(candidate.rule),
            str(candidate.subject),
            event.severity,
            event.evidence,
        )
        return silencers(self.silences, facts, event.at)

    def outbox_rows(self, now: float, render: WebhookRenderer) -> list[dict[str, Any]]:
        """The outbox rows of the candidates, in order (an event sent here counts as sent for the next)."""
        outbox: list[dict[str, Any]] = []
        for candidate in self.rows:
            hook = self.hooks[int(candidate.webhook_id)]
            if not hook.watches(str(candidate.cluster)):
                continue  # its clusters changed since the candidates were read
            event = read_alert_event(candidate)
            run_start, opened_at = run_of(self.openings.get(event.fingerprint, []), event.sequence)
            notice = AlertNotice(
                event=event,
                cluster=str(candidate.cluster),
                rule=int(candidate.rule),
                subject=str(candidate.subject),
                action=read_action_ref(candidate.action),
                opened_at=opened_at,
            )
            sent = self.sent.setdefault((hook.id, event.fingerprint), set())
            reason = skip_reason(hook, notice, run_start, sent)
            silenced: list[int] | None = None
            if reason is None:
                held = self.held.setdefault((hook.id, event.fingerprint), set())
                silenced = self.silenced_by(candidate, event) or None
                reason = silence_reason(notice, silenced or (), run_start, held)
                if silenced is not None and event.kind == "opened":
                    held.add(event.sequence)
            if reason is None:
                sent.add(event.sequence)
            entry = outbox_entry(hook, notice, reason, render)
            outbox.append(
                {
                    "webhook_id": hook.id,
                    "fingerprint": event.fingerprint,
                    "sequence": event.sequence,
                    "idempotency_key": notice.idempotency_key,
                    "kind": event.kind,
                    "event_at": event.at,
                    "payload": entry.payload,
                    "state": entry.state,
                    "attempts": 0,
                    "next_attempt_at": now if entry.state == "pending" else None,
                    "last_attempt_at": None,
                    "last_status": None,
                    "last_error": entry.error,
                    "created_at": now,
                    "delivered_at": None,
                    "silenced_by": silenced,
                }
            )
        return outbox


def _candidates_query(
    dialect: str, since: float, limit: int | None, fingerprints: list[str] | None = None
) -> sa.Select[Any]:
    """Events at or after ``since`` (of the alerts ``fingerprints``, when given) that have no outbox row
    for an enabled webhook that watches their alert's cluster, with their alerts."""
    w, e, a = webhooks_table.c, alert_events_table.c, alerts_table.c
    d = webhook_deliveries_table.c
    recorded = sa.exists().where(
        d.webhook_id == w.id, d.fingerprint == e.fingerprint, d.sequence == e.sequence
    )
    query = (
        sa.select(
            w.id.label("webhook_id"),
            e.fingerprint,
            e.sequence,
            e.kind,
            e.at,
            e.severity,
            e.summary,
            e.evidence,
            a.cluster,
            a.rule,
            a.subject,
            a.action,
        )
        .select_from(
            webhooks_table.join(alert_events_table, sa.true()).join(
                alerts_table, a.fingerprint == e.fingerprint
            )
        )
        .where(w.enabled, e.at >= since, ~recorded, _watched(dialect))
        .order_by(w.id, e.fingerprint, e.sequence)
    )
    if fingerprints is not None:
        query = query.where(e.fingerprint.in_(fingerprints))
    return query if limit is None else query.limit(limit)


def _watched(dialect: str) -> sa.ColumnElement[bool]:
    """The webhook (``webhooks``) watches the alert's cluster (``alerts.cluster``): its ``clusters`` is NULL
    (every cluster) or holds it. The JSON array is read in SQL (SQLite's ``json_each``, PostgreSQL's
    ``json_array_elements_text``), so that the events of a cluster a webhook does not watch are never
    candidates, whatever ``limit``."""
    w, a = webhooks_table.c, alerts_table.c
    elements = (
        sa.func.json_array_elements_text(w.clusters)
        if dialect == "postgresql"
        else sa.func.json_each(w.clusters)
    )
    member = elements.table_valued("value").alias("watched_cluster")
    return sa.or_(w.clusters.is_(None), sa.exists().select_from(member).where(member.c.value == a.cluster))


def _of_clusters(clusters: Collection[str] | None) -> sa.ColumnElement[bool] | None:
    """The alerts of ``clusters`` (None: of every cluster, no condition)."""
    return None if clusters is None else alerts_table.c.cluster.in_(sorted(clusters))


def _added_clusters(
    before: Collection[str] | None, after: Collection[str] | None
) -> sa.ColumnElement[bool] | None:
    """The alerts of the clusters ``after`` watches and ``before`` did not (None: there are none)."""
    if before is None:
        return None
    if after is None:
        return alerts_table.c.cluster.not_in(sorted(before))
    added = sorted(set(after) - set(before))
    return alerts_table.c.cluster.in_(added) if added else None


# --- reading rows back ------------------------------------------------------------------------------------


def _select_webhook(webhook_id: int) -> sa.Select[Any]:
    return sa.select(webhooks_table).where(webhooks_table.c.id == webhook_id)


def _webhook(row: sa.Row[Any]) -> Webhook:
    return Webhook(
        id=int(row.id),
        name=str(row.name),
        url=str(row.url),
        format=cast(WebhookFormat, row.format),
        rules=None if row.rules is None else tuple(int(r) for r in row.rules),
        severities=None if row.severities is None else tuple(cast(Severity, s) for s in row.severities),
        clusters=None if row.clusters is None else tuple(str(c) for c in row.clusters),
        secret=None if row.secret is None else str(row.secret),
        enabled=bool(row.enabled),
        created_at=float(row.created_at),
        created_by=str(row.created_by),
        updated_at=float(row.updated_at),
    )


def _delivery(row: sa.Row[Any]) -> WebhookDelivery:
    return WebhookDelivery(
        id=int(row.id),
        webhook_id=int(row.webhook_id),
        fingerprint=str(row.fingerprint),
        sequence=int(row.sequence),
        idempotency_key=str(row.idempotency_key),
        kind=cast(EventKind, row.kind),
        event_at=float(row.event_at),
        payload=None if row.payload is None else str(row.payload),
        state=cast(DeliveryState, row.state),
        attempts=int(row.attempts),
        next_attempt_at=opt_float(row.next_attempt_at),
        last_attempt_at=opt_float(row.last_attempt_at),
        last_status=opt_int(row.last_status),
        last_error=None if row.last_error is None else str(row.last_error),
        created_at=float(row.created_at),
        delivered_at=opt_float(row.delivered_at),
    )


def _first_pending_of_each_alert(*conditions: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """Pending deliveries of enabled webhooks that also meet ``conditions``, only the first pending event of
    each alert per webhook (an alert's events are sent in order: a later one waits for the earlier)."""
    d = webhook_deliveries_table.c
    earlier = webhook_deliveries_table.alias("earlier")
    return (
        sa.select(webhook_deliveries_table)
        .join(webhooks_table, webhooks_table.c.id == d.webhook_id)
        .where(
            webhooks_table.c.enabled,
            d.state == "pending",
            *conditions,
            ~sa.exists().where(
                earlier.c.webhook_id == d.webhook_id,
                earlier.c.fingerprint == d.fingerprint,
                earlier.c.state == "pending",
                earlier.c.sequence < d.sequence,
            ),
        )
    )
