"""A stateful property test of the REAL Sender over an in-memory network (issue 23).

``test_idempotence_machine.py`` drives the accumulator, idempotence and the sender's outcome
half directly, answer by answer, in any order. This machine drives the whole ``Sender``: it
is built with a ``Cluster`` whose connector is ``support.memory_transport.ScriptedNetwork``
(injected by constructor, nothing patched), and its own drain, request building, response
parsing and connection handling run. Only the broker is simulated (``support.sim_broker``):
the node holds every Produce request until a rule answers it, in order (a connection answers
in order), and answers InitProducerId from the simulated broker at once.

Rules interleave appends, sender turns, answers (written, NOT_LEADER, written but timed out),
a connection the broker hangs up on (after writing the oldest request or not), delivery
timeouts and broker restarts. Checked after every step: the log holds no record twice and
keeps each partition's append order. At the end, with faults gone, every record is
acknowledged or failed, and every record acknowledged since the last restart is in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from aiokprod._backoff import ExponentialBackoff
from aiokprod._error_codes import ErrorCode
from aiokprod.errors import KafkaError
from aiokprod.network.cluster import Cluster
from aiokprod.producer.batch import RecordMetadata
from aiokprod.producer.batching.accumulator import RecordAccumulator
from aiokprod.producer.batching.buffer_pool import BufferPool
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.partition import Partitions
from aiokprod.producer.sending.sender import Sender
from aiokprod.protocol import InitProducerIdResponse, ProduceResponse
from aiokprod.records import read_batches
from support.examples import examples
from support.memory_transport import MemoryTransport, ScriptedNetwork
from support.scripted_broker import ScriptedRequest
from support.sim_broker import PARTITIONS, SimBroker

E = ErrorCode
TOPIC = "t"
NODE = 1
PORT = 9001
DELIVERY_TIMEOUT_MS = 30_000
BATCH_SIZE = 256  # two records per batch at most: many batches, many sequences
ANSWERS = ("ok", "ok", "ok", "not_leader", "timed_out_after_write")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SenderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.broker = SimBroker()
        self.net = ScriptedNetwork()
        self.node = self.net.node(PORT, broker_id=NODE)
        self.net.cluster.add_topic(TOPIC, dict.fromkeys(PARTITIONS, NODE))
        self.node.produce = self._hold
        self.node.init_producer_id = self._init_producer_id
        # Produce requests the broker has read and not answered, oldest first, with the
        # connection each came on and the broker process that read it
        self.held: deque[tuple[ScriptedRequest, MemoryTransport, int]] = deque()
        self.futures: dict[int, asyncio.Future[RecordMetadata]] = {}
        self.next_record = 0
        self.written: set[int] = set()  # records some broker process wrote
        self.acked_at_life: dict[int, int] = {}  # record -> broker life when its future resolved
        self.tasks: list[asyncio.Task[None]] = []
        self.loop.run_until_complete(self._start())

    async def _start(self) -> None:
        def spawn(coro: Any, name: str) -> asyncio.Task[None]:
            task = asyncio.get_running_loop().create_task(coro, name=name)
            self.tasks.append(task)
            return task

        self.cluster = Cluster(f"127.0.0.1:{PORT}", client_id="machine",
                               request_timeout_ms=3_600_000, reconnect_backoff_ms=0,
                               reconnect_backoff_max_ms=0, dial_stagger_ms=0,
                               # metadata retries wait on the loop's real clock, which the
                               # machine never advances: any backoff there would stall a
                               # NOT_LEADER answer's refresh for as long as turns take
                               retry_backoff_ms=0,
                               metadata_max_age_ms=3_600_000,
                               connector=self.net.connect)
        self.cluster.start(spawn)
        partitions = Partitions()
        self.acc = RecordAccumulator(
            pool=BufferPool(1 << 22, BATCH_SIZE, clock=self.clock), batch_size=BATCH_SIZE,
            linger_ms=0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            retry_backoff=lambda attempts: 0.0, clock=self.clock, partitions=partitions)
        self.idem = IdempotenceManager(clock=self.clock, bump_via_init_producer_id=True,
                                       backoff=ExponentialBackoff(0, 0),
                                       partitions=partitions)
        self.sender = Sender(
            cluster=self.cluster, accumulator=self.acc, idempotence=self.idem, acks=-1,
            request_timeout_ms=3_600_000, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            retries=2**31 - 1, max_in_flight=5, max_request_size=1 << 20,
            client_id="machine", clock=self.clock, spawn=spawn)
        self.cluster.add_topic(TOPIC)
        await self.cluster.wait_for_topic(TOPIC, 5000)

    # ---- the simulated broker's side of the network -------------------------------------

    def _hold(self, req: ScriptedRequest) -> None:
        assert self.node.current is not None
        self.held.append((req, self.node.current, self.broker.life))

    def _init_producer_id(self, req: ScriptedRequest) -> InitProducerIdResponse:
        code, pid, epoch = self.broker.init_producer_id(req.body.producer_id,
                                                        req.body.producer_epoch)
        return InitProducerIdResponse(error_code=code, producer_id=pid, producer_epoch=epoch)

    def _write(self, req: ScriptedRequest) -> list[tuple[int, int, int]]:
        """The broker applies a request: (partition, code, base offset) per partition."""
        results = []
        for topic in req.body.topic_data:
            for data in topic.partition_data:
                (batch,) = list(read_batches(bytes(data.records)))
                records = [int(bytes(r.value or b"").split(b".")[0]) for r in batch.records]
                code, offset = self.broker.partitions[data.index].append(
                    batch.producer_id, batch.producer_epoch, batch.base_sequence, records,
                    handed_out=batch.producer_id in self.broker.handed_out)
                if code == E.NONE:
                    self.written.update(records)
                results.append((data.index, code, offset))
        return results

    def _settle(self, turns: int = 100) -> None:
        """Let callbacks, connections and the InitProducerId task run (no timer is due:
        backoffs are 0 and the clock is the machine's)."""
        async def spin() -> None:
            for _ in range(turns):
                await asyncio.sleep(0)

        self.loop.run_until_complete(spin())

    def _sender_turn(self) -> None:
        async def turn() -> None:
            self.sender._run_once(self.clock.now)

        self.loop.run_until_complete(turn())
        self._settle()

    # ---- rules -----------------------------------------------------------------------------

    @rule(p=st.sampled_from(PARTITIONS), n=st.integers(1, 3))
    def append(self, p: int, n: int) -> None:
        for _ in range(n):
            record = self.next_record
            self.next_record += 1
            future = self.acc.try_append(TOPIC, p, 0, None, b"%d." % record + b"." * 90, None)
            assert future is not None, "the pool is large enough for the whole run"
            self.futures[record] = future
            future.add_done_callback(lambda f, r=record: self._resolved(r, f))

    def _resolved(self, record: int, future: asyncio.Future[RecordMetadata]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.acked_at_life[record] = self.broker.life

    @rule()
    def sender_runs(self) -> None:
        self._sender_turn()

    @rule(answer=st.sampled_from(ANSWERS))
    def broker_answers(self, answer: str) -> None:
        # no precondition on what is held: it results from the network's own turns, and
        # hypothesis needs the same draws for the same steps
        if self.held:
            self._answer(answer)

    def _answer(self, answer: str) -> None:
        req, transport, life = self.held.popleft()
        if transport.is_closing() or life != self.broker.life:
            return  # its connection is gone: the sender heard of it
        if answer == "not_leader":
            results = [(d.index, E.NOT_LEADER_OR_FOLLOWER, -1)
                       for t in req.body.topic_data for d in t.partition_data]
        else:
            results = self._write(req)
            if answer == "timed_out_after_write":
                results = [(p, E.REQUEST_TIMED_OUT if c == E.NONE else c, -1)
                           for p, c, _o in results]
        topic_id = self.net.cluster.topics[TOPIC][0]
        response = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
            name=TOPIC, topic_id=topic_id, partition_responses=[
                ProduceResponse.PartitionProduceResponse(index=p, error_code=c, base_offset=o)
                for p, c, o in results])])
        transport.answer(req, response)
        self._settle()

    @rule(write_oldest=st.booleans())
    def broker_hangs_up(self, write_oldest: bool) -> None:
        """The connection ends with requests unanswered; the oldest may have been written."""
        if not self.held:
            return
        req, transport, life = self.held[0]
        if write_oldest and not transport.is_closing() and life == self.broker.life:
            self._write(req)
        transport.server_close()
        self.held = deque(h for h in self.held if h[1] is not transport)
        self._settle()

    @rule(seconds=st.sampled_from([0.1, 5.0, 31.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds
        self._sender_turn()

    @rule()
    def broker_restarts(self) -> None:
        """Killed and started again with memory storage: records, producers and the id
        counter are gone, and so are its connections."""
        self.broker.restart()
        for transport in self.node.open_transports():
            transport.server_close()
        self.held.clear()
        self._settle()

    # ---- invariants and the end -----------------------------------------------------------

    @invariant()
    def log_has_no_duplicates_and_keeps_order(self) -> None:
        for partition in self.broker.partitions.values():
            assert len(partition.log) == len(set(partition.log)), partition.log
            assert partition.log == sorted(partition.log), partition.log

    def teardown(self) -> None:
        try:
            for _ in range(300):
                self._sender_turn()
                if not self.held and all(f.done() for f in self.futures.values()):
                    break
                while self.held:
                    self._answer("ok")
            pending = [r for r, f in self.futures.items() if not f.done()]
            assert not pending, ("stuck", pending[:5], self.idem, self.acc,
                                 [self.idem.partition_state(_TP(TOPIC, p)) for p in PARTITIONS])
            self._settle()  # done callbacks
            for record, future in self.futures.items():
                if future.exception() is None:
                    assert record in self.written, ("acknowledged, never written", record)
                else:
                    assert isinstance(future.exception(), KafkaError), future.exception()
            log = {r for partition in self.broker.partitions.values() for r in partition.log}
            lost = [r for r, life in self.acked_at_life.items()
                    if life == self.broker.life and r not in log]
            assert not lost, f"acknowledged since the last restart but not in the log: {lost}"
            self.log_has_no_duplicates_and_keeps_order()
        finally:
            self._close()

    def _close(self) -> None:
        async def close() -> None:
            for task in self.tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.cluster.close(), 5)
            await asyncio.gather(*self.tasks, return_exceptions=True)

        try:
            self.loop.run_until_complete(close())
        finally:
            self.loop.close()


class _TP:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition


# ~a few seconds by default; AIOKPROD_MACHINE_EXAMPLES=2000 for a long hunt
SenderMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("AIOKPROD_MACHINE_EXAMPLES", examples(100))),
    stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestSenderMachine = SenderMachine.TestCase
