"""Root plugins: a real ZooKeeper (one server per run, a chroot per test), reference-cluster fixtures, and
a check that the run leaves no Java or Python process behind.

The plugins live in ``tests/support`` (never installed with the package). ``pythonpath = ["."]`` makes them
importable here; child processes (the CLI under test, Spark's Python workers, which import the fake Kafka
client by name) get the same through ``PYTHONPATH``.
"""

import os
from pathlib import Path

from hypothesis import settings

_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_ROOT, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _ROOT)]
)

# ``make test-fast`` runs the property tests with fewer examples (``--hypothesis-profile=fast``);
# ``make test`` runs them in full. Under CI (``CI=true``) the examples are derandomized (the same on every
# run, no example database): a red CI is a change's doing, not a new random draw; local runs keep drawing
# new examples, which is how the properties find what they find.
settings.register_profile("fast", max_examples=20)
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI", "").lower() in ("true", "1"):
    settings.load_profile("ci")

pytest_plugins = [
    "tests.support.zookeeper",
    "tests.support.reference_cluster",
    "tests.support.orphans",
    "tests.support.postgres",
    "tests.support.spark",
    "tests.support.spark_cluster",
    "tests.support.service",
    "tests.support.serve_process",
    "tests.support.prometheus",
    "tests.support.alertmanager",
    "tests.support.tansu",
]
