"""Exactly-once read-process-write with the consumers users have, against Apache Kafka.

examples/transactional_copy.py is the loop: a consumer (aiokafka's ``AIOKafkaConsumer`` or
confluent-kafka's ``Consumer``) polls a batch, the producer writes its transformed records
and ``send_offsets_to_transaction(offsets, <the consumer's group membership>)`` in one
transaction. The copier runs as its own process and is killed with SIGKILL in the middle of
the copy, then started again: a read_committed reader of the sink finds every source record
exactly once. The membership the producer was handed is what the group coordinator checks
(KIP-447): a wrong generation or member id is refused, so the commits themselves prove the
consumer's metadata was read right.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from aiokprod import ConsumerGroupMetadata, Producer
from aiokprod.producer.transactional.group_metadata import to_group_metadata
from support.child_env import python_path_first
from support.kafka_cluster import KafkaCluster
from support.processes import threads_stopped
from support.reader import read_back

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "transactional_copy.py"


async def _fill(bootstrap: str, topic: str, count: int) -> list[bytes]:
    values = [f"order {i}".encode() for i in range(count)]
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        await (await producer.send_many(topic, values, [b"k%d" % (i % 11)
                                                         for i in range(count)]))
    return values


# Runs the example with its producer's commit wrapped: the commit after the first N ones flushes
# the transaction's records (on the broker, uncommitted; the offsets were already sent), says
# so, and stops the process (SIGSTOP) before committing. The test used to stop the copier itself
# on reading its "committing" line, and a loaded machine often let it commit first.
_STOPPING_COPIER = """
import os, runpy, signal, sys
from aiokprod import Producer

after = int(os.environ["COPIER_STOP_AFTER_COMMITS"])
commit, commits = Producer.commit_transaction, 0


