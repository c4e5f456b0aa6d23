"""Consumer lag over Kafka's protocol (issue 25): the groups, their committed offsets and the partitions'
log offsets (:mod:`.client`, behind :class:`.client.GroupOffsetsReader`), a round of them
(:mod:`.collector`), lag in records and in seconds (:mod:`.lag`) and one verdict per group
(:mod:`.verdicts`). See docs/collectors.md, "Consumer lag"."""
