"""An executor killed mid-write when Spark runs its Python workers without the daemon.

``spark.python.use.daemon=false`` (how Spark always runs Python workers on Windows): each
Python worker is a child of its executor JVM, not of Spark's daemon, so SIGKILLing the executor
leaves the worker orphaned and running, its input ended as if complete. The exactly-once sink
must still show every row once: that attempt's transaction is never committed (Spark never keeps
it) and the driver aborts it. A module of its own because its session has other settings than
``test_spark_cluster.py``'s (one SparkContext per process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from support.kafka_cluster import KafkaCluster
from support.spark_faults import arrow_batches_of, write_killing_an_executor
from support.spark_fixtures import wait_for_executors


@pytest.fixture(scope="module")
def cluster(spark_cluster_without_daemon: SparkSession) -> SparkSession:
    result: SparkSession = wait_for_executors(spark_cluster_without_daemon)
    return result


@pytest.fixture
def small_arrow_batches(cluster: SparkSession) -> Iterator[None]:
    with arrow_batches_of(cluster, 1000):
        yield


def test_an_executor_killed_mid_write_without_the_daemon_loses_and_repeats_nothing(
        cluster: SparkSession, kafka: KafkaCluster, kafka_topic: Callable[..., str],
        small_arrow_batches: None, tmp_path: Path) -> None:
    topic = kafka_topic(partitions=2)
    write_killing_an_executor(cluster, kafka.bootstrap, topic, tmp_path)