async def commit_or_stop(self):
    global commits
    if commits == after:
        await self.flush()
        print("stopped in an open transaction", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    commits += 1
    await commit(self)


Producer.commit_transaction = commit_or_stop
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _copier(bootstrap: str, source: str, sink: str, group: str, consumer: str,
            instance: str, idle_s: int = 3,
            stop_after_commits: int | None = None) -> subprocess.Popen[str]:
    env = python_path_first(
        dict(os.environ, COPIER_INSTANCE=instance, COPIER_IDLE_S=str(idle_s)), ROOT)
    run: list[str] = [str(EXAMPLE)]
    if stop_after_commits is not None:
        env["COPIER_STOP_AFTER_COMMITS"] = str(stop_after_commits)
        run = ["-c", _STOPPING_COPIER, str(EXAMPLE)]
    return subprocess.Popen([sys.executable, *run, bootstrap, source, sink, group, consumer],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _stopped_in_an_open_transaction(process: subprocess.Popen[str], bootstrap: str,
                                    sink: str, timeout: float) -> int:
    """Wait until the copier has stopped itself in a transaction (``_STOPPING_COPIER``); check
    that a read_uncommitted reader sees more than was committed and a read_committed one no
    more. Returns the records committed."""
    assert process.stdout is not None
    # read from the pipe itself: a buffered readline() may hold the next lines while select()
    # sees the pipe empty
    fd = process.stdout.fileno()
    lines: list[str] = []
    pending = b""
    deadline = time.monotonic() + timeout
    while "stopped in an open transaction" not in lines:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the copier did not stop in a transaction: {lines[-5:]}"
        if not select.select([fd], [], [], remaining)[0]:
            continue
        chunk = os.read(fd, 65536)
        assert chunk, f"the copier exited (rc={process.wait()}): {lines[-10:]}"
        *complete, pending = (pending + chunk).split(b"\n")
        lines.extend(line.decode(errors="replace").rstrip() for line in complete)
    while not threads_stopped(process.pid):  # stopped: nothing more is sent or committed
        assert time.monotonic() < deadline, "the copier said it stopped, and did not"
        time.sleep(0.01)
    done = [x for x in lines if x.startswith("committed ")]
    committed = int(done[-1].split("(")[1].split()[0])
    uncommitted = read_back(bootstrap, sink, expected=committed + 1, timeout=60,
                            isolation_level="read_uncommitted")
    assert len(uncommitted) > committed, (len(uncommitted), committed)
    visible = read_back(bootstrap, sink, expected=committed, timeout=60, settle=1.0,
                        isolation_level="read_committed")
    assert len(visible) == committed, (len(visible), committed)
    return committed


@pytest.mark.parametrize("consumer", ["aiokafka", "confluent"])
def test_a_copier_killed_mid_way_and_restarted_copies_every_record_once(
    consumer: str, kafka: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    if consumer == "aiokafka":
        pytest.importorskip("aiokafka")
    source, sink = kafka_topic(partitions=3), kafka_topic(partitions=3)
    n = 4000
    values = asyncio.run(_fill(kafka.bootstrap, source, n))
    group = f"copier-{uuid.uuid4().hex[:8]}"
    instance = f"{group}-1"

    # it stops itself in its fourth transaction and is killed there: its idle exit would count
    # the stop as idleness
    first = _copier(kafka.bootstrap, source, sink, group, consumer, instance, idle_s=300,
                    stop_after_commits=3)
    try:
        committed = _stopped_in_an_open_transaction(first, kafka.bootstrap, sink, timeout=120)
    finally:
        first.send_signal(signal.SIGKILL)  # mid-way, in a transaction
        first.wait(10)
        assert first.stdout is not None
        first.stdout.close()

    second = _copier(kafka.bootstrap, source, sink, group, consumer, instance)
    try:
        out, _ = second.communicate(timeout=120)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(10)
    assert second.returncode == 0, out[-3000:]
    resumed = [line for line in out.splitlines() if line.startswith("committed ")]
    assert resumed, out[-3000:]
    copied_again = int(resumed[-1].split("(")[1].split()[0])
    assert 0 < copied_again < n, out[-2000:]  # it resumed at the committed offsets

    records = read_back(kafka.bootstrap, sink, expected=n, timeout=60, settle=1.0,
                        isolation_level="read_committed")
    got = sorted(r.value for r in records)
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} records written twice"
    assert got == sorted(v.upper() for v in values)
    assert committed + copied_again == n  # the killed transaction's batch was copied again
    written = read_back(kafka.bootstrap, sink, expected=n + 1, timeout=60,
                        isolation_level="read_uncommitted")
    assert len(written) > n  # the killed transaction's records are there, aborted


def test_confluent_metadata_of_a_joined_consumer_is_what_the_group_checks(
    kafka: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    source, sink = kafka_topic(), kafka_topic()
    asyncio.run(_fill(kafka.bootstrap, source, 3))
    group = f"members-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": 3})
    try:
        consumer.subscribe([source])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        blob = consumer.consumer_group_metadata()
        meta = to_group_metadata(blob)
        assert meta.group_id == group
        assert meta.generation_id >= 1
        assert meta.member_id == consumer.memberid()

        async def commit(group_arg: object) -> None:
            async with Producer(bootstrap_servers=kafka.bootstrap,
                                transactional_id=f"{group}-txn") as producer, \
                    producer.transaction():
                await producer.send(sink, b"v")
                await producer.send_offsets_to_transaction({(source, 0): 3}, group_arg)

        # a member id the group does not know is refused: the check is real
        with pytest.raises(Exception, match="UNKNOWN_MEMBER_ID|[Uu]nknown.?[Mm]ember"):
            asyncio.run(commit(meta._replace(member_id="not-a-member")))
        asyncio.run(commit(blob))
        committed = consumer.committed(consumer.assignment(), timeout=10)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 3)]
    finally:
        consumer.close()
    assert isinstance(meta, ConsumerGroupMetadata)
