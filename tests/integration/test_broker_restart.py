"""A broker that loses every producer's state mid-stream (issue 8, item 2).

Tansu with memory storage is killed (SIGKILL) and started again on the same port, twice, while
an idempotent producer streams keyed records. The new process knows no topic and no producer:
it answers the retried batches UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER, refuses the
KIP-360 epoch bump, and its InitProducerId hands out the very same producer id and epoch as
the first process did. The producer must notice that its sequences mean nothing any more,
renumber every unacknowledged batch from 0 and carry on.

Checked, with confluent-kafka as the independent reader of what the restarted broker holds:

* every record is acknowledged or failed with an error (none left pending); all are
  acknowledged, including those on the wire when the broker died, soon after the restart
  (under a second; the bound is 60 s, half of delivery.timeout.ms; before the fix: nothing
  for delivery.timeout.ms, then those batches expired);
* nothing is in the restarted broker's log twice;
* every record acknowledged after the restart is there, exactly once, where its metadata says;
* per key, records keep the order they were sent in.

What the first process had acknowledged is gone with it (memory storage): that is the
broker's loss, not the producer's, and is not checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from aiokprod import Producer, RecordMetadata
from aiokprod.devbroker import DevBrokerError, TansuBroker
from aiokprod.network.metadata import TopicPartition
from support.processes import stop_all_threads
from support.reader import read_back

PARTITIONS = 4  # what Tansu auto-creates, so a Produce that beats create_topic changes nothing
KEYS = 24
RECORDS = 8000
# two restarts: the second proves a producer already recovered once recovers again (each new
# process hands out producer id 1, epoch 0, the pair the producer holds by then)
RESTARTS_AT = (3000, 5500)
RESTART_AT = RESTARTS_AT[-1]
FROZEN_RECORDS = 200  # sent while the broker is frozen, just before it is killed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _kill_and_restart(broker: TansuBroker, topic: str) -> None:
    """SIGKILL the (frozen) broker: nothing flushed, no goodbye to clients; start a fresh
    process on the same port and create the topic again."""
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    broker.stop()  # reaps the killed process
    broker.start()
    # a Produce may auto-create the topic first (same partition count): then it exists
    with contextlib.suppress(DevBrokerError):
        broker.create_topic(topic, PARTITIONS)


async def _acknowledgements_of_the_frozen_broker_taken() -> None:
    """Let the event loop take in what the frozen broker said before it stopped.

    Its answers are in our sockets already (on loopback a write lands in the reader's buffer
    before it returns, and every thread of the broker has stopped). Three turns of the loop
    read them, run the Produce callbacks and then the records' done-callbacks (six leave
    room), so each record the old process acknowledged is stamped before the restart is, and
    each one stamped after it was acknowledged by the new process.
    """
    for _ in range(6):
        await asyncio.sleep(0)


async def _until_on_the_wire(producer: Producer, topic: str, partitions: list[int]) -> None:
    """Wait until each partition has a batch on the wire (sent to the frozen broker, so it
    stays there): what the kill must catch. Milliseconds normally; the bound is for a loaded
    machine, and says so rather than killing the broker with nothing in flight."""
    sender = producer._sender
    assert sender is not None and sender._idem is not None
    idem = sender._idem
    deadline = time.monotonic() + 30
    while not all(idem.partition_state(TopicPartition(topic, p)).on_wire_count > 0
                  for p in partitions):
        assert time.monotonic() < deadline, "no batch of every partition on the wire in 30 s"
        await asyncio.sleep(0.01)


async def _stream(broker: TansuBroker, topic: str, *, one_partition: bool) -> tuple[
        dict[int, RecordMetadata], dict[int, BaseException], dict[int, float], list[float]]:
    acked: dict[int, RecordMetadata] = {}
    failed: dict[int, BaseException] = {}
    acked_at: dict[int, float] = {}
    restarted: list[float] = []

    def record(n: int, future: asyncio.Future[RecordMetadata]) -> None:
        error = future.exception()
        if error is not None:
            failed[n] = error
        else:
            acked[n] = future.result()
            acked_at[n] = time.monotonic()

    async with Producer(bootstrap_servers=broker.bootstrap, linger_ms=2, batch_size=2048,
                        request_timeout_ms=3000, delivery_timeout_ms=120_000,
                        retry_backoff_ms=20, retry_backoff_max_ms=200,
                        reconnect_backoff_ms=20, reconnect_backoff_max_ms=200) as producer:
        futures = []
        for n in range(RECORDS):
            if n in RESTARTS_AT:
                # freeze it first, so batches of every partition are on the wire, holding
                # sequences, when it dies
                assert broker.pid is not None
                # every thread stopped before the next send: one still running could
                # acknowledge a record the test counts as held across the restart
                stop_all_threads(broker.pid)
            if n - FROZEN_RECORDS in RESTARTS_AT:
                await _until_on_the_wire(producer, topic, [0] if one_partition else
                                         list(range(PARTITIONS)))
                await _acknowledgements_of_the_frozen_broker_taken()
                # stamped here, before the new process starts: an acknowledgement can come
                # from it as soon as it serves, before the thread below returns
                restarted.append(time.monotonic())
                await asyncio.to_thread(_kill_and_restart, broker, topic)
            future = await producer.send(topic, str(n).encode(), key=f"key-{n % KEYS}".encode(),
                                         partition=0 if one_partition else None)
            future.add_done_callback(functools.partial(record, n))
            futures.append(future)
            if n % 10 == 9:
                await asyncio.sleep(0.002)  # paced like an application
        await asyncio.wait(futures)
    return acked, failed, acked_at, restarted


@pytest.mark.parametrize("one_partition", [True, False], ids=["one-partition", "keyed"])
async def test_idempotent_producer_survives_a_broker_that_lost_its_producer_state(
    tansu_factory: Callable[..., TansuBroker], one_partition: bool
) -> None:
    """One partition: every batch held at the restart is on the partition that gets the
    first error, so nothing else can trigger a second reset that would hide the bug (before
    the fix, every run stalled until delivery.timeout.ms). Keyed over 4 partitions: several
    partitions lose their state at once and reset together."""
    broker = tansu_factory(port=_free_port())
    topic = "restart"
    broker.create_topic(topic, PARTITIONS)
    acked, failed, acked_at, restarts = await _stream(broker, topic,
                                                      one_partition=one_partition)
    restarted = restarts[-1]  # what the last process holds is what can be read back

    after = {n for n, t in acked_at.items() if t >= restarted}
    recovered = [min((t for t in acked_at.values() if t >= r), default=float("inf")) - r
                 for r in restarts]
    recovered_in = max(recovered)
    log = [(r.partition, r.offset, int(r.value or b"-1"))
           for r in await asyncio.to_thread(read_back, broker.bootstrap, topic,
                                            expected=len(after), timeout=30, settle=1.0)]
    in_log = Counter(n for _p, _o, n in log)
    duplicates = {n: c for n, c in in_log.items() if c > 1}
    missing = sorted(n for n in after if n not in in_log)
    print(f"records={RECORDS} acked={len(acked)} failed={len(failed)} "
          f"acked_after_restart={len(after)} in_log={len(log)} duplicates={len(duplicates)} "
          f"missing={len(missing)} first_ack_after_each_restart="
          f"{', '.join(f'{r:.3f}s' for r in recovered)} "
          f"errors={Counter(type(e).__name__ for e in failed.values())}")

    assert len(acked) + len(failed) == RECORDS, "a record was neither acknowledged nor failed"
    assert len(acked) >= 0.99 * RECORDS, (len(failed), list(failed.items())[:3])
    # in practice every one: the batches on the wire when the broker died are renumbered and
    # written by the new process, as is everything sent after
    assert not failed, (len(failed), list(failed.items())[:3])
    assert set(range(RESTART_AT, RECORDS)) <= after, "held at or sent after the last restart"
    assert not duplicates, f"written twice: {list(duplicates.items())[:10]}"
    assert not missing, f"acknowledged after the restart but not in the log: {missing[:10]}"
    where = {n: (p, o) for p, o, n in log}
    for n in after:
        if acked[n].offset >= 0:
            assert where[n] == (acked[n].partition, acked[n].offset), n
    per_key: dict[int, list[int]] = defaultdict(list)
    for _p, _o, n in sorted(log):
        per_key[n % KEYS].append(n)
    for key, numbers in per_key.items():
        assert numbers == sorted(numbers), f"key-{key} out of order"
    # before the fix: ~120 s (delivery.timeout.ms) of OUT_OF_ORDER_SEQUENCE_NUMBER retries;
    # normally well under a second, the bound leaves room for a loaded machine
    assert recovered_in < 60.0, recovered_in
