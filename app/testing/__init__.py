"""Test support shipped with the app: the real-ZooKeeper pytest plugin."""
