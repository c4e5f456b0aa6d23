"""Kafka's own vocabulary, the bottom layer every other package imports: the shared types
(``model``), the ZooKeeper layout and znode codecs (``zkdata``), Kafka's algorithms as pure functions
(``placement``, ``election``) and the ZooKeeper writer of the admin znodes (``admin``)."""
