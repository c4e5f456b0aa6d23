"""Webhooks: subscriptions to alert events, their payload formats and signatures, and the notifier that
delivers them through the store's outbox. The REST API over them is the service's
(``app/service/routes/webhooks.py``). See ``docs/webhooks.md``."""
