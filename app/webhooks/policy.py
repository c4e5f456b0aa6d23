"""Which alert event goes to which webhook, and in what state it enters the outbox (pure functions: the
store reads the candidates and writes the rows, :meth:`app.webhooks.store.WebhookStore.enqueue_deliveries`).

An event is sent (``pending``) when it passes the webhook's filter (rules, severities), or when it follows
(``updated``, ``resolved``) an event of the same run of its alert that was sent to the webhook, so that a
receiver that saw an alert open also sees it resolve; otherwise it is ``skipped``, with the reason. An
event a silence matches is ``skipped`` too (its row records the silences, ``silenced_by``), and so are the
later events of a run whose opening a silence held (:func:`silence_reason`). The
payload is rendered when the row is written; a renderer that fails makes the row ``dead``, not the outbox
stuck.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from app.webhooks.model import AlertNotice, DeliveryState, Webhook, WebhookRenderer

__all__ = [
    "MAX_ERROR",
    "OutboxEntry",
    "clip",
    "outbox_entry",
    "run_of",
    "silence_reason",
    "skip_reason",
]

MAX_ERROR: Final = 500
"""Characters of an error message kept in an outbox row."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """The state an event enters a webhook's outbox in, with its payload or the reason it is not sent."""

    state: DeliveryState
    payload: str | None
    error: str | None


def run_of(openings: Sequence[tuple[int, float]], sequence: int) -> tuple[int, float | None]:
    """The run of its alert that event ``sequence`` belongs to: the sequence and time of the alert's latest
    ``opened`` event at or before it (``openings``: ``(sequence, at)``, in sequence order), else
    ``(0, None)``."""
    run_start, opened_at = 0, None
    for opening, at in openings:
        if opening <= sequence:
            run_start, opened_at = opening, at
    return run_start, opened_at


def skip_reason(webhook: Webhook, notice: AlertNotice, run_start: int, sent: Collection[int]) -> str | None:
    """Why ``notice`` is not sent to ``webhook``, or None when it is: it passes the webhook's filter, or it
    follows an event of the same run (from ``run_start`` on) that was sent (``sent``: the sequences of the
    alert's events sent to the webhook)."""
    event = notice.event
    reason = webhook.mismatch(notice.rule, event.severity)
    if reason is not None and event.kind != "opened" and any(run_start <= s < event.sequence for s in sent):
        return None  # a follow-up of an event the receiver got
    return reason


def silence_reason(
    notice: AlertNotice, silenced_by: Sequence[int], run_start: int, held: Collection[int]
) -> str | None:
    """Why an event the webhook would be sent is not, because of silences, or None: it is silenced
    (``silenced_by``: the silences active at its time that match it), or it follows the ``opened`` event of
    its run that a silence held (``held``: the sequences of the alert's ``opened`` events held for this
    webhook and not released), which pages, with the alert as it is then, when the silences end."""
    if silenced_by:
        ids = ", ".join(str(i) for i in silenced_by)
        return f"silenced by silence {ids}; if the alert is still open when the silence ends, it pages then"
    if notice.event.kind != "opened" and run_start in held:
        return "its alert's opening was silenced: the alert pages (opened) when the silence ends"
    return None


def outbox_entry(
    webhook: Webhook, notice: AlertNotice, reason: str | None, render: WebhookRenderer
) -> OutboxEntry:
    """``skipped`` with the reason, else ``pending`` with its payload (``dead`` if it cannot be rendered)."""
    if reason is not None:
        return OutboxEntry("skipped", None, clip(f"not sent: {reason}"))
    try:
        payload = render(webhook, notice)
    except Exception as exc:  # a bug in a renderer must not stop the outbox
        return OutboxEntry("dead", None, clip(f"cannot render the payload: {type(exc).__name__}: {exc}"))
    return OutboxEntry("pending", payload, None)


def clip(text: str) -> str:
    """``text``, cut to :data:`MAX_ERROR` characters."""
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 3] + "..."
