"""Pytest fixtures for Apache Kafka as a test broker (a plugin registered by tests/conftest.py).

* ``kafka`` — one KRaft node (broker+controller) for the whole session; isolate with a fresh
  topic (``kafka_topic``). Do not stop it.
* ``kafka3`` — three nodes, replication factor 3, ``min.insync.replicas=2``, for the session;
  tests must leave it as they found it (no kill/stop: a node started again inside a test is a
  new child process, which the leak guard counts against that test).
* ``kafka_secure`` — one node with SSL, SASL_PLAINTEXT and SASL_SSL listeners besides
  PLAINTEXT (PLAIN, SCRAM-SHA-256/512 and unsecured OAUTHBEARER), for the session.
* ``kafka_release`` — one node of another Apache Kafka release, named by an indirect
  parameter (``@pytest.mark.parametrize("kafka_release", ["3.9.1", "4.4.0"], indirect=True)``),
  for behaviour that changed between releases (transaction version 1 on 3.9, 2 on 4.x); the
  default release is the shared ``kafka`` node; another release is started in the secure shape
  (``kafka_secure``'s listeners besides PLAINTEXT), so a test of that release's SASL/TLS
  handshake needs no node of its own. Shared like ``kafka``: do not stop it.
* ``kafka_factory`` — private clusters for a test that kills, stops or restarts brokers, or
  needs an advertised port (a proxy in front); all stopped when the test ends.
* ``kafka_behind_proxy(start, seed=...)`` — not a fixture: one node that advertises a fault
  proxy's port, so every client connection crosses the proxy; ``start`` is ``kafka_factory``
  or ``start_kafka`` with a module's jars and directory (for a module-scoped node).

Without Java or Maven (or when Maven Central cannot be reached) every Kafka test skips with
one line saying why — except under ``CI=true``, where that is a failure, so a CI run cannot
pass with the Kafka tests silently skipped. After a failed test the node logs are kept and
their directory printed.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from support.faults import FaultPlan
from support.kafka_cluster import (
    KAFKA_VERSION,
    KafkaCluster,
    KafkaJars,
    SecurityOptions,
    ensure_kafka_jars,
    with_class_archive,
)
from support.proxy import ProxyThread

_TOPIC_UNSAFE = re.compile(r"[^a-zA-Z0-9._-]+")


def _failed(request: pytest.FixtureRequest) -> bool:
    """Whether the requesting test's call phase failed (conftest records the reports)."""
    report = getattr(request.node, "_report_call", None)
    return report is not None and bool(report.failed)


def unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail under ``CI=true`` (a skipped Kafka suite must not pass CI)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Apache Kafka tests cannot run on CI: {reason}", pytrace=False)
    pytest.skip(reason)


def jars_for(version: str) -> KafkaJars:
    """The jars of Kafka ``version`` (resolved once into the cache) with their class archive;
    skips (or fails under CI=true) when that is impossible. For tests that compare releases."""
    jars = ensure_kafka_jars(version=version)
    if isinstance(jars, str):
        unavailable(jars)
        raise AssertionError("unreachable")  # unavailable() always raises
    return with_class_archive(jars)


@pytest.fixture(scope="session")
def kafka_jars() -> KafkaJars:
    """The broker jars (resolved once into ~/.cache/aiokprod) with their class archive (made
    once, it speeds up every JVM start); skips when impossible."""
    jars = ensure_kafka_jars()
    if isinstance(jars, str):
        unavailable(jars)
        raise AssertionError("unreachable")  # unavailable() always raises
    return with_class_archive(jars)


def _session_cluster(jars: KafkaJars, tmp: pytest.TempPathFactory, name: str,
                     **kwargs: Any) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(jars, work_dir=tmp.mktemp(name), **kwargs)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        alive = [i for i in cluster.node_ids if cluster.pid(i) is not None]
        if alive:
            raise RuntimeError(f"kafka nodes {alive} survived stop(): {cluster!r}")


