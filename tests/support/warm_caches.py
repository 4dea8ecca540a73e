"""`make test`'s third lane: the slowest one-time downloads and builds, started beside the test
runs instead of inside one of their workers.

On a machine with cold caches the main run's workers used to stop for them where a test first
needed one: the Schema Registry's Quarkus build (about two minutes, inside the examples file)
and the older Kafka releases' jars (about a minute each, inside the longest files). This
process does the same work with the same functions, under the same ``flock`` and ``.complete``
markers, from the moment the venv exists. A test that needs one of them before this lane has
finished waits on the lock and then finds it complete, as a second test run would; one this
lane did not warm (a release added to a test later) is resolved by its fixture as before, so
nothing here decides what a test gets, only when the work is done. Every failure is printed
and left for the test that needs the cache to report, with its own bound.

Run from ``tests/`` as ``python -m support.warm_caches``.
"""

from __future__ import annotations

import sys
import time

from support.kafka_jars import KAFKA_VERSION, ensure_kafka_jars
from support.schema_registry_server import ensure_registry

# In the order the main run's longest files reach them: a Kafka 3.9.1 test about a minute into
# the first file, the registry's example after the examples file's five others (about four
# minutes). The default release comes last: its own fixture resolves it within seconds of the
# run's start anyway.
OLDER_RELEASES = ("3.9.1", "4.1.1")


def main() -> int:
    jobs = [(f"Apache Kafka {v}", lambda v=v: ensure_kafka_jars(version=v))
            for v in OLDER_RELEASES]
    jobs += [("Apicurio Registry", ensure_registry),
             (f"Apache Kafka {KAFKA_VERSION}", ensure_kafka_jars)]
    for name, job in jobs:
        started = time.monotonic()
        result = job()
        took = time.monotonic() - started
        verdict = f"not ready ({result})" if isinstance(result, str) else "ready"
        print(f"{name}: {verdict} after {took:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
