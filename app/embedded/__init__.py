"""The embedded reference parts, for the demo, the tests and anyone trying kafka-health without a Kafka:
the simulated ZK-mode cluster (``reference_cluster``), a real ZooKeeper server from the pyspark wheel
(``zookeeper``) and a reference webhook receiver (``webhook_receiver``).

The product never imports this package; only the composition roots do (the command line, the demo and the
settings tree), and the service gets the reference cluster's routes only when one of them hands them in.
"""