@pytest.fixture(scope="session")
def _kafka_session(kafka_jars: KafkaJars,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from _session_cluster(kafka_jars, tmp_path_factory, "kafka1")


@pytest.fixture(scope="session")
def _kafka3_session(kafka_jars: KafkaJars,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from _session_cluster(kafka_jars, tmp_path_factory, "kafka3", brokers=3)


@pytest.fixture(scope="session")
def _kafka_secure_session(kafka_jars: KafkaJars,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from _session_cluster(kafka_jars, tmp_path_factory, "kafka-secure",
                                security=SecurityOptions())


def _shared(cluster: KafkaCluster, request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    down = [i for i in cluster.node_ids if cluster.pid(i) is None]
    if down:
        pytest.fail(f"shared Kafka nodes {down} are down: {cluster!r}", pytrace=False)
    yield cluster
    if _failed(request):
        cluster.keep_logs = True
        print(f"--- {cluster!r} log tail ---\n{cluster.log_tail(lines=30)}")
    down = [i for i in cluster.node_ids if cluster.pid(i) is None]
    if down:
        pytest.fail(f"the test stopped shared Kafka nodes {down}; use kafka_factory",
                    pytrace=False)


@pytest.fixture
def kafka(_kafka_session: KafkaCluster, request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """The shared 1-node Apache Kafka cluster; bootstrap with ``kafka.bootstrap``."""
    yield from _shared(_kafka_session, request)


@pytest.fixture
def kafka3(_kafka3_session: KafkaCluster,
           request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """The shared 3-node cluster (RF 3, min.insync.replicas=2); do not stop its nodes."""
    yield from _shared(_kafka3_session, request)


@pytest.fixture
def kafka_secure(_kafka_secure_session: KafkaCluster,
                 request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """The shared 1-node cluster with security listeners: ``port(1, "SASL_SSL")``,
    ``bootstrap_for("SSL")``, ``tls.ca_cert``, ``security.users``, ``security.oauth_subject``."""
    yield from _shared(_kafka_secure_session, request)


@pytest.fixture(scope="module")
def kafka_release(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One node of the release named by the indirect parameter, shared by a module's tests
    until one asks for another release (pytest then stops this one first: one extra JVM at a
    time), and stopped with the module: two modules use it, on different workers, and a node
    kept for the session idled to the end of the run (7-9 minutes and 9-10 s of CPU each in
    a cold run). Its jars are resolved into the same cache as the default release's, once
    per release. A release other than the default one runs in the secure shape (SSL,
    SASL_PLAINTEXT and SASL_SSL listeners besides PLAINTEXT, ``SecurityOptions()``): the
    handshake tests of test_kafka_versions.py use it instead of starting one more node per
    release (~10 s each)."""
    version = str(getattr(request, "param", KAFKA_VERSION))
    if version == KAFKA_VERSION:
        yield request.getfixturevalue("_kafka_session")
        return
    jars = ensure_kafka_jars(version=version)
    if isinstance(jars, str):
        unavailable(jars)
        raise AssertionError("unreachable")  # unavailable() always raises
    yield from _session_cluster(with_class_archive(jars), tmp_path_factory,
                                f"kafka-{version}", security=SecurityOptions())


class KafkaFactory(Protocol):
    def __call__(self, **kwargs: Any) -> KafkaCluster: ...


@pytest.fixture
def kafka_factory(kafka_jars: KafkaJars, tmp_path: Path,
                  request: pytest.FixtureRequest) -> Iterator[KafkaFactory]:
    """Start private clusters (kwargs go to ``KafkaCluster``; ``version="3.9.1"`` starts another
    release); all stopped at teardown."""
    started: list[KafkaCluster] = []

    def start(*, version: str | None = None, **kwargs: Any) -> KafkaCluster:
        kwargs.setdefault("work_dir", tmp_path / f"kafka-{len(started)}")
        jars = kafka_jars if version in (None, kafka_jars.version) else jars_for(str(version))
        cluster = KafkaCluster(jars, **kwargs)
        started.append(cluster)
        return cluster.start()

    yield start
    failed = _failed(request)
    for cluster in started:
        if failed:
            cluster.keep_logs = True
            print(f"--- {cluster!r} log tail ---\n{cluster.log_tail(lines=30)}")
        cluster.stop()


def _topic_name(request: pytest.FixtureRequest) -> str:
    base = _TOPIC_UNSAFE.sub("-", request.node.name)[:80].strip("-.") or "t"
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kafka_topic(kafka: KafkaCluster, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Create a uniquely named topic on the shared 1-node cluster: ``kafka_topic(partitions=3)``."""

    def create(partitions: int = 1, **kwargs: Any) -> str:
        name = _topic_name(request)
        kafka.create_topic(name, partitions, **kwargs)
        return name

    return create


def start_kafka(jars: KafkaJars, **kwargs: Any) -> KafkaCluster:
    """Start a ``KafkaCluster`` (kwargs go to it); the caller stops it."""
    return KafkaCluster(jars, **kwargs).start()


@dataclass
class KafkaBehindProxy:
    """A one-node Kafka that advertises a proxy's port, and that proxy."""

    cluster: KafkaCluster
    proxy: ProxyThread

    @property
    def bootstrap(self) -> str:
        """Where clients connect: the proxy, so their every connection crosses it."""
        return self.proxy.bootstrap

    @property
    def faults(self) -> FaultPlan:
        return self.proxy.faults


@contextmanager
def kafka_behind_proxy(start: Callable[..., KafkaCluster], *, seed: int = 0,
                       **kwargs: Any) -> Iterator[KafkaBehindProxy]:
    """One Kafka node whose PLAINTEXT listener clients reach only through a fault proxy.

    The proxy binds first: its port must be in the node's ``advertised.listeners``, so the
    metadata sends clients back to it. ``start(advertised_ports=..., **kwargs)`` then starts the
    node on free ports (``kafka_factory``, which takes ``version=``; or
    ``functools.partial(start_kafka, jars, work_dir=...)`` for a node a module shares) and the
    proxy is pointed at it. ``seed`` seeds the proxy's random faults. The node is stopped on
    exit (``stop`` is idempotent, so ``kafka_factory`` stopping it again is harmless).
    """
    with ProxyThread(seed=seed) as proxy:
        cluster = start(advertised_ports={1: proxy.port}, **kwargs)
        try:
            proxy.set_upstream("127.0.0.1", cluster.port(1))
            yield KafkaBehindProxy(cluster, proxy)
        finally:
            cluster.stop()
