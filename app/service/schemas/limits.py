"""The bounds of every list and string a request body holds (docs/api.md, "Limits").

Each is far above what one request on a real cluster names, and low enough that no request makes the
service validate, plan, answer and audit an unbounded amount: a list over its cap is a 422 naming the field
(``too_long``), found before its items are validated. The body limit (``service.max_body_bytes``,
:mod:`app.service.limits`) bounds the bytes; these bound the work a body within it may ask for, also when
that limit is raised.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

MAX_PARTITIONS = 200_000
"""Partitions named in one request (a reassignment, an election): every partition of a cluster at the
scale ZooKeeper-mode Kafka is run at (``bench/service.py`` benches 1,000 brokers and 200,000 partitions)."""
MAX_TOPICS = MAX_PARTITIONS
"""Topics named in one request: a topic has at least one partition."""
MAX_BROKERS = 10_000
"""Broker ids in one list (the brokers a plan may use, the throttles to clear): ten times the largest
cluster the project benches."""
MAX_REPLICAS = 100
"""Replicas of one partition in a reassignment: far above any replication factor in use (3 is usual)."""
MAX_TOPIC_NAME = 249
"""Kafka's own limit on a topic's name."""
MAX_BROKER_ENTITY = 32
"""A broker entity named as text: ``<default>``."""

TopicName = Annotated[str, StringConstraints(max_length=MAX_TOPIC_NAME)]
"""A topic's name in a body (whether the topic exists is the planner's 422)."""
BrokerEntity = Annotated[str, StringConstraints(max_length=MAX_BROKER_ENTITY)]
