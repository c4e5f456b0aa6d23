"""Root plugins: a real ZooKeeper (one server per run, a chroot per test), reference-cluster fixtures, and
a check that the run leaves no Java or Python process behind."""

pytest_plugins = [
    "app.testing.zookeeper",
    "app.testing.reference_cluster",
    "app.testing.orphans",
    "app.testing.postgres",
    "app.testing.spark",
    "app.testing.service",
    "app.testing.prometheus",
]
