"""Planned maintenance of a cluster: the rolling-restart conductor (``rolling_restart``), its journal
(``journal``) and the waiting loop it shares with ``kafka-health safe-to-stop --wait`` (``watch``)."""
