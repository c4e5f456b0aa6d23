"""Silences: mute the webhook deliveries of matching alerts for a while (docs/alert-rules.md, Silences)."""
