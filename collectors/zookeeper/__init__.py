"""The ZooKeeper collector: sessions and reads (``wire``), replies to an immutable snapshot
(``cluster_model``, no I/O) and the collector that scans, watches and publishes snapshots (``collector``)."""
