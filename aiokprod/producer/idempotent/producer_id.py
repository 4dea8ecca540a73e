"""InitProducerId: one path for the idempotent and the transactional producer.

Both producers ask for a producer id and epoch the same way (docs/idempotence.md, "Producer id
and epoch"); they differ only in where the request goes (any broker, or the transaction
coordinator, which ``CoordinatorClient`` finds and retries) and in what a failure does to them
(the sender turns the producer fatal; the transaction manager fails its call). What a request
carries, which version it goes at and what each answer means is decided here, once:

* the pair comes from ``IdempotenceManager.init_producer_id_params``: (-1, -1) for a fresh id,
  the current pair for a KIP-360 epoch bump;
* the version is the highest both sides serve and no earlier attempt saw fail; a bump needs v3
  or later (KIP-360), and a broker without one gets a fresh-id request instead;
* an answer is, in this order: success → the manager takes the id; a fatal code → fail (a
  fencing code is fatal only with a transactional id: nothing can fence a producer without
  one, and Tansu answers PRODUCER_FENCED to a bump of an epoch it did not hand out); any other
  refusal of a bump → a fresh id, now and for every later bump; any other non-retriable error
  while a lower version is untried → that version (Tansu fails v0-v2); retriable → again after
  retry.backoff.ms, growing to retry.backoff.max.ms; else fail.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokprod._backoff import ExponentialBackoff
from aiokprod._error_codes import ErrorCode
from aiokprod.errors import BrokerResponseError, KafkaError, error_for_code
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.protocol import InitProducerIdRequest, InitProducerIdResponse

if TYPE_CHECKING:
    from aiokprod.network.cluster import Cluster
    from aiokprod.network.connection import BrokerConnection

__all__ = [
    "FATAL_INIT_CODES",
    "FENCED_CODES",
    "InitOutcome",
    "ProducerIdRequester",
    "init_on_any_broker",
]

log = logging.getLogger(__name__)

_C = ErrorCode
#: Another instance took over (Java: transitionToFatalError) -- with a transactional id.
FENCED_CODES = frozenset({_C.PRODUCER_FENCED, _C.INVALID_PRODUCER_EPOCH,
                          _C.TRANSACTION_COORDINATOR_FENCED})
#: No retry, version or fresh id can help: the producer can do nothing more.
FATAL_INIT_CODES = FENCED_CODES | {
    _C.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, _C.UNSUPPORTED_VERSION,
    _C.CLUSTER_AUTHORIZATION_FAILED, _C.INVALID_TXN_STATE, _C.INVALID_TRANSACTION_TIMEOUT,
    _C.UNSUPPORTED_FOR_MESSAGE_FORMAT}
_KIP360_VERSION = 3  # InitProducerId with the current pair bumps its epoch from v3 on


class InitOutcome(enum.Enum):
    """What the caller does after an answer."""

    DONE = "done"  # the manager holds the new id and epoch
    AGAIN = "again"  # ask again at once: a fresh id instead of a bump, or a lower version
    RETRY = "retry"  # ask again after ``next_delay()``
    FAIL = "fail"  # give up: the error is the caller's to report


class ProducerIdRequester:
    """One producer's InitProducerId attempts until the manager holds an id."""

    def __init__(self, idem: IdempotenceManager, *, transactional_id: str | None,
                 transaction_timeout_ms: int, client_id: str = "") -> None:
        self.idem = idem
        self._transactional_id = transactional_id
        self._timeout_ms = transaction_timeout_ms
        self.client_id = client_id
        self._backoff = idem.backoff or ExponentialBackoff(100, 1000)
        self._failed_versions: set[int] = set()
        self._lowest = InitProducerIdRequest.MIN_VERSION  # the last broker's lowest version
        self._retries = 0
        self.pair = (-1, -1)  # what the request under way asks with

    def take_params(self) -> tuple[int, int]:
        """Right before an attempt: the pair to ask with (the manager records a request)."""
        self.pair = self.idem.init_producer_id_params()
        return self.pair

    def build(self, conn: BrokerConnection) -> tuple[InitProducerIdRequest, int]:
        """The request for ``conn`` and its version. A bump this broker cannot express (no
        v3) becomes a fresh-id request: the one fallback rule, applied before asking."""
        top = conn.version_for(InitProducerIdRequest)
        low = max(InitProducerIdRequest.MIN_VERSION,
                  conn.broker_versions[InitProducerIdRequest.API_KEY][0])
        self._lowest = low
        versions = [v for v in range(top, low - 1, -1) if v not in self._failed_versions]
        if self.pair[0] >= 0:
            versions = [v for v in versions if v >= _KIP360_VERSION]
            if not versions:
                log.info("[client %s] the broker serves no InitProducerId v3+ (KIP-360): "
                         "asking for a new producer id instead of an epoch bump", self.client_id)
                self.idem.on_bump_unsupported()
                self.take_params()
                return self.build(conn)
        if not versions:  # every version failed once: start again from the top
            self._failed_versions.clear()
            versions = [top]
        pid, epoch = self.pair
        return InitProducerIdRequest(
            transactional_id=self._transactional_id, transaction_timeout_ms=self._timeout_ms,
            producer_id=pid, producer_epoch=epoch), versions[0]

    def on_answer(self, code: ErrorCode, response: InitProducerIdResponse | None,
                  version: int) -> InitOutcome:
        """Apply an answer (``code`` NONE comes with ``response``); see the module's rules."""
        if code is ErrorCode.NONE and response is not None:
            self.idem.on_producer_id(response.producer_id, response.producer_epoch)
            log.info("[client %s] producer id %d epoch %d (InitProducerId v%d)", self.client_id,
                     response.producer_id, response.producer_epoch, version)
            self._retries = 0
            return InitOutcome.DONE
        fatal = FATAL_INIT_CODES if self._transactional_id is not None \
            else FATAL_INIT_CODES - FENCED_CODES
        if code in fatal:
            return InitOutcome.FAIL
        retriable = error_for_code(code).retriable
        if self.pair[0] >= 0 and not retriable:
            log.info("[client %s] epoch bump refused (%s); asking for a new producer id",
                     self.client_id, code.name)
            self.idem.on_bump_unsupported()
            return InitOutcome.AGAIN
        if not retriable and version >= 0:
            self._failed_versions.add(version)
            if any(v not in self._failed_versions for v in range(self._lowest, version)):
                log.info("[client %s] InitProducerId v%d failed (%s); trying a lower version",
                         self.client_id, version, code.name)
                return InitOutcome.AGAIN
        return InitOutcome.RETRY if retriable else InitOutcome.FAIL

    def next_delay(self) -> float:
        """Seconds before the next attempt after a retriable failure (retry.backoff.ms,
        growing to retry.backoff.max.ms)."""
        delay = self._backoff.backoff_ms(self._retries) / 1000
        self._retries += 1
        return delay


