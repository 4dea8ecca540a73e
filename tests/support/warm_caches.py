"""`make test`'s first lane beside uv: the Kafka broker's jars and the Schema Registry's build.

From empty caches both come from Maven Central inside the run: the registry's Quarkus build
alone took 40 s of a quiet machine and 61 s of a test's set-up in a cold `make test`, on a
worker that then held up its share of the suite. Run from ``tests/`` as
``python -m support.warm_caches`` by the Python that makes ``.venv`` (standard library only,
so it needs no venv) while uv fills ``.venv`` and the suite starts, it has the registry built
before a test asks for it (its downloads share the network with uv's: ``.venv`` took 40 s
instead of 28 beside it). It only fills the caches the fixtures fill themselves (``kafka_jars``,
``registry_jar``): under their locks, so a test that gets there first waits for it instead of
resolving twice, and a cache that is complete costs nothing.

A reason it cannot (no Java 17, no Maven, Central unreachable) is printed, not raised: the
fixtures meet the same reason and decide, as they always do, whether it is a skip or (with
``CI=true``) a failure. Kafka's older releases, each a few seconds from cold, stay with the
tests that name them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from support.kafka_jars import KAFKA_VERSION, ensure_kafka_jars
from support.registry_jar import REGISTRY_VERSION, ensure_registry


def _timed(what: str, ensure: Callable[[], object]) -> str:
    """``what`` with how long making it ready took, or the reason it cannot be."""
    started = time.monotonic()
    result = ensure()
    took = time.monotonic() - started
    return f"{what}: {result if isinstance(result, str) else 'ready'} ({took:.1f}s)"


def main() -> None:
    kafka = _timed(f"Kafka {KAFKA_VERSION}'s jars", ensure_kafka_jars)
    registry = _timed(f"Apicurio Registry {REGISTRY_VERSION}", ensure_registry)
    print(f"== test caches: {kafka}; {registry}", flush=True)


if __name__ == "__main__":
    main()
