"""The sink across processes: Spark's ``local-cluster[2,1,1024]`` against Apache Kafka.

``local[N]`` runs every task in Python workers of one JVM, next to the driver. On a cluster the
tasks run in executor JVMs of their own, which get the sink only if it is shipped to them and
which may die on their own. ``local-cluster`` (``spark_cluster`` in
``support.spark_fixtures``) is that shape on one machine: a standalone Master and two Workers,
each Worker starting one executor JVM whose Python workers run the tasks. What the executors
run is shipped the ways docs/spark.md ("Shipping the sink to a cluster") tells users to: the
interpreter in a ``spark.archives`` environment (``PYSPARK_PYTHON=./environment/bin/python``)
and the ``aiokprod`` package as a ``--py-files`` zip — so the first test checks that the
executors run *those*, on the pure-Python path, in JVMs other than the driver's; and every
write also checks the driver host's side (its Python workers, which plan the write and commit
it, find the same relative interpreter in the driver's working directory).

Then the cases where separate processes matter, read back with confluent-kafka: a plain
at-least-once write; and in the transactional mode a task that raises half-way, an executor's
Python worker that ``os._exit``s half-way, and one that exits right after its transaction
was prepared (the faults of ``test_spark_exactly_once.py``, from ``support.spark_faults``).
Spark retries a failed task on a cluster up to ``spark.task.maxFailures`` (4) times, possibly
on the other executor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from support.kafka_cluster import KafkaCluster
from support.reader import read_back
from support.spark_faults import (
    ROWS,
    arrow_batches_of,
    assert_read_twice,
    faulty_source,
    frame,
    read_counts,
    save,
    write_killing_an_executor,
)
from support.spark_fixtures import SHIPPED_MARK, SHIPPED_ZIP, wait_for_executors


@pytest.fixture(scope="module")
def cluster(spark_cluster: SparkSession) -> SparkSession:
    """The local-cluster session once both executors have registered."""
    result: SparkSession = wait_for_executors(spark_cluster)
    return result


@pytest.fixture
def small_arrow_batches(cluster: SparkSession) -> Iterator[None]:
    with arrow_batches_of(cluster, 1000):
        yield


def test_executors_run_the_shipped_interpreter_and_package(cluster: SparkSession,
                                                          tmp_path: Path) -> None:
    """Each task runs in a Python worker under an executor JVM that is not the driver's (its
    parent is: local-cluster's Workers live in the driver JVM), started by the ``bin/python``
    of the ``spark.archives`` environment unpacked in the executor's directory, and imports
    ``aiokprod`` from the ``--py-files`` zip, on the pure-Python path; pyspark's worker code
    comes from the bytecode in the test's ``pyspark.zip`` (``compiled_pyspark_zip``: compiled
    at each start, a worker without Spark's daemon could miss its 10 s to connect back)."""

    started = str(tmp_path)  # each task marks its worker here, then waits for the other

    def probe(_: Any) -> list[tuple[str, bool, str, bool, int, int, str, str]]:
        # everything it uses is inside: cloudpickle ships this function by value, but would
        # ship a helper of this module by reference, and the executors cannot import tests
        def stat(pid: int) -> tuple[int, str]:  # (parent pid, command name), from /proc
            raw = Path(f"/proc/{pid}/stat").read_text()
            close = raw.rfind(")")
            return int(raw[close + 2:].split()[1]), raw[raw.find("(") + 1:close]

        import pyspark.worker

        import aiokprod
        import aiokprod._native
        import aiokprod.spark  # what a write task imports

        # both tasks at once, one on each single-core executor: each holds its executor until
        # the other has started too (bounded: on one executor the second could never start)
        Path(started, str(os.getpid())).touch()
        deadline = time.monotonic() + 300
        while len(os.listdir(started)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        started_in = os.environ.get(SHIPPED_MARK, "")
        unpacked = bool(started_in) and Path(started_in, "environment", "bin", "python").exists()
        executor_jvm, _ = stat(os.getppid())  # the worker's parent is the daemon
        driver_jvm, command = stat(executor_jvm)
        return [(aiokprod.__file__, aiokprod._native.NATIVE, started_in, unpacked,
                 executor_jvm, driver_jvm, command, pyspark.worker.__file__ or "")]

    seen = cluster.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()
    gateway = cluster.sparkContext._gateway
    assert gateway is not None
    driver_jvm = gateway.proc.pid
    assert len(seen) == 2
    for module_file, native, started_in, unpacked, executor_jvm, parent, command, worker in seen:
        assert Path(module_file).parts[-3:] == (SHIPPED_ZIP, "aiokprod", "__init__.py")
        assert Path(worker).parts[-3:] == ("pyspark.zip", "pyspark", "worker.pyc"), worker
        assert native is False  # zipimport loads no extension module
        # the executor's own directory (<SPARK_HOME>/work/<app id>/<executor id>)
        assert unpacked and Path(started_in).parent.name.startswith("app-"), started_in
        assert executor_jvm != driver_jvm and parent == driver_jvm and command == "java"
    assert len({row[4] for row in seen}) == 2, seen


def test_an_at_least_once_write_is_read_back(
        cluster: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str]) -> None:
    """The default mode, keyed rows from both executors: every row once, its value intact."""
    topic = kafka_topic(partitions=3)
    rows = 20_000
    df = cluster.range(0, rows, 1, 4).selectExpr(
        "cast(id as string) as key", "cast(rpad(cast(id as string), 100, 'x') as binary) as value")
    save(df, kafka.bootstrap, topic, transactional=False)
    records = read_back(kafka.bootstrap, topic, expected=rows, timeout=60, settle=1.0)
    assert sorted(int(r.key) for r in records) == list(range(rows))
    assert all(r.value == r.key.decode().ljust(100, "x").encode() for r in records)
    assert {r.partition for r in records} == {0, 1, 2}


