"""Root fixtures: the real ZooKeeper harness (one server per run, a chroot per test)."""

pytest_plugins = ["app.testing.zookeeper"]
