"""Shared fixtures: the real brokers tests run against, and a guard against leaked processes.

Brokers, cheapest first:

* ``tansu`` — one real Tansu broker for the whole session (it starts in ~30 ms, but sharing
  it keeps the per-test cost at zero). Tests isolate themselves with a fresh topic
  (``new_topic``). A test that needs to stop, restart, or advertise another port takes a
  private broker from ``tansu_factory`` instead; stopping the shared one fails the test.
* ``mock_cluster`` — a fresh 3-broker librdkafka mock cluster per test, for fault injection.
* ``kafka_container`` — Apache Kafka via testcontainers, only when a Docker engine answers;
  skipped (in well under 2 s) otherwise.

Helpers live in ``tests/support`` and are imported as ``support.*`` (pytest puts ``tests/`` on
sys.path because it holds this conftest and no ``__init__.py``).

Every fixture ends what it started by PID, with bounded waits; ``_no_leaked_processes``
(autouse) fails any test that leaves a child process running or unreaped.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Protocol

import hypothesis
import pytest

from aiokprod.devbroker import TansuBroker
from support.docker_probe import docker_unavailable_reason
from support.examples import examples
from support.mock_cluster import MockCluster
from support.processes import child_processes, pid_alive

# Apache Kafka (KRaft, from Maven Central jars): kafka, kafka3, kafka_secure, kafka_factory.
pytest_plugins = ["support.kafka_fixtures", "support.schema_registry_fixtures",
                  "support.spark_fixtures"]

# hypothesis is imported here, at collection, on purpose: when its pytest plugin first imports it
# at session end (a run with no hypothesis test), CPython 3.11.7's AST recursion tracking can fail
# with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905, fixed 3.11.8).
#
# No per-example deadline anywhere: the suite runs on loaded 2-core CI machines, where one
# pause of a few hundred ms fails a property test with DeadlineExceeded (or "unreliable
# timings" when the replay is fast) without saying anything about the code. Speed is measured
# in benchmarks/, not here. A failure prints the blob that replays it (@reproduce_failure), so a
# CI failure can be run again here.
# The count every test without its own runs (hypothesis defaults to 100), scaled like the
# others (support/examples.py).
hypothesis.settings.register_profile("aiokprod", deadline=None, print_blob=True,
                                     max_examples=examples(100))
hypothesis.settings.load_profile("aiokprod")

_TOPIC_UNSAFE = re.compile(r"[^a-zA-Z0-9._-]+")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each phase's report on the item so fixtures can react to a failed test."""
    report = yield
    setattr(item, f"_report_{report.when}", report)
    return report


