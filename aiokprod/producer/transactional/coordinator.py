"""Requests to a transaction or group coordinator: finding it, and retrying what a
coordinator answers while it moves, loads or is busy (Java's TransactionManager handlers).

``TransactionManager`` says what to send and what an answer means; this module only gets the
request to the right broker and back within a deadline. docs/transactions.md has the rules.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ProtocolError,
    error_for_code,
)
from aiokprod.network.cluster import Cluster
from aiokprod.network.connection import BrokerConnection
from aiokprod.protocol import FindCoordinatorRequest, KafkaRequest

__all__ = ["GROUP_KEY", "TRANSACTION_KEY", "CoordinatorClient", "top_level_code"]

# the transactions' logger
log = logging.getLogger("aiokprod.producer.transactional.transaction_manager")

_R = TypeVar("_R")  # a response type: call returns what its request is answered with


class _WithErrorCode(Protocol):
    @property
    def error_code(self) -> int: ...


_E = TypeVar("_E", bound=_WithErrorCode)


def top_level_code(response: _E) -> list[int]:
    """The error codes of a response that has one, for ``CoordinatorClient.call``."""
    return [response.error_code]


GROUP_KEY = 0
TRANSACTION_KEY = 1

_C = ErrorCode
# retried against a coordinator looked up again
_RELOOKUP = {_C.NOT_COORDINATOR, _C.COORDINATOR_NOT_AVAILABLE, _C.REQUEST_TIMED_OUT,
             _C.NETWORK_EXCEPTION}
# retried against the same coordinator after a backoff
_RETRY = {_C.COORDINATOR_LOAD_IN_PROGRESS, _C.CONCURRENT_TRANSACTIONS,
          _C.UNKNOWN_TOPIC_OR_PARTITION, _C.OPERATION_NOT_ATTEMPTED}
# CONCURRENT_TRANSACTIONS while the previous transaction's markers are written: it clears
# within a few milliseconds on a healthy cluster, so the first retries come after 2, 4, 8, 16
# and then 20 ms (Java waits 20 ms at once), before the usual retry.backoff.ms. Measured on a
# local Kafka: a transaction of one record took ~30 ms with a flat 20 ms, ~10 ms with this.
_CONCURRENT_FIRST_BACKOFF_S = 0.002
_CONCURRENT_BACKOFF_S = 0.02
_CONCURRENT_FAST_RETRIES = 8


class CoordinatorClient:
    """One transactional id's coordinator (cached) and the group coordinators it asks."""

    def __init__(self, *, cluster: Cluster, transactional_id: str, request_timeout_ms: int,
                 retry_backoff_ms: int, client_id: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cluster = cluster
        self.transactional_id = transactional_id
        self._request_timeout_ms = request_timeout_ms
        self._backoff = retry_backoff_ms / 1000
        self._client = client_id
        self._clock = clock
        # node id of the transaction coordinator, None until (re-)looked up
        self.node: int | None = None

    async def find(self, key_type: int, key: str, deadline: float) -> int:
        """FindCoordinator, retried on the coordinator errors until ``deadline``."""
        attempt = 0
        while True:
            try:
                conn = await self._cluster.least_loaded_connection(self.bounded_ms(deadline))
                version = conn.version_for(FindCoordinatorRequest)
                if version >= 4:  # KIP-699: a list of keys replaced the single key
                    request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
                else:
                    request = FindCoordinatorRequest(key=key, key_type=key_type)
                response = await conn.request(request, version=version,
                                              timeout_ms=self.bounded_ms(deadline))
                if version >= 4:
                    found = response.coordinators[0]
                    code, node, message = found.error_code, found.node_id, found.error_message
                else:
                    code, node, message = (response.error_code, response.node_id,
                                           response.error_message)
                if code == ErrorCode.NONE:
                    await self._wait_for_node(node, deadline)
                    return int(node)
                err = error_for_code(code)
                if not err.retriable and ErrorCode.of(code) not in _RELOOKUP | _RETRY:
                    raise err(f"FindCoordinator({key!r}): {message or err.message}")
                log.debug("[client %s] FindCoordinator(%r): %s", self._client, key, err.__name__)
            except (KafkaConnectionError, KafkaTimeoutError, ProtocolError) as exc:
                log.debug("[client %s] FindCoordinator(%r): %s", self._client, key, exc)
            attempt += 1
            await self.sleep_backoff(attempt, deadline, f"FindCoordinator({key!r})")

    async def _wait_for_node(self, node: int, deadline: float) -> None:
        """The coordinator is a broker the metadata may not list yet: wait for it."""
        while node not in self._cluster.view.brokers:
            self._cluster.request_update()
            remaining = self.remaining_ms(deadline)
            if remaining <= 0:
                raise KafkaTimeoutError(f"coordinator node {node} not in the metadata")
            await self._cluster.wait_for_update(min(remaining, 1000.0))

    async def call(self, build: Callable[[BrokerConnection], tuple[KafkaRequest[_R], int]],
                    codes: Callable[[_R], list[int]], deadline: float, what: str, *,
                    group: str | None = None) -> tuple[_R | None, ErrorCode, int]:
        """Send to the transaction (or ``group``'s) coordinator until an answer that is not
        a coordinator hiccup; returns it with its first non-retried error code (or NONE) and
        the version it was sent with.

        ``build`` makes the request and its version for a connection; ``codes`` lists the
        error codes in the response. Raises KafkaTimeoutError at ``deadline``.
        """
        attempt = 0
        concurrent = 0  # CONCURRENT_TRANSACTIONS answers retried on the fast schedule
        node: int | None = self.node if group is None else None
        while True:
            try:
                if node is None:
                    try:
                        node = await self.find(
                            GROUP_KEY if group is not None else TRANSACTION_KEY,
                            group if group is not None else self.transactional_id, deadline)
                    except BrokerResponseError as exc:  # e.g. not authorized: no retry helps
                        return None, ErrorCode.of(exc.code), -1
                    if group is None:
                        self.node = node
                conn = await self._cluster.connection(node, self.bounded_ms(deadline))
                request, version = build(conn)
                response = await conn.request(request, version=version,
                                              timeout_ms=self.bounded_ms(deadline))
                found = [ErrorCode.of(c) for c in codes(response) if c != ErrorCode.NONE]
                worst = next((c for c in found if c not in _RELOOKUP | _RETRY), None)
                if worst is not None:
                    return response, worst, version
                if not found:
                    return response, ErrorCode.NONE, version
                if any(c in _RELOOKUP for c in found):
                    node = None
                    if group is None:
                        self.node = None
                log.debug("[client %s] %s: %s; retrying", self._client, what,
                          ", ".join(c.name for c in found))
                if found[0] is ErrorCode.CONCURRENT_TRANSACTIONS and \
                        concurrent < _CONCURRENT_FAST_RETRIES:
                    delay = min(_CONCURRENT_FIRST_BACKOFF_S * 2 ** concurrent,
                                _CONCURRENT_BACKOFF_S)
                    concurrent += 1
                    await asyncio.sleep(min(delay, max(0.0, deadline - self._clock())))
                    continue
            except (KafkaConnectionError, KafkaTimeoutError, ProtocolError) as exc:
                # the coordinator went away, did not answer (Tansu closes the connection
                # instead of answering a fenced EndTxn) or answered bytes we refuse (the
                # connection is closed then): look it up again, within the deadline
                log.debug("[client %s] %s: %s", self._client, what, exc)
                node = None
                if group is None:
                    self.node = None
            attempt += 1
            await self.sleep_backoff(attempt, deadline, what)

    def remaining_ms(self, deadline: float) -> float:
        return (deadline - self._clock()) * 1000

    def bounded_ms(self, deadline: float) -> int:
        """request.timeout.ms, cut to what is left before ``deadline`` (at least 1 ms)."""
        return max(1, min(self._request_timeout_ms, int(self.remaining_ms(deadline))))

    async def sleep_backoff(self, attempt: int, deadline: float, what: str) -> None:
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise KafkaTimeoutError(f"{what} did not complete in time ({self._bound_name})")
        delay = min(self._backoff * 2 ** min(attempt - 1, 4), 1.0, remaining)
        await asyncio.sleep(delay)
        if self._clock() >= deadline:
            raise KafkaTimeoutError(f"{what} did not complete in time ({self._bound_name})")

    #: names the config value bounding the calls, for timeout messages
    _bound_name = "max.block.ms"
