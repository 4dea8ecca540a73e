"""A Spark driver that dies during the sink's commit: run as a script, in a process of its own.

``python -m support.spark_driver_dies BOOTSTRAP TOPIC WRITE_ID ROWS SCRATCH`` (``tests/`` on
``PYTHONPATH``, as for every module of ``support``) writes ``ROWS`` string values in 2 Spark
partitions, each to the Kafka partition of its number, through the exactly-once sink with
``transactional.write.id`` = WRITE_ID; its JVM's scratch files go to SCRATCH.
The driver's commit commits partition 0's transaction, then SIGKILLs the driver's JVM — the
process that holds the SparkContext, found as the commit worker's nearest ``java`` ancestor —
and exits: no ``abort()`` runs, partition 1's transaction stays open. The test that runs this
(``test_spark_exactly_once.py``) then re-runs the write with the same id.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

# written into SCRATCH once partition 0's transaction is committed, just before the driver's JVM
# is killed: the test knows the script got that far (failing on its way exits non-zero too).
# A file, not a line on stdout: Spark relays its Python workers' output through the JVM, which
# this kill may end before the line is passed on.
COMMITTED = "partition-0-committed"


def main(bootstrap: str, topic: str, write_id: str, rows: int, scratch: Path) -> None:
    from pyspark.sql import SparkSession

    from aiokprod.spark import KafkaDataSource
    from support.spark_fixtures import jvm_config

    class DriverDies(KafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return "aiokprod-driver-dies"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            inner = super().writer(schema, overwrite)

            class Writer(type(inner)):  # type: ignore[misc]
                def commit(self, messages: Any) -> None:
                    from aiokprod.spark._transactional import commit_tasks
                    commit_tasks(self.settings, [m.prepared for m in messages
                                                 if m is not None and m.prepared
                                                 and m.partition_id == 0])
                    (scratch / COMMITTED).touch()
                    pid = os.getpid()
                    while pid > 1:  # the driver JVM: the nearest `java` ancestor
                        raw = Path(f"/proc/{pid}/stat").read_text()
                        close = raw.rfind(")")
                        if raw[raw.find("(") + 1:close] == "java":
                            os.kill(pid, signal.SIGKILL)
                            break
                        pid = int(raw[close + 2:].split()[1])
                    os._exit(1)

            return Writer(inner.settings)

    spark = (SparkSession.builder.master("local[2]").appName("aiokprod-driver-dies")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
             .config(map=jvm_config(scratch))
             .getOrCreate())
    spark.dataSource.register(DriverDies)
    # each Spark partition writes its own Kafka partition: partition 1's transaction, left
    # open by the death, then holds back only Kafka partition 1 at read_committed (its last
    # stable offset), not partition 0's committed rows, wherever the two tasks' records fell
    (spark.range(0, rows, 1, 2)
     .selectExpr("cast(id as string) as value", "spark_partition_id() as partition")
     .write.format("aiokprod-driver-dies")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("transactional", "true").option("transactional.write.id", write_id)
     .option("kafka.linger.ms", "5")
     .mode("append").save())
    print("the write returned: the driver did not die", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
