"""Kafka's own algorithms as pure functions: replica placement and partition leader election."""