async def init_on_any_broker(requester: ProducerIdRequester, cluster: Cluster, *,
                             stopped: Callable[[], bool],
                             on_fatal: Callable[[BaseException], None]) -> bool:
    """The idempotent producer's InitProducerId: on any broker, until the manager holds an id
    (True), the producer stops, or an answer is fatal (``on_fatal`` is told; False).

    Bounded: attempts continue only while the manager needs an id, that is while records
    wait; each is bounded by request.timeout.ms, and the records by delivery.timeout.ms.
    """
    idem = requester.idem
    while idem.needs_producer_id() and not stopped():
        try:
            conn = await cluster.any_connection()
            requester.take_params()
            request, version = requester.build(conn)
            response = await conn.request(request, version=version)
            code = ErrorCode.of(response.error_code)
            outcome = requester.on_answer(code, response, version)
            if outcome is InitOutcome.DONE:
                return True
            if outcome is InitOutcome.AGAIN:
                continue
            err = error_for_code(code)
            if outcome is InitOutcome.FAIL:
                exc = err(f"InitProducerId v{version}: {err.message}")
                idem.fail_fatally(exc)
                on_fatal(exc)
                return False
            log.debug("[client %s] InitProducerId v%d: %s", requester.client_id, version,
                      code.name)
        except asyncio.CancelledError:
            raise
        except BrokerResponseError as exc:
            if not exc.retriable:
                idem.fail_fatally(exc)
                on_fatal(exc)
                return False
            log.debug("[client %s] InitProducerId: %s", requester.client_id, exc)
        except KafkaError as exc:
            log.debug("[client %s] InitProducerId: %s", requester.client_id, exc)
        await asyncio.sleep(requester.next_delay())
    return False
