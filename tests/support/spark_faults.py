"""Writing through the sink with faults injected in its own Python worker, and reading back.

Shared by ``test_spark_exactly_once.py`` (``local[2,2]``) and ``test_spark_cluster.py``
(``local-cluster``): the same faults, in one process or across executor JVMs.

The faulty data sources are classes made inside ``faulty_source``, so cloudpickle ships them to
the executors by value: the executors need ``aiokprod`` (and pyspark), not this module.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession

from aiokprod.spark import KafkaArrowWriter, KafkaDataSource
from aiokprod.spark._transactional import batch_identity
from support.reader import read_back

ROWS = 10_000  # two Spark partitions of 5,000, Arrow batches of 1,000


@contextmanager
def arrow_batches_of(spark: SparkSession, rows: int) -> Iterator[None]:
    """Arrow batches of ``rows`` rows, so a task has several and a fault can fall between two."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(rows))
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def frame(spark: SparkSession, rows: int = ROWS, partitions: int = 2) -> DataFrame:
    """``rows`` string values "0", "1", ... in ``partitions`` Spark partitions."""
    return spark.range(0, rows, 1, partitions).selectExpr("cast(id as string) as value")


def save(df: DataFrame, bootstrap: str, topic: str, source: str = "aiokprod",
         transactional: bool = True, **options: str) -> None:
    """``df.write.format(source)`` into ``topic``, transactional unless told otherwise."""
    writer = (df.write.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic).option("transactional", str(transactional).lower())
              .option("kafka.linger.ms", "5"))
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def read_counts(bootstrap: str, topic: str, expected: int, isolation_level: str = "read_committed",
           timeout: float = 120) -> Counter[int]:
    """How often each integer value was read back (confluent-kafka's consumer). Returns as
    soon as ``expected`` records arrived (and a second more): the bound is for a loaded
    machine, where 30 s probably cut a read of 15,000 records short (a CI failure whose
    name was lost; its diff fits that)."""
    records = read_back(bootstrap, topic, expected=expected, timeout=timeout, settle=1.0,
                        isolation_level=isolation_level)
    return Counter(int(r.value) for r in records if r.value is not None)


def assert_read_twice(uncommitted: Counter[int], values: range) -> None:
    """Exactly ``values`` read twice at read_uncommitted (a failed attempt's copy and the kept
    one's), no other value; on failure, says how often the wrong ones were read, which tells
    a short read from a third copy."""
    wrong = {v: uncommitted[v] for v in values if uncommitted[v] != 2}
    wrong.update({v: n for v, n in uncommitted.items() if n == 2 and v not in values})
    assert not wrong, (f"{len(wrong)} rows read other than expected: {len(values)} read twice "
                       f"(value: times read): {dict(sorted(wrong.items())[:5])}; "
                       f"{sum(uncommitted.values())} records read in all")


