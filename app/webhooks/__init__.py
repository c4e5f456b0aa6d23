"""Webhooks: subscriptions to alert events (``/api/v1/webhooks``), their payload formats and signatures, and
the notifier that delivers them through the store's outbox. See ``docs/webhooks.md``."""