# The files that take longest (each 1-6 minutes of a run, most of it waiting for JVMs and
# Spark), slowest first. `make test` hands whole files to four pytest-xdist workers in
# collection order (`--no-loadscope-reorder`: xdist's default sorts files by their number of
# tests instead), so these go first and the many short files fill in beside them; collected
# last, one of them would run alone at the end. Only the order changes, never what runs.
_LONGEST_FIRST = (
    "test_spark_exactly_once.py",
    "test_examples.py",
    "test_spark_cluster.py",
    "test_spark_cluster_no_daemon.py",
    "test_fastapi_app.py",
    "test_spark_sink.py",
    "test_kafka_versions.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


# Files that go to one pytest-xdist worker as one unit (--dist loadfile), one after the other in
# collection order, because they share a session fixture that costs far more to start than
# the files take to run: the local[2,2] Spark session (~30 s of CPU and ~25 s to start its JVM
# and warm it up; each worker that runs one of these files starts its own) and the secure Kafka
# node (`kafka_secure`). Only where the files run changes, never what runs.
_SAME_WORKER = {
    "test_spark_exactly_once.py": "spark-local",
    "test_spark_sink.py": "spark-local",
    "test_kafka_security_listeners.py": "spark-local",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadfile with the files of ``_SAME_WORKER`` grouped; other modes as xdist has
    them (None: xdist's own choice)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class GroupedLoadFile(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            group = _SAME_WORKER.get(path.rsplit("/", 1)[-1])
            return f"group:{group}" if group else str(super()._split_scope(nodeid))

    return GroupedLoadFile(config, log)


def _test_failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "_report_call", None)
    return report is not None and report.failed


# -- processes -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    """Fail the test if a child process it started is still alive, or a zombie, at the end.

    Autouse function fixtures are set up before (and torn down after) the test's other
    function-scoped fixtures, so brokers those fixtures stop are gone by the time we look;
    session brokers started earlier are in the "before" snapshot and are not counted.
    """
    before = set(child_processes())
    yield
    leaked = [c for pid, c in child_processes().items() if pid not in before]
    if leaked:
        pytest.fail(f"test left child processes behind: {leaked}", pytrace=False)


# -- Tansu -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _tansu_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    broker = TansuBroker(log_dir=tmp_path_factory.mktemp("tansu-session"))
    broker.start()
    try:
        yield broker
    finally:
        pid = broker.pid
        broker.stop()
        if pid is not None and pid_alive(pid):
            raise RuntimeError(f"session Tansu broker pid {pid} survived stop()")


@pytest.fixture
def tansu(_tansu_session: TansuBroker, request: pytest.FixtureRequest) -> Iterator[TansuBroker]:
    """The shared Tansu broker; do not stop it (use ``tansu_factory`` for a private one)."""
    if not _tansu_session.running:
        pytest.fail(f"shared Tansu broker is down: {_tansu_session!r}", pytrace=False)
    yield _tansu_session
    if _test_failed(request):
        print(f"--- {_tansu_session!r} log tail ---\n{_tansu_session.log_tail()}")
    if not _tansu_session.running:
        pytest.fail("the test stopped the shared Tansu broker; use tansu_factory", pytrace=False)


class TansuFactory(Protocol):
    def __call__(self, **kwargs: Any) -> TansuBroker: ...


@pytest.fixture
def tansu_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TansuFactory]:
    """Start private Tansu brokers (kwargs go to ``TansuBroker``); all stopped at teardown."""
    started: list[TansuBroker] = []

    def start(**kwargs: Any) -> TansuBroker:
        kwargs.setdefault("log_dir", tmp_path / f"tansu-{len(started)}")
        broker = TansuBroker(**kwargs)
        started.append(broker)
        return broker.start()

    yield start
    failed = _test_failed(request)
    for broker in started:
        if failed:
            print(f"--- {broker!r} log tail ---\n{broker.log_tail()}")
        broker.stop()


@pytest.fixture
def new_topic(tansu: TansuBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Create a uniquely named topic on the shared Tansu broker: ``new_topic(partitions=3)``."""

    def create(partitions: int = 1, **kwargs: Any) -> str:
        name = unique_topic_name(request)
        tansu.create_topic(name, partitions, **kwargs)
        return name

    return create


def unique_topic_name(request: pytest.FixtureRequest) -> str:
    """A legal topic name that says which test made it (handy when reading broker logs)."""
    base = _TOPIC_UNSAFE.sub("-", request.node.name)[:80].strip("-.") or "t"
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name, not created anywhere (for the mock cluster or auto-create tests)."""
    return unique_topic_name(request)


# -- librdkafka mock cluster -----------------------------------------------------------------


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    """A fresh 3-broker mock cluster (broker ids 1, 2, 3), destroyed after the test."""
    cluster = MockCluster(3)
    try:
        yield cluster
    finally:
        cluster.close()


# -- Apache Kafka in Docker ------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_container() -> Iterator[Any]:
    """A real Apache Kafka (KRaft) container; skipped fast when no Docker engine answers.

    Yields the testcontainers ``KafkaContainer``; ``.get_bootstrap_server()`` gives the
    address.
    """
    reason = docker_unavailable_reason(timeout=1.0)
    if reason is not None:
        pytest.skip(reason)
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # older testcontainers layouts
        from testcontainers.kafka import KafkaContainer

    container = KafkaContainer().with_kraft()
    container.start()
    try:
        yield container
    finally:
        container.stop()
