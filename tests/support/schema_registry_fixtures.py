"""The Schema Registry fixture: one Apicurio Registry JVM per session (schema_registry_server).

Without Java or Maven the tests using it skip with one line saying why, or fail under
``CI=true``, as the Kafka fixtures do.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.kafka_fixtures import unavailable
from support.registry_jar import ensure_registry
from support.schema_registry_server import RegistryServer


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    runner = ensure_registry()
    if isinstance(runner, str):
        unavailable(runner)
        raise AssertionError("unreachable")
    server = RegistryServer(runner, tmp_path_factory.mktemp("schema-registry"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
