"""The Spark edges of the analytics job: the Structured Streaming query (``job``) and the Kafka source
(``kafka_source``). Everything they compute with is pure and lives one level up."""
