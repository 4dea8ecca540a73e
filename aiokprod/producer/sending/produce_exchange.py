"""One Produce request of the sender: building it from drained batches and reading its
answer, per partition, into the batches' outcomes.

``ProduceExchange`` is created and owned by the ``Sender`` (sender.py keeps the wake-up loop,
the producer id and the lifecycle), which hands it each node's drained batches. It decides the
request's version and topic naming (KIP-516 ids from v13, the KIP-1269 window from v14), the
connection it goes out on, and what each partition's answer means for its batch
(``outcomes.BatchOutcomes`` applies it). It owns what only Produce requests change: each
node's requests awaiting answers (the sender's loop holds a node back at
``max_in_flight_requests_per_connection``), the connection each node's last request went out
on, and the request and batch counts of ``Sender.statistics()``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import KafkaConnectionError, KafkaError, error_for_code
from aiokprod.network.cluster import Cluster
from aiokprod.network.connection import BrokerConnection
from aiokprod.network.metadata import BrokerNode, TopicPartition
from aiokprod.producer.batch import ProducerBatch
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.sending.outcomes import BatchOutcomes
from aiokprod.protocol import ProduceResponse
from aiokprod.protocol.primitives import Chunk
from aiokprod.protocol.produce_body import FIRST_VERSION_BY_ID, ProduceBody, Topics

if TYPE_CHECKING:
    from aiokprod.producer.transactional.transaction_manager import TransactionManager

__all__ = ["PRODUCE_MAX_VERSION", "ProduceExchange"]

log = logging.getLogger("aiokprod.producer.sending.sender")  # the sender's messages, as before

_NONE = ErrorCode.NONE
_DUPLICATE_SEQUENCE_NUMBER = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
_OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
_NETWORK_EXCEPTION = ErrorCode.NETWORK_EXCEPTION
# Produce v14 (KIP-1269: the broker's de-duplication window in each answer); v13+ names
# topics by id (KIP-516), so a request with a topic whose id is unknown stays at v12.
PRODUCE_MAX_VERSION = 14
_PRODUCE_MAX_VERSION_BY_NAME = FIRST_VERSION_BY_ID - 1


class ProduceExchange:
    """Produce requests out and their answers in, for the sender that owns it."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        outcomes: BatchOutcomes,
        idempotence: IdempotenceManager | None,
        transactions: TransactionManager | None,
        acks: int,
        request_timeout_ms: int,
        client_id: str,
        metrics: Any,
        clock: Callable[[], float],
        wakeup: Callable[[], None],
    ) -> None:
        self._cluster = cluster
        self._outcomes = outcomes
        self._idem = idempotence
        # a transactional producer's requests carry its id and take the version its
        # TransactionManager allows (v11 or v12, KIP-890)
        self._txn = transactions
        self._transactional_id = transactions.transactional_id if transactions else None
        self._produce_max_version = PRODUCE_MAX_VERSION
        self._acks = acks
        self._request_timeout_ms = request_timeout_ms
        self._client = client_id
        self._metrics = metrics
        self._clock = clock
        # the sender's waker: an answer may free room for more requests
        self._wakeup = wakeup
        # node → the connection its last Produce went out on: a new one resets the KIP-1269
        # window of the node's partitions (the broker behind it may have changed)
        self._produce_links: dict[int, BrokerConnection] = {}
        self.in_flight_requests: dict[int, int] = {}  # node → produce requests awaiting answers
        self.requests_sent = 0
        self.batches_sent = 0

    def send(self, node: int, batches: list[ProducerBatch], now: float) -> None:
        """Write one Produce request of ``batches`` (drained for ``node``); its answer is
        handled in the connection's callback."""
        conn = self._cluster.ready_connection(node)
        if conn is None:  # vanished between ready() and now: put them back
            self._outcomes.not_sent(batches, KafkaConnectionError(f"node {node} not connected"),
                                    now)
            return
        if self._produce_links.get(node) is not conn:
            self._on_new_produce_link(node, conn)
        topics: dict[str, list[tuple[int, Chunk | None]]] = {}
        by_tp: dict[tuple[str, int], ProducerBatch] = {}
        for batch in batches:
            owner = batch.owner  # its topic and partition
            topics.setdefault(owner.topic, []).append((owner.partition, batch.sealed))
            by_tp[(owner.topic, owner.partition)] = batch
        self._cluster.touch_topics(topics, now)  # in use: its metadata must not expire
        top = self._txn.produce_max_version if self._txn is not None else \
            self._produce_max_version
        names: dict[uuid.UUID, str] = {}  # topic id → name, to read a v13+ answer
        if top > _PRODUCE_MAX_VERSION_BY_NAME:
            view = self._cluster.view.topics
            for t in topics:
                meta = view.get(t)
                topic_id = meta.topic_id if meta is not None else None
                if not isinstance(topic_id, uuid.UUID) or not topic_id.int:
                    top = _PRODUCE_MAX_VERSION_BY_NAME  # an id we do not know: by name
                    break
                names[topic_id] = t
        try:
            version = conn.version_for(ProduceBody, max_version=top)
            topic_data: Topics
            if version > _PRODUCE_MAX_VERSION_BY_NAME:
                ids = {t: i for i, t in names.items()}
                topic_data = [(ids[t], p) for t, p in topics.items()]
            else:
                names = {}
                topic_data = list(topics.items())
            request = ProduceBody(self._transactional_id, self._acks, self._request_timeout_ms,
                                  topic_data)
            future = conn.send(request, version=version, expect_response=self._acks != 0)
        except KafkaError as exc:  # e.g. no Produce version in common: nothing left the client
            self._outcomes.unsendable(batches, exc)
            return
        self.requests_sent += 1
        self.batches_sent += len(batches)
        self.in_flight_requests[node] = self.in_flight_requests.get(node, 0) + 1
        self._outcomes.sent(node, batches, now)
        future.add_done_callback(lambda f: self._on_produce_done(node, by_tp, names, f, now))

    def _on_new_produce_link(self, node: int, conn: BrokerConnection) -> None:
        """KIP-1269: a (re-)established connection starts every partition it leads at the
        classic window of 5 until that broker's answers say otherwise."""
        first = node not in self._produce_links
        self._produce_links[node] = conn
        idem = self._idem
        if idem is None or first:
            return  # nothing was learned from this node yet
        for topic, meta in self._cluster.view.topics.items():
            for partition, pm in meta.partitions.items():
                if pm.leader == node:
                    idem.on_leader_change(TopicPartition(topic, partition))

    def _on_produce_done(self, node: int, by_tp: dict[tuple[str, int], ProducerBatch],
                         names: dict[uuid.UUID, str],
                         future: asyncio.Future[ProduceResponse | None], sent_at: float
                         ) -> None:
        self.in_flight_requests[node] -= 1
        now = self._clock()
        try:
            if future.cancelled():
                raise KafkaConnectionError(f"produce request to node {node} was cancelled")
            exc = future.exception()
            if exc is not None:
                for batch in by_tp.values():
                    self._outcomes.handle_error(batch, _NETWORK_EXCEPTION, exc, now)
                return
            response = future.result()
            if response is None:  # acks=0: the broker never answers
                for batch in by_tp.values():
                    self._outcomes.complete(batch, -1, -1)
                return
            if self._metrics is not None:
                self._metrics.record_response(
                    node, latency_ms=(now - sent_at) * 1000, size_bytes=0,
                    throttle_ms=response.throttle_time_ms, now=now)
            endpoints = [BrokerNode(e.node_id, e.host, e.port, e.rack)
                         for e in response.node_endpoints]
            for topic in response.responses:
                name = names.get(topic.topic_id, "") if names else topic.name
                for p in topic.partition_responses:
                    found = by_tp.pop((name, p.index), None)
                    if found is None:
                        continue  # the broker answered for something we did not send
                    try:
                        self._handle_partition(node, found, topic, p, endpoints, now)
                    except Exception as exc:  # one bad partition must not strand the others
                        log.exception("[client %s] %s-%d: handling the Produce response failed",
                                      self._client, found.topic, found.partition)
                        self._outcomes.fail(found, KafkaError(
                            f"{found.topic}-{found.partition}: internal error while handling "
                            f"the broker's answer: {exc!r}"))
            for batch in by_tp.values():
                self._outcomes.handle_error(batch, _NETWORK_EXCEPTION, KafkaConnectionError(
                    f"node {node} answered Produce without {batch.topic}-{batch.partition}"), now)
        finally:
            if self._idem is not None:
                self._outcomes.fail_doomed()
            self._wakeup()

    def _handle_partition(self, node: int, batch: ProducerBatch,
                          topic: ProduceResponse.TopicProduceResponse,
                          p: ProduceResponse.PartitionProduceResponse,
                          endpoints: list[BrokerNode], now: float) -> None:
        idem = self._idem
        window = topic.producer_state_batches_to_retain
        if idem is not None and window > 0 and window != batch.owner.in_flight_limit:
            # KIP-1269: the topic's window on this leader (Produce v14+; 5 when absent).
            # Only the current leader's answers count: a late one from a former leader
            # must not raise the window again after a leader change put it back to 5.
            owner = batch.owner
            meta = self._cluster.view.topics.get(owner.topic)
            if meta is not None and meta.leader(owner.partition) == node:
                idem.on_response_batches_to_retain(owner, window)
        code = p.error_code
        if code == _NONE:
            self._outcomes.complete(batch, p.base_offset, p.log_append_time_ms)
            return
        if code == _DUPLICATE_SEQUENCE_NUMBER and idem is not None:
            if idem.duplicate_is_success(batch):
                self._outcomes.complete(batch, -1, p.log_append_time_ms, duplicate=True)
                return
            # never sent ambiguously under these sequences: not our batch the broker holds,
            # but a collision with an older one (see duplicate_is_success); a gap, in effect
            code = _OUT_OF_ORDER_SEQUENCE_NUMBER
        leader = p.current_leader
        if leader.leader_id >= 0:
            self._cluster.apply_leader_hint(TopicPartition(batch.topic, batch.partition),
                                            leader.leader_id, leader.leader_epoch, endpoints)
        cls = error_for_code(code)
        message = p.error_message or cls.message
        self._outcomes.handle_error(
            batch, code, cls(f"{batch.topic}-{batch.partition}: {message}"), now)
