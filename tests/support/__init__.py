"""Test support: pytest plugins (a real ZooKeeper, the reference cluster, PostgreSQL, Spark, the service,
Prometheus, a check for leftover processes) and builders of snapshots, health states and store rows.
Registered in ``tests/conftest.py``; never installed with the package."""
