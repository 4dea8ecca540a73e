"""The shared local Spark session (a plugin registered by tests/conftest.py).

* ``spark`` — one ``local[2,2]`` SparkSession with the ``aiokprod`` data source registered, for
  the whole session: the JVM start is the expensive part (~6 s), so every Spark test file
  shares it. ``local[N, F]`` lets each task run F times, so a failed task is retried as
  ``spark.task.maxFailures`` does on a cluster (plain ``local[N]`` never retries). The JVM is
  ended by PID at session end. Spark's Python workers are children of the JVM, not of pytest,
  so the leak guard does not see them.

pyspark is imported inside the fixture: the plugin loads in every run, with or without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def require_java() -> None:
    """Spark needs a JVM: skip without one, except under ``CI=true`` where that is a failure."""
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") or (java_home and Path(java_home, "bin", "java").exists()):
        return
    reason = "Spark needs Java 17+ (no `java` on PATH and no JAVA_HOME)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Spark tests cannot run on CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2,2] SparkSession, our data source registered; the JVM ends with the session."""
    require_java()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from aiokprod.spark import KafkaDataSource

    saved = os.environ.get("PYSPARK_PYTHON")
    # Spark's Python workers (data source planning, tasks) must run this venv's interpreter
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        # local[N, F]: each task may run F times, so a failed task is retried as on a cluster
        SparkSession.builder.master("local[2,2]")
        .appName("aiokprod-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(KafkaDataSource)
    gateway = SparkContext._gateway
    assert gateway is not None
    jvm = gateway.proc
    try:
        yield session
    finally:
        try:
            session.stop()
            gateway.shutdown()
        finally:
            if jvm.stdin is not None:
                jvm.stdin.close()  # the gateway JVM exits when its stdin closes
            try:
                jvm.wait(timeout=30)
            except subprocess.TimeoutExpired:
                jvm.kill()
                jvm.wait(timeout=10)
            SparkContext._gateway = None
            SparkContext._jvm = None
            if saved is None:
                os.environ.pop("PYSPARK_PYTHON", None)
            else:
                os.environ["PYSPARK_PYTHON"] = saved
