"""Retention: how long each growing table keeps its rows, the hourly rollups of the load windows, and the
background pruner ``kafka-health serve`` runs (its leader only). See ``docs/store.md``."""