def faulty_source(fault: str, sync_dir: Path | None = None) -> type[KafkaDataSource]:
    """A data source ``aiokprod-<fault>`` whose partition-0 task fails on its first attempt.

    ``raise`` / ``exit``: after two Arrow batches were handed to the producer and are in the
    log (read uncommitted), raise / ``os._exit(1)`` (the Python worker dies mid-task).
    ``exit-always``: the same exit on every attempt, so the job fails.
    ``exit-after-write``: the task's write (its transaction prepared) returns, then the worker
    exits before Spark hears of the result. ``pause``: after two batches, write the task's
    transactional id to ``sync_dir/paused`` and wait for ``sync_dir/resume``.
    ``pause-commit``: the same pause in the driver's commit(), before anything commits.
    """
    sync = str(sync_dir) if sync_dir is not None else ""

    def _wait_until_in_log(bootstrap: str, topic: str | None, values: set[bytes]) -> None:
        """Until a read_uncommitted consumer has seen every value in ``values`` (bounded: a
        fixed sleep was not always enough on a loaded machine)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "aiokprod-fault-wait",
                             "enable.auto.commit": False,
                             "isolation.level": "read_uncommitted", "log_level": 3})
        try:
            partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            missing = set(values)
            deadline = time.monotonic() + 300
            while missing:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{len(missing)} of the first rows not in the log")
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    missing.discard(message.value())
        finally:
            consumer.close()

    class FaultyWriter(KafkaArrowWriter):
        def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
            context = TaskContext.get()
            assert context is not None
            if context.partitionId() != 0 or (context.attemptNumber() != 0
                                               and fault != "exit-always"):
                return super().write(iterator)
            if fault == "exit-after-write":
                super().write(iterator)
                os._exit(1)
            settings = self.settings

            def faulty() -> Iterator[pa.RecordBatch]:
                handed_over: set[bytes] = set()
                for i, batch in enumerate(iterator):
                    if i == 2:
                        # the first two batches are in the log, uncommitted
                        _wait_until_in_log(dict(settings.producer_config)["bootstrap.servers"],
                                           settings.topic, handed_over)
                        if fault == "raise":
                            raise RuntimeError("injected: the task fails half-way")
                        if fault in ("exit", "exit-always"):
                            os._exit(1)
                        if fault == "pause":
                            txn_id = batch_identity(settings, 0, 0).transactional_id
                            Path(sync, "paused").write_text(txn_id)
                            deadline = time.monotonic() + 300
                            while not Path(sync, "resume").exists() and \
                                    time.monotonic() < deadline:
                                time.sleep(0.05)
                    if i < 2:
                        handed_over.update(v.encode() if isinstance(v, str) else v
                                           for v in batch.column("value").to_pylist())
                    yield batch

            return super().write(faulty())

    class PausesAtCommit(KafkaArrowWriter):
        """``pause-commit``: the driver's commit() writes partition 0's transactional id to
        ``sync_dir/paused`` and waits for ``sync_dir/resume`` before committing."""

        def commit(self, messages: Any) -> None:
            [first] = [m for m in messages if m is not None and m.partition_id == 0]
            Path(sync, "paused").write_text(first.prepared.identity.transactional_id)
            deadline = time.monotonic() + 300
            while not Path(sync, "resume").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            super().commit(messages)

    class FaultySource(KafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return f"aiokprod-{fault}"

        def writer(self, schema: Any, overwrite: bool) -> KafkaArrowWriter:
            settings = super().writer(schema, overwrite).settings
            return PausesAtCommit(settings) if fault == "pause-commit" else \
                FaultyWriter(settings)

    return FaultySource


def write_killing_an_executor(session: SparkSession, bootstrap: str, topic: str,
                              sync_dir: Path, rows: int = 20_000) -> None:
    """An exactly-once write of ``rows`` values in 2 partitions during which the executor JVM
    running partition 0's first attempt is SIGKILLed, when a UDF before the sink has passed
    2,000 of its rows; then every row must be visible once at read_committed.

    The task is lost with its executor (and, without Spark's daemon, its Python workers are
    orphaned and may run on), Spark runs it again on the other executor.
    """
    import signal
    import threading

    from pyspark.sql.functions import udf

    found = sync_dir / "executor-pid"
    seen = [0]

    def hold_in_partition_0(value: str) -> str:
        import os as os_
        import time as clock
        from pathlib import Path as P

        from pyspark import TaskContext as Context
        context = Context.get()
        assert context is not None
        if context.partitionId() == 0 and context.attemptNumber() == 0:
            seen[0] += 1
            if seen[0] == 2_000:
                pid = os_.getpid()
                while pid > 1:  # up to the executor JVM: the nearest `java` ancestor
                    raw = P(f"/proc/{pid}/stat").read_text()
                    close = raw.rfind(")")
                    if raw[raw.find("(") + 1:close] == "java":
                        break
                    pid = int(raw[close + 2:].split()[1])
                P(str(found)).write_text(str(pid))
                deadline = clock.monotonic() + 300
                while clock.monotonic() < deadline:  # until the executor is killed
                    clock.sleep(0.05)
        return value

    killed: list[int] = []

    def kill_the_executor() -> None:
        deadline = time.monotonic() + 300
        while not found.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if found.exists():
            pid = int(found.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    gateway = session.sparkContext._gateway
    assert gateway is not None
    killer = threading.Thread(target=kill_the_executor)
    killer.start()
    try:
        df = frame(session, rows).select(udf(hold_in_partition_0, "string")("value")
                                         .alias("value"))
        save(df, bootstrap, topic)
    finally:
        killer.join(360)
    assert killed and killed[0] != gateway.proc.pid, "no executor was killed"
    counts = read_counts(bootstrap, topic, rows)
    assert set(counts) == set(range(rows)), f"{rows - len(counts)} rows missing"
    assert set(counts.values()) == {1}, "a row is visible twice"