@pytest.mark.parametrize("fault", ["raise", "exit"])
def test_a_transactional_task_failing_half_way_is_retried_and_its_rows_stay_hidden(
        cluster: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None, fault: str) -> None:
    """Partition 0's first attempt sends 2,000 rows from its executor, then raises or its
    Python worker dies; the retry (maybe on the other executor) fences it and writes all
    5,000: read_committed sees every row once, read_uncommitted the 2,000 twice."""
    topic = kafka_topic(partitions=2)
    cluster.dataSource.register(faulty_source(fault))
    save(frame(cluster), kafka.bootstrap, topic, source=f"aiokprod-{fault}")
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS))
    assert set(counts.values()) == {1}, "a row of the failed attempt is visible"
    uncommitted = read_counts(kafka.bootstrap, topic, ROWS + 2000, "read_uncommitted")
    assert_read_twice(uncommitted, range(2000))


def test_a_transactional_task_that_wrote_and_died_is_hidden_and_its_retry_counts(
        cluster: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None) -> None:
    """Partition 0's Python worker exits after its transaction was prepared, before its
    executor reports the result: Spark never keeps that attempt, so the driver never commits
    it (it aborts it, fencing the attempt's id); the retry's rows are the ones visible."""
    topic = kafka_topic(partitions=2)
    cluster.dataSource.register(faulty_source("exit-after-write"))
    save(frame(cluster), kafka.bootstrap, topic, source="aiokprod-exit-after-write")
    counts = read_counts(kafka.bootstrap, topic, ROWS)
    assert set(counts) == set(range(ROWS)) and set(counts.values()) == {1}
    uncommitted = read_counts(kafka.bootstrap, topic, ROWS + ROWS // 2, "read_uncommitted")
    assert_read_twice(uncommitted, range(ROWS // 2))



def test_an_executor_killed_mid_write_loses_and_repeats_nothing(
        cluster: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None, tmp_path: Path) -> None:
    """The executor JVM running partition 0's first attempt is SIGKILLed from outside
    (``support.spark_faults.write_killing_an_executor``); its Python workers run under
    Spark's daemon here (``test_spark_cluster_no_daemon.py``: without). Last in the module:
    the cluster is one executor short afterwards, until its Worker starts a new one."""
    topic = kafka_topic(partitions=2)
    write_killing_an_executor(cluster, kafka.bootstrap, topic, tmp_path)
